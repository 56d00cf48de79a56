"""The pilot: measure a sampler's time per trial, then plan the battery's trials.

The plan (:mod:`specdec.conformance.plan`) is arithmetic on the exact laws of the cases
and, for a time budget, on the seconds per trial of each case; this module measures those
seconds by running each case briefly (:func:`specdec.conformance.checks.run_case`) and
hands them to :func:`specdec.conformance.plan.plan_trials`.
"""

from __future__ import annotations

import time

from specdec.conformance import plan
from specdec.conformance.checks import run_case
from specdec.conformance.conventions import SamplerSpec

__all__ = ["seconds_per_trial", "plan_battery"]


def seconds_per_trial(sampler, spec: SamplerSpec, case, seed: int, n: int) -> float:
    """Seconds per trial of one case (kit included), from a short run.

    Starts at ``min(n, 10)`` trials and grows tenfold until a run takes 0.2 s or reaches
    ``n`` trials, so a slow sampler costs a fraction of a second to measure.

    Returns
    -------
    float
    """
    k = min(n, 10)
    while True:
        t0 = time.perf_counter()
        run_case(sampler, case, spec=spec, seed=seed, trials=k)
        seconds = time.perf_counter() - t0
        if seconds >= 0.2 or k >= n:
            return seconds / k
        k = min(n, k * 10)


def plan_battery(spec: SamplerSpec, sampler, case_list, *, resolution: float | None = None,
                 budget: float | None = None, false_alarm: float = 1e-3, power: float = 0.9,
                 min_expected: float = 10.0, seed: int = 0, pilot: bool | None = None) -> plan.Plan:
    """Trials per case for a resolution, or the best resolution a time budget buys.

    Parameters
    ----------
    spec : SamplerSpec
    sampler : callable
    case_list : sequence of TokenCase or BlockCase
    resolution : float, optional
        Detectable TV wanted on every case; default :data:`plan.DEFAULT_RESOLUTION`.
    budget : float, optional
        Seconds for the whole battery; then the trials are allocated so that every case
        reaches the same detectable TV, the smallest the budget allows (from a pilot).
    false_alarm, power, min_expected : float
        As for :func:`specdec.conformance.run_battery`.
    seed : int
        Seed of the pilot runs.
    pilot : bool, optional
        Measure the time per trial (default: only when ``budget`` is given).

    Returns
    -------
    specdec.conformance.plan.Plan

    Raises
    ------
    ValueError
        ``resolution`` outside (0, 1) or ``budget <= 0``.
    """
    if budget is not None and not (budget > 0):
        raise ValueError(f"budget: must be a number of seconds > 0 (got {budget!r})")
    do_pilot = budget is not None if pilot is None else pilot
    cost = None
    if do_pilot:
        n = plan.pilot_trials(spec)
        cost = tuple(seconds_per_trial(sampler, spec, c, seed, n) for c in case_list)
    return plan.plan_trials(spec, case_list, cost=cost, resolution=resolution, budget=budget,
                            false_alarm=false_alarm, power=power, min_expected=min_expected)
