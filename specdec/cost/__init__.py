"""Cost model of speculative decoding: tokens per cycle E, speedup S, best draft length.

Exactness (the emitted law equals the target's) says nothing about time. Time is a
separate model with its own assumptions:

1. **Acceptances.** In the simplest model each proposal is accepted independently with the
   same probability ``alpha`` and nothing stops a cycle early (no EOS, no length limit).
   The cycle keeps at least ``i`` proposals with probability ``alpha ** i``, so, summing the
   tails of the number of emitted tokens ``N`` (``P(N >= i + 1) = alpha ** i``)::

       E = sum_{i=0}^{gamma} alpha ** i = (1 - alpha ** (gamma + 1)) / (1 - alpha)

   (``gamma + 1`` when ``alpha = 1``, 1 when ``alpha = 0``). In general,
   ``E = 1 + sum_{i=1}^{gamma} P(first i proposals accepted)``
   (:func:`expected_tokens_joint`); replacing those joint probabilities by powers of a
   mean ignores dependence between positions and the selection of prefixes.
2. **Costs**, in units of one ordinary target step ``T``: verifying ``gamma`` tokens costs
   ``g(gamma)`` (1 in the simplest model), each draft token costs ``c``, and other
   per-cycle work (sampling, scheduling, transfers) costs ``overhead``. The speedup over
   plain decoding (one token per target step) is::

       S = E / (g(gamma) + c * gamma + overhead)

Wherever a function takes ``alpha`` it also takes a workload of :mod:`specdec.cost.workloads`
(acceptance that depends on context or position; a constant alpha is the workload
:class:`specdec.cost.workloads.ConstantWorkload`), with ``E`` its long-run tokens per cycle:
one ``expected_tokens``, ``speedup``, ``best_gamma``, ``lengthening_pays`` for both.
Used in Chapters 6, 7 and 8.

All functions broadcast over numpy arrays (``alpha``, ``gamma``, ``c``), return a Python
``float`` for scalar input and raise a ``ValueError`` naming the argument on invalid
input (none of these is a law, so never :class:`specdec.laws.LawError`): ``alpha``
outside [0, 1], ``c < 0``, ``gamma < 1`` or non-integer, a non-positive verification
cost, NaN or infinity anywhere; a ``TypeError`` for a value that is not a number.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023, Sec. 3.1 (eq. 1, expected tokens per cycle) and
   Sec. 3.3 (walltime improvement ``(1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))``).
.. [2] Z. Sun et al., "Block Verification Accelerates Speculative Decoding", ICLR 2025,
   arXiv:2403.10444 (E depends on the verification rule; token-wise verification is
   assumed here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from specdec.laws import check_int
from specdec.cost.workloads import Workload

__all__ = [
    "expected_tokens",
    "expected_tokens_joint",
    "verification_cost",
    "cycle_cost",
    "speedup",
    "speedup_joint",
    "Sweep",
    "sweep",
    "BestGamma",
    "best_gamma",
    "Marginal",
    "marginal_gain",
    "lengthening_pays",
    "ARTICLE_GAMMAS",
    "ARTICLE_ALPHAS",
    "ARTICLE_CS",
]

#: The article's sweep (Sec. 6): draft lengths 1..16, alpha in {0.3, 0.7, 0.9}, c in {0.05, 0.20}.
ARTICLE_GAMMAS: tuple[int, ...] = tuple(range(1, 17))
ARTICLE_ALPHAS: tuple[float, ...] = (0.3, 0.7, 0.9)
ARTICLE_CS: tuple[float, ...] = (0.05, 0.20)

GammaCost = float | Callable[[int], float] | None


def _real(x, name: str, *, lo: float | None = None, hi: float | None = None, rule: str = "") -> np.ndarray:
    if isinstance(x, (str, bytes)) or np.asarray(x).dtype.kind in "USb":
        raise TypeError(f"{name}: must be a real number or array of them (got {x!r})")
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: must be a real number or array of them (got {x!r})") from None
    if arr.size == 0:
        raise ValueError(f"{name}: must not be empty")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name}: must be finite (got {arr[~np.isfinite(arr)].flat[0]})")
    if (lo is not None and (arr < lo).any()) or (hi is not None and (arr > hi).any()):
        bad = arr[(arr < (lo if lo is not None else -np.inf)) | (arr > (hi if hi is not None else np.inf))].flat[0]
        raise ValueError(f"{name}: must be {rule} (got {bad:g})")
    return arr


def _alpha(alpha, name: str = "alpha") -> np.ndarray:
    return _real(alpha, name, lo=0.0, hi=1.0, rule="a probability in [0, 1]")


def _c(c, name: str = "c") -> np.ndarray:
    return _real(c, name, lo=0.0, rule=">= 0 (cost of one draft token in target steps)")


def _overhead(overhead) -> np.ndarray:
    return _real(overhead, "overhead", lo=0.0, rule=">= 0 (per-cycle cost in target steps)")


def _gamma(gamma, name: str = "gamma") -> np.ndarray:
    arr = np.asarray(gamma)
    if arr.size == 0:
        raise ValueError(f"{name}: must not be empty")
    if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"{name}: must be an integer >= 1 (got {gamma!r})")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.isfinite(arr).all() or (arr != np.round(arr)).any():
            raise ValueError(f"{name}: must be an integer >= 1 (got {gamma!r})")
    if (arr < 1).any():
        raise ValueError(f"{name}: must be an integer >= 1 (got {arr[arr < 1].flat[0]:g})")
    return arr.astype(np.int64)


def _broadcast(**arrays) -> None:
    """Refuse arguments whose shapes do not broadcast together, naming them and their shapes."""
    shapes = {name: np.shape(a) for name, a in arrays.items()}
    try:
        np.broadcast_shapes(*shapes.values())
    except ValueError:
        raise ValueError(f"{', '.join(shapes)}: shapes "
                         f"{', '.join(str(s) for s in shapes.values())} do not broadcast "
                         f"together (numpy's broadcasting rules)") from None


def _out(x: np.ndarray):
    x = np.asarray(x)
    return float(x) if x.ndim == 0 else x


def _powers(a: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``a ** k`` for a in [0, 1] and integer k >= 1."""
    return np.power(a, k)


