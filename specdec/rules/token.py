"""Token-by-token verification as one rule object, and its flaws as variants of it.

Token-by-token verification (speculative sampling; Leviathan et al. 2023, Algorithm 1;
Chen et al. 2023, Algorithm 2) tests the drafted tokens left to right: ``x_i`` is accepted
with probability ``min(1, p_i(x_i) / q_i(x_i))``; at the first rejection one token is drawn
from the residual ``(p_i - q_i)^+ / Z_i`` and the cycle ends; after a full acceptance a
bonus token is drawn from ``p_{k+1}`` (none after an end-of-sequence proposal).

The rule exists once, as :data:`TOKEN` (class :class:`TokenByToken`), at two scales that
are the same rule:

* **one step** (a draft of one token, no bonus position): :meth:`TokenByToken.acceptance`,
  :meth:`TokenByToken.recovery`, the exact law of the emitted token
  (:meth:`TokenByToken.output_law`) and a sampler (:meth:`TokenByToken.sample_step`);
* **one cycle** over a drafted chain (a :class:`specdec.rules.base.ChainRule`): the exact law
  of the cycle's outcomes given the laws along the path (:meth:`TokenByToken.path_outcomes`), from
  which :mod:`specdec.rules.base` derives the sequence law, the accepted-count law and the
  kit's declared law, and a sampler (:meth:`TokenByToken.sample_path`).

Both samplers of the exact rule are the verification kernel :func:`specdec.verify.verify`.

A **flaw** is a subclass of :class:`StepFlaw` (itself a :class:`TokenByToken`) that
overrides the one hook it gets wrong (:meth:`~TokenByToken.acceptance` and
:meth:`~TokenByToken.accepts` for the accept test, :meth:`~TokenByToken.recovery` for the
law after a rejection, or :meth:`~TokenByToken.output_law` for an error in the formula);
its samplers run the procedure the hooks describe instead of the kernel, so its law and
its sampler follow from the same hooks, at one step and along a chain. A new flaw of the
token-by-token rule is one subclass and one instance here, listed in :data:`STEP_FLAWS`;
:mod:`specdec.rules` then registers it for the engines, the conformance kit and the tests.

Exact step laws cost O(V) memory for every rule (``O(V log V)`` time for
:data:`SHARED_UNIFORM`), so they work at V = 10**6.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023 (PMLR 202), Algorithm 1, Sec. 2.3, App. A.1.
.. [2] C. Chen et al., "Accelerating Large Language Model Decoding with Speculative
   Sampling", arXiv:2302.01318, 2023, Algorithm 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from specdec.rules import base as cycles
from specdec.verify import cdf, draw, residual_laws, speculative_accept, verify

__all__ = [
    "TokenByToken", "TOKEN", "StepFlaw", "FALLBACK_P", "RESAMPLE_Q", "DROP_REJECTED",
    "UNCLIPPED_RATIO", "M_PLUS_R", "SHARED_UNIFORM", "INVERTED_RATIO", "STEP_FLAWS",
    "STEP_RULES", "check_token_rule",
]


def _ratio_acceptance(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``min(1, num/den)``, 1 where ``den == 0`` (never proposed: no division by zero)."""
    out = np.ones_like(num)
    np.divide(num, den, out=out, where=den > 0)
    return np.minimum(out, 1.0)


def _path_laws(path: cycles.DraftPath) -> tuple[np.ndarray, np.ndarray]:
    """The laws along ``path`` as float arrays: ``p`` (k [+ 1], V) and ``q`` (k, V)."""
    return np.array(path.p, dtype=np.float64), np.array(path.q, dtype=np.float64)


