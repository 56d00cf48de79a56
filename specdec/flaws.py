"""Step rules and cycle rules as named objects: the exact ones, and one object per bug.

A **step rule** says what one speculative step does with a proposal ``x ~ q``: the
probability of accepting it (:meth:`StepRule.acceptance`), the law drawn from after
rejecting it (:meth:`StepRule.recovery`), and therefore the exact law of the emitted
token (:meth:`StepRule.law`) and a reference sampler (:meth:`StepRule.sample`). The base
class is speculative sampling itself (:data:`CORRECT`); each plausible-but-wrong rule is a
subclass that overrides the one part it gets wrong. :func:`specdec.token.output_law` and
the engines of :mod:`specdec.simulate` take these objects.

A **cycle rule** says how one block cycle of :mod:`specdec.block` drafts, which laws it
hands to the verification kernel, and what state it leaves for the next cycle. The base
class is the correct cycle (:data:`CORRECT_CYCLE`); each bug overrides one hook.

A **verification-rule flaw** is a mistake in one of the rules beyond token-by-token
verification (:mod:`specdec.cycles`): block verification (:mod:`specdec.blockverify`),
recursive rejection over draft trees (:mod:`specdec.multidraft`) and the matching rule
(:mod:`specdec.matching`). Each is a subclass of the exact rule that overrides the one hook
it gets wrong, so its exact law, its accepted-count law and its reference sampler (the
conformance kit's block sampler, :class:`specdec.cycles.RuleSampler`) all follow.

Adding a bug means adding one subclass and one instance here (and listing it in
:data:`STEP_FLAWS`, :data:`CYCLE_FLAWS`, :data:`BLOCK_FLAWS`, :data:`TREE_FLAWS` or
:data:`MATCHING_FLAWS`); every exact law, engine and kit adapter then knows it.

Exact laws cost O(V) memory for every step rule (``O(V log V)`` time for
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

from .blockverify import BlockVerification
from .matching import Matching
from .multidraft import RecursiveRejection
from .verify import cdf, draw, residual_laws, speculative_accept, verify

__all__ = [
    "StepRule", "Speculative", "CORRECT", "FALLBACK_P", "RESAMPLE_Q", "DROP_REJECTED", "UNCLIPPED_RATIO",
    "M_PLUS_R", "SHARED_UNIFORM", "INVERTED_RATIO", "STEP_FLAWS", "STEP_RULES",
    "CycleRule", "CORRECT_CYCLE", "STALE_PROPOSALS", "NO_ROLLBACK", "BONUS_WRONG_POSITION",
    "EMIT_AFTER_EOS", "STALE_ORIGINAL_Q", "CYCLE_FLAWS", "CYCLE_RULES", "check_step_rule",
    "check_cycle_rule", "TokenResidual", "FirstFailure", "TOKEN_RESIDUAL", "FIRST_FAILURE",
    "BLOCK_FLAWS", "OriginalQ", "NoResidualUpdate", "ORIGINAL_Q", "NO_RESIDUAL_UPDATE",
    "TREE_FLAWS", "ResampleOnMismatch", "RESAMPLE_ON_MISMATCH", "MATCHING_FLAWS", "RULE_FLAWS",
]


def _ratio_acceptance(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``min(1, num/den)``, 1 where ``den == 0`` (never proposed: no division by zero)."""
    out = np.ones_like(num)
    np.divide(num, den, out=out, where=den > 0)
    return np.minimum(out, 1.0)


# ------------------------------------------------------------------------- step rules


