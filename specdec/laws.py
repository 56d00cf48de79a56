"""Probability vectors over a finite vocabulary: validation, distances, sampling laws.

Every other module of :mod:`specdec` receives the target law ``p`` and the draft law
``q`` as 1-D arrays of probabilities, one entry per token id. This module is the single
place where such vectors are checked, so that bad input fails loudly with a message that
names the argument and the rule it broke, instead of producing a silently wrong law.

It also turns logits into the law a decoder actually samples from (mask, temperature,
top-k, top-p), because speculative sampling is exact only when the acceptance ratio is
computed on those *processed* laws.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023 (PMLR 202), Sec. 2-3 and App. A.1.
.. [2] C. Chen, S. Borgeaud, G. Irving, J.-B. Lespiau, L. Sifre, J. Jumper,
   "Accelerating Large Language Model Decoding with Speculative Sampling",
   arXiv:2302.01318, 2023.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = [
    "LawError",
    "check_law",
    "check_pair",
    "check_int",
    "check_real",
    "tv_distance",
    "softmax",
    "sampling_law",
    "sampling_laws",
    "check_counts",
    "check_level",
    "align_laws",
    "law_tv",
]

#: Default absolute tolerance on ``sum(p) == 1``.
ATOL = 1e-9


class LawError(ValueError):
    """A probability vector (or the logits that define one) breaks a rule.

    Subclass of :class:`ValueError`; the message always starts with the name of the
    offending argument, e.g. ``"q: probabilities must sum to 1 (sum = 0.9)"``. Arguments
    that are not laws (gamma, trials, seeds, temperature, top-k, top-p, method names...)
    raise a plain :class:`ValueError` or :class:`TypeError` naming the argument instead
    (:func:`check_int`).
    """


def _as_vector(x, name: str, *, what: str = "probability vector") -> np.ndarray:
    """Float64 1-D copy of ``x`` or a :class:`LawError` naming ``name``."""
    try:
        arr = np.array(x, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as exc:
        raise LawError(f"{name}: must be a 1-D array of real numbers ({exc})") from None
    if arr.ndim != 1:
        raise LawError(f"{name}: must be a 1-D {what} (got ndim {arr.ndim}, shape {arr.shape})")
    if arr.size == 0:
        raise LawError(f"{name}: must not be empty (vocabulary size 0)")
    return arr


def check_law(p, name: str = "p", *, atol: float = ATOL) -> np.ndarray:
    """Validate a probability vector and return a float64 copy of it.

    Parameters
    ----------
    p : array_like, shape (V,)
        Probabilities, one per token id.
    name : str
        Name used in error messages (``"p"``, ``"q"``, ``"law"``...).
    atol : float
        Absolute tolerance on ``sum(p) == 1``. The values are returned as given (not
        renormalised), so exact inputs stay exact.

    Returns
    -------
    numpy.ndarray, shape (V,), float64
        A validated copy; modifying it does not modify ``p``.

    Raises
    ------
    LawError
        If ``p`` is not 1-D, is empty, contains NaN or infinity, has a negative entry,
        or does not sum to 1 within ``atol``. The message names ``name`` and the rule.

    Examples
    --------
    >>> check_law([0.5, 0.3, 0.2])
    array([0.5, 0.3, 0.2])
    >>> check_law([0.5, 0.4], name="q")
    Traceback (most recent call last):
    ...
    specdec.laws.LawError: q: probabilities must sum to 1 within atol=1e-09 (sum = 0.9)
    """
    arr = _as_vector(p, name)
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise LawError(f"{name}: entries must be finite (found {arr[i]} at index {i})")
    if (arr < 0).any():
        i = int(np.argmin(arr))
        raise LawError(f"{name}: entries must be non-negative (found {arr[i]:.6g} at index {i})")
    total = float(arr.sum())
    if not abs(total - 1.0) <= atol:
        raise LawError(f"{name}: probabilities must sum to 1 within atol={atol:g} (sum = {total:.12g})")
    return arr


def check_pair(p, q, names: tuple[str, str] = ("p", "q"), *, atol: float = ATOL) -> tuple[np.ndarray, np.ndarray]:
    """Validate two laws over the same vocabulary.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Probability vectors (target and draft, usually).
    names : tuple of str
        Names used in error messages.
    atol : float
        Tolerance on each sum, see :func:`check_law`.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        Validated float64 copies, both of shape (V,).

    Raises
    ------
    LawError
        If either vector is invalid (see :func:`check_law`), or if the vocabulary sizes
        differ: ``"q: vocabulary size 4 does not match p (3)"``. Token ids must denote the
        same event under both models; a size mismatch is the visible symptom of a
        tokenizer mismatch, and is never padded or truncated silently.

    Examples
    --------
    >>> p, q = check_pair([0.5, 0.3, 0.2], [0.2, 0.5, 0.3])
    >>> p.shape == q.shape
    True
    """
    a = check_law(p, names[0], atol=atol)
    b = check_law(q, names[1], atol=atol)
    if a.shape != b.shape:
        raise LawError(
            f"{names[1]}: vocabulary size {b.size} does not match {names[0]} ({a.size})"
        )
    return a, b


def check_int(value, name: str, *, minimum: int | None = 1, maximum: int | None = None) -> int:
    """Validate an integer parameter (draft length gamma, trials, seed, top-k...).

    Parameters
    ----------
    value : int
        The value to check. Python and numpy integers are accepted, and so are floats
        with an integral value (``2e5``); booleans, fractions, NaN and strings are not.
    name : str
        Name used in error messages.
    minimum, maximum : int or None
        Inclusive bounds; ``None`` means unbounded.

    Returns
    -------
    int
        ``value`` as a Python ``int``.

    Raises
    ------
    TypeError
        ``value`` is not a real number (a string, None, a boolean):
        ``"gamma: must be an integer >= 1 (got '4')"``.
    ValueError
        ``value`` is not integral or is out of bounds:
        ``"gamma: must be an integer >= 1 (got 0)"`` and similar.

    Examples
    --------
    >>> check_int(5, "gamma")
    5
    >>> check_int(0, "gamma")
    Traceback (most recent call last):
    ...
    ValueError: gamma: must be an integer >= 1 (got 0)
    """
    if minimum is not None and maximum is not None:
        rule = f"an integer in [{minimum}, {maximum}]"
    elif minimum is not None:
        rule = f"an integer >= {minimum}"
    elif maximum is not None:
        rule = f"an integer <= {maximum}"
    else:
        rule = "an integer"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: must be {rule} (got {value!r})")
    if not isinstance(value, numbers.Integral) and not (np.isfinite(value) and float(value).is_integer()):
        raise ValueError(f"{name}: must be {rule} (got {value!r})")
    out = int(value)
    if (minimum is not None and out < minimum) or (maximum is not None and out > maximum):
        raise ValueError(f"{name}: must be {rule} (got {out})")
    return out


def check_real(value, name: str, interval: str) -> float:
    """Validate a real parameter that must lie in ``interval`` (top-p, a TV distance...).

    Parameters
    ----------
    value : float
        The value to check (anything ``float()`` accepts).
    name : str
        Name used in error messages.
    interval : str
        The interval as the message writes it, e.g. ``"(0, 1]"``: brackets closed, parentheses open.

    Returns
    -------
    float

    Raises
    ------
    TypeError, ValueError
        ``value`` is not a real number (as ``float()`` raises them), or lies outside
        ``interval`` (NaN lies outside every interval).

    Examples
    --------
    >>> check_real(0.9, "top_p", "(0, 1]")
    0.9
    >>> check_real(0, "top_p", "(0, 1]")
    Traceback (most recent call last):
    ...
    ValueError: top_p: must be in (0, 1] (got 0)
    """
    try:
        x = float(value)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{name}: must be a real number in {interval} (got {value!r})") from None
    lo, hi = (float(b) for b in interval[1:-1].split(","))
    above = lo < x if interval[0] == "(" else lo <= x
    below = x < hi if interval[-1] == ")" else x <= hi
    if not (above and below):
        raise ValueError(f"{name}: must be in {interval} (got {value!r})")
    return x


def tv_distance(p, q) -> float:
    """Total variation distance between two laws on the same vocabulary.

    ``TV(p, q) = 0.5 * sum_x |p(x) - q(x)| = max_S |p(S) - q(S)|``: the largest
    disagreement in probability over any set of tokens S (attained at S = {p > q}).

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Probability vectors.

    Returns
    -------
    float
        Distance in [0, 1] (probability).

    Raises
    ------
    LawError
        If either argument is not a valid law or the sizes differ.

    References
    ----------
    Leviathan et al. (2023), Sec. 3 (the acceptance rate is ``1 - TV(p, q)``).

    Examples
    --------
    >>> round(tv_distance([0.5, 0.3, 0.2], [0.35, 0.39, 0.26]), 12)
    0.15
    """
    a, b = check_pair(p, q)
    return float(0.5 * np.abs(a - b).sum())


def _check_logits(logits, name: str = "logits") -> np.ndarray:
    arr = _as_vector(logits, name, what="logit vector")
    if np.isnan(arr).any() or (arr == np.inf).any():
        i = int(np.flatnonzero(np.isnan(arr) | (arr == np.inf))[0])
        raise LawError(f"{name}: entries must be finite or -inf (found {arr[i]} at index {i})")
    if not np.isfinite(arr).any():
        raise LawError(f"{name}: at least one entry must be finite (all are -inf)")
    return arr


def _check_temperature(temperature, *, allow_zero: bool) -> float:
    try:
        t = float(temperature)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"temperature: must be a real number (got {temperature!r})") from None
    if not np.isfinite(t) or t < 0 or (t == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"temperature: must be finite and {bound} (got {temperature!r})")
    return t


def softmax(logits, temperature: float = 1.0) -> np.ndarray:
    """Softmax of logits divided by a temperature.

    Parameters
    ----------
    logits : array_like, shape (V,)
        Real scores; ``-inf`` marks a token with probability 0.
    temperature : float
        Strictly positive. For the greedy limit (temperature 0) use
        :func:`sampling_law`.

    Returns
    -------
    numpy.ndarray, shape (V,)
        ``exp(logits / T) / sum exp(logits / T)``, computed stably (max subtracted).

    Raises
    ------
    LawError
        If ``logits`` contains NaN or ``+inf``, is all ``-inf``, is not 1-D or empty.
    ValueError
        If ``temperature`` is not finite and > 0 (:class:`TypeError` if not a number).

    Examples
    --------
    >>> softmax([0.0, 0.0]).tolist()
    [0.5, 0.5]
    >>> softmax([0.0, float("-inf")]).tolist()
    [1.0, 0.0]
    """
    z = _check_logits(logits)
    t = _check_temperature(temperature, allow_zero=False)
    z = z / t
    z -= z[np.isfinite(z)].max()
    w = np.exp(z)
    return w / w.sum()


def _stable_descending_order(values: np.ndarray) -> np.ndarray:
    """Indices sorting ``values`` descending; ties keep the lower token id first."""
    return np.lexsort((np.arange(values.size), -values))


def sampling_law(logits, *, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, mask=None) -> np.ndarray:
    """The law a decoder really samples from, given logits and sampling settings.

    Steps, in this order (the order of common decoders' logits processors):

    1. ``mask``: disallowed tokens get logit ``-inf``.
    2. temperature: logits are divided by ``temperature``. Temperature 0 is greedy
       decoding: the result is the one-hot law on the arg-max token, and top-k/top-p
       have nothing left to remove.
    3. top-k: keep the ``top_k`` largest logits.
    4. top-p (nucleus): on the law renormalised after top-k, keep the smallest set of
       most probable tokens whose mass reaches ``top_p``.
    5. renormalise.

    Ties are resolved deterministically in favour of the **lower token id**: the greedy
    token is the first arg-max; top-k keeps exactly ``top_k`` tokens, preferring lower
    ids among equal logits; top-p scans tokens by decreasing probability, lower id first
    among equals, and keeps a token while the mass of the tokens kept before it is below
    ``top_p`` (a tolerance of 1e-12 absorbs rounding of the cumulative sum), so the set is
    the shortest such prefix in that order and always contains at least one token.

    Parameters
    ----------
    logits : array_like, shape (V,)
        Real scores; ``-inf`` allowed (probability 0).
    temperature : float
        ``>= 0``; 0 means greedy.
    top_k : int or None
        Number of tokens kept, in ``[1, V]``; ``None`` keeps all.
    top_p : float or None
        Nucleus mass in ``(0, 1]``; ``None`` (or 1) keeps all.
    mask : array_like of bool, shape (V,), or None
        ``True`` where the token is allowed.

    Returns
    -------
    numpy.ndarray, shape (V,)
        A probability vector (zeros on removed tokens).

    Raises
    ------
    LawError
        Invalid logits, or a mask that removes every token with a finite logit.
    ValueError
        Temperature < 0, ``top_k`` outside ``[1, V]``, ``top_p`` outside ``(0, 1]``, a
        mask of the wrong shape (:class:`TypeError` for a value that is not a number, a
        mask that is not boolean).

    References
    ----------
    Leviathan et al. (2023), Sec. 2.3 ("speculative sampling" applies to any sampling
    method that yields a distribution, e.g. argmax, top-k, nucleus, temperature).

    Examples
    --------
    >>> sampling_law([2.0, 1.0, 1.0], temperature=0).tolist()
    [1.0, 0.0, 0.0]
    >>> sampling_law([1.0, 1.0, 0.0], top_k=1).tolist()
    [1.0, 0.0, 0.0]
    >>> law = sampling_law([0.0, 0.0, 0.0, 0.0], top_p=0.5)
    >>> law.tolist()
    [0.5, 0.5, 0.0, 0.0]
    """
    z = _check_logits(logits)
    v = z.size
    t = _check_temperature(temperature, allow_zero=True)
    if mask is not None:
        m = np.asarray(mask)
        if m.shape != (v,):
            raise ValueError(f"mask: must have shape ({v},) like logits (got {m.shape})")
        if m.dtype != np.bool_:
            raise TypeError(f"mask: must be boolean, True = allowed (got dtype {m.dtype})")
        z = np.where(m, z, -np.inf)
        if not np.isfinite(z).any():
            raise LawError("mask: removes every token with a finite logit (nothing left to sample)")
    if top_k is not None:
        top_k = check_int(top_k, "top_k", minimum=1, maximum=v)
    if top_p is not None:
        top_p = check_real(top_p, "top_p", "(0, 1]")

    if t == 0.0:
        out = np.zeros(v)
        out[int(np.argmax(z))] = 1.0  # first arg-max: lowest token id among ties
        return out

    z = z / t
    if top_k is not None and top_k < v:
        order = _stable_descending_order(z)
        z = z.copy()
        z[order[top_k:]] = -np.inf
    law = np.exp(z - z[np.isfinite(z)].max())
    law /= law.sum()
    if top_p is not None and top_p < 1.0:
        order = _stable_descending_order(law)
        before = np.concatenate(([0.0], np.cumsum(law[order])[:-1]))
        keep = before < top_p - 1e-12
        keep[0] = True
        law[order[~keep]] = 0.0
        law /= law.sum()
    return law


def sampling_laws(logits, *, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None) -> np.ndarray:
    """:func:`sampling_law` applied to every row of a 2-D array of logits.

    Row ``i`` of the result equals ``sampling_law(logits[i], ...)`` exactly: plain
    temperature sampling (no top-k, no top-p, temperature > 0) is computed as one
    vectorised softmax with the same floating-point operations along the last axis; the
    other settings go row by row through :func:`sampling_law`. Decoders use it to turn the
    logits of a whole forward pass (several positions or sequences) into laws at once.

    Parameters
    ----------
    logits : array_like, shape (N, V)
        One logit vector per row; entries finite or ``-inf``.
    temperature, top_k, top_p
        As in :func:`sampling_law`, the same for every row.

    Returns
    -------
    numpy.ndarray, shape (N, V), float64
        One probability vector per row.

    Raises
    ------
    LawError
        ``logits`` not of shape (N, V); a row that :func:`sampling_law` refuses (NaN or
        ``+inf``, every entry ``-inf``), named by its index; invalid settings.

    Examples
    --------
    >>> z = np.array([[0.0, 1.0, 2.0], [3.0, 0.0, -np.inf]])
    >>> out = sampling_laws(z, temperature=0.5)
    >>> bool(np.array_equal(out[1], sampling_law(z[1], temperature=0.5)))
    True
    >>> sampling_laws([[0.0, np.nan]])
    Traceback (most recent call last):
    ...
    specdec.laws.LawError: logits: row 0: entries must be finite or -inf (found nan at index 1)
    """
    try:
        z = np.asarray(logits, dtype=np.float64)
    except (TypeError, ValueError):
        raise LawError("logits: must be an (N, V) array of real numbers") from None
    if z.ndim != 2 or z.shape[1] < 1:
        raise LawError(f"logits: must have shape (N, V) with V >= 1 (got {z.shape})")
    t = _check_temperature(temperature, allow_zero=True)
    plain = top_k is None and top_p is None and t > 0
    if not plain or np.isnan(z).any() or (z == np.inf).any() or \
            not np.isfinite(z).any(axis=1).all():
        out = np.empty_like(z)
        for i, row in enumerate(z):
            try:
                out[i] = sampling_law(row, temperature=t, top_k=top_k, top_p=top_p)
            except LawError as err:
                msg = str(err)
                if msg.startswith("logits: "):
                    msg = msg[len("logits: "):]
                    raise LawError(f"logits: row {i}: {msg}") from None
                raise
        return out
    z = z / t
    out = np.exp(z - z.max(axis=1, keepdims=True))
    out /= out.sum(axis=1, keepdims=True)
    return out


# ------------------------------------------------------------------- counts and levels


def check_counts(counts, law, *, law_name: str = "law") -> tuple[np.ndarray, np.ndarray]:
    """Validated (int64 counts, float64 law) of equal size, with at least one trial.

    Raises
    ------
    LawError
        ``counts`` not 1-D non-negative integers of ``law``'s size with a positive sum, or
        ``law`` invalid.
    """
    lw = check_law(law, law_name)
    try:
        c = np.array(counts, dtype=np.float64)
    except (TypeError, ValueError):
        raise LawError(f"counts: must be a 1-D array of non-negative integers (got {counts!r})") from None
    if c.ndim != 1:
        raise LawError(f"counts: must be 1-D (got ndim {c.ndim})")
    if c.size != lw.size:
        raise LawError(f"counts: vocabulary size {c.size} does not match {law_name} ({lw.size})")
    if not np.all(np.isfinite(c)) or (c < 0).any() or not np.all(c == np.round(c)):
        raise LawError("counts: entries must be non-negative integers")
    if c.sum() < 1:
        raise LawError("counts: must contain at least one trial (sum = 0)")
    return c.astype(np.int64), lw


def check_level(value, name: str) -> float:
    """``value`` as a float in the open interval (0, 1) (a level, a power, a confidence).

    Raises
    ------
    TypeError, ValueError
        Not a number, or outside (0, 1); the message names ``name``.
    """
    try:
        x = float(value)
    except TypeError:
        raise TypeError(f"{name}: must be a probability in (0, 1) (got {value!r})") from None
    except ValueError:
        raise ValueError(f"{name}: must be a probability in (0, 1) (got {value!r})") from None
    if not (0.0 < x < 1.0):
        raise ValueError(f"{name}: must be a probability in (0, 1) (got {value!r})")
    return x


# ------------------------------------------------------------------- sequence laws


def align_laws(*laws: dict) -> tuple[list[tuple], list[np.ndarray]]:
    """Put several sequence laws on a common, sorted list of keys.

    Returns
    -------
    keys : list of tuple
        Union of the keys, sorted by (length, tokens).
    arrays : list of numpy.ndarray, each of shape (len(keys),)
        Probabilities of each law on ``keys`` (0 where absent).
    """
    keys = sorted(set().union(*[set(l) for l in laws]), key=lambda k: (len(k), k))
    return keys, [np.array([l.get(k, 0.0) for k in keys]) for l in laws]


def law_tv(a: dict, b: dict) -> float:
    """Total variation distance between two sequence laws (dicts).

    Uses :func:`specdec.laws.tv_distance` on the aligned vectors (which validates them).

    Examples
    --------
    >>> law_tv({(0,): 0.5, (1,): 0.5}, {(0,): 1.0})
    0.5
    """
    _, (x, y) = align_laws(a, b)
    return tv_distance(x, y)
