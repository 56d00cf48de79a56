"""The conformance kit's statistics: pooled cells, the pooled chi-square, its power, Holm.

The kit (:mod:`specdec.conformance`) tests a sampler's counts against an exact law with
Pearson's chi-square on cells pooled by their exact expected counts (never by the data;
:func:`pool_cells`, with as many bins as the trials support, :func:`bins_for_trials`),
computed by scipy (:func:`pooled_chisquare`); it sizes its runs by the power of that test
(:func:`noncentrality`, :func:`chisquare_power`, :func:`detectable_tv`), adjusts every
check of a battery with Holm's procedure (:func:`holm_adjust`), and measures a lossy
sampler's KL distance with a bootstrap interval (:func:`kl_ci`). The finite-sample bounds
the book's chapters use, and the TV interval, are :mod:`specdec.stats`.

References
----------
.. [1] W. G. Cochran, "Some methods for strengthening the common chi-square tests",
   Biometrics 10(4), 417-451, 1954 (expected counts per cell).
.. [2] H. B. Mann, A. Wald, "On the choice of the number of class intervals in the
   application of the chi square test", Ann. Math. Statist. 13(3), 306-317, 1942.
.. [3] S. Holm, "A simple sequentially rejective multiple test procedure",
   Scandinavian Journal of Statistics 6(2), 65-70, 1979.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, stats

from specdec.laws import LawError, check_counts, check_int, check_law, check_level
from specdec.verify import check_rng

__all__ = [
    "KlInterval",
    "kl_ci",
    "Binning",
    "pool_cells",
    "bins_for_trials",
    "PooledGof",
    "pooled_chisquare",
    "noncentrality",
    "chisquare_power",
    "detectable_tv",
    "holm_adjust",
]


@dataclass(frozen=True)
class KlInterval:
    """Result of :func:`kl_ci`.

    Attributes
    ----------
    estimate : float
        Plug-in ``KL(f || law)`` in nats (``inf`` when ``f`` has mass where ``law`` is 0;
        biased upwards by noise near 0).
    low, high : float
        Percentile interval of the plug-in over multinomial resamples (approximate).
    confidence : float
        Nominal coverage.
    resamples : int
    """

    estimate: float
    low: float
    high: float
    confidence: float
    resamples: int


def _kl_rows(f: np.ndarray, law: np.ndarray) -> np.ndarray:
    """``KL(f_i || law)`` for each row of ``f``, ``inf`` where ``f`` has mass on ``law == 0``."""
    f = np.atleast_2d(f)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(f > 0, f * np.log(f / law), 0.0)
    return terms.sum(axis=1)


def kl_ci(counts, law, confidence: float = 0.95, *, rng, resamples: int = 1000) -> KlInterval:
    """Plug-in KL divergence from an exact law to a sampler's frequencies, with a bootstrap interval.

    ``KL(f || law) = sum_i f_i log(f_i / law_i)`` (nats) of the frequencies ``f`` of
    ``counts``, and the percentile interval of the same statistic over ``resamples``
    multinomial resamples of ``f``. Approximate: the plug-in is biased upwards by about
    ``(cells - 1) / (2 n)`` near 0 and its interval inherits the bias, so it is a
    measurement of a sampler known to be lossy, not a test of exactness (use the
    conformance battery for that).

    Parameters
    ----------
    counts : array_like of int, shape (V,)
    law : array_like, shape (V,)
        The exact law (cells where it is 0 make the KL infinite when counted).
    confidence : float
        Coverage in (0, 1).
    rng : numpy.random.Generator or int
        For the resamples.
    resamples : int
        ``>= 100``.

    Returns
    -------
    KlInterval

    Raises
    ------
    LawError
        Invalid counts, law or level.

    Examples
    --------
    >>> ci = kl_ci([500, 300, 200], [0.25, 0.25, 0.5], rng=0)
    >>> round(ci.estimate, 4), ci.low < ci.estimate < ci.high
    (0.218, True)
    """
    from specdec.verify import check_rng

    conf = check_level(confidence, "confidence")
    c, lw = check_counts(counts, law)
    n = int(c.sum())
    f = c / n
    b = check_int(resamples, "resamples", minimum=100)
    boots = _kl_rows(check_rng(rng).multinomial(n, f, size=b) / n, lw)
    lo, hi = np.quantile(boots, [(1 - conf) / 2, (1 + conf) / 2], method="inverted_cdf")
    return KlInterval(float(_kl_rows(f, lw)[0]), float(lo), float(hi), conf, b)



@dataclass(frozen=True, eq=False)
class Binning:
    """A data-independent grouping of outcome cells into test bins (:func:`pool_cells`).

    Attributes
    ----------
    bin_of : numpy.ndarray, shape (K,), int64
        Bin index of each cell; ``-1`` for cells of probability 0 (impossible outcomes).
    law : numpy.ndarray, shape (B,)
        Probability of each bin (sums to 1).
    pooled_cells : int
        Number of cells that share their bin with at least one other cell.
    floor : float
        Minimum expected count per bin that was enforced.
    """

    bin_of: np.ndarray
    law: np.ndarray
    pooled_cells: int
    floor: float

    @property
    def n_bins(self) -> int:
        return int(self.law.size)

    def merged_cells(self) -> np.ndarray:
        """Indices of the cells that share their bin with another cell (ascending)."""
        possible = self.bin_of >= 0
        sizes = np.bincount(self.bin_of[possible], minlength=self.n_bins)
        return np.flatnonzero(possible & (sizes[np.maximum(self.bin_of, 0)] > 1))

    def bin_counts(self, counts) -> tuple[np.ndarray, int]:
        """Counts per bin, and the count of impossible outcomes.

        Parameters
        ----------
        counts : array_like, shape (K,)
            Counts per cell.

        Returns
        -------
        (numpy.ndarray of shape (B,), int)
        """
        counts = np.asarray(counts)
        possible = self.bin_of >= 0
        binned = np.bincount(self.bin_of[possible], weights=counts[possible],
                             minlength=self.n_bins).round().astype(np.int64)
        return binned, int(counts[~possible].sum())


def bins_for_trials(trials: int, *, level: float = 0.05) -> int:
    """Number of bins ``n`` observations support: Mann and Wald's rule.

    ``k = ceil(4 (2 (n - 1)^2 / z^2)^(1/5))`` with ``z = Phi^{-1}(1 - level)``: the
    number of equiprobable classes that Mann and Wald (1942) found to maximise the
    chi-square test's power against the least favourable alternatives at level
    ``level``. It grows like ``n^(2/5)``, so more trials resolve a finer partition of
    the outcomes (for example, the tail of a large vocabulary): 198 bins at 20,000
    trials, 497 at 200,000, 1,937 at 6 million.

    Parameters
    ----------
    trials : int
        Observations, >= 1.
    level : float
        The test's level in Mann and Wald's formula, in (0, 0.5).

    Returns
    -------
    int
        At least 2.

    Raises
    ------
    ValueError
        ``trials < 1`` or ``level`` outside (0, 0.5).

    References
    ----------
    Mann and Wald (1942), the formula for the number of classes.

    Examples
    --------
    >>> [bins_for_trials(n) for n in (20_000, 200_000, 6_000_000)]
    [198, 497, 1937]
    """
    n = check_int(trials, "trials", minimum=1)
    if not (0.0 < level < 0.5):
        raise ValueError(f"level: must be in (0, 0.5) (got {level!r})")
    z = float(stats.norm.isf(level))
    return max(2, math.ceil(4.0 * (2.0 * (n - 1) ** 2 / z**2) ** 0.2))


def pool_cells(law, trials: int, *, min_expected: float = 10.0, max_bins: int | None = None) -> Binning:
    """Group cells so that every bin has an adequate expected count: the one pooling rule.

    Cells of probability 0 get bin ``-1`` (an observation there is impossible under the
    law). With ``floor = max(min_expected, trials / max_bins)`` (``min_expected`` when
    ``max_bins`` is None), every cell whose expected count ``trials * law[i]`` reaches
    ``floor`` is a bin of its own; the other cells are taken in decreasing order of
    probability (ties: lower index first) and pooled greedily until each bin reaches
    ``floor``; a last group that falls short is merged into the bin before it. The
    result depends only on ``law`` and ``trials``, never on the data, so a test on the
    bins keeps its level. :func:`gof_test` (floor 5), :func:`pool_sparse_cells` and the
    conformance kit (floor 10, ``max_bins = bins_for_trials(trials)``) all use it.

    Parameters
    ----------
    law : array_like, shape (K,)
        Exact probability of each cell.
    trials : int
        Number of observations the counts will hold.
    min_expected : float
        Minimum expected count per bin (Cochran's rule asks for about 5; 10 keeps the
        chi-square approximation accurate at small levels).
    max_bins : int or None
        Upper bound on the number of bins (a chi-square with fewer degrees of freedom
        has more power against diffuse deviations); None: no bound but the floor.

    Returns
    -------
    Binning

    Raises
    ------
    ValueError
        If ``law`` is not a valid law, ``trials < 1``, ``min_expected <= 0`` or
        ``max_bins < 1``.

    Examples
    --------
    >>> b = pool_cells([0.5, 0.3, 0.1996, 0.0002, 0.0002, 0.0], 1000)
    >>> b.bin_of.tolist(), b.law.round(4).tolist(), b.pooled_cells
    ([0, 1, 2, 2, 2, -1], [0.5, 0.3, 0.2], 3)
    """
    law = check_law(law, "law")
    trials = check_int(trials, "trials")
    if not (np.isfinite(min_expected) and min_expected > 0):
        raise ValueError(f"min_expected: must be a finite number > 0 (got {min_expected!r})")
    floor = float(min_expected)
    if max_bins is not None:
        floor = max(floor, trials / check_int(max_bins, "max_bins"))
    bin_of = np.full(law.size, -1, dtype=np.int64)
    possible = np.flatnonzero(law > 0)
    order = possible[np.lexsort((possible, -law[possible]))]
    expected = trials * law[order]
    n_big = int(np.searchsorted(-expected, -floor, side="right"))  # expected sorted descending
    bin_of[order[:n_big]] = np.arange(n_big)
    groups: list[list[int]] = []
    acc, current = 0.0, []
    for cell, e in zip(order[n_big:].tolist(), expected[n_big:].tolist()):
        current.append(cell)
        acc += e
        if acc >= floor:
            groups.append(current)
            acc, current = 0.0, []
    if current:                      # a last group short of the floor
        if groups:
            groups[-1].extend(current)
        elif n_big:
            bin_of[current] = n_big - 1
        else:
            groups.append(current)
    for j, cells in enumerate(groups):
        bin_of[cells] = n_big + j
    n_bins = int(bin_of.max()) + 1
    bin_law = np.bincount(bin_of[possible], weights=law[possible], minlength=n_bins)
    sizes = np.bincount(bin_of[possible], minlength=n_bins)
    pooled = int(sizes[sizes > 1].sum())
    return Binning(bin_of, bin_law / bin_law.sum(), pooled, floor)


@dataclass(frozen=True)
class PooledGof:
    """Result of :func:`pooled_chisquare`.

    Attributes
    ----------
    statistic : float
        Pearson's X^2 on the bins of the possible outcomes (0 when ``dof == 0``).
    dof : int
        Bins - 1; 0 means there is nothing to test but impossible outcomes.
    pvalue : float
        Asymptotic chi-square p-value (1 when ``dof == 0``).
    binned : numpy.ndarray, shape (B,)
        Observed counts per bin.
    impossible : int
        Observations of outcomes of probability 0.
    binning : Binning
    noncentrality : float
        Per-trial noncentrality estimate ``max(X^2 - dof, 0) / n`` (plans trials).
    """

    statistic: float
    dof: int
    pvalue: float
    binned: np.ndarray = field(repr=False, compare=False)
    impossible: int
    binning: Binning = field(repr=False, compare=False)
    noncentrality: float


def pooled_chisquare(counts, law, *, min_expected: float = 10.0,
                     max_bins: int | None = None) -> PooledGof:
    """Pearson's chi-square test of counts against an exact law, on pooled cells.

    The cells are grouped by :func:`pool_cells` (from the law and the number of trials
    only); the statistic and p-value are computed by :func:`scipy.stats.chisquare` on
    the possible outcomes; observations of impossible outcomes are counted apart (each
    one disproves the law with certainty, whatever the statistic says).

    Parameters
    ----------
    counts : array_like of int, shape (K,)
        Observed counts per cell (may be all zero: then nothing is tested).
    law : array_like, shape (K,)
        Exact law of the cells.
    min_expected, max_bins :
        As for :func:`pool_cells`.

    Returns
    -------
    PooledGof

    Raises
    ------
    ValueError
        Invalid law or pooling arguments; ``counts`` of another shape.

    Examples
    --------
    >>> r = pooled_chisquare([100018, 59688, 40294], [0.5, 0.3, 0.2])
    >>> r.dof, round(r.pvalue, 3), r.impossible
    (2, 0.151, 0)
    """
    counts = np.asarray(counts, dtype=np.int64)
    law = check_law(law, "law")
    if counts.shape != law.shape:
        raise ValueError(f"counts: shape {counts.shape} does not match law {law.shape}")
    n = int(counts.sum())
    binning = pool_cells(law, max(n, 1), min_expected=min_expected, max_bins=max_bins)
    binned, impossible = binning.bin_counts(counts)
    n_possible = n - impossible
    dof = binning.n_bins - 1
    if dof >= 1 and n_possible > 0:
        res = stats.chisquare(binned, n_possible * binning.law)
        stat, pvalue = float(res.statistic), float(res.pvalue)
        lam1 = max(stat - dof, 0.0) / n_possible
    else:
        stat, pvalue, lam1 = 0.0, 1.0, 0.0
    return PooledGof(stat, dof, pvalue, binned, impossible, binning, lam1)


def noncentrality(dof: int, level: float, power: float) -> float:
    """Noncentrality at which the chi-square(``dof``) test at ``level`` has ``power``.

    Solves ``ncx2.sf(chi2.isf(level, dof), dof, lam) = power`` for ``lam`` (scipy's
    noncentral chi-square, Brent's method).

    Raises
    ------
    ValueError
        ``dof < 1`` or a probability outside (0, 1).

    Examples
    --------
    >>> round(noncentrality(2, 1e-3 / 11, 0.9), 2)
    30.17
    """
    dof = check_int(dof, "dof", minimum=1)
    for name, x in (("level", level), ("power", power)):
        if not (0.0 < x < 1.0):
            raise ValueError(f"{name}: must be in (0, 1) (got {x!r})")
    if not power > level:
        raise ValueError(f"power: must exceed level (got power {power!r} <= level {level!r}): "
                         "the test rejects a true law with probability level already")
    return _noncentrality(dof, float(level), float(power))


@functools.lru_cache(maxsize=8192)
def _noncentrality(dof: int, level: float, power: float) -> float:
    crit = stats.chi2.isf(level, dof)

    def gap(lam):
        return stats.ncx2.sf(crit, dof, lam) - power

    hi = 1.0
    while gap(hi) < 0:
        hi *= 2.0
    return float(optimize.brentq(gap, 1e-9, hi, xtol=1e-9, rtol=1e-10))


def chisquare_power(law, alternative, trials: int, level: float, *, min_expected: float = 10.0,
                    max_bins: int | None = None) -> float:
    """Power of the pooled chi-square test of ``law`` when the outcomes follow ``alternative``.

    The binning of :func:`pool_cells` depends on ``law`` and ``trials`` only; the Pearson
    statistic of ``trials`` draws from ``alternative`` is then approximately noncentral
    chi-square with ``B - 1`` degrees of freedom and noncentrality
    ``trials * sum_b (alt_b - law_b)^2 / law_b`` over the bins. Mass of ``alternative``
    where ``law`` is 0 is an impossible outcome, which the conformance kit fails on sight:
    the power then also counts the chance of seeing at least one.

    Parameters
    ----------
    law, alternative : array_like, shape (K,)
        The tested law and the sampler's true law, on the same cells.
    trials : int
    level : float
        Rejection level of the test, in (0, 1).
    min_expected, max_bins :
        Binning rule, as for :func:`pool_cells` (``max_bins=None``: :func:`bins_for_trials`).

    Returns
    -------
    float
        Probability that the test rejects.

    Raises
    ------
    LawError
        Invalid laws or sizes.
    ValueError
        ``level`` outside (0, 1).

    Examples
    --------
    >>> round(chisquare_power([0.5, 0.5], [0.55, 0.45], 1000, 1e-3), 3)
    0.449
    """
    lw, alt = check_law(law, "law"), check_law(alternative, "alternative")
    if lw.shape != alt.shape:
        raise LawError(f"alternative: size {alt.size} does not match law ({lw.size})")
    if not (0.0 < level < 1.0):
        raise ValueError(f"level: must be in (0, 1) (got {level!r})")
    n = check_int(trials, "trials", minimum=1)
    binning = pool_cells(lw, n, min_expected=min_expected,
                         max_bins=bins_for_trials(n) if max_bins is None else max_bins)
    possible = binning.bin_of >= 0
    pb = np.bincount(binning.bin_of[possible], weights=lw[possible], minlength=binning.n_bins)
    ab = np.bincount(binning.bin_of[possible], weights=alt[possible], minlength=binning.n_bins)
    dof = binning.n_bins - 1
    p_impossible = float(alt[~possible].sum())
    see_impossible = -math.expm1(n * math.log1p(-min(p_impossible, 1.0 - 1e-300)))
    if dof < 1:
        return see_impossible
    lam = n * float(((ab - pb) ** 2 / pb).sum())
    power = float(stats.ncx2.sf(stats.chi2.isf(level, dof), dof, lam))
    return 1.0 - (1.0 - power) * (1.0 - see_impossible)


def detectable_tv(trials: int, dof: int, level: float, power: float) -> float:
    """Smallest TV distance the pooled chi-square test detects with the given power.

    For bin laws ``pi`` (target) and ``s`` (sampler), the Pearson statistic is
    approximately noncentral chi-square with ``dof`` degrees of freedom and
    noncentrality ``lambda = trials * sum (s - pi)^2 / pi``. By Cauchy-Schwarz,
    ``sum |s - pi| <= sqrt(sum (s - pi)^2 / pi)``, so ``lambda >= 4 * trials * TV^2``
    with equality for the least favourable direction. A TV of
    ``sqrt(lambda* / (4 trials))``, where ``lambda*`` gives the test power ``power`` at
    ``level`` (:func:`noncentrality`), is therefore detected with probability at least
    ``power`` whatever its direction. With ``dof = 0`` (all the possible mass in one bin)
    a deviation must move mass onto impossible outcomes, and
    ``1 - (1 - power)^(1 / trials)`` is detected.

    Parameters
    ----------
    trials : int
        Observations.
    dof : int
        Degrees of freedom of the test (bins - 1), >= 0.
    level : float
        Significance level of the single test, in (0, 1).
    power : float
        Probability of detection, in (0, 1).

    Returns
    -------
    float
        TV distance (probability), on the test's bins; 1 when even the largest possible
        distance is not detected with that power (too few trials).

    Raises
    ------
    ValueError
        On an out-of-range argument.

    Examples
    --------
    >>> round(detectable_tv(200_000, 2, 1e-3 / 11, 0.9), 4)
    0.0061
    """
    trials = check_int(trials, "trials")
    dof = check_int(dof, "dof", minimum=0)
    for name, x in (("level", level), ("power", power)):
        if not (0.0 < x < 1.0):
            raise ValueError(f"{name}: must be in (0, 1) (got {x!r})")
    if dof == 0:
        return float(-math.expm1(math.log1p(-power) / trials))
    return min(1.0, float(math.sqrt(noncentrality(dof, level, power) / (4.0 * trials))))


def holm_adjust(pvalues) -> np.ndarray:
    """Holm-adjusted p-values (family-wise error control, any dependence).

    ``adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))`` over the sorted p-values; a
    hypothesis is rejected at family-wise level ``a`` iff its adjusted p-value is
    ``<= a``.

    Parameters
    ----------
    pvalues : array_like, shape (m,)

    Returns
    -------
    numpy.ndarray, shape (m,)
        In the input order.

    Raises
    ------
    ValueError
        If a p-value is NaN or outside [0, 1].

    References
    ----------
    Holm (1979), the step-down procedure.

    Examples
    --------
    >>> holm_adjust([0.01, 0.04, 0.03]).tolist()
    [0.03, 0.06, 0.06]
    """
    p = np.asarray(pvalues, dtype=np.float64).ravel()
    if p.size == 0:
        return p
    if np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise ValueError("pvalues: must all be in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    adj_sorted = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adj_sorted
    return out
