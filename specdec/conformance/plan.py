"""How many trials: resolution targets, time budgets, and the pilot that measures speed.

The kit's resolution is the **detectable TV** of a case: the smallest total-variation
distance from the target law (on the case's bins) that its chi-square check catches with
probability ``power`` at its Bonferroni level, whatever the direction of the deviation
(:func:`specdec.stats.gof.detectable_tv`). It shrinks like ``1 / sqrt(trials)``, and more
slowly than that as the number of bins grows with the trials (Mann and Wald's rule,
:func:`specdec.stats.gof.bins_for_trials`), because finer bins resolve more of the outcomes.

This module turns a requested resolution into trials per case (:func:`trials_for_tv`),
or a time budget into the resolution it can buy (:func:`plan_battery` with
``budget=``, from a short pilot run that measures the seconds per trial of each case).
Defaults (:data:`DEFAULT_RESOLUTION`): a detectable TV of 0.001 for vectorised token
samplers and 0.01 for samplers called once per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specdec.stats import gof as kitstats

from specdec.conformance.cases import BatchCase, BlockCase, TokenCase
from specdec.conformance.conventions import BATCH, BLOCK, SamplerSpec

__all__ = ["DEFAULT_RESOLUTION", "MAX_TRIALS", "Plan", "convention_key", "case_laws",
           "trials_for_tv", "plan_battery"]

#: Default detectable TV per calling convention.
DEFAULT_RESOLUTION = {"scalar": 0.01, "vectorised": 0.001, "block": 0.02,
                      "block_vectorised": 0.005, "batch": 0.005}

#: Trials per case are capped (memory is not the limit: counts are accumulated per chunk).
MAX_TRIALS = {"scalar": 2_000_000, "vectorised": 400_000_000, "block": 1_000_000,
              "block_vectorised": 100_000_000, "batch": 20_000_000}

MIN_TRIALS = 200


def convention_key(spec: SamplerSpec) -> str:
    """``"scalar"``, ``"vectorised"``, ``"block"``, ``"block_vectorised"`` or ``"batch"``."""
    if spec.kind == BATCH:
        return "batch"
    base = "block" if spec.kind == BLOCK else ""
    if spec.vectorised:
        return f"{base}_vectorised" if base else "vectorised"
    return base or "scalar"


def case_laws(case) -> list[np.ndarray]:
    """Exact laws of the checks a case may run (law, and accounting when reported)."""
    if isinstance(case, TokenCase):
        m = np.minimum(case.p, case.q)
        return [case.p, np.concatenate([m, case.p - m])]
    if isinstance(case, BlockCase):
        from specdec import models
        from specdec.rules import cycle as stateful

        seq = models.sequence_law(case.target, tuple(case.prefix), case.length)
        law = np.array(list(seq.values()))
        return [law / law.sum(), stateful.cycle_accepted_law(case.target, case.draft,
                                                             tuple(case.prefix), case.gamma)]
    if isinstance(case, BatchCase):   # the summed test: every (request, position) cell
        cells = np.concatenate([law.ravel() for law in case.target_laws()])
        return [cells / cells.sum()]
    raise TypeError(f"case: expected a TokenCase, BlockCase or BatchCase (got {type(case).__name__})")


def _dof(law: np.ndarray, trials: int, min_expected: float) -> int:
    """Degrees of freedom of :func:`specdec.stats.gof.pool_cells` at ``trials``, counted fast.

    Cells reaching the floor are bins of their own; the tail's greedy groups are counted
    as ``floor(tail expectation / floor)`` (each group holds at least the floor and, its
    cells being below the floor, less than twice it; planning needs no more precision).
    """
    floor = max(min_expected, trials / kitstats.bins_for_trials(trials))
    expected = trials * np.asarray(law)[np.asarray(law) > 0]
    big = int((expected >= floor).sum())
    groups = int(expected[expected < floor].sum() // floor)
    dof = max(big + groups, 1) - 1
    if dof > 20:       # rounded up to a 5% grid: cached noncentralities, a conservative plan
        dof = int(math.ceil(1.05 ** math.ceil(math.log(dof, 1.05))))
    return dof


def detectable(laws_, trials: int, level: float, power: float, min_expected: float = 10.0) -> float:
    """Largest detectable TV over the checks of a case at ``trials`` trials."""
    return max(kitstats.detectable_tv(trials, _dof(lw, trials, min_expected), level, power)
               for lw in laws_)


def trials_for_tv(laws_, tv: float, level: float, power: float, *, min_expected: float = 10.0,
                  max_trials: int = 10**9) -> int:
    """Fewest trials (approximately) at which every check of a case detects ``tv``.

    Solves ``detectable_tv(n, dof(n), level, power) <= tv`` for each law, where the
    degrees of freedom grow with ``n`` through the binning rule (a short fixed-point
    iteration from the answer for 2 degrees of freedom), and returns the largest.

    Parameters
    ----------
    laws_ : sequence of numpy.ndarray
        Exact laws of the case's checks (:func:`case_laws`).
    tv : float
        Resolution wanted, in (0, 1).
    level, power : float
        Level of one check (Bonferroni share of the false-alarm budget) and power.
    min_expected : float
        Binning floor (:func:`specdec.stats.gof.pool_cells`).
    max_trials : int
        Cap.

    Returns
    -------
    int

    Raises
    ------
    ValueError
        ``tv`` outside (0, 1).

    Examples
    --------
    >>> trials_for_tv([np.array([0.5, 0.3, 0.2])], 0.01, 1e-3 / 22, 0.9)
    79906
    """
    if not (0.0 < tv < 1.0):
        raise ValueError(f"tv: must be in (0, 1) (got {tv!r})")
    out = MIN_TRIALS
    for lw in laws_:
        if (np.asarray(lw) > 0).sum() < 2:
            n = math.ceil(math.log1p(-power) / math.log1p(-tv))   # impossible outcomes only
            out = max(out, min(n, max_trials))
            continue
        n = math.ceil(kitstats.noncentrality(2, level, power) / (4 * tv * tv))
        for _ in range(8):
            n = min(n, max_trials)
            dof = _dof(lw, n, min_expected)
            new = math.ceil(kitstats.noncentrality(dof, level, power) / (4 * tv * tv)) if dof else n
            if new <= n:
                break
            n = new
        out = max(out, min(n, max_trials))
    return int(out)


@dataclass(frozen=True)
class Plan:
    """Trials per case, the resolution they buy and, after a pilot, the time they cost.

    Attributes
    ----------
    cases : tuple of str
    trials : tuple of int
        Per case.
    tv_detectable : tuple of float
        Per case, at the planning level.
    seconds_per_trial : tuple of float or None
        Measured by the pilot (None without a pilot).
    level : float
        Bonferroni level used for planning (``false_alarm / (2 * cases)``).
    resolution : float
        The detectable TV asked for, or bought by the budget.
    budget : float or None
        Seconds asked for.
    """

    cases: tuple[str, ...]
    trials: tuple[int, ...]
    tv_detectable: tuple[float, ...]
    seconds_per_trial: tuple[float, ...] | None
    level: float
    resolution: float
    budget: float | None = None

    @property
    def trials_by_case(self) -> dict[str, int]:
        return dict(zip(self.cases, self.trials))

    @property
    def estimated_seconds(self) -> float:
        """Estimated wall time of the battery (NaN without a pilot)."""
        if self.seconds_per_trial is None:
            return float("nan")
        return float(sum(n * c for n, c in zip(self.trials, self.seconds_per_trial)))

    def summary(self) -> str:
        """One line: trials, estimated time, resolution."""
        t = self.estimated_seconds
        est = f"estimated {t:.0f} s" if t == t else "time not estimated"
        head = f"budget {self.budget:g} s: " if self.budget is not None else ""
        return (f"{head}{sum(self.trials):,} trials over {len(self.cases)} cases "
                f"({min(self.trials):,} to {max(self.trials):,} per case), {est}; "
                f"detectable TV <= {max(self.tv_detectable):.2g} on every case")


def pilot_trials(spec: SamplerSpec) -> int:
    """Most trials a pilot runs per case to measure the time per trial of ``spec``'s sampler."""
    return 20_000 if spec.vectorised else (25 if spec.kind == BLOCK else 100)


