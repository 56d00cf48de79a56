"""Toy autoregressive models: prefix-dependent target and draft laws with end-of-sequence.

A speculative *block* is only interesting when the next-token law depends on the prefix:
every drafted token changes the context of the next one, and a rejected token changes the
context of everything after it. The models here are small enough that the law of a whole
sequence can be computed by enumeration, yet they have the two features that matter:

- the law of the next token depends on the prefix (through its last ``order`` tokens and
  its length, i.e. the position), so a stale or polluted context changes the law;
- one token id is the end-of-sequence token (EOS): once it is emitted the sequence stops.

A :class:`ToyModel` is either an explicit table (seeded constructors below) or any
function of the prefix. Prefixes are tuples of token ids and include the prompt.

Sequence convention
-------------------
The law of "the next L tokens" is a ``dict`` mapping token tuples to probabilities. A
sequence that reaches EOS stops there: its key ends with the EOS id and is *shorter* than
L (it is not padded). Every other key has length exactly L. The keys of a law therefore
form a prefix-free set and their probabilities sum to 1.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023, Sec. 2.3 (the draft runs autoregressively; the
   target scores all drafted positions in parallel).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from specdec.laws import LawError, check_int, check_law
from specdec.verify import check_rng

__all__ = [
    "ToyModel",
    "TOY_SEED",
    "random_model",
    "perturbed_draft",
    "toy_pair",
    "model_from_function",
    "sequence_law",
    "check_prefix",
    "check_models",
]

#: Seed of the default toy pair used across the book and the tests.
TOY_SEED = 20260924


def _check_table(table, vocab_size: int, order: int) -> np.ndarray:
    arr = np.array(table, dtype=np.float64, copy=True)
    n_ctx = (vocab_size + 1) ** order
    if arr.ndim != 3 or arr.shape[1:] != (n_ctx, vocab_size) or arr.shape[0] < 1:
        raise LawError(
            f"table: must have shape (positions, (V + 1) ** order, V) = (P, {n_ctx}, {vocab_size})"
            f" with P >= 1 (got {arr.shape})"
        )
    if not np.isfinite(arr).all():
        raise LawError("table: entries must be finite")
    if (arr < 0).any():
        raise LawError(f"table: entries must be non-negative (min = {arr.min():.6g})")
    sums = arr.sum(axis=-1)
    worst = np.unravel_index(np.argmax(np.abs(sums - 1.0)), sums.shape)
    if abs(sums[worst] - 1.0) > 1e-9:
        raise LawError(
            f"table: every row must sum to 1 (row position={worst[0]}, context={worst[1]} "
            f"sums to {sums[worst]:.12g})"
        )
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class ToyModel:
    """A small autoregressive language model with an explicit next-token law.

    The law of the next token given a prefix is either read from ``table`` or returned by
    ``law_fn``; exactly one of them must be given.

    Table models depend on the prefix only through its length (the position,
    ``t = len(prefix)``, clipped to ``P - 1``) and its last ``order`` tokens (a missing
    token before the start of the prefix is the begin marker, coded ``V``)::

        next_law(prefix) = table[min(t, P - 1), context_index(prefix[-order:])]

    where ``context_index(x_1, ..., x_k) = sum_j c_j (V + 1) ** j`` with ``c_0`` the last
    token, ``c_1`` the one before, and so on (``c_j = V`` before the start).

    Parameters
    ----------
    vocab_size : int
        Number of token ids V (>= 2). Ids are ``0 .. V - 1``.
    eos : int or None
        Id of the end-of-sequence token, or ``None`` if sequences never stop.
    table : array_like, shape (P, (V + 1) ** order, V), optional
        Next-token laws (probabilities). Validated (finite, non-negative, rows sum to 1)
        and stored read-only.
    law_fn : callable, optional
        ``law_fn(prefix: tuple[int, ...]) -> array_like (V,)``; its output is validated
        on every call with :func:`specdec.laws.check_law`.
    order : int
        Number of trailing tokens a table model looks at (>= 1). Ignored by ``law_fn``.
    name : str
        Label used in plots and messages.

    Raises
    ------
    LawError
        On an invalid table.
    ValueError, TypeError
        On an invalid vocabulary size, EOS id or order (:func:`specdec.laws.check_int`);
        when both or neither of ``table`` and ``law_fn`` are given; ``law_fn`` not callable.

    Examples
    --------
    >>> m = ToyModel(2, eos=1, table=[[[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]])
    >>> m.next_law(()).tolist()          # begin marker (context index V = 2)
    [0.2, 0.8]
    >>> m.next_law((0,)).tolist()
    [0.5, 0.5]
    """

    vocab_size: int
    eos: int | None
    table: np.ndarray | None = None
    law_fn: Callable[[tuple[int, ...]], np.ndarray] | None = None
    order: int = 1
    name: str = "model"
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        v = check_int(self.vocab_size, "vocab_size", minimum=2)
        object.__setattr__(self, "vocab_size", v)
        if self.eos is not None:
            object.__setattr__(self, "eos", check_int(self.eos, "eos", minimum=0, maximum=v - 1))
        object.__setattr__(self, "order", check_int(self.order, "order", minimum=1, maximum=4))
        if (self.table is None) == (self.law_fn is None):
            raise ValueError("table/law_fn: give exactly one of them")
        if self.table is not None:
            object.__setattr__(self, "table", _check_table(self.table, v, self.order))
        elif not callable(self.law_fn):
            raise TypeError(f"law_fn: must be callable (got {type(self.law_fn).__name__})")

    @property
    def positions(self) -> int | None:
        """Number of distinct position slots P of a table model (``None`` for ``law_fn``)."""
        return None if self.table is None else self.table.shape[0]

    @property
    def memory(self) -> int | None:
        """Number of trailing tokens that determine every future law (``None``: all).

        For a table model the law at ``prefix + s`` depends on ``prefix`` only through its
        last ``memory = max(P - 1, order)`` tokens (they fix the clipped position and the
        last ``order`` tokens), so ``prefix[-memory:]`` can replace ``prefix`` in any
        exact computation. A ``law_fn`` model may depend on the whole prefix.
        """
        return None if self.table is None else max(self.table.shape[0] - 1, self.order)

    def context_index(self, prefix: tuple[int, ...]) -> int:
        """Row of ``table`` used after ``prefix`` (see the class docstring)."""
        v = self.vocab_size
        idx = 0
        for j in range(self.order):
            tok = prefix[-1 - j] if j < len(prefix) else v
            idx += tok * (v + 1) ** j
        return idx

    def next_law(self, prefix) -> np.ndarray:
        """Law of the next token after ``prefix``.

        Parameters
        ----------
        prefix : sequence of int
            Token ids (prompt and generated tokens), each in ``[0, V)``.

        Returns
        -------
        numpy.ndarray, shape (V,)
            Probabilities (read-only; cached per prefix).

        Raises
        ------
        LawError
            If a token id is out of range, or ``law_fn`` returns an invalid law.
        """
        if type(prefix) is tuple:
            hit = self._cache.get(prefix)
            if hit is not None:
                return hit
        key = tuple(int(t) for t in prefix)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        check_prefix(key, self.vocab_size, allow_eos=True, eos=self.eos)
        if self.table is not None:
            pos = min(len(key), self.table.shape[0] - 1)
            law = self.table[pos, self.context_index(key)]
        else:
            law = check_law(self.law_fn(key), f"{self.name}.law_fn({key})")
            if law.size != self.vocab_size:
                raise LawError(
                    f"{self.name}.law_fn: vocabulary size {law.size} does not match "
                    f"vocab_size ({self.vocab_size})"
                )
            law.setflags(write=False)
        if len(self._cache) < 200_000:
            self._cache[key] = law
        return law

    def next_law_batch(self, buffer: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Next-token laws for many prefixes at once.

        Parameters
        ----------
        buffer : numpy.ndarray of int, shape (n, W)
            Row ``i`` holds prefix ``i`` in its first ``lengths[i]`` entries (the rest is
            ignored).
        lengths : numpy.ndarray of int, shape (n,)
            Prefix lengths, ``0 <= lengths[i] <= W``.

        Returns
        -------
        numpy.ndarray, shape (n, V)
            Row ``i`` is ``next_law(buffer[i, :lengths[i]])``. Table models are gathered in
            one vectorised step; ``law_fn`` models are called once per distinct prefix.
        """
        buffer = np.asarray(buffer)
        lengths = np.asarray(lengths, dtype=np.int64)
        n = lengths.shape[0]
        if self.table is None:
            out = np.empty((n, self.vocab_size))
            seen: dict[tuple, np.ndarray] = {}
            for i in range(n):
                key = tuple(buffer[i, : lengths[i]].tolist())
                if key not in seen:
                    seen[key] = self.next_law(key)
                out[i] = seen[key]
            return out
        v = self.vocab_size
        pos = np.minimum(lengths, self.table.shape[0] - 1)
        idx = np.zeros(n, dtype=np.int64)
        rows = np.arange(n)
        for j in range(self.order):
            at = lengths - 1 - j
            tok = np.where(at >= 0, buffer[rows, np.maximum(at, 0)], v)
            idx += tok * (v + 1) ** j
        return self.table[pos, idx]


def check_prefix(prefix, vocab_size: int, *, allow_eos: bool = False, eos: int | None = None,
                 name: str = "prefix") -> tuple[int, ...]:
    """Validate a prefix (tuple of token ids) and return it as a tuple of ``int``.

    Raises
    ------
    ValueError
        If an entry is not an integer in ``[0, vocab_size)``, or (unless ``allow_eos``)
        if it contains the end-of-sequence id ``eos``: generation cannot continue a
        sequence that has already ended.
    """
    try:
        out = tuple(int(t) for t in prefix)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: must be a sequence of integer token ids (got {prefix!r})") from None
    for t, raw in zip(out, prefix):
        if t != raw or not 0 <= t < vocab_size:
            raise ValueError(f"{name}: token ids must be integers in [0, {vocab_size}) (got {raw!r})")
    if not allow_eos and eos is not None and eos in out:
        raise ValueError(f"{name}: must not contain the end-of-sequence token {eos} (the sequence has ended)")
    return out


def random_model(vocab_size: int = 4, *, rng=TOY_SEED, order: int = 2, positions: int = 4,
                 eos: int | None = -1, concentration: float = 1.0, eos_weight: float = 0.35,
                 name: str = "target") -> ToyModel:
    """A seeded table model with Dirichlet next-token laws.

    Parameters
    ----------
    vocab_size : int
        V >= 2.
    rng : numpy.random.Generator or int
        Generator (or seed) of the table, see :func:`specdec.verify.check_rng`; the same
        seed gives the same model.
    order : int
        Trailing tokens the law depends on.
    positions : int
        Distinct position slots P (positions ``>= P - 1`` share the last slot).
    eos : int or None
        End-of-sequence id; ``-1`` (default) means the last id ``V - 1``; ``None`` for no EOS.
    concentration : float
        Dirichlet concentration (> 0) of the non-EOS tokens; small values give peaked laws.
    eos_weight : float
        Dirichlet concentration (> 0) of the EOS token; smaller values make sequences
        longer on average.
    name : str
        Label.

    Returns
    -------
    ToyModel
        Table of shape ``(positions, (V + 1) ** order, V)``.

    Raises
    ------
    ValueError
        Invalid sizes, non-positive concentrations.

    Examples
    --------
    >>> m = random_model(3, rng=1, order=1, positions=2)
    >>> m.table.shape
    (2, 4, 3)
    """
    v = check_int(vocab_size, "vocab_size", minimum=2)
    order = check_int(order, "order", minimum=1, maximum=4)
    positions = check_int(positions, "positions", minimum=1)
    if eos == -1:
        eos = v - 1
    for nm, val in (("concentration", concentration), ("eos_weight", eos_weight)):
        if not (np.isfinite(val) and val > 0):
            raise ValueError(f"{nm}: must be finite and > 0 (got {val!r})")
    rng = check_rng(rng)
    conc = np.full(v, float(concentration))
    if eos is not None:
        conc[check_int(eos, "eos", minimum=0, maximum=v - 1)] = float(eos_weight)
    table = rng.dirichlet(conc, size=(positions, (v + 1) ** order))
    return ToyModel(v, eos, table=table, order=order, name=name)


def perturbed_draft(target: ToyModel, closeness: float, *, rng=TOY_SEED + 1,
                    concentration: float = 1.0, name: str = "draft") -> ToyModel:
    """A draft model that mixes the target's table with independent noise.

    ``q = closeness * p + (1 - closeness) * n`` row by row, with ``n`` drawn from a flat
    Dirichlet. ``closeness = 1`` gives ``q = p`` (every proposal accepted); ``closeness = 0``
    an unrelated model. With ``closeness < 1`` every token has positive draft probability
    (almost surely), so every token can be proposed.

    Parameters
    ----------
    target : ToyModel
        A table model.
    closeness : float
        In ``[0, 1]``.
    rng : numpy.random.Generator or int
        Generator (or seed) of the noise, see :func:`specdec.verify.check_rng`.
    concentration : float
        Dirichlet concentration of the noise (> 0).
    name : str
        Label.

    Returns
    -------
    ToyModel
        Same vocabulary, EOS, order and table shape as ``target``.

    Raises
    ------
    TypeError
        If ``target`` has no table.
    ValueError
        If ``closeness`` is outside ``[0, 1]``.

    Examples
    --------
    >>> p = random_model(3, rng=1, order=1, positions=2)
    >>> bool(np.allclose(perturbed_draft(p, 1.0).table, p.table))
    True
    """
    if not isinstance(target, ToyModel) or target.table is None:
        raise TypeError("target: must be a table ToyModel")
    try:
        w = float(closeness)
    except (TypeError, ValueError):
        raise ValueError(f"closeness: must be a real number in [0, 1] (got {closeness!r})") from None
    if not 0.0 <= w <= 1.0:
        raise ValueError(f"closeness: must be in [0, 1] (got {closeness!r})")
    if not (np.isfinite(concentration) and concentration > 0):
        raise ValueError(f"concentration: must be finite and > 0 (got {concentration!r})")
    rng = check_rng(rng)
    noise = rng.dirichlet(np.full(target.vocab_size, float(concentration)), size=target.table.shape[:2])
    table = w * target.table + (1.0 - w) * noise
    table /= table.sum(axis=-1, keepdims=True)
    return ToyModel(target.vocab_size, target.eos, table=table, order=target.order, name=name)


def toy_pair(vocab_size: int = 4, *, closeness: float = 0.5, seed: int = TOY_SEED, order: int = 2,
             positions: int = 4, eos: int | None = -1, eos_weight: float = 0.35) -> tuple[ToyModel, ToyModel]:
    """The book's default target/draft pair (seeded).

    Parameters
    ----------
    vocab_size : int
        V (default 4, of which the last id is EOS).
    closeness : float
        Draft closeness in ``[0, 1]`` (see :func:`perturbed_draft`).
    seed : int
        The target uses ``seed``; the draft noise uses ``seed + 1``.
    order, positions, eos, eos_weight
        See :func:`random_model`.

    Returns
    -------
    (ToyModel, ToyModel)
        ``(target, draft)``.

    Examples
    --------
    >>> p, q = toy_pair()
    >>> p.vocab_size, p.eos, q.eos
    (4, 3, 3)
    """
    seed = check_int(seed, "seed", minimum=0)
    target = random_model(vocab_size, rng=seed, order=order, positions=positions, eos=eos,
                          eos_weight=eos_weight, name="target")
    draft = perturbed_draft(target, closeness, rng=seed + 1, name="draft")
    return target, draft


def model_from_function(vocab_size: int, eos: int | None, law_fn, *, name: str = "model") -> ToyModel:
    """A :class:`ToyModel` defined by an arbitrary function of the prefix.

    Examples
    --------
    >>> m = model_from_function(2, None, lambda prefix: [1.0, 0.0] if len(prefix) % 2 else [0.0, 1.0])
    >>> m.next_law((1,)).tolist()
    [1.0, 0.0]
    """
    return ToyModel(vocab_size, eos, law_fn=law_fn, name=name)


def sequence_law(model: ToyModel, prefix, length: int) -> dict[tuple[int, ...], float]:
    """Exact law of the next ``length`` tokens sampled from ``model`` alone.

    This is the reference law that any exact speculative scheme must reproduce.

    Parameters
    ----------
    model : ToyModel
        The model sampled at every step (normally the target).
    prefix : sequence of int
        Prompt; must not contain EOS.
    length : int
        Number of tokens L >= 1.

    Returns
    -------
    dict[tuple[int, ...], float]
        Maps each continuation to its probability. A continuation that emits EOS stops
        there (its key ends with EOS and may be shorter than L, never padded); the others
        have length L. Only keys with positive probability are present; the values sum
        to 1.

    Raises
    ------
    ValueError
        If ``length < 1`` or the prefix is invalid (each error names the argument).

    Examples
    --------
    >>> m = ToyModel(2, eos=1, table=[[[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]])
    >>> law = sequence_law(m, (), 2)
    >>> {k: round(v, 12) for k, v in sorted(law.items())}
    {(0, 0): 0.1, (0, 1): 0.1, (1,): 0.8}
    """
    length = check_int(length, "length", minimum=1)
    prompt = check_prefix(prefix, model.vocab_size, eos=model.eos)
    out: dict[tuple[int, ...], float] = {}
    stack = [((), 1.0)]
    while stack:
        seq, prob = stack.pop()
        law = model.next_law(prompt + seq)
        for tok in np.flatnonzero(law > 0).tolist():
            pr = prob * float(law[tok])
            nxt = seq + (tok,)
            if len(nxt) == length or tok == model.eos:
                out[nxt] = out.get(nxt, 0.0) + pr
            else:
                stack.append((nxt, pr))
    return out


def check_models(target, draft) -> None:
    """Both are :class:`~specdec.models.ToyModel` with the same vocabulary and EOS id.

    Raises
    ------
    TypeError
        A model is not a ToyModel.
    ValueError
        Vocabulary sizes or EOS ids differ.
    """
    for nm, m in (("target", target), ("draft", draft)):
        if not isinstance(m, ToyModel):
            raise TypeError(f"{nm}: must be a specdec.models.ToyModel (got {type(m).__name__})")
    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"draft: vocabulary size {draft.vocab_size} does not match target ({target.vocab_size})")
    if draft.eos != target.eos:
        raise ValueError(f"draft: end-of-sequence id {draft.eos} does not match target ({target.eos})")
