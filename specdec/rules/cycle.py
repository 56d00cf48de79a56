"""The stateful block cycle: its rules (the correct cycle and one object per bug) and exact laws.

A block cycle of :mod:`specdec.simulate.cycle` verifies token by token (the kernel
:func:`specdec.verify.verify`; the rule :data:`specdec.rules.token.TOKEN`), and then hands the
next cycle a model context and, for some rules, proposals to reuse. That hand-over is
where four realistic bugs live: a **cycle rule** (:class:`CycleRule`) says how one cycle
drafts, which laws it hands to the kernel and what state it leaves for the next cycle. The
base class is the correct cycle (:data:`CORRECT_CYCLE`); each bug is a subclass that
overrides one hook, one instance, listed in :data:`CYCLE_FLAWS` (a new cycle bug goes
here; :mod:`specdec.rules` registers it).

The exact laws enumerate every draft trajectory and every accept/reject branch of a cycle
(:func:`block_sequence_law`, :func:`cycle_length_law`, :func:`cycle_accepted_law`), with
the states carried between cycles; the law of the first ``length`` tokens then follows
from the dynamic programme over cycle states of :func:`specdec.rules.base.cycle_state_law`,
the one that the stateless rules of :mod:`specdec.rules.base` use too.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023, Sec. 2.3 (Algorithm 1) and App. A.1.
.. [2] C. Chen et al., "Accelerating Large Language Model Decoding with Speculative
   Sampling", arXiv:2302.01318, 2023, Algorithm 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from specdec import step as _token
from specdec.rules.base import canonical_context, cycle_state_law
from specdec.laws import check_int
from specdec.models import ToyModel, check_models, check_prefix

__all__ = [
    "CycleRule", "CORRECT_CYCLE", "STALE_PROPOSALS", "NO_ROLLBACK", "BONUS_WRONG_POSITION",
    "EMIT_AFTER_EOS", "STALE_ORIGINAL_Q", "CYCLE_FLAWS", "CYCLE_RULES", "check_cycle_rule",
    "CycleOutcome", "block_sequence_law", "cycle_length_law", "cycle_accepted_law",
]


# ------------------------------------------------------------------------ cycle rules


@dataclass(frozen=True)
class CycleRule:
    """The correct block cycle (:mod:`specdec.simulate.cycle`): the hooks every cycle bug overrides.

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
        raise TypeError(f"{name}: must be a cycle rule of specdec.rules.cycle such as CORRECT_CYCLE or "
                        f"NO_ROLLBACK (got {rule!r})")
    return rule




# --------------------------------------------------------------------------------------
# Exact laws by enumeration
# --------------------------------------------------------------------------------------


class CycleOutcome(NamedTuple):
    """One outcome of a block cycle under a cycle rule, with what the next cycle needs."""

    #: Probability of the outcome.
    probability: float
    #: Tokens the cycle emits.
    emitted: tuple
    #: The cycle's proposals as ``(token, draft_context)`` pairs, for the next state (None
    #: when the outcome fills the tokens wanted or ends at EOS).
    drafted: tuple | None
    #: Proposals accepted.
    n_accepted: int
    #: Whether the last emitted token is a bonus draw.
    bonus: bool


class _Steps:
    """Memoised laws (as supports) and the acceptance/residual of each (p, q) pair."""

    def __init__(self, target: ToyModel, draft: ToyModel):
        self.target, self.draft = target, draft
        self.pairs: dict[tuple, tuple] = {}
        self.supports: dict[tuple, list] = {}

    def p(self, ctx):
        return self._support("p", self.target, ctx)

    def q(self, ctx):
        return self._support("q", self.draft, ctx)

    def _support(self, tag, model, ctx):
        key = (tag, ctx)
        hit = self.supports.get(key)
        if hit is None:
            hit = _support(model.next_law(ctx))
            self.supports[key] = hit
        return hit

    def step(self, pctx, qctx):
        """``(acceptance probabilities as a list, support of the residual)``."""
        key = (pctx, qctx)
        hit = self.pairs.get(key)
        if hit is None:
            p, q = self.target.next_law(pctx), self.draft.next_law(qctx)
            hit = (_token.acceptance_probabilities(p, q).tolist(), _support(_token.residual(p, q)))
            self.pairs[key] = hit
        return hit


def _support(law: np.ndarray):
    """``[(token, probability), ...]`` over the tokens of positive probability."""
    return [(t, w) for t, w in enumerate(law.tolist()) if w > 0]


