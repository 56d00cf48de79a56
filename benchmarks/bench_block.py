"""Speed of the block-level engines (specdec.simulate.cycle), on one core.

Prints, from a single run:

* the vectorised cycle engine (:func:`specdec.simulate.cycle.simulate_cycles`): independent cycles
  per second from one prefix, for several draft lengths gamma, and the emitted tokens
  per second this represents;
* the vectorised generation engine (:func:`specdec.simulate.cycle.simulate_generation`): cycles
  and tokens per second when many sequences advance in parallel;
* the scalar reference cycle (:func:`specdec.simulate.cycle.speculative_cycle`), for the ratio;
* the time of the exact enumeration (:func:`specdec.rules.cycle.block_sequence_law`) for each
  variant at the largest size used in the book (length 6, gamma 4).

Models: the default toy pair (V = 4 with EOS) for cycles and enumeration, the same pair
without EOS for generation (so every sequence runs to its length). Run with
``.venv/bin/python benchmarks/bench_block.py`` (the script pins itself to one CPU and one
BLAS/OpenMP thread). Timings are best-of-``REPEATS`` wall-clock seconds.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import sys  # noqa: E402

import numpy as np  # noqa: E402

from specdec.simulate import cycle as block
from specdec import models
from specdec.rules import cycle as stateful
from _common import best_time, pin_to_one_core  # noqa: E402

REPEATS = 3
N_CYCLES = 250_000  # cycles per call of the vectorised engine
N_SEQUENCES = 20_000
LENGTH = 32
N_SCALAR = 5_000




def main() -> int:
    print(f"specdec block benchmark: numpy {np.__version__}, Python {sys.version.split()[0]}, "
          f"{pin_to_one_core()}")
    p, q = models.toy_pair()
    pn, qn = models.toy_pair(eos=None)
    rng = np.random.default_rng(2026)

    print(f"\n{'engine':42s} {'gamma':>5s} {'cycles/s':>12s} {'tokens/s':>12s}")
    rates = {}
    for gamma in (1, 2, 4, 8):
        t, b = best_time(lambda: block.simulate_cycles(p, q, (), gamma, N_CYCLES, rng), REPEATS)
        rates[gamma] = N_CYCLES / t
        print(f"{'simulate_cycles (vectorised)':42s} {gamma:5d} {N_CYCLES / t:12,.0f} "
              f"{b.n_emitted.sum() / t:12,.0f}")
    for gamma in (2, 4):
        t, g = best_time(lambda: block.simulate_generation(pn, qn, (), gamma, LENGTH, N_SEQUENCES, rng), REPEATS)
        print(f"{'simulate_generation (vectorised, L=32)':42s} {gamma:5d} {g.n_emitted.size / t:12,.0f} "
              f"{g.n_tokens.sum() / t:12,.0f}")
    scalar = {}
    for gamma in (1, 4):
        t, _ = best_time(lambda: [block.speculative_cycle(p, q, (), gamma, rng) for _ in range(N_SCALAR)],
                         repeats=1)
        scalar[gamma] = N_SCALAR / t
        print(f"{'speculative_cycle (scalar reference)':42s} {gamma:5d} {N_SCALAR / t:12,.0f} {'':>12s}")
    for gamma in (1, 4):
        print(f"ratio vectorised / scalar at gamma {gamma}: {rates[gamma] / scalar[gamma]:8.0f}")

    print(f"\n{'exact enumeration, L = 6, gamma = 4':42s} {'seconds':>12s} {'sequences':>12s}")
    for variant in stateful.CYCLE_RULES:
        t, law = best_time(lambda: stateful.block_sequence_law(p, q, (), 4, 6, variant), repeats=1)
        print(f"{variant.name:42s} {t:12.2f} {len(law):12d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