def plan_trials(spec: SamplerSpec, case_list, *, cost=None, resolution: float | None = None,
                budget: float | None = None, false_alarm: float = 1e-3, power: float = 0.9,
                min_expected: float = 10.0) -> Plan:
    """Trials per case for a resolution, or the best resolution a time budget buys.

    Arithmetic only: the seconds per trial of each case come from a pilot that measured
    them (:func:`specdec.conformance.pilot.plan_battery`).

    Parameters
    ----------
    spec : SamplerSpec
    case_list : sequence of TokenCase or BlockCase
    cost : sequence of float, optional
        Seconds per trial of each case (required with ``budget``).
    resolution : float, optional
        Detectable TV wanted on every case; default :data:`DEFAULT_RESOLUTION`.
    budget : float, optional
        Seconds for the whole battery; then the trials are allocated so that every case
        reaches the same detectable TV, the smallest the budget allows.
    false_alarm, power, min_expected : float
        As for :func:`specdec.conformance.run_battery`.

    Returns
    -------
    Plan

    Raises
    ------
    ValueError
        ``resolution`` outside (0, 1), ``budget <= 0``, or ``budget`` without ``cost``.
    """
    key = convention_key(spec)
    level = false_alarm / (2 * len(case_list))
    laws_ = [case_laws(c) for c in case_list]
    cap = MAX_TRIALS[key]
    cost = None if cost is None else tuple(float(c) for c in cost)
    if budget is not None and cost is None:
        raise ValueError("cost: a budget needs the seconds per trial of each case (a pilot)")
    if budget is not None:
        if not (budget > 0):
            raise ValueError(f"budget: must be a number of seconds > 0 (got {budget!r})")

        def seconds(tv):
            return sum(cs * trials_for_tv(lw, tv, level, power, min_expected=min_expected,
                                          max_trials=cap) for cs, lw in zip(cost, laws_))

        lo, hi = 1e-5, 0.5                       # detectable TV, log-bisection on the budget
        for _ in range(24):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if seconds(mid) > budget else (lo, mid)
        resolution = hi
    elif resolution is None:
        resolution = DEFAULT_RESOLUTION[key]
    elif not (0.0 < resolution < 1.0):
        raise ValueError(f"resolution: must be a TV distance in (0, 1) (got {resolution!r})")
    trials = tuple(trials_for_tv(lw, resolution, level, power, min_expected=min_expected,
                                 max_trials=cap) for lw in laws_)
    tvs = tuple(detectable(lw, n, level, power, min_expected) for lw, n in zip(laws_, trials))
    return Plan(tuple(c.name for c in case_list), trials, tvs, cost, level, float(resolution),
                None if budget is None else float(budget))

