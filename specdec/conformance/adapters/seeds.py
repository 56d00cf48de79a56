"""Engine seeds for seeded requests, shared by the adapters that seed one request at a time.

An engine takes an integer seed per request (mlx's ``mx.random.seed``, ONNX Runtime GenAI's
``random_seed``); the adapter derives them from the project's seed and a stream number
(a row, a setting) through :class:`numpy.random.SeedSequence`, so the same ``(seed,
stream)`` gives the same requests and different streams do not share seeds. Arithmetic on
the project's seed (``seed * 10**7 + k``) overflowed an engine's 32-bit seed at seed 2026.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["request_seeds"]


def request_seeds(seed: int, stream: int, requests: int, *, bits: int = 32) -> list[int]:
    """``requests`` distinct engine seeds below ``2**bits`` for ``(seed, stream)``.

    Parameters
    ----------
    seed, stream : int
        The project's seed and the stream (row, setting), each >= 0.
    requests : int
        How many seeds, >= 1.
    bits : int
        The engine's seed width: 32 for an unsigned 32-bit seed, 31 for a signed one
        (ONNX Runtime GenAI's ``random_seed``); 1 to 32.

    Returns
    -------
    list of int, length ``requests``
        The words of ``SeedSequence([seed, stream]).generate_state`` masked to ``bits``
        bits, in order, a repeat skipped (at 32 bits, the first ``requests`` words
        themselves unless two collide).

    Raises
    ------
    ValueError
        A negative or non-integer ``seed`` or ``stream``, ``requests`` < 1, ``bits``
        outside 1..32, or more seeds asked than ``2**bits`` can hold distinct.
    """
    for name, v in (("seed", seed), ("stream", stream), ("requests", requests), ("bits", bits)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ValueError(f"{name}: must be an integer (got {v!r})")
    if seed < 0 or stream < 0:
        raise ValueError(f"seed, stream: must be >= 0 (got {seed}, {stream})")
    if requests < 1:
        raise ValueError(f"requests: must be >= 1 (got {requests})")
    if not 1 <= bits <= 32 or requests > 2 ** bits // 4:
        raise ValueError(f"bits: must be in 1..32 with requests <= 2**bits / 4 (got bits "
                         f"{bits}, requests {requests})")
    mask = (1 << bits) - 1
    words = np.random.SeedSequence([int(seed), int(stream)]).generate_state(4 * requests + 16)
    out, seen = [], set()
    for w in (int(x) & mask for x in words):
        if w not in seen:
            seen.add(w)
            out.append(w)
            if len(out) == requests:
                return out
    raise RuntimeError("request_seeds: too many repeats in the stream")  # about never
