"""A small byte-level transformer in numpy: forward pass, KV cache, block scoring, rollback.

This is the inference side of the real models of chapter 8. The weights are trained by
``tools/train_models.py`` (PyTorch, ``make models``) and committed as package data,
``specdec/data/models/*.npz`` (so an installed copy has them); nothing here needs PyTorch. The architecture is a pre-LayerNorm GPT:

* token embedding ``tok_emb`` (V, d) and learned positions ``pos_emb`` (context, d);
* ``n_layers`` blocks ``x + proj(attn(ln1(x)))`` then ``x + out(gelu(fc(ln2(x))))``,
  causal multi-head attention, tanh-approximated GELU, linear layers without biases;
* final LayerNorm and an output head tied to the token embedding.

Decoding keeps one key/value cache per model (:class:`KVCache`) with one length per
sequence of the batch. :meth:`Transformer.forward` appends any number of new tokens to
every sequence at once, which is how a target scores a whole draft block of gamma + 1
positions in one pass; :meth:`KVCache.truncate` rolls back the unconfirmed tail after a
rejection. Sequences of a batch may have different lengths (ragged speculative batches):
new tokens are right-padded and every row uses its own positions and causal mask.

Everything is computed in float32 (weights, activations, cache); logits are returned as
float32. A weight file may store float16 (the large target does, to keep the committed
weights small); it is converted to float32 when loaded.

References
----------
Vaswani et al. (2017), Attention is all you need, NeurIPS, section 3.
Radford et al. (2019), Language models are unsupervised multitask learners (GPT-2 layout).
Leviathan, Kalman, Matias (2023), Fast Inference from Transformers via Speculative
Decoding, ICML, PMLR 202, section 3 (block scoring of the draft by the target).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

__all__ = [
    "TransformerConfig",
    "Transformer",
    "KVCache",
    "MODELS_DIR",
    "LANGUAGES",
    "encode",
    "decode",
    "load_model",
    "load_manifest",
    "load_heldout",
    "bits_per_byte",
]

#: The committed chapter-8 models, shipped as package data (an installed copy has them).
MODELS_DIR = Path(__file__).resolve().parent / "data" / "models"
LANGUAGES = ("it", "en", "zh", "es")
_F32 = np.float32
_GELU_C = _F32(math.sqrt(2.0 / math.pi))
_LN_EPS = _F32(1e-5)


def encode(text: str) -> np.ndarray:
    """UTF-8 bytes of ``text`` as token ids.

    Parameters
    ----------
    text : str

    Returns
    -------
    numpy.ndarray
        Shape (len(text.encode()),), dtype int64, values in [0, 256).

    Examples
    --------
    >>> encode("ab").tolist()
    [97, 98]
    """
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)


def decode(tokens: Sequence[int]) -> str:
    """Text of a byte-token sequence (invalid UTF-8 shown as U+FFFD).

    Examples
    --------
    >>> decode([99, 105, 97, 111])
    'ciao'
    """
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


@dataclass(frozen=True)
class TransformerConfig:
    """Shape of a :class:`Transformer`.

    Parameters
    ----------
    n_layers, d_model, n_heads, context, vocab_size : int
        Number of blocks, model width, attention heads (``d_model % n_heads == 0``),
        maximum sequence length (positions), vocabulary size (256 for bytes).
    """

    n_layers: int
    d_model: int
    n_heads: int
    context: int
    vocab_size: int = 256

    def __post_init__(self) -> None:
        for name in ("n_layers", "d_model", "n_heads", "context", "vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: must be an integer >= 1 (got {value!r})")
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads: must divide d_model ({self.d_model} % {self.n_heads} != 0)")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """Parameter name -> shape, in the numpy layout (linear weights as (in, out))."""
        d, v = self.d_model, self.vocab_size
        shapes = {"tok_emb.weight": (v, d), "pos_emb.weight": (self.context, d),
                  "ln_f.weight": (d,), "ln_f.bias": (d,)}
        for i in range(self.n_layers):
            p = f"blocks.{i}."
            shapes.update({p + "ln1.weight": (d,), p + "ln1.bias": (d,),
                           p + "qkv.weight": (d, 3 * d), p + "proj.weight": (d, d),
                           p + "ln2.weight": (d,), p + "ln2.bias": (d,),
                           p + "fc.weight": (d, 4 * d), p + "out.weight": (4 * d, d)})
        return shapes


class KVCache:
    """Keys and values of the tokens a model has already processed, per sequence.

    Parameters
    ----------
    config : TransformerConfig
    batch : int
        Number of sequences B.
    capacity : int, optional
        Positions stored per sequence; defaults to ``config.context + 16`` so that the
        right padding of a ragged block never overflows.

    Attributes
    ----------
    keys, values : list of numpy.ndarray
        One array per layer, shape (B, n_heads, capacity, head_dim), float32.
    lengths : numpy.ndarray
        Shape (B,), int64: number of valid positions of each sequence. Positions at or
        beyond ``lengths[b]`` hold stale data that is never attended to.
    """

    def __init__(self, config: TransformerConfig, batch: int, capacity: int | None = None):
        if not isinstance(batch, (int, np.integer)) or batch < 1:
            raise ValueError(f"batch: must be an integer >= 1 (got {batch!r})")
        capacity = config.context + 16 if capacity is None else int(capacity)
        shape = (int(batch), config.n_heads, capacity, config.head_dim)
        self.config = config
        self.keys = [np.zeros(shape, _F32) for _ in range(config.n_layers)]
        self.values = [np.zeros(shape, _F32) for _ in range(config.n_layers)]
        self.lengths = np.zeros(int(batch), dtype=np.int64)

    @property
    def batch(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def capacity(self) -> int:
        return int(self.keys[0].shape[2]) if self.keys else 0

    def truncate(self, lengths) -> None:
        """Roll back: keep only the first ``lengths[b]`` positions of each sequence.

        Parameters
        ----------
        lengths : int or array_like of int, shape (B,)
            New lengths; each must be between 0 and the current length.

        Raises
        ------
        ValueError
            If a new length is negative or longer than the current one.
        """
        new = np.array(lengths, dtype=np.int64)          # a copy: the caller keeps theirs
        if new.shape != self.lengths.shape:
            if new.ndim:
                raise ValueError(f"lengths: must be one integer or {self.batch} integers "
                                 f"(got shape {new.shape})")
            new = np.full(self.lengths.shape, new, dtype=np.int64)
        if ((new < 0) | (new > self.lengths)).any():      # one pass: this runs every cycle
            raise ValueError(f"lengths: must be between 0 and the current lengths "
                             f"{self.lengths.tolist()} (got {new.tolist()})")
        self.lengths = new

    def copy(self) -> "KVCache":
        """An independent copy (same contents)."""
        out = KVCache.__new__(KVCache)
        out.config = self.config
        out.keys = [k.copy() for k in self.keys]
        out.values = [v.copy() for v in self.values]
        out.lengths = self.lengths.copy()
        return out

    def repeat(self, batch: int) -> "KVCache":
        """A batch-``batch`` cache whose rows are copies of this batch-1 cache."""
        if self.batch != 1:
            raise ValueError(f"batch: repeat needs a cache of batch 1 (got {self.batch})")
        out = KVCache.__new__(KVCache)
        out.config = self.config
        out.keys = [np.repeat(k, batch, axis=0) for k in self.keys]
        out.values = [np.repeat(v, batch, axis=0) for v in self.values]
        out.lengths = np.repeat(self.lengths, batch)
        return out

    def select(self, rows) -> "KVCache":
        """A cache holding only the given rows (in that order), e.g. to drop finished requests."""
        rows = np.asarray(rows, dtype=np.int64)
        out = KVCache.__new__(KVCache)
        out.config = self.config
        out.keys = [k[rows] for k in self.keys]
        out.values = [v[rows] for v in self.values]
        out.lengths = self.lengths[rows].copy()
        return out

    @property
    def nbytes(self) -> int:
        """Memory held by the keys and values, in bytes."""
        return int(sum(k.nbytes + v.nbytes for k, v in zip(self.keys, self.values)))


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    inv_d = _F32(1.0 / x.shape[-1])
    xc = x - np.add.reduce(x, axis=-1, keepdims=True) * inv_d
    var = np.add.reduce(xc * xc, axis=-1, keepdims=True) * inv_d
    return xc / np.sqrt(var + _LN_EPS) * w + b


def _linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w`` for x (B, T, n) as one (B*T, n) matrix product: numpy multiplies a stacked
    3-D operand one (T, n) slice at a time, re-reading ``w`` for each (B = 128, T = 1 on the
    large target: about 3x slower)."""
    return (x.reshape(-1, x.shape[-1]) @ w).reshape(*x.shape[:-1], w.shape[1])


