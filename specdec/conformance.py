"""A conformance kit for speculative samplers: does this sampler preserve the target law?

Give the kit a sampler as a plain Python callable; it runs a standard battery of cases,
compares what the sampler emits with the exact law it must emit, checks the accounting
the sampler reports, and returns a :class:`Report` with one verdict per case and one for
the whole battery. The family-wise false-alarm probability is controlled: a correct
sampler fails the battery with probability at most ``false_alarm`` (Holm's step-down
procedure over every statistical check of the run), whatever the seed.

Samplers
--------
Three calling conventions are recognised; mark a sampler with :func:`token_sampler` or
:func:`block_sampler`, or pass ``kind=``, ``vectorised=``, ``inputs=`` explicitly (see
:func:`describe_sampler` for the rules used when nothing is said).

Token sampler, law inputs (the default)
    ``f(p, q, rng) -> int``: one speculative step. ``p`` is the target law and ``q`` the
    draft law, both ``(V,)`` float64 probability vectors *after* all processing
    (temperature, top-k, top-p); ``rng`` a :class:`numpy.random.Generator`. The sampler
    proposes from ``q``, runs its accept test and recovery, and returns the emitted token
    id. It may also return ``(token, accepted)`` where ``accepted`` says whether the token
    is the accepted proposal; the kit then also checks that accounting.
Token sampler, vectorised
    ``f(p, q, rng, n) -> (n,) int array`` (or ``(tokens, accepted)`` with a ``(n,)`` bool
    array): ``n`` independent steps at once. Mark it ``@token_sampler(vectorised=True)``.
    A vectorised sampler is tested on ten times more trials in the same time.
Token sampler, logits inputs
    ``f(target_logits, draft_logits, rng[, n], *, temperature, top_k, top_p)``: the sampler
    receives raw logits and the sampling settings and must itself turn them into laws, as
    real decoders do; the law it must emit is
    ``specdec.laws.sampling_law(target_logits, temperature=..., top_k=..., top_p=...)``.
    Mark it ``@token_sampler(inputs="logits")``. Bugs in the post-processing (a ratio on
    the wrong law) can only be seen through this convention.
Block sampler
    ``f(target, draft, prefix, gamma, rng)``: one speculative cycle over the toy
    autoregressive models of :mod:`specdec.models` (``next_law(prefix) -> (V,)``,
    ``vocab_size``, ``eos``) from the confirmed ``prefix`` (tuple of token ids) with draft
    length ``gamma``. It returns the emitted tokens (a sequence of 1 to ``gamma + 1``
    ids), or ``(emitted, n_accepted, n_proposed)``, or an object with ``emitted``,
    ``n_accepted`` and ``n_proposed`` attributes (:class:`specdec.block.CycleResult`). The
    kit decodes by calling it repeatedly, appending what it emits to the prefix, until
    ``length`` tokens or end-of-sequence, and compares the law of the decoded sequence
    with the target's exact sequence law (:func:`specdec.models.sequence_law`). A sampler
    that keeps state between the cycles of one decode (a cache, leftover proposals) may
    define a ``reset()`` method; the kit calls it before every decode.
Block sampler, vectorised
    ``f(target, draft, prefix, gamma, length, rng, n)``: ``n`` independent decodes of up
    to ``length`` tokens. Returns a ``(n, length)`` integer array padded with ``-1``, or
    an object with ``tokens`` (and optionally ``n_tokens`` and the per-cycle arrays
    ``sequence``, ``n_emitted``, ``n_accepted``, ``n_proposed``, ``hit_eos``), such as
    :class:`specdec.block.GenerationBatch`. Mark it ``@block_sampler(vectorised=True)``.

Accounting
    Where a sampler reports what it accepted, the kit checks it. Token step: the joint
    law of (token, accepted) must be ``(min(p, q), (p - q)^+)``. Block cycle: the accepted
    proposals are the emitted tokens before the corrected or bonus token, so
    ``n_accepted = len(emitted) - 1`` (``= len(emitted)`` when the cycle ends at an
    accepted end-of-sequence) and ``0 <= n_accepted <= n_proposed <= gamma``, in every
    cycle; and the accepted count of the first cycle of each decode must follow its
    exact law (:func:`specdec.block.accepted_count_law`). Accepts after the first
    rejection must not be counted: ``[accept, reject, accept, accept]`` counts 1.

The statistics
--------------
For each case the kit counts outcomes (token ids, or whole emitted sequences) over
``trials`` independent repetitions and applies:

* **Impossible outcomes.** An outcome the target gives probability 0 (or a token id out of
  the vocabulary, a malformed return value, an exception, an accounting identity that
  does not hold) is a deterministic failure: a correct sampler never produces it, so it
  costs no false-alarm budget.
* **Pooled Pearson chi-square.** Possible cells are binned so that every bin has an
  expected count of at least ``min_expected`` (10) and there are at most ``max_bins``
  (100) bins: cells whose expected count reaches the floor are bins of their own, the
  others are pooled in decreasing order of probability (see :func:`pool_cells`). The
  binning depends only on the exact law and the number of trials, never on the data, so
  the test is valid; a chi-square on cells with tiny expectations is never computed.
* **TV distance** between the empirical and the exact law on the bins (a lower bound on
  the TV over outcomes, equal to it when nothing is pooled), with a confidence interval
  valid for every number of trials (:func:`specdec.stats.tv_ci`, Weissman et al.'s L1
  deviation bound applied to the bins).
* **Detectable TV**: the smallest TV distance from the target (on the bins) that the
  chi-square test detects with probability ``power`` at the Bonferroni level
  ``false_alarm / m`` (see :func:`detectable_tv`), and, for a failing case, an estimate
  of the trials the test needed to catch the bug at that power.
* **Holm-Bonferroni** over the ``m`` statistical checks of the battery (law and
  accounting checks with at least one degree of freedom): a check fails when its
  Holm-adjusted p-value is at most ``false_alarm``.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023 (PMLR 202), Sec. 2.3 and App. A.1 (the step is exact
   for any processed laws p, q).
.. [2] S. Holm, "A simple sequentially rejective multiple test procedure",
   Scandinavian Journal of Statistics 6(2), 65-70, 1979.
.. [3] T. Weissman, E. Ordentlich, G. Seroussi, S. Verdu, M. Weinberger, "Inequalities
   for the L1 Deviation of the Empirical Distribution", HP Labs HPL-2003-97, 2003.
.. [4] W. G. Cochran, "Some methods for strengthening the common chi-square tests",
   Biometrics 10(4), 417-451, 1954 (expected counts per cell).

Examples
--------
>>> import numpy as np
>>> from specdec import conformance, gallery
>>> report = conformance.run_battery(gallery.vectorised_correct, seed=1,
...                                  cases=["article", "spread_residual"], trials=20_000)
>>> report.passed
True
>>> conformance.run_battery(gallery.shared_uniform, seed=1, trials=20_000,
...                         cases=["spread_residual"]).passed
False
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import math
import sys
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from scipy import optimize
from scipy import stats as sps

from specdec import laws, stats

__all__ = [
    "SamplerSpec",
    "token_sampler",
    "block_sampler",
    "describe_sampler",
    "TokenCase",
    "BlockCase",
    "token_cases",
    "block_cases",
    "CASE_NAMES",
    "BLOCK_CASE_NAMES",
    "Binning",
    "pool_cells",
    "detectable_tv",
    "holm_adjust",
    "Check",
    "CycleAccounting",
    "CaseResult",
    "Report",
    "run_case",
    "run_battery",
    "assert_conforms",
    "main",
]

TOKEN = "token"
BLOCK = "block"
LAWS = "laws"
LOGITS = "logits"

#: Default trials per case: token samplers called once per step, vectorised token
#: samplers, block samplers (one trial = one decode of ``length`` tokens).
DEFAULT_TRIALS = {"scalar": 20_000, "vectorised": 200_000, "block": 10_000,
                  "block_vectorised": 100_000}

#: Largest number of steps requested from a vectorised sampler in one call.
CHUNK = 1 << 18

_MARK = "__conformance__"


# --------------------------------------------------------------------------------------
# Samplers: calling conventions
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplerSpec:
    """How the kit calls a sampler.

    Attributes
    ----------
    kind : {"token", "block"}
        One speculative step, or one speculative cycle over toy autoregressive models.
    vectorised : bool
        The callable produces ``n`` independent outcomes per call (token steps, or whole
        decodes for a block sampler).
    inputs : {"laws", "logits"}
        Token samplers only: receives processed laws ``(p, q)`` or raw logits plus the
        sampling settings.
    name : str
        Printable name (``module:qualname``).
    """

    kind: str
    vectorised: bool = False
    inputs: str = LAWS
    name: str = "sampler"


def _callable_name(f: Any) -> str:
    mod = getattr(f, "__module__", None) or type(f).__module__
    qual = getattr(f, "__qualname__", None) or type(f).__qualname__
    return f"{mod}:{qual}"


def _check_choice(value, name: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"{name}: must be one of {', '.join(map(repr, choices))} (got {value!r})")
    return value


def token_sampler(func: Callable | None = None, *, vectorised: bool = False, inputs: str = LAWS):
    """Mark a callable as a token-level sampler (decorator, with or without arguments).

    Parameters
    ----------
    func : callable, optional
        The sampler; see the module docstring for the signatures.
    vectorised : bool
        ``True`` if the sampler takes a trailing ``n`` and returns ``n`` draws.
    inputs : {"laws", "logits"}
        What the sampler receives: processed laws ``(p, q)``, or logits and settings.

    Returns
    -------
    callable
        ``func`` itself, with a :class:`SamplerSpec` attached.

    Raises
    ------
    ValueError
        If ``inputs`` is not ``"laws"`` or ``"logits"``.

    Examples
    --------
    >>> @token_sampler(vectorised=True)
    ... def mine(p, q, rng, n):
    ...     return rng.choice(len(p), size=n, p=p)
    >>> describe_sampler(mine).vectorised
    True
    """
    _check_choice(inputs, "inputs", (LAWS, LOGITS))

    def mark(f):
        setattr(f, _MARK, SamplerSpec(TOKEN, bool(vectorised), inputs, _callable_name(f)))
        return f

    return mark(func) if func is not None else mark


def block_sampler(func: Callable | None = None, *, vectorised: bool = False):
    """Mark a callable (or a class of callables) as a block-level sampler.

    Parameters
    ----------
    func : callable
        ``func(target, draft, prefix, gamma, rng)`` (one cycle) or, with
        ``vectorised=True``, ``func(target, draft, prefix, gamma, length, rng, n)`` (``n``
        whole decodes); see the module docstring.
    vectorised : bool
        Whole decodes at once.

    Returns
    -------
    callable
        ``func`` itself, with a :class:`SamplerSpec` attached.
    """

    def mark(f):
        setattr(f, _MARK, SamplerSpec(BLOCK, bool(vectorised), LAWS, _callable_name(f)))
        return f

    return mark(func) if func is not None else mark


def _required_positional(f) -> int | None:
    try:
        sig = inspect.signature(f)
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for prm in sig.parameters.values()
               if prm.kind in kinds and prm.default is inspect.Parameter.empty)


def _has_keyword(f, name: str) -> bool:
    try:
        return name in inspect.signature(f).parameters
    except (TypeError, ValueError):
        return False


def describe_sampler(sampler, *, kind: str | None = None, vectorised: bool | None = None,
                     inputs: str | None = None) -> SamplerSpec:
    """Decide how to call ``sampler``.

    Explicit arguments win; then the mark left by :func:`token_sampler` or
    :func:`block_sampler`; then the signature: 7 required positional parameters means a
    vectorised block sampler, 5 a block sampler, 4 a vectorised token sampler, 3 a token
    sampler; a keyword parameter named ``temperature`` means logits inputs.

    Parameters
    ----------
    sampler : callable
        The sampler under test.
    kind : {"token", "block"} or None
    vectorised : bool or None
    inputs : {"laws", "logits"} or None

    Returns
    -------
    SamplerSpec

    Raises
    ------
    TypeError
        If ``sampler`` is not callable.
    ValueError
        If an argument is not one of its choices, or if nothing is said and the signature
        does not decide (e.g. ``*args``).

    Examples
    --------
    >>> describe_sampler(lambda target, draft, prefix, gamma, rng: [0]).kind
    'block'
    >>> describe_sampler(lambda p, q, rng: 0)
    SamplerSpec(kind='token', vectorised=False, inputs='laws', name='specdec.conformance:<lambda>')
    """
    if not callable(sampler):
        raise TypeError(f"sampler: must be callable (got {type(sampler).__name__})")
    if kind is not None:
        _check_choice(kind, "kind", (TOKEN, BLOCK))
    if inputs is not None:
        _check_choice(inputs, "inputs", (LAWS, LOGITS))
    mark = getattr(sampler, _MARK, None)
    if isinstance(mark, SamplerSpec):
        spec = mark
    else:
        n = _required_positional(sampler)
        if n in (5, 7):
            guess = SamplerSpec(BLOCK, vectorised=(n == 7))
        elif n in (3, 4):
            guess = SamplerSpec(TOKEN, vectorised=(n == 4),
                                inputs=LOGITS if _has_keyword(sampler, "temperature") else LAWS)
        elif kind is None:
            raise ValueError(
                "sampler: cannot tell the calling convention from the signature "
                f"({n} required positional parameters); pass kind= (and vectorised=, inputs=) "
                "or mark it with @token_sampler / @block_sampler")
        else:
            guess = SamplerSpec(kind)
        spec = dataclasses.replace(guess, name=_callable_name(sampler))
    if kind is not None and kind != spec.kind:
        spec = dataclasses.replace(spec, kind=kind)
    if vectorised is not None:
        spec = dataclasses.replace(spec, vectorised=bool(vectorised))
    if inputs is not None:
        spec = dataclasses.replace(spec, inputs=inputs)
    if spec.kind == BLOCK and spec.inputs != LAWS:
        raise ValueError("inputs: block samplers receive toy models, not logits "
                         "(inputs='logits' applies to token samplers only)")
    return spec


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------


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


#: Names of the standard token cases, in battery order.
CASE_NAMES: tuple[str, ...] = (
    "article", "equal", "disjoint", "draft_zero", "target_zero", "onehot_target", "onehot_draft",
    "nearly_equal", "spread_residual", "processed", "large_vocab",
)

#: Names of the standard block cases, in battery order.
BLOCK_CASE_NAMES: tuple[str, ...] = (
    "block_g1", "block_g2", "block_g4", "block_close_g3", "block_eos_g3",
)


# --------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Binning:
    """A data-independent grouping of outcome cells into test bins.

    Attributes
    ----------
    bin_of : numpy.ndarray, shape (K,), int64
        Bin index of each cell; ``-1`` for cells of probability 0 (impossible outcomes).
    law : numpy.ndarray, shape (B,)
        Probability of each bin (sums to 1).
    pooled_cells : int
        Number of cells that share their bin with at least one other cell.
    floor : float
        Minimum expected count per bin that was enforced.
    """

    bin_of: np.ndarray
    law: np.ndarray
    pooled_cells: int
    floor: float

    @property
    def n_bins(self) -> int:
        return int(self.law.size)

    def bin_counts(self, counts: np.ndarray) -> tuple[np.ndarray, int]:
        """Counts per bin, and the count of impossible outcomes.

        Parameters
        ----------
        counts : numpy.ndarray, shape (K,)
            Counts per cell.

        Returns
        -------
        (numpy.ndarray of shape (B,), int)
        """
        counts = np.asarray(counts)
        possible = self.bin_of >= 0
        binned = np.bincount(self.bin_of[possible], weights=counts[possible],
                             minlength=self.n_bins).round().astype(np.int64)
        return binned, int(counts[~possible].sum())


def pool_cells(law, trials: int, *, min_expected: float = 10.0, max_bins: int = 100) -> Binning:
    """Group cells so that every bin has an adequate expected count.

    Cells of probability 0 get bin ``-1`` (an observation there is impossible under the
    law). With ``floor = max(min_expected, trials / max_bins)``, every cell whose expected
    count ``trials * law[i]`` reaches ``floor`` is a bin of its own; the other cells are
    taken in decreasing order of probability (ties: lower index first) and pooled
    greedily until each bin reaches ``floor``; a last group that falls short is merged
    into the bin before it. The result depends only on ``law`` and ``trials``.

    Parameters
    ----------
    law : array_like, shape (K,)
        Exact probability of each cell.
    trials : int
        Number of observations the counts will hold.
    min_expected : float
        Minimum expected count per bin (Cochran's rule asks for about 5; 10 keeps the
        chi-square approximation accurate at small levels).
    max_bins : int
        Upper bound on the number of bins (a chi-square with fewer degrees of freedom
        has more power against diffuse deviations).

    Returns
    -------
    Binning

    Raises
    ------
    ValueError
        If ``law`` is not a valid law, ``trials < 1``, ``min_expected <= 0`` or
        ``max_bins < 1``.

    Examples
    --------
    >>> b = pool_cells([0.5, 0.3, 0.1996, 0.0002, 0.0002, 0.0], 1000)
    >>> b.bin_of.tolist(), b.law.round(4).tolist(), b.pooled_cells
    ([0, 1, 2, 2, 2, -1], [0.5, 0.3, 0.2], 3)
    """
    law = laws.check_law(law, "law")
    trials = laws.check_int(trials, "trials")
    max_bins = laws.check_int(max_bins, "max_bins")
    if not (np.isfinite(min_expected) and min_expected > 0):
        raise ValueError(f"min_expected: must be a finite number > 0 (got {min_expected!r})")
    floor = max(float(min_expected), trials / max_bins)
    bin_of = np.full(law.size, -1, dtype=np.int64)
    possible = np.flatnonzero(law > 0)
    order = possible[np.lexsort((possible, -law[possible]))]
    expected = trials * law[order]
    n_big = int(np.searchsorted(-expected, -floor, side="right"))  # expected sorted descending
    bin_of[order[:n_big]] = np.arange(n_big)
    groups: list[list[int]] = []
    acc, current = 0.0, []
    for cell, e in zip(order[n_big:], expected[n_big:]):
        current.append(int(cell))
        acc += e
        if acc >= floor:
            groups.append(current)
            acc, current = 0.0, []
    if current:
        if groups:
            groups[-1].extend(current)
        elif n_big:
            bin_of[current] = n_big - 1
            current = []
        else:
            groups.append(current)
    for j, cells in enumerate(groups):
        bin_of[cells] = n_big + j
    n_bins = int(bin_of.max()) + 1
    bin_law = np.bincount(bin_of[possible], weights=law[possible], minlength=n_bins)
    sizes = np.bincount(bin_of[possible], minlength=n_bins)
    pooled = int(sizes[sizes > 1].sum())
    return Binning(bin_of, bin_law / bin_law.sum(), pooled, floor)


def _noncentrality(dof: int, level: float, power: float) -> float:
    """Noncentrality at which the chi-square(dof) test at ``level`` has ``power``."""
    crit = sps.chi2.isf(level, dof)

    def gap(lam):
        return sps.ncx2.sf(crit, dof, lam) - power

    hi = 1.0
    while gap(hi) < 0:
        hi *= 2.0
    return float(optimize.brentq(gap, 1e-9, hi, xtol=1e-9, rtol=1e-10))


def detectable_tv(trials: int, dof: int, level: float, power: float) -> float:
    """Smallest TV distance the pooled chi-square test detects with the given power.

    For bin laws ``pi`` (target) and ``s`` (sampler), the Pearson statistic is
    approximately noncentral chi-square with ``dof`` degrees of freedom and
    noncentrality ``lambda = trials * sum (s - pi)^2 / pi``. By Cauchy-Schwarz,
    ``sum |s - pi| <= sqrt(sum (s - pi)^2 / pi)``, so ``lambda >= 4 * trials * TV^2``
    with equality for the least favourable direction. A TV of
    ``sqrt(lambda* / (4 trials))``, where ``lambda*`` gives the test power ``power`` at
    ``level``, is therefore detected with probability at least ``power`` whatever its
    direction. With ``dof = 0`` (all the possible mass in one bin) a deviation must move
    mass onto impossible outcomes, and ``1 - (1 - power)^(1 / trials)`` is detected.

    Parameters
    ----------
    trials : int
        Observations.
    dof : int
        Degrees of freedom of the test (bins - 1), >= 0.
    level : float
        Significance level of the single test, in (0, 1).
    power : float
        Probability of detection, in (0, 1).

    Returns
    -------
    float
        TV distance (probability).

    Raises
    ------
    ValueError
        On an out-of-range argument.

    Examples
    --------
    >>> round(detectable_tv(200_000, 2, 1e-3 / 11, 0.9), 4)
    0.0061
    """
    trials = laws.check_int(trials, "trials")
    dof = laws.check_int(dof, "dof", minimum=0)
    for name, x in (("level", level), ("power", power)):
        if not (0.0 < x < 1.0):
            raise ValueError(f"{name}: must be in (0, 1) (got {x!r})")
    if dof == 0:
        return float(-math.expm1(math.log1p(-power) / trials))
    return float(math.sqrt(_noncentrality(dof, level, power) / (4.0 * trials)))


def holm_adjust(pvalues) -> np.ndarray:
    """Holm-adjusted p-values (family-wise error control, any dependence).

    ``adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))`` over the sorted p-values; a
    hypothesis is rejected at family-wise level ``a`` iff its adjusted p-value is
    ``<= a``.

    Parameters
    ----------
    pvalues : array_like, shape (m,)

    Returns
    -------
    numpy.ndarray, shape (m,)
        In the input order.

    Raises
    ------
    ValueError
        If a p-value is NaN or outside [0, 1].

    References
    ----------
    Holm (1979), the step-down procedure.

    Examples
    --------
    >>> holm_adjust([0.01, 0.04, 0.03]).tolist()
    [0.03, 0.06, 0.06]
    """
    p = np.asarray(pvalues, dtype=np.float64).ravel()
    if p.size == 0:
        return p
    if np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise ValueError("pvalues: must all be in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    adj_sorted = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adj_sorted
    return out


@dataclass(frozen=True)
class Check:
    """One goodness-of-fit check of observed counts against an exact law.

    Attributes
    ----------
    name : str
        ``"law"`` (what the sampler emits) or ``"accounting"`` (the joint law of what it
        emits and what it reports as accepted).
    method : str
        Human-readable test description.
    trials : int
        Observations.
    statistic : float
        Pearson chi-square on the bins (0 when there is nothing to test).
    dof : int
        Degrees of freedom; 0 means no chi-square (one bin).
    pvalue : float
        Unadjusted p-value (1.0 when ``dof == 0``).
    bins, pooled_cells : int
        Number of bins, and cells sharing a bin.
    impossible : int
        Observations of outcomes with exact probability 0 (each one is a failure).
    tv, tv_low, tv_high : float
        Plug-in TV distance on the bins (including impossible outcomes), and its
        confidence interval.
    tv_detectable : float
        Smallest TV detected with the report's power at the Bonferroni level.
    trials_needed : float
        Estimated trials at which this check would catch the observed deviation with the
        report's power (``inf`` when no deviation is seen).
    adjusted_pvalue : float
        Holm-adjusted p-value over the battery.
    failed : bool
        Impossible outcomes observed, or adjusted p-value <= false alarm.
    """

    name: str
    method: str
    trials: int
    statistic: float
    dof: int
    pvalue: float
    bins: int
    pooled_cells: int
    impossible: int
    tv: float
    tv_low: float
    tv_high: float
    tv_detectable: float = float("nan")
    trials_needed: float = float("inf")
    adjusted_pvalue: float = float("nan")
    failed: bool = False


def _gof(name: str, counts: np.ndarray, law: np.ndarray, *, min_expected: float, max_bins: int,
         confidence: float) -> tuple[Check, float]:
    """Pooled chi-square + TV interval; returns the check and the per-trial noncentrality."""
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    binning = pool_cells(law, max(n, 1), min_expected=min_expected, max_bins=max_bins)
    binned, impossible = binning.bin_counts(counts)
    n_possible = n - impossible
    dof = binning.n_bins - 1
    if dof >= 1 and n_possible > 0:
        expected = n_possible * binning.law
        stat = float(((binned - expected) ** 2 / expected).sum())
        pvalue = float(sps.chi2.sf(stat, dof))
        lam1 = max(stat - dof, 0.0) / n_possible
    else:
        stat, pvalue, lam1 = 0.0, 1.0, 0.0
    if n > 0:
        ci = stats.tv_ci(np.append(binned, impossible), np.append(binning.law, 0.0), confidence)
        tv, lo, hi = ci.estimate, ci.low, ci.high
    else:
        tv = lo = hi = float("nan")
    if binning.pooled_cells:
        method = (f"Pearson chi-square, {binning.n_bins} bins "
                  f"({binning.pooled_cells} of {int((binning.bin_of >= 0).sum())} cells pooled)")
    else:
        method = f"Pearson chi-square, {binning.n_bins} cells"
    if dof == 0:
        method = "impossible outcomes only (one possible bin)"
    check = Check(name, method, n, stat, dof, pvalue, binning.n_bins, binning.pooled_cells,
                  impossible, tv, lo, hi)
    return check, lam1


# --------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CycleAccounting:
    """What the sampler reported about its cycles, beside the exact values.

    Token cases: one cycle is one step (one token emitted, one proposal). Block cases:
    the exact values are for the first cycle of a decode (it starts at the case's prefix,
    where the law of a cycle is known); the observed ``first_*`` values are over those
    cycles, the others over every cycle of every decode.

    Attributes
    ----------
    cycles : int
        Cycles observed.
    emitted_per_cycle : float
        Mean tokens emitted per cycle (all cycles).
    acceptance : float or None
        Total accepted / total proposed, as reported (None if not reported).
    first_emitted : float
        Mean tokens emitted per first cycle.
    first_accepted : float or None
        Mean accepted proposals reported per first cycle (None if not reported).
    exact_emitted, exact_accepted : float
        Their exact values for a correct sampler: ``E`` (tokens per cycle) and the
        expected number of accepted proposals (for a token step, 1 and ``beta``).
    """

    cycles: int
    emitted_per_cycle: float
    acceptance: float | None
    first_emitted: float
    first_accepted: float | None
    exact_emitted: float
    exact_accepted: float


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one case.

    Attributes
    ----------
    name, kind, description : str
    trials : int
        Repetitions (token steps, or decodes for block cases).
    law : Check or None
        Law check (None if the sampler could not be run at all).
    accounting : Check or None
        Accounting check (None if the sampler reports no acceptance information, or the
        case has no exact accounting law).
    cycles : CycleAccounting or None
    violations : tuple of str
        Deterministic failures: impossible outcomes, malformed outputs, exceptions,
        accounting identities that do not hold.
    passed : bool
    seconds : float
        Wall time (not part of equality: reports from the same seed compare equal).
    """

    name: str
    kind: str
    description: str
    trials: int
    law: Check | None
    accounting: Check | None
    cycles: CycleAccounting | None
    violations: tuple[str, ...]
    passed: bool = True
    seconds: float = field(default=0.0, compare=False)

    @property
    def checks(self) -> tuple[Check, ...]:
        return tuple(c for c in (self.law, self.accounting) if c is not None)

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "FAIL"

    @property
    def trials_needed(self) -> float:
        """Fewest trials at which one of the case's checks would catch what was seen."""
        return min((c.trials_needed for c in self.checks), default=float("inf"))


