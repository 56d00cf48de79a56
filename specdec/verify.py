"""The verification kernel: one exact speculative-sampling step over many rows at once.

Every path of the library that verifies drafts calls :func:`verify` (the scalar and
batched block cycles of :mod:`specdec.simulate.cycle`, the real-model decoder
:func:`specdec.decode.speculative`, the correct samplers of :mod:`specdec.conformance.gallery`,
:func:`specdec.step.sample_step`), and every inverse-CDF draw of the library is
:func:`draw`. The Monte Carlo engines of :mod:`specdec.simulate` count cells of the unit
interval instead of sampling rows (that is what makes them fast); their tests check them
against the exact laws.

The rule (Leviathan et al. 2023, Algorithm 1 and App. A.1; Chen et al. 2023, Algorithm 2)
------------------------------------------------------------------------------------
A **row** is one request at one step: ``k = n_proposed[r]`` proposals ``x_1..x_k``
(``0 <= k <= gamma``), each drawn from the draft law ``q[r, j]`` of its position, and the
target laws ``p[r, j]`` of those positions (plus, optionally, one more position for the
bonus token). Rows are independent: this is the flattened-batch layout of vLLM's
rejection sampler (requests x positions, ragged drafts).

1. Accept ``x_j`` (``j = 1, 2, ...``) while ``u_j < p_j(x_j) / q_j(x_j)``, tested as
   ``u_j q_j(x_j) < p_j(x_j)``: probability ``min(1, p/q)``, no division, and a token of
   ``q_j(x) = 0`` (never proposed) passes. Tests after the first rejection do not count.
2. At the first rejection, at position ``j``, emit one draw from the **residual**
   ``(p_j - q_j)^+ / Z_j`` (``p_j`` itself when ``Z_j = 0``) and stop.
3. If all ``k`` are accepted and ``p`` has a bonus position, emit one **bonus** draw from
   ``p_k`` (the position after the last proposal).

Each emitted token then has the target's law given the tokens before it (App. A.1:
``min(p, q) + Z r = p``), so the emitted text has the law of sampling from ``p`` alone.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023 (PMLR 202), Algorithm 1, Sec. 2.3, App. A.1.
.. [2] C. Chen et al., "Accelerating Large Language Model Decoding with Speculative
   Sampling", arXiv:2302.01318, 2023, Algorithm 2 and Theorem 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Verified", "verify", "draw", "cdf", "residual_laws", "speculative_accept", "check_rng"]


def check_rng(rng) -> np.random.Generator:
    """The ``rng`` argument of every sampler: a Generator, or a seed for one.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        A Generator is returned as is (its state advances as the caller draws); a
        non-negative int seeds a fresh ``numpy.random.default_rng(rng)``.

    Returns
    -------
    numpy.random.Generator

    Raises
    ------
    TypeError
        ``rng`` is neither (for example ``None``, a float, or ``random.Random``).
    ValueError
        ``rng`` is a negative int.

    Examples
    --------
    >>> float(check_rng(0).random()) == float(np.random.default_rng(0).random())
    True
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        if rng < 0:
            raise ValueError(f"rng: a seed must be a non-negative integer (got {rng})")
        return np.random.default_rng(int(rng))
    raise TypeError("rng: must be a numpy.random.Generator or a non-negative integer seed, "
                    f"e.g. np.random.default_rng(2026) (got {type(rng).__name__})")


def cdf(laws) -> np.ndarray:
    """Cumulative sums along the last axis, set to 1 from the last positive entry on.

    Rounding can leave ``cumsum(law)[-1]`` just below 1; forcing the end to 1 makes the
    inverse CDF of any ``u`` in [0, 1) land on a token of positive probability. This is
    the one rounding rule of the library (:func:`draw`, and the cut points of
    :mod:`specdec.simulate`).

    Examples
    --------
    >>> cdf([0.5, 0.5, 0.0]).tolist()
    [0.5, 1.0, 1.0]
    """
    laws = np.asarray(laws, dtype=np.float64)
    c = laws.cumsum(axis=-1)
    if laws.ndim == 1:                                   # one law: the common scalar case
        c[(laws > 0).nonzero()[0][-1]:] = 1.0
        return c
    v = laws.shape[-1]
    last = v - 1 - np.argmax(laws[..., ::-1] > 0, axis=-1)
    c[np.arange(v) >= last[..., None]] = 1.0
    return c


