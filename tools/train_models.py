"""Train the small byte-level target and draft transformers used in chapter 8.

Run through ``make models``. The script needs PyTorch (CPU build, ``torch==2.13.0``)
and the Debian packages ``fortunes fortunes-min fortunes-it fortunes-es fortunes-zh``;
the book itself needs neither: it reads the weights (``specdec/data/models/*.npz``), the manifest
(``specdec/data/models/manifest.json``) and a small committed held-out sample
(``specdec/data/models/heldout.json``) with the numpy implementation in :mod:`specdec.nn`.

Steps (each can be run alone, see ``--help``):

``corpus``
    Read the fortunes of each language from the installed packages, clean them
    (ANSI colour codes and overstrike sequences removed; the Spanish ``off/`` folder
    excluded), split every language's items into training and held-out sets by a hash
    of the item text, and write ``specdec/data/models/heldout.json`` (a few KB of held-out text and
    prompts per language).
``train``
    Train the five models with fixed seeds on two CPU threads (the distilled draft last:
    it needs the draft and the large target, see ``DISTILL``) and write
    ``specdec/data/models/<name>.npz``.
``manifest``
    Write ``specdec/data/models/manifest.json``: architecture, shapes, parameter counts, training
    times, corpus hash, validation bits per byte per language, versions, seeds and
    licences.
``check``
    Compare the models in ``--out DIR`` with the committed ones: bits per byte of every
    model on the committed sample ``specdec/data/models/heldout.json`` against
    ``sample_bits_per_byte`` in the committed ``specdec/data/models/manifest.json``; prints a table
    and exits with status 1 if any difference exceeds ``--tolerance`` (default
    ``TOLERANCE``).

``--out DIR`` (default ``_build/models``; ``specdec/data/models/`` only when named) is where
``corpus``, ``train`` and ``manifest`` write;
``make models`` retrains into ``_build/models`` and checks, so the committed weights are
never overwritten by a run that does not reproduce them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = ROOT / "specdec" / "data" / "models"
sys.path.insert(0, str(ROOT))

LANGUAGES = ("it", "en", "zh", "es")
PACKAGES = {
    "en": ("fortunes", "fortunes-min"),
    "it": ("fortunes-it",),
    "es": ("fortunes-es",),
    "zh": ("fortunes-zh",),
}
LICENCES = {
    "fortunes": "BSD-3-Clause (fortune-mod collection, University of California)",
    "fortunes-min": "BSD-3-Clause (fortune-mod collection, University of California)",
    "fortunes-it": "public domain / freeware per its COPYING-POLICY (quotations collection)",
    "fortunes-es": "GPL-2+",
    "fortunes-zh": "GPL-3+",
}
FORTUNE_DIR = "/usr/share/games/fortunes/"
HOLDOUT_SHARE = 0.05          # share of each language's items held out (hash-based)
SAMPLE_BYTES = 6000           # held-out text per language committed in heldout.json
PROMPTS_PER_LANGUAGE = 48     # prompts per language committed in heldout.json
PROMPT_BYTES = 32             # prompt length in bytes (cut at a character boundary)
SEPARATOR = "\n%\n"           # fortune separator kept in the training stream

# Architectures. Linear layers have no biases; LayerNorms have weight and bias;
# the output head is tied to the token embedding; positions are learned.
ARCHS = {
    "target": dict(n_layers=8, d_model=128, n_heads=4, context=128, vocab_size=256),
    "draft": dict(n_layers=1, d_model=64, n_heads=4, context=128, vocab_size=256),
    "target_wide": dict(n_layers=4, d_model=256, n_heads=4, context=128, vocab_size=256),
    # grown from the trained deep target (Net2Net, see GROWTH), then fine-tuned
    "target_large": dict(n_layers=12, d_model=384, n_heads=4, context=128, vocab_size=256),
    # the draft distilled on target_large's own samples (DISTILL), after both exist
    "draft_distilled": dict(n_layers=1, d_model=64, n_heads=4, context=128, vocab_size=256),
}
TRAINING = {
    "target": dict(steps=900, batch=32, lr=2e-3, seed=11),
    "draft": dict(steps=500, batch=32, lr=5e-3, seed=12),
    "target_wide": dict(steps=300, batch=32, lr=1.5e-3, seed=13),
    "target_large": dict(steps=60, batch=16, lr=3e-4, seed=14),
    "draft_distilled": dict(steps=600, batch=32, lr=1e-3, seed=15),
}
# Function-preserving growth (Chen, Goodfellow, Shlens 2016, Net2Net): target_large starts
# as the trained deep target widened by `widen` (every unit of the residual stream, of each
# head and of the MLP copied `widen` times, incoming weights split) and deepened by
# `new_layers` blocks whose output projections are zero (identity blocks), so that before
# fine-tuning it computes the deep target's function. `noise` (relative to each matrix's
# standard deviation) breaks the symmetry of the copies, as in the paper.
GROWTH = {"target_large": dict(base="target", widen=3, new_layers=4, noise=0.01)}
# Weights stored as float16 in the .npz (computed in float32 by specdec.nn): the large
# target would otherwise exceed the repository's weight budget.
STORAGE = {"target_large": "float16"}
# Knowledge distillation of the draft on the target's own samples (DistillSpec: Zhou et
# al. 2024, "DistillSpec: Improving speculative decoding via knowledge distillation",
# ICLR). draft_distilled starts from the trained draft (`base`) and is fine-tuned on
# `sequences` texts of the teacher: a `prefix_bytes` window of the training corpus (the
# length of the book's prompts; the same number per language), continued by the teacher
# sampling at `temperature` (1: the law the rejection rule must reproduce) up to the
# context, with the numpy decoder (specdec.nn, KV cache, `teacher_batch` texts at a time,
# one numpy Generator). The loss is the forward KL divergence KL(p || q) from the
# teacher's full next-byte law p to the draft's q at every position that predicts a
# sampled byte: the contexts a draft meets while the decoder runs (a prompt, then the
# target's own text). Forward KL, not reverse KL: (1) the teacher's whole law is
# available at every position (its logits come with the sample), so the soft labels cost
# nothing more and the gradient has no sampling noise; (2) the rejection rule accepts
# sum_x min(p, q) = 1 - TV(p, q), and a one-layer draft cannot fit the target; the
# mode-covering forward KL keeps q's mass wherever p has some, while the mode-seeking
# reverse KL lets a small q drop whole modes of p, whose mass the rule then forfeits;
# (3) DistillSpec finds the best divergence task-dependent, with forward KL on the
# teacher's samples among the best for sampling at temperature 1.
DISTILL = {"draft_distilled": dict(base="draft", teacher="target_large", sequences=1024,
                                   prefix_bytes=32, temperature=1.0, teacher_batch=128,
                                   divergence="forward KL(p_target || q_draft)")}
CORPUS_SEED = 7
THREADS = 2
# Reproduction tolerance, bits per byte (absolute) on the committed held-out sample. With
# the same seeds, thread count and torch version a CPU retrain is expected to be bitwise
# identical; different CPU kernels (vector width, oneDNN dispatch) change the order of
# float reductions, and the drift compounds over the training steps. 0.02 bits/byte is
# under 1% of any committed value and an order of magnitude below the gaps chapter 8
# relies on (draft vs targets: 0.3 to 0.7 bits/byte).
TOLERANCE = 0.02

# --------------------------------------------------------------------------- corpus

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_OVERSTRIKE = re.compile(r".\x08")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def package_files(package: str) -> list[Path]:
    """Regular fortune files shipped by a Debian package (no .dat, no symlinks, no off/)."""
    out = subprocess.run(["dpkg", "-L", package], check=True, capture_output=True,
                         text=True).stdout.split("\n")
    files = []
    for line in out:
        path = Path(line.strip())
        if not line.startswith(FORTUNE_DIR) or "/off/" in line or line.endswith(".dat"):
            continue
        if path.is_symlink() or not path.is_file():
            continue
        files.append(path)
    return sorted(set(files))


def clean(text: str) -> str:
    """Remove colour codes, overstrike and control characters; NFC-normalise."""
    text = _ANSI.sub("", text)
    while _OVERSTRIKE.search(text):
        text = _OVERSTRIKE.sub("", text)
    text = text.replace("\r\n", "\n").replace("\t", "    ")
    text = _CONTROL.sub("", text)
    return unicodedata.normalize("NFC", text)


def split_items(text: str) -> list[str]:
    """Fortunes are separated by lines that contain only ``%``."""
    items, current = [], []
    for line in text.split("\n"):
        if line.strip() == "%":
            items.append("\n".join(current))
            current = []
        else:
            current.append(line.rstrip())
    items.append("\n".join(current))
    return [item.strip("\n") for item in items if item.strip()]


def holdout_score(lang: str, item: str) -> float:
    """Deterministic uniform number in [0, 1) from the item text (split key)."""
    digest = hashlib.sha256(f"{lang}\x00{item}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


@dataclass(frozen=True)
class Corpus:
    train: dict[str, bytes]
    heldout_items: dict[str, list[str]]
    files: dict[str, list[str]]
    stats: dict[str, dict]
    sha256: str


def build_corpus() -> Corpus:
    train, heldout, files, stats = {}, {}, {}, {}
    hasher = hashlib.sha256()
    for lang in LANGUAGES:
        items, lang_files = [], []
        for package in PACKAGES[lang]:
            for path in package_files(package):
                raw = path.read_bytes().decode("utf-8", errors="replace")
                items.extend(split_items(clean(raw)))
                lang_files.append(f"{package}:{path}")
        items = list(dict.fromkeys(items))          # de-duplicate, keep first occurrence
        held = [it for it in items if holdout_score(lang, it) < HOLDOUT_SHARE]
        kept = [it for it in items if holdout_score(lang, it) >= HOLDOUT_SHARE]
        train[lang] = "".join(it + SEPARATOR for it in kept).encode("utf-8")
        heldout[lang] = held
        files[lang] = lang_files
        text_all = "".join(items)
        cjk = sum(1 for ch in text_all if "\u4e00" <= ch <= "\u9fff")
        stats[lang] = dict(items=len(items), heldout_items=len(held),
                           characters=len(text_all), train_bytes=len(train[lang]),
                           heldout_bytes=len("".join(it + SEPARATOR for it in held).encode()),
                           cjk_share=round(cjk / max(len(text_all), 1), 4))
        hasher.update(lang.encode() + b"\x00" + train[lang])
        for it in held:
            hasher.update(it.encode("utf-8") + b"\x00")
    return Corpus(train, heldout, files, stats, hasher.hexdigest())


def cut_prefix(text: str, max_bytes: int) -> str:
    """Longest prefix of ``text`` whose UTF-8 encoding fits in ``max_bytes``."""
    out = text.encode("utf-8")[:max_bytes]
    return out.decode("utf-8", errors="ignore")


def heldout_sample(corpus: Corpus) -> dict:
    """The committed sample: held-out text (for bits/byte) and prompts per language."""
    sample = {"description": (
        "Held-out fortunes (never trained on), a few KB per language, and request "
        "prompts cut from the beginning of held-out items. Items are in corpus order; "
        f"the split keeps items whose sha256(lang, text) score is below {HOLDOUT_SHARE}."),
        "separator": SEPARATOR, "prompt_bytes": PROMPT_BYTES, "languages": {}}
    for lang in LANGUAGES:
        items = corpus.heldout_items[lang]
        rng = np.random.default_rng([CORPUS_SEED, LANGUAGES.index(lang)])
        order = rng.permutation(len(items))
        text_items, size = [], 0
        for i in order:
            item = items[i]
            n = len((item + SEPARATOR).encode("utf-8"))
            if size + n > SAMPLE_BYTES:
                continue
            text_items.append(item)
            size += n
        prompts = []
        for i in order[::-1]:
            prompt = cut_prefix(" ".join(items[i].split()), PROMPT_BYTES)
            if len(prompt.encode("utf-8")) >= PROMPT_BYTES - 3 and prompt not in prompts:
                prompts.append(prompt)
            if len(prompts) == PROMPTS_PER_LANGUAGE:
                break
        sample["languages"][lang] = {"text": "".join(it + SEPARATOR for it in text_items),
                                     "prompts": prompts}
    return sample


# ---------------------------------------------------------------------------- model

def torch_model(arch: dict):
    """The PyTorch twin of :class:`specdec.nn.Transformer` (same parameter names)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self, d: int, heads: int):
            super().__init__()
            self.heads = heads
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d, bias=False)
            self.proj = nn.Linear(d, d, bias=False)
            self.ln2 = nn.LayerNorm(d)
            self.fc = nn.Linear(d, 4 * d, bias=False)
            self.out = nn.Linear(4 * d, d, bias=False)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            shape = (b, t, self.heads, d // self.heads)
            q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self, n_layers, d_model, n_heads, context, vocab_size):
            super().__init__()
            self.tok_emb = nn.Embedding(vocab_size, d_model)
            self.pos_emb = nn.Embedding(context, d_model)
            self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
            self.ln_f = nn.LayerNorm(d_model)
            for name, p in self.named_parameters():
                if name.endswith("weight") and p.ndim == 2:
                    std = 0.02 / math.sqrt(2 * n_layers) if name.endswith(("proj.weight", "out.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)

        def forward(self, idx):
            t = idx.shape[1]
            x = self.tok_emb(idx) + self.pos_emb(torch.arange(t, device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.ln_f(x) @ self.tok_emb.weight.T

    return GPT(**arch)


def to_numpy_weights(model) -> dict[str, np.ndarray]:
    """Torch state -> the numpy layout of :mod:`specdec.nn` (linear weights as (in, out))."""
    out = {}
    for name, tensor in model.state_dict().items():
        array = tensor.detach().cpu().numpy().astype(np.float32)
        if name.endswith(("qkv.weight", "proj.weight", "fc.weight", "out.weight")):
            array = np.ascontiguousarray(array.T)
        out[name] = array
    return out


def from_numpy_weights(model, weights: dict[str, np.ndarray]):
    """Load a :mod:`specdec.nn` weight dict into the torch twin (for tests)."""
    import torch
    state = {}
    for name, array in weights.items():
        if name.startswith("__"):
            continue
        if name.endswith(("qkv.weight", "proj.weight", "fc.weight", "out.weight")):
            array = array.T
        state[name] = torch.from_numpy(np.ascontiguousarray(array))
    model.load_state_dict(state)
    return model


def grow(weights: dict[str, np.ndarray], arch: dict, widen: int, new_layers: int = 0,
         noise: float = 0.0, rng: np.random.Generator | None = None
         ) -> tuple[dict[str, np.ndarray], dict]:
    """Net2Net growth of a :mod:`specdec.nn` model: wider by ``widen``, deeper by ``new_layers``.

    Chen, Goodfellow, Shlens (2016), Net2Net: Accelerating learning via knowledge
    transfer, ICLR, sections 2.2 (Net2WiderNet) and 2.3 (Net2DeeperNet), applied to the
    pre-LayerNorm transformer of :mod:`specdec.nn`:

    * every unit ``i`` of the wider residual stream, of a wider head and of the wider
      MLP copies unit ``i // widen`` of the original (heads stay whole: head ``j`` of the
      grown model holds the copies of head ``j``'s units); a LayerNorm of a vector whose
      units are each repeated ``widen`` times has the same mean and variance, so its
      output is the repeated output;
    * a matrix reading a repeated vector has its rows copied and divided by ``widen``
      (the split of the paper), a matrix writing one has its columns copied; the queries
      are further divided by ``sqrt(widen)`` because the attention scale
      ``1/sqrt(head_dim)`` shrinks by that factor; the final LayerNorm is divided by
      ``widen`` because the output head is tied to the (copied) token embedding;
    * new blocks appended at the top have zero attention and MLP output projections,
      so each is the identity on the residual stream (its other matrices are random,
      N(0, 0.02), so that gradients reach the projections).

    With ``noise = 0`` the grown model computes the same logits as the original (up to
    float rounding; tested). ``noise > 0`` adds N(0, (noise * std)^2) to every grown
    matrix (std of the matrix) to break the symmetry between copies before training.

    Parameters
    ----------
    weights : dict of str to numpy.ndarray
        The original model's parameters in the numpy layout (linear weights (in, out)).
    arch : dict
        Its architecture (``n_layers``, ``d_model``, ``n_heads``, ``context``, ``vocab_size``).
    widen : int
        Width factor, >= 1.
    new_layers : int
        Identity blocks appended, >= 0.
    noise : float
        Relative symmetry-breaking noise, >= 0.
    rng : numpy.random.Generator, optional
        Needed when ``noise > 0`` or ``new_layers > 0``.

    Returns
    -------
    (dict, dict)
        The grown parameters (float32) and architecture.
    """
    if not (isinstance(widen, int) and widen >= 1):
        raise ValueError(f"widen: must be an integer >= 1 (got {widen!r})")
    if not (isinstance(new_layers, int) and new_layers >= 0):
        raise ValueError(f"new_layers: must be an integer >= 0 (got {new_layers!r})")
    if not noise >= 0:
        raise ValueError(f"noise: must be >= 0 (got {noise!r})")
    if rng is None and (noise > 0 or new_layers > 0):
        raise ValueError("rng: needed for noise > 0 or new_layers > 0")
    k, d, n_layers = widen, arch["d_model"], arch["n_layers"]
    units, hidden = np.arange(k * d) // k, np.arange(4 * k * d) // k
    w = {name: np.asarray(a, dtype=np.float64) for name, a in weights.items()}
    out = {"tok_emb.weight": w["tok_emb.weight"][:, units],
           "pos_emb.weight": w["pos_emb.weight"][:, units],
           "ln_f.weight": w["ln_f.weight"][units] / k, "ln_f.bias": w["ln_f.bias"][units] / k}
    for i in range(n_layers):
        p = f"blocks.{i}."
        for name in ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias"):
            out[p + name] = w[p + name][units]
        qkv = w[p + "qkv.weight"]
        q, key, v = (qkv[:, j * d:(j + 1) * d][units][:, units] / k for j in range(3))
        out[p + "qkv.weight"] = np.concatenate([q / math.sqrt(k), key, v], axis=1)
        out[p + "proj.weight"] = w[p + "proj.weight"][units][:, units] / k
        out[p + "fc.weight"] = w[p + "fc.weight"][units][:, hidden] / k
        out[p + "out.weight"] = w[p + "out.weight"][hidden][:, units] / k
    wide = k * d
    for i in range(n_layers, n_layers + new_layers):
        p = f"blocks.{i}."
        out.update({p + "ln1.weight": np.ones(wide), p + "ln1.bias": np.zeros(wide),
                    p + "ln2.weight": np.ones(wide), p + "ln2.bias": np.zeros(wide),
                    p + "qkv.weight": 0.02 * rng.standard_normal((wide, 3 * wide)),
                    p + "proj.weight": np.zeros((wide, wide)),
                    p + "fc.weight": 0.02 * rng.standard_normal((wide, 4 * wide)),
                    p + "out.weight": np.zeros((4 * wide, wide))})
    if noise > 0:
        for name in sorted(out):
            a = out[name]
            std = float(a.std()) if a.ndim == 2 else 0.0
            if std > 0:                         # zero projections stay zero
                out[name] = a + noise * std * rng.standard_normal(a.shape)
    grown = dict(arch, n_layers=n_layers + new_layers, d_model=wide)
    return {name: np.ascontiguousarray(a, dtype=np.float32) for name, a in out.items()}, grown


def batches(corpus_train: dict[str, bytes], batch: int, context: int, rng: np.random.Generator):
    """Random windows of ``context + 1`` bytes, the same number from every language."""
    arrays = [np.frombuffer(corpus_train[lang], dtype=np.uint8) for lang in LANGUAGES]
    per = batch // len(arrays)
    while True:
        rows = []
        for arr in arrays:
            starts = rng.integers(0, len(arr) - context - 1, size=per)
            rows.extend(arr[s:s + context + 1] for s in starts)
        yield np.stack(rows).astype(np.int64)


def teacher_samples(corpus_train: dict[str, bytes], teacher, sequences: int,
                    prefix_bytes: int, temperature: float, batch: int,
                    rng: np.random.Generator, log=print) -> tuple[np.ndarray, np.ndarray]:
    """Texts sampled by ``teacher`` and its log-law at every position that predicts a
    sampled byte: the data of the distillation (:data:`DISTILL`).

    ``sequences`` windows of ``prefix_bytes`` bytes of the training corpus (the same number
    per language, at uniform random offsets) are continued by the teacher, sampling at
    ``temperature`` without truncation (:class:`specdec.decode.SamplingSettings`, each
    byte drawn by inversion of one uniform of ``rng``: :func:`specdec.verify.draw`), to
    the teacher's context, ``batch`` texts at a time with its KV cache; the BLAS libraries
    are held to ``THREADS`` threads, so the same seed gives the same texts on one machine.

    Returns
    -------
    tokens : numpy.ndarray
        Shape (sequences, context), int64: prefix then sampled bytes.
    log_p : numpy.ndarray
        Shape (sequences, context - prefix_bytes, 256), float32: the teacher's log-law at
        ``temperature`` at positions ``prefix_bytes - 1`` to ``context - 2`` (the laws the
        sampled bytes were drawn from).
    """
    from specdec import decode as sdec
    from specdec.measure import limit_blas_threads
    from specdec.verify import draw

    context = teacher.config.context
    if sequences % len(LANGUAGES) or not 1 <= prefix_bytes < context:
        raise ValueError("sequences: a multiple of the languages; prefix_bytes: in [1, context)")
    settings = sdec.SamplingSettings(temperature=temperature)
    arrays = [np.frombuffer(corpus_train[lang], dtype=np.uint8) for lang in LANGUAGES]
    per = sequences // len(LANGUAGES)
    starts = [rng.integers(0, len(arr) - prefix_bytes, size=per) for arr in arrays]
    tokens = np.zeros((sequences, context), dtype=np.int64)
    for i, (arr, st) in enumerate(zip(arrays, starts)):        # language-major order
        for j, s in enumerate(st):
            tokens[i * per + j, :prefix_bytes] = arr[s:s + prefix_bytes]
    log_p = np.empty((sequences, context - prefix_bytes, 256), dtype=np.float32)
    start = time.perf_counter()
    with limit_blas_threads(THREADS):
        for b0 in range(0, sequences, batch):
            rows = slice(b0, min(b0 + batch, sequences))
            n = rows.stop - rows.start
            cache = teacher.new_cache(n)
            logits = teacher.forward(tokens[rows, :prefix_bytes], cache)[:, -1]
            for k, t in enumerate(range(prefix_bytes, context)):
                law = settings.laws(logits)                       # (n, 256) float64
                with np.errstate(divide="ignore"):
                    log_p[rows, k] = np.log(law)
                tokens[rows, t] = draw(law, rng.random(n))
                if t + 1 < context:
                    logits = teacher.forward(tokens[rows, t:t + 1], cache)[:, -1]
            log(f"[distil] teacher sampled {rows.stop}/{sequences} texts "
                f"({time.perf_counter() - start:.0f} s)")
    return tokens, log_p


def forward_kl(student_logits, teacher_log_p):
    """Mean over positions of KL(p || q) in nats, with ``q = softmax(student_logits)``.

    Positions where the teacher gives a byte probability 0 (log-probability ``-inf``)
    contribute nothing for that byte (``0 log 0 = 0``).
    """
    import torch
    from torch.nn import functional as F
    log_q = F.log_softmax(student_logits.float(), dim=-1)
    p = teacher_log_p.exp()
    safe = torch.where(p > 0, teacher_log_p, torch.zeros_like(teacher_log_p))
    return (p * (safe - log_q)).sum(-1).mean()


def train_one(name: str, corpus: Corpus, out: Path = MODELS_DIR, log=print) -> dict:
    import torch
    from torch.nn import functional as F
    torch.set_num_threads(THREADS)
    arch, cfg = ARCHS[name], TRAINING[name]
    torch.manual_seed(cfg["seed"])
    rng = np.random.default_rng(cfg["seed"])
    model = torch_model(arch)
    growth = GROWTH.get(name)
    if growth is not None:                      # Net2Net: start from the trained base model
        from specdec import nn as snn
        base = snn.Transformer.load(out / f"{growth['base']}.npz", growth["base"])
        grown, grown_arch = grow(base.weights, ARCHS[growth["base"]], growth["widen"],
                                 growth["new_layers"], growth["noise"],
                                 np.random.default_rng([cfg["seed"], 1]))
        if grown_arch != arch:
            raise ValueError(f"{name}: growth gives {grown_arch}, ARCHS says {arch}")
        from_numpy_weights(model, grown)
    distill = DISTILL.get(name)
    sampling_seconds = None
    if distill is not None:                     # DistillSpec: start from the trained draft
        from specdec import nn as snn
        from_numpy_weights(model, snn.Transformer.load(out / f"{distill['base']}.npz",
                                                       distill["base"]).weights)
        teacher = snn.Transformer.load(out / f"{distill['teacher']}.npz", distill["teacher"])
        t_sampling = time.perf_counter()
        d_tokens, d_log_p = teacher_samples(
            corpus.train, teacher, distill["sequences"], distill["prefix_bytes"],
            distill["temperature"], distill["teacher_batch"],
            np.random.default_rng([cfg["seed"], 2]), log=log)
        sampling_seconds = time.perf_counter() - t_sampling
        d_from = distill["prefix_bytes"] - 1    # first position predicting a sampled byte
        del teacher
    decay = [p for n, p in model.named_parameters() if p.ndim == 2]
    other = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(0.9, 0.95))
    steps, warmup = cfg["steps"], max(cfg["steps"] // 20, 1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warmup, 0.5 * (
        1 + math.cos(math.pi * min(s / steps, 1.0)))) if s >= warmup else (s + 1) / warmup)
    stream = batches(corpus.train, cfg["batch"], arch["context"], rng)
    start, losses = time.perf_counter(), []
    model.train()
    for step in range(steps):
        if distill is not None:                 # a batch of the teacher's texts
            pick = rng.integers(0, d_tokens.shape[0], size=cfg["batch"])
            logits = model(torch.from_numpy(d_tokens[pick, :-1]))
            loss = forward_kl(logits[:, d_from:], torch.from_numpy(d_log_p[pick]))
        else:
            xy = torch.from_numpy(next(stream))
            logits = model(xy[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, arch["vocab_size"]),
                                   xy[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % 100 == 0 or step == steps - 1 or (name in GROWTH and step % 10 == 0):
            log(f"[{name}] step {step:5d}/{steps} loss {loss.item():.4f} "
                f"({(time.perf_counter() - start):.0f} s)")
    seconds = time.perf_counter() - start
    storage = STORAGE.get(name, "float32")
    if storage != "float32":                    # evaluate the weights that are stored
        from_numpy_weights(model, {k: v.astype(storage).astype(np.float32)
                                   for k, v in to_numpy_weights(model).items()})
    model.eval()
    heldout_bpb = {}
    with torch.no_grad():
        for lang in LANGUAGES:
            data = "".join(it + SEPARATOR for it in corpus.heldout_items[lang]).encode("utf-8")
            heldout_bpb[lang] = torch_bits_per_byte(model, data, arch["context"])
    weights = {k: v.astype(storage) for k, v in to_numpy_weights(model).items()}
    n_params = int(sum(p.numel() for p in model.parameters()))
    np.savez(out / f"{name}.npz", **weights)
    info = dict(name=name, architecture=arch, training=dict(cfg, threads=THREADS,
                optimizer="AdamW(betas=(0.9, 0.95), weight_decay=0.1 on matrices)",
                schedule="linear warm-up 5%, cosine decay", grad_clip=1.0,
                windows_per_language_per_batch=cfg["batch"] // len(LANGUAGES),
                **({"growth": dict(GROWTH[name], method="Net2Net (Chen, Goodfellow, "
                                   "Shlens 2016): widened, identity blocks appended")}
                   if name in GROWTH else {}),
                **({"distillation": dict(DISTILL[name], loss="forward KL, nats per position",
                                         method="DistillSpec (Zhou et al. 2024): the "
                                         "teacher's samples, its full next-byte law as "
                                         "soft labels")} if name in DISTILL else {})),
                storage=storage,
                **({"sampling_seconds": round(sampling_seconds, 1)}
                   if sampling_seconds is not None else {}),
                parameters=n_params, training_seconds=round(seconds, 1),
                final_train_loss_nats=round(float(np.mean(losses[-50:])), 4),
                heldout_bits_per_byte_full=heldout_bpb)
    (out / f"{name}.train.json").write_text(json.dumps(info, indent=2) + "\n")
    log(f"[{name}] done in {seconds:.0f} s; held-out bits/byte {heldout_bpb}")
    return info


def torch_bits_per_byte(model, data: bytes, context: int, batch: int = 64) -> float:
    """Mean next-byte cross-entropy in bits over non-overlapping windows of ``context``.

    The full windows are scored ``batch`` at a time (one forward pass each; the windows are
    independent, so batching changes only the order of float reductions), the shorter last
    window alone.
    """
    import torch
    from torch.nn import functional as F
    arr = np.frombuffer(data, dtype=np.uint8).astype(np.int64)
    n_full = (len(arr) - 1) // context if len(arr) > 1 else 0
    full = torch.from_numpy(arr[:n_full * context].reshape(n_full, context))
    total, count = 0.0, 0
    for s in range(0, n_full, batch):
        w = full[s:s + batch]
        logits = model(w)
        total += float(F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                       w[:, 1:].reshape(-1), reduction="sum"))
        count += w.shape[0] * (context - 1)
    tail = torch.from_numpy(arr[n_full * context:])[None]
    if tail.shape[1] >= 2:
        logits = model(tail)
        total += float(F.cross_entropy(logits[0, :-1], tail[0, 1:], reduction="sum"))
        count += tail.shape[1] - 1
    return round(total / count / math.log(2), 4)


# ------------------------------------------------------------------------- manifest

def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_manifest(corpus_info: dict, out: Path = MODELS_DIR) -> dict:
    import torch
    from specdec import nn as snn
    sample = snn.load_heldout(out)
    models = {}
    for name in ARCHS:
        info = json.loads((out / f"{name}.train.json").read_text())
        model = snn.Transformer.load(out / f"{name}.npz")
        info["shapes"] = {k: list(v.shape) for k, v in model.weights.items()}
        info["file"] = f"{name}.npz"
        info["sha256"] = file_sha256(out / f"{name}.npz")
        info["sample_bits_per_byte"] = {
            lang: round(snn.bits_per_byte(model, sample[lang]["text"].encode("utf-8")), 4)
            for lang in LANGUAGES}
        models[name] = info
    manifest = dict(
        description="Byte-level transformers trained on multilingual fortunes for chapter 8.",
        tokens="UTF-8 bytes (vocabulary 256)", precision="float32",
        models=models,
        bits_per_byte=dict(
            definition=("mean next-byte cross-entropy in bits over consecutive "
                        "non-overlapping windows of `context` bytes; the first byte of each "
                        "window is conditioned on nothing and not scored"),
            heldout_bits_per_byte_full="all held-out items of the language (torch)",
            sample_bits_per_byte="the committed sample models/heldout.json (numpy, specdec.nn)"),
        corpus=corpus_info,
        heldout_sample=dict(file="heldout.json", sha256=file_sha256(out / "heldout.json")),
        versions=dict(torch=torch.__version__, numpy=np.__version__,
                      python=platform.python_version()),
        threads=THREADS,
        machine=dict(processor=_cpu_model(), cores=os.cpu_count()),
        training_seconds_note=("wall-clock seconds of each model's training loop on the "
                               "machine above, shared with other jobs while training: "
                               "a measure of this run, not of the model"),
    )
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2,
                                                   ensure_ascii=False) + "\n")
    return manifest


