"""ONNX Runtime GenAI's draft-model speculative decoding (onnxruntime-genai 0.18.0), per token.

ONNX Runtime GenAI turns speculative decoding on when the model folder's
``genai_config.json`` has a ``model.draft`` decoder beside ``model.decoder`` and a
top-level ``speculative`` section (``max_draft_tokens`` = K); ``og.Generator`` then picks
its speculative strategy by itself, and ``generate_next_token`` still emits one token per
call. The adapter builds everything it runs from small configurations, never from a hub:

* a tiny Llama target (vocabulary 64, hidden 64, 2 layers, head size 16) and two drafts
  (``close``: the target's weights with noise on the output layer; ``small``: the
  target's embedding, first layer, final norm and output layer, a 1-layer early exit),
  made with
  transformers, saved with a word-level tokenizer made with ``tokenizers``, and exported
  to ONNX by the engine's own model builder (``python -m onnxruntime_genai.models.builder
  -i <folder> -p fp32 -e cpu``);
* a speculative folder per draft: the target's export, the draft's export in ``draft/``,
  and the target's ``genai_config.json`` with ``model.draft`` (the draft's decoder block,
  ``filename = draft/model.onnx``) and ``speculative.max_draft_tokens``.

Each setting runs ``requests`` seeded sampled requests of ``tokens`` tokens with the
speculative folder, and the same with the target's plain folder (the reference row, which
must pass). The law of every emitted token is computed from the same weights in torch
(one forward pass over prompt and response, the engine's truncation at its temperature,
top-k and top-p: :func:`truncated_law`), the draft's law likewise, and
:func:`specdec.stats.pertoken.laws_check` decides. The numerical disagreement between those laws
and the laws of the engine's own logits (``Generator.get_output("logits")`` over the same
sequences) is measured and passed as ``tolerance``. Two controls must fail: every
speculative row's tokens checked against the draft's law instead of the target's, and one
setting's tokens (sampled at temperature 0.7, top-k 16) checked against the laws at
temperature 1 with no truncation.

The rule, as read from the onnxruntime-genai sources (:data:`RULE`; file:line at commit
:data:`SOURCE_COMMIT` of the upstream repository, whose VERSION_INFO reads 0.16.0-dev: the
newest snapshot that could be read here, not the 0.18.0 release itself, whose behaviour
the run tests end to end):

* the draft proposes K tokens, each sampled from its own truncated law ``q_i`` and
  returned with it (``base_speculative_strategy.cpp:58-104``, ``Propose``);
* the target's rows give ``p_i`` through the same truncation
  (``sampling_distribution.h:233``, ``ComputeSampledCategorical``: top-k logits, softmax at
  the temperature, the top-p prefix within them, renormalised);
* draft token ``d_i`` is accepted when ``U < min(1, p_i(d_i) / q_i(d_i))``
  (``speculative_decoding_strategy.cpp:727-729``, ``speculative_sampling.h:140-146``);
* at the first rejection the token is drawn from ``max(0, p_i - q_i)`` over the target's
  kept tokens, normalised (``speculative_sampling.h:39-57``, ``SampleCorrectionToken``);
  after K acceptances a bonus token is drawn from ``p_K``
  (``speculative_decoding_strategy.cpp:750-757``).

That is the rejection rule of Leviathan et al. and Chen et al. on truncated laws, exact
for the truncated target law. The Python package has a second speculative path, the
``Engine``/``Request`` API, in which the caller proposes tokens without their law
(``Request.set_draft_tokens``, "Propose speculative draft tokens for the next decode
operation"); without ``q`` the engine can only use the matching rule
(``speculative_sampling.h:96-127``, ``VerifyDeterministicProposal``: sample the target and
keep the draft while they agree). That path cannot run on this CPU with models the
builder makes (:data:`CALLER_DRAFTS`, probed again by every run: :func:`probe_caller_drafts`).

At seed 0 (1500 requests of 32 tokens per row, ``reports/ortgenai-summary-seed0.json``)
every speculative and reference row passes at a detectable per-token TV of 0.020 (about
43,500 tokens a row; acceptance 0.68, 0.43 and 0.68), the measured tolerance is 2e-6, and
both controls fail (p-value 0); about a minute once the models are built (another minute).
Building them found a defect of the model builder, not of the rule
(``reports/onnxruntime-genai-builder-lm-head.md``; see :data:`VOCAB`).

Requires the engine environment of ``tools/py_engines.py`` (``ortgenai``); run
``python -m specdec.conformance.adapters.ortgenai`` with its interpreter for a JSON summary.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023, arXiv:2211.17192.
.. [2] C. Chen et al., "Accelerating Large Language Model Decoding with Speculative
   Sampling", arXiv:2302.01318.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping

import numpy as np

from specdec.conformance.adapters.seeds import request_seeds
from specdec.conformance.adapters import Adapter, Environment, TRANSFORMERS_STACK
from specdec.conformance.matrix import MatrixRow, Scope, check_passed
from specdec.conformance.report import sci

__all__ = ["ADAPTER", "ENVIRONMENT", "matrix_rows",
           "PINNED", "SOURCE_COMMIT", "RULE", "CALLER_DRAFTS", "VOCAB", "Setting", "SETTINGS",
           "version", "probe_caller_drafts",
           "check_version", "truncated_law", "read_response", "spec_config", "build_models",
           "run_setting", "run_all", "main"]

#: The onnxruntime-genai release the adapter was written against.
PINNED = "0.18.0"

#: The pinned environment this adapter runs in (built by tools/py_engines.py, which
#: reads this expression from the source: literals, this module's constants and the
#: package's pins only).
ENVIRONMENT = Environment(
    "ortgenai", PINNED,
    (*TRANSFORMERS_STACK, "onnxruntime-genai==0.18.0", "onnxruntime==1.32.0",
     "onnx==1.23.2", "onnx-ir==1.1.0", "protobuf==7.36.2", "flatbuffers==25.12.19",
     "ml_dtypes==0.7.0"),
    "import onnxruntime_genai as og, onnxruntime_genai.models.builder; print(og.__version__)",
    pip_args=("--no-deps",),
    notes="onnxruntime-genai 0.18.0 requires onnxruntime>=1.31.0 and numpy (1.32.0 is "
          "the newest onnxruntime); its model builder (onnxruntime_genai.models.builder) "
          "needs torch, transformers, onnx and onnx-ir (imported by models/builder.py "
          "but not declared by the wheel) to turn a local Hugging Face folder into "
          "ONNX, so the pinned stack is installed beside it, with onnx's and "
          "onnxruntime's own dependencies (protobuf, flatbuffers, ml_dtypes) pinned as "
          "pip resolved them here (pip install --dry-run --report); --no-deps keeps "
          "anything unpinned out.")

#: Commit of the upstream sources :data:`RULE` cites (VERSION_INFO 0.16.0-dev).
SOURCE_COMMIT = "a0c04eb1313b886c963e415bbd974748cb89a4eb"

#: The rule as read from the sources: (step, what it does, where: file:line under src/).
RULE = (
    ("strategy", "model.draft in genai_config.json selects the speculative strategy; "
     "speculative.max_draft_tokens is K", "docs/speculative_decoding.md, decoding_strategy.cpp:29"),
    ("laws", "p and q truncated alike: top-k logits, softmax at the temperature, top-p prefix "
     "within them, renormalised", "sampling_distribution.h:233-297"),
    ("accept test", "draft token d accepted when U < min(1, p(d) / q(d)), U uniform",
     "speculative_decoding_strategy.cpp:727-729, speculative_sampling.h:140-146"),
    ("rejection", "token drawn from max(0, p - q) on the target's kept tokens, normalised",
     "speculative_decoding_strategy.cpp:739-742, speculative_sampling.h:39-57"),
    ("bonus", "after K acceptances a token drawn from p_K",
     "speculative_decoding_strategy.cpp:750-757"),
    ("caller-proposed drafts", "Request.set_draft_tokens (tokens, no law): matching rule, "
     "sample the target and keep drafts while equal (not exercised)",
     "speculative_sampling.h:96-127"),
)

#: Why the Engine API's caller-proposed drafts (``Request.set_draft_tokens``) are not run:
#: what was tried with onnxruntime-genai 0.18.0 on this CPU and the exact errors.
CALLER_DRAFTS = {
    "interface": "og.Engine + Request.set_draft_tokens (the caller proposes tokens, no law)",
    "rule": "matching: the target samples each position and drafts are kept while equal "
            "(speculative_sampling.h:96-127, VerifyDeterministicProposal; the only rule "
            "possible without the draft's probabilities)",
    "status": "not run",
    "tried": [
        {"what": "og.Engine on the builder's CPU fp32 export (static batching)",
         "error": "Engine.max_draft_tokens_per_proposal() returns 0 ('zero when "
                  "unsupported'); after one Engine.run, Request.set_draft_tokens raises "
                  "RuntimeError: This engine does not support speculative draft "
                  "verification."},
        {"what": "the same export with engine.dynamic_batching (block_size 16, num_blocks "
                 "64, max_batch_size 2) in genai_config.json",
         "error": "RuntimeError: Paged cache input must have rank four and a static "
                  "physical head width: past_key_values.0.key"},
        {"what": "a paged export for dynamic batching: builder --extra_options "
                 "use_paged_attention=true -p fp32 -e cpu",
         "error": "NotImplementedError: PagedAttention (use_paged_attention=true) requires "
                  "CUDA with FP16/BF16 or WebGPU with FP16, not (cpu, FLOAT). "
                  "(models/builders/base.py:760-770)"},
        {"what": "a per-turn seed on the static engine (TurnOptions.set_seed)",
         "error": "RuntimeError: A per-turn seed requires an Engine configured for dynamic "
                  "batching."},
    ],
    "reason": "caller-proposed drafts need the dynamic-batching Engine, which needs a "
              "PagedAttention export, which the 0.18.0 builder makes only for CUDA or WebGPU "
              "(no accelerator here); the static Engine has no seed either",
}

#: Vocabulary of the tiny models (token 2 ends a sequence). It must differ from every
#: linear layer's output width (64, 32, 128):
#: the model builder takes any ``torch.nn.Linear`` with ``out_features == vocab_size`` for
#: the LM head (``models/builders/base.py:6321``, ``has_lm_head``), and with a vocabulary
#: of 64 it wired ``logits`` to layer 0's attention output (``/lm_head/MatMul`` reading
#: ``/model/layers.0/post_attention_layernorm``), a model unrelated to the weights.
VOCAB = 96
EOS = 2
PROMPT_LENGTH = 6


@dataclasses.dataclass(frozen=True)
class Setting:
    """One speculative configuration.

    Attributes
    ----------
    draft : str
        ``"close"`` or ``"small"`` (see the module docstring).
    temperature : float
        > 0.
    top_k : int
        In 2 .. VOCAB (the engine needs a positive top-k for sampled drafts; VOCAB keeps
        every token).
    top_p : float
        In (0, 1].
    k : int
        ``speculative.max_draft_tokens``, in 1 .. 16.
    """

    draft: str
    temperature: float
    top_k: int
    top_p: float
    k: int

    def __post_init__(self):
        if self.draft not in ("close", "small"):
            raise ValueError(f"draft: must be 'close' or 'small' (got {self.draft!r})")
        if not (np.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature: must be finite and > 0 (got {self.temperature})")
        if not (isinstance(self.top_k, (int, np.integer)) and 2 <= self.top_k <= VOCAB):
            raise ValueError(f"top_k: must be an integer in 2..{VOCAB} (got {self.top_k!r})")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p: must be in (0, 1] (got {self.top_p})")
        if not (isinstance(self.k, (int, np.integer)) and 1 <= self.k <= 16):
            raise ValueError(f"k: must be an integer in 1..16 (got {self.k!r})")


#: The settings run by default, by name.
SETTINGS = {
    "close_T1_K4": Setting("close", 1.0, VOCAB, 1.0, 4),
    "small_T0.7_k16_K3": Setting("small", 0.7, 16, 1.0, 3),
    "close_T1_p0.9_K2": Setting("close", 1.0, VOCAB, 0.9, 2),
}

#: The setting whose tokens the control checks against the untruncated law at T = 1.
CONTROL = "small_T0.7_k16_K3"


def version() -> str:
    """The installed onnxruntime-genai version.

    Raises
    ------
    ImportError
        If onnxruntime-genai is not installed in this interpreter.
    """
    import importlib.metadata as md

    try:
        return md.version("onnxruntime-genai")
    except md.PackageNotFoundError:
        raise ImportError(f"ortgenai: onnxruntime-genai is not installed in this interpreter "
                          f"({sys.executable}); run `python tools/py_engines.py ortgenai` and use "
                          f"the interpreter it prints") from None


def check_version(expected: str = PINNED) -> str:
    """The installed onnxruntime-genai version, checked against ``expected``.

    Raises
    ------
    ImportError
        If onnxruntime-genai is not installed.
    RuntimeError
        If the installed version is not ``expected``.
    """
    found = version()
    if found != expected:
        raise RuntimeError(f"ortgenai: the adapter was written against onnxruntime-genai "
                           f"{expected} (RULE and the genai_config keys), but {found} is installed")
    return found


def truncated_law(logits, temperature: float, top_k: int, top_p: float = 1.0) -> np.ndarray:
    """The law ONNX Runtime GenAI samples from, row by row, in float64.

    As ``ComputeSampledCategorical`` (sampling_distribution.h:233-297): keep the ``top_k``
    largest logits (all of them when ``top_k`` is the vocabulary), softmax at
    ``temperature``, then (``top_p < 1``) the shortest prefix in decreasing probability
    whose mass reaches ``top_p``, renormalised.

    Parameters
    ----------
    logits : array_like, shape (n, V) or (V,)
    temperature : float
        > 0.
    top_k : int
        In 1 .. V.
    top_p : float
        In (0, 1].

    Returns
    -------
    numpy.ndarray, shape (n, V) (or (V,))
        Rows summing to 1, zero outside the kept tokens.

    Raises
    ------
    ValueError
        Non-finite logits, a bad temperature, top_k or top_p.
    """
    x = np.asarray(logits, dtype=np.float64)
    squeeze = x.ndim == 1
    x = np.atleast_2d(x)
    if x.ndim != 2 or x.shape[1] < 1:
        raise ValueError(f"logits: must have shape (n, V) or (V,) (got {np.shape(logits)})")
    if not np.isfinite(x).all():
        raise ValueError("logits: must be finite")
    V = x.shape[1]
    if not (np.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature: must be finite and > 0 (got {temperature})")
    if not (isinstance(top_k, (int, np.integer)) and 1 <= top_k <= V):
        raise ValueError(f"top_k: must be an integer in 1..{V} (got {top_k!r})")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p: must be in (0, 1] (got {top_p})")
    order = np.argsort(-x, axis=1, kind="stable")
    s = np.take_along_axis(x, order, axis=1)[:, :top_k]
    w = np.exp((s - s[:, :1]) / temperature)
    w /= w.sum(axis=1, keepdims=True)
    if top_p < 1:
        cum = np.cumsum(w, axis=1)
        keep = np.argmax(cum >= top_p, axis=1) + 1          # first index reaching top_p
        keep = np.where((cum >= top_p).any(axis=1), keep, top_k)
        w = np.where(np.arange(top_k)[None, :] < keep[:, None], w, 0.0)
        w /= w.sum(axis=1, keepdims=True)
    out = np.zeros_like(x)
    np.put_along_axis(out, order[:, :top_k], w, axis=1)
    return out[0] if squeeze else out


def read_response(sequence, prompt, max_new: int, vocab_size: int = VOCAB) -> np.ndarray:
    """The tokens the engine generated, from ``Generator.get_sequence(0)``.

    Parameters
    ----------
    sequence : array_like of int
        Prompt and generated tokens.
    prompt : array_like of int
    max_new : int
        The request's token budget.
    vocab_size : int

    Returns
    -------
    numpy.ndarray of int64, shape (n,)
        ``n <= max_new``; ends at the first end-of-sequence token if one was emitted.

    Raises
    ------
    ValueError
        If the sequence does not start with the prompt, is longer than the budget, has a
        token outside the vocabulary, or goes on after an end-of-sequence token.
    """
    seq = np.asarray(sequence, dtype=np.int64).ravel()
    p = np.asarray(prompt, dtype=np.int64).ravel()
    if seq.size < p.size or not np.array_equal(seq[:p.size], p):
        raise ValueError(f"output: the sequence {seq[:p.size].tolist()}... does not start with "
                         f"the prompt {p.tolist()}")
    new = seq[p.size:]
    if new.size > max_new:
        raise ValueError(f"output: {new.size} generated tokens, more than max_new ({max_new})")
    if new.size and (new.min() < 0 or new.max() >= vocab_size):
        raise ValueError(f"output: a generated token is outside 0..{vocab_size - 1}")
    stops = np.flatnonzero(new == EOS)
    if stops.size and stops[0] != new.size - 1:
        raise ValueError(f"output: {new.size - stops[0] - 1} tokens after the end-of-sequence "
                         f"token {EOS}")
    return new


def spec_config(target_config: dict, draft_config: dict, k: int) -> dict:
    """The target's ``genai_config.json`` with the draft's decoder as ``model.draft``.

    Parameters
    ----------
    target_config, draft_config : dict
        The builder's ``genai_config.json`` of the target and of the draft.
    k : int
        ``speculative.max_draft_tokens``, 1 .. 16.

    Returns
    -------
    dict
        A new configuration; the draft's file is ``draft/model.onnx``.

    Raises
    ------
    ValueError
        If either configuration has no ``model.decoder``, the vocabularies differ, or
        ``k`` is outside 1 .. 16.
    """
    if not (isinstance(k, (int, np.integer)) and 1 <= k <= 16):
        raise ValueError(f"k: must be an integer in 1..16 (got {k!r})")
    for name, c in (("target_config", target_config), ("draft_config", draft_config)):
        if "decoder" not in c.get("model", {}):
            raise ValueError(f"{name}: has no model.decoder")
    tv, dv = target_config["model"].get("vocab_size"), draft_config["model"].get("vocab_size")
    if tv != dv:
        raise ValueError(f"draft_config: vocab_size {dv} differs from the target's {tv}")
    cfg = json.loads(json.dumps(target_config))
    draft = json.loads(json.dumps(draft_config["model"]["decoder"]))
    draft["filename"] = "draft/" + draft["filename"]
    cfg["model"]["draft"] = draft
    cfg["speculative"] = {"max_draft_tokens": int(k)}
    return cfg


# ----------------------------------------------------------------------------- models

#: Configurations of the tiny models: name -> (seed, hidden, layers, how it derives from
#: the target: "" none, "noise" the target with noise on the output layer, "first" the
#: target's embedding, first layer, final norm and output layer).
_MODELS = {"target": (0, 64, 2, ""), "close": (0, 64, 2, "noise"), "small": (0, 64, 1, "first")}
#: Output-layer scale (the default initialisation gives nearly uniform laws) and the
#: close draft's noise on it, relative.
_LM_SCALE, _CLOSE_NOISE = 30.0, 0.3


def _models_key() -> str:
    blob = json.dumps({"models": _MODELS, "scale": _LM_SCALE, "noise": _CLOSE_NOISE,
                       "vocab": VOCAB, "eos": EOS, "version": PINNED, "layout": 1})
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def models_dir() -> Path:
    """Cache of the built models (``SPECDEC_ORTGENAI_MODELS`` overrides it)."""
    from specdec.conformance.adapters import cache_root

    default = cache_root() / "ortgenai-models"
    return Path(os.environ.get("SPECDEC_ORTGENAI_MODELS", default)) / _models_key()


def _hf_model(name: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    seed, hidden, layers, derived = _MODELS[name]
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=hidden // 16,
                      num_key_value_heads=max(1, hidden // 32), max_position_embeddings=256,
                      bos_token_id=1, eos_token_id=EOS, pad_token_id=0,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    if derived == "first":
        full = _hf_model("target")
        own = model.state_dict()
        model.load_state_dict({k: v for k, v in full.state_dict().items() if k in own})
        return model
    with torch.no_grad():
        model.lm_head.weight.mul_(_LM_SCALE)
        if derived == "noise":
            g = torch.Generator().manual_seed(12345)
            w = model.lm_head.weight
            w.add_(_CLOSE_NOISE * w.std() * torch.randn(w.shape, generator=g))
    return model


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    t = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=t, bos_token="t1", eos_token=f"t{EOS}",
                                   unk_token="t0", pad_token="t0")


def build_models(folder: Path | None = None, names=None, *, log=None) -> Path:
    """Build (or reuse) the tiny models ``names`` (default: all of them).

    Layout under ``folder``: ``hf/<name>`` (transformers), ``onnx/<name>`` (the builder's
    export, its output in ``onnx/<name>.log``), ``spec/<draft>_K<k>`` (made on demand by
    :func:`_spec_folder`). A model counts as built once its marker ``onnx/<name>.json`` is
    written, after the builder succeeded, so an interrupted build is redone.

    Parameters
    ----------
    folder : path, optional
        Default :func:`models_dir` (a cache keyed by the models' configurations).
    names : iterable of str, optional
        Keys of the model table: ``"target"``, ``"close"``, ``"small"``.
    log : callable, optional
        Called with one line per model built.

    Returns
    -------
    pathlib.Path
        ``folder``.

    Raises
    ------
    ValueError
        An unknown model name.
    RuntimeError
        If the model builder fails.
    """
    folder = Path(folder) if folder is not None else models_dir()
    names = list(_MODELS) if names is None else list(names)
    for name in names:
        if name not in _MODELS:
            raise ValueError(f"names: {name!r} is not one of {', '.join(_MODELS)}")
    (folder / "onnx").mkdir(parents=True, exist_ok=True)
    tok = None
    for name in names:
        marker = folder / "onnx" / f"{name}.json"
        if marker.exists():
            continue
        t0 = time.perf_counter()
        hf, out = folder / "hf" / name, folder / "onnx" / name
        for d in (hf, out):
            shutil.rmtree(d, ignore_errors=True)
        tok = tok or _tokenizer()
        _hf_model(name).save_pretrained(hf)
        tok.save_pretrained(hf)
        logf = folder / "onnx" / f"{name}.log"
        with open(logf, "w") as fh:
            proc = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder",
                                   "-i", str(hf), "-o", str(out), "-p", "fp32", "-e", "cpu",
                                   "-c", str(folder / "cache")], stdout=fh,
                                  stderr=subprocess.STDOUT,
                                  env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if proc.returncode != 0:
            raise RuntimeError(f"ortgenai: the model builder failed for {name}; see {logf}")
        shutil.rmtree(folder / "cache", ignore_errors=True)
        marker.write_text(json.dumps({"key": _models_key(), "model": name,
                                      "seconds": round(time.perf_counter() - t0, 1)}))
        if log:
            log(f"built {name} ({time.perf_counter() - t0:.0f} s)")
    return folder


def _spec_folder(folder: Path, draft: str, k: int) -> Path:
    out = folder / "spec" / f"{draft}_K{k}"
    if (out / "genai_config.json").exists():
        return out
    tmp = folder / "spec" / f".{draft}_K{k}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(folder / "onnx" / "target", tmp)
    shutil.copytree(folder / "onnx" / draft, tmp / "draft")
    cfg = spec_config(json.loads((folder / "onnx" / "target" / "genai_config.json").read_text()),
                      json.loads((folder / "onnx" / draft / "genai_config.json").read_text()), k)
    (tmp / "genai_config.json").write_text(json.dumps(cfg, indent=1))
    tmp.rename(out)
    return out


# ----------------------------------------------------------------------------- runs

def _generate(og, model, prompts, n: int, s: Setting, seeds):
    """Token arrays of one sampled request per prompt, and the summed speculative stats."""
    out, stats = [], {}
    for prompt, seed in zip(prompts, seeds):
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=True, temperature=s.temperature, top_k=s.top_k,
                                  top_p=s.top_p, random_seed=int(seed),
                                  max_length=len(prompt) + n)
        gen = og.Generator(model, params)
        gen.append_tokens(np.asarray(prompt, dtype=np.int32))
        while not gen.is_done():
            gen.generate_next_token()
        out.append(read_response(gen.get_sequence(0), prompt, n))
        st = gen.get_speculative_stats()
        for key in ("draft_tokens_proposed", "draft_tokens_evaluated", "draft_tokens_accepted",
                    "rounds", "bonus_tokens", "correction_tokens"):
            if key in st:
                stats[key] = stats.get(key, 0) + int(st[key])
    return out, stats


def _torch_logits(model, prompts, responses, batch: int = 256) -> list:
    """Logits (n_r, V) in float32 of the positions that emitted each response's tokens."""
    import torch

    res = []
    P = len(prompts[0])
    for i in range(0, len(prompts), batch):
        ps, rs = prompts[i:i + batch], responses[i:i + batch]
        L = max(len(r) for r in rs)
        ids = np.full((len(ps), P + L), EOS, dtype=np.int64)   # right padding: causal, unread
        for j, (p, r) in enumerate(zip(ps, rs)):
            ids[j, :P] = p
            ids[j, P:P + len(r)] = r
        with torch.no_grad():
            lg = model(torch.from_numpy(ids)).logits.float().numpy()
        for j, r in enumerate(rs):
            res.append(lg[j, P - 1:P - 1 + len(r)])
    return res


def _engine_tv(og, model, prompts, responses, torch_logits, s: Setting) -> float:
    """Largest TV, over the positions of these responses, between the law of the engine's
    own logits (one forward pass over prompt and response) and the law from torch's."""
    worst = 0.0
    for p, r, tl in zip(prompts, responses, torch_logits):
        if not len(r):
            continue
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(p) + len(r) + 1)
        gen = og.Generator(model, params)
        gen.append_tokens(np.concatenate([p, r]).astype(np.int32))
        el = np.asarray(gen.get_output("logits"))[0, len(p) - 1:len(p) - 1 + len(r)]
        a = truncated_law(el, s.temperature, s.top_k, s.top_p)
        b = truncated_law(tl, s.temperature, s.top_k, s.top_p)
        worst = max(worst, 0.5 * float(np.abs(a - b).sum(axis=1).max()))
    return worst