def draw(laws, u):
    """Inverse-CDF draw: the library's one way of turning a uniform into a token.

    Token ``y`` owns ``[c(y-1), c(y))`` of ``[0, 1)``, ``c`` the cumulative sums of the law,
    with ``c`` set to 1 from the last token of positive probability on (cumulative sums
    may stop just below 1), so no token of probability 0 is ever returned.

    Parameters
    ----------
    laws : array_like, shape (..., V)
        Probability vectors (not validated; see :func:`specdec.laws.check_law`).
    u : float or array_like, shape (...)
        Uniforms on [0, 1), one per law; with a single law of shape (V,), a float or an
        array of uniforms (one draw each).

    Returns
    -------
    int or numpy.ndarray of int64
        An int for one law and one float, else one token per uniform.

    Examples
    --------
    >>> draw([0.5, 0.3, 0.2], 0.79), draw([0.5, 0.0, 0.5], 0.5)
    (1, 2)
    >>> draw(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([0.3, 0.3])).tolist()
    [0, 1]
    """
    c = cdf(laws)
    if c.ndim == 1:
        y = c.searchsorted(u, side="right")
        return int(y) if y.ndim == 0 else y.astype(np.int64)
    return (c <= np.asarray(u)[..., None]).sum(axis=-1)


def residual_laws(p, q) -> np.ndarray:
    """Residual ``(p - q)^+ / Z`` along the last axis, and ``p`` where ``Z == 0``.

    Parameters
    ----------
    p, q : array_like, shape (..., V)
        Target and draft laws (not validated).

    Returns
    -------
    numpy.ndarray, shape (..., V)
        Row by row equal to :func:`specdec.step.residual`.
    """
    p = np.asarray(p, dtype=np.float64)
    plus = np.maximum(p - np.asarray(q, dtype=np.float64), 0.0)
    z = plus.sum(axis=-1, keepdims=True)
    return np.where(z > 0, plus / np.where(z > 0, z, 1.0), p)


def speculative_accept(p_x, q_x, u):
    """The accept test ``u < p(x) / q(x)``, evaluated as ``u q(x) < p(x)`` (True if ``q(x) = 0``).

    For ``u`` uniform on [0, 1) the event has probability ``min(1, p(x)/q(x))``, so no
    clip is needed. A Python ``bool`` for scalars, a boolean array otherwise; no
    validation (it sits in the hot loops).

    Examples
    --------
    >>> speculative_accept(0.3, 0.5, 0.59), speculative_accept(0.3, 0.5, 0.61)
    (True, False)
    """
    if type(u) is float and type(p_x) is float and type(q_x) is float:  # the article's loop
        return q_x == 0.0 or u * q_x < p_x
    if np.ndim(p_x) == 0 and np.ndim(q_x) == 0 and np.ndim(u) == 0:
        return bool(q_x == 0 or u * q_x < p_x)
    q_arr = np.asarray(q_x)
    return (np.asarray(u) * q_arr < np.asarray(p_x)) | (q_arr == 0)


@dataclass(frozen=True)
class Verified:
    """What :func:`verify` decided, row by row.

    Attributes
    ----------
    tokens : numpy.ndarray of int64, shape (rows, gamma + 1)
        The emitted tokens: the accepted proposals, then the corrected or bonus token;
        ``-1`` after the last one.
    n_accepted : numpy.ndarray of int64, shape (rows,)
        Length of the accepted prefix of the proposals.
    n_emitted : numpy.ndarray of int64, shape (rows,)
        ``n_accepted + 1``, or ``n_accepted`` for a fully accepted row without a bonus
        position.
    corrected, bonus : numpy.ndarray of bool, shape (rows,)
        Whether the last emitted token is a residual draw (a proposal was rejected), or a
        bonus draw.
    """

    tokens: np.ndarray
    n_accepted: np.ndarray
    n_emitted: np.ndarray
    corrected: np.ndarray
    bonus: np.ndarray