def check(out: Path, tolerance: float = TOLERANCE, names=tuple(ARCHS),
          reference: Path = MODELS_DIR) -> bool:
    """Bits per byte of the models in ``out`` on the committed sample vs the manifest.

    Prints one row per model and language (committed, retrained, difference, ok) and
    returns whether every difference is within ``tolerance`` bits per byte.
    """
    from specdec import nn as snn
    manifest = snn.load_manifest(reference)
    sample = snn.load_heldout(reference)
    print(f"reproduction check: {out} vs {reference / 'manifest.json'} on "
          f"{reference / 'heldout.json'}, tolerance {tolerance} bits/byte")
    print(f"{'model':<12} {'lang':<4} {'committed':>9} {'retrained':>9} {'difference':>10} ok")
    passed = True
    for name in names:
        committed = manifest["models"][name]
        path = out / f"{name}.npz"
        if not path.exists():
            print(f"{name:<12} missing {path}")
            passed = False
            continue
        model = snn.Transformer.load(path, name)
        for lang in LANGUAGES:
            want = committed["sample_bits_per_byte"][lang]
            got = round(snn.bits_per_byte(model, sample[lang]["text"].encode("utf-8")), 4)
            ok = abs(got - want) <= tolerance
            passed &= ok
            print(f"{name:<12} {lang:<4} {want:9.4f} {got:9.4f} {got - want:+10.4f} "
                  f"{'yes' if ok else 'NO'}")
        same = file_sha256(path) == committed["sha256"]
        print(f"{name:<12} weights {'identical to' if same else 'differ from'} the committed file")
    print("reproduction check", "passed" if passed else "FAILED")
    return passed


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def corpus_step(out: Path = MODELS_DIR) -> dict:
    corpus = build_corpus()
    out.mkdir(parents=True, exist_ok=True)
    sample = heldout_sample(corpus)
    (out / "heldout.json").write_text(json.dumps(sample, indent=1, ensure_ascii=False) + "\n")
    info = dict(sha256=corpus.sha256, holdout_share=HOLDOUT_SHARE, sample_seed=CORPUS_SEED,
                sample=(f"heldout.json: held-out items in a seeded random order, up to "
                        f"{SAMPLE_BYTES} bytes per language, and {PROMPTS_PER_LANGUAGE} "
                        f"prompts of at most {PROMPT_BYTES} bytes"),
                split="sha256(lang + NUL + item) as a number in [0, 1) < holdout_share",
                separator=SEPARATOR, cleaning=("ANSI colour codes, overstrike (x BACKSPACE) "
                "and other control characters removed; tabs to 4 spaces; NFC"),
                excluded="fortunes-es off/ (offensive) folder",
                packages={p: dict(licence=LICENCES[p], version=_dpkg_version(p))
                          for ps in PACKAGES.values() for p in ps},
                languages=corpus.stats, files=corpus.files)
    (out / "corpus.json").write_text(json.dumps(info, indent=2) + "\n")
    return corpus, info


