"""Exact laws of stateless verification rules: draft paths, cycle outcomes, sequence laws.

The rules of :mod:`specdec.rules.token`, :mod:`specdec.rules.block`, :mod:`specdec.rules.trees`,
:mod:`specdec.rules.matching` and :mod:`specdec.rules.lossy` share one shape. A **cycle** starts from
the emitted text, drafts (a chain of ``gamma`` tokens, or a tree), lets the target score
every drafted position in one pass, and emits an accepted prefix plus one token chosen by
the target; the next cycle starts from the emitted text alone. The law of the first
``length`` emitted tokens then follows by the one dynamic programme over cycle states
(:func:`cycle_state_law`; :func:`rule_sequence_law` for these rules).

A cycle's law is a list of **outcomes** (:class:`Outcome`): the
tokens the cycle appends to the text (a tuple, 1 to ``gamma + 1`` tokens, ending at EOS
if one is emitted) and how many drafted tokens were accepted. Chain rules are written as
a *verifier* applied to each **draft path** (:class:`DraftPath`: the drafted tokens, their
probability, and the target and draft laws along the path) by :func:`chain_outcomes`.

Arithmetic is generic: the laws along a path are plain Python lists, so the same code
gives floating-point laws on the toy models of :mod:`specdec.models` and exact rational
laws (``fractions.Fraction``) on the context-free examples of the papers
(:func:`fixed_oracle`).

Every rule is an object (:class:`Rule`; :class:`ChainRule` for the rules that verify one
drafted chain) with two halves that must agree: :meth:`Rule.outcomes`, the exact law of one
cycle, from which its sequence law, accepted-count law and mean follow
(:meth:`Rule.sequence_law`, :meth:`Rule.accepted_count_law`, :meth:`Rule.mean_accepted`);
and :meth:`Rule.sample`, the reference procedure that draws one cycle with explicit
uniforms. The exact rules live in their modules (:data:`specdec.rules.block.BLOCK`,
:data:`specdec.rules.matching.MATCHING`, :class:`specdec.rules.trees.RecursiveRejection`,
:class:`specdec.rules.lossy.Lossy`); each flaw is one subclass in the module of its rule;
:mod:`specdec.rules` registers them all. :class:`specdec.rules.RuleSampler` is the one adapter that hands any rule to the conformance kit as a
block sampler, with the accepted-count law of the rule declared beside it. Used in
Chapter 5 and Appendix A4.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023, Sec. 2.3 (one cycle of draft, score, verify).
.. [2] Z. Sun et al., "Block Verification Accelerates Speculative Decoding", ICLR 2025,
   arXiv:2403.10444, Sec. 2 (a verifier maps the draft block and the laws along it to an
   accepted prefix and one corrected token).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, ClassVar, NamedTuple

import numpy as np

from specdec.laws import LawError, check_int, check_law
from specdec.models import ToyModel, check_models, check_prefix
from specdec.verify import check_rng, draw

__all__ = [
    "Outcome",
    "DraftPath",
    "LawOracle",
    "model_oracle",
    "fixed_oracle",
    "draft_paths",
    "chain_outcomes",
    "residual_weights",
    "append_outcomes",
    "cycle_state_law",
    "rule_sequence_law",
    "canonical_context",
    "outcome_accepted_law",
    "emitted_count_law",
    "mean_accepted",
    "tempered",
    "draw_weights",
    "path_accepted_law",
    "draft_chain",
    "full_acceptance",
    "sample_full_acceptance",
    "Rule",
    "ChainRule",
]

class Outcome(NamedTuple):
    """One outcome of a stateless cycle: its probability (float or Fraction), the tokens it
    appends to the text, the drafted tokens accepted (a plain 3-tuple is read the same)."""

    probability: object
    emitted: tuple
    n_accepted: int


def tempered(model: ToyModel, temperature: float, *, name: str | None = None) -> ToyModel:
    """The table model whose every next-token law is ``p^(1/T) / sum p^(1/T)``.

    This is ``softmax(log p / T)``: the law a decoder samples at temperature ``T`` when
    the model's logits are ``log p``. ``T = 1`` returns an equal table.

    Parameters
    ----------
    model : ToyModel
        A table model.
    temperature : float
        ``T > 0``.
    name : str, optional
        Label (default: the model's name and the temperature).

    Raises
    ------
    TypeError
        If ``model`` is not a table :class:`~specdec.models.ToyModel`.
    ValueError
        If ``temperature`` is not a finite positive number.

    Examples
    --------
    >>> from specdec.models import ToyModel
    >>> m = ToyModel(2, None, table=[[[0.8, 0.2], [0.8, 0.2], [0.8, 0.2]]])
    >>> tempered(m, 0.5).next_law(()).round(4).tolist()
    [0.9412, 0.0588]
    """
    if not isinstance(model, ToyModel) or model.table is None:
        raise TypeError("model: must be a table ToyModel")
    t = float(temperature)
    if not (np.isfinite(t) and t > 0):
        raise ValueError(f"temperature: must be finite and > 0 (got {temperature!r})")
    with np.errstate(divide="ignore"):
        logits = np.log(model.table) / t
    logits -= logits.max(axis=-1, keepdims=True)
    w = np.exp(logits)
    w /= w.sum(axis=-1, keepdims=True)
    return ToyModel(model.vocab_size, model.eos, table=w, order=model.order,
                    name=name or f"{model.name} (T = {t:g})")


def draw_weights(weights, u: float) -> int:
    """One token from non-negative weights (normalised here) with :func:`specdec.verify.draw`."""
    w = np.asarray(weights, dtype=float)
    return int(draw(w / w.sum(), u))


# --------------------------------------------------------------------------------------
# Laws along a path
# --------------------------------------------------------------------------------------


class LawOracle:
    """Next-token laws of the target and the draft as Python lists, memoised per context.

    Build one with :func:`model_oracle` (toy models, floats) or :func:`fixed_oracle`
    (context-free laws, floats or fractions).
    """

    def __init__(self, p_fn: Callable, q_fn: Callable, vocab_size: int, eos, canon: Callable):
        self._p_fn, self._q_fn = p_fn, q_fn
        self.vocab_size, self.eos, self.canon = vocab_size, eos, canon
        self._p: dict = {}
        self._q: dict = {}

    def p(self, ctx: tuple) -> list:
        """Target law after ``ctx`` (list of probabilities)."""
        key = self.canon(ctx)
        hit = self._p.get(key)
        if hit is None:
            hit = self._p[key] = list(self._p_fn(key))
        return hit

    def q(self, ctx: tuple) -> list:
        """Draft law after ``ctx`` (list of probabilities)."""
        key = self.canon(ctx)
        hit = self._q.get(key)
        if hit is None:
            hit = self._q[key] = list(self._q_fn(key))
        return hit


def canonical_context(target: ToyModel, draft: ToyModel) -> Callable:
    """Function shortening a context to the suffix that fixes every future law of both models."""
    mems = (target.memory, draft.memory)
    if None in mems:
        return lambda ctx: ctx
    keep = max(mems)
    return lambda ctx: ctx[-keep:] if len(ctx) > keep else ctx


def model_oracle(target: ToyModel, draft: ToyModel) -> LawOracle:
    """Laws of a toy target/draft pair (floats), contexts shortened to what the laws see.

    Raises
    ------
    TypeError, ValueError
        If the models are not ToyModels or do not share vocabulary and EOS id.
    """
    check_models(target, draft)
    return LawOracle(lambda c: target.next_law(c).tolist(), lambda c: draft.next_law(c).tolist(),
                     target.vocab_size, target.eos, canonical_context(target, draft))


def fixed_oracle(p, q, *, eos: int | None = None) -> LawOracle:
    """Context-free laws ``p`` and ``q`` at every position (the papers' worked examples).

    Entries that are :class:`fractions.Fraction` stay exact: every law computed from this
    oracle is then a rational number.

    Parameters
    ----------
    p, q : sequence of float or Fraction, shape (V,)
        Target and draft laws (validated; fractions must sum to exactly 1).
    eos : int, optional
        End-of-sequence id (default: none).

    Raises
    ------
    LawError
        On invalid laws or mismatched sizes.

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> o = fixed_oracle([F(1, 3), F(2, 3)], [F(2, 3), F(1, 3)])
    >>> o.p((0, 1)), o.q(())
    ([Fraction(1, 3), Fraction(2, 3)], [Fraction(2, 3), Fraction(1, 3)])
    """
    pl, ql = list(p), list(q)
    for nm, law in (("p", pl), ("q", ql)):
        if all(isinstance(x, Fraction) for x in law):
            if sum(law) != 1 or min(law) < 0:
                raise LawError(f"{nm}: fractions must be >= 0 and sum to exactly 1 (sum = {sum(law)})")
        else:
            law[:] = check_law(law, nm).tolist()
    if len(pl) != len(ql):
        raise LawError(f"q: size {len(ql)} does not match p ({len(pl)})")
    if eos is not None:
        eos = check_int(eos, "eos", minimum=0, maximum=len(pl) - 1)
    return LawOracle(lambda c: pl, lambda c: ql, len(pl), eos, lambda c: ())


# --------------------------------------------------------------------------------------
# Draft paths and chain rules
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DraftPath:
    """One drafted chain and the laws along it.

    Attributes
    ----------
    tokens : tuple of int
        The drafted tokens ``x_1 .. x_k`` (``k = gamma``, or fewer when ``x_k`` is EOS).
    prob : float or Fraction
        Probability that the draft proposes exactly these tokens.
    p : tuple of list
        Target laws ``p_1 .. p_{k+1}``, ``p_i = p(. | ctx, x_1..x_{i-1})``; ``p_{k+1}``
        (the bonus position) is absent when ``x_k`` is EOS.
    q : tuple of list
        Draft laws ``q_1 .. q_k`` the tokens were drawn from (a point mass on the
        draft's most likely token for a greedy draft).
    """

    tokens: tuple
    prob: object
    p: tuple
    q: tuple

    @property
    def ends(self) -> bool:
        """Whether the last drafted token is EOS (no bonus position)."""
        return len(self.p) == len(self.tokens)


def _argmax(law: list) -> int:
    best = max(law)
    return law.index(best)


def draft_paths(oracle: LawOracle, ctx: tuple, gamma: int, *, greedy: bool = False) -> list[DraftPath]:
    """Every chain of ``gamma`` draft tokens from ``ctx`` and its probability.

    Parameters
    ----------
    oracle : LawOracle
        Target and draft laws.
    ctx : tuple of int
        Confirmed context (prompt and emitted text).
    gamma : int
        Draft length (>= 1). Drafting stops after an EOS proposal.
    greedy : bool
        Draft the draft model's most likely token (lowest id on ties) instead of a
        sample; its law is then a point mass, which is what a verifier must use.

    Returns
    -------
    list of DraftPath
        Probabilities sum to 1.

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> o = fixed_oracle([F(1, 3), F(2, 3)], [F(2, 3), F(1, 3)])
    >>> [(d.tokens, d.prob) for d in draft_paths(o, (), 2)][:2]
    [((0, 0), Fraction(4, 9)), ((0, 1), Fraction(2, 9))]
    """
    gamma = check_int(gamma, "gamma", minimum=1)
    eos = oracle.eos
    out: list[DraftPath] = []

    def rec(toks, prob, ps, qs):
        here = ctx + toks
        if len(toks) == gamma or (toks and toks[-1] == eos):
            bonus = () if (toks and toks[-1] == eos) else (oracle.p(here),)
            out.append(DraftPath(toks, prob, tuple(ps) + bonus, tuple(qs)))
            return
        q = oracle.q(here)
        if greedy:
            x = _argmax(q)
            point = [0 * q[0]] * len(q)
            point[x] = 1 + 0 * q[0]
            rec(toks + (x,), prob, ps + [oracle.p(here)], qs + [point])
            return
        p = oracle.p(here)
        for x, w in enumerate(q):
            if w > 0:
                rec(toks + (x,), prob * w, ps + [p], qs + [q])

    rec((), 1 + 0 * oracle.q(ctx)[0], [], [])
    return out


def chain_outcomes(path_law: Callable, oracle: LawOracle, ctx: tuple, gamma: int, *,
                   greedy: bool = False) -> list[Outcome]:
    """Outcomes of one chain cycle: ``path_law(path)`` applied to every draft path.

    Parameters
    ----------
    path_law : callable
        ``path_law(path: DraftPath) -> list of (probability given the path, emitted,
        n_accepted)``.
    oracle, ctx, gamma, greedy
        As in :func:`draft_paths`.

    Returns
    -------
    list of Outcome
        ``(probability, emitted, n_accepted)``; probabilities sum to 1.
    """
    out = []
    for path in draft_paths(oracle, ctx, gamma, greedy=greedy):
        for w, emitted, n_acc in path_law(path):
            if w > 0:
                out.append(Outcome(path.prob * w, emitted, n_acc))
    return out


def residual_weights(w, p, q) -> tuple[list, object]:
    """``max(w p - q, 0)`` entry by entry, and its sum (floats or fractions).

    ``w = 1`` gives the token-level residual ``(p - q)^+`` of token-by-token verification;
    block verification weighs ``p`` by its cumulative weight ``w_tau``.
    """
    plus = [max(w * a - b, 0 * b) for a, b in zip(p, q)]
    return plus, sum(plus)


def append_outcomes(path: DraftPath, tau: int, weight, law: list, total, out: list) -> None:
    """Append to ``out`` the outcomes ``(weight law(y) / total, x_1..x_tau y, tau)`` of one branch.

    The branch accepts the first ``tau`` drafted tokens of ``path`` and then emits one
    token ``y`` drawn from the weights ``law`` (sum ``total``); nothing is appended when
    ``weight`` or ``total`` is 0.
    """
    if weight <= 0 or total <= 0:
        return
    head = path.tokens[:tau]
    for y, m in enumerate(law):
        if m > 0:
            out.append(Outcome(weight * m / total, head + (y,), tau))


# --------------------------------------------------------------------------------------
# Laws of a run
# --------------------------------------------------------------------------------------


def cycle_state_law(start, cycle: Callable, advance: Callable, length: int, eos, *,
                    key: Callable | None = None, cut_at_eos: bool = True) -> dict:
    """Exact law of the first ``length`` emitted tokens of repeated cycles, over cycle states.

    The one dynamic programme behind every sequence law of the library: the states
    ``(text, state)`` are visited in order of text length, each distinct cycle is
    enumerated once (memoised on ``key(state, need)``), and every outcome either finishes
    the text (``length`` tokens reached, or EOS emitted) or moves its probability to the
    state ``advance(state, outcome)`` after the longer text. Arithmetic is generic: floats
    or fractions.

    Parameters
    ----------
    start : hashable
        The state of the first cycle (for example the canonical prompt context).
    cycle : callable
        ``cycle(state, need) -> list of outcomes``, each a tuple whose first two entries
        are its probability and the tokens it emits; ``need`` is the number of tokens
        still wanted (a cycle may stop enumerating past them).
    advance : callable
        ``advance(state, outcome) -> state`` of the next cycle (called for outcomes that
        do not finish the text).
    length : int
        Number of emitted tokens whose law is computed (>= 1).
    eos : int or None
        End-of-sequence id: the text ends at an emitted EOS.
    key : callable, optional
        Memo key of a cycle, ``key(state, need)``; default ``state`` (the cycle does not
        depend on ``need``).
    cut_at_eos : bool
        Cut the text after its first EOS (default). False keeps what a cycle emits past
        an EOS in the key (a rule that does not stop at EOS).

    Returns
    -------
    dict[tuple[int, ...], float or Fraction]
        Sequence -> probability, keys as in :func:`specdec.models.sequence_law`.

    References
    ----------
    Leviathan et al. (2023), App. A.1: each cycle's output law given its start state, by
    induction over the cycles, gives the law of the text.
    """
    length = check_int(length, "length", minimum=1)
    key = key or (lambda state, need: state)
    memo: dict = {}
    buckets = [defaultdict(int) for _ in range(length)]
    buckets[0][((), start)] = 1
    law: dict = defaultdict(int)
    for level in range(length):
        for (text, state), prob in buckets[level].items():
            need = length - level
            k = key(state, need)
            outs = memo.get(k)
            if outs is None:
                outs = memo[k] = cycle(state, need)
            for outcome in outs:
                pr, emitted = outcome[0], outcome[1]
                text2 = text + tuple(emitted)
                if cut_at_eos and eos is not None and eos in text2:
                    text2 = text2[: text2.index(eos) + 1]
                if len(text2) >= length or (eos is not None and eos in text2):
                    law[text2[:length]] += prob * pr
                else:
                    buckets[len(text2)][(text2, advance(state, outcome))] += prob * pr
        buckets[level] = {}
    return dict(law)


def rule_sequence_law(cycle: Callable, oracle: LawOracle, prefix, length: int) -> dict:
    """Exact law of the first ``length`` tokens emitted by repeated stateless cycles.

    A stateless cycle starts from the emitted text and nothing else, so the state of
    :func:`cycle_state_law` is the context itself (cycles from contexts with the same
    canonical form are enumerated once).

    Parameters
    ----------
    cycle : callable
        ``cycle(ctx) -> list of Outcome``: one cycle's outcomes from context ``ctx``.
    oracle : LawOracle
        Supplies the vocabulary, the EOS id and the context canonicalisation.
    prefix : sequence of int
        Prompt (no EOS).
    length : int
        Number of emitted tokens whose law is computed (>= 1).

    Returns
    -------
    dict[tuple[int, ...], float]
        Sequence -> probability, keys as in :func:`specdec.models.sequence_law` (a
        sequence that emits EOS stops there).
    """
    length = check_int(length, "length", minimum=1)
    prompt = check_prefix(prefix, oracle.vocab_size, eos=oracle.eos)
    return cycle_state_law(prompt, lambda ctx, need: cycle(ctx),
                           lambda ctx, outcome: ctx + tuple(outcome[1]), length, oracle.eos,
                           key=lambda ctx, need: oracle.canon(ctx))


def outcome_accepted_law(outcomes, max_accepted: int) -> list:
    """Law of the number of accepted drafted tokens in one cycle.

    Returns
    -------
    list, length ``max_accepted + 1``
        Entry ``i`` is P(exactly ``i`` drafted tokens accepted) (floats or fractions).
    """
    out = [0] * (check_int(max_accepted, "max_accepted", minimum=0) + 1)
    for pr, _, n_acc in outcomes:
        out[n_acc] += pr
    return out


def emitted_count_law(outcomes, max_emitted: int) -> list:
    """Law of the number of tokens one cycle emits (entry 0 is 0)."""
    out = [0] * (check_int(max_emitted, "max_emitted", minimum=1) + 1)
    for pr, emitted, _ in outcomes:
        out[len(emitted)] += pr
    return out


def mean_accepted(outcomes):
    """Expected number of accepted drafted tokens per cycle (exact for fractions)."""
    return sum(pr * n_acc for pr, _, n_acc in outcomes)


# --------------------------------------------------------------------------------------
# Paths of real models
# --------------------------------------------------------------------------------------


def path_accepted_law(path: DraftPath, path_law: Callable) -> list:
    """Law of the accepted count given one draft path, for a chain verifier.

    Returns
    -------
    list, length ``len(path.tokens) + 1``
    """
    out = [0.0] * (len(path.tokens) + 1)
    for w, _, n in path_law(path):
        out[n] += w
    return out


# --------------------------------------------------------------------------------------
# Rules as objects, and the one adapter the conformance kit calls
# --------------------------------------------------------------------------------------


def draft_chain(target: ToyModel, draft: ToyModel, ctx: tuple, gamma: int, rng, *,
                greedy: bool = False) -> DraftPath:
    """Draft one chain of up to ``gamma`` tokens from ``ctx`` and record the laws along it.

    One uniform of ``rng`` per drafted token (none for a greedy draft, whose recorded law
    is a point mass on the draft's most likely token); drafting stops after an EOS
    proposal. The target law at the bonus position is recorded unless the chain ends at
    EOS (as in :func:`draft_paths`). ``ctx`` is assumed valid.

    Returns
    -------
    DraftPath
        ``prob`` is 1 (a sample, not an enumeration).
    """
    eos = target.eos
    toks, ps, qs = [], [], []
    while len(toks) < gamma and not (toks and toks[-1] == eos):
        here = ctx + tuple(toks)
        q = draft.next_law(here)
        if greedy:
            x = int(np.argmax(q))
            q = np.zeros_like(q)
            q[x] = 1.0
        else:
            x = draw_weights(q, rng.random())
        toks.append(x)
        ps.append(target.next_law(here).tolist())
        qs.append(q.tolist())
    if toks[-1] != eos:
        ps.append(target.next_law(ctx + tuple(toks)).tolist())
    return DraftPath(tuple(toks), 1.0, tuple(ps), tuple(qs))


def full_acceptance(path: DraftPath, weight) -> list:
    """Outcomes of accepting the whole drafted chain with probability ``weight``.

    The chain alone when it ends at EOS (no bonus position), else the chain and a bonus
    token from the target's law after it: ``(weight p_{k+1}(y), x_1..x_k y, k)``. Empty
    when ``weight`` is 0.
    """
    k = len(path.tokens)
    if weight <= 0:
        return []
    if path.ends:
        return [Outcome(weight, path.tokens, k)]
    return [Outcome(weight * w, path.tokens + (y,), k) for y, w in enumerate(path.p[k]) if w > 0]


def sample_full_acceptance(path: DraftPath, rng) -> tuple[tuple, int]:
    """``(emitted, n_accepted)`` after accepting the whole chain: the bonus drawn with one uniform."""
    k = len(path.tokens)
    if path.ends:
        return path.tokens, k
    return path.tokens + (draw_weights(path.p[k], rng.random()),), k


@dataclass(frozen=True)
class Rule:
    """A stateless verification rule: the exact law of one cycle and a reference sampler.

    ``shape`` is what one cycle drafts: the draft length ``gamma`` for a chain rule, the
    tree widths for a tree rule (:attr:`tree`). ``greedy`` drafts the draft's most likely
    token instead of a sample (chain rules; its law is then a point mass).
    Subclasses define :meth:`outcomes` and :meth:`sample`; the laws below follow.
    """

    name: ClassVar[str] = "rule"
    #: Whether the emitted sequence has exactly the target's law (for any models).
    exact: ClassVar[bool] = True
    #: Whether ``shape`` is a tuple of tree widths (else the draft length gamma).
    tree: ClassVar[bool] = False

    def depth(self, shape) -> int:
        """Most drafted tokens one cycle can accept (gamma; the tree's depth)."""
        return check_int(shape, "gamma", minimum=1)

    def outcomes(self, oracle: LawOracle, ctx: tuple, shape, *, greedy: bool = False) -> list:
        """Outcomes ``(probability, emitted, n_accepted)`` of one cycle from ``ctx``."""
        raise NotImplementedError

    def sample(self, target: ToyModel, draft: ToyModel, ctx: tuple, shape, rng, *,
               greedy: bool = False) -> tuple[tuple, int, int]:
        """One cycle, sampled: ``(emitted, n_accepted, n_proposed)`` (inputs assumed valid)."""
        raise NotImplementedError

    def sequence_law(self, target: ToyModel, draft: ToyModel, prefix, shape, length: int, *,
                     greedy: bool = False) -> dict:
        """Exact law of the first ``length`` tokens emitted by repeated cycles of this rule.

        Parameters
        ----------
        target, draft : ToyModel
            Same vocabulary and EOS id.
        prefix : sequence of int
            Prompt (no EOS).
        shape : int or tuple of int
            Draft length gamma (chain rules) or tree widths (tree rules).
        length : int
            Tokens whose law is computed (cost grows like ``V ** length``).
        greedy : bool
            Greedy draft.

        Returns
        -------
        dict[tuple[int, ...], float]
            Keys as in :func:`specdec.models.sequence_law`; the target's own law when
            :attr:`exact`.

        Raises
        ------
        TypeError, ValueError, LawError
            Invalid models, prefix, shape or length.
        """
        oracle = model_oracle(target, draft)
        self.depth(shape)
        return rule_sequence_law(lambda ctx: self.outcomes(oracle, ctx, shape, greedy=greedy),
                                 oracle, prefix, length)

    def _outcomes_from(self, target, draft, prefix, shape, greedy):
        if isinstance(target, LawOracle):
            return self.outcomes(target, tuple(prefix), shape, greedy=greedy), target
        oracle = model_oracle(target, draft)
        ctx = check_prefix(prefix, oracle.vocab_size, eos=oracle.eos)
        return self.outcomes(oracle, ctx, shape, greedy=greedy), oracle

    def accepted_count_law(self, target, draft, prefix, shape, *, greedy: bool = False) -> list:
        """Exact law of the number of accepted drafted tokens in one cycle from ``prefix``.

        ``target`` may be a :class:`LawOracle` (``draft`` is then ignored), which keeps
        fractions exact.

        Returns
        -------
        list, length ``depth(shape) + 1``
            Entry ``i`` is P(``i`` drafted tokens accepted).
        """
        outs, _ = self._outcomes_from(target, draft, prefix, shape, greedy)
        return outcome_accepted_law(outs, self.depth(shape))

    def mean_accepted(self, target, draft, prefix, shape, *, greedy: bool = False):
        """Expected accepted drafted tokens per cycle (exact: fractions stay fractions)."""
        law = self.accepted_count_law(target, draft, prefix, shape, greedy=greedy)
        return sum(i * w for i, w in enumerate(law))

    def first_cycle_accepted_law(self, target, draft, prefix, shape, *,
                                 greedy: bool = False) -> np.ndarray:
        """Joint law of one cycle's accepted count and its end at an accepted end-of-sequence.

        Returns
        -------
        numpy.ndarray, shape (depth + 1, 2)
            ``[k, e]``: probability that ``k`` drafted tokens are accepted and (``e = 1``)
            the cycle ends at an accepted EOS proposal (no token follows it). The contract
            of the conformance kit's declared accepted-count laws.
        """
        outs, oracle = self._outcomes_from(target, draft, prefix, shape, greedy)
        out = np.zeros((self.depth(shape) + 1, 2))
        for pr, emitted, n in outs:
            ends = oracle.eos is not None and n == len(emitted) and emitted[-1] == oracle.eos
            out[n, int(ends)] += float(pr)
        return out

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, repr=False)
class ChainRule(Rule):
    """A rule that verifies one drafted chain given the laws along it (:class:`DraftPath`).

    Subclasses define :meth:`path_outcomes` (exact) and :meth:`sample_path` (the procedure).
    The name ``verify`` belongs to the kernel :func:`specdec.verify.verify`; a subclass that
    defines a method ``verify`` is refused when it is created, so that a rule written for
    the old name cannot be silently ignored.

    Raises
    ------
    TypeError
        At class creation, a subclass defines ``verify`` instead of :meth:`path_outcomes`.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "verify" in vars(cls):
            raise TypeError(f"{cls.__module__}.{cls.__qualname__}: define path_outcomes, "
                            f"not verify (the name verify is the kernel specdec.verify.verify)")

    def path_outcomes(self, path: DraftPath) -> list:
        """Exact outcomes of verifying one drafted path: a law, not a sampler.

        Parameters
        ----------
        path : DraftPath
            The drafted tokens, their probability, and the target and draft laws along
            the path.

        Returns
        -------
        list of tuple
            Outcomes ``(probability given the path, emitted, n_accepted)``; the
            probabilities sum to 1 (exactly, for fractions). Consumed by
            :func:`chain_outcomes` and :func:`path_accepted_law`.
        """
        raise NotImplementedError

    def sample_path(self, path: DraftPath, rng) -> tuple[tuple, int]:
        """``(emitted, n_accepted)`` of verifying ``path`` with fresh uniforms of ``rng``."""
        raise NotImplementedError

    def outcomes(self, oracle, ctx, shape, *, greedy=False):
        return chain_outcomes(self.path_outcomes, oracle, ctx, self.depth(shape), greedy=greedy)

    def sample(self, target, draft, ctx, shape, rng, *, greedy=False):
        path = draft_chain(target, draft, ctx, self.depth(shape), rng, greedy=greedy)
        emitted, n_acc = self.sample_path(path, rng)
        return tuple(emitted), n_acc, len(path.tokens)