@dataclass(frozen=True)
class StepRule:
    """One step: propose ``x ~ q``, accept it with :meth:`acceptance`, else draw :meth:`recovery`.

    The defaults are speculative sampling's (accept with ``min(1, p/q)``, recover from the
    residual); :class:`Speculative` is that rule, and each flaw is a subclass that
    overrides the one part it gets wrong. Laws ``p`` and ``q`` are validated arrays of
    shape (V,) (:func:`specdec.laws.check_pair`).

    The accept step has two faces that must agree: :meth:`acceptance` (the probabilities
    the exact law is computed from) and :meth:`accepts` (the test :meth:`sample` runs). A
    flaw in the accept test overrides both, or its law and its sampler disagree.
    """

    name: ClassVar[str] = "correct"
    #: Whether the emitted token has exactly the target's law (for any p, q).
    exact: ClassVar[bool] = True
    #: Whether the law after a rejection depends on the rejected proposal.
    recovery_depends_on_proposal: ClassVar[bool] = False
    #: Whether the recovery reuses the accept test's uniform (then it is a function of it).
    reuses_accept_uniform: ClassVar[bool] = False
    #: False for a rule that is an error in the formula of the law, not a procedure that
    #: proposes and tests (it is sampled by one draw from its law).
    proposes: ClassVar[bool] = True

    def acceptance(self, p: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Probability of accepting each proposed token, shape (V,)."""
        return _ratio_acceptance(p, q)

    def accepts(self, p_x: float, q_x: float, u: float) -> bool:
        """The accept test the sampler writes, with probability ``acceptance(p, q)[x]``."""
        return speculative_accept(p_x, q_x, u)

    def recovery(self, p: np.ndarray, q: np.ndarray, x: int | None = None) -> np.ndarray:
        """Law drawn from after rejecting proposal ``x``, shape (V,)."""
        return residual_laws(p, q)

    def law(self, p: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Exact law of the emitted token: ``q a + (sum q (1 - a)) recovery``; O(V)."""
        a = self.acceptance(p, q)
        return q * a + (q * (1.0 - a)).sum() * self.recovery(p, q)

    def sample(self, p: np.ndarray, q: np.ndarray, rng) -> int:
        """The reference procedure: ``x`` by inverse CDF of one uniform, the accept test on a
        second, and after a rejection one draw from the recovery law with a third."""
        x = draw(q, rng.random())
        if self.accepts(p[x], q[x], rng.random()):
            return x
        return draw(self.recovery(p, q, x), rng.random())

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, repr=False)
class Speculative(StepRule):
    """Speculative sampling (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023): exact.

    Its sampler is the verification kernel :func:`specdec.verify.verify` on one row.
    """

    def sample(self, p, q, rng):
        x = draw(q, rng.random())
        return int(verify(p[None, None], q[None, None], [[x]], rng=rng).tokens[0, 0])


@dataclass(frozen=True, repr=False)
class FallbackP(StepRule):
    """After a rejection, draw from the target ``p`` instead of the residual.

    Law ``m + Z p``, so ``TV(law, p) = Z TV(p, r)``: the accepted branch already delivered
    all the mass of the tokens with ``p <= q``, and the fallback adds more to them. The
    counterexample of the article the book starts from; the same choice (sampling the
    target's own law at the first rejected position) is discussed in the public issue
    ShopeeLLM/Spec-RL#14.
    """

    name: ClassVar[str] = "fallback_p"
    exact: ClassVar[bool] = False

    def recovery(self, p, q, x=None):
        return p


@dataclass(frozen=True, repr=False)
class ResampleQ(StepRule):
    """After a rejection, draw again from the draft ``q``. Law ``m + Z q``."""

    name: ClassVar[str] = "resample_q"
    exact: ClassVar[bool] = False

    def recovery(self, p, q, x=None):
        return q


@dataclass(frozen=True, repr=False)
class DropRejected(StepRule):
    """After rejecting ``x``, draw from ``p`` without ``x``, renormalised.

    "Do not give the rejected token a second chance" sounds like a refinement of the
    fallback; it is the same mistake (rejected tokens have ``p(x) < q(x)``, and removing
    one does not turn ``p`` into the residual). The law needs no V x V matrix:
    ``law(y) = m(y) + p(y) (S - w(y) / (1 - p(y)))`` with ``w = q (1 - a)`` and
    ``S = sum_x w(x) / (1 - p(x))``: O(V) time and memory.
    """

    name: ClassVar[str] = "drop_rejected"
    exact: ClassVar[bool] = False
    recovery_depends_on_proposal: ClassVar[bool] = True

    def recovery(self, p, q, x=None):
        rest = np.array(p, dtype=np.float64)
        rest[x] = 0.0
        return rest / rest.sum() if rest.sum() > 0 else p

    def law(self, p, q):
        a = self.acceptance(p, q)
        w = q * (1.0 - a)
        rest = p.sum() - p                         # 1 - p(x), as the renormalisation sums it
        share = np.zeros_like(p)
        np.divide(w, rest, out=share, where=(w > 0) & (rest > 0))
        return q * a + p * (share.sum() - share)


