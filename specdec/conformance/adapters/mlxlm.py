"""mlx-lm's speculative decoding (mlx-lm 0.32.2 on mlx-cpu 0.32.4), every emitted token tested.

The adapter drives mlx-lm end to end through its public generation function,
``mlx_lm.stream_generate(model, tokenizer, prompt, draft_model=..., num_draft_tokens=...,
sampler=make_sampler(temp=..., top_p=...))``, on two tiny llama models built here from
small configurations (:func:`build_models`: ``mlx_lm.models.llama.Model`` with weights drawn
by numpy from a seed, no download) and a word-level tokenizer of the same vocabulary
(:func:`tiny_tokenizer`, transformers' ``PreTrainedTokenizerFast`` with no end-of-sequence
token, so that every response has its full length). Prompts are token ids, which
``stream_generate`` accepts as they are.

For every response the target's law of every emitted position is computed from the same
weights with one forward pass of the target over prompt and response (:func:`model_laws`:
float32 logits from mlx, then float64 log-softmax, mlx-lm's top-p rule and the
temperature), the draft's likewise, and :func:`specdec.stats.pertoken.laws_check` tests the
tokens. The numerical disagreement between those laws and the law mlx-lm's sampler draws
from (its own float32 log-probabilities of the cached forward passes, which
``stream_generate`` yields with every token, put through mlx-lm's own top-p and
temperature) is measured at every emitted position and passed as the check's
``tolerance`` (:func:`engine_laws`).

The rule, as read from the code of mlx-lm 0.32.2 (:data:`RULE`, file:line in the installed
package ``mlx_lm/``):

* the draft proposes ``num_draft`` tokens one at a time, each sampled with the request's
  sampler from the draft's log-probabilities (``generate.py:601-609``, ``_step`` on the
  draft at 606, sampling in ``_process_and_sample`` at 557-564);
* the target runs once over the last confirmed token and the drafts and samples its own
  token at every one of the ``num_draft + 1`` positions with the same sampler
  (``generate.py:627-628``, 563);
* drafts are accepted while the target's sample equals the draft token
  (``generate.py:633-641``, the test at 635); the target's sample at the first mismatch
  (or after all drafts) is emitted next (``generate.py:642-644``); both caches are trimmed
  to the accepted tokens (``generate.py:597-599, 662``).

Every emitted token is therefore the target's own sample at its position, drawn
independently of the draft: the matching rule, exact by construction whatever the draft
proposes (it only changes how many tokens a cycle emits). The sampler is
``mx.random.categorical(logprobs * (1 / temp))`` after the optional top-p filter, which
mlx-lm applies to the temperature-1 log-probabilities, before the temperature
(``sample_utils.py:55-56, 67-71, 213-229, 272-273``): the law tested is that one. The
plain path (no draft) is ``generate_step`` (``generate.py:313``, sampling at 428), the
reference row.

Randomness: mlx-lm samples from mlx's global generator; each request seeds it with
``mx.random.seed`` from a numpy ``SeedSequence`` (:func:`request_seeds`), so the same seed
gives the same tokens. The per-token check draws its uniforms from its own numpy
``Generator``.

Controls (must fail): the tokens of the temperature-0.7 row tested against the law at
temperature 1 (a client that assumes the wrong temperature), and mlx-lm's plain
``stream_generate`` of the draft model tested against the target's law (a decoder that
emits the draft's law, the error the ``draft_over_target`` ordering looks for).

Requires the engine environment of ``tools/py_engines.py`` (``mlx``); run
``python -m specdec.conformance.adapters.mlxlm`` with its interpreter for a JSON summary.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023 (the exact rule; matching is the special case that
   ignores the draft's probabilities).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

import numpy as np

from specdec.conformance.adapters.seeds import request_seeds
from specdec.conformance.adapters import Adapter, Environment, TRANSFORMERS_STACK
from specdec.conformance.matrix import MatrixRow, Scope, check_passed, pertoken_control_text
from specdec.conformance.report import sci

__all__ = ["ADAPTER", "ENVIRONMENT", "matrix_rows",
           "PINNED", "MLX_PINNED", "RULE", "ModelConfig", "Setting", "version", "check_version",
           "request_seeds", "tiny_tokenizer", "build_models", "top_p_mask", "law_from_logits",
           "model_laws", "engine_laws", "decode", "check_row", "run_all", "main"]

#: The mlx-lm release the adapter and :data:`RULE` were written against.
PINNED = "0.32.2"

#: The mlx (and mlx-cpu) release installed beside it by ``tools/py_engines.py mlx``.
MLX_PINNED = "0.32.4"

#: The pinned environment this adapter runs in (built by tools/py_engines.py, which
#: reads this expression from the source: literals, this module's constants and the
#: package's pins only).
ENVIRONMENT = Environment(
    "mlx", PINNED,
    ("mlx-lm==0.32.2", "mlx==0.32.4", "mlx-cpu==0.32.4",
     *(r for r in TRANSFORMERS_STACK
       if r.split("==")[0] not in ("torch", "sympy", "mpmath", "networkx"))),
    "import importlib.metadata as m, mlx.core, mlx_lm.generate; "
    "print(m.version('mlx-lm'))",
    pip_args=("--no-deps",),
    notes="mlx-lm 0.32.2 declares mlx only on Darwin (METADATA: mlx>=0.32.2; "
          "platform_system == 'Darwin'), so the Linux CPU build is installed beside it: "
          "mlx 0.32.4 (the Python bindings, mlx.core) and mlx-cpu 0.32.4 (libmlx.so, what "
          "mlx[cpu] pulls on Linux), the newest of both. --no-deps because mlx-lm's other "
          "declared dependencies are unpinned; what `mlx_lm.generate` imports is numpy and "
          "transformers (PreTrainedTokenizer, AutoTokenizer in tokenizer_utils.py), so the "
          "pinned transformers stack goes in without torch (sympy, mpmath, networkx are "
          "torch's); sentencepiece and protobuf serve tokenizers loaded from a hub, not "
          "used here. scipy: the kit's statistics.")

#: The rule as read from the pinned sources: (step, what it does, where: file:line in mlx_lm/).
RULE = (
    ("draft", "the draft samples num_draft tokens one at a time with the request's sampler",
     "generate.py:601-609 (_step on draft_model at 606; sampler at 563)"),
    ("verify", "the target runs once over the last confirmed token and the drafts and samples "
     "its own token at each of the num_draft + 1 positions with the same sampler",
     "generate.py:627-628, 557-564"),
    ("accept", "drafts accepted while the target's sample equals the draft token; the "
     "target's sample at the first mismatch (or after all drafts) is emitted next",
     "generate.py:633-644 (test at 635)"),
    ("caches", "target and draft caches trimmed to the accepted tokens",
     "generate.py:597-599, 662"),
    ("sampler", "categorical(logprobs / temp); top-p, if set, on the temperature-1 "
     "log-probabilities before the temperature (keep the largest tokens until their mass "
     "reaches top_p)", "sample_utils.py:55-56, 67-71, 213-229, 272-273"),
)

#: One line of :data:`RULE` for the matrix.
RULE_LINE = ("matching: the target samples its own token at every drafted position with the "
             "request's sampler; drafts accepted while equal to it, then the target's sample "
             "(generate.py:601-644)")


@dataclass(frozen=True)
class ModelConfig:
    """Shape and seed of the two tiny llama models.

    Attributes
    ----------
    vocab, hidden, layers, heads : int
        ``mlx_lm.models.llama.ModelArgs``' vocab_size, hidden_size, num_hidden_layers and
        num_attention_heads (intermediate size ``2 * hidden``); the draft has the same shape.
    logit_scale : float
        Standard deviation of the output projection times ``sqrt(hidden)``: the larger,
        the more peaked the laws (4: along the target's own samples the median top
        probability is about 0.6).
    draft_noise : float
        The draft is the target with every matrix multiplied entrywise by
        ``1 + draft_noise * N(0, 1)`` (0.2: per-position TV between them about 0.37, a
        draft token accepted with probability about 0.36).
    seed : int
    """

    vocab: int = 64
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    logit_scale: float = 4.0
    draft_noise: float = 0.2
    seed: int = 0

    def __post_init__(self):
        for name in ("vocab", "hidden", "layers", "heads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: must be a positive integer (got {v!r})")
        if self.vocab < 2:
            raise ValueError(f"vocab: must be >= 2 (got {self.vocab})")
        if self.hidden % self.heads:
            raise ValueError(f"hidden: must be a multiple of heads ({self.heads}; got "
                             f"{self.hidden})")
        if not self.logit_scale > 0:
            raise ValueError(f"logit_scale: must be > 0 (got {self.logit_scale!r})")
        if not self.draft_noise >= 0:
            raise ValueError(f"draft_noise: must be >= 0 (got {self.draft_noise!r})")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed: must be a non-negative integer (got {self.seed!r})")


@dataclass(frozen=True)
class Setting:
    """One decoding setting of a row.

    Attributes
    ----------
    temperature : float
        > 0 (mlx-lm's ``make_sampler(temp=...)``; 0 would be its greedy sampler).
    top_p : float
        In (0, 1]; 1 means no filter (mlx-lm filters only for ``0 < top_p < 1``).
    num_draft : int
        ``num_draft_tokens``; 0 means no draft (plain ``stream_generate``).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    num_draft: int = 3

    def __post_init__(self):
        if not (isinstance(self.temperature, (int, float)) and self.temperature > 0):
            raise ValueError(f"temperature: must be > 0 (got {self.temperature!r})")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p: must be in (0, 1] (got {self.top_p!r})")
        if isinstance(self.num_draft, bool) or not isinstance(self.num_draft, int) \
                or self.num_draft < 0:
            raise ValueError(f"num_draft: must be a non-negative integer (got "
                             f"{self.num_draft!r})")

    def label(self) -> str:
        """``temperature 1, top-p 0.9, num_draft_tokens 3`` (or ``no draft``)."""
        parts = [f"temperature {self.temperature:g}"]
        if self.top_p < 1:
            parts.append(f"top-p {self.top_p:g}")
        parts.append(f"num_draft_tokens {self.num_draft}" if self.num_draft else "no draft")
        return ", ".join(parts)


def version() -> str:
    """The installed mlx-lm version.

    Raises
    ------
    ImportError
        If mlx-lm (or mlx) is not installed in this interpreter.
    """
    import importlib.metadata as md

    try:
        found = md.version("mlx-lm")
        md.version("mlx")
    except md.PackageNotFoundError:
        raise ImportError(f"mlxlm: mlx-lm (with mlx) is not installed in this interpreter "
                          f"({sys.executable}); run `python tools/py_engines.py mlx` and use "
                          f"the interpreter it prints") from None
    return found


def check_version(expected: str = PINNED) -> str:
    """The installed mlx-lm version, checked against ``expected``.

    Raises
    ------
    ImportError
        If mlx-lm is not installed.
    RuntimeError
        If the installed version is not ``expected``.
    """
    found = version()
    if found != expected:
        raise RuntimeError(f"mlxlm: the adapter was written against mlx-lm {expected} "
                           f"(RULE's file:line references), but {found} is installed")
    return found


@lru_cache(maxsize=1)
def _mlx():
    check_version()
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm import stream_generate
    from mlx_lm.models.llama import Model, ModelArgs
    from mlx_lm.sample_utils import apply_top_p, make_sampler

    return dict(mx=mx, tree_flatten=tree_flatten, tree_unflatten=tree_unflatten,
                stream_generate=stream_generate, Model=Model, ModelArgs=ModelArgs,
                make_sampler=make_sampler, apply_top_p=apply_top_p)


def tiny_tokenizer(vocab: int):
    """A word-level tokenizer of ``vocab`` tokens ``t0 .. t{vocab-1}``, without special tokens.

    transformers' ``PreTrainedTokenizerFast`` around a ``tokenizers`` WordLevel model built
    in memory: ``stream_generate`` wraps it in mlx-lm's ``TokenizerWrapper`` (its streaming
    detokenizer calls ``decode``). It has no end-of-sequence token, so a response always
    runs to ``max_tokens``.

    Raises
    ------
    ValueError
        vocab < 2.
    """
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 2:
        raise ValueError(f"vocab: must be an integer >= 2 (got {vocab!r})")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def build_models(config: ModelConfig):
    """The target and the draft: two ``mlx_lm.models.llama.Model`` of ``config``'s shape.

    Weights are drawn by numpy from ``SeedSequence(config.seed)``: embedding ``N(0, 1)``,
    every other matrix ``N(0, 1 / fan_in)``, the output projection (untied) times
    ``logit_scale``, norms 1. The draft is the target with every matrix multiplied entrywise
    by ``1 + draft_noise * N(0, 1)`` (a second child of the seed).

    Returns
    -------
    tuple
        ``(target, draft)``, evaluated, float32.
    """
    m = _mlx()
    mx, tree_flatten, tree_unflatten = m["mx"], m["tree_flatten"], m["tree_unflatten"]
    args = m["ModelArgs"](model_type="llama", hidden_size=config.hidden,
                          num_hidden_layers=config.layers, intermediate_size=2 * config.hidden,
                          num_attention_heads=config.heads, rms_norm_eps=1e-5,
                          vocab_size=config.vocab, tie_word_embeddings=False)
    s_target, s_draft = np.random.SeedSequence(config.seed).spawn(2)
    g_t, g_d = np.random.default_rng(s_target), np.random.default_rng(s_draft)
    target, draft = m["Model"](args), m["Model"](args)
    tw, dw = [], []
    for name, p in tree_flatten(target.parameters()):
        shape = tuple(p.shape)
        if len(shape) == 1:
            w = np.ones(shape)
            d = w
        else:
            std = 1.0 if "embed_tokens" in name else 1.0 / np.sqrt(shape[-1])
            if name.startswith("lm_head"):
                std *= config.logit_scale
            w = std * g_t.standard_normal(shape)
            d = w * (1.0 + config.draft_noise * g_d.standard_normal(shape))
        tw.append((name, mx.array(w.astype(np.float32))))
        dw.append((name, mx.array(d.astype(np.float32))))
    target.update(tree_unflatten(tw))
    draft.update(tree_unflatten(dw))
    mx.eval(target.parameters(), draft.parameters())
    return target, draft


def top_p_mask(logprobs: np.ndarray, top_p: float) -> np.ndarray:
    """Which tokens mlx-lm's top-p filter keeps (``sample_utils.py:213-229``), in float64.

    A token is kept when the mass of the tokens above it (sorted by log-probability,
    larger first) is below ``top_p``: the smallest set of top tokens whose mass reaches
    ``top_p``, with every token tied with the last one kept.

    Parameters
    ----------
    logprobs : numpy.ndarray, shape (n, V)
        Normalised log-probabilities (temperature 1).
    top_p : float
        In (0, 1]; 1 keeps every token.

    Returns
    -------
    numpy.ndarray of bool, shape (n, V)

    Raises
    ------
    ValueError
        logprobs not 2-D, top_p outside (0, 1].
    """
    lp = np.asarray(logprobs, dtype=np.float64)
    if lp.ndim != 2:
        raise ValueError(f"logprobs: must have shape (n, V) (got {lp.shape})")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p: must be in (0, 1] (got {top_p!r})")
    if top_p == 1:
        return np.ones(lp.shape, dtype=bool)
    order = np.argsort(-lp, axis=1, kind="stable")
    p_sorted = np.exp(np.take_along_axis(lp, order, axis=1))
    above = np.cumsum(p_sorted, axis=1) - p_sorted
    total = p_sorted.sum(axis=1, keepdims=True)
    kept_sorted = above < top_p * total
    # the smallest kept log-probability is the threshold; ties with it are kept too
    last = kept_sorted.sum(axis=1) - 1
    threshold = np.take_along_axis(lp, order, axis=1)[np.arange(lp.shape[0]), last]
    return lp >= threshold[:, None]


def law_from_logits(logits: np.ndarray, temperature: float, top_p: float = 1.0) -> np.ndarray:
    """The law mlx-lm's sampler draws from, given the model's logits, in float64.

    ``log_softmax(logits)``, mlx-lm's top-p filter on it (:func:`top_p_mask`), then
    ``softmax(logprobs / temperature)`` over the kept tokens.

    Parameters
    ----------
    logits : numpy.ndarray, shape (n, V)
    temperature : float
        > 0.
    top_p : float
        In (0, 1].

    Returns
    -------
    numpy.ndarray, shape (n, V)
        Rows sum to 1; tokens the filter drops have probability 0.

    Raises
    ------
    ValueError
        logits not 2-D or not finite, temperature <= 0, top_p outside (0, 1].
    """
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"logits: must have shape (n, V) (got {x.shape})")
    if not np.isfinite(x).all():
        raise ValueError("logits: must be finite")
    if not temperature > 0:
        raise ValueError(f"temperature: must be > 0 (got {temperature!r})")
    x = x - x.max(axis=1, keepdims=True)
    lp = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    keep = top_p_mask(lp, top_p)
    z = np.where(keep, lp / temperature, -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    w = np.exp(z)
    return w / w.sum(axis=1, keepdims=True)


def model_laws(model, prompt, tokens, setting: Setting) -> np.ndarray:
    """The law of every emitted position from one forward pass of ``model``.

    Parameters
    ----------
    model : mlx_lm.models.llama.Model
    prompt : sequence of int, length L >= 1
    tokens : sequence of int, length n >= 1
        The response.
    setting : Setting
        Its temperature and top-p (the draft length plays no part).

    Returns
    -------
    numpy.ndarray, shape (n, V)
        Row ``i``: the law of token ``i`` given the prompt and tokens ``0 .. i-1``.

    Raises
    ------
    ValueError
        An empty prompt or response.
    """
    prompt, tokens = [int(t) for t in prompt], [int(t) for t in tokens]
    if not prompt:
        raise ValueError("prompt: must have at least one token")
    if not tokens:
        raise ValueError("tokens: must have at least one token")
    mx = _mlx()["mx"]
    seq = mx.array(prompt + tokens[:-1], dtype=mx.int32)[None]
    logits = model(seq)[0, len(prompt) - 1:]
    logits = np.array(logits.astype(mx.float32), dtype=np.float64)
    return law_from_logits(logits, setting.temperature, setting.top_p)


def engine_laws(logprobs, setting: Setting) -> np.ndarray:
    """The law mlx-lm sampled each token from, from the log-probabilities it yielded.

    mlx-lm's own ``apply_top_p`` (when ``0 < top_p < 1``) and the temperature, in mlx's
    float32, as ``make_sampler`` applies them before ``mx.random.categorical``.

    Parameters
    ----------
    logprobs : list of mlx arrays, each shape (V,)
        ``GenerationResponse.logprobs`` of every emitted token.
    setting : Setting

    Returns
    -------
    numpy.ndarray, shape (n, V), float64 copy of the float32 law
    """
    m = _mlx()
    mx = m["mx"]
    lp = mx.stack(list(logprobs)).astype(mx.float32)
    if setting.top_p < 1:
        lp = m["apply_top_p"](lp, setting.top_p)
    law = mx.softmax(lp * (1.0 / setting.temperature), axis=-1)
    return np.array(law, dtype=np.float64)


def decode(target, draft, tokenizer, prompt, setting: Setting, *, max_tokens: int,
           mlx_seed: int):
    """One request through ``mlx_lm.stream_generate``, seeded.

    Parameters
    ----------
    target, draft : mlx_lm models
        ``draft`` is used only when ``setting.num_draft > 0``.
    tokenizer : transformers tokenizer (see :func:`tiny_tokenizer`)
    prompt : sequence of int
    setting : Setting
    max_tokens : int
    mlx_seed : int
        Passed to ``mx.random.seed`` before the request.

    Returns
    -------
    tuple
        ``(tokens, from_draft, logprobs)``: int64 array (n,), bool array (n,), and the
        list of the n log-probability vectors mlx-lm yielded.

    Raises
    ------
    RuntimeError
        mlx-lm emitted a token outside the vocabulary or more than ``max_tokens``.
    """
    m = _mlx()
    mx = m["mx"]
    mx.random.seed(int(mlx_seed))
    sampler = m["make_sampler"](temp=float(setting.temperature),
                                top_p=float(setting.top_p) if setting.top_p < 1 else 0.0)
    kwargs = dict(sampler=sampler, max_tokens=int(max_tokens))
    if setting.num_draft:
        kwargs.update(draft_model=draft, num_draft_tokens=int(setting.num_draft))
    toks, flags, lps = [], [], []
    for resp in m["stream_generate"](target, tokenizer, [int(t) for t in prompt], **kwargs):
        toks.append(int(resp.token))
        flags.append(bool(resp.from_draft))
        lps.append(resp.logprobs)
    tokens = np.asarray(toks, dtype=np.int64)
    V = target.args.vocab_size
    if tokens.size > max_tokens:
        raise RuntimeError(f"output: {tokens.size} tokens, more than max_tokens ({max_tokens})")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= V):
        raise RuntimeError(f"output: a token outside 0..{V - 1} ({tokens.tolist()})")
    return tokens, np.asarray(flags, dtype=bool), lps


