"""Workloads whose acceptance depends on context or position: exact laws of the accepted length.

The constant-``alpha`` model assumes every proposal is accepted independently with the
same probability. Real text is not like that: a proper name, a formula or a change of
language makes the draft disagree with the target for a stretch, and easy stretches come
in runs. In general the tokens emitted per cycle are::

    E(gamma) = 1 + sum_{i=1}^{gamma} J_i,    J_i = P(first i proposals accepted)

and ``J_i`` is not ``(mean acceptance) ** i``. Two workloads with the same mean acceptance
can have different accepted-length distributions, different ``E`` and a different best
draft length. Recording only a mean acceptance rate hides that.

A **workload** here is a model of the accept/reject outcomes of the proposals of the
cycles of a request, in draft order. Three families:

- :class:`ConstantWorkload`: i.i.d. acceptances with probability ``alpha`` (the simple
  model; ``specdec.cost`` accepts a bare ``alpha`` for it);
- :class:`PositionalWorkload`: proposal ``i`` of every cycle accepted with probability
  ``alphas[i-1]``, independently (e.g. acceptance that decays along the draft);
- :class:`MarkovWorkload`: a hidden regime (e.g. *easy* / *hard*) of the text advances
  once per **token position** as a Markov chain; the proposal at a position is accepted
  with the acceptance probability of the regime there. By default the regime is
  **carried across cycles** (``carry=True``): the next cycle starts at the position after
  the last token the cycle emitted, so a cycle that ended at a rejection in a lasting
  hard stretch hands that stretch to the next one. The regime at the start of a
  cycle is then itself a Markov chain (its kernel is :meth:`MarkovWorkload.cycle_kernel`)
  and the long-run tokens per cycle are a Markov renewal-reward average, computed
  exactly. With ``carry=False`` every cycle starts in a regime drawn afresh from
  ``initial``, independently of earlier cycles: the **fresh-start** special case, which
  is what a regime fixed per cycle (a *mixture* of easy and hard cycles,
  :func:`mixture_workload`) means.

The quantities built on a workload (``E``, speedup, best draft length, the marginal rule)
are the functions of :mod:`specdec.cost`, which take a workload wherever they take an
``alpha``. This module gives the exact laws (matrix products) and vectorised simulations
with an explicit generator. Used in Chapters 7 and 8.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023, Sec. 3.1 (E from i.i.d. acceptances, eq. 1) and
   Sec. 3.3 (walltime, choice of gamma).
.. [2] E. Cinlar, *Introduction to Stochastic Processes*, Prentice-Hall 1975, Ch. 10
   (Markov renewal processes; the renewal-reward theorem for the long-run average).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from specdec.cost.accounting import accepted_prefix_length
from specdec.laws import LawError, check_int, check_law
from specdec.verify import check_rng

__all__ = [
    "Workload",
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
    "simulate_outcomes",
    "simulate_accepted_lengths",
    "simulate_requests",
]


def _prob(x, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{name}: must be a probability in [0, 1] (got {x!r})") from None
    if not (np.isfinite(v) and 0.0 <= v <= 1.0):
        raise ValueError(f"{name}: must be a probability in [0, 1] (got {x!r})")
    return v


def _probs(x, name: str) -> np.ndarray:
    arr = np.array(x, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name}: must be a non-empty 1-D array of probabilities (got shape {arr.shape})")
    if not np.isfinite(arr).all() or (arr < 0).any() or (arr > 1).any():
        raise ValueError(f"{name}: entries must be probabilities in [0, 1]")
    arr.setflags(write=False)
    return arr




def _stationary(kernel: np.ndarray, what: str) -> np.ndarray:
    k = kernel.shape[0]
    a = np.vstack([kernel.T - np.eye(k), np.ones((1, k))])
    b = np.zeros(k + 1)
    b[-1] = 1.0
    if np.linalg.matrix_rank(a) < k:
        raise LawError(f"{what}: the stationary law is not unique (reducible chain)")
    pi, *_ = np.linalg.lstsq(a, b, rcond=None)
    pi = np.clip(pi, 0.0, None)
    return pi / pi.sum()


def _draw_rows(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws: row ``j`` of ``cdf`` (shape (n, K), last column 1) with ``u[j]``."""
    return (cdf <= u[:, None]).sum(axis=1)


