"""Reading Monte Carlo output: standard errors, goodness of fit, power, calibrated checks.

A proof shows that a sampling rule is exact; a Monte Carlo run can only show that an
implementation is *consistent* with the exact law, at a stated error rate. This module
turns counts into such statements:

* :func:`standard_error`, :func:`z_scores`: the scale of fluctuations of frequencies;
* :func:`gof_test`: the classical chi-square goodness-of-fit test (asymptotic);
* :func:`assert_law`: a check calibrated for *every* number of trials, used by the book
  and the tests, so that a correct sampler fails with probability at most
  ``false_alarm`` whatever the seed;
* :func:`trials_to_detect`: how many trials a bias of a given total-variation size needs
  before that check catches it with a given power;
* :func:`tv_ci`: a confidence interval for the total-variation distance between the law
  a sampler really follows and the exact law;
* :func:`frequency_band`, :func:`max_deviation_bound`: calibrated bands for frequencies;
* the statistics of the conformance kit (the one pooling rule, the pooled chi-square, its
  power, detectable TV, Holm, the KL interval) are :mod:`specdec.stats.gof`, which
  :func:`gof_test` also uses.

Used in Chapters 1, 3, 4, 5, 7 and 8 and by the conformance kit (Appendix A2).

References
----------
.. [1] R. Agrawal, "Finite-Sample Concentration of the Multinomial in Relative
   Entropy", IEEE Trans. Inf. Theory 66(10), 2020; arXiv:1904.02291. (The moment
   generating function of ``n KL(empirical || law)`` is at most that of a
   Gamma(k - 1, 1) variable, hence ``P(KL >= eps) <= exp(-n eps) (e n eps / (k-1))^(k-1)``
   for ``eps > (k-1)/n``.)
.. [2] T. Weissman, E. Ordentlich, G. Seroussi, S. Verdú, M. Weinberger, "Inequalities
   for the L1 Deviation of the Empirical Distribution", HP Labs HPL-2003-97, 2003.
   (``P(||empirical - law||_1 >= eps) <= (2^k - 2) exp(-n eps^2 / 2)``.)
.. [3] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023, Sec. 2-3, App. A.1 (the law being checked).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from specdec.stats.gof import pool_cells
from specdec.laws import LawError, check_counts, check_int, check_law, check_level, check_real

__all__ = [
    "ratio_interval",
    "GofResult",
    "TvInterval",
    "standard_error",
    "z_scores",
    "gof_test",
    "law_pvalue",
    "detection_threshold",
    "assert_law",
    "trials_to_detect",
    "tv_ci",
    "frequency_band",
    "max_deviation_bound",
    "pool_sparse_cells",
]


def standard_error(prob, n):
    """Standard error ``sqrt(prob (1 - prob) / n)`` of a frequency over ``n`` trials.

    Parameters
    ----------
    prob : float or array_like
        Probability (or probabilities) of the event, in [0, 1].
    n : int
        Number of independent trials, ``>= 1``.

    Returns
    -------
    float or numpy.ndarray
        Standard deviation of the observed frequency (probability units); same shape as
        ``prob``.

    Raises
    ------
    ValueError
        ``prob`` outside [0, 1] or not finite; ``n`` not an integer ``>= 1`` (a
        :class:`TypeError` if it is not a number).

    Examples
    --------
    >>> round(standard_error(0.5, 200_000), 5)
    0.00112
    """
    n = check_int(n, "n", minimum=1)
    pr = np.asarray(prob, dtype=np.float64)
    if not np.all(np.isfinite(pr)) or (pr < 0).any() or (pr > 1).any():
        raise ValueError("prob: must be probabilities in [0, 1]")
    se = np.sqrt(pr * (1.0 - pr) / n)
    return float(se) if se.ndim == 0 else se


def z_scores(counts, law) -> np.ndarray:
    """Standardised deviations ``(f - law) / SE`` of observed frequencies, per token.

    Parameters
    ----------
    counts : array_like of int, shape (V,)
        Observed counts; ``n = sum(counts)``.
    law : array_like, shape (V,)
        Expected law.

    Returns
    -------
    numpy.ndarray, shape (V,)
        Marginal z-scores (each approximately standard normal under ``law`` for large
        ``n``; they are not independent). Where ``law`` is 0 or 1 the standard error is 0:
        the z-score is 0 if the frequency equals ``law``, ``+inf``/``-inf`` otherwise.

    Raises
    ------
    LawError
        Invalid counts or law, mismatched sizes.

    Examples
    --------
    >>> z_scores([100018, 59688, 40294], [0.5, 0.3, 0.2]).round(2).tolist()
    [0.08, -1.52, 1.64]
    """
    c, lw = check_counts(counts, law)
    n = c.sum()
    f = c / n
    se = np.sqrt(lw * (1.0 - lw) / n)
    diff = f - lw
    out = np.zeros_like(diff)
    ok = se > 0
    out[ok] = diff[ok] / se[ok]
    bad = ~ok & (np.abs(diff) > 1e-15)
    out[bad] = np.sign(diff[bad]) * np.inf
    return out


@dataclass(frozen=True)
class GofResult:
    """Result of :func:`gof_test`.

    Attributes
    ----------
    statistic : float
        Test statistic (Pearson's X^2 or the G statistic), ``inf`` for impossible counts.
    dof : int
        Degrees of freedom after pooling (cells - 1).
    pvalue : float
        Asymptotic chi-square p-value (0 for impossible counts).
    method : str
        Description of the statistic and of the pooling.
    pooled_cells : tuple of int
        Token ids that share a cell with other tokens because their expected counts were
        below 5 (:func:`pool_cells`; empty when nothing was pooled).
    """

    statistic: float
    dof: int
    pvalue: float
    method: str
    pooled_cells: tuple[int, ...]


_LAMBDA = {"pearson": "pearson", "g": "log-likelihood"}


def gof_test(counts, law, *, statistic: str = "pearson") -> GofResult:
    """Chi-square goodness-of-fit test of counts against an exact law.

    Cells with expected count ``n law(x) < 5`` are pooled by :func:`pool_cells` (the
    usual validity rule of the chi-square approximation, Cochran 1954). Tokens with
    ``law(x) == 0`` are removed: a positive count there is an impossible event, reported
    as ``statistic = inf``, ``pvalue = 0``. The statistic is computed by
    :func:`scipy.stats.power_divergence`.

    The p-value is asymptotic (``n -> inf``). For the far tail used to assert laws
    (p-values like 1e-9) use :func:`assert_law`, whose threshold holds for every ``n``.

    Parameters
    ----------
    counts : array_like of int, shape (V,)
        Observed counts.
    law : array_like, shape (V,)
        Expected law.
    statistic : {"pearson", "g"}
        Pearson's X^2 (:func:`scipy.stats.chisquare`) or the likelihood-ratio G statistic.

    Returns
    -------
    GofResult

    Raises
    ------
    LawError
        Invalid counts or law, mismatched sizes.
    ValueError
        Unknown statistic.

    References
    ----------
    W. G. Cochran, "Some methods for strengthening the common chi-square tests",
    Biometrics 10 (1954) (the expected-count >= 5 rule).

    Examples
    --------
    >>> res = gof_test([100018, 59688, 40294], [0.5, 0.3, 0.2])
    >>> res.dof, round(res.pvalue, 3)
    (2, 0.151)
    """
    if statistic not in _LAMBDA:
        raise ValueError(f"statistic: must be 'pearson' or 'g' (got {statistic!r})")
    c, lw = check_counts(counts, law)
    n = int(c.sum())
    name = "Pearson X^2" if statistic == "pearson" else "G (likelihood ratio)"
    impossible = (lw == 0) & (c > 0)
    if impossible.any():
        return GofResult(math.inf, int((lw > 0).sum()) - 1, 0.0,
                         f"{name}: impossible counts at tokens {np.flatnonzero(impossible).tolist()}", ())
    binning = pool_cells(lw, n, min_expected=5.0)
    merged = binning.merged_cells()
    pooled = tuple(int(i) for i in merged)
    dof = binning.n_bins - 1
    method = f"{name}, scipy.stats.power_divergence"
    if pooled:
        method += f"; pooled tokens {list(pooled)} (expected counts < 5)"
    if dof < 1:
        return GofResult(0.0, 0, 1.0, method + "; one cell left, nothing to test", pooled)
    binned, _ = binning.bin_counts(c)
    res = stats.power_divergence(binned, n * binning.law, lambda_=_LAMBDA[statistic])
    return GofResult(float(res.statistic), dof, float(res.pvalue), method, pooled)


def _kl(f: np.ndarray, law: np.ndarray) -> float:
    """KL(f || law) in nats, for f absolutely continuous w.r.t. law."""
    pos = f > 0
    return float(np.sum(f[pos] * np.log(f[pos] / law[pos])))


def _log_tail_bound(x: float, k: int) -> float:
    """log of Agrawal's bound on P(n KL >= x) with k cells (0 when the bound is vacuous)."""
    d = k - 1
    if d < 1 or x <= d:
        return 0.0
    return min(0.0, -x + d * (1.0 + math.log(x / d)))


def law_pvalue(counts, law) -> float:
    """A p-value valid for every number of trials (used by :func:`assert_law`).

    With ``n`` trials, observed frequencies ``f`` and ``k`` tokens of positive
    probability, Agrawal's inequality gives, under ``law``,
    ``P(n KL(f || law) >= x) <= exp(-x) (e x / (k - 1))^(k-1)`` for ``x > k - 1``.
    The returned value is that bound evaluated at the observed ``x = n KL(f || law)``
    (1 when ``x <= k - 1``). Since the bound decreases in ``x``, for a sampler that
    really follows ``law``: ``P(law_pvalue <= alpha) <= alpha`` for every ``alpha`` and
    every ``n``. Counts on tokens of probability 0 give 0.

    Parameters
    ----------
    counts : array_like of int, shape (V,)
        Observed counts.
    law : array_like, shape (V,)
        Expected law.

    Returns
    -------
    float
        Conservative p-value in [0, 1].

    Raises
    ------
    LawError
        Invalid counts or law, mismatched sizes.

    References
    ----------
    Agrawal (2020), arXiv:1904.02291.

    Examples
    --------
    >>> law_pvalue([100018, 59688, 40294], [0.5, 0.3, 0.2])
    1.0
    >>> law_pvalue([70010, 77662, 52328], [0.5, 0.3, 0.2]) < 1e-300
    True
    """
    c, lw = check_counts(counts, law)
    if ((lw == 0) & (c > 0)).any():
        return 0.0
    n = int(c.sum())
    k = int((lw > 0).sum())
    x = n * _kl(c / n, lw)
    return math.exp(_log_tail_bound(x, k))


def detection_threshold(false_alarm: float, cells: int) -> float:
    """Threshold on ``G = 2 n KL(f || law)`` at which :func:`assert_law` fails.

    Parameters
    ----------
    false_alarm : float
        Probability, in (0, 1), that a correct sampler fails.
    cells : int
        Number of tokens with positive probability, ``>= 2``.

    Returns
    -------
    float
        ``2 x*`` where ``x*`` solves ``exp(-x) (e x / (k-1))^(k-1) = false_alarm``.
        Compare with ``scipy.stats.chi2.isf(false_alarm, cells - 1)``, the asymptotic
        threshold: the finite-sample one is larger (the price of holding for every n).

    Raises
    ------
    ValueError
        ``false_alarm`` not in (0, 1) or ``cells < 2``.

    Examples
    --------
    >>> round(detection_threshold(1e-9, 3), 2)
    56.0
    """
    alpha = check_level(false_alarm, "false_alarm")
    k = check_int(cells, "cells", minimum=2)
    d = k - 1
    target = math.log(alpha)
    f = lambda x: _log_tail_bound(x, k) - target  # noqa: E731
    hi = d + 1.0
    while f(hi) > 0:
        hi *= 2.0
    return 2.0 * optimize.brentq(f, float(d), hi, xtol=1e-12, rtol=1e-14)


def pool_sparse_cells(counts, law, *, min_expected: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Pooled counts and law: :func:`pool_cells` applied to observed counts.

    Which cells are merged depends on the law and the number of trials only, never on
    the observed counts, so a test on the pooled counts keeps its false-alarm guarantee;
    pooling sparse cells gives the check more power on large vocabularies, where most
    cells would otherwise hold a handful of expected counts each. Cells of probability
    0 are kept as one last cell of probability 0 when they hold counts (an impossible
    outcome stays visible to the check).

    Parameters
    ----------
    counts : array_like of int, shape (V,)
        Observed counts per outcome (any shape; flattened).
    law : array_like, shape (V,)
        Exact law of the outcomes (same shape as ``counts``).
    min_expected : float, default 5.0
        Floor of the expected count per bin (``n = counts.sum()``).

    Returns
    -------
    counts, law : np.ndarray, shape (B,) or (B + 1,)
        One entry per bin of :func:`pool_cells`.

    Raises
    ------
    LawError
        Invalid counts or law, mismatched shapes, or ``min_expected <= 0``.

    Examples
    --------
    >>> c, lw = pool_sparse_cells([50, 45, 3, 2], [0.5, 0.44, 0.04, 0.02], min_expected=5)
    >>> c.tolist(), np.round(lw, 2).tolist()
    ([50, 45, 5], [0.5, 0.44, 0.06])
    """
    c, lw = check_counts(np.ravel(counts), np.ravel(law))
    try:
        binning = pool_cells(lw, int(c.sum()), min_expected=min_expected)
    except ValueError as exc:
        raise LawError(str(exc)) from None
    binned, impossible = binning.bin_counts(c)
    if impossible:
        return np.append(binned, impossible), np.append(binning.law, 0.0)
    return binned, binning.law


def assert_law(counts, law, *, false_alarm: float = 1e-9) -> float:
    """Fail loudly unless counts are consistent with an exact law.

    The check rejects when :func:`law_pvalue` (a finite-sample, not asymptotic, p-value
    built on the likelihood-ratio statistic ``G = 2 n KL(f || law)``) is below
    ``false_alarm``. Hence a sampler that follows ``law`` exactly fails with probability
    at most ``false_alarm``, for any number of trials and any seed; a count on a token of
    probability 0 always fails. Use :func:`trials_to_detect` for the other error: how
    many trials make a given bias fail.

    Parameters
    ----------
    counts : array_like of int, shape (V,)
        Observed counts of a sampler.
    law : array_like, shape (V,)
        The exact law it should follow.
    false_alarm : float
        Probability in (0, 1) of failing a correct sampler (default 1e-9).

    Returns
    -------
    float
        The p-value (:func:`law_pvalue`) when the check passes.

    Raises
    ------
    AssertionError
        When the counts are inconsistent with ``law``; the message gives the statistic,
        the threshold, the p-value and the token with the largest ``|z|``.
    LawError
        Invalid counts or law.
    ValueError
        ``false_alarm`` not in (0, 1).

    References
    ----------
    Agrawal (2020), arXiv:1904.02291.

    Examples
    --------
    >>> assert_law([100018, 59688, 40294], [0.5, 0.3, 0.2])
    1.0
    >>> assert_law([70010, 77662, 52328], [0.5, 0.3, 0.2])
    Traceback (most recent call last):
    ...
    AssertionError: counts are inconsistent with the law (false_alarm = 1e-09, n = 200000): ...
    """
    alpha = check_level(false_alarm, "false_alarm")
    c, lw = check_counts(counts, law)
    n = int(c.sum())
    head = f"counts are inconsistent with the law (false_alarm = {alpha:g}, n = {n})"
    impossible = np.flatnonzero((lw == 0) & (c > 0))
    if impossible.size:
        i = int(impossible[0])
        raise AssertionError(f"{head}: token {i} was emitted {c[i]} times but has probability 0")
    pval = law_pvalue(c, lw)
    if pval < alpha:
        k = int((lw > 0).sum())
        g = 2.0 * n * _kl(c / n, lw)
        z = z_scores(c, lw)
        i = int(np.argmax(np.abs(z)))
        raise AssertionError(
            f"{head}: G = 2 n KL = {g:.4g} exceeds the finite-sample threshold "
            f"{detection_threshold(alpha, k):.4g} (p-value bound {pval:.3g}); largest deviation at "
            f"token {i}: frequency {c[i] / n:.6f} vs {lw[i]:.6f} (z = {z[i]:.2f})"
        )
    return pval


def _binary_kl(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        t1 = np.where(a > 0, a * np.log(a / b), 0.0)
        t2 = np.where(a < 1, (1 - a) * np.log((1 - a) / (1 - b)), 0.0)
    return t1 + t2


def _worst_case_kl(tv: float, law: np.ndarray | None) -> float:
    """min KL(alt || law) over laws alt with TV(alt, law) = tv (binary reduction)."""
    if law is None:
        # worst law too: a binary event of probability (1 - tv) / 2 moved to (1 + tv) / 2
        return float(tv * math.log((1 + tv) / (1 - tv))) if tv < 1 else math.inf
    pos = law[law > 0]
    k = pos.size
    if k > 16:
        return 2.0 * tv * tv  # Pinsker: a lower bound on the minimum (conservative)
    masks = np.arange(1, 2**k - 1)
    bits = (masks[:, None] >> np.arange(k)) & 1
    mass = bits @ pos
    ok = mass + tv <= 1.0 + 1e-12
    if not ok.any():
        return math.inf
    kl = _binary_kl(np.minimum(mass[ok] + tv, 1.0), mass[ok])
    return float(kl.min())


def trials_to_detect(tv: float | None, *, false_alarm: float = 1e-9, power: float = 0.99,
                     law=None, alternative=None, method: str = "bound") -> int:
    """Trials needed before a bias of total-variation size ``tv`` fails a calibrated check.

    Model: the check rejects when ``G = 2 n KL(f || law)`` exceeds a threshold ``c``
    (:func:`detection_threshold` for ``method="bound"``, the one :func:`assert_law` uses;
    the asymptotic ``chi2.isf(false_alarm, k - 1)`` for ``method="asymptotic"``, the
    classical test). Under an alternative law ``alt``, ``G`` is approximately noncentral
    chi-square with ``k - 1`` degrees of freedom and noncentrality ``2 n KL(alt || law)``
    (:data:`scipy.stats.ncx2`). The answer is the smallest ``n`` with
    ``P(G > c) >= power``.

    Which alternative:

    * ``alternative`` given: that law (``tv`` may be ``None``). If it puts mass where
      ``law`` has none, the answer is exact: the first ``n`` at which a token of
      probability 0 appears with probability ``>= power``.
    * ``law`` given, ``alternative`` None: the *hardest* alternative at distance ``tv``,
      i.e. the one minimising ``KL(alt || law)``; by data processing it moves mass ``tv``
      between an event ``S`` and its complement, so the minimum is over subsets ``S``
      of a binary KL (exact for up to 16 tokens; Pinsker's ``2 tv^2`` beyond, which
      overstates the trials needed).
    * neither: the worst case over laws too, tested as a two-cell (binary event) test:
      an event of probability ``(1 - tv)/2`` moved to ``(1 + tv)/2``.

    Parameters
    ----------
    tv : float or None
        Size of the bias to detect, in (0, 1].
    false_alarm : float
        Probability that a correct sampler fails (default 1e-9).
    power : float
        Required probability of failing the biased sampler (default 0.99).
    law : array_like, shape (V,), optional
        The exact law the check compares with.
    alternative : array_like, shape (V,), optional
        The law the biased sampler follows.
    method : {"bound", "asymptotic"}
        Threshold of the check (see above).

    Returns
    -------
    int
        Number of trials (approximate: the false-alarm side is exact for ``"bound"``,
        the power side uses the noncentral chi-square approximation).

    Raises
    ------
    LawError
        Invalid laws, ``alternative`` without ``law``.
    ValueError
        ``false_alarm`` or ``power`` not in (0, 1), ``tv`` not in (0, 1], ``tv``
        inconsistent with ``alternative``, unknown method, or a ``tv`` that no law at
        this ``law`` can realise.

    Examples
    --------
    >>> trials_to_detect(0.15, law=[0.5, 0.3, 0.2])
    1041
    >>> trials_to_detect(None, law=[0.5, 0.3, 0.2], alternative=[0.35, 0.39, 0.26])
    1041
    """
    alpha = check_level(false_alarm, "false_alarm")
    beta = check_level(power, "power")
    if method not in ("bound", "asymptotic"):
        raise ValueError(f"method: must be 'bound' or 'asymptotic' (got {method!r})")
    lw = None if law is None else check_law(law, "law")
    if alternative is not None:
        if lw is None:
            raise LawError("alternative: requires law (the exact law the check compares with)")
        alt = check_law(alternative, "alternative")
        if alt.size != lw.size:
            raise LawError(f"alternative: vocabulary size {alt.size} does not match law ({lw.size})")
        dist = 0.5 * float(np.abs(alt - lw).sum())
        if tv is not None and abs(float(tv) - dist) > 1e-9:
            raise ValueError(f"tv: {tv!r} does not match TV(law, alternative) = {dist:.12g}")
        tv = dist
        outside = float(alt[lw == 0].sum())
        if outside > 0:
            return max(1, math.ceil(math.log1p(-beta) / math.log1p(-outside))) if outside < 1 else 1
        with np.errstate(divide="ignore", invalid="ignore"):
            pos = alt > 0
            kl = float(np.sum(alt[pos] * np.log(alt[pos] / lw[pos])))
    else:
        if tv is None:
            raise ValueError("tv: required unless alternative is given")
        tv = check_real(tv, "tv", "(0, 1]")
        if lw is not None and (lw > 0).sum() < 2:
            raise LawError("law: needs at least two tokens of positive probability to test")
        kl = _worst_case_kl(tv, lw)
    if not (tv > 0) or kl <= 0:
        raise ValueError("tv: must be > 0 (a sampler with no bias cannot be detected)")
    if not math.isfinite(kl):
        raise ValueError(f"tv: {tv} cannot be realised by a law on the support of law")
    k = 2 if lw is None else int((lw > 0).sum())
    if k < 2:
        raise LawError("law: needs at least two tokens of positive probability to test")
    dof = k - 1
    crit = detection_threshold(alpha, k) if method == "bound" else float(stats.chi2.isf(alpha, dof))

    def achieved(n: int) -> float:
        return float(stats.ncx2.sf(crit, dof, 2.0 * n * kl))

    hi = 1
    while achieved(hi) < beta:
        hi *= 2
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if achieved(mid) >= beta:
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class TvInterval:
    """Result of :func:`tv_ci`.

    Attributes
    ----------
    estimate : float
        Plug-in ``TV(f, law)`` (biased upwards: noise alone makes it positive).
    low, high : float
        Interval for ``TV(true sampler law, law)``.
    confidence : float
        Nominal coverage.
    method : str
        ``"bound"`` or ``"bootstrap"``.
    """

    estimate: float
    low: float
    high: float
    confidence: float
    method: str


def tv_ci(counts, law, confidence: float = 0.95, *, method: str = "bound",
          rng: np.random.Generator | None = None, resamples: int = 2000) -> TvInterval:
    """Confidence interval for the TV distance between a sampler's law and an exact law.

    ``method="bound"`` (default, no randomness): Weissman et al.'s inequality
    ``P(||f - pi||_1 >= eps) <= (2^V - 2) exp(-n eps^2 / 2)`` with
    ``eps = sqrt(2 ln((2^V - 2) / (1 - confidence)) / n)`` bounds the distance between
    the frequencies ``f`` and the sampler's true law ``pi``; by the triangle inequality
    ``|TV(f, law) - TV(pi, law)| <= eps / 2``, so ``[TV(f, law) - eps/2, TV(f, law) +
    eps/2]`` (clipped to [0, 1]) covers ``TV(pi, law)`` with probability at least
    ``confidence``, for every ``n``. Conservative, and loose for large ``V``.

    ``method="bootstrap"``: percentile interval of ``TV(f*, law)`` over ``resamples``
    multinomial resamples ``f*`` of ``f`` drawn with ``rng``. Approximate; shorter, but
    it inherits the upward bias of the plug-in estimate near 0.

    Parameters
    ----------
    counts : array_like of int, shape (V,)
        Observed counts of the sampler.
    law : array_like, shape (V,)
        The exact law.
    confidence : float
        Coverage in (0, 1).
    method : {"bound", "bootstrap"}
        See above.
    rng : numpy.random.Generator, optional
        Required for ``"bootstrap"``.
    resamples : int
        Bootstrap resamples, ``>= 100``.

    Returns
    -------
    TvInterval

    Raises
    ------
    LawError
        Invalid counts or law.
    ValueError
        Unknown method, ``confidence`` not in (0, 1), ``resamples < 100``.
    TypeError
        Bootstrap without a Generator ``rng``.

    References
    ----------
    Weissman et al. (2003), HPL-2003-97, Theorem 2.1.

    Examples
    --------
    >>> ci = tv_ci([70010, 77662, 52328], [0.5, 0.3, 0.2])
    >>> round(ci.estimate, 5), round(ci.low, 4), round(ci.high, 4)
    (0.14995, 0.1465, 0.1534)
    """
    conf = check_level(confidence, "confidence")
    c, lw = check_counts(counts, law)
    n = int(c.sum())
    f = c / n
    est = 0.5 * float(np.abs(f - lw).sum())
    if method == "bound":
        v = lw.size
        if v == 1:
            return TvInterval(est, est, est, conf, method)
        log_terms = v * math.log(2.0) + math.log1p(-2.0 ** (1 - v)) if v < 1000 else v * math.log(2.0)
        eps = math.sqrt(2.0 * (log_terms - math.log1p(-conf)) / n)
        return TvInterval(est, max(0.0, est - eps / 2), min(1.0, est + eps / 2), conf, method)
    if method == "bootstrap":
        if not isinstance(rng, np.random.Generator):
            raise TypeError("rng: bootstrap needs a numpy.random.Generator")
        b = check_int(resamples, "resamples", minimum=100)
        draws = rng.multinomial(n, f, size=b) / n
        tvs = 0.5 * np.abs(draws - lw).sum(axis=1)
        lo, hi = np.quantile(tvs, [(1 - conf) / 2, (1 + conf) / 2])
        return TvInterval(est, float(lo), float(hi), conf, method)
    raise ValueError(f"method: must be 'bound' or 'bootstrap' (got {method!r})")


def frequency_band(prob, n: int, *, false_alarm: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """Exact binomial band that an observed frequency leaves with probability <= false_alarm.

    For each probability ``p`` the band is ``[lo, hi] / n`` with ``lo`` the
    ``false_alarm/2`` quantile and ``hi`` the ``1 - false_alarm/2`` quantile of
    Binomial(n, p), so ``P(f < lo/n) + P(f > hi/n) <= false_alarm``.

    Parameters
    ----------
    prob : float or array_like
        Probabilities in [0, 1].
    n : int
        Trials, ``>= 1``.
    false_alarm : float
        Probability in (0, 1) of leaving the band for one probability (apply a union
        bound, e.g. ``false_alarm / V``, for all tokens at once).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        Lower and upper frequency bounds, same shape as ``prob``.

    Raises
    ------
    ValueError
        Invalid probabilities, ``n`` or ``false_alarm``.

    Examples
    --------
    >>> lo, hi = frequency_band(0.5, 200_000, false_alarm=0.05)
    >>> round(float(lo), 4), round(float(hi), 4)
    (0.4978, 0.5022)
    """
    n = check_int(n, "n", minimum=1)
    alpha = check_level(false_alarm, "false_alarm")
    pr = np.asarray(prob, dtype=np.float64)
    if not np.all(np.isfinite(pr)) or (pr < 0).any() or (pr > 1).any():
        raise ValueError("prob: must be probabilities in [0, 1]")
    dist = stats.binom(n, pr)
    lo = dist.ppf(alpha / 2) / n
    hi = dist.isf(alpha / 2) / n
    # ppf(alpha/2) is the smallest k with P(X <= k) >= alpha/2, so P(X < k) < alpha/2
    return np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)


def max_deviation_bound(law, n: int, *, false_alarm: float = 1e-9) -> float:
    """A bound on ``max_x |f(x) - law(x)|`` exceeded with probability <= false_alarm.

    Union bound over tokens of the exact binomial bands of :func:`frequency_band`
    (each at level ``false_alarm / V``).

    Parameters
    ----------
    law : array_like, shape (V,)
        The exact law.
    n : int
        Trials, ``>= 1``.
    false_alarm : float
        Probability in (0, 1).

    Returns
    -------
    float
        Maximal deviation (probability units).

    Raises
    ------
    LawError
        Invalid law.
    ValueError
        Invalid ``n`` or ``false_alarm``.

    Examples
    --------
    >>> round(max_deviation_bound([0.5, 0.3, 0.2], 200_000, false_alarm=0.05), 4)
    0.0027
    """
    lw = check_law(law, "law")
    alpha = check_level(false_alarm, "false_alarm")
    lo, hi = frequency_band(lw, n, false_alarm=alpha / lw.size)
    return float(np.max(np.maximum(lw - lo, hi - lw)))


def ratio_interval(base_time, base_tokens, spec_time, spec_tokens, *, seed,
                   confidence: float = 0.95, resamples: int = 2000) -> dict:
    """Throughput ratio of two settings over the same prompts, with a bootstrap interval
    over prompts.

    The ratio is ``(sum spec_tokens / sum spec_time) / (sum base_tokens / sum base_time)``:
    the speedup of a stream that sends these prompts one after the other. The interval
    resamples prompts (each prompt's four numbers together: a paired bootstrap) with
    :func:`scipy.stats.bootstrap`, BCa method.

    Parameters
    ----------
    base_time, base_tokens, spec_time, spec_tokens : array_like, shape (n,)
        Per prompt: seconds and completion tokens of the baseline and of the other setting.
    seed : int or sequence of int
        Seed of the resampling generator (:func:`numpy.random.default_rng`).
    confidence : float
        Confidence level, in (0, 1).
    resamples : int
        Bootstrap resamples.

    Returns
    -------
    dict
        ``speedup``, ``low``, ``high``, ``prompts`` (n), ``confidence``.

    Raises
    ------
    ValueError
        Arrays of different shapes, fewer than 2 prompts, non-positive times or tokens, a
        confidence outside (0, 1).

    References
    ----------
    Efron, B. (1987). Better bootstrap confidence intervals. JASA 82(397), 171-185 (BCa).
    """
    arrays = [np.asarray(a, dtype=float) for a in (base_time, base_tokens, spec_time,
                                                    spec_tokens)]
    names = ("base_time", "base_tokens", "spec_time", "spec_tokens")
    for a, name in zip(arrays, names):
        if a.ndim != 1 or a.shape != arrays[0].shape:
            raise ValueError(f"{name}: must be one-dimensional with one value per prompt, "
                             f"like base_time (shape {arrays[0].shape}, got {a.shape})")
        if not np.all(np.isfinite(a) & (a > 0)):
            raise ValueError(f"{name}: every value must be finite and positive")
    if arrays[0].size < 2:
        raise ValueError(f"base_time: needs at least 2 prompts (got {arrays[0].size})")
    if not (isinstance(confidence, float) and 0 < confidence < 1):
        raise ValueError(f"confidence: must be a float in (0, 1) (got {confidence!r})")
    resamples = check_int(resamples, "resamples")

    def ratio(bt, bk, st, sk, axis=-1):
        return (np.sum(sk, axis) / np.sum(st, axis)) / (np.sum(bk, axis) / np.sum(bt, axis))

    point = float(ratio(*arrays))
    if np.ptp([ratio(*(a[np.arange(a.size) != i] for a in arrays))
               for i in range(arrays[0].size)]) == 0:
        low = high = point                     # every prompt alike: nothing to resample
    else:
        res = stats.bootstrap(arrays, ratio, paired=True, vectorized=True, axis=-1,
                              confidence_level=confidence, n_resamples=resamples,
                              method="BCa", rng=np.random.default_rng(seed))
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return {"speedup": point, "low": low, "high": high, "prompts": int(arrays[0].size),
            "confidence": confidence}