@dataclass(frozen=True, repr=False)
class TokenByToken(cycles.ChainRule):
    """Token-by-token verification (Leviathan et al. 2023, Algorithm 1): exact.

    At one step: propose ``x ~ q``, accept it with :meth:`acceptance`, else draw from
    :meth:`recovery`. Along a drafted chain: the same test at each position, left to
    right, a recovery draw at the first rejection, a bonus from ``p_{k+1}`` after a full
    acceptance (none after EOS). Step laws ``p`` and ``q`` are validated float arrays of
    shape (V,) (:func:`specdec.laws.check_pair`); the laws along a path may be fractions,
    which the exact rule's path law keeps exact.

    The accept step has two faces that must agree: :meth:`acceptance` (the probabilities
    the exact law is computed from) and :meth:`accepts` (the test a flaw's sampler runs).
    A flaw in the accept test overrides both, or its law and its sampler disagree.
    """

    name: ClassVar[str] = "correct"
    #: Whether the emitted token has exactly the target's law (for any p, q).
    exact: ClassVar[bool] = True
    #: Whether the law after a rejection depends on the rejected proposal.
    recovery_depends_on_proposal: ClassVar[bool] = False
    #: Whether the recovery reuses the accept test's uniform (then it is a function of it).
    reuses_accept_uniform: ClassVar[bool] = False
    #: False for a rule that is an error in the formula of the law, not a procedure that
    #: proposes and tests (it is sampled by one draw from its law, and has no chain form).
    proposes: ClassVar[bool] = True

    # ------------------------------------------------------------ one step: the hooks

    def acceptance(self, p: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Probability of accepting each proposed token, shape (V,): ``min(1, p/q)``."""
        return _ratio_acceptance(p, q)

    def accepts(self, p_x: float, q_x: float, u: float) -> bool:
        """The accept test, true with probability ``acceptance(p, q)[x]`` for ``u ~ U[0, 1)``."""
        return speculative_accept(p_x, q_x, u)

    def recovery(self, p: np.ndarray, q: np.ndarray, x: int | None = None) -> np.ndarray:
        """Law drawn from after rejecting proposal ``x``, shape (V,): the residual."""
        return residual_laws(p, q)

    def output_law(self, p: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Exact law of the token one step emits: ``q a + (sum q (1 - a)) recovery``; O(V).

        Parameters
        ----------
        p, q : numpy.ndarray, shape (V,)
            Validated target and draft laws.

        Returns
        -------
        numpy.ndarray, shape (V,)
        """
        a = self.acceptance(p, q)
        return q * a + (q * (1.0 - a)).sum() * self.recovery(p, q)

    def sample_step(self, p: np.ndarray, q: np.ndarray, rng) -> int:
        """One step: ``x`` by inverse CDF of one uniform, then the kernel on one row.

        The kernel draws the accept uniform and, after a rejection, one more for the
        residual (:func:`specdec.verify.verify`).
        """
        x = draw(q, rng.random())
        return int(verify(p[None, None], q[None, None], [[x]], rng=rng).tokens[0, 0])

    # ------------------------------------------------------ one cycle along a chain

    def path_acceptance(self, p: list, q: list, x: int):
        """Probability of accepting ``x`` at one position of a path (fractions stay exact)."""
        return min(p[x] / q[x], q[x] * 0 + 1)

    def path_recovery(self, p: list, q: list, x: int) -> tuple[list, object]:
        """Weights of the recovery law at one position of a path, and their sum."""
        return cycles.residual_weights(1, p, q)

    def path_outcomes(self, path):
        """Outcomes ``(probability given the path, emitted, n_accepted)`` of one cycle.

        Raises
        ------
        ValueError
            A rule that does not propose (:attr:`proposes` false) has no chain form.
        """
        self._require_proposals()
        out: list = []
        run = path.prob * 0 + 1
        for i, x in enumerate(path.tokens):
            p, q = path.p[i], path.q[i]
            a = self.path_acceptance(p, q, x)
            if a < 1:                                   # a rejection is possible here
                law, total = self.path_recovery(p, q, x)
                cycles.append_outcomes(path, i, run * (1 - a), law, total, out)
            run = run * a
        return out + cycles.full_acceptance(path, run)

    def sample_path(self, path, rng):
        """``(emitted, n_accepted)``: the kernel on one row of ``k`` proposals.

        Uniforms: ``k`` for the accept tests, then one for the residual or bonus draw,
        drawn in every cycle (also when a chain ending at EOS is accepted whole and emits
        no extra token), so a cycle always consumes ``k + 1`` uniforms after drafting.
        """
        p, q = _path_laws(path)
        k = len(path.tokens)
        u_accept = rng.random((1, k))
        u_final = np.array([rng.random()])
        out = verify(p[None], q[None], [list(path.tokens)], u_accept=u_accept, u_final=u_final)
        n = int(out.n_accepted[0])
        return tuple(out.tokens[0, :out.n_emitted[0]].tolist()), n

    def _require_proposals(self) -> None:
        if not self.proposes:
            raise ValueError(f"rule: {self.name!r} is an error in the formula of one step's law, "
                             "not a procedure that proposes and tests; it has no chain form")


@dataclass(frozen=True, repr=False)
class StepFlaw(TokenByToken):
    """A flaw of token-by-token verification: the base of every flawed variant.

    Its samplers run the procedure of the hooks (the accept test :meth:`accepts` on a
    fresh uniform, after a rejection a draw from :meth:`recovery` with one more uniform,
    or with the accept test's own uniform when :attr:`reuses_accept_uniform`) instead of
    the kernel, and its path law applies :meth:`acceptance` and :meth:`recovery` at each
    position (floats), so overriding a hook changes the law and the samplers together.
    """

    exact: ClassVar[bool] = False

    def _recovered(self, p, q, x, u_accept, fresh) -> int:
        """The token drawn after rejecting ``x``: from :meth:`recovery` with ``fresh()``, or
        from the residual with the accept test's own uniform ``u_accept`` when it is reused."""
        if self.reuses_accept_uniform:
            return draw(residual_laws(p, q), u_accept)
        return draw(self.recovery(p, q, x), fresh())

    def sample_step(self, p, q, rng):
        """One step of the procedure: ``x`` from ``q``, the test, after a rejection the recovery."""
        if not self.proposes:
            return draw(self.output_law(p, q), rng.random())
        x = draw(q, rng.random())
        u = rng.random()
        if self.accepts(p[x], q[x], u):
            return x
        return self._recovered(p, q, x, u, rng.random)

    def path_acceptance(self, p, q, x):
        return float(self.acceptance(np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64))[x])

    def path_recovery(self, p, q, x):
        law = self.recovery(np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64), x)
        return law.tolist(), 1.0

    def sample_path(self, path, rng):
        """The procedure along the chain, with the kernel's draw order (``k`` tests, one final)."""
        self._require_proposals()
        p, q = _path_laws(path)
        k = len(path.tokens)
        eta = rng.random(k)
        u = rng.random()
        for i, x in enumerate(path.tokens):
            if not self.accepts(p[i, x], q[i, x], eta[i]):
                return path.tokens[:i] + (int(self._recovered(p[i], q[i], x, eta[i], lambda: u)),), i
        if path.ends:
            return path.tokens, k
        return path.tokens + (int(draw(p[k], u)),), k