def _workload_tokens(workload: Workload, gam: np.ndarray) -> np.ndarray:
    """Long-run ``E(gamma) = 1 + sum_{i <= gamma} J_i`` of a workload at each ``gamma``."""
    if workload.carried:                   # the law of a cycle depends on gamma
        vals = {k: 1.0 + float(workload.joint(k).sum()) for k in np.unique(gam).tolist()}
    else:                                  # one tail sequence serves every gamma
        tail = np.concatenate(([1.0], 1.0 + np.cumsum(workload.joint(int(gam.max())))))
        vals = {k: float(tail[k]) for k in np.unique(gam).tolist()}
    return np.vectorize(vals.__getitem__, otypes=[float])(gam) if gam.ndim else np.asarray(vals[int(gam)])


def expected_tokens(acceptance, gamma):
    """Expected tokens emitted per cycle (Leviathan eq. 1 for a constant alpha).

    For a constant ``alpha``: ``E = sum_{i=0}^{gamma} alpha^i = (1 - alpha^(gamma+1)) /
    (1 - alpha)``, with the limits ``E = gamma + 1`` at ``alpha = 1`` and ``E = 1`` at
    ``alpha = 0``, computed as ``-expm1((gamma + 1) log1p(alpha - 1)) / (1 - alpha)`` so
    that it stays accurate as ``alpha -> 1``. For a workload
    (:mod:`specdec.cost.workloads`): ``1 + sum_i J_i`` over its long-run cycles (a Markov
    renewal-reward average when the regime is carried across cycles).

    Parameters
    ----------
    acceptance : float, array_like or Workload
        Acceptance probability ``alpha`` of each proposal, in [0, 1], or a workload.
    gamma : int or array_like of int
        Draft length, >= 1. Broadcasts against ``alpha``.

    Returns
    -------
    float or numpy.ndarray
        Tokens per cycle, in ``[1, gamma + 1]``.

    Raises
    ------
    ValueError
        ``alpha`` outside [0, 1] or not finite; ``gamma`` not an integer >= 1.

    References
    ----------
    Leviathan et al. (2023), Sec. 3.1, eq. (1).

    Examples
    --------
    >>> round(expected_tokens(0.7, 6), 6)
    3.058819
    >>> expected_tokens(1.0, 4), expected_tokens(0.0, 4)
    (5.0, 1.0)
    >>> from specdec.cost.workloads import bursty_workload
    >>> round(expected_tokens(bursty_workload(), 6), 3), round(expected_tokens(bursty_workload(carry=False), 6), 3)
    (2.825, 3.754)
    """
    g = _gamma(gamma)
    if isinstance(acceptance, Workload):
        return _out(_workload_tokens(acceptance, g))
    a = _alpha(acceptance)
    _broadcast(alpha=a, gamma=g)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = -np.expm1((g + 1) * np.log1p(a - 1.0)) / (1.0 - a)
    return _out(np.where(a == 1.0, g + 1.0, e))


