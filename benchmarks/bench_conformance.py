"""Speed and calibration of the conformance kit (specdec.conformance), on one core.

Prints, from a single run:

* the wall time of the whole standard battery and its throughput (sampler trials per
  second, all cases together) for a vectorised token sampler, the library's
  vectorised engine, the library's scalar step, the library's vectorised block engine
  and its one-cycle sampler;
* the per-case throughput of the vectorised token sampler (the large vocabulary case
  is the slowest: every draw searches a 4096-entry CDF);
* the default battery of the vectorised sampler (trials planned for a detectable TV of
  0.001, bins growing with the trials): wall time, time inside the sampler, kit time;
* the false-alarm rate of the battery re-measured on correct samplers over ``--seeds``
  seeds (default 100) at a family-wise level of 0.05: the vectorised sampler, the
  arg-max-draft sampler whose proposals are not drawn from q (detected, not failed),
  and the library's vectorised block engine (an accepted end-of-sequence counted); and
  the fraction of individual p-values below 0.05 and 0.01 (both should match their level).

Run with ``.venv/bin/python benchmarks/bench_conformance.py [--seeds N]`` (the script pins
itself to one CPU and one BLAS/OpenMP thread). Timings are best-of-``REPEATS`` wall-clock
seconds.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from scipy import stats as sps  # noqa: E402

from specdec.simulate import cycle as block
from specdec import conformance, step as token
from specdec.conformance import gallery
from _common import best_time, pin_to_one_core  # noqa: E402

REPEATS = 3



def best_report(sampler, repeats: int = REPEATS, **kwargs):
    return best_time(lambda: conformance.run_battery(sampler, **kwargs), repeats)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=100, help="seeds of the false-alarm sweep")
    ap.add_argument("--sweep-trials", type=int, default=20_000)
    args = ap.parse_args(argv)
    print(f"conformance kit benchmark ({pin_to_one_core()}), best of {REPEATS}")

    print("\nwhole battery (seed 0, default cases)")
    print(f"{'sampler':<44} {'cases':>5} {'trials/case':>11} {'seconds':>8} {'trials/s':>12}  verdict")
    runs = [
        ("gallery.vectorised_correct (token, vec.)", gallery.vectorised_correct, 200_000),
        ("gallery.library_vectorised (token, vec.)", gallery.library_vectorised, 200_000),
        ("token.sample_step (token, scalar)", token.sample_step, 2_000),
        ("gallery.library_generation (block, vec.)", gallery.library_generation, 100_000),
        ("block.speculative_cycle (block, scalar)", block.speculative_cycle, 1_000),
    ]
    for name, sampler, trials in runs:
        repeats = REPEATS if trials >= 100_000 else 1
        sec, rep = best_report(sampler, repeats=repeats, seed=0, trials=trials)
        n = rep.cases[0].trials
        total = n * len(rep.cases)
        print(f"{name:<44} {len(rep.cases):>5} {n:>11,} {sec:>8.2f} {total / sec:>12,.0f}  {rep.verdict}")

    print("\nper case, gallery.vectorised_correct, 200,000 trials")
    _, rep = best_report(gallery.vectorised_correct, seed=0, trials=200_000)
    for c in rep.cases:
        print(f"  {c.name:<16} {c.seconds:6.3f} s  {c.trials / c.seconds:>12,.0f} trials/s")

    print("\ndefault battery, gallery.vectorised_correct (resolution 0.001, seed 0)")
    rep = conformance.run_battery(gallery.vectorised_correct, seed=0)
    print(f"  {sum(c.trials for c in rep.cases):,} trials, wall {rep.seconds:.1f} s, in the sampler "
          f"{rep.sampler_seconds:.1f} s, in the kit {rep.seconds - rep.sampler_seconds:.1f} s; "
          f"largest detectable TV {rep.max_detectable_tv:.5f}; {rep.verdict}")

    sweeps = [("gallery.vectorised_correct (token, vec.)", gallery.vectorised_correct,
               args.sweep_trials),
              ("gallery.argmax_draft (token, vec., own proposals)", gallery.argmax_draft,
               args.sweep_trials),
              ("gallery.library_generation (block, vec.)", gallery.library_generation,
               args.sweep_trials)]
    lo, hi = sps.binom.interval(0.99, args.seeds, 0.05)
    print(f"\nfalse alarms on correct samplers: {args.seeds} seeds each, "
          f"{args.sweep_trials:,} trials per case, family-wise level 0.05 (Holm); "
          f"99% range of failures under exactly 0.05: {int(lo)}..{int(hi)}")
    for name, sampler, n in sweeps:
        t0 = time.perf_counter()
        fails, pvals = 0, []
        for seed in range(args.seeds):
            r = conformance.run_battery(sampler, seed=seed, trials=n, false_alarm=0.05)
            fails += not r.passed
            pvals += [k.pvalue for c in r.cases for k in c.checks if k.dof > 0]
        pvals = np.array(pvals)
        print(f"  {name}: batteries failed {fails} / {args.seeds} = {fails / args.seeds:.3f}; "
              f"{pvals.size} checks, fraction with p < 0.05: {(pvals < 0.05).mean():.4f}, "
              f"p < 0.01: {(pvals < 0.01).mean():.4f}; KS uniformity p = "
              f"{sps.kstest(pvals, 'uniform').pvalue:.3f}; {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