def disagreement(p_laws, e_laws) -> dict:
    """Largest per-position TV and probability difference between two lists of laws.

    Parameters
    ----------
    p_laws, e_laws : sequences of numpy.ndarray, each shape (n_r, V), paired

    Returns
    -------
    dict
        ``positions``, ``max_tv``, ``median_tv``, ``max_abs``.

    Raises
    ------
    ValueError
        Different lengths or shapes, or no position.
    """
    if len(p_laws) != len(e_laws):
        raise ValueError(f"p_laws, e_laws: need one entry per response each (got "
                         f"{len(p_laws)}, {len(e_laws)})")
    tvs, worst = [], 0.0
    for r, (p, e) in enumerate(zip(p_laws, e_laws)):
        p, e = np.asarray(p, dtype=np.float64), np.asarray(e, dtype=np.float64)
        if p.shape != e.shape:
            raise ValueError(f"e_laws[{r}]: must have the shape of p_laws[{r}] {p.shape} "
                             f"(got {e.shape})")
        d = np.abs(p - e)
        if d.size:
            tvs.append(0.5 * d.sum(axis=1))
            worst = max(worst, float(d.max()))
    if not tvs:
        raise ValueError("p_laws: no position to compare")
    tv = np.concatenate(tvs)
    return {"positions": int(tv.size), "max_tv": float(tv.max()),
            "median_tv": float(np.median(tv)), "max_abs": worst}


