"""Appendix F (the CPU measurements chapter 8 summarises) at its defaults: the execution time of the whole notebook against its budget.

Executes ``notebooks/a6-cpu-measurements.md`` once (jupytext, papermill, the same kernel and
parameters as the book's build; the engine is built first if needed, and its build is not
counted), then prints the chapter's wall time, the time of each of its timed parts as the
chapter glues them (:data:`SECTIONS`: the per-token checks, the book's decoder, the served
study, the memory-bound section's run), the budget (300 s on an idle 2-core machine) and
the machine's load average before and after, so a run on a busy machine is visibly marked
as disturbed.

Run with ``.venv/bin/python benchmarks/bench_chapter8.py [--seed N]``.
"""

from __future__ import annotations

import sys

from _common import REPO, cores, engine_tool, execute_notebook, load_line, notebook_args

BUDGET = 300.0
#: The chapter's timed parts, as it glues their seconds, in the order they run.
SECTIONS = {"cpu_book_seconds": "in-process per-token check",
            "cpu_study_seconds": "in-process study",
            "cpu_srv_seconds": "served study",
            "cpu_pt_small_seconds": "small target's per-token check",
            "cpu_pt_large_seconds": "large target's per-token check",
            "cpu_big_seconds": "memory-bound run"}


def main(argv=None) -> int:
    args = notebook_args(__doc__, argv)
    engine = engine_tool()
    engine.build()
    for name in engine.models():
        engine.convert(name)
    out, seconds, load_before, load_after = execute_notebook(
        REPO / "notebooks" / "a6-cpu-measurements.md", seed=args.seed, trials=args.trials,
        out=args.out)
    glued = {}
    for cell in out.cells:
        for o in cell.get("outputs", []):
            meta = o.get("metadata", {}).get("scrapbook", {})
            name = meta.get("name")
            if name in SECTIONS:
                text = next(v for k, v in o.get("data", {}).items() if k.endswith("text/plain"))
                glued[name] = float(text)
    print(f"Appendix F executed in {seconds:.1f} s (budget {BUDGET:.0f} s on an idle "
          f"{cores()}-core machine): {'within' if seconds <= BUDGET else 'OVER'} budget")
    print("  " + ", ".join(f"{label} {glued.get(name, float('nan')):.1f} s"
                           for name, label in SECTIONS.items()))
    print(load_line(load_before, load_after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
