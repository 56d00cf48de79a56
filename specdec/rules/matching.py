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
(:func:`run_matching`, ``stream="position"``). What the rule loses is acceptance:
``P(accept) = sum_x q(x) p(x)`` for a sampled draft and ``p(argmax q)`` for a greedy one,
against ``sum_x min(p(x), q(x))`` for speculative sampling (:func:`acceptance`).

The public disagreement (ml-explore/mlx-swift-lm PR #459 calls the rule biased;
lablup/mlxcel PR #992 calls it exact) is settled by :meth:`Matching.sequence_law`: exact. The
grain of truth in the first claim is that the *accepted* tokens, conditioned on being
accepted, have law ``p q / sum p q`` (:func:`accepted_token_law`); the emitted tokens do
not.

The rule is an object, :data:`MATCHING` (:class:`Matching`); its hooks
(:meth:`Matching.mismatch_law` and :meth:`Matching.at_mismatch`: the token emitted at the
first mismatch) are what a flaw overrides, one object in this module
(:data:`RESAMPLE_ON_MISMATCH`: a fresh target draw at the mismatch instead
of the sample that caused it). Used in Chapter 5 and Appendix A4.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023, Sec. 2.3 (speculative sampling, acceptance
   ``sum min(p, q)``, optimal among rules that see ``q``).
.. [2] ml-explore/mlx-swift-lm PR #459 and lablup/mlxcel PR #992 (the disagreement).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from specdec.rules import base as cycles
from specdec.verify import check_rng, draw
from specdec.laws import LawError, check_int, check_pair
from specdec.models import ToyModel, check_models, check_prefix

__all__ = [
    "ISSUES",
    "Acceptance",
    "acceptance",
    "accepted_token_law",
    "Matching",
    "MATCHING",
    "ResampleOnMismatch",
    "RESAMPLE_ON_MISMATCH",
    "MATCHING_FLAWS",
    "MatchingRun",
    "run_matching",
    "target_only",
]

#: The two sides of the public disagreement about the matching rule.
ISSUES: dict[str, str] = {
    "biased (claim)": "https://github.com/ml-explore/mlx-swift-lm/pull/459",
    "exact (claim)": "https://github.com/lablup/mlxcel/pull/992",
}


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


@dataclass(frozen=True, repr=False)
class Matching(cycles.ChainRule):
    """The matching rule: the target samples ``y_i ~ p_i``; accept while ``y_i == x_i``: exact.

    At the first mismatch the target's sample ``y_i`` is emitted; after a full match the
    target's next sample is the bonus. Exact for any draft law, sampled or greedy (see the
    module docstring).

    Examples
    --------
    >>> from specdec.models import toy_pair, sequence_law as target_law
    >>> from specdec.laws import law_tv
    >>> p, q = toy_pair(closeness=0.0)
    >>> round(law_tv(MATCHING.sequence_law(p, q, (), 2, 3, greedy=True), target_law(p, (), 3)), 12)
    0.0
    """

    name: ClassVar[str] = "matching"

    def mismatch_law(self, p: list, x: int) -> list:
        """Law of the emitted token given a mismatch with ``x``: the target's sample, ``p`` without ``x``."""
        rest = 1 - p[x]
        return [0 * w if y == x else w / rest for y, w in enumerate(p)]

    def at_mismatch(self, y: int, p: np.ndarray, rng) -> int:
        """The token emitted at a mismatch, given the target's sample ``y``: ``y`` itself."""
        return y

    def path_outcomes(self, path):
        out = []
        run = path.prob * 0 + 1
        for i, x in enumerate(path.tokens):
            p = path.p[i]
            miss = run * (1 - p[x])
            if miss > 0:
                head = path.tokens[:i]
                out.extend((miss * w, head + (y,), i)
                           for y, w in enumerate(self.mismatch_law(p, x)) if w > 0)
            run = run * p[x]
        return out + cycles.full_acceptance(path, run)

    def sample_path(self, path, rng):
        for i, x in enumerate(path.tokens):
            p = np.asarray(path.p[i])
            y = _inverse_cdf(p, rng.random())
            if y != x:
                return path.tokens[:i] + (self.at_mismatch(y, p, rng),), i
        return cycles.sample_full_acceptance(path, rng)


#: The matching rule.
MATCHING = Matching()


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


RESAMPLE_ON_MISMATCH = ResampleOnMismatch()
#: Flaws of the matching rule.
MATCHING_FLAWS: tuple[Matching, ...] = (RESAMPLE_ON_MISMATCH,)


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
    """Target-only sampling with the position-keyed stream of :func:`run_matching`.

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


def run_matching(target: ToyModel, draft: ToyModel, prefix, gamma: int, length: int, seed: int,
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
    >>> run_matching(p, q, (), 3, 8, 5, 1).tokens == target_only(p, (), 8, 5)
    True
    """
    check_models(target, draft)
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