def check_row(responses, target, draft, setting: Setting, *, max_tokens: int, rng,
              law_setting: Setting | None = None, tolerance: float | None = None,
              false_alarm: float = 1e-6):
    """The per-token check of one row's responses against the target's laws.

    Parameters
    ----------
    responses : sequence of (prompt, tokens, from_draft, logprobs)
    target, draft : mlx_lm models
    setting : Setting
        The setting the engine decoded with (for the measured disagreement).
    max_tokens : int
    rng : numpy.random.Generator
        The check's uniforms.
    law_setting : Setting, optional
        The setting the client computes the laws at (default ``setting``; another one is
        a control).
    tolerance : float, optional
        Per-token TV the null allows; default the measured disagreement's largest TV.
    false_alarm : float

    Returns
    -------
    tuple
        ``(PerTokenCheck, disagreement dict)``.
    """
    from specdec.stats.pertoken import laws_check

    law_setting = setting if law_setting is None else law_setting
    p_laws, q_laws, e_laws, toks = [], [], [], []
    for prompt, tokens, _, lps in responses:
        p_laws.append(model_laws(target, prompt, tokens, law_setting))
        q_laws.append(model_laws(draft, prompt, tokens, law_setting))
        e_laws.append(engine_laws(lps, setting))
        toks.append(tokens)
    dis = disagreement(p_laws if law_setting == setting else
                       [model_laws(target, r[0], r[1], setting) for r in responses], e_laws)
    tol = dis["max_tv"] if tolerance is None else float(tolerance)
    chk = laws_check(p_laws, toks, max_tokens=max_tokens, rng=rng, q_laws=q_laws,
                     false_alarm=false_alarm, tolerance=tol)
    return chk, dis