class Workload(ABC):
    """What :mod:`specdec.cost` needs of a workload.

    Subclasses define :meth:`joint` (``P(first i accepted)`` in a cycle drawn from the
    long-run law of cycles), :meth:`sample_outcomes` (independent cycles from that law)
    and :meth:`sample_cycles` (cycles in request order). ``carried`` says whether
    consecutive cycles of a request depend on each other.
    """

    name: str

    @property
    @abstractmethod
    def mean_acceptance(self) -> float:
        """Acceptance probability of a proposal at a position of the text, averaged."""

    @abstractmethod
    def joint(self, gamma: int) -> np.ndarray:
        """``J_i``, ``i = 1..gamma``, shape (gamma,)."""

    @abstractmethod
    def sample_outcomes(self, gamma: int, n: int, rng: np.random.Generator) -> np.ndarray:
        """Accept/reject outcomes of ``n`` independent cycles, shape (n, gamma), bool."""

    @property
    def carried(self) -> bool:
        """Whether a cycle's outcomes depend on the previous cycles of the request."""
        return False

    @property
    def concave(self) -> bool:
        """Whether ``E(gamma)`` has non-increasing increments ``J_{gamma+1}`` (true when the
        law of a cycle does not depend on gamma: ``J`` is then a tail sequence)."""
        return True

    def sample_cycles(self, gamma: int, n: int, cycles: int, rng: np.random.Generator) -> np.ndarray:
        """Accepted lengths of ``n`` requests of ``cycles`` cycles each, shape (n, cycles).

        Independent cycles here; :class:`MarkovWorkload` carries its regime along each row.
        """
        return accepted_prefix_length(self.sample_outcomes(gamma, n * cycles, rng)).reshape(n, cycles)

    def cycle_correlation(self, gamma: int) -> float:
        """Exact correlation of consecutive cycles' accepted lengths (0: independent cycles)."""
        check_int(gamma, "gamma")
        return 0.0


@dataclass(frozen=True)
class ConstantWorkload(Workload):
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
class PositionalWorkload(Workload):
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