def _joint(joint, *, name: str = "joint") -> np.ndarray:
    arr = _real(joint, name, lo=0.0, hi=1.0, rule="probabilities in [0, 1]")
    if arr.ndim < 1 or arr.shape[-1] < 1:
        raise ValueError(f"{name}: must have shape (..., gamma) with gamma >= 1 (got shape {arr.shape})")
    if (np.diff(arr, axis=-1) > 1e-12).any():
        raise ValueError(
            f"{name}: P(first i accepted) must be non-increasing in i (accepting the first i + 1 "
            "requires accepting the first i)"
        )
    return arr


def expected_tokens_joint(joint):
    """Expected tokens per cycle from the joint acceptance probabilities.

    ``E = 1 + sum_{i=1}^{gamma} P(first i proposals accepted)``: one token is always
    emitted (a residual or bonus draw, or EOS cuts the cycle), and the ``i``-th drafted
    token is emitted exactly when the first ``i`` proposals are accepted. Valid for any
    dependence between positions; with independent acceptances ``P(first i) = alpha^i``
    and this is :func:`expected_tokens`.

    Parameters
    ----------
    joint : array_like, shape (..., gamma)
        ``joint[..., i - 1] = P(first i accepted)``, non-increasing in ``i``, in [0, 1].

    Returns
    -------
    float or numpy.ndarray, shape (...)
        Tokens per cycle.

    Raises
    ------
    ValueError
        Empty, out of [0, 1], not finite, or increasing entries.

    References
    ----------
    Leviathan et al. (2023), Sec. 3.1 (the tail-sum argument behind eq. 1).

    Examples
    --------
    >>> expected_tokens_joint([0.7, 0.49, 0.343])
    2.533
    """
    return _out(1.0 + _joint(joint).sum(axis=-1))


def verification_cost(gamma, g: GammaCost = None):
    """Cost ``g(gamma)`` of verifying a block, in target steps.

    Parameters
    ----------
    gamma : int or array_like of int
        Draft length(s), >= 1.
    g : None, float or callable
        ``None``: 1 (the block costs one ordinary target step). A number: that constant.
        A callable: ``g(gamma)`` evaluated for each distinct draft length (called with a
        Python ``int``).

    Returns
    -------
    float or numpy.ndarray
        Positive costs, shaped like ``gamma``.

    Raises
    ------
    ValueError
        Invalid ``gamma``, or a cost that is not finite and > 0.

    Examples
    --------
    >>> verification_cost(6), verification_cost(6, 3), verification_cost(6, lambda k: 1 + 0.1 * k)
    (1.0, 3.0, 1.6)
    """
    gam = _gamma(gamma)
    if g is None:
        out = np.ones(gam.shape)
    elif callable(g):
        vals = {}
        for k in np.unique(gam).tolist():
            try:
                v = float(g(int(k)))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"g: must return a real number for gamma = {k} ({exc})") from None
            vals[k] = v
        out = np.vectorize(vals.__getitem__, otypes=[float])(gam) if gam.ndim else np.asarray(vals[int(gam)])
    else:
        out = np.broadcast_to(_real(g, "g"), gam.shape).astype(float)
    if not np.isfinite(out).all() or (out <= 0).any():
        raise ValueError(f"g: verification cost must be finite and > 0 target steps (got {np.asarray(out).flat[0]:g})")
    return _out(out)


