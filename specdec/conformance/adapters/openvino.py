"""OpenVINO GenAI's speculative decoding (openvino-genai 2026.4.1.0), end to end, per token.

The adapter drives ``openvino_genai.LLMPipeline(target, "CPU", draft_model=draft_model(draft,
"CPU"))`` the way a user does, on two tiny llama-architecture models it builds itself, and
tests every emitted token with the kit's per-token check (:func:`specdec.stats.pertoken.laws_check`)
against the target's law computed from the same weights in float64.

The models (:func:`build_models`)
---------------------------------
:func:`make_weights` draws a pre-norm llama decoder (RMSNorm, rotary attention, SwiGLU MLP,
untied head; :class:`TinyConfig`) from a seed, rounded to float32; the draft is the target
plus Gaussian noise of another seed, so the two laws differ (mean TV about 0.4 per position
at temperature 1). :func:`_module` is that decoder in torch with an explicit KV cache
(``input_ids``, ``attention_mask``, ``position_ids``, ``beam_idx``, past keys and values);
``openvino.convert_model`` traces it, the past inputs become states
(``apply_make_stateful_transformation``), each state gets a zero initialiser of the request's
batch (the CPU plugin refuses a ``ReadValue`` without one), and the IR is written with float32
weights. The continuous-batching backend the speculative pipeline uses rewrites this graph
into paged attention by itself (``SDPAToPagedAttention``; checked by
:func:`check_paged_attention`). The tokenizer (byte-level BPE, 256 byte tokens, no merges,
built with the ``tokenizers`` library and converted by ``openvino_tokenizers``) is needed only
because the speculative pipeline refuses to start without ``openvino_tokenizer.xml``; prompts
go in and tokens come out as ids (``ov.Tensor`` input, ``EncodedResults``). Nothing is
downloaded.

The pipeline's settings
-----------------------
On this CPU (AVX-512 BF16) OpenVINO's defaults are ``INFERENCE_PRECISION_HINT=bf16`` and
``KV_CACHE_PRECISION=u8`` (``openvino.Core().get_property("CPU", ...)``); the adapter sets
both to f32 for the target and the draft (:data:`PROPERTIES`), and measures what is left of
the disagreement (:func:`engine_disagreement`: the same IR compiled by ``openvino.Core``
against the float64 laws) as the check's ``tolerance``.

The pipeline is given an explicit ``SchedulerConfig`` with prefix caching off. With the
scheduler the pipeline chooses when none is given (prefix caching on), sampled speculative
decoding raises ``Check 'content_length <= prompt_ids.size() + m_generated_ids.size()'
failed at src/cpp/src/sequence_group.cpp:32`` in most requests of 20 tokens, and after the
first such error the pipeline proposes no draft token any more (it silently decodes with the
target alone); ``SchedulerConfig(enable_prefix_caching=True)`` reproduces it, greedy decoding
does not (:func:`prefix_caching_probe`, the ``ABORTS`` row of the matrix).

What was found (reports/openvino-genai-speculative-sampling.md): without the draft the
pipeline passes (its tokens follow the target's law within the check's resolution); with the
draft every sampled setting fails, also when the draft is the target itself
(``--draft-noise 0``); with the draft the same ``rng_seed`` does not always repeat a
response.

The rule (:data:`RULE`) was read from the openvino.genai sources at commit
``da1db864d2bc1a265e9a036f5b57ef13f0e86c2c`` (``master``, ``VERSION 2026.4.0.0``; the
snapshot has no 2026.4 tag or release branch, and the verification code is identical at
``releases/2026/3`` and tag ``2026.3.0.0``), file:line references at that commit, next to
what was observed. In short: at temperature > 0 the target draws its own token y, accepts the
draft token x iff ``r <= q(x) / p(y)`` with r on a 101-point grid, and after a rejection
emits a draw from the *next* position's law in x's place (no residual); a miscount of the
removed tokens after a rejected last draft leaves the processed-token count one ahead, which
is the prefix-caching crash (reports/openvino-genai-prefix-caching-abort.md, a comment on
openvino.genai#4190, which reports it).

Requires the engine environment of ``tools/py_engines.py`` (``openvino``); run
``python -m specdec.conformance.adapters.openvino`` with its interpreter for a JSON summary.

References
----------
.. [1] Leviathan, Kalman, Matias (2023), Fast inference from transformers via speculative
   decoding, ICML, Algorithm 1 (the rule a sampled speculative decoder should run).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence, Mapping

import numpy as np

from specdec.conformance.adapters import Adapter, Environment, TRANSFORMERS_STACK
from specdec.conformance.matrix import MatrixRow, Scope, check_passed

__all__ = ["ADAPTER", "ENVIRONMENT", "matrix_rows",
           "PINNED", "RULE", "PROPERTIES", "TinyConfig", "Setting", "SETTINGS", "version",
           "check_version", "make_weights", "build_models", "target_laws", "read_tokens",
           "engine_disagreement", "check_paged_attention", "decode", "prefix_caching_probe",
           "run_all", "main"]

#: The openvino-genai release the adapter was written against (openvino, openvino-tokenizers
#: at the same release).
PINNED = "2026.4.1.0"

#: The pinned environment this adapter runs in (built by tools/py_engines.py, which
#: reads this expression from the source: literals, this module's constants and the
#: package's pins only).
ENVIRONMENT = Environment(
    "openvino", PINNED,
    (*TRANSFORMERS_STACK, "openvino-genai==2026.4.1.0", "openvino==2026.4.1",
     "openvino-tokenizers==2026.4.1.0", "openvino-telemetry==2025.2.0"),
    "import importlib.metadata as m, openvino_genai; print(m.version('openvino-genai'))",
    pip_args=("--no-deps",),
    notes="OpenVINO GenAI's LLMPipeline with draft_model (the speculative sampling is C++ "
          "inside the wheel). openvino, openvino-tokenizers and openvino-telemetry are "
          "its whole dependency closure (pip install --dry-run --report: openvino needs "
          "numpy, packaging and openvino-telemetry; openvino-genai requires "
          "openvino_tokenizers~=2026.4.1.0.dev). The tiny models are built in torch + "
          "transformers (TRANSFORMERS_STACK) and written as IR by openvino.convert_model; "
          "the tokenizer IR by openvino_tokenizers.convert_tokenizer from a tokenizer "
          "built locally with the tokenizers library. No optimum-intel. --no-deps keeps "
          "the stack's pins.")

#: What the pipeline does: read from the openvino.genai sources (commit da1db864d2bc, see the
#: module docstring; paths under src/cpp/src/) and what was observed.
RULE = (
    ("interface", "LLMPipeline(target, 'CPU', draft_model=draft_model(draft, 'CPU')) runs "
     "ContinuousBatchingPipeline::SpeculativeDecodingImpl::step(): the draft pipeline drafts, "
     "update_request copies the draft tokens and the log-probability of each sampled token "
     "(not the draft's distribution) into the main pipeline, which verifies them in "
     "validation mode", "speculative_decoding/continuous_batching/fast_draft_strategy.cpp:"
     "197-265, pipeline_impl.cpp:236-250, 372-376"),
    ("draft", "num_assistant_tokens draft tokens per cycle, sampled by the draft model with a "
     "copy of the request's GenerationConfig (same temperature, top-k, rng_seed)",
     "fast_draft_strategy.cpp:154-159; observed: extended_perf_metrics.get_num_draft_tokens()"),
    ("verification", "per drafted position the target samples its own token y ~ p; the draft "
     "token x is accepted iff r <= q(x) / p(y) (variables p_i = draft's q(x), q_i = target's "
     "p(y); ratio inverted and taken at the target's own sample, not at x), r = "
     "uniform_int_distribution(0, 100) / 100; in a request's first cycle: accept iff y == x. "
     "Leviathan et al. accept with min(1, p(x)/q(x)). Observed: with the draft identical to "
     "the target about 40-55% of drafts rejected (an exact rule rejects none)",
     "sampling/sampler.cpp:1402-1417 (validate_candidate), 1530-1542; per-token check, "
     "--draft-noise 0"),
    ("rejection", "no residual (p - q)+: the loop continues to the NEXT position's logits, "
     "draws z from p(. | prefix, x) and puts z in x's place; get_p_prime only rescales z's "
     "recorded log-prob. Observed: tokens less probable under the target than its own draws "
     "(mean PIT along the target's order 0.60-0.70), nearer the draft's law",
     "sampling/sampler.cpp:1421-1424, 1436-1459, 1512, 1551-1561, 1574-1578, 1585"),
    ("bookkeeping", "after a rejection the sampled path records one removed token fewer than "
     "it removed, so when a cycle's last draft is rejected the processed-token count is not "
     "rewound: the replacement is never fed to the target and the next cycle schedules one "
     "token more than the sequence holds (with prefix caching off the model runner reads one "
     "element past generated_ids and that cycle's verification is one position off)",
     "sampling/sampler.cpp:1553-1554, 1799-1801; sequence_group.hpp:782-788; "
     "continuous_batching/model_runner.hpp:724-729"),
    ("seed", "GenerationConfig.rng_seed seeds one std::mt19937 per request in the target's and "
     "in the draft's sampler (the same seed in both). Observed: without the draft the same "
     "seed repeated the response in every check; with the draft it did in some runs and not "
     "in others (seed 0: two calls, two responses; four calls of one seed, four responses), "
     "not explained by seeding", "sampling/sampler.hpp:136-137, sampler.cpp:1737, 1827; "
     "observed (seed_check)"),
    ("prefix caching", "with prefix caching on (the scheduler LLMPipeline chooses by default), "
     "the block manager hashes get_context_len() tokens, one more than the sequence holds "
     "after the bookkeeping miscount, and Sequence::_make_hash's check content_length <= "
     "prompt + generated fails; observed: sampled requests raise there, greedy ones do not, "
     "and the pipeline drafts no more afterwards (not traced)",
     "sequence_group.cpp:32, continuous_batching/cache/block_manager.hpp:1446-1448, "
     "1468-1470; observed (prefix_caching_probe)"),
)

#: Properties of both models: float32 compute and KV cache (the CPU defaults are bf16 and u8
#: here), one stream, one thread (the machine is shared).
PROPERTIES = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32",
              "NUM_STREAMS": 1, "INFERENCE_NUM_THREADS": 1}


@dataclasses.dataclass(frozen=True)
class TinyConfig:
    """Shape and seeds of the two tiny llama decoders.

    Attributes
    ----------
    vocab : int
        Vocabulary (256: one token per byte, the tokenizer's).
    hidden, layers, heads, intermediate : int
        Width, decoder layers, attention heads (``hidden % heads == 0``, head size even),
        MLP width.
    target_seed, draft_seed : int
        Seeds of the target's weights and of the draft's noise.
    draft_noise : float
        The draft's weights are the target's plus ``draft_noise * std(W) * N(0, 1)`` per tensor.
    head_scale : float
        Standard deviation of the output head times sqrt(hidden): larger is more peaked.
    """

    vocab: int = 256
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    intermediate: int = 128
    target_seed: int = 1
    draft_seed: int = 2
    draft_noise: float = 0.2
    head_scale: float = 3.0

    def __post_init__(self):
        for name in ("vocab", "hidden", "layers", "heads", "intermediate"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: must be a positive integer (got {v!r})")
        if self.vocab != 256:
            raise ValueError(f"vocab: must be 256, the byte-level tokenizer's (got {self.vocab})")
        if self.hidden % self.heads or (self.hidden // self.heads) % 2:
            raise ValueError(f"hidden, heads: hidden / heads must be an even integer (got "
                             f"{self.hidden} / {self.heads})")
        if not (self.draft_noise >= 0 and self.head_scale > 0):
            raise ValueError(f"draft_noise, head_scale: must be >= 0 and > 0 (got "
                             f"{self.draft_noise!r}, {self.head_scale!r})")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def key(self) -> str:
        """12 hex digits naming the built models (config and the adapter's release)."""
        blob = json.dumps({**dataclasses.asdict(self), "pinned": PINNED, "format": 1},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


@dataclasses.dataclass(frozen=True)
class Setting:
    """One decoding configuration of the pipeline and the law it is tested against.

    Attributes
    ----------
    name : str
    temperature : float
        The pipeline's temperature (> 0, sampling).
    top_k : int
        The pipeline's top-k (0: none).
    gamma : int or None
        ``num_assistant_tokens``; None runs the pipeline without the draft (the reference).
    law_temperature, law_top_k : float or None, int or None
        The law the tokens are tested against (default: the pipeline's own); a control sets
        another, and must fail.
    """

    name: str
    temperature: float = 1.0
    top_k: int = 0
    gamma: int | None = 3
    law_temperature: float | None = None
    law_top_k: int | None = None

    def __post_init__(self):
        if not self.temperature > 0:
            raise ValueError(f"temperature: must be > 0 (got {self.temperature!r})")
        if self.gamma is not None and (isinstance(self.gamma, bool) or self.gamma < 1):
            raise ValueError(f"gamma: must be >= 1 or None (got {self.gamma!r})")
        if self.top_k < 0:
            raise ValueError(f"top_k: must be >= 0 (got {self.top_k!r})")

    @property
    def control(self) -> bool:
        """Whether the law differs from what the pipeline samples (a check that must fail)."""
        return ((self.law_temperature is not None and self.law_temperature != self.temperature)
                or (self.law_top_k is not None and self.law_top_k != self.top_k))

    def law(self) -> tuple[float, int]:
        """``(temperature, top_k)`` of the law the tokens are tested against."""
        return (self.temperature if self.law_temperature is None else self.law_temperature,
                self.top_k if self.law_top_k is None else self.law_top_k)


#: The settings run by default: the reference (no draft), the speculative pipeline at
#: temperature 1 with 2 and 4 draft tokens, at temperature 0.7 and with top-k 20, and the
#: control (the pipeline at temperature 0.7, the law at 1).
SETTINGS = (
    Setting("reference", gamma=None),
    Setting("t1_g2", gamma=2),
    Setting("t1_g4", gamma=4),
    Setting("t07_g3", temperature=0.7, gamma=3),
    Setting("topk20_g3", top_k=20, gamma=3),
    # the control runs the reference path (no draft), the one that passes: a pass is only
    # shown to mean something by a failing control of the same path
    Setting("control_t07_law_t1", temperature=0.7, gamma=None, law_temperature=1.0),
)


def version() -> str:
    """The installed openvino-genai version.

    Raises
    ------
    ImportError
        If openvino-genai is not installed in this interpreter.
    """
    import importlib.metadata as md

    try:
        return md.version("openvino-genai")
    except md.PackageNotFoundError:
        raise ImportError(f"openvino: openvino-genai is not installed in this interpreter "
                          f"({sys.executable}); run `python tools/py_engines.py openvino` and use "
                          f"the interpreter it prints") from None


def check_version(expected: str = PINNED) -> str:
    """The installed openvino-genai version, checked against ``expected``.

    Raises
    ------
    ImportError
        If openvino-genai is not installed.
    RuntimeError
        If the installed version is not ``expected``.
    """
    found = version()
    if found != expected:
        raise RuntimeError(f"openvino: the adapter was written against openvino-genai "
                           f"{expected} (its observed rule and settings), but {found} is installed")
    return found


def make_weights(cfg: TinyConfig) -> tuple[dict, dict]:
    """The target's and the draft's weights, float32 numpy arrays by name.

    Returns
    -------
    (dict, dict)
        Names ``embed`` (vocab, hidden), ``{l}.q|k|v|o`` (hidden, hidden), ``{l}.gate|up``
        (intermediate, hidden), ``{l}.down`` (hidden, intermediate), ``{l}.ln1|ln2`` and
        ``norm`` (hidden,), ``head`` (vocab, hidden); each matrix multiplies as ``x @ W.T``.
        Deterministic in ``cfg``.
    """
    rng = np.random.default_rng(cfg.target_seed)
    D, I = cfg.hidden, cfg.intermediate
    w = {"embed": rng.normal(0, 1, (cfg.vocab, D))}
    for l in range(cfg.layers):
        for n in ("q", "k", "v", "o"):
            w[f"{l}.{n}"] = rng.normal(0, D ** -0.5, (D, D))
        w[f"{l}.gate"] = rng.normal(0, D ** -0.5, (I, D))
        w[f"{l}.up"] = rng.normal(0, D ** -0.5, (I, D))
        w[f"{l}.down"] = rng.normal(0, I ** -0.5, (D, I))
        w[f"{l}.ln1"] = 1 + 0.1 * rng.normal(size=D)
        w[f"{l}.ln2"] = 1 + 0.1 * rng.normal(size=D)
    w["norm"] = 1 + 0.1 * rng.normal(size=D)
    w["head"] = rng.normal(0, cfg.head_scale * D ** -0.5, (cfg.vocab, D))
    noise = np.random.default_rng(cfg.draft_seed)
    target = {k: v.astype(np.float32) for k, v in w.items()}
    draft = {k: (v + cfg.draft_noise * v.std() * noise.normal(size=v.shape)).astype(np.float32)
             for k, v in w.items()}
    return target, draft


def _module(torch, weights: dict, cfg: TinyConfig, dtype):
    """The tiny llama decoder as a torch module with an explicit KV cache.

    ``forward(input_ids (B, S), attention_mask (B, P + S), position_ids (B, S), beam_idx (B,),
    past: list of 2 * layers tensors (B, heads, P, head_dim))`` returns ``(logits (B, S, V),
    *present)``, present keys and values (B, heads, P + S, head_dim). Attention is
    ``scaled_dot_product_attention`` with an additive causal and padding mask (the pattern
    OpenVINO's paged-attention rewrite recognises).
    """
    F = torch.nn.functional
    H, HD, L, D = cfg.heads, cfg.head_dim, cfg.layers, cfg.hidden

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.ParameterDict({
                k.replace(".", "_"): torch.nn.Parameter(torch.tensor(v, dtype=dtype),
                                                        requires_grad=False)
                for k, v in weights.items()})
            inv = 1.0 / (10000.0 ** (np.arange(0, HD, 2) / HD))
            self.register_buffer("inv_freq", torch.tensor(inv, dtype=dtype))

        @staticmethod
        def _rms(x, g):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g

        @staticmethod
        def _rope(x, cos, sin):
            rot = torch.cat((-x[..., HD // 2:], x[..., :HD // 2]), dim=-1)
            return x * cos + rot * sin

        def forward(self, input_ids, attention_mask, position_ids, beam_idx, past):
            w = self.w
            B, S = input_ids.shape
            x = w["embed"][input_ids]
            fr = position_ids[..., None].to(x.dtype) * self.inv_freq
            emb = torch.cat((fr, fr), dim=-1)
            cos, sin = emb.cos()[:, None], emb.sin()[:, None]
            P = past[0].shape[2]
            qpos = torch.arange(S)[:, None] + P
            kpos = torch.arange(P + S)[None, :]
            keep = (kpos <= qpos)[None, None] & attention_mask[:, None, None, :].bool()
            mask = torch.zeros(keep.shape, dtype=x.dtype).masked_fill(~keep,
                                                                     torch.finfo(x.dtype).min)
            present = []
            for l in range(L):
                h = self._rms(x, w[f"{l}_ln1"])
                q, k, v = ((h @ w[f"{l}_{n}"].T).view(B, S, H, HD).transpose(1, 2)
                           for n in ("q", "k", "v"))
                q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
                k = torch.cat((past[2 * l].index_select(0, beam_idx), k), dim=2)
                v = torch.cat((past[2 * l + 1].index_select(0, beam_idx), v), dim=2)
                present += [k, v]
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                x = x + a.transpose(1, 2).reshape(B, S, D) @ w[f"{l}_o"].T
                h = self._rms(x, w[f"{l}_ln2"])
                x = x + (F.silu(h @ w[f"{l}_gate"].T) * (h @ w[f"{l}_up"].T)) @ w[f"{l}_down"].T
            return (self._rms(x, w["norm"]) @ w["head"].T, *present)

    return Tiny().eval()


_INPUTS = ("input_ids", "attention_mask", "position_ids", "beam_idx")


def _export(weights: dict, cfg: TinyConfig, out: Path) -> None:
    """Write one decoder as a stateful OpenVINO IR ``out/openvino_model.xml`` (float32)."""
    import openvino as ov
    import openvino.opset13 as ops
    import torch
    from openvino._offline_transformations import apply_make_stateful_transformation

    H, HD, L = cfg.heads, cfg.head_dim, cfg.layers
    model = _module(torch, weights, cfg, torch.float32)
    B, S, P = 2, 3, 2
    example = dict(input_ids=torch.ones(B, S, dtype=torch.long),
                   attention_mask=torch.ones(B, P + S, dtype=torch.long),
                   position_ids=torch.arange(P, P + S)[None].repeat(B, 1),
                   beam_idx=torch.arange(B, dtype=torch.int32),
                   past=[torch.zeros(B, H, P, HD) for _ in range(2 * L)])
    with torch.no_grad():
        ovm = ov.convert_model(model, example_input=example)
    past = [f"past_key_values.{l}.{kv}" for l in range(L) for kv in ("key", "value")]
    present = [f"present.{l}.{kv}" for l in range(L) for kv in ("key", "value")]
    if len(ovm.inputs) != len(_INPUTS) + len(past) or len(ovm.outputs) != 1 + len(present):
        raise RuntimeError(f"openvino: convert_model gave {len(ovm.inputs)} inputs and "
                           f"{len(ovm.outputs)} outputs (expected {len(_INPUTS) + len(past)} "
                           f"and {1 + len(present)})")
    for port, name in zip(ovm.inputs, (*_INPUTS, *past)):
        port.get_tensor().set_names({name})
    for port, name in zip(ovm.outputs, ("logits", *present)):
        port.get_tensor().set_names({name})
    shapes = {ovm.input(n): ov.PartialShape([-1, -1]) for n in _INPUTS[:3]}
    shapes[ovm.input("beam_idx")] = ov.PartialShape([-1])
    shapes.update({ovm.input(n): ov.PartialShape([-1, H, -1, HD]) for n in past})
    ovm.reshape(shapes)
    apply_make_stateful_transformation(ovm, dict(zip(past, present)))
    # every state starts as zeros of shape (batch of input_ids, heads, 0, head_dim)
    batch = ops.gather(ops.shape_of(ovm.input("input_ids"), output_type="i64"),
                       ops.constant(np.array([0], dtype=np.int64)), ops.constant(0))
    shape = ops.concat([batch, ops.constant(np.array([H, 0, HD], dtype=np.int64))], axis=0)
    for op in ovm.get_ops():
        if op.get_type_name() == "ReadValue":
            op.set_arguments([ops.broadcast(ops.constant(np.float32(0)), shape)])
    ovm.validate_nodes_and_infer_types()
    out.mkdir(parents=True, exist_ok=True)
    ov.save_model(ovm, out / "openvino_model.xml", compress_to_fp16=False)
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
              "vocab_size": cfg.vocab, "hidden_size": cfg.hidden,
              "num_attention_heads": H, "num_key_value_heads": H, "num_hidden_layers": L,
              "intermediate_size": cfg.intermediate, "max_position_embeddings": 4096,
              "bos_token_id": 1, "eos_token_id": 2}
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 1, "eos_token_id": 2}) + "\n")


def _export_tokenizer(dirs: Sequence[Path]) -> None:
    """Byte-level BPE with the 256 byte tokens and no merges, as OpenVINO tokenizer IR."""
    import openvino as ov
    from openvino_tokenizers import convert_tokenizer
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=alphabet[1],
                                 eos_token=alphabet[2])
    encoder, decoder = convert_tokenizer(hf, with_detokenizer=True)
    for d in dirs:
        ov.save_model(encoder, Path(d) / "openvino_tokenizer.xml")
        ov.save_model(decoder, Path(d) / "openvino_detokenizer.xml")


def models_dir() -> Path:
    """Folder of the built models (``SPECDEC_ENGINE_ENVS`` or $SPECDEC_CACHE/engines, ~/.cache/specdec-book by default)."""
    from specdec.conformance.adapters import cache_root

    default = cache_root() / "engines"
    return Path(os.environ.get("SPECDEC_ENGINE_ENVS", default)) / "openvino-models"


def build_models(cfg: TinyConfig = TinyConfig(), root: Path | None = None) -> Path:
    """Build (or reuse) the target and draft IR with their tokenizer under ``root/<cfg.key>``.

    Returns
    -------
    pathlib.Path
        Folder holding ``target/`` and ``draft/`` (each ``openvino_model.xml``,
        ``openvino_tokenizer.xml``, ``openvino_detokenizer.xml``, ``config.json``,
        ``generation_config.json``); reused when its marker ``built.json`` exists.
    """
    folder = Path(root or models_dir()) / cfg.key
    if (folder / "built.json").exists():
        return folder
    target, draft = make_weights(cfg)
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    _export(target, cfg, tmp / "target")
    _export(draft, cfg, tmp / "draft")
    _export_tokenizer([tmp / "target", tmp / "draft"])
    (tmp / "built.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=1) + "\n")
    folder.parent.mkdir(parents=True, exist_ok=True)
    if folder.exists():                     # a concurrent build finished first
        import shutil

        shutil.rmtree(tmp)
    else:
        tmp.rename(folder)
    return folder


def _filtered_softmax(logits: np.ndarray, temperature: float, top_k: int) -> np.ndarray:
    """Softmax of ``logits / temperature`` over the last axis, restricted to the ``top_k``
    largest logits (0: all) and renormalised. Shape kept."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    if top_k and top_k < z.shape[-1]:
        kth = np.partition(z, -top_k, axis=-1)[..., -top_k][..., None]
        z = np.where(z >= kth, z, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=-1, keepdims=True)


def target_laws(weights: dict, cfg: TinyConfig, prompt, tokens, *, temperature: float = 1.0,
                top_k: int = 0) -> np.ndarray:
    """The model's law of every emitted token given the prompt and the tokens before it.

    One float64 forward pass of :func:`_module` (the float32 weights the IR holds) over
    ``prompt + tokens``.

    Parameters
    ----------
    weights : dict
        One model of :func:`make_weights`.
    prompt, tokens : sequence of int, shapes (m,), (n,)
        ``m >= 1``.
    temperature : float
    top_k : int
        0: no truncation.

    Returns
    -------
    numpy.ndarray, shape (n, vocab), float64
        Row ``i``: the law of ``tokens[i]``.

    Raises
    ------
    ValueError
        An empty prompt, a token outside the vocabulary, temperature <= 0.
    """
    import torch

    prompt = np.asarray(prompt, dtype=np.int64).ravel()
    tokens = np.asarray(tokens, dtype=np.int64).ravel()
    if prompt.size < 1:
        raise ValueError("prompt: needs at least one token")
    ids = np.concatenate([prompt, tokens])
    if ids.min() < 0 or ids.max() >= cfg.vocab:
        raise ValueError(f"prompt, tokens: every token must lie in [0, {cfg.vocab})")
    if not temperature > 0:
        raise ValueError(f"temperature: must be > 0 (got {temperature!r})")
    if not tokens.size:
        return np.zeros((0, cfg.vocab))
    model = _module(torch, weights, cfg, torch.float64)
    T = ids.size
    with torch.no_grad():
        logits = model(torch.tensor(ids[None]), torch.ones(1, T, dtype=torch.long),
                       torch.arange(T)[None], torch.zeros(1, dtype=torch.int32),
                       [torch.zeros(1, cfg.heads, 0, cfg.head_dim, dtype=torch.float64)
                        for _ in range(2 * cfg.layers)])[0][0].numpy()
    return _filtered_softmax(logits[prompt.size - 1:T - 1], temperature, top_k)


def read_tokens(result, *, max_new_tokens: int, vocab: int) -> np.ndarray:
    """The one response of an ``EncodedResults`` as an int64 array, checked.

    Raises
    ------
    ValueError
        Not exactly one response, more than ``max_new_tokens`` tokens, or a token outside
        ``[0, vocab)`` (all prefixed ``output:``).
    """
    toks = getattr(result, "tokens", None)
    if toks is None or len(toks) != 1:
        raise ValueError(f"output: expected one response (got "
                         f"{'no tokens' if toks is None else len(toks)})")
    t = np.asarray(list(toks[0]), dtype=np.int64)
    if t.size > max_new_tokens:
        raise ValueError(f"output: {t.size} tokens, more than max_new_tokens ({max_new_tokens})")
    if t.size and (t.min() < 0 or t.max() >= vocab):
        raise ValueError(f"output: a token outside 0..{vocab - 1}")
    return t


def _pipeline(folder: Path, *, draft: bool, prefix_caching: bool | None = False):
    """The LLMPipeline on ``folder/target`` (with ``folder/draft`` when ``draft``); an explicit
    SchedulerConfig with ``enable_prefix_caching=prefix_caching``, or the pipeline's own when
    None."""
    import openvino_genai as ovg

    kw = dict(PROPERTIES)
    if prefix_caching is not None:
        sched = ovg.SchedulerConfig()
        sched.enable_prefix_caching = bool(prefix_caching)
        kw["scheduler_config"] = sched
    if draft:
        kw["draft_model"] = ovg.draft_model(str(folder / "draft"), "CPU", **PROPERTIES)
    return ovg.LLMPipeline(str(folder / "target"), "CPU", **kw)


def _config(setting: Setting, seed: int, n: int, logprobs: int = 0):
    import openvino_genai as ovg

    c = ovg.GenerationConfig()
    c.do_sample = True
    c.temperature = float(setting.temperature)
    c.top_k = int(setting.top_k)
    c.top_p = 1.0
    c.max_new_tokens = int(n)
    c.ignore_eos = True
    c.rng_seed = int(seed)
    c.logprobs = int(logprobs)
    if setting.gamma is not None:
        c.num_assistant_tokens = int(setting.gamma)
    return c


def decode(pipe, prompts, seeds, setting: Setting, n: int, vocab: int) -> dict:
    """Decode one response per prompt, seeded.

    Returns
    -------
    dict
        ``tokens`` (list of int64 arrays), ``seconds``, ``drafted`` and ``accepted`` (sums of
        the pipeline's speculative metrics; 0 without the draft), ``undrafted`` (responses of
        the speculative pipeline that proposed no draft token).
    """
    import openvino as ov

    out, drafted, accepted, undrafted = [], 0, 0, 0
    t0 = time.perf_counter()
    for prompt, seed in zip(prompts, seeds):
        res = pipe.generate(ov.Tensor(np.asarray(prompt, dtype=np.int64)[None]),
                            _config(setting, seed, n))
        out.append(read_tokens(res, max_new_tokens=n, vocab=vocab))
        if setting.gamma is not None:
            em = res.extended_perf_metrics
            d = int(em.get_num_draft_tokens())
            drafted += d
            accepted += int(em.get_num_accepted_tokens())
            undrafted += d == 0
    return {"tokens": out, "seconds": time.perf_counter() - t0, "drafted": drafted,
            "accepted": accepted, "undrafted": undrafted}


def engine_disagreement(folder: Path, weights: dict, cfg: TinyConfig, prompts, tokens, *,
                        temperature: float = 1.0) -> dict:
    """Largest per-position TV between the float64 laws and the IR run by ``openvino.Core``.

    The target's IR compiled for CPU with :data:`PROPERTIES` runs each ``prompt + tokens``
    in one call (fresh state); its softmax at ``temperature`` is compared with
    :func:`target_laws` at the response's positions.

    Returns
    -------
    dict
        ``max_tv``, ``mean_tv``, ``positions``, ``max_logit_diff``.
    """
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(str(folder / "target" / "openvino_model.xml"), "CPU",
                                  {k: v for k, v in PROPERTIES.items() if k != "KV_CACHE_PRECISION"})
    req = compiled.create_infer_request()
    tvs, diffs = [], []
    for prompt, toks in zip(prompts, tokens):
        ids = np.concatenate([np.asarray(prompt, np.int64), np.asarray(toks, np.int64)])
        T, m = ids.size, len(prompt)
        req.reset_state()
        res = req.infer({"input_ids": ids[None], "attention_mask": np.ones((1, T), np.int64),
                         "position_ids": np.arange(T, dtype=np.int64)[None],
                         "beam_idx": np.zeros(1, np.int32)})
        ov_logits = np.asarray(res[compiled.output("logits")], dtype=np.float64)[0, m - 1:T - 1]
        p_ov = _filtered_softmax(ov_logits, temperature, 0)
        p = target_laws(weights, cfg, prompt, toks, temperature=temperature)
        tvs.append(0.5 * np.abs(p_ov - p).sum(axis=1))
        lg = np.log(np.maximum(p, 1e-300)) * temperature
        diffs.append(np.abs((ov_logits - ov_logits.mean(1, keepdims=True))
                            - (lg - lg.mean(1, keepdims=True))).max(axis=1))
    tv = np.concatenate(tvs)
    return {"max_tv": float(tv.max()), "mean_tv": float(tv.mean()), "positions": int(tv.size),
            "max_logit_diff": float(np.concatenate(diffs).max())}


def check_paged_attention(folder: Path) -> dict:
    """Whether OpenVINO's paged-attention rewrite (what the continuous-batching pipeline
    applies) replaces every attention of the target's IR: ``{"paged_attention": k,
    "sdpa_left": j}``."""
    import openvino as ov
    from openvino._offline_transformations import paged_attention_transformation

    model = ov.Core().read_model(str(folder / "target" / "openvino_model.xml"))
    paged_attention_transformation(model)
    kinds = [op.get_type_name() for op in model.get_ops()]
    return {"paged_attention": kinds.count("PagedAttentionExtension"),
            "sdpa_left": kinds.count("ScaledDotProductAttention")}


def prefix_caching_probe(folder: Path, prompts, seeds, *, n: int = 20, gamma: int = 3,
                         vocab: int = 256, prefix_caching: bool | None = None) -> dict:
    """Sampled speculative requests with the pipeline's default scheduler (``None``) or
    prefix caching forced on (``True``): how many raise, with the first error, and how many
    later responses proposed no draft token. A new pipeline is built after each error (the
    old one drafts no more)."""
    setting = Setting("probe", gamma=gamma)
    pipe = _pipeline(folder, draft=True, prefix_caching=prefix_caching)
    errors, first, undrafted_after, t0 = 0, None, 0, time.perf_counter()
    # the pipeline after an error, kept to show that it decodes without drafting
    broken = None
    for prompt, seed in zip(prompts, seeds):
        try:
            decode(pipe, [prompt], [seed], setting, n, vocab)
        except RuntimeError as exc:
            errors += 1
            first = first or " ".join(str(exc).split())[:400]
            broken = pipe
            pipe = _pipeline(folder, draft=True, prefix_caching=prefix_caching)
    if broken is not None:
        try:
            r = decode(broken, prompts[:5], seeds[:5], setting, n, vocab)
            undrafted_after = r["undrafted"]
        except RuntimeError:
            undrafted_after = -1
    return {"requests": len(prompts), "errors": errors, "first_error": first,
            "undrafted_of_5_after_error": undrafted_after if broken is not None else None,
            "prefix_caching": "pipeline default" if prefix_caching is None else prefix_caching,
            "seconds": round(time.perf_counter() - t0, 1)}


def _prompts(rng, count: int, vocab: int, lengths=(4, 12)) -> list:
    lo, hi = lengths
    return [rng.integers(0, vocab, size=int(rng.integers(lo, hi + 1))) for _ in range(count)]


def run_all(*, seed: int = 0, requests: int = 200, tokens: int = 200,
            settings: Sequence[Setting] = SETTINGS, cfg: TinyConfig = TinyConfig(),
            tolerance: float | None = None, probe_requests: int = 20,
            false_alarm: float = 1e-6) -> dict:
    """Every setting's per-token check, the measured tolerance and the prefix-caching probe.

    Parameters
    ----------
    seed : int
        Seeds the prompts, the per-request ``rng_seed`` values and the check's uniforms.
    requests, tokens : int
        Responses per setting and new tokens per response.
    settings : sequence of Setting
    cfg : TinyConfig
    tolerance : float, optional
        Per-token TV the null allows; default: :func:`engine_disagreement` measured on 10
        reference responses, times 2.
    probe_requests : int
        Requests of :func:`prefix_caching_probe` (0: skip it).

    Returns
    -------
    dict
        The JSON summary (``settings`` by name with each ``check``; ``verdict`` PASS when
        every non-control setting passed and every control failed).
    """
    from specdec.stats.pertoken import laws_check

    import torch

    torch.set_num_threads(1)
    check_version()
    t0 = time.perf_counter()
    folder = build_models(cfg)
    target_w, draft_w = make_weights(cfg)
    t_build = time.perf_counter() - t0
    ss = np.random.SeedSequence(seed)
    s_prompts, s_seeds, s_check, s_probe = ss.spawn(4)
    prompts = _prompts(np.random.default_rng(s_prompts), requests, cfg.vocab)
    seeds = [int(x) for x in s_seeds.generate_state(requests)]
    check_rng = np.random.default_rng(s_check)
    pipes = {True: _pipeline(folder, draft=True), False: _pipeline(folder, draft=False)}

    # the seed: the same one repeats a response, another changes it
    seed_check = {}
    for draft in (False, True):
        rep = decode(pipes[draft], [prompts[0]] * 3, [seeds[0], seeds[0], seeds[1]],
                     Setting("seed", gamma=3 if draft else None), 30, cfg.vocab)["tokens"]
        tag = "draft" if draft else "no_draft"
        seed_check[f"{tag}_same_seed_repeats"] = bool(np.array_equal(rep[0], rep[1]))
        seed_check[f"{tag}_other_seed_differs"] = not np.array_equal(rep[0], rep[2])

    t1 = time.perf_counter()
    ref10 = decode(pipes[False], prompts[:10], seeds[:10], Setting("ref", gamma=None), tokens,
                   cfg.vocab)["tokens"]
    measured = engine_disagreement(folder, target_w, cfg, prompts[:10], ref10)
    tol = 2 * measured["max_tv"] if tolerance is None else float(tolerance)
    t_tol = time.perf_counter() - t1

    results = {}
    for s in settings:
        run = decode(pipes[s.gamma is not None], prompts, seeds, s, tokens, cfg.vocab)
        t2 = time.perf_counter()
        temp, top_k = s.law()
        p = [target_laws(target_w, cfg, pr, tk, temperature=temp, top_k=top_k)
             for pr, tk in zip(prompts, run["tokens"])]
        q = [target_laws(draft_w, cfg, pr, tk, temperature=temp, top_k=top_k)
             for pr, tk in zip(prompts, run["tokens"])]
        tv_pq = float(np.mean(np.concatenate([0.5 * np.abs(a - b).sum(1) for a, b in zip(p, q)])))
        chk = laws_check(p, run["tokens"], max_tokens=tokens, rng=check_rng, q_laws=q,
                         false_alarm=false_alarm, tolerance=tol)
        n_tok = int(sum(t.size for t in run["tokens"]))
        results[s.name] = {
            "setting": dataclasses.asdict(s), "control": s.control,
            "passed": bool(chk.passed), "check": chk.to_dict(),
            "tokens": n_tok, "seconds": round(run["seconds"], 1),
            "tokens_per_second": round(n_tok / run["seconds"], 1),
            "law_seconds": round(time.perf_counter() - t2, 1),
            "drafted": run["drafted"], "accepted": run["accepted"],
            "undrafted_responses": run["undrafted"],
            "acceptance": (round(run["accepted"] / run["drafted"], 4) if run["drafted"]
                           else None),
            "target_draft_tv": round(tv_pq, 4)}
    probe = None
    if probe_requests:
        pr = np.random.default_rng(s_probe)
        probe = prefix_caching_probe(folder, _prompts(pr, probe_requests, cfg.vocab),
                                     [int(x) for x in pr.integers(0, 2**31, probe_requests)],
                                     vocab=cfg.vocab)
    ok = all(r["passed"] != r["control"] for r in results.values())
    spec_ok = all(r["undrafted_responses"] == 0 for r in results.values()
                  if r["setting"]["gamma"] is not None)
    import openvino
    import importlib.metadata as md

    return {"engine": "openvino-genai", "version": check_version(),
            "versions": {"openvino": openvino.get_version(),
                         "openvino_tokenizers": md.version("openvino-tokenizers")},
            "seed": seed, "requests": requests, "max_new_tokens": tokens,
            "rule": [{"step": a, "rule": b, "where": c} for a, b, c in RULE],
            "models": {**dataclasses.asdict(cfg), "folder": str(folder),
                       "paged_attention": check_paged_attention(folder)},
            "properties": PROPERTIES, "scheduler": {"enable_prefix_caching": False},
            "tolerance": {"value": tol, "source": ("2 x measured max TV (openvino.Core on the "
                                                   "same IR against float64)"
                                                   if tolerance is None else "given"),
                          **measured},
            "seed_check": seed_check, "settings": results, "prefix_caching": probe,
            "seconds": {"build": round(t_build, 1), "tolerance": round(t_tol, 1),
                        "total": round(time.perf_counter() - t0, 1)},
            "verdict": "PASS" if ok and spec_ok else "FAIL"}


def main(argv=None) -> int:
    """``python -m specdec.conformance.adapters.openvino [--seed N] [...]``: print the JSON
    summary; exit 0 on PASS, 1 on FAIL, 2 when openvino-genai is missing."""
    ap = argparse.ArgumentParser(prog="python -m specdec.conformance.adapters.openvino",
                                 description="Test OpenVINO GenAI's speculative decoding for "
                                             "exactness, every emitted token.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=200, help="max_new_tokens per request")
    ap.add_argument("--settings", default=",".join(s.name for s in SETTINGS),
                    help="comma-separated names of SETTINGS")
    ap.add_argument("--tolerance", type=float, help="per-token TV the null allows (default: "
                    "twice the measured disagreement)")
    ap.add_argument("--probe-requests", type=int, default=20,
                    help="requests of the prefix-caching probe (0: skip)")
    ap.add_argument("--draft-noise", type=float, default=TinyConfig.draft_noise,
                    help="the draft's weights are the target's plus this much noise (0: the "
                         "draft is the target)")
    args = ap.parse_args(argv)
    by_name = {s.name: s for s in SETTINGS}
    if args.seed < 0:
        ap.error("--seed: must be >= 0")
    if args.requests < 1:
        ap.error("--requests: must be >= 1")
    if args.tokens < 1:
        ap.error("--tokens: must be >= 1")
    if args.probe_requests < 0:
        ap.error("--probe-requests: must be >= 0")
    if args.tolerance is not None and not 0 <= args.tolerance <= 1:
        ap.error("--tolerance: must be in [0, 1]")
    if not 0 <= args.draft_noise < float("inf"):
        ap.error("--draft-noise: must be a finite number >= 0")
    names = [n for n in args.settings.split(",") if n]
    unknown = [n for n in names if n not in by_name]
    if unknown or not names:
        ap.error(f"--settings: must be names among {', '.join(by_name)} (got "
                 f"{args.settings!r})")
    try:
        version()
    except ImportError as exc:
        print(exc, file=sys.stderr)
        return 2
    summary = run_all(seed=args.seed, requests=args.requests, tokens=args.tokens,
                      settings=[by_name[n] for n in names], tolerance=args.tolerance,
                      probe_requests=args.probe_requests,
                      cfg=TinyConfig(draft_noise=args.draft_noise))
    json.dump(summary, sys.stdout, indent=1)
    print()
    return 0 if summary["verdict"] == "PASS" else 1


def matrix_rows(summary: Mapping, *, rule: str,
                  report: str = "reports/openvino-genai-speculative-sampling.md",
                  abort_report: str = "reports/openvino-genai-prefix-caching-abort.md"
                  ) -> list[MatrixRow]:
    """Rows of :mod:`specdec.conformance.adapters.openvino`'s summary: one per non-control
    setting (the controls in each row's control column), and the prefix-caching probe as an
    ABORTS row when any request raised."""
    settings = summary["settings"]
    controls = {n: s for n, s in settings.items() if s["control"]}
    if not settings:
        raise ValueError("summary['settings']: empty (no setting ran)")
    control = "-" if not controls else "; ".join(
        f"{n}: {'FAIL, as it must' if not check_passed(s, n) else 'pass: the control missed'}"
        for n, s in controls.items())
    rows = []
    for name, s in settings.items():
        if s["control"]:
            continue
        st, chk = s["setting"], s["check"]
        passed = check_passed(s, name)
        undrafted = s.get("undrafted_responses", 0) if st["gamma"] is not None else 0
        setting = (f"temperature {st['temperature']:g}"
                   + (f", top-k {st['top_k']}" if st["top_k"] else "")
                   + (f", num_assistant_tokens {st['gamma']}" if st["gamma"] is not None
                      else ", no draft (reference)"))
        note = ""
        if not passed:
            note = (f"emitted tokens not from the target's law (mean PIT along the target's "
                    f"order {chk['means'].get('target', float('nan')):.3f}, 0.5 if exact; "
                    f"{report})")
        verdict = "PASS" if passed else "FAIL"
        if undrafted:
            requests = chk.get("requests", undrafted)
            note = (f"{undrafted} of {requests} responses were decoded without a draft token; "
                    + note)
            if undrafted >= requests:
                verdict = "NOT RUN"
        rows.append(MatrixRow(
            implementation="OpenVINO GenAI LLMPipeline + draft_model" if st["gamma"] is not None
            else "OpenVINO GenAI LLMPipeline", version=summary["version"],
            interface="LLMPipeline.generate, seeded; every emitted token tested",
            setting=setting, rule=rule, verdict=verdict,
            detectable_tv=chk["detectable_tv"], trials=chk["tokens"], seconds=s["seconds"],
            control=control, note=note))
    probe = summary.get("prefix_caching")
    if probe and probe["errors"]:
        rows.append(MatrixRow(
            implementation="OpenVINO GenAI LLMPipeline + draft_model", version=summary["version"],
            interface="LLMPipeline.generate, default scheduler",
            setting=f"prefix caching: {probe['prefix_caching']}, sampled", rule=rule,
            verdict="ABORTS", trials=probe["requests"], seconds=probe["seconds"],
            note=f"{probe['errors']} of {probe['requests']} requests raised "
                 f"({(probe['first_error'] or '')[:60]}...); the pipeline drafts no more "
                 f"after the first ({abort_report})"))
    return rows


#: This engine in Appendix C's first table.
SCOPE = Scope("OpenVINO GenAI", ("OpenVINO GenAI LLMPipeline",
                                 "OpenVINO GenAI LLMPipeline + draft_model"),
              "the `openvino-genai` wheel's `LLMPipeline` with a draft model; tiny IR models, CPU",
              "accept x iff r ≤ q(x)/p(y) for a fresh target sample y; no residual",
              "GPU and NPU plugins; prompt lookup",
              "`openvino-genai-speculative-sampling.md` (the rule: not sent); "
              "`openvino-genai-prefix-caching-abort.md` (a comment for open upstream #4190)",
              kinds=(("prefix caching", "crash"),),
              where={"rule": "every sampled setting", "crash": "with prefix caching on"},
              position=70)

#: The adapter's declaration (:mod:`specdec.conformance.adapters`).
ADAPTER = Adapter("openvino", ENVIRONMENT, SCOPE, matrix_rows, example={
    "summary": {"version": PINNED, "settings": {"t1_g2": {
    "control": False, "passed": True, "seconds": 1.0,
    "setting": {"temperature": 1.0, "top_k": 0, "gamma": 2},
    "check": {"detectable_tv": 0.03, "tokens": 10, "means": {}}}}},
    "facts": {"rule": "r"}})


if __name__ == "__main__":
    sys.exit(main())