@dataclass(frozen=True, eq=False)
class MarkovWorkload(Workload):
    """Acceptance driven by a hidden regime of the text (Markov-switching), exactly.

    **Conventions.** The regime ``s_t`` advances once per token position:
    ``P(s_{t+1} = l | s_t = k) = transition[k, l]``. A cycle whose first proposal sits at
    position ``t + 1`` accepts proposal ``i`` (position ``t + i``) with probability
    ``alphas[s_{t+i}]``, independently given the regimes, until the first rejection. It
    emits ``N = A + 1`` tokens at positions ``t + 1 .. t + N``: the ``A`` accepted ones and
    the residual draw (at the rejected proposal's position) or the bonus token (at position
    ``t + gamma + 1``). The next cycle's first proposal sits at position ``t + N + 1``.

    **Carried regime** (``carry=True``, the default). The regime at the first proposal of
    successive cycles is a Markov chain with kernel (``D_a = diag(alphas)``,
    ``D_r = diag(1 - alphas)``, ``M = D_a T``)::

        K = sum_{i=0}^{gamma-1} M^i D_r T  +  M^gamma T

    (reject at proposal ``i + 1`` after ``i`` acceptances, one step to the next start; or
    accept all, one step to the bonus position and one more). With ``mu`` its stationary
    law, the long-run fraction of cycles with ``A >= i`` is ``J_i = mu M^i 1`` and, by the
    renewal-reward theorem, the long-run tokens per cycle are ``E = 1 + sum_i J_i``. The
    law of a cycle now depends on gamma (through ``mu``).

    **Fresh start** (``carry=False``). Every cycle's first regime is drawn from
    ``initial``, independently of earlier cycles: ``J_i = initial M^i 1``. With the
    identity transition this is a mixture of cycles that are entirely easy or entirely
    hard.

    Attributes
    ----------
    alphas : array_like, shape (K,)
        Acceptance probability in each regime.
    transition : array_like, shape (K, K)
        Row-stochastic matrix of regime changes from one token position to the next.
    initial : array_like, shape (K,), optional
        Regime law at the first position of a request (and of every cycle when
        ``carry=False``); default: the stationary law of ``transition`` (required when it
        is not unique, e.g. the identity).
    names : tuple of str
        Regime labels.
    name : str
        Workload label.
    carry : bool
        Carry the regime across cycles (default) or start every cycle afresh.

    Raises
    ------
    LawError
        A non-stochastic matrix, an invalid ``initial`` law or one of the wrong size, no
        unique stationary law when ``initial`` is omitted, or ``carry=True`` with a chain
        whose cycle-start law is not unique (e.g. the identity transition).
    ValueError
        ``alphas`` not probabilities, ``names`` of the wrong length.
    TypeError
        ``carry`` not a boolean.

    Examples
    --------
    >>> w = MarkovWorkload([0.9, 0.3], [[0.95, 0.05], [0.10, 0.90]])
    >>> round(w.mean_acceptance, 12), w.initial.round(4).tolist()
    (0.7, [0.6667, 0.3333])
    >>> round(1 + float(w.joint(6).sum()), 4), round(1 + float(w.fresh().joint(6).sum()), 4)
    (2.8248, 3.7536)
    """

    alphas: np.ndarray
    transition: np.ndarray
    initial: np.ndarray | None = None
    names: tuple[str, ...] = ()
    name: str = "markov"
    carry: bool = True

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
            try:
                init = _stationary(t, "transition")
            except LawError as exc:
                raise LawError(f"{exc}; pass initial explicitly") from None
        else:
            init = check_law(self.initial, "initial")
            if init.size != k:
                raise LawError(f"initial: size {init.size} does not match alphas ({k})")
        init.setflags(write=False)
        names = tuple(self.names) or tuple(f"regime {i}" for i in range(k))
        if len(names) != k:
            raise ValueError(f"names: {len(names)} names for {k} regimes")
        if not isinstance(self.carry, (bool, np.bool_)):
            raise TypeError(f"carry: must be True or False (got {self.carry!r})")
        object.__setattr__(self, "alphas", al)
        object.__setattr__(self, "transition", t)
        object.__setattr__(self, "initial", init)
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "carry", bool(self.carry))
        if self.carry:
            self.start_law(1)             # refuse a chain without a unique cycle-start law now

    @property
    def carried(self) -> bool:
        return self.carry

    @property
    def concave(self) -> bool:
        return not self.carry

    def fresh(self) -> "MarkovWorkload":
        """The same chain with every cycle started afresh from ``initial`` (``carry=False``)."""
        return MarkovWorkload(self.alphas, self.transition, self.initial, self.names,
                              f"{self.name} (fresh start)", carry=False)

    @property
    def mean_acceptance(self) -> float:
        """``initial . alphas``: with the default stationary ``initial``, the acceptance
        probability of a proposal at a position of the text, averaged over regimes (not over
        the positions a cycle happens to test)."""
        return float(self.initial @ self.alphas)

    def _m(self) -> np.ndarray:
        return self.alphas[:, None] * self.transition          # M = D_a T

    def cycle_kernel(self, gamma: int) -> np.ndarray:
        """Kernel ``K[k, l] = P(next cycle starts in l | this one starts in k)``, shape (K, K)."""
        gamma = check_int(gamma, "gamma")
        m, t = self._m(), self.transition
        reject_then_step = (1.0 - self.alphas)[:, None] * t     # D_r T
        power = np.eye(self.alphas.size)
        kern = np.zeros_like(t)
        for _ in range(gamma):
            kern += power @ reject_then_step
            power = power @ m
        return kern + power @ t

    def start_law(self, gamma: int, cycle: int | None = None) -> np.ndarray:
        """Law of the regime at a cycle's first proposal, shape (K,).

        ``cycle=None``: in the long run (``initial`` for a fresh start; the stationary law
        of :meth:`cycle_kernel` when the regime is carried). ``cycle=k``: at the ``k``-th
        cycle of a request that starts in ``initial`` (``initial K^(k-1)`` when carried).
        """
        gamma = check_int(gamma, "gamma")
        if not self.carry:
            return self.initial
        if cycle is not None:
            cycle = check_int(cycle, "cycle")
            return self.initial @ np.linalg.matrix_power(self.cycle_kernel(gamma), cycle - 1)
        return _stationary(self.cycle_kernel(gamma), "transition (cycle-start chain)")

    def joint(self, gamma: int, start=None) -> np.ndarray:
        """``J_i = P(first i accepted)`` for ``i = 1..gamma``; shape (gamma,).

        ``start``: law of the first proposal's regime, shape (K,); default the long-run
        :meth:`start_law`.
        """
        gamma = check_int(gamma, "gamma")
        start = self.start_law(gamma) if start is None else check_law(start, "start")
        if start.size != self.alphas.size:
            raise LawError(f"start: size {start.size} does not match alphas ({self.alphas.size})")
        out = np.empty(gamma)
        v = start * self.alphas
        out[0] = v.sum()
        for i in range(1, gamma):
            v = (v @ self.transition) * self.alphas
            out[i] = v.sum()
        return out

    def cycle_correlation(self, gamma: int) -> float:
        """Exact correlation of the accepted lengths of consecutive cycles in the long run.

        0 for a fresh start. Carried: with ``R = sum_i i M^i D_r T + gamma M^gamma T``
        (accepted length times next start), ``a = R 1`` and ``mu`` the start law,
        ``cov = mu R a - (mu a)^2``.
        """
        gamma = check_int(gamma, "gamma")
        if not self.carry:
            return 0.0
        m, t = self._m(), self.transition
        k = self.alphas.size
        reject = (1.0 - self.alphas)[:, None] * t
        power = np.eye(k)
        r = np.zeros((k, k))
        for i in range(gamma):
            r += i * (power @ reject)
            power = power @ m
        r += gamma * (power @ t)
        kern = self.cycle_kernel(gamma)
        a = r.sum(axis=1)                                       # E[A | start]
        a2 = np.zeros(k)
        power = np.eye(k)
        for i in range(gamma):
            a2 += i * i * (power @ reject).sum(axis=1)
            power = power @ m
        a2 += gamma * gamma * power.sum(axis=1)
        mu = _stationary(kern, "transition (cycle-start chain)")
        mean = mu @ a
        var = mu @ a2 - mean ** 2
        return float((mu @ r @ a - mean ** 2) / var) if var > 0 else 0.0

    def sample_regimes(self, gamma: int, n: int, rng: np.random.Generator, start=None) -> np.ndarray:
        """Regime paths over ``gamma`` positions, shape (n, gamma), int.

        ``start``: regimes at the first position, shape (n,); default drawn from
        :meth:`start_law`.
        """
        cdf_t = np.cumsum(self.transition, axis=1)
        cdf_t[:, -1] = 1.0
        s = np.empty((n, gamma), dtype=np.int64)
        if start is None:
            cdf0 = np.cumsum(self.start_law(gamma))
            cdf0[-1] = 1.0
            s[:, 0] = np.searchsorted(cdf0, rng.random(n), side="right")
        else:
            s[:, 0] = start
        for i in range(1, gamma):
            s[:, i] = _draw_rows(cdf_t[s[:, i - 1]], rng.random(n))
        return s

    def sample_outcomes(self, gamma: int, n: int, rng: np.random.Generator) -> np.ndarray:
        """Accept/reject outcomes of ``n`` independent long-run cycles, shape (n, gamma), bool."""
        s = self.sample_regimes(gamma, n, rng)
        return rng.random((n, gamma)) < self.alphas[s]

    def sample_cycles(self, gamma: int, n: int, cycles: int, rng: np.random.Generator) -> np.ndarray:
        """Accepted lengths of ``n`` requests of ``cycles`` consecutive cycles, shape (n, cycles).

        Each request starts in a regime drawn from ``initial``. Carried: each cycle draws
        the regimes of positions 1..gamma + 2 after its start, keeps the prefix up to the
        first rejection, and the next cycle starts at the regime of position ``N + 1``
        (``N`` tokens emitted), exactly as the conventions above. Fresh start: independent
        cycles from ``initial``.
        """
        if not self.carry:
            return super().sample_cycles(gamma, n, cycles, rng)
        cdf0 = np.cumsum(self.initial)
        cdf0[-1] = 1.0
        state = np.searchsorted(cdf0, rng.random(n), side="right")
        rows = np.arange(n)
        out = np.empty((n, cycles), dtype=np.int64)
        for k in range(cycles):
            path = self.sample_regimes(gamma + 2, n, rng, start=state)
            ok = rng.random((n, gamma)) < self.alphas[path[:, :gamma]]
            a = accepted_prefix_length(ok)
            out[:, k] = a
            state = path[rows, a + 1]                            # position N + 1, N = a + 1
        return out