@dataclass(frozen=True, repr=False)
class UnclippedRatio(StepRule):
    """Accept if ``u < p(x)/q(x)`` without the ``min(1, .)``: a suspicion that is harmless.

    For ``u`` uniform on [0, 1), ``P(u < t) = min(1, t)`` for every ``t >= 0``: the same
    event as the clipped test, law ``p``. The clip matters only where the ratio is used as
    a number (a weight, an expected acceptance, a log), never inside the comparison.
    """

    name: ClassVar[str] = "unclipped_ratio"

    def accepts(self, p_x, q_x, u):
        return u < p_x / q_x


@dataclass(frozen=True, repr=False)
class MPlusR(StepRule):
    """The notation trap: accepted mass plus residual, ``m + r``, without weighting ``r`` by ``Z``.

    Not a procedure but an error in the formula of the law: the raw vector sums to
    ``1 + beta`` (:func:`specdec.token.m_plus_r_raw`); its law is the normalised
    ``(m + r) / (1 + beta)``, what sampling in proportion to it gives.
    """

    name: ClassVar[str] = "m_plus_r"
    exact: ClassVar[bool] = False
    proposes: ClassVar[bool] = False

    def law(self, p, q):
        raw = np.minimum(p, q) + residual_laws(p, q)
        return raw / raw.sum()

    def sample(self, p, q, rng):
        return draw(self.law(p, q), rng.random())


@dataclass(frozen=True, repr=False)
class SharedUniform(StepRule):
    """One uniform for the accept test and the recovery: the residual's inverse CDF at the same ``u``.

    Given a rejection of ``x``, ``u`` is uniform on ``[a(x), 1)``, not on [0, 1), so the
    recovery favours tokens whose CDF bins lie high. Harmless when the residual has one
    support point (the article's example), wrong otherwise. The exact law intersects
    ``[a(x), 1)`` with the residual's CDF bins ``[lo(y), hi(y))`` (tokens in id order):
    ``law(y) = m(y) + sum_x q(x) |[a(x), 1) ∩ [lo(y), hi(y))|``, summed for all y at once
    over the sorted thresholds ``a(x)``: O(V log V) time, O(V) memory.
    """

    name: ClassVar[str] = "shared_uniform"
    exact: ClassVar[bool] = False
    recovery_depends_on_proposal: ClassVar[bool] = True
    reuses_accept_uniform: ClassVar[bool] = True

    def recovery(self, p, q, x=None):
        a = float(self.acceptance(p, q)[x])
        hi = cdf(residual_laws(p, q))
        lo = np.concatenate(([0.0], hi[:-1]))
        overlap = np.clip(hi - np.maximum(lo, a), 0.0, None)
        return overlap / overlap.sum()

    def law(self, p, q):
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

    def sample(self, p, q, rng):
        x = draw(q, rng.random())
        u = rng.random()
        if speculative_accept(p[x], q[x], u):
            return x
        return draw(residual_laws(p, q), u)        # the bug: u is not a fresh uniform


@dataclass(frozen=True, repr=False)
class InvertedRatio(StepRule):
    """Accept with ``min(1, q(x)/p(x))``: the ratio upside down (1 where ``p(x) = 0``).

    Tokens the target forbids are then emitted whenever they are proposed.
    """

    name: ClassVar[str] = "inverted_ratio"
    exact: ClassVar[bool] = False

    def acceptance(self, p, q):
        return _ratio_acceptance(q, p)

    def accepts(self, p_x, q_x, u):
        return speculative_accept(q_x, p_x, u)


CORRECT = Speculative()
FALLBACK_P = FallbackP()
RESAMPLE_Q = ResampleQ()
DROP_REJECTED = DropRejected()
UNCLIPPED_RATIO = UnclippedRatio()
M_PLUS_R = MPlusR()
SHARED_UNIFORM = SharedUniform()
INVERTED_RATIO = InvertedRatio()
#: The variants of the step rule, in the order of chapter 3's gallery.
STEP_FLAWS: tuple[StepRule, ...] = (FALLBACK_P, RESAMPLE_Q, DROP_REJECTED, UNCLIPPED_RATIO,
                                    M_PLUS_R, SHARED_UNIFORM, INVERTED_RATIO)
