"""The matching rule: accept while the target's own sample equals the draft token.

Several engines verify a draft without the draft's probabilities (llama.cpp's server,
Hugging Face transformers' assisted generation before 4.37, many MTP ports): at each
drafted position the target **samples its own token** ``y_i ~ p_i``; the draft token is
accepted while ``y_i == x_i``; at the first mismatch the target's sample ``y_i`` is
emitted and the cycle ends; after a full match the target's next sample is the bonus.

**Exactness, for any draft law.** Every emitted token is the target's own sample
``y_i ~ p_i(. | emitted prefix)``: on a match ``x_i = y_i``, on a mismatch ``y_i`` itself.
The draft decides only *where the cycle stops*, never *which token is emitted*. So the
sequence is a sample from the target, whether the draft samples from ``q`` or takes its
argmax, and whatever ``q`` is. With a random stream keyed by output position, the output
is even the *same string* as target-only sampling with the same seed
(:func:`generate`, ``stream="position"``). What the rule loses is acceptance:
``P(accept) = sum_x q(x) p(x)`` for a sampled draft and ``p(argmax q)`` for a greedy one,
against ``sum_x min(p(x), q(x))`` for speculative sampling (:func:`acceptance`).

The public disagreement (ml-explore/mlx-swift-lm PR #459 calls the rule biased;
lablup/mlxcel PR #992 calls it exact) is settled by :func:`sequence_law`: exact. The
grain of truth in the first claim is that the *accepted* tokens, conditioned on being
accepted, have law ``p q / sum p q`` (:func:`accepted_token_law`); the emitted tokens do
not.

A flawed variant (:data:`FLAWED_VARIANTS`): ``"resample_on_mismatch"`` emits a *fresh*
target draw at the mismatch instead of the sample that caused it; its output law per
position is ``q p + (1 - sum q p) p``, not ``p``.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023, Sec. 2.3 (speculative sampling, acceptance
   ``sum min(p, q)``, optimal among rules that see ``q``).
.. [2] ml-explore/mlx-swift-lm PR #459 and lablup/mlxcel PR #992 (the disagreement).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import cycles
from .verify import check_rng, draw
from .cycles import DraftPath
from .laws import LawError, check_int, check_pair
from .models import ToyModel, check_prefix

__all__ = [
    "VARIANTS",
    "EXACT_VARIANTS",
    "FLAWED_VARIANTS",
    "ISSUES",
    "Acceptance",
    "acceptance",
    "accepted_token_law",
    "matching_verify",
    "cycle_outcomes",
    "sequence_law",
    "accepted_count_law",
    "MatchingRun",
    "generate",
    "target_only",
    "sample_cycle",
]

VARIANTS: tuple[str, ...] = ("matching", "resample_on_mismatch")
EXACT_VARIANTS: tuple[str, ...] = ("matching",)
FLAWED_VARIANTS: tuple[str, ...] = ("resample_on_mismatch",)
#: The two sides of the public disagreement about the matching rule.
ISSUES: dict[str, str] = {
    "biased (claim)": "https://github.com/ml-explore/mlx-swift-lm/pull/459",
    "exact (claim)": "https://github.com/lablup/mlxcel/pull/992",
}


def _check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"variant: must be one of {VARIANTS} (got {variant!r})")
    return variant


@dataclass(frozen=True)
class Acceptance:
    """Per-position acceptance probabilities of three rules for one ``(p, q)`` pair.

    Attributes
    ----------
    sampled : float
        Matching rule, draft sampled from ``q``: ``sum_x q(x) p(x)``.
    greedy : float
        Matching rule, greedy draft: ``p(argmax q)`` (lowest id on ties).
    speculative : float
        Speculative sampling: ``sum_x min(p(x), q(x)) = 1 - TV(p, q)``.
    """

    sampled: float
    greedy: float
    speculative: float


def acceptance(p, q) -> Acceptance:
    """Acceptance of the matching rule (sampled and greedy draft) and of speculative sampling.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws.

    Raises
    ------
    LawError
        Invalid laws.

    Examples
    --------
    >>> a = acceptance([0.5, 0.3, 0.2], [0.2, 0.5, 0.3])
    >>> round(a.sampled, 6), round(a.greedy, 6), round(a.speculative, 6)
    (0.31, 0.3, 0.7)
    """
    p, q = check_pair(p, q)
    return Acceptance(sampled=float(p @ q), greedy=float(p[int(np.argmax(q))]),
                      speculative=float(np.minimum(p, q).sum()))


def accepted_token_law(p, q) -> np.ndarray:
    """Law of a token *given that it was accepted* by the matching rule: ``p q / sum p q``.

    Not the law of the emitted token (which is ``p``); this is the statistic that looks
    biased when one inspects accepted tokens only.

    Raises
    ------
    LawError
        Invalid laws, or ``sum p q == 0`` (nothing is ever accepted).

    Examples
    --------
    >>> accepted_token_law([0.5, 0.5], [0.9, 0.1]).round(3).tolist()
    [0.9, 0.1]
    """
    p, q = check_pair(p, q)
    m = p * q
    if m.sum() == 0:
        raise LawError("q: shares no token with p, so nothing is ever accepted")
    return m / m.sum()


def matching_verify(path: DraftPath, variant: str = "matching") -> list:
    """Outcomes of the matching rule given a draft path.

    The target's sample at position ``i`` equals ``x_i`` with probability ``p_i(x_i)``; a
    mismatch emits the sample ``y != x_i`` (probability ``p_i(y)``), or under
    ``"resample_on_mismatch"`` a fresh draw from ``p_i``.

    Returns
    -------
    list of (probability given the path, emitted, n_accepted)
    """
    out = []
    run = path.prob * 0 + 1
    for i, x in enumerate(path.tokens):
        p = path.p[i]
        miss = run * (1 - p[x])
        if miss > 0:
            head = path.tokens[:i]
            for y, w in enumerate(p):
                if variant == "resample_on_mismatch":
                    out.append((miss * w, head + (y,), i))
                elif y != x and w > 0:
                    out.append((run * w, head + (y,), i))
        run = run * p[x]
    k = len(path.tokens)
    if run > 0:
        if path.ends:
            out.append((run, path.tokens, k))
        else:
            for y, w in enumerate(path.p[k]):
                if w > 0:
                    out.append((run * w, path.tokens + (y,), k))
    return out


def cycle_outcomes(oracle, ctx: tuple, gamma: int, *, greedy: bool = False,
                   variant: str = "matching") -> list:
    """Outcomes ``(probability, emitted, n_accepted)`` of one matching cycle."""
    variant = _check_variant(variant)
    return cycles.chain_outcomes(lambda path: matching_verify(path, variant), oracle, ctx, gamma,
                                 greedy=greedy)


def sequence_law(target: ToyModel, draft: ToyModel, prefix, gamma: int, length: int, *,
                 greedy: bool = False, variant: str = "matching") -> dict:
    """Exact law of the first ``length`` tokens emitted under the matching rule.

    Parameters
    ----------
    target, draft : ToyModel
    prefix : sequence of int
    gamma : int
        Draft length.
    length : int
    greedy : bool
        Draft the draft's argmax instead of a sample.
    variant : str
        One of :data:`VARIANTS`.

    Returns
    -------
    dict[tuple[int, ...], float]
        The target's own law for ``"matching"``, for every draft.

    Examples
    --------
    >>> from specdec.models import toy_pair, sequence_law as target_law
    >>> from specdec.block import law_tv
    >>> p, q = toy_pair(closeness=0.0)
    >>> round(law_tv(sequence_law(p, q, (), 2, 3, greedy=True), target_law(p, (), 3)), 12)
    0.0
    """
    oracle = cycles.model_oracle(target, draft)
    gamma = check_int(gamma, "gamma", minimum=1)
    variant = _check_variant(variant)
    return cycles.rule_sequence_law(
        lambda ctx: cycle_outcomes(oracle, ctx, gamma, greedy=greedy, variant=variant),
        oracle, prefix, length)


def accepted_count_law(target: ToyModel, draft: ToyModel, prefix, gamma: int, *,
                       greedy: bool = False) -> list:
    """Exact law of the number of accepted drafted tokens in one matching cycle."""
    oracle = cycles.model_oracle(target, draft)
    ctx = check_prefix(prefix, oracle.vocab_size, eos=oracle.eos)
    gamma = check_int(gamma, "gamma", minimum=1)
    return cycles.accepted_count_law(cycle_outcomes(oracle, ctx, gamma, greedy=greedy), gamma)


@dataclass(frozen=True)
class MatchingRun:
    """A generation under the matching rule.

    Attributes
    ----------
    tokens : tuple of int
        The first ``length`` emitted tokens (shorter at EOS).
    n_cycles : int
        Target passes.
    accepted : tuple of int
        Accepted drafted tokens per cycle.
    """

    tokens: tuple
    n_cycles: int
    accepted: tuple


def _inverse_cdf(law: np.ndarray, u: float) -> int:
    return int(draw(law, u))


def target_only(target: ToyModel, prefix, length: int, seed: int) -> tuple:
    """Target-only sampling with the position-keyed stream of :func:`generate`.

    Token ``t`` (counted from 0 after the prompt) is the inverse-CDF draw of the ``t``-th
    uniform of ``numpy.random.default_rng(seed)``.
    """
    ctx = check_prefix(prefix, target.vocab_size, eos=target.eos)
    length = check_int(length, "length", minimum=1)
    u = np.random.default_rng(check_int(seed, "seed", minimum=0)).random(length)
    out: tuple = ()
    while len(out) < length and (target.eos is None or target.eos not in out):
        out += (_inverse_cdf(target.next_law(ctx + out), u[len(out)]),)
    return out


def generate(target: ToyModel, draft: ToyModel, prefix, gamma: int, length: int, seed: int,
             draft_rng, *, greedy: bool = False, stream: str = "position") -> MatchingRun:
    """Generate with the matching rule; the target's randomness comes from ``seed``.

    Parameters
    ----------
    target, draft : ToyModel
    prefix : sequence of int
        Prompt (no EOS).
    gamma : int
        Draft length.
    length : int
        Tokens wanted.
    seed : int
        Seed of the target's stream.
    draft_rng : numpy.random.Generator or int
        The draft's randomness (unused when ``greedy``).
    greedy : bool
        Greedy draft.
    stream : {"position", "sequential"}
        ``"position"``: the target's sample at output position ``t`` uses the ``t``-th
        uniform of its stream, so the output equals :func:`target_only` with the same
        seed, string for string, whatever the draft. ``"sequential"``: every cycle draws
        one uniform per scored position (``gamma + 1``, as an engine that samples all
        positions of the pass at once), discarded positions included; the law is still
        the target's, the string is not the same.

    Returns
    -------
    MatchingRun

    Examples
    --------
    >>> from specdec.models import toy_pair
    >>> p, q = toy_pair(closeness=0.3)
    >>> generate(p, q, (), 3, 8, 5, 1).tokens == target_only(p, (), 8, 5)
    True
    """
    cycles.check_models(target, draft)
    ctx = check_prefix(prefix, target.vocab_size, eos=target.eos)
    gamma = check_int(gamma, "gamma", minimum=1)
    length = check_int(length, "length", minimum=1)
    draft_rng = check_rng(draft_rng)
    if stream not in ("position", "sequential"):
        raise ValueError(f"stream: must be 'position' or 'sequential' (got {stream!r})")
    trng = np.random.default_rng(check_int(seed, "seed", minimum=0))
    u_pos = trng.random(length + gamma + 1) if stream == "position" else None
    eos = target.eos
    text: tuple = ()
    accepted = []
    while len(text) < length and (eos is None or eos not in text):
        props: list[int] = []
        while len(props) < gamma and not (props and props[-1] == eos):
            q = draft.next_law(ctx + text + tuple(props))
            props.append(int(np.argmax(q)) if greedy else _inverse_cdf(q, draft_rng.random()))
        new: list[int] = []
        u_cycle = trng.random(len(props) + 1) if u_pos is None else None
        for i in range(len(props) + 1):
            if i == len(props) and props[-1] == eos:
                break
            t = len(text) + i
            u = u_pos[t] if u_pos is not None else u_cycle[i]
            y = _inverse_cdf(target.next_law(ctx + text + tuple(props[:i])), u)
            new.append(y)
            if i == len(props) or y != props[i]:
                break
        ended = len(new) == len(props) and props[-1] == eos and new[-1] == eos
        accepted.append(len(new) if ended else len(new) - 1)
        text += tuple(new)
        if eos is not None and eos in text:
            text = text[: text.index(eos) + 1]
    return MatchingRun(tokens=text[:length], n_cycles=len(accepted), accepted=tuple(accepted))


def sample_cycle(target: ToyModel, draft: ToyModel, prefix, gamma: int, rng, *, greedy: bool = False,
                 variant: str = "matching") -> tuple[tuple[int, ...], int, int]:
    """One cycle of the matching rule (or its flaw), sampled (the kit's block convention).

    Returns
    -------
    (emitted, n_accepted, n_proposed)

    Examples
    --------
    >>> from specdec.models import toy_pair
    >>> p, q = toy_pair()
    >>> emitted, n, k = sample_cycle(p, q, (), 3, np.random.default_rng(0))
    >>> 1 <= len(emitted) <= 4 and n <= k <= 3
    True
    """
    cycles.check_models(target, draft)
    ctx = check_prefix(prefix, target.vocab_size, eos=target.eos)
    gamma = check_int(gamma, "gamma", minimum=1)
    variant = _check_variant(variant)
    rng = check_rng(rng)
    eos = target.eos
    props: list[int] = []
    while len(props) < gamma and not (props and props[-1] == eos):
        q = draft.next_law(ctx + tuple(props))
        props.append(int(np.argmax(q)) if greedy else _inverse_cdf(q, rng.random()))
    for i, x in enumerate(props):
        p = target.next_law(ctx + tuple(props[:i]))
        y = _inverse_cdf(p, rng.random())
        if y != x:
            if variant == "resample_on_mismatch":
                y = _inverse_cdf(p, rng.random())
            return tuple(props[:i]) + (y,), i, len(props)
    if props[-1] == eos:
        return tuple(props), len(props), len(props)
    return tuple(props) + (_inverse_cdf(target.next_law(ctx + tuple(props)), rng.random()),), len(props), len(props)