# ------------------------------------------------------------------------ ready-made


def mixture_workload(alphas, weights, *, names=("easy", "hard"), name: str = "mixture") -> MarkovWorkload:
    """Cycles that are entirely easy or entirely hard, drawn afresh for every cycle.

    ``J_i = sum_k w_k alphas_k ** i`` (a fresh-start :class:`MarkovWorkload` with the
    identity transition).

    Examples
    --------
    >>> w = mixture_workload([0.9, 0.3], [2 / 3, 1 / 3])
    >>> round(float(w.joint(2)[1]), 6)   # 2/3 * 0.81 + 1/3 * 0.09
    0.57
    """
    al = _probs(alphas, "alphas")
    return MarkovWorkload(al, np.eye(al.size), initial=weights, names=tuple(names)[: al.size], name=name,
                          carry=False)


def bursty_workload(*, carry: bool = True) -> MarkovWorkload:
    """Easy and hard stretches in runs: mean acceptance 0.7, as the article's alpha.

    Regimes easy (alpha 0.9) and hard (alpha 0.3); an easy stretch lasts 20 tokens on
    average (leave probability 0.05), a hard one 10 (0.10); stationary law (2/3, 1/3).
    ``carry=False`` gives the fresh-start special case.
    """
    return MarkovWorkload([0.9, 0.3], [[0.95, 0.05], [0.10, 0.90]], names=("easy", "hard"), name="bursty",
                          carry=carry)


