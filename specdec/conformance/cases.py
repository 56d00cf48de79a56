"""The battery's cases: token-level target/draft pairs, block-level toy model pairs, and
batches of requests with their own settings.

A new standard case goes in :func:`token_cases`, :func:`block_cases` or
:func:`batch_cases` (and its name in :data:`CASE_NAMES`, :data:`BLOCK_CASE_NAMES` or
:data:`BATCH_CASE_NAMES`); a custom case is a :class:`TokenCase`, :class:`BlockCase` or
:class:`BatchCase` passed to :func:`specdec.conformance.run_battery` with ``cases=``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specdec import laws

__all__ = ["TokenCase", "BlockCase", "BatchCase", "token_cases", "block_cases", "batch_cases",
           "rule_cases", "CASE_NAMES", "BLOCK_CASE_NAMES", "BATCH_CASE_NAMES", "RULE_CASE_NAMES"]



def _log(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(p)


@dataclass(frozen=True, eq=False)
class TokenCase:
    """One token-level test case: a target/draft pair, as laws and as logits.

    Attributes
    ----------
    name : str
        Stable identifier (used to derive the case's random stream).
    description : str
        One line: what the case exercises.
    p, q : numpy.ndarray, shape (V,)
        Processed target and draft laws (what a law-input sampler receives).
    target_logits, draft_logits : numpy.ndarray, shape (V,)
        What a logits-input sampler receives (``log p`` and ``log q`` for cases defined
        by laws; ``-inf`` marks probability 0).
    temperature : float
    top_k : int or None
    top_p : float or None
        Sampling settings; ``p = sampling_law(target_logits, ...)`` and likewise ``q``.
    """

    name: str
    description: str
    p: np.ndarray
    q: np.ndarray
    target_logits: np.ndarray
    draft_logits: np.ndarray
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    @classmethod
    def from_laws(cls, name: str, description: str, p, q) -> "TokenCase":
        """A case given by its laws (temperature 1, no truncation).

        Raises
        ------
        LawError
            If ``p`` or ``q`` is not a valid law, or their sizes differ.
        """
        p, q = laws.check_pair(p, q)
        return cls(name, description, p, q, _log(p), _log(q))

    @classmethod
    def from_logits(cls, name: str, description: str, target_logits, draft_logits, *,
                    temperature: float = 1.0, top_k: int | None = None,
                    top_p: float | None = None) -> "TokenCase":
        """A case given by logits and sampling settings, applied to both models alike.

        Raises
        ------
        LawError
            Invalid logits or settings (see :func:`specdec.laws.sampling_law`).
        """
        tl = np.array(target_logits, dtype=np.float64)
        dl = np.array(draft_logits, dtype=np.float64)
        settings = dict(temperature=temperature, top_k=top_k, top_p=top_p)
        p = laws.sampling_law(tl, **settings)
        q = laws.sampling_law(dl, **settings)
        p, q = laws.check_pair(p, q)
        return cls(name, description, p, q, tl, dl, float(temperature), top_k, top_p)

    @property
    def vocab_size(self) -> int:
        return int(self.p.size)

    @property
    def settings(self) -> dict:
        """Keyword arguments passed to a logits-input sampler."""
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}


@dataclass(frozen=True, eq=False)
class BlockCase:
    """One block-level test case: toy target and draft, draft length, decode length.

    Attributes
    ----------
    name, description : str
    target, draft : specdec.models.ToyModel
        Autoregressive models with ``next_law(prefix) -> (V,)``.
    gamma : int
        Draft length (proposals per cycle), >= 1.
    length : int
        Tokens decoded per trial; the kit compares the law of these ``length`` tokens.
    prefix : tuple of int
        Confirmed prefix every decode starts from.
    """

    name: str
    description: str
    target: Any
    draft: Any
    gamma: int
    length: int
    prefix: tuple = ()


def _large_vocab_logits(v: int = 4096, seed: int = 20260924) -> tuple[np.ndarray, np.ndarray]:
    """Zipf-like target logits and a correlated, noisier draft (fixed, seed-independent)."""
    g = np.random.default_rng(seed)
    rank = np.arange(1, v + 1)
    target = -0.9 * np.log(rank) + 0.4 * g.standard_normal(v)
    target = target[g.permutation(v)]                    # frequent ids are not the low ids
    draft = 0.85 * target + 0.6 * g.standard_normal(v)   # a smaller model that mostly agrees
    return target, draft


def token_cases() -> tuple[TokenCase, ...]:
    """The standard token-level battery.

    Returns
    -------
    tuple of TokenCase
        ``article`` (the three-symbol example), ``equal`` (p = q, so Z = 0), ``disjoint``
        (no common support: every proposal is rejected), ``draft_zero`` (q = 0 < p on a
        token, reachable only through the residual), ``target_zero`` (p = 0 < q on a token,
        always rejected), ``onehot_target``, ``onehot_draft``, ``nearly_equal`` (Z of order
        1e-3), ``spread_residual`` (residual spread over several tokens with high
        acceptance of the rejected proposals, where reusing the accept test's uniform
        shows), ``processed`` (8 tokens, temperature 0.6, top-k 5, top-p 0.9) and
        ``large_vocab`` (4096 tokens, temperature 0.8, top-k 3000, top-p 0.98, the same
        settings applied to both models: about 2,100 possible tokens, most of them with
        expected counts below 5 at 20,000 trials, and hundreds the draft never proposes).
    """
    tl8 = np.array([2.0, 1.6, 1.1, 0.9, 0.2, -0.3, -0.8, -1.5])
    dl8 = np.array([1.2, 2.1, 0.4, 1.3, 0.9, -0.1, 0.3, -2.0])
    big_t, big_d = _large_vocab_logits()
    return (
        TokenCase.from_laws("article", "the article's example, p=(0.5, 0.3, 0.2), q=(0.2, 0.5, 0.3)",
                            [0.5, 0.3, 0.2], [0.2, 0.5, 0.3]),
        TokenCase.from_laws("equal", "p = q (Z = 0: the residual must never be evaluated)",
                            [0.45, 0.3, 0.15, 0.1], [0.45, 0.3, 0.15, 0.1]),
        TokenCase.from_laws("disjoint", "disjoint supports (every proposal rejected)",
                            [0.6, 0.4, 0.0, 0.0], [0.0, 0.0, 0.7, 0.3]),
        TokenCase.from_laws("draft_zero", "q = 0 < p on a token (reached only through the residual)",
                            [0.3, 0.3, 0.4], [0.5, 0.5, 0.0]),
        TokenCase.from_laws("target_zero", "p = 0 < q on a token (always rejected)",
                            [0.5, 0.5, 0.0], [0.3, 0.3, 0.4]),
        TokenCase.from_laws("onehot_target", "one-hot target", [0.0, 1.0, 0.0, 0.0],
                            [0.4, 0.3, 0.2, 0.1]),
        TokenCase.from_laws("onehot_draft", "one-hot draft", [0.4, 0.3, 0.2, 0.1],
                            [0.0, 0.0, 1.0, 0.0]),
        TokenCase.from_laws("nearly_equal", "nearly equal laws (Z = 0.002)",
                            [0.25, 0.25, 0.25, 0.25], [0.252, 0.249, 0.25, 0.249]),
        TokenCase.from_laws("spread_residual", "residual spread over three tokens, rejected "
                            "proposals mostly accepted", [0.2, 0.2, 0.2, 0.1, 0.1, 0.1, 0.1],
                            [0.1, 0.1, 0.1, 0.175, 0.175, 0.175, 0.175]),
        TokenCase.from_logits("processed", "8 tokens from logits, temperature 0.6, top-k 5, top-p 0.9",
                              tl8, dl8, temperature=0.6, top_k=5, top_p=0.9),
        TokenCase.from_logits("large_vocab", "4096 tokens from logits, temperature 0.8, top-k 3000, "
                              "top-p 0.98", big_t, big_d, temperature=0.8, top_k=3000, top_p=0.98),
    )


def block_cases() -> tuple[BlockCase, ...]:
    """The standard block-level battery (toy models of :mod:`specdec.models`).

    Returns
    -------
    tuple of BlockCase
        ``block_g1``, ``block_g2``, ``block_g4``: a 4-token vocabulary pair whose draft is
        far from the target (closeness 0.3, many rejections), draft lengths 1, 2 and 4,
        decodes of 4 tokens; ``block_close_g3``: a close draft (closeness 0.8), gamma 3,
        decodes of 5 tokens; ``block_eos_g3``: the book's default pair with an
        end-of-sequence token, gamma 3, decodes of up to 4 tokens. Both models depend on
        the last two tokens and on the position, so a stale or polluted context changes
        the law. Every decode spans several cycles, so what happens *between* cycles
        (leftover proposals, the cache) is part of each trial.
    """
    from specdec import models

    far = models.toy_pair(4, closeness=0.3, eos=None)
    close = models.toy_pair(4, closeness=0.8, eos=None)
    with_eos = models.toy_pair(4)
    out = [BlockCase(f"block_g{g}", f"toy pair far apart (closeness 0.3), gamma = {g}, 4 tokens",
                     *far, g, 4) for g in (1, 2, 4)]
    out.append(BlockCase("block_close_g3", "toy pair close (closeness 0.8), gamma = 3, 5 tokens",
                         *close, 3, 5))
    out.append(BlockCase("block_eos_g3", "toy pair with end-of-sequence, gamma = 3, up to 4 tokens",
                         *with_eos, 3, 4))
    return tuple(out)


def rule_cases() -> tuple[BlockCase, ...]:
    """Block cases for verification rules beyond token by token (opt-in by name).

    Returns
    -------
    tuple of BlockCase
        ``rules_far_g3``: a 3-token pair (order 1, two positions) whose draft ignores the
        target (closeness 0), gamma = 3, decodes of 4 tokens. Chosen from seeded random
        pairs so that every flaw of block verification, of recursive rejection over a tree
        with two candidates at the top, and of the matching rule
        (:data:`specdec.rules.FLAWS`) has a TV of at least 0.05 on the law of the four
        tokens (the small ones, ``token_residual`` and ``original_q``, are about 0.05 and
        0.08; on the standard ``block_g4`` they are 0.0007 and 0.015). Run it with
        ``cases=BLOCK_CASE_NAMES + RULE_CASE_NAMES``; it is not in the default battery.
    """
    from specdec import models

    target = models.random_model(3, rng=34, order=1, positions=2, eos=None)
    draft = models.perturbed_draft(target, 0.0, rng=35)
    return (BlockCase("rules_far_g3", "3-token pair, draft unrelated to the target, gamma = 3, "
                      "4 tokens (where block-verification and tree flaws show)", target, draft, 3, 4),)


#: Names of the standard token cases, in battery order.
CASE_NAMES: tuple[str, ...] = (
    "article", "equal", "disjoint", "draft_zero", "target_zero", "onehot_target", "onehot_draft",
    "nearly_equal", "spread_residual", "processed", "large_vocab",
)

#: Names of the standard block cases, in battery order.
BLOCK_CASE_NAMES: tuple[str, ...] = (
    "block_g1", "block_g2", "block_g4", "block_close_g3", "block_eos_g3",
)

#: Names of the block cases for rules beyond token by token (:func:`rule_cases`).
RULE_CASE_NAMES: tuple[str, ...] = ("rules_far_g3",)




@dataclass(frozen=True, eq=False)
class BatchCase:
    """One batched case: requests with their own logits, draft lengths and settings.

    Attributes
    ----------
    name, description : str
    target_logits : tuple of numpy.ndarray
        Per request, shape ``(n_draft + 1, V)``: raw target logits at each proposal
        position and at the bonus position.
    draft_logits : tuple of numpy.ndarray
        Per request, shape ``(n_draft, V)``.
    temperature, top_p : numpy.ndarray, shape (R,)
    top_k : numpy.ndarray of int, shape (R,)
        0 means no top-k.
    greedy : numpy.ndarray of bool, shape (R,)
        Arg-max requests (temperature ignored): the exact output is deterministic.

    The exact laws (:meth:`target_laws`, :meth:`draft_laws`) are
    :func:`specdec.laws.sampling_law` of each row with its request's settings (a point
    mass on the arg-max for greedy requests; their drafts propose from the draft's
    softmax at temperature 1).
    """

    name: str
    description: str
    target_logits: tuple
    draft_logits: tuple
    temperature: np.ndarray
    top_k: np.ndarray
    top_p: np.ndarray
    greedy: np.ndarray

    @property
    def n_requests(self) -> int:
        return len(self.target_logits)

    @property
    def n_draft(self) -> np.ndarray:
        return np.array([d.shape[0] for d in self.draft_logits], dtype=np.int64)

    @property
    def vocab_size(self) -> int:
        return int(self.target_logits[0].shape[1])

    def _settings(self, r: int) -> dict:
        return dict(temperature=float(self.temperature[r]),
                    top_k=int(self.top_k[r]) or None,
                    top_p=None if self.top_p[r] >= 1 else float(self.top_p[r]))

    def target_laws(self) -> tuple:
        """Per request, ``(n_draft + 1, V)``: the law each emitted position must follow."""
        out = []
        for r, z in enumerate(self.target_logits):
            if self.greedy[r]:
                law = np.zeros_like(z)
                law[np.arange(z.shape[0]), np.argmax(z, axis=1)] = 1.0
            else:
                law = np.array([laws.sampling_law(row, **self._settings(r)) for row in z])
            out.append(law)
        return tuple(out)

    def draft_laws(self) -> tuple:
        """Per request, ``(n_draft, V)``: the law each proposal is drawn from."""
        out = []
        for r, z in enumerate(self.draft_logits):
            st = dict(temperature=1.0) if self.greedy[r] else self._settings(r)
            out.append(np.array([laws.sampling_law(row, **st) for row in z]).reshape(z.shape))
        return tuple(out)

    @property
    def settings(self) -> dict:
        """The ``settings`` dict passed to the sampler (``(R,)`` arrays)."""
        return {"temperature": self.temperature.copy(), "top_k": self.top_k.copy(),
                "top_p": self.top_p.copy(), "greedy": self.greedy.copy()}


def _batch_case(name, description, n_draft, temperature, top_k, top_p, greedy, v=8,
                seed=20261201):
    g = np.random.default_rng(seed)
    tl, dl = [], []
    for k in n_draft:
        t = 1.5 * g.standard_normal((k + 1, v))
        tl.append(t)
        dl.append(0.8 * t[:k] + 0.9 * g.standard_normal((k, v)))
    return BatchCase(name, description, tuple(tl), tuple(dl),
                     np.asarray(temperature, dtype=np.float64), np.asarray(top_k, dtype=np.int64),
                     np.asarray(top_p, dtype=np.float64), np.asarray(greedy, dtype=bool))


def batch_cases() -> tuple[BatchCase, ...]:
    """The standard batched battery (8-token vocabulary, fixed seed-independent logits).

    Returns
    -------
    tuple of BatchCase
        ``batch_temperatures``: six requests with temperatures 0.3 to 2.0, two proposals
        each (one request's settings applied to all shows here); ``batch_truncation``:
        top-k and top-p differing per request; ``batch_greedy_mixed``: greedy requests
        between sampled ones; ``batch_ragged``: draft lengths 0, 1, 3, 2, 0, 4 (empty
        drafts: the bonus token only).
    """
    return (
        _batch_case("batch_temperatures", "six requests, temperatures 0.3 to 2.0, 2 proposals each",
                    [2] * 6, [1.0, 0.3, 2.0, 0.7, 1.5, 0.5], [0] * 6, [1.0] * 6, [False] * 6),
        _batch_case("batch_truncation", "top-k and top-p per request (3, off, 5; 0.8, 0.95, off)",
                    [2] * 6, [1.0, 0.8, 1.2, 1.0, 0.9, 1.1], [3, 0, 5, 0, 0, 2],
                    [1.0, 0.8, 1.0, 0.95, 1.0, 1.0], [False] * 6),
        _batch_case("batch_greedy_mixed", "greedy requests between sampled ones, 3 proposals each",
                    [3] * 5, [0.7, 1.0, 1.3, 1.0, 0.6], [0] * 5, [1.0] * 5,
                    [True, False, True, False, False]),
        _batch_case("batch_ragged", "draft lengths 0, 1, 3, 2, 0, 4 (empty drafts allowed)",
                    [0, 1, 3, 2, 0, 4], [1.0, 0.6, 1.4, 1.0, 0.8, 1.0], [0, 0, 4, 0, 0, 0],
                    [1.0, 1.0, 1.0, 0.9, 1.0, 1.0], [False, False, False, False, True, False]),
    )


#: Names of the standard batched cases, in battery order.
BATCH_CASE_NAMES: tuple[str, ...] = ("batch_temperatures", "batch_truncation",
                                     "batch_greedy_mixed", "batch_ragged")