def cycle_cost(gamma, c, *, g: GammaCost = None, overhead=0.0):
    """Duration of one cycle in target steps: ``g(gamma) + c * gamma + overhead``.

    Raises
    ------
    ValueError
        Invalid ``gamma``, ``c < 0``, ``overhead < 0``, invalid ``g``.

    Examples
    --------
    >>> cycle_cost(6, 0.05)
    1.3
    """
    gam = _gamma(gamma)
    cost_c, extra = _c(c), _overhead(overhead)
    _broadcast(gamma=gam, c=cost_c, overhead=extra)
    return _out(np.asarray(verification_cost(gam, g)) + cost_c * gam + extra)


def speedup(acceptance, gamma, c, *, g: GammaCost = None, overhead=0.0):
    """Expected speedup over plain decoding: ``S = E / (g(gamma) + c gamma + overhead)``.

    A speedup below 1 means the method is slower than plain decoding even though its
    output law is exact. With a workload, ``E`` is its long-run tokens per cycle and the
    ratio is the long-run throughput ratio (every cycle costs the same, so the
    renewal-reward average of tokens per cycle over the cycle cost is exact).

    Parameters
    ----------
    acceptance : float, array_like or Workload
        Acceptance probability per proposal ``alpha`` in [0, 1] (independent, constant),
        or a :class:`specdec.cost.workloads.Workload`.
    gamma : int or array_like of int
        Draft length, >= 1.
    c : float or array_like
        Cost of one draft token, in target steps (>= 0).
    g : None, float or callable, keyword-only
        Verification cost of the block (see :func:`verification_cost`); default 1.
    overhead : float or array_like, keyword-only
        Other per-cycle costs, in target steps (>= 0).

    Returns
    -------
    float or numpy.ndarray
        Speedup (ratio of throughputs), broadcast over the inputs.

    Raises
    ------
    ValueError
        ``alpha`` outside [0, 1], ``c < 0``, ``gamma < 1``, ``overhead < 0``, ``g <= 0``,
        or non-finite input.

    References
    ----------
    Leviathan et al. (2023), Sec. 3.3 (Theorem 3.8 for ``g = 1``, ``overhead = 0``).

    Examples
    --------
    >>> round(speedup(0.7, 6, 0.05), 3), round(speedup(0.7, 3, 0.20), 3)
    (2.353, 1.583)
    >>> round(speedup(0.7, 6, 0.05, g=3), 3)
    0.927
    >>> from specdec.cost.workloads import ConstantWorkload
    >>> speedup(ConstantWorkload(0.7), 6, 0.05) == speedup(0.7, 6, 0.05)
    True
    """
    gam = _gamma(gamma)
    tokens = np.asarray(expected_tokens(acceptance, gam))
    cost = np.asarray(cycle_cost(gam, c, g=g, overhead=overhead))
    if not isinstance(acceptance, Workload):
        _broadcast(alpha=_alpha(acceptance), gamma=gam, c=_c(c), overhead=_overhead(overhead))
    return _out(tokens / cost)