#: The correct rule first, then every variant.
STEP_RULES: tuple[StepRule, ...] = (CORRECT,) + STEP_FLAWS


def check_step_rule(rule, name: str = "rule") -> StepRule:
    """``rule`` if it is a :class:`StepRule`, else a ``TypeError`` naming the argument."""
    if not isinstance(rule, StepRule):
        raise TypeError(f"{name}: must be a step rule of specdec.flaws such as CORRECT or "
                        f"FALLBACK_P (got {rule!r})")
    return rule


# ------------------------------------------------------------------------ cycle rules


@dataclass(frozen=True)
class CycleRule:
    """The correct block cycle (:mod:`specdec.block`): the hooks every cycle bug overrides.

    A cycle drafts up to gamma tokens (stopping after an EOS proposal when
    :attr:`stops_at_eos`), lets the kernel verify them, and hands the next cycle a model
    context (and, for the stateful rules, proposals to reuse).
    """

    name: ClassVar[str] = "correct"
    #: Whether the emitted sequence has exactly the target's law.
    exact: ClassVar[bool] = True
    #: Drafting stops after an EOS proposal, and the text ends at an emitted EOS.
    stops_at_eos: ClassVar[bool] = True
    #: The discarded proposals after a rejection carry into the next cycle's state.
    carries_proposals: ClassVar[bool] = False

    def stale_q_context(self, current: tuple, source: tuple) -> tuple:
        """Context of the draft law used to verify a reused proposal (drawn at ``source``)."""
        return source

    def bonus_index(self, k: int) -> int:
        """Index of the target law (among the ``k + 1`` scored) the bonus token is drawn from."""
        return k

    def next_state(self, ctx: tuple, emitted: tuple, drafted: tuple, n_acc: int) -> tuple[tuple, tuple]:
        """Model context and reused proposals ``((token, source_context), ...)`` after a cycle."""
        return ctx + emitted, ()

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, repr=False)
class StaleProposals(CycleRule):
    """Proposals drafted after a rejection are reused next cycle, verified with today's draft law.

    The stale tokens ``d_{i+1}..d_k`` were drawn from ``q`` conditioned on the rejected
    ``d_i``; verifying them with ``q(. | corrected text)`` puts a law in the ratio they
    were not drawn from, so the output law is wrong.
    """

    name: ClassVar[str] = "stale_proposals"
    exact: ClassVar[bool] = False
    carries_proposals: ClassVar[bool] = True

    def stale_q_context(self, current, source):
        return current

    def next_state(self, ctx, emitted, drafted, n_acc):
        if n_acc < len(drafted):  # the source context is not needed: today's law is used
            return ctx + emitted, tuple((t, None) for t, _ in drafted[n_acc + 1:])
        return ctx + emitted, ()


@dataclass(frozen=True, repr=False)
class StaleOriginalQ(StaleProposals):
    """The same reuse, each stale token verified with the draft law it was drawn from: exact.

    The acceptance test is valid for any proposal law as long as the ratio uses the law
    the proposal was really drawn from; this variant shows what :data:`STALE_PROPOSALS`
    breaks.
    """

    name: ClassVar[str] = "stale_original_q"
    exact: ClassVar[bool] = True

    def stale_q_context(self, current, source):
        return source

    def next_state(self, ctx, emitted, drafted, n_acc):
        if n_acc < len(drafted):
            return ctx + emitted, tuple(drafted[n_acc + 1:])
        return ctx + emitted, ()


@dataclass(frozen=True, repr=False)
class NoRollback(CycleRule):
    """The caches are not cropped after a rejection: every proposal stays in the context.

    The emitted text of the cycle is right, but every later law is computed from the
    polluted context ``(context, d_1..d_k, r)`` (wrong last tokens, wrong position). The
    same failure is reported publicly for caches whose trim does not remove entries
    (ml-explore/mlx-lm#1486, rotating caches; microsoft/onnxruntime-genai#2441 review).
    """

    name: ClassVar[str] = "no_rollback"
    exact: ClassVar[bool] = False
    carries_proposals: ClassVar[bool] = True

    def next_state(self, ctx, emitted, drafted, n_acc):
        if n_acc < len(drafted):
            return ctx + tuple(t for t, _ in drafted) + (emitted[-1],), ()
        return ctx + emitted, ()