def _gelu(x: np.ndarray) -> np.ndarray:
    return _F32(0.5) * x * (_F32(1.0) + np.tanh(_GELU_C * (x + _F32(0.044715) * x * x * x)))


class Transformer:
    """A decoder-only transformer with numpy float32 inference.

    Parameters
    ----------
    config : TransformerConfig
    weights : mapping of str to numpy.ndarray
        Parameters in the numpy layout of :meth:`TransformerConfig.expected_shapes`
        (the names of the PyTorch twin in ``tools/train_models.py``; linear weights
        transposed to (in, out)).
    name : str, optional
        A label used in reports.

    Raises
    ------
    ValueError
        If a parameter is missing, has the wrong shape or is not finite.

    Examples
    --------
    >>> cfg = TransformerConfig(n_layers=1, d_model=8, n_heads=2, context=16)
    >>> model = Transformer.random(cfg, np.random.default_rng(0))
    >>> model.forward(np.array([[1, 2, 3]])).shape
    (1, 3, 256)
    """

    def __init__(self, config: TransformerConfig, weights: Mapping[str, np.ndarray],
                 name: str = "model"):
        expected = config.expected_shapes()
        missing = sorted(set(expected) - set(weights))
        if missing:
            raise ValueError(f"weights: missing parameters {missing[:4]}")
        extra = sorted(k for k in set(weights) - set(expected) if not k.startswith("__"))
        if extra:
            raise ValueError(f"weights: unexpected parameters {extra[:4]}")
        w = {}
        for key, shape in expected.items():
            arr = np.asarray(weights[key], dtype=_F32)
            if arr.shape != shape:
                raise ValueError(f"weights: {key} has shape {arr.shape}, expected {shape}")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"weights: {key} has non-finite values")
            w[key] = np.ascontiguousarray(arr)
        self.config = config
        self.name = name
        self.weights = w
        self._head = np.ascontiguousarray(w["tok_emb.weight"].T)
        self._layers = [tuple(w[f"blocks.{i}.{k}"] for k in (
            "ln1.weight", "ln1.bias", "qkv.weight", "proj.weight",
            "ln2.weight", "ln2.bias", "fc.weight", "out.weight"))
            for i in range(config.n_layers)]
        self._scale = _F32(1.0 / math.sqrt(config.head_dim))

    # ------------------------------------------------------------------ construction
    @classmethod
    def random(cls, config: TransformerConfig, rng: np.random.Generator,
               name: str = "random") -> "Transformer":
        """A model with random weights (for tests and examples)."""
        weights = {}
        for key, shape in config.expected_shapes().items():
            if key.endswith(("ln1.weight", "ln2.weight", "ln_f.weight")):
                weights[key] = np.ones(shape, _F32)
            elif key.endswith("bias"):
                weights[key] = np.zeros(shape, _F32)
            else:
                weights[key] = (0.3 * rng.standard_normal(shape)).astype(_F32)
        return cls(config, weights, name=name)

    @classmethod
    def load(cls, path: str | Path, name: str | None = None) -> "Transformer":
        """Read a model from an ``.npz`` file written by ``tools/train_models.py``.

        The architecture is taken from ``manifest.json`` next to the file.
        """
        path = Path(path)
        manifest_path = path.parent / "manifest.json"
        name = name or path.stem
        arch = None
        if manifest_path.exists():
            arch = json.loads(manifest_path.read_text())["models"].get(name, {}).get("architecture")
        if arch is None:
            info = path.parent / f"{path.stem}.train.json"
            if not info.exists():
                raise ValueError(f"path: no architecture found for {path.name} "
                                 f"(neither manifest.json nor {info.name})")
            arch = json.loads(info.read_text())["architecture"]
        with np.load(path) as data:
            weights = {k: data[k] for k in data.files}
        return cls(TransformerConfig(**arch), weights, name=name)

    # ------------------------------------------------------------------ properties
    @property
    def n_parameters(self) -> int:
        """Number of parameters (the tied head counted once)."""
        return int(sum(v.size for v in self.weights.values()))

    def weight_hash(self) -> str:
        """sha256 of the parameters (name, shape, float32 bytes), hex; stable across files."""
        h = hashlib.sha256()
        for key in sorted(self.weights):
            arr = self.weights[key]
            h.update(key.encode() + str(arr.shape).encode() + arr.tobytes())
        return h.hexdigest()

    def new_cache(self, batch: int = 1, capacity: int | None = None) -> KVCache:
        """An empty cache for ``batch`` sequences of at most ``capacity`` positions
        (default: the context plus room for padding)."""
        return KVCache(self.config, batch, capacity)

    # ------------------------------------------------------------------ forward
    def forward(self, tokens, cache: KVCache | None = None, lengths=None) -> np.ndarray:
        """Logits for every new position, appending the new tokens to ``cache``.

        Parameters
        ----------
        tokens : array_like of int, shape (B, T) or (T,)
            New tokens of each sequence, right-padded when rows have different numbers
            of new tokens.
        cache : KVCache, optional
            State of the B sequences; updated in place (keys/values written, lengths
            increased by ``lengths``). Without a cache, the tokens are a fresh batch.
        lengths : array_like of int, shape (B,), optional
            Number of real (non-padding) new tokens of each row, each in [0, T];
            defaults to T. Padding positions (and every position of a row with 0 new
            tokens) produce logits that must be ignored.

        Returns
        -------
        numpy.ndarray
            Shape (B, T, V) (or (T, V) for 1-D input), float32 logits: row ``b``,
            position ``t`` is the next-token score vector after the sequence's first
            ``cache.lengths[b] + t + 1`` tokens.

        Raises
        ------
        ValueError
            Token ids out of range, bad shapes, or a sequence longer than the context.
        """
        tokens = np.asarray(tokens)
        squeeze = tokens.ndim == 1
        if squeeze:
            tokens = tokens[None, :]
        if tokens.ndim != 2 or tokens.shape[1] < 1:
            raise ValueError(f"tokens: must have shape (B, T) with T >= 1 (got {tokens.shape})")
        if not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"tokens: must be integers (got dtype {tokens.dtype})")
        cfg = self.config
        if tokens.size and (tokens.min() < 0 or tokens.max() >= cfg.vocab_size):
            raise ValueError(f"tokens: ids must lie in [0, {cfg.vocab_size})")
        b, t = tokens.shape
        if cache is None:
            cache = KVCache(cfg, b, capacity=max(t, 1))
        if cache.batch != b:
            raise ValueError(f"tokens: batch {b} does not match the cache ({cache.batch})")
        if lengths is None:
            new = np.full(b, t, dtype=np.int64)
        else:
            new = np.asarray(lengths, dtype=np.int64).reshape(-1)
            if new.shape != (b,) or np.any(new < 0) or np.any(new > t):
                raise ValueError(f"lengths: must be {b} integers in [0, {t}] (got {new.tolist()})")
        start = cache.lengths
        if np.any(start + new > cfg.context):
            raise ValueError(f"tokens: sequence length {int((start + new).max())} exceeds "
                             f"the model context ({cfg.context})")
        if int(start.max()) + t > cache.capacity:
            raise ValueError(f"cache: capacity {cache.capacity} too small for "
                             f"{int(start.max()) + t} positions")
        pos = start[:, None] + np.arange(t)                      # (B, T)
        x = self.weights["tok_emb.weight"][tokens] + \
            self.weights["pos_emb.weight"][np.minimum(pos, cfg.context - 1)]
        span = int(start.max()) + t                                # keys to look at
        key_pos = np.arange(span)
        mask = key_pos[None, None, None, :] > pos[:, None, :, None]  # (B, 1, T, L)
        bias = np.where(mask, _F32(-np.inf), _F32(0.0)) if mask.any() else None
        rows = np.arange(b)[:, None]
        h, dh = cfg.n_heads, cfg.head_dim
        for layer, (ln1w, ln1b, wqkv, wproj, ln2w, ln2b, wfc, wout) in enumerate(self._layers):
            z = _linear(_layer_norm(x, ln1w, ln1b), wqkv)           # (B, T, 3d)
            z = z.reshape(b, t, 3, h, dh)
            kc, vc = cache.keys[layer], cache.values[layer]
            kc[rows, :, pos] = z[:, :, 1]                           # (B, T, H, dh)
            vc[rows, :, pos] = z[:, :, 2]
            q = z[:, :, 0].transpose(0, 2, 1, 3)                    # (B, H, T, dh)
            scores = (q @ kc[:, :, :span].transpose(0, 1, 3, 2)) * self._scale
            if bias is not None:
                scores += bias
            scores -= np.maximum.reduce(scores, axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= np.add.reduce(scores, axis=-1, keepdims=True)
            y = (scores @ vc[:, :, :span]).transpose(0, 2, 1, 3).reshape(b, t, cfg.d_model)
            x = x + _linear(y, wproj)
            x = x + _linear(_gelu(_linear(_layer_norm(x, ln2w, ln2b), wfc)), wout)
        logits = _linear(_layer_norm(x, self.weights["ln_f.weight"], self.weights["ln_f.bias"]),
                         self._head)
        cache.lengths = start + new
        return logits[0] if squeeze else logits

    def __repr__(self) -> str:
        c = self.config
        return (f"Transformer(name={self.name!r}, layers={c.n_layers}, d_model={c.d_model}, "
                f"heads={c.n_heads}, context={c.context}, parameters={self.n_parameters})")


# ---------------------------------------------------------------------- evaluation
def bits_per_byte(model: Transformer, data: bytes | str, window: int | None = None) -> float:
    """Mean next-byte cross-entropy in bits.

    The data is cut into consecutive non-overlapping windows of ``window`` bytes
    (default: the model context); inside each window every byte but the first is
    predicted from the bytes before it in the window. This is the definition used for
    ``specdec/data/models/manifest.json``.

    Parameters
    ----------
    model : Transformer
    data : bytes or str
        Text (UTF-8 encoded if a string), at least 2 bytes.
    window : int, optional

    Returns
    -------
    float
        Bits per predicted byte.
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    arr = np.frombuffer(bytes(data), dtype=np.uint8).astype(np.int64)
    if arr.size < 2:
        raise ValueError("data: needs at least 2 bytes")
    window = model.config.context if window is None else int(window)
    if not 2 <= window <= model.config.context:
        raise ValueError(f"window: must be in [2, {model.config.context}] (got {window})")
    n_full = (arr.size // window) * window
    chunks = [arr[:n_full].reshape(-1, window)] if n_full else []
    if arr.size - n_full >= 2:
        chunks.append(arr[n_full:][None, :])
    total, count = 0.0, 0
    for chunk in chunks:
        for s in range(0, chunk.shape[0], 64):
            block = chunk[s:s + 64]
            logits = model.forward(block).astype(np.float64)[:, :-1]
            logits -= logits.max(axis=-1, keepdims=True)
            logp = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
            target = block[:, 1:]
            total -= float(np.take_along_axis(logp, target[..., None], axis=-1).sum())
            count += target.size
    return total / count / math.log(2.0)


# ------------------------------------------------------------------------- loading
def _missing(path: Path) -> str:
    return (f"{path} not found: the models are package data of specdec, so an installed "
            f"copy lacking them is broken (pip install it again); in a checkout, "
            f"`make models` rebuilds them")


def load_manifest(models_dir: str | Path | None = None) -> dict:
    """The parsed ``specdec/data/models/manifest.json``."""
    path = Path(models_dir or MODELS_DIR) / "manifest.json"
    if not path.exists():
        raise FileNotFoundError(_missing(path))
    return json.loads(path.read_text())


def load_model(name: str, models_dir: str | Path | None = None) -> Transformer:
    """Load a committed model by name: ``"target"``, ``"draft"``, ``"draft_distilled"``,
    ``"target_wide"`` or ``"target_large"`` (Net2Net-grown, float16 on disk).

    Examples
    --------
    >>> draft = load_model("draft")
    >>> draft.config.n_layers, draft.config.d_model, draft.n_parameters
    (1, 64, 74112)
    """
    models_dir = Path(models_dir or MODELS_DIR)
    path = models_dir / f"{name}.npz"
    if not path.exists():
        known = sorted(p.stem for p in models_dir.glob("*.npz"))
        if known:
            raise FileNotFoundError(f"name: no model {name!r} in {models_dir} (it has "
                                    f"{', '.join(known)})")
        raise FileNotFoundError(_missing(path))
    return Transformer.load(path, name=name)


def load_heldout(models_dir: str | Path | None = None) -> dict[str, dict]:
    """The committed held-out sample: ``{lang: {"text": str, "prompts": [str, ...]}}``."""
    path = Path(models_dir or MODELS_DIR) / "heldout.json"
    if not path.exists():
        raise FileNotFoundError(_missing(path))
    return json.loads(path.read_text())["languages"]