def _row_summary(chk, dis, setting, *, seconds, decode_seconds, tokens, from_draft,
                 cycles=None, law_setting=None) -> dict:
    d = chk.to_dict()
    out = {"setting": {"temperature": setting.temperature, "top_p": setting.top_p,
                       "num_draft_tokens": setting.num_draft},
           "label": setting.label(), "passed": bool(chk.passed), "pvalue": float(chk.pvalue),
           "detectable_tv": float(chk.detectable_tv), "tokens": int(chk.tokens),
           "requests": int(chk.requests), "tolerance": float(chk.tolerance),
           "message": chk.message, "means": {k: float(v) for k, v in chk.means.items()},
           "disagreement": dis, "seconds": round(seconds, 1),
           "decode_seconds": round(decode_seconds, 1),
           "tokens_per_second": round(tokens / decode_seconds, 1) if decode_seconds > 0 else None,
           "from_draft_fraction": round(from_draft / tokens, 4) if tokens else None,
           "check": d}
    if law_setting is not None:
        out["law_setting"] = {"temperature": law_setting.temperature, "top_p": law_setting.top_p}
    return out


#: Rows run by default: name -> (engine setting, seed row index).
ROWS = {
    "plain_t1": Setting(1.0, 1.0, 0),
    "spec_t1_k3": Setting(1.0, 1.0, 3),
    "spec_t07_k2": Setting(0.7, 1.0, 2),
    "spec_t1_top_p09_k3": Setting(1.0, 0.9, 3),
}