def probe_caller_drafts(og, folder: Path) -> dict:
    """Try ``Request.set_draft_tokens`` on the static Engine of the target's export.

    Returns
    -------
    dict
        ``max_draft_tokens_per_proposal`` (0: unsupported) and ``set_draft_tokens``: the
        engine's error text, or ``"accepted"`` (then :data:`CALLER_DRAFTS` is out of date
        and an adapter for that path is due).
    """
    engine = og.Engine(og.Model(str(folder / "onnx" / "target")))
    out = {"max_draft_tokens_per_proposal": int(engine.max_draft_tokens_per_proposal())}
    req = engine.create_request()
    opts = og.TurnOptions(req)
    opts.set_do_sample(True)
    opts.set_top_k(VOCAB)
    opts.set_max_generated_tokens(4)
    req.begin_turn(np.array([5, 9, 11], dtype=np.int32), opts)
    engine.run(engine.create_event_buffer(16))        # the request is now ready to decode
    try:
        req.set_draft_tokens(np.array([3, 4], dtype=np.int32))
        out["set_draft_tokens"] = "accepted"
    except RuntimeError as exc:
        out["set_draft_tokens"] = str(exc)
    return out


def run_setting(name: str, setting: Setting, *, requests: int, tokens: int, seed: int,
                folder: Path, hf: dict, tv_sample: int = 40, control: bool = False) -> dict:
    """One setting: the speculative row, the reference row (plain target), the control
    ``control_draft_law`` (the tokens against the draft's law) and, with ``control``, the
    temperature/top-k control row.

    Returns
    -------
    dict
        ``setting`` (its fields), ``tolerance`` (measured TV), ``rows``: a list of dicts
        with ``row`` ("speculative", "reference", "control", "control_draft_law"), the
        check's ``to_dict()``,
        seconds, and for the speculative row the engine's counters and acceptance rate.
    """
    import onnxruntime_genai as og

    from specdec.stats.pertoken import laws_check

    rng = np.random.default_rng([seed, 1])
    prompts = [rng.integers(3, VOCAB, PROMPT_LENGTH) for _ in range(requests)]
    out = {"setting": dataclasses.asdict(setting), "rows": []}
    spec = og.Model(str(_spec_folder(folder, setting.draft, setting.k)))
    plain = og.Model(str(folder / "onnx" / "target"))
    tol = None
    for row, model, offset in (("speculative", spec, 0), ("reference", plain, 1_000_000)):
        t0 = time.perf_counter()
        seeds = request_seeds(seed, offset, requests, bits=31)   # a signed 32-bit seed
        resp, stats = _generate(og, model, prompts, tokens, setting, seeds)
        gen_s = time.perf_counter() - t0
        tl = _torch_logits(hf["target"], prompts, resp)
        p_laws = [truncated_law(x, setting.temperature, setting.top_k, setting.top_p)
                  for x in tl]
        q_laws = None
        if row == "speculative":
            ql = _torch_logits(hf[setting.draft], prompts, resp)
            q_laws = [truncated_law(x, setting.temperature, setting.top_k, setting.top_p)
                      for x in ql]
            tol = _engine_tv(og, plain, prompts[:tv_sample], resp[:tv_sample], tl[:tv_sample],
                             setting)
        check = laws_check(p_laws, resp, max_tokens=tokens, rng=np.random.default_rng([seed, 2]),
                           q_laws=q_laws, tolerance=tol,
                           extra={"setting": name, "row": row})
        d = {"row": row, **check.to_dict(), "generate_seconds": round(gen_s, 1),
             "seconds": round(time.perf_counter() - t0, 1)}
        if row == "speculative":
            d["engine_stats"] = stats
            ev = stats.get("draft_tokens_evaluated", 0)
            d["acceptance_rate"] = (stats.get("draft_tokens_accepted", 0) / ev) if ev else None
        out["rows"].append(d)
        if row == "speculative" and control:
            ctl = laws_check([truncated_law(x, 1.0, VOCAB, 1.0) for x in tl], resp,
                             max_tokens=tokens, rng=np.random.default_rng([seed, 3]),
                             tolerance=tol, extra={"setting": name, "row": "control"})
            out["rows"].append({"row": "control", **ctl.to_dict(),
                                "what": "tokens sampled at this setting checked against the "
                                        "laws at temperature 1, no truncation: must fail"})
        if row == "speculative":
            # the error speculative decoding would make: the draft's law emitted instead
            ctl = laws_check(q_laws, resp, max_tokens=tokens,
                             rng=np.random.default_rng([seed, 4]), tolerance=tol,
                             extra={"setting": name, "row": "control_draft_law"})
            out["rows"].append({"row": "control_draft_law", **ctl.to_dict(),
                                "what": "the engine's tokens checked against the draft's law "
                                        "instead of the target's: must fail"})
    out["tolerance"] = tol
    return out


