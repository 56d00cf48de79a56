"""Workloads whose acceptance depends on context or position: exact E, S and best gamma.

The constant-``alpha`` model of :mod:`specdec.cost` assumes every proposal is accepted
independently with the same probability. Real text is not like that: a proper name, a
formula or a change of language makes the draft disagree with the target for a stretch,
and easy stretches come in runs. In general the tokens emitted per cycle are::

    E(gamma) = 1 + sum_{i=1}^{gamma} J_i,    J_i = P(first i proposals accepted)

and ``J_i`` is not ``(mean acceptance) ** i``. Two workloads with the same mean acceptance
can have different accepted-length distributions, different ``E`` and a different best
draft length. Recording only a mean acceptance rate hides that.

A **workload** here is a model of the accept/reject outcomes of the proposals of one
cycle, in draft order. Three families:

- :class:`ConstantWorkload`: i.i.d. acceptances with probability ``alpha``;
- :class:`PositionalWorkload`: proposal ``i`` accepted with probability ``alphas[i-1]``,
  independently (e.g. acceptance that decays along the draft);
- :class:`MarkovWorkload`: a hidden regime (e.g. *easy* / *hard*) evolves from one draft
  position to the next as a Markov chain; the proposal at a position is accepted with the
  acceptance probability of the regime there. With the identity transition matrix the
  regime is fixed for the whole cycle: a *mixture* of easy and hard cycles.

Each cycle starts afresh: the regime at its first proposal is drawn from ``initial`` (the
stationary law by default), independently of earlier cycles. Everything is exact (matrix
products) and the simulations are vectorised numpy with an explicit generator.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023, Sec. 3.1 (E from i.i.d. acceptances, eq. 1) and
   Sec. 3.3 (walltime, choice of gamma).
.. [2] Z. Sun et al., "Block Verification Accelerates Speculative Decoding", ICLR 2025,
   arXiv:2403.10444 (the accepted length depends on the joint behaviour of a block, not
   only on per-token acceptance).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import cost as _cost
from .block import accepted_prefix_length
from .laws import LawError, check_int, check_law

__all__ = [
    "ConstantWorkload",
    "PositionalWorkload",
    "MarkovWorkload",
    "mixture_workload",
    "bursty_workload",
    "alternating_workload",
    "decaying_workload",
    "contrast_pair",
    "constant_equivalent",
    "joint_acceptance",
    "accepted_length_law",
    "expected_tokens",
    "speedup",
    "lengthening_pays",
    "Curve",
    "curve",
    "best_gamma",
    "simulate_outcomes",
    "simulate_accepted_lengths",
]


def _prob(x, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise LawError(f"{name}: must be a probability in [0, 1] (got {x!r})") from None
    if not (np.isfinite(v) and 0.0 <= v <= 1.0):
        raise LawError(f"{name}: must be a probability in [0, 1] (got {x!r})")
    return v


def _probs(x, name: str) -> np.ndarray:
    arr = np.array(x, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise LawError(f"{name}: must be a non-empty 1-D array of probabilities (got shape {arr.shape})")
    if not np.isfinite(arr).all() or (arr < 0).any() or (arr > 1).any():
        raise LawError(f"{name}: entries must be probabilities in [0, 1]")
    arr.setflags(write=False)
    return arr


def _check_rng(rng) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise LawError(f"rng: must be a numpy.random.Generator (got {type(rng).__name__})")
    return rng


@dataclass(frozen=True)
class ConstantWorkload:
    """Independent acceptances with constant probability ``alpha`` (the article's Sec. 6 model).

    Attributes
    ----------
    alpha : float
        Acceptance probability of every proposal, in [0, 1].
    name : str
        Label for plots.

    Examples
    --------
    >>> ConstantWorkload(0.7).joint(3).round(3).tolist()
    [0.7, 0.49, 0.343]
    """

    alpha: float
    name: str = "constant"

    def __post_init__(self):
        object.__setattr__(self, "alpha", _prob(self.alpha, "alpha"))

    @property
    def mean_acceptance(self) -> float:
        """Probability that a proposal is accepted: ``alpha``."""
        return self.alpha

    def joint(self, gamma: int) -> np.ndarray:
        """``J_i = alpha ** i`` for ``i = 1..gamma``; shape (gamma,)."""
        gamma = check_int(gamma, "gamma")
        return self.alpha ** np.arange(1, gamma + 1)

    def sample_outcomes(self, gamma: int, n: int, rng: np.random.Generator) -> np.ndarray:
        """Accept/reject outcomes, shape (n, gamma), bool."""
        return rng.random((n, gamma)) < self.alpha


@dataclass(frozen=True, eq=False)
class PositionalWorkload:
    """Independent acceptances whose probability depends on the position in the draft.

    Attributes
    ----------
    alphas : array_like, shape (K,)
        ``alphas[i - 1]`` is the acceptance probability of proposal ``i``; positions beyond
        ``K`` use ``alphas[-1]``.
    name : str
        Label.

    Examples
    --------
    >>> PositionalWorkload([0.9, 0.5]).joint(3).round(3).tolist()
    [0.9, 0.45, 0.225]
    """

    alphas: np.ndarray
    name: str = "positional"

    def __post_init__(self):
        object.__setattr__(self, "alphas", _probs(self.alphas, "alphas"))

    def position_alphas(self, gamma: int) -> np.ndarray:
        """Acceptance probability of proposals 1..gamma, shape (gamma,)."""
        gamma = check_int(gamma, "gamma")
        k = self.alphas.size
        return self.alphas[np.minimum(np.arange(gamma), k - 1)]

    @property
    def mean_acceptance(self) -> float:
        """Mean of ``alphas`` (over the listed positions)."""
        return float(self.alphas.mean())

    def joint(self, gamma: int) -> np.ndarray:
        """``J_i = prod_{j <= i} alphas[j - 1]``; shape (gamma,)."""
        return np.cumprod(self.position_alphas(gamma))

    def sample_outcomes(self, gamma: int, n: int, rng: np.random.Generator) -> np.ndarray:
        """Accept/reject outcomes, shape (n, gamma), bool."""
        return rng.random((n, gamma)) < self.position_alphas(gamma)[None, :]


def _stationary(transition: np.ndarray) -> np.ndarray:
    k = transition.shape[0]
    a = np.vstack([transition.T - np.eye(k), np.ones((1, k))])
    b = np.zeros(k + 1)
    b[-1] = 1.0
    if np.linalg.matrix_rank(a) < k:
        raise LawError("transition: the stationary law is not unique (reducible chain); pass initial explicitly")
    pi, *_ = np.linalg.lstsq(a, b, rcond=None)
    pi = np.clip(pi, 0.0, None)
    return pi / pi.sum()


@dataclass(frozen=True, eq=False)
class MarkovWorkload:
    """Acceptance driven by a hidden regime that evolves along the draft (Markov-switching).

    The regime ``s_1`` of the first proposal of a cycle has law ``initial``; then
    ``P(s_{i+1} = l | s_i = k) = transition[k, l]``; proposal ``i`` is accepted with
    probability ``alphas[s_i]`` given the regimes, independently otherwise. Exactly::

        J_i = initial^T (D T)^{i-1} D 1,   D = diag(alphas)

    Attributes
    ----------
    alphas : array_like, shape (K,)
        Acceptance probability in each regime.
    transition : array_like, shape (K, K)
        Row-stochastic matrix of regime changes from one draft position to the next.
    initial : array_like, shape (K,), optional
        Regime law at the first proposal; default: the stationary law of ``transition``
        (required when it is not unique, e.g. the identity).
    names : tuple of str
        Regime labels.
    name : str
        Workload label.

    Raises
    ------
    LawError
        Invalid probabilities, a non-stochastic matrix, mismatched sizes, or no unique
        stationary law when ``initial`` is omitted.

    Examples
    --------
    >>> w = MarkovWorkload([0.9, 0.3], [[0.95, 0.05], [0.10, 0.90]])
    >>> round(w.mean_acceptance, 12), w.initial.round(4).tolist()
    (0.7, [0.6667, 0.3333])
    """

    alphas: np.ndarray
    transition: np.ndarray
    initial: np.ndarray | None = None
    names: tuple[str, ...] = ()
    name: str = "markov"

    def __post_init__(self):
        al = _probs(self.alphas, "alphas")
        k = al.size
        t = np.array(self.transition, dtype=np.float64)
        if t.shape != (k, k):
            raise LawError(f"transition: must have shape ({k}, {k}) like alphas (got {t.shape})")
        for i in range(k):
            check_law(t[i], f"transition[{i}]")
        t.setflags(write=False)
        if self.initial is None:
            init = _stationary(t)
        else:
            init = check_law(self.initial, "initial")
            if init.size != k:
                raise LawError(f"initial: size {init.size} does not match alphas ({k})")
        init.setflags(write=False)
        names = tuple(self.names) or tuple(f"regime {i}" for i in range(k))
        if len(names) != k:
            raise LawError(f"names: {len(names)} names for {k} regimes")
        object.__setattr__(self, "alphas", al)
        object.__setattr__(self, "transition", t)
        object.__setattr__(self, "initial", init)
        object.__setattr__(self, "names", names)

    @property
    def mean_acceptance(self) -> float:
        """``initial . alphas``: probability that the first proposal of a cycle is accepted
        (with the default stationary ``initial``, the acceptance probability of a proposal
        at any position, averaged over regimes)."""
        return float(self.initial @ self.alphas)

    def joint(self, gamma: int) -> np.ndarray:
        """``J_i = P(first i accepted)`` for ``i = 1..gamma``; shape (gamma,)."""
        gamma = check_int(gamma, "gamma")
        out = np.empty(gamma)
        v = self.initial * self.alphas
        out[0] = v.sum()
        for i in range(1, gamma):
            v = (v @ self.transition) * self.alphas
            out[i] = v.sum()
        return out

    def sample_regimes(self, gamma: int, n: int, rng: np.random.Generator) -> np.ndarray:
        """Regime paths, shape (n, gamma), int (vectorised inverse-CDF draws)."""
        cdf_t = np.cumsum(self.transition, axis=1)
        cdf_t[:, -1] = 1.0
        cdf0 = np.cumsum(self.initial)
        cdf0[-1] = 1.0
        s = np.empty((n, gamma), dtype=np.int64)
        s[:, 0] = np.searchsorted(cdf0, rng.random(n), side="right")
        for i in range(1, gamma):
            u = rng.random(n)
            s[:, i] = (cdf_t[s[:, i - 1]] <= u[:, None]).sum(axis=1)
        return s

    def sample_outcomes(self, gamma: int, n: int, rng: np.random.Generator) -> np.ndarray:
        """Accept/reject outcomes, shape (n, gamma), bool."""
        s = self.sample_regimes(gamma, n, rng)
        return rng.random((n, gamma)) < self.alphas[s]


Workload = ConstantWorkload | PositionalWorkload | MarkovWorkload


def _check_workload(w) -> None:
    if not isinstance(w, (ConstantWorkload, PositionalWorkload, MarkovWorkload)):
        raise LawError(f"workload: must be a Constant, Positional or Markov workload (got {type(w).__name__})")


# ------------------------------------------------------------------------ ready-made


def mixture_workload(alphas, weights, *, names=("easy", "hard"), name: str = "mixture") -> MarkovWorkload:
    """Cycles that are entirely easy or entirely hard: ``J_i = sum_k w_k alphas_k ** i``.

    Examples
    --------
    >>> w = mixture_workload([0.9, 0.3], [2 / 3, 1 / 3])
    >>> round(float(w.joint(2)[1]), 6)   # 2/3 * 0.81 + 1/3 * 0.09
    0.57
    """
    al = _probs(alphas, "alphas")
    return MarkovWorkload(al, np.eye(al.size), initial=weights, names=tuple(names)[: al.size], name=name)


def bursty_workload() -> MarkovWorkload:
    """Easy and hard stretches in runs: mean acceptance 0.7, as the article's alpha.

    Regimes easy (alpha 0.9) and hard (alpha 0.3); an easy stretch lasts 20 tokens on
    average (leave probability 0.05), a hard one 10 (0.10); stationary law (2/3, 1/3).
    """
    return MarkovWorkload([0.9, 0.3], [[0.95, 0.05], [0.10, 0.90]], names=("easy", "hard"), name="bursty")


def alternating_workload() -> MarkovWorkload:
    """Easy and hard tokens that tend to alternate: mean acceptance 0.7, short runs.

    Same regimes and stationary law (2/3, 1/3) as :func:`bursty_workload`, but an easy
    token is followed by a hard one with probability 0.45 and a hard one by an easy one
    with probability 0.9, so long runs of acceptances are rarer than under i.i.d. 0.7.
    """
    return MarkovWorkload([0.9, 0.3], [[0.55, 0.45], [0.90, 0.10]], names=("easy", "hard"), name="alternating")


def decaying_workload(alpha1: float = 0.9, decay: float = 0.9, positions: int = 32) -> PositionalWorkload:
    """Acceptance that decays along the draft: ``alphas[i] = alpha1 * decay ** i``.

    Examples
    --------
    >>> decaying_workload(0.9, 0.5, 3).alphas.tolist()
    [0.9, 0.45, 0.225]
    """
    a1, d = _prob(alpha1, "alpha1"), _prob(decay, "decay")
    positions = check_int(positions, "positions")
    return PositionalWorkload(a1 * d ** np.arange(positions), name="decaying")


def constant_equivalent(workload) -> ConstantWorkload:
    """The constant-alpha workload with the same mean acceptance.

    Examples
    --------
    >>> constant_equivalent(bursty_workload()).alpha == bursty_workload().mean_acceptance
    True
    """
    _check_workload(workload)
    return ConstantWorkload(workload.mean_acceptance, name=f"constant ({workload.name})")


def contrast_pair() -> tuple[MarkovWorkload, ConstantWorkload]:
    """Two workloads with equal mean acceptance (0.7) and different best draft lengths.

    Returns ``(bursty_workload(), constant_equivalent(bursty_workload()))``. At ``c = 0.05``
    on the grid 1..16 the constant workload peaks at gamma 6 (the article's point), the
    bursty one at gamma 10: runs of easy tokens make long drafts pay.

    Examples
    --------
    >>> w, k = contrast_pair()
    >>> best_gamma(w, 0.05).gamma, best_gamma(k, 0.05).gamma
    (10, 6)
    """
    w = bursty_workload()
    return w, constant_equivalent(w)


# --------------------------------------------------------------------- exact quantities


def joint_acceptance(workload, gamma: int) -> np.ndarray:
    """``J_i = P(first i proposals accepted)``, ``i = 1..gamma``.

    Returns
    -------
    numpy.ndarray, shape (gamma,)
        Non-increasing probabilities.

    Raises
    ------
    LawError
        Unknown workload type or ``gamma < 1``.
    """
    _check_workload(workload)
    return workload.joint(check_int(gamma, "gamma"))


def accepted_length_law(workload, gamma: int) -> np.ndarray:
    """Exact law of the number of accepted proposals in a cycle.

    ``P(A = i) = J_i - J_{i+1}`` with ``J_0 = 1`` and ``J_{gamma+1} = 0``. The cycle emits
    ``A + 1`` tokens (no EOS in this model).

    Returns
    -------
    numpy.ndarray, shape (gamma + 1,)
        Probabilities of ``A = 0, ..., gamma``.

    Examples
    --------
    >>> accepted_length_law(ConstantWorkload(0.5), 2).tolist()
    [0.5, 0.25, 0.25]
    """
    j = np.concatenate(([1.0], joint_acceptance(workload, gamma), [0.0]))
    return np.maximum(j[:-1] - j[1:], 0.0)


def expected_tokens(workload, gamma: int) -> float:
    """Exact tokens per cycle ``E = 1 + sum_i J_i`` (:func:`specdec.cost.expected_tokens_joint`).

    Examples
    --------
    >>> round(expected_tokens(ConstantWorkload(0.7), 6), 6)
    3.058819
    """
    return float(_cost.expected_tokens_joint(joint_acceptance(workload, gamma)))


def speedup(workload, gamma: int, c: float, *, g=None, overhead=0.0) -> float:
    """Exact speedup ``E / (g(gamma) + c gamma + overhead)`` (:func:`specdec.cost.speedup_joint`)."""
    return float(_cost.speedup_joint(joint_acceptance(workload, gamma), c, g=g, overhead=overhead))


def lengthening_pays(workload, gamma: int, c: float, *, g=None, overhead=0.0) -> bool:
    """Marginal rule with joint acceptances: ``J_{gamma+1} D(gamma) > E(gamma) (D(gamma+1) - D(gamma))``.

    Same cross-multiplication as :func:`specdec.cost.marginal_gain`, with ``alpha ** (gamma+1)``
    replaced by ``J_{gamma+1}``, the probability that the new proposal is emitted.
    """
    gamma = check_int(gamma, "gamma")
    j = joint_acceptance(workload, gamma + 1)
    d0 = _cost.cycle_cost(gamma, c, g=g, overhead=overhead)
    d1 = _cost.cycle_cost(gamma + 1, c, g=g, overhead=overhead)
    return bool(j[-1] * d0 > (1.0 + j[:-1].sum()) * (d1 - d0))


@dataclass(frozen=True)
class Curve:
    """Exact E and S of a workload over a grid of draft lengths.

    Attributes
    ----------
    gammas : numpy.ndarray of int, shape (G,)
    expected_tokens : numpy.ndarray, shape (G,)
    speedup : numpy.ndarray, shape (G,)
    best_gamma : int
        Maximiser of the speedup (smallest on ties).
    best_speedup : float
    """

    gammas: np.ndarray
    expected_tokens: np.ndarray
    speedup: np.ndarray
    best_gamma: int
    best_speedup: float


def curve(workload, c: float, gammas=_cost.ARTICLE_GAMMAS, *, g=None, overhead=0.0) -> Curve:
    """E and S for every gamma of a grid, and the best gamma.

    Examples
    --------
    >>> cv = curve(ConstantWorkload(0.7), 0.05)
    >>> cv.best_gamma, round(cv.best_speedup, 3)
    (6, 2.353)
    """
    _check_workload(workload)
    gm = np.asarray(_cost._gamma(np.atleast_1d(gammas)))
    if gm.ndim != 1:
        raise LawError(f"gammas: must be a 1-D grid (got shape {gm.shape})")
    j = workload.joint(int(gm.max()))
    e = np.array([1.0 + j[:k].sum() for k in gm.tolist()])
    s = e / np.asarray(_cost.cycle_cost(gm, c, g=g, overhead=overhead))
    k = int(np.argmax(s))
    return Curve(gammas=gm, expected_tokens=e, speedup=s, best_gamma=int(gm[k]), best_speedup=float(s[k]))


def best_gamma(workload, c: float, gammas=_cost.ARTICLE_GAMMAS, *, g=None, overhead=0.0) -> _cost.BestGamma:
    """Best draft length of a workload on a grid (:class:`specdec.cost.BestGamma`)."""
    cv = curve(workload, c, gammas, g=g, overhead=overhead)
    k = int(np.argmax(cv.speedup))
    return _cost.BestGamma(gamma=cv.best_gamma, speedup=cv.best_speedup, expected_tokens=float(cv.expected_tokens[k]))


# ------------------------------------------------------------------------- simulation


def simulate_outcomes(workload, gamma: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Accept/reject outcome of every proposal of ``n`` independent cycles.

    Returns
    -------
    numpy.ndarray of bool, shape (n, gamma)
        Outcomes in draft order (outcomes after the first rejection are drawn too, but a
        real cycle discards them; see :func:`specdec.block.accepted_prefix_length`).
    """
    _check_workload(workload)
    gamma = check_int(gamma, "gamma")
    n = check_int(n, "n")
    return workload.sample_outcomes(gamma, n, _check_rng(rng))


def simulate_accepted_lengths(workload, gamma: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Accepted length of ``n`` simulated cycles (vectorised numpy).

    Returns
    -------
    numpy.ndarray of int, shape (n,)
        Values in ``0..gamma``; the cycle emits one more token than this.

    Examples
    --------
    >>> a = simulate_accepted_lengths(bursty_workload(), 6, 1000, np.random.default_rng(0))
    >>> a.shape, int(a.min()) >= 0, int(a.max()) <= 6
    ((1000,), True, True)
    """
    return accepted_prefix_length(simulate_outcomes(workload, gamma, n, rng))
