"""Helpers shared by the benchmark scripts (not a benchmark itself)."""

from __future__ import annotations

import os
import time


def pin_to_one_core() -> str:
    """Restrict this process to one CPU when the platform allows it; say what was done."""
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu}"
    return "not pinned (no sched_setaffinity on this platform)"


def best_time(fn, repeats: int = 3):
    """Best wall-clock seconds of ``repeats`` calls of ``fn``, and the last call's result."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out