def speedup_joint(joint, c, *, g: GammaCost = None, overhead=0.0):
    """Speedup from joint acceptance probabilities (any dependence between positions).

    ``S = (1 + sum_i P(first i accepted)) / (g(gamma) + c gamma + overhead)`` with
    ``gamma = joint.shape[-1]``.

    Examples
    --------
    >>> round(speedup_joint([0.7] * 1, 0.0), 6)
    1.7
    """
    arr = _joint(joint)
    gam = arr.shape[-1]
    return _out(np.asarray(expected_tokens_joint(arr)) / np.asarray(cycle_cost(gam, c, g=g, overhead=overhead)))


@dataclass(frozen=True)
class Sweep:
    """Expected tokens and speedup over a grid.

    Attributes
    ----------
    alphas : numpy.ndarray, shape (A,)
    gammas : numpy.ndarray of int, shape (G,)
    cs : numpy.ndarray, shape (C,)
    expected_tokens : numpy.ndarray, shape (A, G)
        Tokens per cycle.
    speedup : numpy.ndarray, shape (A, C, G)
        Speedup.
    best_gamma : numpy.ndarray of int, shape (A, C)
        Draft length maximising the speedup on the grid (the smallest one on ties).
    best_speedup : numpy.ndarray, shape (A, C)
        The maximal speedup on the grid.
    """

    alphas: np.ndarray
    gammas: np.ndarray
    cs: np.ndarray
    expected_tokens: np.ndarray
    speedup: np.ndarray
    best_gamma: np.ndarray
    best_speedup: np.ndarray

    def rows(self) -> list[dict]:
        """One dict per (alpha, c, gamma): keys alpha, c, gamma, E, S, best (bool)."""
        out = []
        for i, a in enumerate(self.alphas.tolist()):
            for j, c in enumerate(self.cs.tolist()):
                for k, gm in enumerate(self.gammas.tolist()):
                    out.append({"alpha": a, "c": c, "gamma": gm, "E": float(self.expected_tokens[i, k]),
                                "S": float(self.speedup[i, j, k]), "best": gm == int(self.best_gamma[i, j])})
        return out


def _grid(x, name, check) -> np.ndarray:
    arr = check(np.atleast_1d(np.asarray(x)), name)
    if arr.ndim != 1:
        raise ValueError(f"{name}: must be a 1-D grid (got shape {arr.shape})")
    return arr


def sweep(alphas=ARTICLE_ALPHAS, gammas=ARTICLE_GAMMAS, cs=ARTICLE_CS, *, g: GammaCost = None,
          overhead=0.0) -> Sweep:
    """Evaluate E and S on a grid of ``alpha x c x gamma`` (default: the article's).

    Parameters
    ----------
    alphas : array_like, shape (A,)
        Acceptance probabilities in [0, 1].
    gammas : array_like of int, shape (G,)
        Draft lengths >= 1.
    cs : array_like, shape (C,)
        Draft costs >= 0 (target steps).
    g, overhead
        See :func:`speedup`.

    Returns
    -------
    Sweep

    Examples
    --------
    >>> s = sweep()
    >>> s.speedup.shape, int(s.best_gamma[1, 0]), int(s.best_gamma[1, 1])
    ((3, 2, 16), 6, 3)
    """
    a = _grid(alphas, "alphas", _alpha)
    gm = _grid(gammas, "gammas", _gamma)
    c = _grid(cs, "cs", _c)
    e = np.asarray(expected_tokens(a[:, None], gm[None, :]))
    cost = np.asarray(cycle_cost(gm[None, :], c[:, None], g=g, overhead=overhead))  # (C, G)
    s = e[:, None, :] / cost[None, :, :]
    k = np.argmax(s, axis=-1)
    return Sweep(alphas=a, gammas=gm, cs=c, expected_tokens=e, speedup=s, best_gamma=gm[k],
                 best_speedup=np.take_along_axis(s, k[..., None], axis=-1)[..., 0])


