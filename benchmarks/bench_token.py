"""Speed of the token-level Monte Carlo engines, on one core.

Prints, from a single run:

* the vectorised engine (:func:`specdec.simulate.simulate_step`) on the article's
  example with rules ("correct", "fallback_p"), in trials per second;
* the rate at which numpy's Generator alone produces the float32 uniforms that engine
  consumes (same chunking), i.e. the ceiling set by random-number generation;
* the pure-Python reference protocol (:func:`specdec.simulate.article_reference_run`);
* the scalar sampler :func:`specdec.step.sample_step` (one kernel call on one row per
  step: the path of the kit's scalar samplers and of appendix A2), in steps per second;
* the ratios between them, and the engine with all rules at once;
* the tracemalloc peak of the engine for two trial counts (memory must stay flat).

Run with ``.venv/bin/python benchmarks/bench_token.py`` (the script pins itself to one
CPU and one BLAS/OpenMP thread). Timings are best-of-``REPEATS`` wall-clock seconds.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import sys  # noqa: E402
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402

from specdec.simulate import article_reference_run, simulate_step  # noqa: E402
from _common import best_time, pin_to_one_core  # noqa: E402
from specdec.rules.token import FALLBACK_P, STEP_RULES, TOKEN  # noqa: E402
from specdec.step import ARTICLE_P, ARTICLE_Q, rejection_probability, sample_step  # noqa: E402

TRIALS = 200_000_000  # engine trials per repeat
PY_TRIALS = 200_000  # the article's run
SCALAR_STEPS = 20_000  # token.sample_step calls
CHUNK = 2**20
REPEATS = 3
RULES_MAIN = (TOKEN, FALLBACK_P)




def engine_seconds(trials: int, rules=RULES_MAIN) -> float:
    rng = np.random.default_rng(20260923)
    return best_time(lambda: simulate_step(ARTICLE_P, ARTICLE_Q, trials, rng, rules, chunk=CHUNK), REPEATS)[0]


def uniforms_seconds(count: int) -> float:
    """Time numpy's Generator needs for ``count`` float32 uniforms, chunked like the engine."""
    rng = np.random.default_rng(1)
    buf = np.empty(CHUNK, dtype=np.float32)

    def run():
        left = count
        while left > 0:
            n = min(left, CHUNK)
            rng.random(dtype=np.float32, out=buf[:n])
            left -= n

    return best_time(run, REPEATS)[0]


def python_seconds() -> float:
    return best_time(lambda: article_reference_run(PY_TRIALS), repeats=1)[0]


def scalar_seconds() -> float:
    """Time of ``SCALAR_STEPS`` calls of the scalar sampler (validation, draw, kernel on one row)."""
    rng = np.random.default_rng(3)
    p, q = np.array(ARTICLE_P), np.array(ARTICLE_Q)
    return best_time(lambda: [sample_step(p, q, rng) for _ in range(SCALAR_STEPS)], REPEATS)[0]


def peak_bytes(trials: int) -> int:
    rng = np.random.default_rng(0)
    tracemalloc.start()
    tracemalloc.reset_peak()
    simulate_step(ARTICLE_P, ARTICLE_Q, trials, rng, RULES_MAIN, chunk=CHUNK)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def main() -> int:
    print(f"specdec token benchmark: numpy {np.__version__}, Python {sys.version.split()[0]}, "
          f"{pin_to_one_core()}")
    z = rejection_probability(ARTICLE_P, ARTICLE_Q)
    # one uniform per trial, plus one per rejection for the fallback recovery (the correct
    # rule's residual has a single support point here and needs none)
    consumed = int(TRIALS * (1 + z))

    t_engine = engine_seconds(TRIALS)
    t_uniforms = uniforms_seconds(consumed)
    t_python = python_seconds()
    t_scalar = scalar_seconds()
    t_all = engine_seconds(TRIALS // 4, STEP_RULES)

    r_engine = TRIALS / t_engine
    r_uniform = TRIALS / t_uniforms  # trials per second if generating uniforms were all
    r_python = PY_TRIALS / t_python
    r_all = (TRIALS // 4) / t_all

    print(f"{'engine, rules correct+fallback_p':44s} {r_engine / 1e6:10.1f} M trials/s")
    print(f"{'numpy Generator alone (same uniforms)':44s} {r_uniform / 1e6:10.1f} M trials/s "
          f"({consumed / t_uniforms / 1e6:.0f} M float32 uniforms/s)")
    print(f"{'pure-Python reference protocol':44s} {r_python / 1e6:10.3f} M trials/s")
    print(f"{'token.sample_step (scalar, one row per call)':44s} {SCALAR_STEPS / t_scalar / 1e3:10.1f} k steps/s")
    print(f"{'engine, all ' + str(len(STEP_RULES)) + ' rules at once':44s} {r_all / 1e6:10.1f} M trials/s")
    print(f"ratio engine / uniforms alone   = {r_engine / r_uniform:8.2f}")
    print(f"ratio engine / pure Python      = {r_engine / r_python:8.0f}")
    target = 60e6
    print(f"target >= {target / 1e6:.0f} M trials/s on one core: {'met' if r_engine >= target else 'NOT met'}")

    small, large = 10 * CHUNK, 40 * CHUNK
    p_small, p_large = peak_bytes(small), peak_bytes(large)
    flat = p_large <= 1.25 * p_small + 65536
    print(f"tracemalloc peak: {small:,} trials {p_small / 2**20:.2f} MiB, "
          f"{large:,} trials {p_large / 2**20:.2f} MiB -> memory {'flat' if flat else 'GROWS'}")
    return 0 if flat else 1


if __name__ == "__main__":
    raise SystemExit(main())