def alternating_workload(*, carry: bool = True) -> MarkovWorkload:
    """Easy and hard tokens that tend to alternate: mean acceptance 0.7, short runs.

    Same regimes and stationary law (2/3, 1/3) as :func:`bursty_workload`, but an easy
    token is followed by a hard one with probability 0.45 and a hard one by an easy one
    with probability 0.9. ``carry=False`` gives the fresh-start special case.
    """
    return MarkovWorkload([0.9, 0.3], [[0.55, 0.45], [0.90, 0.10]], names=("easy", "hard"), name="alternating",
                          carry=carry)


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


def contrast_pair(*, carry: bool = True) -> tuple[MarkovWorkload, ConstantWorkload]:
    """Two workloads with equal mean acceptance (0.7): the bursty one and the constant one.

    Returns ``(bursty_workload(carry=carry), constant_equivalent(...))``. At ``c = 0.05`` on
    the grid 1..16 the constant workload peaks at gamma 6 (the article's point). With the
    regime carried across cycles the bursty one also peaks at 6, with a lower speedup
    (rejections hand hard stretches to the next cycle); started afresh every cycle it
    peaks at 10 with a higher one.

    Examples
    --------
    >>> from specdec import cost
    >>> w, k = contrast_pair()
    >>> cost.best_gamma(w, 0.05).gamma, cost.best_gamma(k, 0.05).gamma
    (6, 6)
    >>> cost.best_gamma(contrast_pair(carry=False)[0], 0.05).gamma
    10
    """
    w = bursty_workload(carry=carry)
    return w, constant_equivalent(w)