def _fmt_p(x: float) -> str:
    if x != x:
        return "n/a"
    return f"{x:.2g}" if x >= 1e-3 else f"{x:.1e}"


def _fmt_tv(x: float) -> str:
    return f"{x:.4f}" if x >= 1e-3 else f"{x:.1e}"


def _fmt_n(x: float) -> str:
    if not np.isfinite(x):
        return "-"
    return f"{int(math.ceil(x)):,}"


@dataclass(frozen=True)
class Report:
    """The outcome of a battery.

    Attributes
    ----------
    sampler : SamplerSpec
    seed : int
    false_alarm : float
        Family-wise false-alarm probability of the battery.
    power : float
        Power at which ``tv_detectable`` is stated.
    confidence : float
        Level of the TV intervals.
    correction : str
        ``"holm"``.
    n_tests : int
        Statistical checks in the family (``m``).
    cases : tuple of CaseResult
    passed : bool
    seconds : float
        Total wall time (not part of equality).
    """

    sampler: SamplerSpec
    seed: int
    false_alarm: float
    power: float
    confidence: float
    correction: str
    n_tests: int
    cases: tuple[CaseResult, ...]
    passed: bool
    seconds: float = field(default=0.0, compare=False)

    @property
    def failures(self) -> tuple[CaseResult, ...]:
        return tuple(c for c in self.cases if not c.passed)

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "FAIL"

    def case(self, name: str) -> CaseResult:
        """The result of the case called ``name`` (KeyError if absent)."""
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def trials_needed(self) -> float:
        """Fewest trials per case at which some check would have caught the sampler."""
        return min((c.trials_needed for c in self.failures), default=float("inf"))

    @property
    def max_tv(self) -> CaseResult | None:
        """The case with the largest TV found (lower confidence bound first)."""
        with_law = [c for c in self.cases if c.law is not None]
        if not with_law:
            return None
        return max(with_law, key=lambda c: (c.law.tv_low, c.law.tv))

    def to_markdown(self, *, timings: bool = False, heading: bool = True) -> str:
        """A readable report: verdict, settings, one table row per case, and failures.

        Parameters
        ----------
        timings : bool
            Include wall times (off by default, so the text is reproducible).
        heading : bool
            Start with a ``##`` heading (else a bold line, for embedding in a page).

        Returns
        -------
        str
            Markdown (GitHub tables).
        """
        spec = self.sampler
        conv = f"{spec.kind} sampler" + (", vectorised" if spec.vectorised else "") + (
            f", {spec.inputs} inputs" if spec.kind == TOKEN else "")
        title = f"Conformance report: {self.verdict}"
        lines = [
            f"## {title}" if heading else f"**{title}**",
            "",
            f"Sampler `{spec.name}` ({conv}); seed {self.seed}; {len(self.cases)} cases, "
            f"{len(self.failures)} failed.",
            f"False-alarm probability of the whole battery <= {self.false_alarm:g} "
            f"({self.correction.capitalize()} over {self.n_tests} statistical checks); "
            f"detectable TV at power {self.power:g}; TV intervals at {self.confidence:.0%}.",
            "",
            "| case | trials | test | p (Holm) | TV found [CI] | detectable TV | verdict |",
            "|:--|--:|:--|--:|:--|--:|:--|",
        ]
        for c in self.cases:
            if c.law is None:
                lines.append(f"| {c.name} | {c.trials:,} | not run | - | - | - | {c.verdict} |")
                continue
            padj = min((k.adjusted_pvalue for k in c.checks if k.dof > 0), default=float("nan"))
            lines.append(
                f"| {c.name} | {c.trials:,} | {c.law.bins} bin{'s' if c.law.bins > 1 else ''}"
                f"{' (pooled)' if c.law.pooled_cells else ''}"
                f"{' + accounting' if c.accounting is not None else ''} | {_fmt_p(padj)} | "
                f"{c.law.tv:.4f} [{c.law.tv_low:.4f}, {c.law.tv_high:.4f}] | "
                f"{_fmt_tv(c.law.tv_detectable)} | {c.verdict} |")
        acc = [c for c in self.cases if c.cycles is not None and c.cycles.acceptance is not None]
        if acc:
            lines += ["", "Accounting reported by the sampler (exact values for a correct sampler):",
                      "", "| case | cycles | emitted/cycle | acceptance | first cycle: emitted "
                      "(exact) | first cycle: accepted (exact) |",
                      "|:--|--:|--:|--:|--:|--:|"]
            for c in acc:
                y = c.cycles
                lines.append(f"| {c.name} | {y.cycles:,} | {y.emitted_per_cycle:.4f} | "
                             f"{y.acceptance:.4f} | {y.first_emitted:.4f} ({y.exact_emitted:.4f}) | "
                             f"{y.first_accepted:.4f} ({y.exact_accepted:.4f}) |")
        if self.failures:
            lines += ["", "Failures:", ""]
            for c in self.failures:
                reasons = list(c.violations)
                for k in c.checks:
                    if k.failed and k.impossible == 0:
                        reasons.append(f"{k.name}: {k.method}, chi-square {k.statistic:.1f} on "
                                       f"{k.dof} dof, Holm-adjusted p = {_fmt_p(k.adjusted_pvalue)}")
                need = _fmt_n(c.trials_needed)
                lines.append(f"- **{c.name}** ({c.description}); trials needed ~ {need}: "
                             + "; ".join(reasons))
        if timings:
            lines += ["", f"Wall time {self.seconds:.2f} s: "
                      + ", ".join(f"{c.name} {c.seconds:.2f} s" for c in self.cases) + "."]
        return "\n".join(lines)

    def __str__(self) -> str:  # pragma: no cover - convenience
        return self.to_markdown()


