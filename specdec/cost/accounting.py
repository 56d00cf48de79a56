"""Accounting of a speculative run: honest tokens per target pass, and the inflated figure.

A cycle's honest output is the tokens it emits (its accepted prefix plus one corrected or
bonus token); counting every drafted token as output inflates throughput. These functions
compute both from the cycles of a run (:mod:`specdec.simulate.cycle`'s results, or per-cycle
counts).

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023, Sec. 3.1 (expected tokens per cycle).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specdec.simulate.cycle import CycleBatch, CycleResult, Generation, GenerationBatch

__all__ = ["accepted_prefix_length", "Accounting", "account_counts", "account"]


def accepted_prefix_length(outcomes) -> np.ndarray | int:
    """Number of accepted proposals: the length of the leading run of acceptances.

    Proposals after the first rejection are discarded even if their own test would have
    passed, so ``[accept, reject, accept, accept]`` counts 1.

    Parameters
    ----------
    outcomes : array_like of bool, shape (..., gamma)
        Accept (``True``) / reject per proposal, in draft order.

    Returns
    -------
    int or numpy.ndarray of int, shape (...)
        Index of the first rejection, or ``gamma`` if none.

    Examples
    --------
    >>> accepted_prefix_length([True, False, True, True])
    1
    >>> accepted_prefix_length([[True, True], [False, True]]).tolist()
    [2, 0]
    """
    arr = np.asarray(outcomes)
    if arr.ndim == 0:
        raise ValueError("outcomes: must have at least one dimension (one entry per proposal)")
    if arr.dtype != np.bool_:
        if not np.isin(arr, (0, 1)).all():
            raise ValueError("outcomes: entries must be booleans (accept = True)")
        arr = arr.astype(bool)
    out = np.where(arr.all(axis=-1), arr.shape[-1], np.argmin(arr, axis=-1))
    return int(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class Accounting:
    """Throughput accounting of a run, honest and inflated, from the same cycles.

    Attributes
    ----------
    n_cycles : int
        Cycles (serial target calls).
    emitted : int
        Tokens emitted (the output).
    accepted : int
        Proposals accepted (accepted prefixes only).
    proposed : int
        Proposals drafted.
    tokens_per_cycle : float
        ``emitted / n_cycles``: the honest throughput per target call (E when estimated).
    acceptance_rate : float
        ``accepted / proposed``.
    mean_accepted_length : float
        ``accepted / n_cycles``: mean length of the accepted prefix.
    drafted_per_cycle : float
        ``proposed / n_cycles``: the inflated figure obtained by counting every drafted
        token as output.
    inflation : float
        ``proposed / emitted``: factor by which that figure overstates the output (can be
        below 1 when nearly everything is accepted, because of the bonus token).
    """

    n_cycles: int
    emitted: int
    accepted: int
    proposed: int
    tokens_per_cycle: float
    acceptance_rate: float
    mean_accepted_length: float
    drafted_per_cycle: float
    inflation: float


def account_counts(accepted, *, proposed, emitted=None) -> Accounting:
    """Accounting from per-cycle counts.

    Parameters
    ----------
    accepted : array_like of int, shape (n_cycles,)
        Accepted proposals per cycle.
    proposed : int or array_like of int, shape (n_cycles,)
        Proposals per cycle (an int is the same ``gamma`` for every cycle).
    emitted : array_like of int, shape (n_cycles,), optional
        Emitted tokens per cycle; default ``accepted + 1`` (no EOS: every cycle ends with
        one residual or bonus token).

    Returns
    -------
    Accounting

    Raises
    ------
    ValueError
        Empty input, negative counts, ``accepted > proposed``, ``emitted`` outside
        ``[max(accepted, 1), accepted + 1]``.

    Examples
    --------
    >>> a = account_counts([4, 0, 2], proposed=4)
    >>> a.emitted, a.tokens_per_cycle, a.accepted, a.proposed, a.acceptance_rate
    (9, 3.0, 6, 12, 0.5)
    """
    acc = np.asarray(accepted)
    if acc.ndim != 1 or acc.size == 0:
        raise ValueError(f"accepted: must be a non-empty 1-D array of counts (got shape {acc.shape})")
    if not np.issubdtype(acc.dtype, np.integer):
        raise ValueError(f"accepted: counts must be integers (got dtype {acc.dtype})")
    prop = np.broadcast_to(np.asarray(proposed), acc.shape)
    if not np.issubdtype(prop.dtype, np.integer) or (prop < 1).any():
        raise ValueError("proposed: must be integers >= 1 (one per cycle, or one gamma for all)")
    if (acc < 0).any() or (acc > prop).any():
        raise ValueError("accepted: counts must be in [0, proposed] for every cycle")
    emit = acc + 1 if emitted is None else np.asarray(emitted)
    if emit.shape != acc.shape or not np.issubdtype(emit.dtype, np.integer):
        raise ValueError(f"emitted: must be integer counts of shape {acc.shape} (got {emit.shape})")
    if (emit < np.maximum(acc, 1)).any() or (emit > acc + 1).any():
        raise ValueError("emitted: must be in [max(accepted, 1), accepted + 1] for every cycle")
    n = int(acc.size)
    e, a, p = int(emit.sum()), int(acc.sum()), int(prop.sum())
    return Accounting(n_cycles=n, emitted=e, accepted=a, proposed=p, tokens_per_cycle=e / n,
                      acceptance_rate=a / p, mean_accepted_length=a / n, drafted_per_cycle=p / n,
                      inflation=p / e)


def account(cycles) -> Accounting:
    """Accounting of a run: honest tokens per cycle and the inflated drafted-as-output figure.

    Parameters
    ----------
    cycles : iterable of CycleResult, or a Generation, CycleBatch or GenerationBatch
        The cycles of a run.

    Returns
    -------
    Accounting

    Raises
    ------
    ValueError
        If there are no cycles.
    TypeError
        An item is not a CycleResult (per-cycle counts go to :func:`account_counts`).

    Examples
    --------
    >>> cs = [CycleResult((1, 2, 3, 0, 2), (1, 2, 3, 0), 4, 4, False, True),
    ...       CycleResult((2,), (1, 1, 1, 1), 0, 4, False, False),
    ...       CycleResult((0, 1, 2), (0, 1, 0, 0), 2, 4, False, False)]
    >>> account(cs).tokens_per_cycle
    3.0
    """
    if isinstance(cycles, (CycleBatch, GenerationBatch)):
        return account_counts(cycles.n_accepted, proposed=cycles.n_proposed, emitted=cycles.n_emitted)
    if isinstance(cycles, Generation):
        cycles = cycles.cycles
    cs = list(cycles)
    if not cs:
        raise ValueError("cycles: must contain at least one cycle")
    bad = next((c for c in cs if not isinstance(c, CycleResult)), None)
    if bad is not None:
        raise TypeError(f"cycles: must be CycleResult objects (got {type(bad).__name__}); "
                       "for per-cycle counts such as [4, 0, 2] use account_counts")
    return account_counts(np.array([c.n_accepted for c in cs], dtype=np.int64),
                          proposed=np.array([c.n_proposed for c in cs], dtype=np.int64),
                          emitted=np.array([c.n_emitted for c in cs], dtype=np.int64))
