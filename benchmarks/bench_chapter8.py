"""Chapter 8 at its defaults: the execution time of the whole notebook against its budget.

Executes ``notebooks/08-measurement.md`` once (jupytext, papermill, the same kernel and
parameters as the book's build; the engine is built first if needed, and its build is not
counted), then prints the chapter's wall time, the time of its three studies as the
chapter reports them (the book's decoder, the served study, the memory-bound section's
run), the budget (300 s on an idle 2-core machine) and the machine's load average before
and after, so a run on a busy machine is visibly marked as disturbed.

Run with ``.venv/bin/python benchmarks/bench_chapter8.py [--seed N]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET = 300.0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--trials", type=int, default=200_000)
    p.add_argument("--out", type=Path, help="keep the executed notebook here")
    args = p.parse_args(argv)
    import jupytext
    import papermill

    spec = importlib.util.spec_from_file_location("engine_for_bench", REPO / "tools" / "engine.py")
    engine = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = engine
    spec.loader.exec_module(engine)
    engine.build()
    for name in engine.models():
        engine.convert(name)
    source = REPO / "notebooks" / "08-measurement.md"
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-ch8-") as tmp:
        nb = Path(tmp) / "in.ipynb"
        jupytext.write(jupytext.read(source), nb)
        t0 = time.perf_counter()
        target = args.out or Path(tmp) / "out.ipynb"
        out = papermill.execute_notebook(str(nb), str(target),
                                         parameters={"seed": args.seed, "trials": args.trials},
                                         cwd=str(source.parent), progress_bar=False,
                                         kernel_name="python3")
        seconds = time.perf_counter() - t0
    load_after = os.getloadavg()[0]
    glued = {}
    for cell in out.cells:
        for o in cell.get("outputs", []):
            meta = o.get("metadata", {}).get("scrapbook", {})
            name = meta.get("name")
            if name in ("ch8_study_seconds", "ch8_srv_seconds", "ch8_big_seconds"):
                text = next(v for k, v in o.get("data", {}).items() if k.endswith("text/plain"))
                glued[name] = float(text)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    disturbed = max(load_before, load_after) > cores
    print(f"chapter 8 executed in {seconds:.1f} s (budget {BUDGET:.0f} s on an idle "
          f"{cores}-core machine): {'within' if seconds <= BUDGET else 'OVER'} budget")
    print(f"  in-process study {glued.get('ch8_study_seconds', float('nan')):.1f} s, "
          f"served study {glued.get('ch8_srv_seconds', float('nan')):.1f} s, "
          f"memory-bound run {glued.get('ch8_big_seconds', float('nan')):.1f} s")
    print(f"  load average {load_before:.1f} before, {load_after:.1f} after"
          + ("  ** DISTURBED: other processes were running; times are upper bounds **"
             if disturbed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