def run_all(*, seed: int = 0, requests: int = 1500, tokens: int = 32, settings=None,
            folder: Path | None = None, log=None) -> dict:
    """Every setting of :data:`SETTINGS` (or ``settings``, names), with the control.

    Returns
    -------
    dict
        ``engine``, ``version``, ``rule``, ``models`` (the configurations), ``build_seconds``,
        ``settings``: one :func:`run_setting` result per setting, ``seconds``.

    Raises
    ------
    ValueError
        An unknown setting name, requests < 1 or tokens < 1.
    """
    import torch

    names = list(SETTINGS) if settings is None else list(settings)
    for n in names:
        if n not in SETTINGS:
            raise ValueError(f"settings: {n!r} is not one of {', '.join(SETTINGS)}")
    if requests < 1 or tokens < 1:
        raise ValueError(f"requests, tokens: must be >= 1 (got {requests}, {tokens})")
    ver = check_version()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    needed = ["target"] + sorted({SETTINGS[n].draft for n in names})
    folder = build_models(folder, needed, log=log)
    build_s = time.perf_counter() - t0
    from transformers import LlamaForCausalLM

    hf = {name: LlamaForCausalLM.from_pretrained(folder / "hf" / name).eval() for name in needed}
    res = []
    for n in names:
        res.append({"name": n, **run_setting(n, SETTINGS[n], requests=requests, tokens=tokens,
                                             seed=seed, folder=folder, hf=hf,
                                             control=(n == CONTROL))})
        if log:
            log(f"{n}: " + ", ".join(f"{r['row']} {'pass' if r['passed'] else 'FAIL'}"
                                     for r in res[-1]["rows"]))
    import onnxruntime_genai as og

    caller = {**CALLER_DRAFTS, "probe": probe_caller_drafts(og, folder)}
    return {"engine": "onnxruntime-genai", "version": ver, "seed": seed, "requests": requests,
            "tokens": tokens, "source_commit": SOURCE_COMMIT,
            "rule": [{"step": s, "rule": r, "where": w} for s, r, w in RULE],
            "models": {k: dict(zip(("seed", "hidden", "layers", "derived"), v))
                       for k, v in _MODELS.items()},
            "build_seconds": round(build_s, 1), "settings": res, "caller_drafts": caller,
            "seconds": round(time.perf_counter() - t0, 1)}


