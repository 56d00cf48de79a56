"""Per-token exactness: every emitted token is one piece of evidence.

If a decoder is exact, each token it emits is a draw from the target's conditional law
given everything before it (prompt and earlier tokens). A response of n tokens is then n
pieces of evidence about exactness, not one. This module turns each token into a number
that is uniform on (0, 1) under exactness, and tests the numbers.

The randomised probability integral transform
---------------------------------------------
At a position with law ``p`` over cells (tokens, or top-k tokens and one pooled cell for
the rest) arranged in an order, let ``F(c-)`` be the mass of the cells before cell ``c``.
The emitted cell ``t`` and an independent ``V ~ U(0, 1)`` give

    U = F(t-) + V p(t)                                             (:func:`randomized_pit`)

which is exactly uniform on (0, 1) when ``t ~ p`` (Brockwell 2007; Diebold, Gunther and
Tay 1998 for forecasts; the randomisation makes it exact for discrete laws). Independence
across positions holds despite the sequential dependence of text: given everything
before position ``i``, ``U_i`` is uniform whatever that history is, so its law does not
depend on ``U_1 ... U_{i-1}`` and the values are independent and uniform (Rosenblatt
1952: the conditional transforms of a sequence are i.i.d. uniform). Each position may use
its own law, its own cells and its own order, as long as they are functions of the
history only. A request that stops early (end of sequence) is padded with fresh
uniforms from the same generator so that the number of values is fixed in advance.

Orderings, and which errors they see
------------------------------------
An error at position ``i`` replaces ``p_i`` by ``p'_i``. With the cells ordered so that
the ratio ``p'_i / p_i`` decreases along the order, the CDF of ``U_i`` minus the identity
is concave, vanishes at 0 and 1 and has maximum ``TV(p'_i, p_i)``; its integral, which is
``1/2 - E[U_i]``, is therefore at least ``TV / 2``. So every such error lowers the mean of
the transformed values by at least half its TV, in the same direction at every position.
Two orders match the errors of speculative decoding and of a wrong sampling setting:

* ``draft_over_target``: by ``q/p`` descending (draft over target): an error that puts
  the draft's mass where the target's should be (any mixture of ``p`` and ``q``) has a
  ratio that decreases along this order;
* ``target``: by ``p`` descending: a temperature or top-k/top-p mismatch has a ratio that
  is monotone in ``p`` (``p^(1/T - 1)``; a constant on the kept tokens and 0 elsewhere).

A test per order, combined with Holm (:func:`specdec.stats.gof.holm_adjust`): Holm's
step-down procedure controls the family-wise error under any dependence (the two orders'
statistics share the tokens). :func:`scipy.stats.false_discovery_control` is not used: it
is the Benjamini-Hochberg (or -Yekutieli) procedure, which controls the false discovery
rate, not the probability of one false alarm.

The test and its resolution
---------------------------
The statistic is the mean of the ``n`` values, tested two-sided
(:func:`mean_pvalue`): a uniform is sub-Gaussian with variance proxy 1/12 (its moment
generating function ``sinh(s/2)/(s/2) <= exp(s^2/24)``), so for every ``n``

    P(|mean - 1/2| >= d) <= 2 exp(-6 n d^2)

(a Chernoff bound, finite-sample, no asymptotics). Against the family "at every
position, mass delta moved along the order (the ratio ``p'/p`` monotone, TV = delta)",
the mean moves by at least delta / 2, and the test at level ``alpha`` over ``m`` orders
detects it with probability ``power`` once

    delta >= 2 eta + (sqrt(2 ln(2 m / alpha)) + z_power) / sqrt(3 n)    (:func:`detectable_tv`)

(normal approximation of the mean under the alternative, standard deviation
``1/sqrt(12 n)``; ``eta`` the tolerance below). Equality holds for a two-valued ratio
(mass delta moved proportionally from the cells after a cut to the cells before it, at any
cut). The mean is chosen over the Kolmogorov-Smirnov statistic by this power computation
(level terms only): the mean needs ``delta >= sqrt(2 ln(2/alpha) / (3 n))``; the
one-sided KS test with Massart's bound ``exp(-2 n d^2)`` needs a CDF deviation
``sqrt(ln(1/alpha) / (2 n))``, which the family gives between delta (cuts at the same
quantile at every position: KS 13% finer) and delta / 2 (cuts spread over positions: KS
1.7 times coarser, ``delta >= sqrt(2 ln(1/alpha) / n)``). Text puts the cut at a
different quantile at every position, so the mean is the safer choice.

Errors of other shapes
----------------------
An error whose ratio ``p'/p`` is monotone along neither ordering (another model's law, a
bug in one token's probability) can leave the mean at 1/2 while the transformed values
are far from uniform. Beside the mean, each ordering therefore gets a two-sided
Kolmogorov-Smirnov statistic ``D = sup |F_n(u) - u|`` (:func:`ks_pvalue`), with the
finite-sample bound of Dvoretzky, Kiefer and Wolfowitz with Massart's constant,
``P(D >= d) <= 2 exp(-2 n d^2)``; it sees any departure of the values' law from uniform
that is at least ``sqrt(ln(2 m / alpha) / (2 n))`` in CDF. Both statistics of every
ordering form one Holm family (``2 m`` tests), and the stated detectable TV is the mean's
at that family size: the KS tests add power against other shapes and cost the mean's
resolution about 2%.

Numerical disagreement
----------------------
Laws computed by numpy and the laws an engine samples (float32 kernels, another order of
summation) differ by a small TV ``eta`` per position. Any law within TV ``eta`` of ``p``
moves ``E[U]`` by at most ``eta`` (``|sum (p' - p) m| <= TV`` for cell midpoints
``m`` in [0, 1]), so the null hypothesis "the engine's law is within ``eta`` of the
computed one at every position" is tested with ``|mean - 1/2| - eta`` in place of
``|mean - 1/2|`` (``tolerance``; exact for ``eta = 0``, and a tiny approximation of the
variance proxy otherwise). The same law moves the values' CDF by at most ``eta`` at every
point, so the KS statistic is tested as ``D - eta``.

Used by :mod:`specdec.client.exactness` (served engines) and its command line.

References
----------
Rosenblatt (1952), Remarks on a multivariate transformation, Ann. Math. Statist. 23(3).
Diebold, Gunther, Tay (1998), Evaluating density forecasts, Int. Econ. Rev. 39(4), sec. 2.
Brockwell (2007), Universal residuals: a multivariate transformation, Stat. Prob. Letters
77(14) (the randomised transform for discrete laws).
Holm (1979), A simple sequentially rejective multiple test procedure, Scand. J. Statist. 6.
Massart (1990), The tight constant in the Dvoretzky-Kiefer-Wolfowitz inequality, Ann.
Probab. 18(3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
from scipy.special import ndtri

from specdec.laws import check_int, check_real
from specdec.stats.gof import holm_adjust

__all__ = ["ORDERINGS", "randomized_pit", "order_keys", "pooled_top_cells", "mean_pvalue", "laws_check",
           "ks_pvalue",
           "detectable_tv", "tokens_for", "PerTokenCheck", "pertoken_test", "response_laws"]

#: The orders of the cells this module knows (see the module docstring).
ORDERINGS = ("draft_over_target", "target")


def _laws_tokens(laws, tokens) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(laws, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] < 1:
        raise ValueError(f"laws: must have shape (N, C) with C >= 1 (got {p.shape})")
    if not np.all(np.isfinite(p)) or (p < 0).any():
        raise ValueError("laws: every probability must be finite and >= 0")
    t = np.asarray(tokens)
    if t.shape != (p.shape[0],) or not np.issubdtype(t.dtype, np.integer):
        raise ValueError(f"tokens: must be integers of shape ({p.shape[0]},) (got "
                         f"{t.dtype} {t.shape})")
    if p.shape[0] and (t.min() < 0 or t.max() >= p.shape[1]):
        raise ValueError(f"tokens: must lie in [0, {p.shape[1]}) (a cell of the law)")
    return p, t.astype(np.int64)


def randomized_pit(laws, tokens, v, keys=None) -> np.ndarray:
    """The randomised probability integral transform of emitted cells.

    ``U = F(t-) + V p(t)`` where ``F(t-)`` is the mass of the cells placed before ``t``:
    cells sorted by ``keys`` descending, ties by cell index ascending (``keys=None``: the
    cells' own order).

    Parameters
    ----------
    laws : array_like, shape (N, C)
        Law of each position over its C cells (rows sum to 1; not renormalised).
    tokens : array_like of int, shape (N,)
        Emitted cell at each position.
    v : array_like, shape (N,)
        Independent uniforms on [0, 1) (from an explicit generator).
    keys : array_like, shape (N, C), optional
        Order of the cells at each position, larger first.

    Returns
    -------
    numpy.ndarray, shape (N,)
        In [0, 1]; i.i.d. uniform when each token is drawn from its row's law and the
        rows and keys depend on earlier positions only (see the module docstring).

    Raises
    ------
    ValueError
        Shapes that do not match, negative or non-finite probabilities, tokens outside
        the cells, uniforms outside [0, 1].

    References
    ----------
    Brockwell (2007), eq. (1); Rosenblatt (1952).

    Examples
    --------
    >>> randomized_pit([[0.5, 0.3, 0.2]], [1], [0.5]).tolist()
    [0.65]
    >>> randomized_pit([[0.5, 0.3, 0.2]], [1], [0.5], keys=[[0, 1, 2]]).tolist()  # 2, 1, 0
    [0.35]
    """
    p, t = _laws_tokens(laws, tokens)
    v = np.asarray(v, dtype=np.float64)
    if v.shape != t.shape:
        raise ValueError(f"v: must have shape {t.shape} (got {v.shape})")
    if ((v < 0) | (v > 1) | np.isnan(v)).any():
        raise ValueError("v: uniforms must lie in [0, 1]")
    rows = np.arange(p.shape[0])
    if keys is None:
        before = np.cumsum(p, axis=1)[rows, t] - p[rows, t]
    else:
        k = np.asarray(keys, dtype=np.float64)
        if k.shape != p.shape:
            raise ValueError(f"keys: must have the laws' shape {p.shape} (got {k.shape})")
        if np.isnan(k).any():
            raise ValueError("keys: must not be NaN")
        kt = k[rows, t][:, None]
        idx = np.arange(p.shape[1])[None, :]
        first = (k > kt) | ((k == kt) & (idx < t[:, None]))
        before = np.where(first, p, 0.0).sum(axis=1)
    return np.minimum(before + v * p[rows, t], 1.0)


def mean_direction(ordering: str, mean: float) -> str:
    """What a mean of the transformed tokens off 1/2 says, along an ordering of
    :data:`ORDERINGS` (cells larger first, so a large value is a token late in the order).

    Parameters
    ----------
    ordering : str
    mean : float
        Mean of the randomised PIT values, in [0, 1].

    Returns
    -------
    str
        A plain phrase, e.g. for ``target`` above 1/2: the emitted tokens are less likely
        than the law says, as if sampled hotter or from another model.

    An ordering of the caller's own gets the generic reading (late or early in its order).

    Examples
    --------
    >>> mean_direction("target", 0.56)
    'above 1/2: the emitted tokens are less likely under the law than they should be, as if sampled hotter (or from a flatter law)'
    """
    above = mean > 0.5
    if ordering not in ORDERINGS:
        return (f"{'above' if above else 'below'} 1/2: the emitted tokens fall "
                f"{'later' if above else 'earlier'} in the {ordering!r} ordering than the "
                f"law puts them")
    if ordering == "target":
        return ("above 1/2: the emitted tokens are less likely under the law than they "
                "should be, as if sampled hotter (or from a flatter law)" if above else
                "below 1/2: the emitted tokens are more likely under the law than they "
                "should be, as if sampled colder or truncated")
    return ("above 1/2: the emitted tokens lean away from the draft (toward tokens it "
            "under-weights)" if above else
            "below 1/2: the emitted tokens lean toward the draft (mass moved to the "
            "tokens it over-weights, the error of a wrong acceptance rule)")


def order_keys(ordering: str, p, q=None) -> np.ndarray:
    """Keys (larger first) of an ordering of :data:`ORDERINGS`, for :func:`randomized_pit`.

    ``target``: ``p``. ``draft_over_target``: ``q / p``, ties broken by ``p``; a cell
    with ``p = 0`` goes last (it holds no mass, and a token emitted there is impossible).

    Parameters
    ----------
    ordering : str
    p : array_like, shape (N, C)
        Target laws.
    q : array_like, shape (N, C), optional
        Draft laws (``draft_over_target`` only).

    Returns
    -------
    numpy.ndarray, shape (N, C)

    Raises
    ------
    ValueError
        An unknown ordering, or ``draft_over_target`` without ``q`` of ``p``'s shape.
    """
    p = np.asarray(p, dtype=np.float64)
    if ordering == "target":
        return p.copy()
    if ordering != "draft_over_target":
        raise ValueError(f"ordering: must be one of {ORDERINGS} (got {ordering!r})")
    if q is None or np.shape(q) != p.shape:
        raise ValueError("q: the draft's laws, of the target's shape, are needed for "
                         "the draft_over_target ordering")
    q = np.asarray(q, dtype=np.float64)
    ratio = np.full(p.shape, -1.0)
    np.divide(q, p, out=ratio, where=p > 0)
    # rank by the ratio, then by p; the key is minus the rank (larger first)
    order = np.lexsort((-p, -ratio), axis=1)          # best first
    keys = np.empty_like(p)
    np.put_along_axis(keys, order, -np.arange(p.shape[1], dtype=np.float64)[None, :]
                      .repeat(p.shape[0], axis=0), axis=1)
    return keys


def pooled_top_cells(top_ids: Sequence[Sequence], top_probs: Sequence[Sequence[float]],
                     emitted: Sequence, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Laws over reported top-k tokens plus one pooled cell for the rest.

    Parameters
    ----------
    top_ids : sequence, one per position, of sequences of hashable token keys
        The tokens a server reported at each position (ids, or strings).
    top_probs : sequence of sequences of float
        Their probabilities (not log-probabilities).
    emitted : sequence of hashable
        The emitted token at each position.
    k : int, optional
        Keep the ``k`` most probable reported tokens of each position (servers such as
        vLLM add the sampled token to the top ``k``: that extra entry is chosen by the
        token and must not define the cells). Default: all reported.

    Returns
    -------
    laws : numpy.ndarray, shape (N, K + 1)
        Cell ``j < K`` the j-th kept token (most probable first, padded with zeros), cell
        ``K`` the rest, ``max(0, 1 - sum)``; rows renormalised when the reported
        probabilities sum above 1 by rounding.
    cells : numpy.ndarray of int, shape (N,)
        The emitted token's cell (``K`` when it is not among the kept tokens).

    Raises
    ------
    ValueError
        Lengths that differ, a position without reported tokens, negative probabilities.

    Examples
    --------
    >>> laws, cells = pooled_top_cells([["a", "b"]], [[0.25, 0.5]], ["c"])
    >>> laws.tolist(), cells.tolist()
    ([[0.5, 0.25, 0.25]], [2])
    """
    n = len(emitted)
    if len(top_ids) != n or len(top_probs) != n:
        raise ValueError(f"top_ids, top_probs: need one entry per emitted token ({n}), "
                         f"got {len(top_ids)} and {len(top_probs)}")
    if k is not None:
        k = check_int(k, "k", minimum=1)
    kept = []
    for i, (ids, ps) in enumerate(zip(top_ids, top_probs)):
        if len(ids) != len(ps) or not len(ids):
            raise ValueError(f"top_ids[{i}]: no reported tokens at position {i} (or ids "
                             f"and probabilities of different lengths)")
        ps = np.asarray(ps, dtype=np.float64)
        if not np.all(np.isfinite(ps)) or (ps < 0).any():
            raise ValueError(f"top_probs[{i}]: probabilities must be finite and >= 0")
        order = np.argsort(-ps, kind="stable")[:k]
        kept.append(([ids[j] for j in order], ps[order]))
    width = max((len(x[0]) for x in kept), default=0)
    laws = np.zeros((n, width + 1))
    cells = np.full(n, width, dtype=np.int64)
    for i, (ids, ps) in enumerate(kept):
        total = ps.sum()
        laws[i, :len(ps)] = ps / max(total, 1.0)
        laws[i, width] = max(0.0, 1.0 - total)
        try:
            cells[i] = ids.index(emitted[i])
        except ValueError:
            pass
    return laws, cells


def _unit_values(u, tolerance):
    """``u`` as a non-empty float array in [0, 1] and a checked ``tolerance`` (the inputs
    of :func:`mean_pvalue` and :func:`ks_pvalue`)."""
    u = np.asarray(u, dtype=np.float64).ravel()
    if u.size == 0:
        raise ValueError("u: need at least one value")
    if ((u < 0) | (u > 1) | np.isnan(u)).any():
        raise ValueError("u: values must lie in [0, 1]")
    return u, check_real(tolerance, "tolerance", "[0, 1]")


def mean_pvalue(u, tolerance: float = 0.0) -> float:
    """Two-sided p-value bound of the mean of values that are uniform under the null.

    ``min(1, 2 exp(-6 n d^2))`` with ``d = max(0, |mean(u) - 1/2| - tolerance)``: valid
    for every ``n`` (Chernoff bound with the uniform's variance proxy 1/12).

    Parameters
    ----------
    u : array_like, shape (n,)
        Values in [0, 1], n >= 1.
    tolerance : float
        Shift of the mean the null allows (numerical disagreement, >= 0).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        No values, values outside [0, 1], a negative tolerance.

    Examples
    --------
    >>> round(mean_pvalue([0.5] * 10), 6)
    1.0
    >>> round(mean_pvalue([0.4] * 100), 6)        # 2 exp(-6 * 100 * 0.01)
    0.004958
    """
    u, tolerance = _unit_values(u, tolerance)
    d = max(0.0, abs(float(u.mean()) - 0.5) - tolerance)
    return float(min(1.0, 2.0 * math.exp(-6.0 * u.size * d * d)))


def ks_pvalue(u, tolerance: float = 0.0) -> float:
    """Two-sided p-value bound of the Kolmogorov-Smirnov distance to the uniform law.

    ``min(1, 2 exp(-2 n d^2))`` with ``d = max(0, D - tolerance)``, ``D = sup |F_n(u) -
    u|`` the distance of the values' empirical CDF to the identity: valid for every ``n``
    (the Dvoretzky-Kiefer-Wolfowitz inequality with Massart's constant).

    Parameters
    ----------
    u : array_like, shape (n,)
        Values in [0, 1], n >= 1.
    tolerance : float
        CDF shift the null allows (numerical disagreement, >= 0).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        No values, values outside [0, 1], a negative tolerance.

    References
    ----------
    Massart (1990), The tight constant in the Dvoretzky-Kiefer-Wolfowitz inequality,
    Ann. Probab. 18(3). The statistic is :func:`scipy.stats.kstest`'s.

    Examples
    --------
    >>> ks_pvalue([0.5] * 100) < 1e-20              # every value at one point: D = 1/2
    True
    >>> round(ks_pvalue((np.arange(100) + 0.5) / 100), 6)
    1.0
    """
    u, tolerance = _unit_values(u, tolerance)
    d = max(0.0, _ks_distance(u) - tolerance)
    return float(min(1.0, 2.0 * math.exp(-2.0 * u.size * d * d)))


def detectable_tv(n: int, *, false_alarm: float, power: float = 0.9, orderings: int = 1,
                  tolerance: float = 0.0) -> float:
    """Per-token TV detected with probability ``power`` by :func:`pertoken_test`.

    ``2 tolerance + (sqrt(2 ln(2 m / false_alarm)) + z_power) / sqrt(3 n)`` for an error
    that moves mass along one of the ``m`` orderings at every one of ``n`` positions
    (ratio ``p'/p`` monotone along the order, in the same direction at every position;
    see the module docstring), delta being the TV averaged over the positions. Normal
    approximation of the mean under the alternative; checked by simulation in
    tests/test_pertoken.py.

    Parameters
    ----------
    n : int
        Transformed values (positions), >= 1.
    false_alarm : float
        Family-wise level, in (0, 1).
    power : float
        In (0, 1).
    orderings : int
        Number of orderings combined with Holm, m >= 1.
    tolerance : float
        The mean shift the null allows (>= 0).

    Returns
    -------
    float
        At most 1.

    Raises
    ------
    ValueError
        Arguments outside their ranges.

    Examples
    --------
    >>> round(detectable_tv(40_000, false_alarm=1e-6, orderings=2), 4)
    0.0196
    """
    n = check_int(n, "n", minimum=1)
    m = check_int(orderings, "orderings", minimum=1)
    a = check_real(false_alarm, "false_alarm", "(0, 1)")
    b = check_real(power, "power", "(0, 1)")
    eta = check_real(tolerance, "tolerance", "[0, 1]")
    z = float(ndtri(b))
    return float(min(1.0, max(2 * eta, 2 * eta + (math.sqrt(2 * math.log(2 * m / a)) + z)
                              / math.sqrt(3 * n))))


def tokens_for(resolution: float, *, false_alarm: float, power: float = 0.9,
               orderings: int = 1, tolerance: float = 0.0) -> int:
    """Fewest positions at which :func:`detectable_tv` is at most ``resolution``.

    The inverse of :func:`detectable_tv`:
    ``n = ceil(((sqrt(2 ln(2 m / false_alarm)) + z_power) / (sqrt(3) (resolution - 2
    tolerance)))^2)``, with ``m`` the tests of the Holm family (``orderings``; a
    :func:`pertoken_test` of ``k`` orderings has ``2 k``).

    Parameters
    ----------
    resolution : float
        The per-token TV to detect, in (2 tolerance, 1].
    false_alarm, power, orderings, tolerance
        As in :func:`detectable_tv`.

    Returns
    -------
    int
        Positions (emitted tokens), >= 1.

    Raises
    ------
    ValueError
        Arguments outside their ranges, or ``resolution <= 2 tolerance`` (no number of
        tokens resolves an error the tolerance already allows).

    Examples
    --------
    >>> tokens_for(0.02, false_alarm=1e-6, orderings=4)
    39904
    >>> detectable_tv(39904, false_alarm=1e-6, orderings=4) <= 0.02
    True
    """
    if isinstance(resolution, (bool, str)):
        raise ValueError(f"resolution: must be a real number in (0, 1] (got {resolution!r})")
    r = check_real(resolution, "resolution", "(0, 1]")
    m = check_int(orderings, "orderings", minimum=1)
    a = check_real(false_alarm, "false_alarm", "(0, 1)")
    b = check_real(power, "power", "(0, 1)")
    eta = check_real(tolerance, "tolerance", "[0, 1]")
    if r <= 2 * eta:
        raise ValueError(f"resolution: must exceed twice the tolerance ({2 * eta:.3g}); got "
                         f"{r!r}")
    if r >= 1.0:                                  # detectable_tv is capped at 1
        return 1
    root = (math.sqrt(2 * math.log(2 * m / a)) + float(ndtri(b))) / (math.sqrt(3) * (r - 2 * eta))
    if not root ** 2 < 1e15:
        raise ValueError(f"resolution: {r!r} is too close to twice the tolerance ({2 * eta:.3g}) "
                         f"or too small: it would need more than 10^15 tokens")
    n = max(1, math.ceil(root ** 2))
    kw = dict(false_alarm=a, power=b, orderings=m, tolerance=eta)
    for _ in range(8):                            # floating point: the fewest that reach it
        if n > 1 and detectable_tv(n - 1, **kw) <= r:
            n -= 1
        elif detectable_tv(n, **kw) > r:
            n += 1
        else:
            break
    return n


@dataclass(frozen=True)
class PerTokenCheck:
    """Result of :func:`pertoken_test` (one served configuration).

    Attributes
    ----------
    passed : bool
        The calibrated verdict: False with probability at most ``false_alarm`` for an
        exact decoder (within ``tolerance``).
    pvalue : float
        Holm-adjusted p-value of the family (the smallest adjusted one); 0 when a token
        was emitted where the law puts no mass.
    pvalues, adjusted : dict
        Per test of the Holm family: the raw p-value bound and the Holm-adjusted one; the
        mean test of an ordering is keyed by its name, its Kolmogorov-Smirnov test by
        ``"ks:" + name``.
    means : dict
        Per ordering, the mean of the transformed values.
    tokens : int
        Emitted tokens transformed (the evidence).
    positions : int
        Values tested (tokens plus the padding of requests that stopped early).
    requests : int
    impossible : int
        Tokens emitted in a cell of probability 0 (any is a failure).
    false_alarm, power, tolerance : float
    detectable_tv : float
        :func:`detectable_tv` at these positions, scaled by ``positions / tokens`` (the
        padding carries no evidence).
    message : str
    extra : dict
        Whatever the caller measured beside (seconds, the measured disagreement...).
    """

    passed: bool
    pvalue: float
    pvalues: Mapping[str, float]
    adjusted: Mapping[str, float]
    means: Mapping[str, float]
    tokens: int
    positions: int
    requests: int
    impossible: int
    false_alarm: float
    power: float
    tolerance: float
    detectable_tv: float
    message: str = ""
    extra: Mapping = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready dict of every field."""
        return {k: (dict(v) if isinstance(v, Mapping) else v)
                for k, v in self.__dict__.items()}


def pertoken_test(pits: Mapping[str, np.ndarray], *, tokens: int, requests: int,
                  impossible: int = 0, false_alarm: float = 1e-6, power: float = 0.9,
                  tolerance: float = 0.0, extra: Mapping | None = None) -> PerTokenCheck:
    """Test transformed values of several orderings for uniformity, Holm over orderings.

    Parameters
    ----------
    pits : mapping of str to array_like, shape (n,)
        Per ordering, the values of :func:`randomized_pit` (same positions in each).
    tokens : int
        How many of the n values come from emitted tokens (the rest is padding).
    requests : int
    impossible : int
        Tokens emitted where the law puts no mass.
    false_alarm : float
        Family-wise level, in (0, 1).
    power : float
        For ``detectable_tv``.
    tolerance : float
        Per-token TV the null allows (numerical disagreement), >= 0.
    extra : mapping, optional
        Stored in the result.

    Returns
    -------
    PerTokenCheck

    Raises
    ------
    ValueError
        No ordering, an ordering named ``"ks:..."``, orderings with different numbers of
        values, ``tokens`` outside [1, n], ``impossible`` outside [0, tokens], bad levels.
    """
    if not pits:
        raise ValueError("pits: need at least one ordering")
    reserved = [k for k in pits if str(k).startswith("ks:")]
    if reserved:
        raise ValueError(f"pits: an ordering's name may not start with 'ks:', the prefix of "
                         f"the KS tests' keys (got {reserved[0]!r})")
    arrays = {k: np.asarray(v, dtype=np.float64).ravel() for k, v in pits.items()}
    sizes = {a.size for a in arrays.values()}
    if len(sizes) != 1:
        raise ValueError(f"pits: every ordering needs the same number of values "
                         f"(got {sorted(sizes)})")
    (n,) = sizes
    tokens = check_int(tokens, "tokens", minimum=1, maximum=max(n, 1))
    requests = check_int(requests, "requests", minimum=1)
    impossible = check_int(impossible, "impossible", minimum=0, maximum=tokens)
    # one Holm family: the mean and the KS distance of every ordering
    dtv = detectable_tv(n, false_alarm=false_alarm, power=power, orderings=2 * len(arrays),
                        tolerance=tolerance)
    orders = list(arrays)
    names = orders + [f"ks:{k}" for k in orders]
    raw = np.array([mean_pvalue(arrays[k], tolerance) for k in orders]
                   + [ks_pvalue(arrays[k], tolerance) for k in orders])
    adj = holm_adjust(raw)
    if impossible:
        adj = np.zeros_like(adj)
    pvalue = float(adj.min())
    passed = bool(pvalue > false_alarm)
    means = {k: float(arrays[k].mean()) for k in orders}
    if passed:
        message = ""
    elif impossible:
        message = (f"{impossible} of {tokens} tokens were emitted where the law puts no "
                   f"mass (a truncation the law does not have?)")
    else:
        worst = names[int(np.argmin(adj))]
        order = worst.removeprefix("ks:")
        lean = f"mean {means[order]:.4f}, {mean_direction(order, means[order])}"
        what = (f"Kolmogorov-Smirnov distance {_ks_distance(arrays[order]):.4f} to the "
                f"uniform law ({lean})" if worst.startswith("ks:") else
                f"{lean} (1/2 under exactness)")
        message = (f"the transformed tokens are not uniform along the {order!r} ordering: "
                   f"{what}, Holm-adjusted p-value {float(adj.min()):.2e} <= {false_alarm:g}")
    return PerTokenCheck(passed=passed, pvalue=pvalue,
                         pvalues=dict(zip(names, raw.tolist())),
                         adjusted=dict(zip(names, adj.tolist())), means=means,
                         tokens=tokens, positions=n, requests=requests, impossible=impossible,
                         false_alarm=float(false_alarm), power=float(power),
                         tolerance=float(tolerance),
                         detectable_tv=float(min(1.0, dtv * n / tokens)), message=message,
                         extra=dict(extra or {}))


def _ks_distance(u) -> float:
    """The Kolmogorov-Smirnov distance of values in [0, 1] to the uniform law."""
    from scipy import stats

    return float(stats.kstest(np.asarray(u, dtype=np.float64).ravel(), "uniform").statistic)


def response_laws(model, prompt_tokens, tokens, settings) -> np.ndarray:
    """The law of every emitted position of one response, one forward pass.

    Parameters
    ----------
    model : specdec.nn.Transformer
    prompt_tokens : array_like of int, shape (P,), P >= 1
    tokens : array_like of int, shape (n,)
        The response (emitted tokens, in order).
    settings : specdec.decode.SamplingSettings
        Temperature, top-k, top-p (temperature > 0).

    Returns
    -------
    numpy.ndarray, shape (n, V)
        Row ``i``: the law of token ``i`` given the prompt and tokens ``0 .. i-1``.

    Raises
    ------
    ValueError
        An empty prompt, or prompt and response longer than the model's context.
    """
    prompt = np.asarray(prompt_tokens, dtype=np.int64).ravel()
    resp = np.asarray(tokens, dtype=np.int64).ravel()
    if prompt.size == 0:
        raise ValueError("prompt_tokens: need at least one token")
    if prompt.size + resp.size - 1 > model.config.context:
        raise ValueError(f"tokens: prompt ({prompt.size}) + response ({resp.size}) exceed "
                         f"the context of {model.name} ({model.config.context})")
    if resp.size == 0:
        return np.zeros((0, model.config.vocab_size))
    seq = np.concatenate([prompt, resp[:-1]])
    logits = model.forward(seq[None])[0, prompt.size - 1:]
    return settings.laws(logits)


def laws_check(p_laws: Sequence[np.ndarray], tokens: Sequence[np.ndarray], *,
               max_tokens: int, rng, q_laws: Sequence[np.ndarray] | None = None,
               false_alarm: float = 1e-6, power: float = 0.9, tolerance: float = 0.0,
               extra: Mapping | None = None) -> PerTokenCheck:
    """Per-token check of responses whose laws the caller computed (any engine's weights).

    For each response ``r``: ``p_laws[r]`` (and ``q_laws[r]``) hold the target's (the
    draft's) law of every emitted position; each token is transformed along the orderings
    ``draft_over_target`` (when ``q_laws`` is given) and ``target``
    (:func:`randomized_pit`, uniforms from ``rng``), a response that stopped before
    ``max_tokens`` is padded with fresh uniforms (the same padding for every ordering, so
    the number of values is fixed in advance), and :func:`pertoken_test` decides.

    Parameters
    ----------
    p_laws : sequence of numpy.ndarray, each shape (n_r, V)
        Row ``i`` of response ``r``: the law the decoder should sample token ``i`` from,
        given the prompt and tokens ``0 .. i-1`` (the same temperature, top-k, top-p).
    tokens : sequence of array_like of int, each shape (n_r,)
        The emitted tokens, ``n_r <= max_tokens``.
    max_tokens : int
        Positions per response (the padding's length).
    rng : numpy.random.Generator
    q_laws : sequence of numpy.ndarray, optional
        The draft's laws, shaped like ``p_laws`` (for the ``draft_over_target`` order).
    false_alarm, power, tolerance : float
        See :func:`pertoken_test`.
    extra : mapping, optional
        Stored on the result.

    Returns
    -------
    PerTokenCheck

    Raises
    ------
    ValueError
        No responses, ``p_laws``/``tokens``/``q_laws`` of different lengths or shapes, a
        row of ``p_laws`` or ``q_laws`` that is not a law (finite, non-negative, summing to
        1 within 1e-6), token ids that are not integers in [0, V), a response longer than
        ``max_tokens``, no token at all.

    References
    ----------
    Rosenblatt (1952); Brockwell (2007), randomised PIT for discrete laws; see the module
    docstring.
    """
    from specdec.verify import check_rng

    rng = check_rng(rng)
    max_tokens = check_int(max_tokens, "max_tokens", minimum=1)
    if len(p_laws) == 0:
        raise ValueError("p_laws: need at least one response")
    if len(tokens) != len(p_laws) or (q_laws is not None and len(q_laws) != len(p_laws)):
        raise ValueError(f"p_laws, tokens, q_laws: need one entry per response each (got "
                         f"{len(p_laws)}, {len(tokens)}"
                         f"{'' if q_laws is None else f', {len(q_laws)}'})")
    names = ("draft_over_target", "target") if q_laws is not None else ("target",)
    values = {k: [] for k in names}
    lengths, impossible = [], 0

    def checked(law, toks, where):
        """_laws_tokens (finite, non-negative, ids in range), rows summing to 1, named."""
        try:
            law, toks = _laws_tokens(law, toks)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if law.size and np.abs(law.sum(axis=1) - 1).max() > 1e-6:
            raise ValueError(f"{where}: every row must be a law (summing to 1 within 1e-6)")
        return law, toks

    for r, (p, toks) in enumerate(zip(p_laws, tokens)):
        toks = np.asarray(toks)
        if toks.size and np.issubdtype(toks.dtype, np.floating) \
                and np.all(toks == np.round(toks)):
            toks = toks.astype(np.int64)          # integral floats, as check_int takes them
        toks = toks.ravel() if toks.size else np.zeros(0, dtype=np.int64)
        p = np.asarray(p, dtype=np.float64)
        if p.ndim != 2 or p.shape[0] != toks.size:
            raise ValueError(f"p_laws[{r}]: must have shape (tokens, V) = ({toks.size}, V) "
                             f"(got {p.shape})")
        p, toks = checked(p, toks, f"p_laws[{r}], tokens[{r}]")
        if toks.size > max_tokens:
            raise ValueError(f"tokens[{r}]: {toks.size} tokens, more than max_tokens "
                             f"({max_tokens})")
        q = None
        if q_laws is not None:
            q = np.asarray(q_laws[r], dtype=np.float64)
            if q.shape != p.shape:
                raise ValueError(f"q_laws[{r}]: must have the shape of p_laws[{r}] "
                                 f"{p.shape} (got {q.shape})")
            q, _ = checked(q, toks, f"q_laws[{r}]")
        v = rng.random(toks.size)
        if toks.size:
            impossible += int((p[np.arange(toks.size), toks] <= 0).sum())
        for k in names:
            values[k].append(randomized_pit(p, toks, v, order_keys(k, p, q))
                             if toks.size else np.zeros(0))
        lengths.append(int(toks.size))
    if not sum(lengths):
        raise ValueError("tokens: no tokens were emitted (nothing to test)")
    pads = [rng.random(max_tokens - n) for n in lengths]
    pits = {k: np.concatenate([x for pair in zip(values[k], pads) for x in pair])
            for k in names}
    return pertoken_test(pits, tokens=sum(lengths), requests=len(p_laws),
                         impossible=impossible, false_alarm=false_alarm, power=power,
                         tolerance=tolerance, extra={"max_tokens": max_tokens,
                                                     **dict(extra or {})})