@dataclass(frozen=True)
class BestGamma:
    """The best draft length, and where it lies among the candidates.

    Attributes
    ----------
    gamma : int
        Maximiser of the speedup (smallest on ties).
    speedup : float
        Its speedup.
    expected_tokens : float
        Its tokens per cycle E.
    edge : {None, "first", "last"}
        ``None``: an interior maximum, with a candidate on each side. ``"last"``: the
        longest candidate (the grid's end, or the search bound); a longer draft may do
        better. ``"first"``: the shortest candidate; when it is ``gamma = 1`` no shorter
        draft exists (the remaining alternative is not to speculate: compare ``speedup``
        with 1).
    """

    gamma: int
    speedup: float
    expected_tokens: float
    edge: str | None = None

    @property
    def interior(self) -> bool:
        """Whether the maximum has a candidate on each side."""
        return self.edge is None

    def to_dict(self) -> dict:
        return {"gamma": self.gamma, "speedup": self.speedup, "expected_tokens": self.expected_tokens,
                "edge": self.edge}


#: Upper bound of the grid-free search of :func:`best_gamma`.
SEARCH_GAMMA_MAX = 2 ** 20


def _slack(acceptance, gamma: int, c, g, overhead) -> float:
    """``(E(gamma+1) - E(gamma)) D(gamma) - E(gamma) (D(gamma+1) - D(gamma))``: > 0 iff lengthening pays."""
    m = marginal_gain(acceptance, gamma, c, g=g, overhead=overhead)
    return float(m.gain - m.price)


def _check_convex_cost(gamma: int, c, g, overhead) -> None:
    d = np.asarray(cycle_cost(np.array([gamma, gamma + 1, gamma + 2]), c, g=g, overhead=overhead))
    step = np.diff(d)
    tol = 1e-12 * max(1.0, float(d.max()))
    if step[0] < -tol or step[1] < step[0] - tol:
        raise ValueError(f"g: the grid-free search needs a verification cost that is non-decreasing and "
                       f"convex in gamma; it is not at gamma = {gamma} (pass a grid of gammas)")


def _search(acceptance, c, g, overhead, gamma_max: int) -> BestGamma:
    if isinstance(acceptance, Workload) and not acceptance.concave:
        raise ValueError(f"gammas: the speedup of {acceptance.name!r} (regime carried across cycles) is not "
                       "known to be unimodal in gamma; pass a grid of gammas")

    def pays(k: int) -> bool:
        _check_convex_cost(k, c, g, overhead)
        return _slack(acceptance, k, c, g, overhead) > 0

    lo, hi = 0, 1                          # invariant: lo = 0 or pays(lo); hi to be tested
    while pays(hi):
        if hi == gamma_max:                # still rising at the bound
            break
        lo, hi = hi, min(2 * hi, gamma_max)
    else:
        while hi - lo > 1:                 # smallest k in (lo, hi] with not pays(k)
            mid = (lo + hi) // 2
            if pays(mid):
                lo = mid
            else:
                hi = mid
    best = hi
    e = float(expected_tokens(acceptance, best))
    s = float(speedup(acceptance, best, c, g=g, overhead=overhead))
    return BestGamma(gamma=int(best), speedup=s, expected_tokens=e,
                     edge="last" if best == gamma_max else ("first" if best == 1 else None))