@dataclass(frozen=True, repr=False)
class BonusWrongPosition(CycleRule):
    """The bonus token is drawn from the last drafted position's law: an off-by-one in the logits index.

    When all ``gamma`` proposals are accepted, the extra token must come from
    ``p(. | x, d_1..d_gamma)``; this rule reads the row that scored ``d_gamma``.
    """

    name: ClassVar[str] = "bonus_wrong_position"
    exact: ClassVar[bool] = False

    def bonus_index(self, k):
        return k - 1


@dataclass(frozen=True, repr=False)
class EmitAfterEos(CycleRule):
    """Drafting and emission do not stop at EOS: tokens after an accepted EOS are kept.

    Generation stops after the first cycle whose output contains EOS, so the law puts mass
    on sequences that continue past EOS, which the target never produces.
    """

    name: ClassVar[str] = "emit_after_eos"
    exact: ClassVar[bool] = False
    stops_at_eos: ClassVar[bool] = False


CORRECT_CYCLE = CycleRule()
STALE_PROPOSALS = StaleProposals()
NO_ROLLBACK = NoRollback()
BONUS_WRONG_POSITION = BonusWrongPosition()
EMIT_AFTER_EOS = EmitAfterEos()
STALE_ORIGINAL_Q = StaleOriginalQ()
#: The realistic cycle bugs (each changes the law of the emitted sequence).
CYCLE_FLAWS: tuple[CycleRule, ...] = (STALE_PROPOSALS, NO_ROLLBACK, BONUS_WRONG_POSITION,
                                      EMIT_AFTER_EOS)
#: Every cycle rule of chapter 5, in its order: the correct cycle, the bugs, and the exact
#: reuse of stale proposals.
CYCLE_RULES: tuple[CycleRule, ...] = (CORRECT_CYCLE,) + CYCLE_FLAWS + (STALE_ORIGINAL_Q,)


def check_cycle_rule(rule, name: str = "variant") -> CycleRule:
    """``rule`` if it is a :class:`CycleRule`, else a ``TypeError`` naming the argument."""
    if not isinstance(rule, CycleRule):
        raise TypeError(f"{name}: must be a cycle rule of specdec.flaws such as CORRECT_CYCLE or "
                        f"NO_ROLLBACK (got {rule!r})")
    return rule


# ---------------------------------------------------------- verification-rule flaws


@dataclass(frozen=True, repr=False)
class TokenResidual(BlockVerification):
    """Block verification's accepted length, but the corrected token from the token-level residual.

    After ``tau`` accepted tokens the correction must come from the block residual
    ``(w_tau p_{tau+1} - q_{tau+1})^+``; this variant draws it from ``(p - q)^+``, the
    token-by-token residual. It accepts exactly as often as the correct rule, so an
    acceptance dashboard cannot see it. Shipped in vllm-ascend's rejection sampler: issue
    vllm-project/vllm-ascend#7807 ("``sample_recovered_tokens`` draws tokens from the same
    distribution, regardless of whether block_verify is enabled"), fixed by PR #7808.
    """

    name: ClassVar[str] = "token_residual"
    exact: ClassVar[bool] = False

    def residual_weight(self, w, tau):
        return w[0]                                 # 1: the token-level residual