# --------------------------------------------------------------------- exact quantities


def _check_workload(w) -> None:
    if not isinstance(w, Workload):
        raise TypeError(f"workload: must be a Constant, Positional or Markov workload (got {type(w).__name__})")


def joint_acceptance(workload, gamma: int) -> np.ndarray:
    """``J_i = P(first i proposals accepted)``, ``i = 1..gamma``, in a long-run cycle.

    Returns
    -------
    numpy.ndarray, shape (gamma,)
        Non-increasing probabilities.

    Raises
    ------
    TypeError
        Unknown workload type.
    ValueError
        ``gamma < 1``.
    """
    _check_workload(workload)
    return workload.joint(check_int(gamma, "gamma"))


def accepted_length_law(workload, gamma: int) -> np.ndarray:
    """Exact law of the number of accepted proposals in a (long-run) cycle.

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


# ------------------------------------------------------------------------- simulation


def simulate_outcomes(workload, gamma: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Accept/reject outcome of every proposal of ``n`` independent long-run cycles.

    Returns
    -------
    numpy.ndarray of bool, shape (n, gamma)
        Outcomes in draft order (outcomes after the first rejection are drawn too, but a
        real cycle discards them; see :func:`specdec.cost.accounting.accepted_prefix_length`). A
        carried-regime workload starts each cycle from its long-run start law.
    """
    _check_workload(workload)
    gamma = check_int(gamma, "gamma")
    n = check_int(n, "n")
    return workload.sample_outcomes(gamma, n, check_rng(rng))


def simulate_accepted_lengths(workload, gamma: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Accepted length of ``n`` independent simulated long-run cycles (vectorised numpy).

    Returns
    -------
    numpy.ndarray of int, shape (n,)
        Values in ``0..gamma``; the cycle emits one more token than this. Their law is
        :func:`accepted_length_law`.

    Examples
    --------
    >>> a = simulate_accepted_lengths(bursty_workload(), 6, 1000, np.random.default_rng(0))
    >>> a.shape, int(a.min()) >= 0, int(a.max()) <= 6
    ((1000,), True, True)
    """
    return accepted_prefix_length(simulate_outcomes(workload, gamma, n, rng))


def simulate_requests(workload, gamma: int, n: int, cycles: int, rng: np.random.Generator) -> np.ndarray:
    """Accepted lengths of the consecutive cycles of ``n`` simulated requests.

    A request starts in a regime drawn from the workload's ``initial`` law and, for a
    carried-regime :class:`MarkovWorkload`, every cycle continues along the same chain
    (see its conventions); other workloads give independent cycles. Used in Chapters 7
    and 8.

    Parameters
    ----------
    workload : Workload
    gamma : int
        Draft length, >= 1.
    n : int
        Requests, >= 1.
    cycles : int
        Cycles per request, >= 1.
    rng : numpy.random.Generator

    Returns
    -------
    numpy.ndarray of int, shape (n, cycles)
        Accepted proposals per cycle, in request order.

    Raises
    ------
    TypeError
        Unknown workload, ``rng`` neither a Generator nor a seed.
    ValueError
        A count < 1.

    Examples
    --------
    >>> a = simulate_requests(bursty_workload(), 4, 3, 5, np.random.default_rng(0))
    >>> a.shape, bool((a >= 0).all() and (a <= 4).all())
    ((3, 5), True)
    """
    _check_workload(workload)
    gamma = check_int(gamma, "gamma")
    n, cycles = check_int(n, "n"), check_int(cycles, "cycles")
    return workload.sample_cycles(gamma, n, cycles, check_rng(rng))