def best_gamma(acceptance, c: float, gammas=ARTICLE_GAMMAS, *, g: GammaCost = None, overhead=0.0,
               gamma_max: int = SEARCH_GAMMA_MAX) -> BestGamma:
    """Draft length with the largest speedup, on a grid or by a grid-free search (a maximum
    of the model, not a certified server setting).

    **On a grid** (``gammas`` given): the maximiser over the grid, the smallest on ties,
    with ``edge`` saying whether it lies at the grid's end (``best_gamma(0.99, 0.01)`` is
    16 on 1..16, at the edge: the search finds 113).

    **Grid-free** (``gammas=None``): the smallest ``gamma`` at which lengthening stops
    paying, found by doubling then bisection on the sign of the slack
    ``f(gamma) = e_gamma D(gamma) - E(gamma) d_gamma``, where ``e_gamma = E(gamma+1) -
    E(gamma)`` and ``d_gamma = D(gamma+1) - D(gamma)`` for the cycle cost
    ``D = g + c gamma + overhead``. It is the global maximiser when the speedup is
    unimodal, which holds when (i) the increments ``e_gamma >= 0`` are non-increasing
    (``E`` concave: constant ``alpha``, a positional workload, a fresh-start Markov
    workload, where ``e_gamma = J_{gamma+1}`` is a tail probability) and (ii) ``D > 0`` is
    non-decreasing and convex (``g`` constant or affine, as in Chapters 7 and 8). Proof:
    ``f(gamma+1) - f(gamma) = e_{gamma+1} D(gamma+1) - e_gamma (D(gamma) + d_{gamma+1})
    - E(gamma) (d_{gamma+1} - d_gamma)``; with ``D(gamma) + d_{gamma+1} >= D(gamma+1)``
    and ``e_{gamma+1} <= e_gamma`` the first two terms are at most
    ``(e_{gamma+1} - e_gamma) D(gamma+1) <= 0``, and the third is ``<= 0``. So ``f`` is
    non-increasing, ``S(gamma+1) > S(gamma)`` exactly while ``f > 0``, and the first
    ``gamma`` with ``f <= 0`` is the maximum (a ratio of a concave function to a convex
    one is quasi-concave; Leviathan et al. 2023, Sec. 3.3, for constant ``alpha``). The
    search checks (ii) at the draft lengths it evaluates and refuses workloads for which
    (i) is not known. If lengthening still pays at ``gamma_max`` (e.g. ``alpha = 1`` and
    ``c < 1``: the speedup rises towards ``1/c`` forever) the result is ``gamma_max``
    with ``edge = "last"``.

    Parameters
    ----------
    acceptance : float or Workload
        Acceptance probability ``alpha`` in [0, 1], or a workload.
    c : float
        Draft cost (>= 0, target steps).
    gammas : array_like of int, or None
        Candidate draft lengths (default the article's 1..16); ``None`` for the grid-free
        search.
    g, overhead
        See :func:`speedup`.
    gamma_max : int, keyword-only
        Bound of the grid-free search.

    Returns
    -------
    BestGamma

    Raises
    ------
    ValueError
        Invalid inputs; a grid-free search on a workload whose speedup is not known to be
        unimodal, or with a verification cost that is not non-decreasing and convex.

    Examples
    --------
    >>> b = best_gamma(0.7, 0.05)
    >>> b.gamma, round(b.speedup, 3), round(b.expected_tokens, 6), b.edge
    (6, 2.353, 3.058819, None)
    >>> best_gamma(0.7, 0.20).gamma
    3
    >>> best_gamma(0.99, 0.01).edge, best_gamma(0.99, 0.01, None).gamma
    ('last', 113)
    """
    if np.ndim(acceptance) or np.ndim(c):
        raise ValueError("alpha, c: best_gamma takes scalars (use sweep for grids)")
    if not isinstance(acceptance, Workload):
        acceptance = float(_alpha(acceptance))
    _c(c)
    if gammas is None:
        return _search(acceptance, c, g, overhead, check_int(gamma_max, "gamma_max", minimum=2))
    gm = _grid(gammas, "gammas", _gamma)
    s = np.atleast_1d(np.asarray(speedup(acceptance, gm, c, g=g, overhead=overhead)))
    k = int(np.argmax(s))
    edge = "last" if gm[k] == gm.max() and gm.size > 1 else ("first" if gm[k] == gm.min() else None)
    if gm.size == 1:
        edge = "last"
    e = float(np.atleast_1d(np.asarray(expected_tokens(acceptance, gm)))[k])
    return BestGamma(gamma=int(gm[k]), speedup=float(s[k]), expected_tokens=e, edge=edge)


