"""Helpers shared by the benchmark scripts (not a benchmark itself)."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


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


def engine_tool():
    """tools/engine.py as a module (it builds llama-server and converts the models)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("engine_for_bench", REPO / "tools" / "engine.py")
    engine = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = engine
    spec.loader.exec_module(engine)
    return engine


def execute_notebook(source: Path, *, seed: int, trials: int, out: Path | None = None):
    """Execute one jupytext notebook as the book's build does (papermill, the ``python3``
    kernel, the book's parameters); the executed notebook, its wall seconds and the load
    average (1 min) before and after."""
    import jupytext
    import papermill

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-nb-") as tmp:
        nb = Path(tmp) / "in.ipynb"
        jupytext.write(jupytext.read(source), nb)
        t0 = time.perf_counter()
        target = out or Path(tmp) / "out.ipynb"
        executed = papermill.execute_notebook(str(nb), str(target),
                                              parameters={"seed": seed, "trials": trials},
                                              cwd=str(source.parent), progress_bar=False,
                                              kernel_name="python3")
        seconds = time.perf_counter() - t0
    return executed, seconds, load_before, os.getloadavg()[0]


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def load_line(before: float, after: float) -> str:
    """The load average around a run, marked DISTURBED above one process per core."""
    disturbed = max(before, after) > cores()
    return (f"  load average {before:.1f} before, {after:.1f} after"
            + ("  ** DISTURBED: other processes were running; times are upper bounds **"
               if disturbed else ""))


def notebook_args(doc: str, argv=None):
    """The command line of a notebook benchmark: ``--seed``, ``--trials``, ``--out``."""
    import argparse

    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--trials", type=int, default=200_000)
    p.add_argument("--out", type=Path, help="keep the executed notebook here")
    return p.parse_args(argv)