def _cycle_outcomes(steps: _Steps, ctx: tuple, stale: tuple, gamma: int, variant: CycleRule, eos, need):
    """Enumerate one cycle: a list of :class:`CycleOutcome`.

    ``drafted`` is a tuple of ``(token, draft_context)`` pairs (``None`` when the outcome
    already fills ``need`` tokens or ends at EOS, so the next state is irrelevant).
    Proposals are enumerated interleaved with their verification; proposals after a
    rejection are enumerated only when the variant carries them into the next state.
    """
    stop_at_eos = variant.stops_at_eos
    keep_tail = variant.carries_proposals
    out = []

    def proposal(j, cj):
        """Branches ``(token, weight, q_context_for_ratio, source_context)`` at position j."""
        if j < len(stale):
            x, src = stale[j]
            qctx = variant.stale_q_context(cj, src)
            return [(x, 1.0, qctx, src)]
        return [(x, w, cj, cj) for x, w in steps.q(cj)]

    def tails(j, cj, drafted, prob):
        """Complete the discarded proposals after a rejection at position j - 1."""
        if j >= gamma or (stop_at_eos and drafted[-1][0] == eos):
            out_t.append((prob, drafted))
            return
        for x, w, _, src in proposal(j, cj):
            tails(j + 1, cj + (x,), drafted + ((x, src),), prob * w)

    def rec(j, props, drafted, prob):
        cj = ctx + props
        if j >= need:  # enough tokens: what follows is cut away
            out.append(CycleOutcome(prob, props[:need], None, j, False))
            return
        if j == gamma or (j > 0 and stop_at_eos and props[-1] == eos):
            if stop_at_eos and j > 0 and props[-1] == eos:
                out.append(CycleOutcome(prob, props, drafted, j, False))
                return
            law = steps.p(ctx + props[:variant.bonus_index(j)])
            for b, w in law:
                out.append(CycleOutcome(prob * w, props + (b,), drafted, j, True))
            return
        for x, w, qctx, src in proposal(j, cj):
            acc, res = steps.step(cj, qctx)
            a = acc[x]
            d2 = drafted + ((x, src),)
            if a > 0:
                rec(j + 1, props + (x,), d2, prob * w * a)
            if a < 1:
                pr = prob * w * (1.0 - a)
                for r, wr in res:
                    emitted = props + (r,)
                    terminal = len(emitted) >= need or r == eos
                    if keep_tail and not terminal:
                        out_t.clear()
                        tails(j + 1, cj + (x,), d2, pr * wr)
                        for pt, dt in list(out_t):
                            out.append(CycleOutcome(pt, emitted, dt, j, False))
                    else:
                        out.append(CycleOutcome(pr * wr, emitted, None if terminal else d2, j, False))

    out_t: list = []
    rec(0, (), (), 1.0)
    return out


def block_sequence_law(target: ToyModel, draft: ToyModel, prefix, gamma: int, length: int,
                       variant: CycleRule = CORRECT_CYCLE) -> dict[tuple[int, ...], float]:
    """Exact law of the first ``length`` tokens emitted by repeated speculative cycles.

    Sums, in floating point, over every draft trajectory and every accept/reject branch
    of every cycle (no sampling). Cycles start from the prompt and continue until
    ``length`` tokens are emitted or the text contains EOS. Work is organised as a dynamic
    programme over states (text, model context, reused proposals) in order of text
    length, so each state's cycle is enumerated once; branches that can no longer affect
    the first ``length`` tokens are merged. Cost grows like ``V ** length``: keep
    ``V <= 5`` and ``length <= 6``.

    Variants (precise definitions; the first is the algorithm of the module docstring):

    ``CORRECT_CYCLE``
        As in the module docstring.
    ``STALE_PROPOSALS``
        After a rejection at position ``i`` of a cycle with proposals ``d_1..d_k``, the
        next cycle does not redraft: its first proposals are the stale ``d_{i+1}..d_k``
        (drawn from ``q`` conditioned on the *rejected* ``d_i``), followed by fresh
        proposals up to ``gamma`` in total. The stale tokens are verified as if they had
        been drafted at the current context: ratio ``p(x | text) / q(x | text)`` and
        residual ``(p - q(. | text))^+`` (the draft model re-scores them on the corrected
        text). The proposal's real law and the law in the ratio differ, so the output law
        is wrong.
    ``STALE_ORIGINAL_Q``
        Same reuse, but each stale token keeps the draft law it was actually drawn from
        (ratio and residual use ``q(. | old context)``). Not a bug: the acceptance test is
        valid for *any* proposal law as long as the ratio uses the law the proposal was
        really drawn from, so this variant is exact. It shows what the previous bug breaks.
    ``NO_ROLLBACK``
        After a rejection at position ``i``, the caches are not cropped: both models keep
        every proposal ``d_1..d_k`` of the cycle in their context and the corrected token is
        appended after them. The emitted text is correct for this cycle
        (``d_1..d_{i-1}, r``), but every later law is computed from the polluted context
        ``(context, d_1..d_k, r)`` (its last tokens and its length, i.e. the position, are
        wrong). After a fully accepted cycle the contexts agree again.
    ``BONUS_WRONG_POSITION``
        When all ``gamma`` proposals are accepted (and the last is not EOS), the extra token
        is drawn from the target law of the last *drafted* position,
        ``p(. | x, d_1..d_{gamma-1})`` (the row that scored ``d_gamma``: an off-by-one in
        the logits index), instead of ``p(. | x, d_1..d_gamma)``.
    ``EMIT_AFTER_EOS``
        Drafting does not stop at EOS and the cycle does not end at an accepted EOS: all
        ``gamma`` positions are verified as usual and everything the cycle emits is kept,
        including tokens after an accepted EOS (and a bonus when all are accepted).
        Generation stops after the first cycle whose output contains EOS. The sequence
        keys of this variant are **not** cut at EOS, so its law puts mass on sequences that
        continue past EOS, which the target never produces.

    Parameters
    ----------
    target, draft : ToyModel
        Models over the same vocabulary and EOS id.
    prefix : sequence of int
        Prompt (no EOS).
    gamma : int
        Draft length (>= 1).
    length : int
        Number of emitted tokens whose law is computed (>= 1).
    variant : specdec.rules.cycle.CycleRule
        :data:`specdec.rules.cycle.CORRECT_CYCLE` (default) or a rule of
        :data:`specdec.rules.cycle.CYCLE_RULES`.

    Returns
    -------
    dict[tuple[int, ...], float]
        Sequence -> probability (keys as in :func:`specdec.models.sequence_law`); values
        sum to 1 up to rounding.

    Raises
    ------
    ValueError, TypeError
        Invalid arguments, each named in the message (sizes through
        :func:`specdec.laws.check_int`).

    References
    ----------
    Leviathan et al. (2023), Sec. 2.3 and App. A.1 (each position's output law is the
    target's given the emitted prefix, which by induction gives the law of the block).

    Examples
    --------
    >>> from specdec.laws import law_tv
    >>> from specdec.models import toy_pair, sequence_law
    >>> p, q = toy_pair()
    >>> law = block_sequence_law(p, q, (), 2, 3)
    >>> round(law_tv(law, sequence_law(p, (), 3)), 12)
    0.0
    """
    check_models(target, draft)
    prompt = check_prefix(prefix, target.vocab_size, eos=target.eos)
    gamma = check_int(gamma, "gamma", minimum=1)
    length = check_int(length, "length", minimum=1)
    variant = check_cycle_rule(variant)
    eos = target.eos
    steps = _Steps(target, draft)
    canon = canonical_context(target, draft)

    def cycle(state, need):  # a cycle's outcomes depend on the model context, not on the text
        ctx, stale = state
        return _cycle_outcomes(steps, ctx, stale, gamma, variant, eos, need)

    def advance(state, outcome):
        ctx, _ = state
        _, emitted, drafted, n_acc, _ = outcome
        ctx2, stale2 = variant.next_state(ctx, emitted, drafted, n_acc)
        return canon(ctx2), tuple((t, None if src is None else canon(src)) for t, src in stale2)

    return cycle_state_law((canon(prompt), ()), cycle, advance, length, eos,
                           key=lambda state, need: state + (need,), cut_at_eos=False)