@dataclass(frozen=True)
class Marginal:
    """The two sides of the rule for lengthening the draft from gamma to gamma + 1.

    Attributes
    ----------
    gain : float or numpy.ndarray
        ``(E(gamma+1) - E(gamma)) * D(gamma)`` (``alpha^(gamma+1) * D(gamma)`` for constant
        alpha): the expected extra tokens, weighted by the current cycle cost.
    price : float or numpy.ndarray
        ``E(gamma) * (D(gamma+1) - D(gamma))``: the extra cost, weighted by the current
        tokens per cycle.
    pays : bool or numpy.ndarray of bool
        ``gain > price``, equivalent to ``S(gamma + 1) > S(gamma)``.
    """

    gain: float | np.ndarray
    price: float | np.ndarray
    pays: bool | np.ndarray


def marginal_gain(acceptance, gamma, c, *, g: GammaCost = None, overhead=0.0) -> Marginal:
    """The marginal rule: does going from ``gamma`` to ``gamma + 1`` raise the speedup?

    Write ``D(gamma) = g(gamma) + c gamma + overhead > 0`` for the cycle cost. Cross-
    multiplying the two positive denominators::

        S(gamma+1) > S(gamma)
        <=> E(gamma+1) D(gamma) > E(gamma) D(gamma+1)
        <=> [E(gamma+1) - E(gamma)] D(gamma) > E(gamma) [D(gamma+1) - D(gamma)]

    With constant ``alpha``, ``E(gamma + 1) = E(gamma) + alpha^(gamma+1)`` (the new
    proposal adds a token exactly when all ``gamma + 1`` are accepted); with a workload
    whose cycles do not depend on gamma the increment is ``J_{gamma+1}``; with a carried
    regime it is whatever the long-run ``E`` gives. With ``g = 1`` and no overhead,
    ``D(gamma) = 1 + c gamma`` and the price step is ``c``::

        alpha^(gamma+1) (1 + c gamma)  >  c (1 - alpha^(gamma+1)) / (1 - alpha)

    Left: the marginal contribution of the new proposal; right: its price. For
    ``alpha < 1`` the left side falls geometrically in ``gamma`` while the right side grows,
    so lengthening stops paying at some finite ``gamma``. At ``alpha = 0`` the gain is 0 and
    any ``c > 0`` makes lengthening a loss. Equality (a tie) counts as not paying.

    Parameters
    ----------
    acceptance, gamma, c, g, overhead
        As in :func:`speedup` (broadcast; a workload takes an integer or 1-D ``gamma``).

    Returns
    -------
    Marginal

    References
    ----------
    Leviathan et al. (2023), Sec. 3.3 (optimal gamma).

    Examples
    --------
    >>> m = marginal_gain(0.7, 5, 0.05)
    >>> bool(m.pays), bool(marginal_gain(0.7, 6, 0.05).pays)
    (True, False)
    """
    gam = _gamma(gamma)
    d0 = np.asarray(cycle_cost(gam, c, g=g, overhead=overhead))
    d1 = np.asarray(cycle_cost(gam + 1, c, g=g, overhead=overhead))
    e0 = np.asarray(expected_tokens(acceptance, gam))
    if isinstance(acceptance, Workload):
        step = np.asarray(expected_tokens(acceptance, gam + 1)) - e0
    else:
        step = _powers(_alpha(acceptance), gam + 1)
    gain = step * d0
    price = e0 * (d1 - d0)
    pays = gain > price
    return Marginal(gain=_out(gain), price=_out(price), pays=bool(pays) if np.ndim(pays) == 0 else pays)


def lengthening_pays(acceptance, gamma, c, *, g: GammaCost = None, overhead=0.0):
    """Whether ``S(gamma + 1) > S(gamma)`` (see :func:`marginal_gain` for the derivation).

    Returns
    -------
    bool or numpy.ndarray of bool

    Examples
    --------
    >>> lengthening_pays(0.7, 2, 0.20), lengthening_pays(0.7, 3, 0.20)
    (True, False)
    >>> lengthening_pays(0.0, 1, 0.05)
    False
    """
    return marginal_gain(acceptance, gamma, c, g=g, overhead=overhead).pays