def main(argv=None) -> int:
    """``python -m specdec.conformance.adapters.ortgenai [--seed N] [...]``: the JSON summary.

    Exit status 0 when every row passes and every control fails, 1 otherwise (a verdict),
    2 for bad arguments or a missing engine."""
    ap = argparse.ArgumentParser(prog="python -m specdec.conformance.adapters.ortgenai",
                                 description="Check ONNX Runtime GenAI's draft-model speculative "
                                             "decoding per token on tiny models built here.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--models", default=None, help="folder of the built models (a cache)")
    args = ap.parse_args(argv)
    if args.seed < 0:
        ap.error("--seed: must be >= 0")
    if args.requests < 1:
        ap.error("--requests: must be >= 1")
    if not 1 <= args.tokens <= 200:
        ap.error("--tokens: must be in 1..200")
    names = args.settings.split(",")
    for n in names:
        if n not in SETTINGS:
            ap.error(f"--settings: {n!r} is not one of {', '.join(SETTINGS)}")
    try:
        version()
    except ImportError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.models and Path(args.models).exists() and not Path(args.models).is_dir():
        ap.error(f"--models: {args.models} is not a folder")
    summary = run_all(seed=args.seed, requests=args.requests, tokens=args.tokens,
                      settings=names, folder=Path(args.models) if args.models else None,
                      log=lambda m: print(m, file=sys.stderr, flush=True))
    summary["verdict"] = overall_verdict(summary)
    json.dump(summary, sys.stdout, indent=1)
    print()
    return 0 if summary["verdict"] == "PASS" else 1