# --------------------------------------------------------------------------------------
# Running a token case
# --------------------------------------------------------------------------------------


class _Malformed(Exception):
    """The sampler returned something the kit cannot read (a conformance failure)."""


def _as_token_array(x, n: int, vocab: int, what: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.shape != (n,):
        raise _Malformed(f"{what}: expected shape ({n},), got {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise _Malformed(f"{what}: expected integer token ids, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _as_flags(x, n: int) -> np.ndarray:
    arr = np.asarray(x)
    if arr.shape != (n,) or arr.dtype.kind not in "bui":
        raise _Malformed(f"accepted flags: expected a ({n},) boolean array, got "
                         f"shape {arr.shape} dtype {arr.dtype}")
    if arr.dtype.kind != "b" and not np.isin(arr, (0, 1)).all():
        raise _Malformed("accepted flags: must be booleans (or 0/1)")
    return arr.astype(bool)


def _call_token(sampler, spec: SamplerSpec, case: TokenCase, rng: np.random.Generator,
                trials: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Draw ``trials`` outputs: (tokens (trials,), accepted flags (trials,) or None)."""
    if spec.inputs == LOGITS:
        args = (case.target_logits.copy(), case.draft_logits.copy())
        kwargs = case.settings
    else:
        args = (case.p.copy(), case.q.copy())
        kwargs = {}
    if spec.vectorised:
        toks, flags, reported = [], [], None
        done = 0
        while done < trials:
            n = min(CHUNK, trials - done)
            out = sampler(*args, rng, n, **kwargs)
            has_flags = isinstance(out, tuple)
            if reported is None:
                reported = has_flags
            elif reported != has_flags:
                raise _Malformed("return value: switches between tokens and (tokens, accepted)")
            if has_flags:
                if len(out) != 2:
                    raise _Malformed(f"return value: expected tokens or (tokens, accepted), "
                                     f"got a tuple of {len(out)}")
                toks.append(_as_token_array(out[0], n, case.vocab_size, "tokens"))
                flags.append(_as_flags(out[1], n))
            else:
                toks.append(_as_token_array(out, n, case.vocab_size, "tokens"))
            done += n
        return np.concatenate(toks), (np.concatenate(flags) if reported else None)
    tokens = np.empty(trials, dtype=np.int64)
    first = sampler(*args, rng, **kwargs)
    reported = isinstance(first, tuple)
    flags = np.empty(trials, dtype=bool) if reported else None
    out = first
    for i in range(trials):
        if i:
            out = sampler(*args, rng, **kwargs)
        if reported:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise _Malformed(f"return value {i}: expected (token, accepted), got {out!r}")
            tok, acc = out
            if not isinstance(acc, (bool, np.bool_)) and acc not in (0, 1):
                raise _Malformed(f"return value {i}: accepted flag must be a bool, got {acc!r}")
            flags[i] = bool(acc)
        else:
            tok = out
        if isinstance(tok, (bool, np.bool_)) or not isinstance(tok, (int, np.integer)):
            raise _Malformed(f"return value {i}: expected an integer token id, got {tok!r}")
        tokens[i] = tok
    return tokens, flags


def _token_counts(tokens: np.ndarray, vocab: int) -> tuple[np.ndarray, list[str]]:
    bad = (tokens < 0) | (tokens >= vocab)
    violations = []
    if bad.any():
        vals = np.unique(tokens[bad])[:5]
        violations.append(f"{int(bad.sum())} token ids outside the vocabulary 0..{vocab - 1} "
                          f"(e.g. {', '.join(map(str, vals))})")
    return np.bincount(tokens[~bad], minlength=vocab), violations


def _impossible_message(counts: np.ndarray, law: np.ndarray, what: str) -> list[str]:
    bad = (law <= 0) & (counts > 0)
    if not bad.any():
        return []
    idx = np.flatnonzero(bad)
    shown = ", ".join(f"{int(i)} ({int(counts[i])}x)" for i in idx[:5])
    return [f"{int(counts[bad].sum())} {what} of probability 0 under the target: {shown}"]


def _token_case(sampler, spec, case: TokenCase, rng, trials, opts) -> tuple[CaseResult, list]:
    t0 = time.perf_counter()
    try:
        tokens, flags = _call_token(sampler, spec, case, rng, trials)
    except _Malformed as exc:
        return CaseResult(case.name, TOKEN, case.description, trials, None, None, None,
                          (f"malformed output: {exc}",), False, time.perf_counter() - t0), []
    except Exception as exc:  # the sampler crashed: a conformance failure, reported
        return CaseResult(case.name, TOKEN, case.description, trials, None, None, None,
                          (f"raised {type(exc).__name__}: {exc}",), False,
                          time.perf_counter() - t0), []
    counts, violations = _token_counts(tokens, case.vocab_size)
    violations += _impossible_message(counts, case.p, "tokens")
    law_check, lam_law = _gof("law", counts, case.p, **opts)
    acc_check, lam_acc, cycles = None, 0.0, None
    if flags is not None:
        ok = (tokens >= 0) & (tokens < case.vocab_size)
        m = np.minimum(case.p, case.q)
        joint_law = np.concatenate([m, case.p - m])            # accepted x | rejected, then x
        joint = np.bincount(tokens[ok] + case.vocab_size * (~flags[ok]),
                            minlength=2 * case.vocab_size)
        acc_check, lam_acc = _gof("accounting", joint, joint_law, **opts)
        if acc_check.impossible:
            bad_acc = int(joint[: case.vocab_size][m <= 0].sum())
            bad_rej = int(joint[case.vocab_size:][(case.p - m) <= 0].sum())
            if bad_acc:
                violations.append(f"{bad_acc} tokens reported accepted that a correct step never "
                                  "accepts (min(p, q) = 0)")
            if bad_rej:
                violations.append(f"{bad_rej} tokens reported as residual draws that the residual "
                                  "never gives ((p - q)+ = 0)")
        beta = float(m.sum())
        rate = float(flags.mean())
        cycles = CycleAccounting(trials, 1.0, rate, 1.0, rate, 1.0, beta)
    result = CaseResult(case.name, TOKEN, case.description, trials, law_check, acc_check, cycles,
                        tuple(violations), True, time.perf_counter() - t0)
    return result, [lam_law, lam_acc]


# --------------------------------------------------------------------------------------
# Running a block case
# --------------------------------------------------------------------------------------


def _encode(rows: np.ndarray, lengths: np.ndarray, vocab: int) -> np.ndarray:
    """Injective integer code of variable-length token sequences (rows padded arbitrarily)."""
    width = rows.shape[1]
    weights = (vocab + 1) ** np.arange(width, dtype=np.int64)
    digits = np.where(np.arange(width)[None, :] < lengths[:, None], rows + 1, 0)
    return digits.astype(np.int64) @ weights


def _read_cycle(out) -> tuple[list[int], int | None, int | None]:
    """(emitted tokens, reported accepted count or None, reported proposed count or None)."""
    if hasattr(out, "emitted"):
        emitted = out.emitted
        acc = getattr(out, "n_accepted", getattr(out, "accepted", None))
        prop = getattr(out, "n_proposed", getattr(out, "proposed", None))
    elif isinstance(out, tuple) and len(out) == 3 and not isinstance(out[0], (int, np.integer)):
        emitted, acc, prop = out
    else:
        emitted, acc, prop = out, None, None
    try:
        toks = list(emitted)
    except TypeError:
        raise _Malformed(f"emitted: expected a sequence of token ids, got {emitted!r}") from None
    for t in toks:
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
            raise _Malformed(f"emitted: expected integer token ids, got {t!r}")
    counts = []
    for name, v in (("accepted", acc), ("proposed", prop)):
        if isinstance(v, (list, tuple, np.ndarray)):
            v = len(v)                                  # a list of accepted / proposed tokens
        if v is not None and (isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer))):
            raise _Malformed(f"{name}: expected a count, got {v!r}")
        counts.append(None if v is None else int(v))
    return [int(t) for t in toks], counts[0], counts[1]


@dataclass
class _Cycles:
    """Per-cycle records of a block run (flattened over decodes)."""

    n_emitted: np.ndarray          # (C,) tokens emitted by each cycle
    n_accepted: np.ndarray | None  # (C,) as reported, or None
    n_proposed: np.ndarray | None  # (C,)
    ends_eos: np.ndarray | None    # (C,) last emitted token is EOS (None: unknown)
    first: np.ndarray              # (C,) bool, first cycle of its decode


def _run_block_scalar(sampler, case: BlockCase, rng, trials: int):
    """Decode ``trials`` times with a one-cycle sampler; (sequences, cycles, violations)."""
    target, draft = case.target, case.draft
    vocab, eos = int(target.vocab_size), target.eos
    gamma, length, prefix0 = case.gamma, case.length, tuple(case.prefix)
    reset = getattr(sampler, "reset", None)
    violations: dict[str, int] = {}
    seqs: list[tuple] = []
    rec_emit, rec_acc, rec_prop, rec_eos, rec_first = [], [], [], [], []
    reports = True

    def violation(msg):
        violations[msg] = violations.get(msg, 0) + 1

    for _ in range(trials):
        if callable(reset):
            reset()
        out: list[int] = []
        first = True
        while len(out) < length and not (eos is not None and eos in out):
            emitted, acc, prop = _read_cycle(sampler(target, draft, prefix0 + tuple(out), gamma, rng))
            if not emitted:
                violation("a cycle emitted no token (a cycle emits at least one)")
                break
            if any(t < 0 or t >= vocab for t in emitted):
                violation(f"token ids outside the vocabulary 0..{vocab - 1}")
                break
            if eos is not None and eos in emitted[:-1]:
                violation("tokens emitted after end-of-sequence within a cycle")
            reports = reports and acc is not None and prop is not None
            rec_emit.append(len(emitted))
            rec_acc.append(-1 if acc is None else acc)
            rec_prop.append(-1 if prop is None else prop)
            rec_eos.append(eos is not None and emitted[-1] == eos)
            rec_first.append(first)
            first = False
            out.extend(emitted)
        seq = out[:length]
        if eos is not None and eos in seq:
            seq = seq[: seq.index(eos) + 1]
        seqs.append(seq)
    rows = np.zeros((trials, length), dtype=np.int64)
    lens = np.array([len(x) for x in seqs], dtype=np.int64)
    for i, x in enumerate(seqs):
        rows[i, : len(x)] = x
    cycles = _Cycles(np.array(rec_emit, dtype=np.int64),
                     np.array(rec_acc, dtype=np.int64) if reports else None,
                     np.array(rec_prop, dtype=np.int64) if reports else None,
                     np.array(rec_eos, dtype=bool), np.array(rec_first, dtype=bool))
    return rows, lens, cycles, [f"{m} ({k:,} cycles)" for m, k in violations.items()]


def _run_block_vectorised(sampler, case: BlockCase, rng, trials: int):
    """Call a vectorised block sampler in chunks; (sequences, cycles, violations)."""
    target = case.target
    vocab, eos, length = int(target.vocab_size), target.eos, case.length
    rows_parts, lens_parts = [], []
    parts: dict[str, list] = {k: [] for k in ("n_emitted", "n_accepted", "n_proposed", "ends_eos",
                                              "first")}
    has_acc = has_eos = None
    done = 0
    while done < trials:
        n = min(CHUNK, trials - done)
        out = sampler(case.target, case.draft, tuple(case.prefix), case.gamma, length, rng, n)
        tokens = np.asarray(getattr(out, "tokens", out))
        if tokens.shape != (n, length) or tokens.dtype.kind not in "iu":
            raise _Malformed(f"tokens: expected an integer array of shape ({n}, {length}), got "
                             f"shape {tokens.shape} dtype {tokens.dtype}")
        n_tok = getattr(out, "n_tokens", None)
        if n_tok is None:
            pad = tokens < 0
            n_tok = np.where(pad.any(axis=1), np.argmax(pad, axis=1), length)
        n_tok = np.asarray(n_tok, dtype=np.int64)
        body = np.arange(length)[None, :] < n_tok[:, None]
        if ((tokens >= vocab) & body).any() or ((tokens < 0) & body).any():
            raise _Malformed(f"tokens: ids outside the vocabulary 0..{vocab - 1}")
        if eos is not None:
            hit = (tokens == eos) & body
            n_tok = np.where(hit.any(axis=1), np.argmax(hit, axis=1) + 1, n_tok)
        rows_parts.append(tokens.astype(np.int64))
        lens_parts.append(n_tok)
        if all(hasattr(out, a) for a in ("sequence", "n_emitted")):
            seq_id = np.asarray(out.sequence, dtype=np.int64)
            first = np.zeros(seq_id.size, dtype=bool)
            first[np.unique(seq_id, return_index=True)[1]] = True
            parts["first"].append(first)
            parts["n_emitted"].append(np.asarray(out.n_emitted, dtype=np.int64))
            acc_ok = hasattr(out, "n_accepted") and hasattr(out, "n_proposed")
            has_acc = acc_ok if has_acc is None else (has_acc and acc_ok)
            if acc_ok:
                parts["n_accepted"].append(np.asarray(out.n_accepted, dtype=np.int64))
                parts["n_proposed"].append(np.asarray(out.n_proposed, dtype=np.int64))
            eos_ok = hasattr(out, "hit_eos")
            has_eos = eos_ok if has_eos is None else (has_eos and eos_ok)
            if eos_ok:
                parts["ends_eos"].append(np.asarray(out.hit_eos, dtype=bool))
        done += n
    rows, lens = np.concatenate(rows_parts), np.concatenate(lens_parts)
    if not parts["n_emitted"]:
        return rows, lens, None, []
    cat = {k: (np.concatenate(v) if v else None) for k, v in parts.items()}
    cycles = _Cycles(cat["n_emitted"], cat["n_accepted"] if has_acc else None,
                     cat["n_proposed"] if has_acc else None,
                     cat["ends_eos"] if has_eos else None, cat["first"])
    return rows, lens, cycles, []


def _block_case(sampler, spec, case: BlockCase, rng, trials, opts) -> tuple[CaseResult, list]:
    from specdec import block, models

    t0 = time.perf_counter()

    def failed(msg):
        return CaseResult(case.name, BLOCK, case.description, trials, None, None, None, (msg,),
                          False, time.perf_counter() - t0), []

    try:
        run = _run_block_vectorised if spec.vectorised else _run_block_scalar
        rows, lens, cycles, violations = run(sampler, case, rng, trials)
    except _Malformed as exc:
        return failed(f"malformed output: {exc}")
    except Exception as exc:  # the sampler crashed: a conformance failure, reported
        return failed(f"raised {type(exc).__name__}: {exc}")
    target, draft, gamma = case.target, case.draft, case.gamma
    vocab, eos = int(target.vocab_size), target.eos
    exact = models.sequence_law(target, tuple(case.prefix), case.length)
    keys = list(exact)
    law = np.array([exact[k] for k in keys])
    key_codes = _encode(np.array([list(k) + [0] * (case.length - len(k)) for k in keys]),
                        np.array([len(k) for k in keys]), vocab)
    order = np.argsort(key_codes)
    codes = _encode(rows, lens, vocab)
    pos = np.minimum(np.searchsorted(key_codes[order], codes), len(keys) - 1)
    known = key_codes[order][pos] == codes
    counts = np.bincount(order[pos[known]], minlength=len(keys))
    outside = int((~known).sum())
    violations = list(violations)
    if outside:
        shown = ", ".join(str(tuple(rows[i, : lens[i]].tolist())) for i in np.flatnonzero(~known)[:3])
        violations.append(f"{outside} decodes produced sequences of probability 0 under the "
                          f"target (e.g. {shown})")
    law_check, lam_law = _gof("law", np.append(counts, outside), np.append(law / law.sum(), 0.0),
                              **opts)
    acc_check, lam_acc, summary = None, 0.0, None
    if cycles is not None and cycles.n_emitted.size:
        e = cycles.n_emitted
        bad = (e < 1) | (e > gamma + 1)
        if bad.any():
            violations.append(f"cycles must emit 1 to gamma + 1 = {gamma + 1} tokens "
                              f"({int(bad.sum()):,} cycles)")
        k_law = block.accepted_count_law(target, draft, tuple(case.prefix), gamma)
        e_law = block.cycle_length_law(target, draft, tuple(case.prefix), gamma)
        exact_e = float(np.arange(e_law.size) @ e_law)
        exact_a = float(np.arange(gamma + 1) @ k_law)
        acc, prop = cycles.n_accepted, cycles.n_proposed
        first = cycles.first
        if acc is not None:
            bad = (acc < 0) | (acc > prop) | (prop > gamma)
            if bad.any():
                violations.append(f"accounting: need 0 <= accepted <= proposed <= gamma = {gamma} "
                                  f"({int(bad.sum()):,} cycles)")
            ends = cycles.ends_eos if cycles.ends_eos is not None else np.full(e.size, eos is not None)
            bad = (acc != e - 1) & ~(ends & (acc == e))
            if bad.any():
                violations.append("accounting: the accepted proposals are the tokens emitted before "
                                  "the corrected or bonus token, so accepted = emitted - 1 "
                                  f"(or = emitted when the cycle ends at end-of-sequence) "
                                  f"({int(bad.sum()):,} cycles)")
            k_first = np.bincount(np.clip(acc[first], 0, gamma), minlength=gamma + 1)
            acc_check, lam_acc = _gof("accounting", k_first, k_law, **opts)
            acc_check = dataclasses.replace(
                acc_check, method="accepted proposals in the first cycle: " + acc_check.method)
        summary = CycleAccounting(
            int(e.size), float(e.mean()),
            float(acc.sum() / prop.sum()) if acc is not None and prop.sum() else None,
            float(e[first].mean()),
            float(acc[first].mean()) if acc is not None else None,
            exact_e, exact_a)
    result = CaseResult(case.name, BLOCK, case.description, trials, law_check, acc_check, summary,
                        tuple(violations), True, time.perf_counter() - t0)
    return result, [lam_law, lam_acc]


# --------------------------------------------------------------------------------------
# The battery
# --------------------------------------------------------------------------------------


def _case_rng(seed: int, name: str) -> np.random.Generator:
    """Independent stream per case: SeedSequence(seed) with a spawn key from the case name.

    The stream of a case does not depend on which other cases run, or in what order.
    """
    key = zlib.crc32(name.encode("utf-8"))
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(key,)))


def _resolve_cases(kind: str, cases) -> tuple:
    standard = token_cases() if kind == TOKEN else block_cases()
    if cases is None:
        return standard
    if isinstance(cases, (str, TokenCase, BlockCase)):
        cases = [cases]
    by_name = {c.name: c for c in standard}
    out = []
    for c in cases:
        if isinstance(c, str):
            if c not in by_name:
                raise ValueError(f"cases: unknown {kind} case {c!r} (known: {', '.join(by_name)})")
            out.append(by_name[c])
        elif isinstance(c, TokenCase if kind == TOKEN else BlockCase):
            out.append(c)
        else:
            raise ValueError(f"cases: expected {kind} case names or "
                             f"{'TokenCase' if kind == TOKEN else 'BlockCase'} objects (got {c!r})")
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise ValueError(f"cases: names must be unique (got {names})")
    if not out:
        raise ValueError("cases: must not be empty")
    return tuple(out)


def run_case(sampler, case, *, spec: SamplerSpec | None = None, seed: int = 0,
             trials: int | None = None, min_expected: float = 10.0, max_bins: int = 100,
             confidence: float = 0.95) -> tuple[CaseResult, list[float]]:
    """Run one case; no multiple-testing adjustment (see :func:`run_battery`).

    Returns
    -------
    (CaseResult, list of float)
        The unadjusted result and the per-trial noncentralities estimated for its checks
        (law, accounting), used for the trials-needed estimate.
    """
    spec = spec or describe_sampler(sampler)
    kind = BLOCK if isinstance(case, BlockCase) else TOKEN
    if kind != spec.kind:
        raise ValueError(f"cases: a {kind} case cannot test a {spec.kind} sampler")
    if trials is None:
        key = ("block" if kind == BLOCK else "") + ("_vectorised" if spec.vectorised else "")
        trials = DEFAULT_TRIALS[{"": "scalar", "_vectorised": "vectorised"}.get(key, key)]
    trials = laws.check_int(trials, "trials")
    opts = dict(min_expected=min_expected, max_bins=max_bins, confidence=confidence)
    rng = _case_rng(seed, case.name)
    if kind == TOKEN:
        return _token_case(sampler, spec, case, rng, trials, opts)
    return _block_case(sampler, spec, case, rng, trials, opts)


def _check_probability(x, name: str, *, upper: float = 1.0, closed: bool = False) -> float:
    ok = isinstance(x, (int, float, np.floating)) and not isinstance(x, bool) and np.isfinite(x)
    if not ok or not (0.0 < x < upper or (closed and x == upper)):
        bracket = "]" if closed else ")"
        raise ValueError(f"{name}: must be a number in (0, {upper:g}{bracket} (got {x!r})")
    return float(x)


def run_battery(sampler, *, kind: str | None = None, vectorised: bool | None = None,
                inputs: str | None = None, cases=None, seed: int = 0, trials: int | None = None,
                false_alarm: float = 1e-3, power: float = 0.9, confidence: float = 0.95,
                min_expected: float = 10.0, max_bins: int = 100) -> Report:
    """Run the conformance battery on a sampler.

    Parameters
    ----------
    sampler : callable
        Token or block sampler (see the module docstring and :func:`describe_sampler`).
    kind, vectorised, inputs : optional
        Calling convention, when neither a mark nor the signature says it.
    cases : sequence of str or case objects, optional
        Subset (by name) or custom cases; default: the standard battery of the kind
        (:func:`token_cases` or :func:`block_cases`).
    seed : int
        Master seed, >= 0. Case ``c`` draws from ``SeedSequence(seed, spawn_key=(crc32(c),))``,
        so a report is reproducible and a case's draws do not depend on the others.
    trials : int, optional
        Repetitions per case (token steps, or decodes of ``length`` tokens). Default
        20,000 for a token sampler, 200,000 for a vectorised one, 10,000 for a block
        sampler.
    false_alarm : float
        Family-wise false-alarm probability: a correct sampler fails the battery with
        probability at most this (Holm over all statistical checks; impossible outcomes
        never happen to a correct sampler). In (0, 0.5].
    power : float
        Power at which the detectable TV is reported, in (0, 1).
    confidence : float
        Level of the TV intervals, in (0, 1).
    min_expected, max_bins :
        Binning rule, see :func:`pool_cells`.

    Returns
    -------
    Report

    Raises
    ------
    TypeError
        If ``sampler`` is not callable.
    ValueError
        Invalid ``seed``, ``trials``, ``false_alarm``, ``power``, ``confidence``, unknown
        case names, cases of the wrong kind, or an undecidable calling convention.

    Examples
    --------
    >>> from specdec import gallery
    >>> r = run_battery(gallery.vectorised_correct, cases=["article"], trials=10_000, seed=3)
    >>> r.passed, r.n_tests
    (True, 2)
    """
    t0 = time.perf_counter()
    spec = describe_sampler(sampler, kind=kind, vectorised=vectorised, inputs=inputs)
    seed = laws.check_int(seed, "seed", minimum=0)
    if trials is not None:
        trials = laws.check_int(trials, "trials")
    _check_probability(false_alarm, "false_alarm", upper=0.5, closed=True)
    _check_probability(power, "power")
    _check_probability(confidence, "confidence")
    case_list = _resolve_cases(spec.kind, cases)
    raw = [run_case(sampler, c, spec=spec, seed=seed, trials=trials, min_expected=min_expected,
                    max_bins=max_bins, confidence=confidence) for c in case_list]
    # the family: every check with at least one degree of freedom
    family = [(i, j) for i, (res, _) in enumerate(raw)
              for j, chk in enumerate(res.checks) if chk.dof >= 1]
    m = len(family)
    adjusted = holm_adjust([raw[i][0].checks[j].pvalue for i, j in family])
    adj_of = {key: a for key, a in zip(family, adjusted)}
    level = false_alarm / max(m, 1)
    results = []
    for i, (res, lams) in enumerate(raw):
        new_checks = []
        for j, chk in enumerate(res.checks):
            adj = adj_of.get((i, j), 1.0)
            tv_det = detectable_tv(max(chk.trials, 1), chk.dof, level, power)
            failed = bool(chk.impossible > 0 or adj <= false_alarm)
            need = float("inf")                    # estimated only for what was caught
            if failed and chk.dof >= 1 and lams[j] > 0:
                need = _noncentrality(chk.dof, level, power) / lams[j]
            if failed and chk.impossible:
                frac = chk.impossible / chk.trials
                need = min(need, 1.0 if frac >= 1 else math.log1p(-power) / math.log1p(-frac))
            new_checks.append(dataclasses.replace(chk, adjusted_pvalue=float(adj),
                                                  tv_detectable=tv_det, trials_needed=need,
                                                  failed=failed))
        law_chk = new_checks[0] if res.law is not None else None
        acc_chk = new_checks[-1] if res.accounting is not None else None
        passed = not res.violations and not any(c.failed for c in new_checks) and res.law is not None
        results.append(dataclasses.replace(res, law=law_chk, accounting=acc_chk, passed=passed))
    return Report(spec, seed, float(false_alarm), float(power), float(confidence), "holm", m,
                  tuple(results), all(r.passed for r in results), time.perf_counter() - t0)


def assert_conforms(sampler, **kwargs) -> Report:
    """pytest-friendly: run the battery and raise ``AssertionError`` with the report if it fails.

    Parameters
    ----------
    sampler : callable
    **kwargs
        As for :func:`run_battery`.

    Returns
    -------
    Report
        When the sampler passes.

    Raises
    ------
    AssertionError
        If the battery fails; the message is the Markdown report. With a fixed ``seed``
        the outcome is deterministic; a correct sampler fails for at most a fraction
        ``false_alarm`` of seeds.

    Examples
    --------
    >>> from specdec import gallery
    >>> _ = assert_conforms(gallery.vectorised_correct, cases=["equal"], trials=5_000)
    """
    report = run_battery(sampler, **kwargs)
    if not report.passed:
        raise AssertionError("sampler does not conform to the target law\n\n" + report.to_markdown())
    return report


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------


def load_sampler(target: str):
    """Import ``package.module:attribute`` (``attribute`` may be dotted).

    A class is instantiated without arguments (stateful samplers such as
    :class:`specdec.gallery.StaleProposals`).

    Raises
    ------
    ValueError
        If the string is malformed or the attribute cannot be found.
    ImportError
        If the module cannot be imported.
    """
    if ":" in target:
        mod_name, attr = target.split(":", 1)
    else:
        try:                       # a module named without ':function' is a usage error
            importlib.import_module(target)
        except ImportError:
            pass
        else:
            raise ValueError(f"sampler: {target!r} is a module, not a sampler; to name a "
                             f"function of it, write '{target}:function'")
        mod_name, _, attr = target.rpartition(".")
    if not mod_name or not attr:
        raise ValueError(f"sampler: expected 'package.module:function' (got {target!r})")
    obj = importlib.import_module(mod_name)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"sampler: module {mod_name!r} has no attribute {attr!r}") from None
    if inspect.ismodule(obj):
        raise ValueError(f"sampler: {target!r} is a module, not a sampler; to name a "
                         f"function of it, write '{target}:function'")
    if inspect.isclass(obj):  # a stateful sampler class: one instance, reset between decodes
        obj = obj()
    return obj


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: ``python -m specdec.conformance package.module:function``.

    Prints the Markdown report. Exit status: 0 if the sampler passes, 1 if it fails, 2 on
    a usage error (bad arguments, sampler not importable, undecidable convention).
    """
    ap = argparse.ArgumentParser(
        prog="python -m specdec.conformance",
        description="Test a speculative sampler against the exact target law "
                    "(standard battery, family-wise false-alarm control).")
    ap.add_argument("sampler", nargs="?", help="package.module:function")
    ap.add_argument("--kind", choices=(TOKEN, BLOCK))
    ap.add_argument("--vectorised", action="store_true", default=None,
                    help="token sampler takes a trailing n and returns n draws")
    ap.add_argument("--inputs", choices=(LAWS, LOGITS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trials", type=int, default=None)
    ap.add_argument("--false-alarm", type=float, default=1e-3)
    ap.add_argument("--power", type=float, default=0.9)
    ap.add_argument("--cases", default=None, help="comma-separated case names")
    ap.add_argument("--list-cases", action="store_true", help="print the standard cases and exit")
    ap.add_argument("--timings", action="store_true", help="add wall times to the report")
    args = ap.parse_args(argv)
    if args.list_cases:
        for c in token_cases():
            print(f"token  {c.name:16s} {c.description}")
        for c in block_cases():
            print(f"block  {c.name:16s} {c.description}")
        return 0
    if not args.sampler:
        ap.print_usage(sys.stderr)
        print("error: the sampler (package.module:function) is required", file=sys.stderr)
        return 2
    try:
        sampler = load_sampler(args.sampler)
        cases = None if args.cases is None else [c.strip() for c in args.cases.split(",") if c.strip()]
        report = run_battery(sampler, kind=args.kind, vectorised=args.vectorised, inputs=args.inputs,
                             cases=cases, seed=args.seed, trials=args.trials,
                             false_alarm=args.false_alarm, power=args.power)
    except (ImportError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.to_markdown(timings=args.timings))
    return 0 if report.passed else 1


if __name__ == "__main__":  # pragma: no cover
    # Run the imported module's main, not this copy's: samplers marked with
    # @token_sampler carry specdec.conformance.SamplerSpec, not __main__.SamplerSpec.
    from specdec.conformance import main as _main

    sys.exit(_main())