@dataclass(frozen=True, repr=False)
class FallbackP(StepFlaw):
    """After a rejection, draw from the target ``p`` instead of the residual.

    Law ``m + Z p``, so ``TV(law, p) = Z TV(p, r)``: the accepted branch already delivered
    all the mass of the tokens with ``p <= q``, and the fallback adds more to them. The
    counterexample of the article the book starts from; the same choice (sampling the
    target's own law at the first rejected position) is discussed in the public issue
    ShopeeLLM/Spec-RL#14.
    """

    name: ClassVar[str] = "fallback_p"

    def recovery(self, p, q, x=None):
        return p


@dataclass(frozen=True, repr=False)
class ResampleQ(StepFlaw):
    """After a rejection, draw again from the draft ``q``. Law ``m + Z q``."""

    name: ClassVar[str] = "resample_q"

    def recovery(self, p, q, x=None):
        return q


@dataclass(frozen=True, repr=False)
class DropRejected(StepFlaw):
    """After rejecting ``x``, draw from ``p`` without ``x``, renormalised.

    "Do not give the rejected token a second chance" sounds like a refinement of the
    fallback; it is the same mistake (rejected tokens have ``p(x) < q(x)``, and removing
    one does not turn ``p`` into the residual). The law needs no V x V matrix:
    ``law(y) = m(y) + p(y) (S - w(y) / (1 - p(y)))`` with ``w = q (1 - a)`` and
    ``S = sum_x w(x) / (1 - p(x))``: O(V) time and memory.
    """

    name: ClassVar[str] = "drop_rejected"
    recovery_depends_on_proposal: ClassVar[bool] = True

    def recovery(self, p, q, x=None):
        rest = np.array(p, dtype=np.float64)
        rest[x] = 0.0
        return rest / rest.sum() if rest.sum() > 0 else p

    def output_law(self, p, q):
        a = self.acceptance(p, q)
        w = q * (1.0 - a)
        rest = p.sum() - p                         # 1 - p(x), as the renormalisation sums it
        share = np.zeros_like(p)
        np.divide(w, rest, out=share, where=(w > 0) & (rest > 0))
        return q * a + p * (share.sum() - share)


@dataclass(frozen=True, repr=False)
class UnclippedRatio(StepFlaw):
    """Accept if ``u < p(x)/q(x)`` without the ``min(1, .)``: a suspicion that is harmless.

    For ``u`` uniform on [0, 1), ``P(u < t) = min(1, t)`` for every ``t >= 0``: the same
    event as the clipped test, law ``p``. The clip matters only where the ratio is used as
    a number (a weight, an expected acceptance, a log), never inside the comparison.
    """

    name: ClassVar[str] = "unclipped_ratio"
    exact: ClassVar[bool] = True

    def accepts(self, p_x, q_x, u):
        return u < p_x / q_x