def _cycle_table(target, draft, prefix, gamma, variant):
    check_models(target, draft)
    ctx = check_prefix(prefix, target.vocab_size, eos=target.eos)
    gamma = check_int(gamma, "gamma", minimum=1)
    variant = check_cycle_rule(variant)
    steps = _Steps(target, draft)
    return gamma, _cycle_outcomes(steps, ctx, (), gamma, variant, target.eos, np.inf)


def cycle_length_law(target: ToyModel, draft: ToyModel, prefix, gamma: int, variant: CycleRule = CORRECT_CYCLE) -> np.ndarray:
    """Exact law of the number of tokens one cycle emits from ``prefix``.

    Parameters
    ----------
    target, draft : ToyModel
        Models over the same vocabulary.
    prefix : sequence of int
        Confirmed context (no EOS).
    gamma : int
        Draft length (>= 1).
    variant : specdec.rules.cycle.CycleRule
        A rule of :data:`specdec.rules.cycle.CYCLE_RULES` (a single cycle from a fresh state).

    Returns
    -------
    numpy.ndarray, shape (gamma + 2,)
        Entry ``n`` is the probability of emitting exactly ``n`` tokens; entry 0 is 0 (a
        cycle always emits at least one token).

    Examples
    --------
    >>> from specdec.models import toy_pair
    >>> p, q = toy_pair()
    >>> law = cycle_length_law(p, q, (), 3)
    >>> law.shape, float(law[0]), round(float(law.sum()), 12)
    ((5,), 0.0, 1.0)
    """
    gamma, outs = _cycle_table(target, draft, prefix, gamma, variant)
    law = np.zeros(gamma + 2)
    for pr, emitted, *_ in outs:
        law[len(emitted)] += pr
    return law


def cycle_accepted_law(target: ToyModel, draft: ToyModel, prefix, gamma: int, variant: CycleRule = CORRECT_CYCLE) -> np.ndarray:
    """Exact law of the number of accepted proposals in one cycle from ``prefix``.

    Returns
    -------
    numpy.ndarray, shape (gamma + 1,)
        Entry ``i`` is P(exactly ``i`` proposals accepted).

    Examples
    --------
    >>> from specdec.models import toy_pair
    >>> p, q = toy_pair(closeness=1.0, eos=None)
    >>> cycle_accepted_law(p, q, (), 2).round(12).tolist()   # q = p: nothing is rejected
    [0.0, 0.0, 1.0]
    """
    gamma, outs = _cycle_table(target, draft, prefix, gamma, variant)
    law = np.zeros(gamma + 1)
    for pr, _, _, n_acc, _ in outs:
        law[n_acc] += pr
    return law