def run_all(*, seed: int = 0, requests: int = 300, max_tokens: int = 64, prompt_len: int = 8,
            rows=tuple(ROWS), control_requests: int = 60, config: ModelConfig | None = None,
            false_alarm: float = 1e-6) -> dict:
    """Decode every row with mlx-lm, test every emitted token, and run the controls.

    Parameters
    ----------
    seed : int
        Seeds the models (unless ``config`` gives its own), the prompts
        (``SeedSequence([seed, 1000])``), mlx's generator per request
        (:func:`request_seeds` with the row's index in :data:`ROWS`; the draft-law control
        is row ``len(ROWS)``) and the check's uniforms (``SeedSequence([seed, 2000, k])``
        for row ``k``, ``[seed, 2000, 100]`` and ``[seed, 2000, 101]`` for the controls).
    requests, max_tokens, prompt_len : int
        Per row: requests of ``max_tokens`` tokens after a prompt of ``prompt_len`` tokens
        drawn uniformly from the vocabulary (the same prompts in every row).
    rows : sequence of str
        Keys of :data:`ROWS`.
    control_requests : int
        Requests of the draft-law control (0: skip it). The temperature control reuses the
        ``spec_t07_k2`` row's tokens, when that row is run.
    config : ModelConfig, optional
    false_alarm : float

    Returns
    -------
    dict
        JSON-ready: ``engine``, ``version``, ``mlx_version``, ``models`` (config and the
        measured target-draft TV), ``rule``, ``rows`` (per row: verdict, p-value,
        detectable TV, tokens, seconds, tokens/s, the measured disagreement), ``controls``,
        ``passed`` (every row passed and every control failed), ``seconds``.

    Raises
    ------
    ValueError
        An unknown row, or a bad count.
    """
    import importlib.metadata as md

    for name, v, lo in (("requests", requests, 1), ("max_tokens", max_tokens, 1),
                        ("prompt_len", prompt_len, 1), ("control_requests", control_requests, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name}: must be an integer >= {lo} (got {v!r})")
    unknown = [r for r in rows if r not in ROWS]
    if unknown or not rows:
        raise ValueError(f"rows: must be a non-empty subset of {', '.join(ROWS)} "
                         f"(got {list(rows)})")
    config = config or ModelConfig(seed=seed)
    t_all = time.perf_counter()
    target, draft = build_models(config)
    tokenizer = tiny_tokenizer(config.vocab)
    g = np.random.default_rng(np.random.SeedSequence([seed, 1000]))
    prompts = [g.integers(0, config.vocab, prompt_len).tolist() for _ in range(requests)]
    out_rows, kept = {}, {}
    for k, name in enumerate(ROWS):
        if name not in rows:
            continue
        setting = ROWS[name]
        seeds = request_seeds(seed, k, requests)
        t0 = time.perf_counter()
        responses = []
        for prompt, s in zip(prompts, seeds):
            toks, flags, lps = decode(target, draft, tokenizer, prompt, setting,
                                      max_tokens=max_tokens, mlx_seed=int(s))
            responses.append((prompt, toks, flags, lps))
        t_dec = time.perf_counter() - t0
        rng = np.random.default_rng(np.random.SeedSequence([seed, 2000, k]))
        chk, dis = check_row(responses, target, draft, setting, max_tokens=max_tokens,
                             rng=rng, false_alarm=false_alarm)
        ntok = sum(len(r[1]) for r in responses)
        out_rows[name] = _row_summary(chk, dis, setting, seconds=time.perf_counter() - t0,
                                      decode_seconds=t_dec, tokens=ntok,
                                      from_draft=sum(int(r[2].sum()) for r in responses))
        kept[name] = responses
    controls = {}
    if "spec_t07_k2" in kept:
        setting = ROWS["spec_t07_k2"]
        t0 = time.perf_counter()
        chk, dis = check_row(kept["spec_t07_k2"], target, draft, setting, max_tokens=max_tokens,
                             rng=np.random.default_rng(np.random.SeedSequence([seed, 2000, 100])),
                             law_setting=Setting(1.0, 1.0, setting.num_draft),
                             tolerance=out_rows["spec_t07_k2"]["tolerance"],
                             false_alarm=false_alarm)
        c = _row_summary(chk, dis, setting, seconds=time.perf_counter() - t0, decode_seconds=0.0,
                         tokens=chk.tokens, from_draft=0,
                         law_setting=Setting(1.0, 1.0, setting.num_draft))
        c["what"] = ("temperature mismatch: the spec_t07_k2 row's tokens (mlx-lm sampling at "
                     "temperature 0.7) tested against the law at temperature 1")
        controls["temperature_mismatch"] = c
    if control_requests:
        setting = Setting(1.0, 1.0, 0)
        seeds = request_seeds(seed, len(ROWS), control_requests)
        t0 = time.perf_counter()
        responses = []
        for prompt, s in zip(prompts[:control_requests], seeds):
            toks, flags, lps = decode(draft, None, tokenizer, prompt, setting,
                                      max_tokens=max_tokens, mlx_seed=int(s))
            responses.append((prompt, toks, flags, lps))
        t_dec = time.perf_counter() - t0
        # the laws of the model that decoded agree with the engine's; the client assumes
        # the target's: the measured disagreement is the draft's own (engine vs its laws)
        from specdec.stats.pertoken import laws_check

        p_laws = [model_laws(target, r[0], r[1], setting) for r in responses]
        q_laws = [model_laws(draft, r[0], r[1], setting) for r in responses]
        dis = disagreement(q_laws, [engine_laws(r[3], setting) for r in responses])
        chk = laws_check(p_laws, [r[1] for r in responses], max_tokens=max_tokens,
                         rng=np.random.default_rng(np.random.SeedSequence([seed, 2000, 101])),
                         q_laws=q_laws,
                         false_alarm=false_alarm, tolerance=dis["max_tv"])
        ntok = sum(len(r[1]) for r in responses)
        c = _row_summary(chk, dis, setting, seconds=time.perf_counter() - t0,
                         decode_seconds=t_dec, tokens=ntok, from_draft=0)
        c["what"] = ("draft's law: mlx-lm's plain stream_generate of the draft model, tested "
                     "against the target's law")
        controls["draft_law"] = c
    p_all, q_all = [], []
    for prompt, toks, _, _ in kept.get("spec_t1_k3", next(iter(kept.values()))):
        p_all.append(model_laws(target, prompt, toks, Setting(1.0, 1.0, 0)))
        q_all.append(model_laws(draft, prompt, toks, Setting(1.0, 1.0, 0)))
    tv_pq = 0.5 * np.abs(np.concatenate(p_all) - np.concatenate(q_all)).sum(axis=1)
    top = np.concatenate(p_all).max(axis=1)
    passed = all(r["passed"] for r in out_rows.values()) and not any(
        c["passed"] for c in controls.values())
    return {"engine": "mlx-lm", "version": check_version(), "mlx_version": md.version("mlx"),
            "mlx_cpu_version": md.version("mlx-cpu"), "seed": seed,
            "interface": "mlx_lm.stream_generate(model, tokenizer, prompt, draft_model=..., "
                         "num_draft_tokens=..., sampler=make_sampler(temp, top_p))",
            "models": {**config.__dict__,
                       "target_draft_tv_median": float(np.median(tv_pq)),
                       "target_draft_tv_mean": float(tv_pq.mean()),
                       "target_top_probability_median": float(np.median(top))},
            "requests": requests, "max_tokens": max_tokens, "prompt_len": prompt_len,
            "false_alarm": false_alarm,
            "rule": [{"step": s, "rule": r, "where": w} for s, r, w in RULE],
            "rule_line": RULE_LINE, "rows": out_rows, "controls": controls, "passed": passed,
            "seconds": round(time.perf_counter() - t_all, 1)}


def main(argv=None) -> int:
    """``python -m specdec.conformance.adapters.mlxlm [--seed N] [...]``: print the JSON
    summary; exit 0 when every row passed and every control failed, 1 otherwise, 2 when
    mlx-lm is missing."""
    ap = argparse.ArgumentParser(prog="python -m specdec.conformance.adapters.mlxlm",
                                 description="Test mlx-lm's speculative decoding for exactness, "
                                             "every emitted token, on two tiny models.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=8)
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--control-requests", type=int, default=60)
    args = ap.parse_args(argv)
    if args.seed < 0:
        ap.error("--seed: must be >= 0")
    for flag, v, lo in (("--requests", args.requests, 1), ("--max-tokens", args.max_tokens, 1),
                        ("--prompt-len", args.prompt_len, 1),
                        ("--control-requests", args.control_requests, 0)):
        if v < lo:
            ap.error(f"{flag}: must be >= {lo}")
    rows = [r for r in args.rows.split(",") if r]
    bad = [r for r in rows if r not in ROWS]
    if bad or not rows:
        ap.error(f"--rows: must be a comma-separated subset of {','.join(ROWS)} (got "
                 f"{args.rows!r})")
    try:
        check_version()
    except ImportError as exc:
        print(exc, file=sys.stderr)
        return 2
    summary = run_all(seed=args.seed, requests=args.requests, max_tokens=args.max_tokens,
                      prompt_len=args.prompt_len, rows=rows,
                      control_requests=args.control_requests)
    json.dump(summary, sys.stdout, indent=1)
    print()
    return 0 if summary["passed"] else 1


#: What each control of the run is, in a few words (the rows' control column).
CONTROL_LABELS = {"temperature_mismatch": "temperature-0.7 tokens against the law at 1",
                  "draft_law": "the draft model's own decoding against the target's law"}


def matrix_rows(summary: Mapping, *, rule: str) -> list[MatrixRow]:
    """Rows of :mod:`specdec.conformance.adapters.mlxlm`'s summary, one per setting.

    Every row carries the run's controls (each must fail): a pass, with or without the
    draft, is shown to mean something by them; the row without a draft is the reference.

    Raises
    ------
    KeyError
        If ``summary`` lacks ``rows`` or a row lacks one of its fields (not that adapter's
        summary).
    """
    control = pertoken_control_text(summary.get("controls", {}), CONTROL_LABELS)
    rows = []
    for r in summary["rows"].values():
        spec = r["setting"]["num_draft_tokens"] > 0
        dis = r.get("disagreement", {})
        note = (f"{r['tokens_per_second']:g} tokens/s"
                + (f", {100 * r['from_draft_fraction']:.0f}% of tokens from accepted drafts"
                   if spec and r.get("from_draft_fraction") is not None else "")
                + (f"; numerical disagreement (per-token TV) up to {sci(dis['max_tv'])}, "
                   f"the tolerance" if "max_tv" in dis else ""))
        rows.append(MatrixRow(
            implementation="mlx-lm", version=f"{summary['version']} (mlx-cpu "
            f"{summary.get('mlx_cpu_version', '?')})",
            interface=("stream_generate(draft_model=...), end to end; every emitted token "
                       "tested") if spec else
                      "stream_generate (no draft), end to end; every emitted token tested",
            setting=r["label"], rule=rule if spec else "plain sampling",
            verdict="PASS" if check_passed(r, r.get("label", "row")) else "FAIL",
            detectable_tv=r["detectable_tv"],
            trials=r["tokens"], seconds=r["seconds"], control=control,
            note=note))
    return rows


#: This engine in Appendix C's first table.
SCOPE = Scope("mlx-lm", ("mlx-lm",),
              "`mlx-lm` with mlx's Linux CPU build; `stream_generate` with a draft model",
              "sampled draft; kept while the target's own sample equals it",
              "Apple silicon; temperatures other than 1", "-", position=90)

#: The adapter's declaration (:mod:`specdec.conformance.adapters`).
ADAPTER = Adapter("mlx", ENVIRONMENT, SCOPE, matrix_rows, example={
    "summary": {"version": PINNED, "rows": {"spec": {
    "label": "spec", "passed": True, "setting": {"num_draft_tokens": 3},
    "tokens_per_second": 10.0, "detectable_tv": 0.03, "tokens": 10, "seconds": 1.0}}},
    "facts": {"rule": "r"}})


if __name__ == "__main__":
    sys.exit(main())