@dataclass(frozen=True, repr=False)
class MPlusR(StepFlaw):
    """The notation trap: accepted mass plus residual, ``m + r``, without weighting ``r`` by ``Z``.

    Not a procedure but an error in the formula of the law: the raw vector sums to
    ``1 + beta`` (:func:`specdec.step.m_plus_r_raw`); its law is the normalised
    ``(m + r) / (1 + beta)``, what sampling in proportion to it gives.
    """

    name: ClassVar[str] = "m_plus_r"
    proposes: ClassVar[bool] = False

    def output_law(self, p, q):
        raw = np.minimum(p, q) + residual_laws(p, q)
        return raw / raw.sum()


@dataclass(frozen=True, repr=False)
class SharedUniform(StepFlaw):
    """One uniform for the accept test and the recovery: the residual's inverse CDF at the same ``u``.

    Given a rejection of ``x``, ``u`` is uniform on ``[a(x), 1)``, not on [0, 1), so the
    recovery favours tokens whose CDF bins lie high. Harmless when the residual has one
    support point (the article's example), wrong otherwise. The exact law intersects
    ``[a(x), 1)`` with the residual's CDF bins ``[lo(y), hi(y))`` (tokens in id order):
    ``law(y) = m(y) + sum_x q(x) |[a(x), 1) ∩ [lo(y), hi(y))|``, summed for all y at once
    over the sorted thresholds ``a(x)``: O(V log V) time, O(V) memory.
    """

    name: ClassVar[str] = "shared_uniform"
    recovery_depends_on_proposal: ClassVar[bool] = True
    reuses_accept_uniform: ClassVar[bool] = True

    def recovery(self, p, q, x=None):
        a = float(self.acceptance(p, q)[x])
        hi = cdf(residual_laws(p, q))
        lo = np.concatenate(([0.0], hi[:-1]))
        overlap = np.clip(hi - np.maximum(lo, a), 0.0, None)
        return overlap / overlap.sum()

    def output_law(self, p, q):
        a = self.acceptance(p, q)
        hi = cdf(residual_laws(p, q))
        lo = np.concatenate(([0.0], hi[:-1]))
        rej = a < 1.0
        order = np.argsort(a[rej], kind="stable")
        thr, wq = a[rej][order], q[rej][order]
        cq = np.concatenate(([0.0], np.cumsum(wq)))          # sum of q(x) over thr < t
        cqa = np.concatenate(([0.0], np.cumsum(wq * thr)))   # sum of q(x) a(x)
        below = np.searchsorted(thr, lo, side="right")       # a(x) <= lo(y): whole bin
        inside = np.searchsorted(thr, hi, side="left")       # lo(y) < a(x) < hi(y): part
        part = hi * (cq[inside] - cq[below]) - (cqa[inside] - cqa[below])
        return q * a + cq[below] * (hi - lo) + np.maximum(part, 0.0)


@dataclass(frozen=True, repr=False)
class InvertedRatio(StepFlaw):
    """Accept with ``min(1, q(x)/p(x))``: the ratio upside down (1 where ``p(x) = 0``).

    Tokens the target forbids are then emitted whenever they are proposed.
    """

    name: ClassVar[str] = "inverted_ratio"

    def acceptance(self, p, q):
        return _ratio_acceptance(q, p)

    def accepts(self, p_x, q_x, u):
        return speculative_accept(q_x, p_x, u)


#: Token-by-token verification, the exact rule (speculative sampling).
TOKEN = TokenByToken()
FALLBACK_P = FallbackP()
RESAMPLE_Q = ResampleQ()
DROP_REJECTED = DropRejected()
UNCLIPPED_RATIO = UnclippedRatio()
M_PLUS_R = MPlusR()
SHARED_UNIFORM = SharedUniform()
INVERTED_RATIO = InvertedRatio()
#: The variants of the token-by-token rule, in the order of chapter 3's gallery.
STEP_FLAWS: tuple[TokenByToken, ...] = (FALLBACK_P, RESAMPLE_Q, DROP_REJECTED, UNCLIPPED_RATIO,
                                        M_PLUS_R, SHARED_UNIFORM, INVERTED_RATIO)
#: The exact rule first, then every variant.
STEP_RULES: tuple[TokenByToken, ...] = (TOKEN,) + STEP_FLAWS


def check_token_rule(rule, name: str = "rule") -> TokenByToken:
    """``rule`` if it is a token-by-token rule, else a ``TypeError`` naming the argument.

    Parameters
    ----------
    rule : object
        Expected: :data:`TOKEN` or a flaw of :data:`STEP_FLAWS`.
    name : str
        The argument's name in the message.

    Returns
    -------
    TokenByToken

    Raises
    ------
    TypeError
        ``rule`` is not a :class:`TokenByToken`.
    """
    if not isinstance(rule, TokenByToken):
        raise TypeError(f"{name}: must be a token-by-token rule of specdec.rules.token such as "
                        f"TOKEN or FALLBACK_P (got {rule!r})")
    return rule