def overall_verdict(summary) -> str:
    """``"PASS"`` when every speculative and reference row passes and every control fails
    (a control that passes means the run could not see an error of its size), else
    ``"FAIL"``: the command line's exit status, 0 or 1, as the other adapters'."""
    ok = True
    for s in summary["settings"]:
        for r in s["rows"]:
            must_pass = r["row"] in ("speculative", "reference")
            ok = ok and (bool(r["passed"]) == must_pass)
    return "PASS" if ok else "FAIL"


def matrix_rows(summary: Mapping, *, rule: str, report: str = "") -> list[MatrixRow]:
    """Rows of :mod:`specdec.conformance.adapters.ortgenai`'s summary: per setting the
    speculative row (draft model, with the setting's control when it has one) and the
    reference row (the same requests without a draft); then a "not run" row for the
    Engine API's caller-proposed drafts, with its evidence, when the summary has it.

    Parameters
    ----------
    summary : mapping
        What ``python -m specdec.conformance.adapters.ortgenai`` prints.
    rule : str
        One line for the speculative rule.
    report : str
        The report draft a failing speculative row points to.

    Raises
    ------
    ValueError
        No setting, a setting without its speculative or reference row or with one twice,
        a ``passed`` that is not a bool.
    """
    rows = []
    if not summary["settings"]:
        raise ValueError("summary['settings']: empty (no setting ran)")
    for s in summary["settings"]:
        name = s.get("name", "setting")
        by = {}
        for r in s["rows"]:
            if r["row"] in by:
                raise ValueError(f"summary: setting {name!r} has two {r['row']!r} rows")
            by[r["row"]] = r
        for need in ("speculative", "reference"):
            if need not in by:
                raise ValueError(f"summary: setting {s.get('name')!r} has no {need} row")
        st = s["setting"]
        setting = (f"{st['draft']} draft, temperature {st['temperature']:g}, top-k "
                   f"{st['top_k']}, top-p {st['top_p']:g}, γ = {st['k']}")
        parts = [f"{label}: " + ("FAIL, as it must" if not check_passed(by[k], f"{name}.{k}")
                                 else "pass: the control missed")
                 for k, label in (("control", "temperature 1, no truncation"),
                                  ("control_draft_law", "the draft's law")) if k in by]
        control = "; ".join(parts) or "-"
        tol = s.get("tolerance")
        tol_text = "" if tol is None else f"tolerance {sci(tol)} (engine logits vs torch)"
        for key in ("speculative", "reference"):
            r = by[key]
            passed = check_passed(r, f"{name}.{key}")
            verdict = "PASS" if passed else "FAIL"
            note = tol_text
            if key == "speculative" and r.get("acceptance_rate") is not None:
                note = f"acceptance {r['acceptance_rate']:.2f}; " + note
            if key == "speculative" and not r.get("draft_tokens_proposed", 1):
                verdict = "NOT RUN"
                note = "the engine proposed no draft token: this row did not speculate; " + note
            if not passed and report:
                note = f"{report}; " + note
            rows.append(MatrixRow(
                implementation="ONNX Runtime GenAI", version=summary["version"],
                interface="og.Generator, generate_next_token loop, seeded; every emitted "
                          "token tested",
                setting=setting + ("; draft model (model.draft)" if key == "speculative"
                                   else "; no draft (reference)"),
                rule=rule if key == "speculative" else "plain sampling (reference)",
                verdict=verdict,
                detectable_tv=r["detectable_tv"], trials=r["tokens"], seconds=r.get("seconds"),
                control=control, note=note))
    cd = summary.get("caller_drafts")
    if cd:
        probe = cd.get("probe", {})
        seen = f"; this run's probe: {probe['set_draft_tokens']}" if "set_draft_tokens" in probe \
            else ""
        rows.append(MatrixRow(
            implementation="ONNX Runtime GenAI", version=summary["version"],
            interface=cd["interface"], setting="-", rule=cd["rule"], verdict="NOT RUN",
            note=f"{cd['reason']} ({len(cd['tried'])} attempts and their errors: "
                 f"CALLER_DRAFTS in specdec/conformance/adapters/ortgenai.py){seen}"))
    return rows


#: This engine in Appendix C's first table.
SCOPE = Scope("ONNX Runtime GenAI", ("ONNX Runtime GenAI",),
              "the `onnxruntime-genai` wheel's speculative strategy through `og.Generator`; tiny "
              "models from its builder, CPU",
              "accept with min(1, p/q), p and q truncated alike; else (p − q)+",
              "caller-proposed drafts (`Engine`, CUDA only); GPU",
              "`onnxruntime-genai-builder-lm-head.md`: its model builder, not the sampler",
              position=80)

#: The adapter's declaration (:mod:`specdec.conformance.adapters`).
ADAPTER = Adapter("ortgenai", ENVIRONMENT, SCOPE, matrix_rows, example={
    "summary": {"version": PINNED, "settings": [{"name": "s", "rows": [
    {"row": "speculative", "passed": True, "detectable_tv": 0.02, "tokens": 10},
    {"row": "reference", "passed": True, "detectable_tv": 0.02, "tokens": 10}],
    "setting": {"draft": "close", "temperature": 1.0, "top_k": 96, "top_p": 1.0, "k": 4}}]},
    "facts": {"rule": "r"}})


if __name__ == "__main__":
    sys.exit(main())