def _check_shapes(p, q, proposals, n_proposed):
    """Validated arrays; ``p`` and ``q`` with a leading axis of 1 (shared) or ``rows`` laws."""
    try:
        p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"p, q: must be arrays of probabilities ({exc})") from None
    props = np.asarray(proposals)
    if props.ndim != 2 or (props.size and props.dtype.kind not in "iu"):
        raise ValueError(f"proposals: must be integer token ids of shape (rows, gamma) "
                         f"(got {props.dtype} {props.shape})")
    rows, gamma = props.shape
    if rows == 0:
        raise ValueError("proposals: must have at least one row (got shape "
                         f"{props.shape})")
    if q.ndim == 2:                                   # one set of laws for every row
        p, q = p[None], q[None]
    if q.ndim != 3 or q.shape[:2] not in ((rows, gamma), (1, gamma)):
        raise ValueError(f"q: must have shape ({rows}, {gamma}, V), or ({gamma}, V) for laws "
                         f"shared by every row (got {q.shape})")
    n, _, v = q.shape
    if p.shape not in ((n, gamma + 1, v), (n, gamma, v)):
        raise ValueError(f"p: must have shape ({n}, {gamma + 1}, {v}) with a bonus position, "
                         f"or ({n}, {gamma}, {v}) without (the row axis absent when shared; "
                         f"got {p.shape})")
    if n_proposed is None:                            # every row proposes gamma tokens
        k = np.full(rows, gamma, dtype=np.int64)
    else:
        k = np.asarray(n_proposed)
        if k.shape != (rows,) or k.dtype.kind not in "iu" or (k < 0).any() or (k > gamma).any():
            raise ValueError(f"n_proposed: must be {rows} integers in [0, {gamma}] (got {k!r})")
        props = np.where(np.arange(gamma) < k[:, None], props, 0)
    if props.size and (props.min() < 0 or props.max() >= v):
        raise ValueError(f"proposals: token ids must lie in [0, {v}) for the proposed positions")
    return p, q, props.astype(np.int64, copy=False), k.astype(np.int64, copy=False)


def _verify_row(p, q, props, k, u_accept, u_final, rng) -> Verified:
    """:func:`verify` of one row (``p`` (gamma [+ 1], V), ``q`` (gamma, V)), on Python scalars.

    The same steps, tests and draws as the rows path, one position at a time: for one row,
    numpy's cost per call would outweigh the arithmetic many times over.
    """
    gamma = len(props)
    n = 0                                              # 1. accepted prefix
    while n < k and speculative_accept(float(p[n, props[n]]), float(q[n, props[n]]), u_accept[n]):
        n += 1
    corrected = n < k
    bonus = not corrected and p.shape[0] == gamma + 1
    tokens = props[:n] + [-1] * (gamma + 1 - n)
    if corrected or bonus:                             # 2. residual, or 3. bonus
        u = rng.random() if u_final is None else float(u_final[0])
        tokens[n] = draw(residual_laws(p[n], q[n]) if corrected else p[n], u)
    return Verified(tokens=np.array([tokens], dtype=np.int64), n_accepted=np.array([n], dtype=np.int64),
                    n_emitted=np.array([n + (corrected or bonus)], dtype=np.int64),
                    corrected=np.array([corrected]), bonus=np.array([bonus]))


