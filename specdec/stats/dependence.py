"""Dependence between consecutive cycles: does one cycle's acceptance predict the next's?

The cost model's expected tokens per cycle treats cycles as independent; a regime carried
along a text (:mod:`specdec.cost.workloads`) makes consecutive accepted lengths correlated.
:func:`cycle_dependence` measures that correlation from decoded cycles (simulated or from
a real decoder), with an interval that resamples whole requests. Used in Chapter 7.

References
----------
.. [1] B. Efron, R. J. Tibshirani, *An Introduction to the Bootstrap*, Chapman & Hall
   1993, Ch. 13 (percentile intervals).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from specdec.laws import check_int
from specdec.verify import check_rng

__all__ = ["CycleDependence", "cycle_dependence"]


@dataclass(frozen=True)
class CycleDependence:
    """Dependence between consecutive cycles' accepted lengths, with a bootstrap interval.

    Attributes
    ----------
    correlation : float
        Pearson correlation of ``(A_k, A_{k+1})`` over all consecutive pairs of cycles of
        the same request, pooled.
    low, high : float
        Percentile bootstrap interval (requests resampled with replacement).
    confidence : float
        Its level.
    pairs : int
        Consecutive pairs used.
    requests : int
        Requests with at least two cycles.
    """

    correlation: float
    low: float
    high: float
    confidence: float
    pairs: int
    requests: int

    @property
    def verdict(self) -> str:
        """``"positive"``, ``"negative"`` or ``"none detected"`` (interval contains 0)."""
        if self.low > 0:
            return "positive"
        if self.high < 0:
            return "negative"
        return "none detected"

    def to_dict(self) -> dict:
        return {"correlation": self.correlation, "low": self.low, "high": self.high,
                "confidence": self.confidence, "pairs": self.pairs, "requests": self.requests}


def _pooled_lag1(xs: list[np.ndarray], ys: list[np.ndarray]) -> float:
    x, y = np.concatenate(xs), np.concatenate(ys)
    sx, sy = x.std(), y.std()
    if sx == 0 or sy == 0:
        return 0.0
    return float(((x - x.mean()) * (y - y.mean())).mean() / (sx * sy))


def cycle_dependence(accepted_lengths: Sequence[Sequence[int]], rng: np.random.Generator, *,
                     resamples: int = 2000, confidence: float = 0.95) -> CycleDependence:
    """Is the accepted length of a cycle predictive of the next one's? Measured from cycles.

    A carried regime whose stretches last predicts a positive correlation (a rejection
    hands a hard stretch to the next cycle; :meth:`MarkovWorkload.cycle_correlation`
    gives the exact value), alternating regimes a small negative one, and a fresh-start
    or constant model none. Pairs are
    consecutive cycles of one request; the interval resamples whole requests, so the
    dependence between overlapping pairs of a request is respected. Requests with
    different acceptance levels add a positive between-request component: a positive
    value says that cycles of a request are alike, by either cause.

    Parameters
    ----------
    accepted_lengths : sequence of sequences of int
        Per request, the accepted proposals of each cycle in order (e.g.
        :attr:`specdec.decode.Decoded.accepted_lengths`, or the rows of
        :func:`simulate_cycles`).
    rng : numpy.random.Generator
        For the bootstrap.
    resamples : int, keyword-only
        Bootstrap resamples, >= 100.
    confidence : float, keyword-only
        Level of the interval, in (0, 1).

    Returns
    -------
    CycleDependence

    Raises
    ------
    ValueError
        Fewer than two requests with two cycles or more, negative lengths, bad
        ``resamples``/``confidence``.
    TypeError
        ``rng`` neither a Generator nor a seed.

    Examples
    --------
    >>> from specdec.cost.workloads import bursty_workload, simulate_requests
    >>> a = simulate_requests(bursty_workload(), 4, 200, 40, np.random.default_rng(1))
    >>> d = cycle_dependence(a, np.random.default_rng(2), resamples=200)
    >>> d.verdict, d.pairs
    ('positive', 7800)
    """
    rng = check_rng(rng)
    resamples = check_int(resamples, "resamples", minimum=100)
    if not (isinstance(confidence, (int, float)) and 0 < confidence < 1):
        raise ValueError(f"confidence: must be in (0, 1) (got {confidence!r})")
    rows = [np.asarray(r, dtype=np.int64).ravel() for r in accepted_lengths]
    if any((r < 0).any() for r in rows):
        raise ValueError("accepted_lengths: must be non-negative integers")
    rows = [r for r in rows if r.size >= 2]
    if len(rows) < 2:
        raise ValueError("accepted_lengths: need at least two requests with two cycles or more")
    xs, ys = [r[:-1] for r in rows], [r[1:] for r in rows]
    corr = _pooled_lag1(xs, ys)
    boot = np.empty(resamples)
    for b in range(resamples):
        pick = rng.integers(0, len(rows), len(rows))
        boot[b] = _pooled_lag1([xs[i] for i in pick], [ys[i] for i in pick])
    lo, hi = np.quantile(boot, [(1 - confidence) / 2, (1 + confidence) / 2])
    return CycleDependence(correlation=corr, low=float(lo), high=float(hi), confidence=float(confidence),
                           pairs=int(sum(x.size for x in xs)), requests=len(rows))