def _dpkg_version(package: str) -> str:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package],
                         capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("steps", nargs="*",
                        help="corpus, train, manifest, check (default: corpus train manifest)")
    parser.add_argument("--models", nargs="*", default=list(ARCHS),
                        help=f"models to train and check (default: {' '.join(ARCHS)})")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "models",
                        help="directory written by corpus/train/manifest and read by check "
                             "(default: _build/models; adopting a run means --out "
                             "specdec/data/models)")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE,
                        help=f"check: largest accepted |difference| in bits/byte "
                             f"(default: {TOLERANCE})")
    args = parser.parse_args(argv)
    args.steps = args.steps or ["corpus", "train", "manifest"]
    out = args.out.resolve()
    for value, allowed in ((args.steps, ("corpus", "train", "manifest", "check")),
                           (args.models, ARCHS)):
        bad = [v for v in value if v not in allowed]
        if bad:
            parser.error(f"unknown {bad}; choose from {', '.join(allowed)}")
    if "check" in args.steps and out == MODELS_DIR and len(args.steps) > 1:
        parser.error("check compares with the committed specdec/data/models/: write the retrained "
                     "models elsewhere with --out DIR")
    corpus = None
    if "corpus" in args.steps or "train" in args.steps:
        corpus, info = corpus_step(out)
        print(json.dumps(info["languages"], indent=1))
    if "train" in args.steps:
        for name in args.models:
            train_one(name, corpus, out)
    if "manifest" in args.steps:
        info = json.loads((out / "corpus.json").read_text())
        write_manifest(info, out)
        print(f"wrote {out / 'manifest.json'}")
    if "check" in args.steps and not check(out, args.tolerance, args.models):
        sys.exit(1)


if __name__ == "__main__":
    main()