@dataclass(frozen=True, repr=False)
class FirstFailure(BlockVerification):
    """Block verification whose scan stops at the first failing position (``eta_i > h_i``).

    Block verification keeps the *last* position that passes, not the contiguous run of
    passes before the first failure: ``P(tau = i) = h_i prod_{j > i} (1 - h_j)``. Stopping
    at the first failure, the contiguous-prefix reflex of token-by-token verification,
    changes the law and also accepts fewer tokens. Asked for in a review of
    vllm-project/vllm-ascend PR #11985 (the port of block verification to its model
    runner V2: "If a token at step i is rejected (u > h), all subsequent tokens must ...").
    """

    name: ClassVar[str] = "first_failure"
    exact: ClassVar[bool] = False

    def tau_law(self, h):
        k = len(h) - 1
        out, run = [], h[0]
        for i in range(k + 1):
            nxt = h[i + 1] if i < k else None
            out.append(run if nxt is None else run * (1 - nxt))
            if nxt is not None:
                run = run * nxt
        return out

    def accepted_length(self, passed):
        return next((i - 1 for i in range(1, len(passed)) if not passed[i]), len(passed) - 1)


@dataclass(frozen=True, repr=False)
class OriginalQ(RecursiveRejection):
    """Children drawn without replacement, verified with the unadjusted draft law ``q``.

    The ratio and the residual of child ``j`` must use the law it was drawn from: ``q``
    renormalised on the tokens not drawn before it. Using ``q`` itself is the question
    raised in SafeAILab/EAGLE issue #74 (EAGLE's sampling path draws its candidates
    without replacement). A flaw of drafting without replacement only.

    Raises
    ------
    ValueError
        ``drafting`` other than ``"without"``.
    """

    drafting: str = "without"
    name: ClassVar[str] = "original_q"
    exact: ClassVar[bool] = False

    def __post_init__(self):
        super().__post_init__()
        if self.drafting != "without":
            raise ValueError("drafting: 'original_q' is a flaw of drafting without replacement "
                             f"(drafting='without'; got {self.drafting!r})")

    def proposal_law(self, q, law):
        return q


@dataclass(frozen=True, repr=False)
class NoResidualUpdate(RecursiveRejection):
    """Every sibling tested against the node's target law ``p``; only the final correction uses ``(p - q)^+``.

    Recursive rejection must carry the residual from one sibling to the next
    (``r_{j+1} = (r_j - q_j)^+ / Z``): a second candidate tested against ``p`` again gets
    mass that the first candidate's acceptance already delivered. The natural way to
    generalise a one-candidate verifier to several; no shipped instance was found in the
    engines' trackers, so it stands as the plausible mistake of multi-draft verification.
    """

    name: ClassVar[str] = "no_residual_update"
    exact: ClassVar[bool] = False
    carries_residual: ClassVar[bool] = False


@dataclass(frozen=True, repr=False)
class ResampleOnMismatch(Matching):
    """The matching rule emitting a *fresh* target draw at the mismatch instead of the sample that caused it.

    The mismatching sample ``y_i`` is a draw from ``p_i`` conditioned on ``y_i != x_i``; a
    fresh draw is not, so the emitted law per position is ``q p + (1 - sum q p) p``, not
    ``p``: the draft token gets a second chance. No shipped instance was found; it is the
    mistake one step away from the exact rule (Hugging Face transformers' assisted
    generation keeps the target's own sample, PR huggingface/transformers#27979).
    """

    name: ClassVar[str] = "resample_on_mismatch"
    exact: ClassVar[bool] = False

    def mismatch_law(self, p, x):
        return list(p)

    def at_mismatch(self, y, p, rng):
        return int(draw(p, rng.random()))


TOKEN_RESIDUAL = TokenResidual()
FIRST_FAILURE = FirstFailure()
ORIGINAL_Q = OriginalQ()
NO_RESIDUAL_UPDATE = NoResidualUpdate("with")
RESAMPLE_ON_MISMATCH = ResampleOnMismatch()
#: Flaws of block verification, in the order of Appendix A4.
BLOCK_FLAWS: tuple[BlockVerification, ...] = (TOKEN_RESIDUAL, FIRST_FAILURE)
#: Flaws of recursive rejection over draft trees (another drafting mode:
#: ``NoResidualUpdate("topk")``).
TREE_FLAWS: tuple[RecursiveRejection, ...] = (ORIGINAL_Q, NO_RESIDUAL_UPDATE)
#: Flaws of the matching rule.
MATCHING_FLAWS: tuple[Matching, ...] = (RESAMPLE_ON_MISMATCH,)
#: Every verification-rule flaw.
RULE_FLAWS: tuple = BLOCK_FLAWS + TREE_FLAWS + MATCHING_FLAWS