def verify(p, q, proposals, n_proposed=None, rng=None, *, u_accept=None, u_final=None) -> Verified:
    """Verify drafted proposals, row by row, with the exact rule of the module docstring.

    Parameters
    ----------
    p : array_like, shape (rows, gamma + 1, V) or (rows, gamma, V)
        Target laws at each proposed position, and at the position after the last one
        (the bonus position; row ``r`` uses ``p[r, n_proposed[r]]``). Without it, a fully
        accepted row emits no extra token. Without the rows axis, shape (gamma + 1, V) or
        (gamma, V): one set of laws shared by every row (many independent steps from one
        context), in O(gamma x V) memory instead of O(rows x gamma x V).
    q : array_like, shape (rows, gamma, V), or (gamma, V) when shared
        Draft laws the proposals were drawn from (``gamma`` may be 0).
    proposals : array_like of int, shape (rows, gamma)
        Proposed token ids; entries at positions ``>= n_proposed`` are ignored.
    n_proposed : array_like of int, shape (rows,), optional
        Proposals per row, in ``[0, gamma]`` (default ``gamma``): ragged drafts, for
        example drafting that stopped at an end-of-sequence token.
    rng : numpy.random.Generator or int, optional
        Draws the uniforms not given: first ``u_accept`` as ``rng.random((rows, gamma))``,
        then one uniform per row that emits a corrected or bonus token, in row order.
    u_accept : array_like, shape (rows, gamma), optional
        Uniforms of the accept tests.
    u_final : array_like, shape (rows,), optional
        Uniform of each row's corrected or bonus draw (ignored for rows without one).

    Returns
    -------
    Verified

    Raises
    ------
    ValueError
        A shape, a token id or a count out of range (the argument is named); uniforms
        missing and no ``rng``.
    TypeError
        ``rng`` not a Generator or seed.

    Notes
    -----
    Laws are not validated (this is the inner loop of every sampler): validate them once
    with :func:`specdec.laws.check_law`. Work and memory are O(rows x gamma x V) for laws
    per row, O(rows x gamma + gamma x V) for shared laws.

    Examples
    --------
    >>> p = np.array([[[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]]])     # 1 row, gamma 1, bonus
    >>> q = np.array([[[0.2, 0.5, 0.3]]])
    >>> out = verify(p, q, [[1]], u_accept=[[0.7]], u_final=[0.3])   # 0.7 * 0.5 >= 0.3
    >>> out.tokens.tolist(), out.n_accepted.tolist(), bool(out.corrected[0])
    ([[0, -1]], [0], True)
    >>> verify(p, q, [[1]], u_accept=[[0.5]], u_final=[0.3]).tokens.tolist()  # accepted, bonus
    [[1, 2]]
    """
    p, q, props, k = _check_shapes(p, q, proposals, n_proposed)
    rows, gamma = props.shape
    if (u_accept is None or u_final is None) and rng is None:
        raise ValueError("rng: needed to draw the uniforms not given (u_accept, u_final)")
    if rng is not None:
        rng = check_rng(rng)                           # a seed: one Generator for both draws
    if u_accept is None:
        u_accept = rng.random((rows, gamma))
    u_accept = np.asarray(u_accept, dtype=np.float64)
    if u_accept.shape != (rows, gamma):
        raise ValueError(f"u_accept: must have shape ({rows}, {gamma}) (got {u_accept.shape})")
    if u_final is not None:
        u_final = np.asarray(u_final, dtype=np.float64)
        if u_final.shape != (rows,):
            raise ValueError(f"u_final: must have shape ({rows},) (got {u_final.shape})")
    if rows == 1:                                      # one row: the scalar samplers' call
        return _verify_row(p[0], q[0], props[0].tolist(), int(k[0]), u_accept[0].tolist(),
                           u_final, rng)
    # 1. accept tests; the accepted prefix ends at the first failure
    at = (np.arange(rows)[:, None] if p.shape[0] > 1 else 0), np.arange(gamma)[None, :]
    ok = speculative_accept(p[at + (props,)], q[at + (props,)], u_accept) & (at[1] < k[:, None])
    n_acc = np.logical_and.accumulate(ok, axis=1).sum(axis=1, dtype=np.int64)
    corrected = n_acc < k
    bonus = ~corrected & (p.shape[1] == gamma + 1)
    final = np.flatnonzero(corrected | bonus)
    u = rng.random(final.size) if u_final is None else u_final[final]
    # 2. residual at the first rejection, 3. bonus from the position after the last proposal
    pos, rej = n_acc[final], corrected[final]
    tokens = np.full((rows, gamma + 1), -1, dtype=np.int64)
    tokens[:, :gamma] = np.where(np.arange(gamma) < n_acc[:, None], props, -1)
    if p.shape[0] > 1:                                 # laws per row
        r, j = final[rej], pos[rej]
        tokens[r, j] = draw(residual_laws(p[r, j], q[r, j]), u[rej])
        b, j = final[~rej], pos[~rej]
        tokens[b, j] = draw(p[b, j], u[~rej])
    else:                                              # one set of laws: one per (position, kind)
        group = 2 * pos + rej                          # position j, corrected or bonus
        for g in np.flatnonzero(np.bincount(group, minlength=2 * gamma + 2)):
            j, sel = g // 2, group == g
            tokens[final[sel], j] = draw(residual_laws(p[0, j], q[0, j]) if g % 2 else p[0, j], u[sel])
    return Verified(tokens=tokens, n_accepted=n_acc, n_emitted=n_acc + (corrected | bonus),
                    corrected=corrected, bonus=bonus)
