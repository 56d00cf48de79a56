"""Appendix F (the CPU measurements chapter 8 summarises) at several seeds: the cost model against the headline speedup, run by run.

Executes ``notebooks/a6-cpu-measurements.md`` once per seed (the book's kernel and parameters,
as ``bench_chapter8.py`` does), ``--parallel`` executions at a time (two on a 2-core
machine put it at a load of about 2 to 4, the busy machine a reader's rebuild meets), and
prints for each run: the headline speedup measured (the large target's mixed-language
stream at batch one, temperature 1), the cost model's prediction from the same run's
windows, their relative error, the per-repeat errors, the chapter's wall time and the load
average around it; then whether the model was within ``--tolerance`` of the headline
every time. The table is also written as JSON (``--json``).

``--scale-only`` runs only the memory-bound section's study (``run_scale_study`` with the
chapter's own ``scale_knobs``, read from the notebook), the part the cost model and the
headline come from, in a fraction of the chapter's time.

Not part of ``make bench`` (five executions of the chapter take over an hour); run with
``.venv/bin/python benchmarks/seeds_chapter8.py --seeds 1,2,3,4,5 [--scale-only]``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from pathlib import Path

from _common import REPO, engine_tool, execute_notebook

sys.path.insert(0, str(REPO))
from specbook.prose import signed_percent  # noqa: E402

GLUED = ("cpu_big_headline", "cpu_big_predicted", "cpu_big_error", "cpu_big_window_errors",
         "cpu_big_error_wall", "cpu_big_waiting", "cpu_big_seconds", "cpu_pt_large_seconds",
         "cpu_pt_small_seconds")


def glued_values(notebook) -> dict:
    """The values of :data:`GLUED` an executed chapter glued (Python literals)."""
    out = {}
    for cell in notebook.cells:
        for o in cell.get("outputs", []):
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if name in GLUED:
                text = next(v for k, v in o.get("data", {}).items() if k.endswith("text/plain"))
                out[name] = ast.literal_eval(text)
    return out


CHAPTER = REPO / "notebooks" / "a6-cpu-measurements.md"


def chapter_scale_knobs() -> dict:
    """The chapter's ``scale_knobs = dict(...)``, read from its source (one copy)."""
    tree = ast.parse("\n".join(line for line in _code_lines(CHAPTER.read_text())))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "scale_knobs"
                and isinstance(node.value, ast.Call)):
            return {kw.arg: ast.literal_eval(kw.value) for kw in node.value.keywords}
    raise SystemExit(f"{CHAPTER}: no scale_knobs = dict(...) found")


def _code_lines(text: str):
    inside = False
    for line in text.splitlines():
        if line.startswith("```{code-cell}"):
            inside = True
        elif line.startswith("```") and inside:
            inside = False
        elif inside and not line.startswith(":tags:") and not line.startswith("---") \
                and not line.startswith("tags:") and not line.startswith("mystnb:") \
                and not line.startswith("  markdown_format"):
            yield line


def scale_run(seed: int) -> dict:
    """The chapter's memory-bound study alone at ``seed``: the headline row's numbers."""
    sys.path.insert(0, str(REPO))
    from specbook.served import run_scale_study

    before, t0 = os.getloadavg()[0], time.time()
    st = run_scale_study(seed=seed, **chapter_scale_knobs())
    seconds = time.time() - t0
    head = next(r for r in st.targets if r["target"] == "target_large"
                and r["language"] == "mixed")
    wins = [w["error"] for w in st.metadata["windows"] if w["target"] == "target_large"]
    return {"seed": seed, "seconds": seconds, "load_before": before, "started": t0,
            "load_after": os.getloadavg()[0], "cpu_big_headline": head["speedup"],
            "cpu_big_predicted": head["predicted_speedup"], "cpu_big_error": head["error"],
            "cpu_big_error_wall": head["error_wall"], "cpu_big_waiting": head["waiting"],
            "cpu_big_window_errors": wins, "cpu_big_seconds": st.seconds,
            "interval": [head["speedup_low"], head["speedup_high"]],
            "acceptance": head["acceptance"], "c": head["c"], "g": head["g"]}


def one_run(seed: int, trials: int, keep: Path) -> dict:
    """One execution at ``seed``; the executed notebook is kept in ``keep`` (a failed one
    too, with its traceback in the failing cell's output)."""
    t0 = time.time()
    out = keep / f"a6-cpu-measurements-seed{seed}.ipynb"
    nb, seconds, before, after = execute_notebook(REPO / "notebooks" / "a6-cpu-measurements.md",
                                                  seed=seed, trials=trials, out=out)
    return {"seed": seed, "seconds": seconds, "load_before": before, "load_after": after,
            "started": t0, "notebook": str(out), **glued_values(nb)}


def guarded(run, seed: int, *args) -> dict:
    """``run(seed, *args)``, or, when it raises, the failure: its seed, how long it ran and
    the error's last line (papermill's names the failing cell). A failed run counts as not
    within the tolerance; the other runs go on."""
    started = time.time()
    try:
        return run(seed, *args)
    except Exception as err:                 # noqa: BLE001 - reported, counted as a miss
        text = str(err).strip().splitlines()
        return {"seed": seed, "started": started, "seconds": time.time() - started,
                "failed": f"{type(err).__name__}: " + (text[-1] if text else "")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="1,2,3,4,5", help="comma-separated seeds")
    p.add_argument("--parallel", type=int, default=2, help="executions at a time")
    p.add_argument("--trials", type=int, default=200_000)
    p.add_argument("--tolerance", type=float, default=0.10,
                   help="relative error of the cost model counted as agreement")
    p.add_argument("--json", type=Path, default=REPO / "_build" / "seeds_chapter8.json")
    p.add_argument("--scale-only", action="store_true",
                   help="run only the memory-bound section's study (run_scale_study)")
    args = p.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        print(f"error: --seeds: comma-separated integers (got {args.seeds!r})", file=sys.stderr)
        return 2
    if not seeds or args.parallel < 1:
        print("error: --seeds needs at least one seed and --parallel at least 1",
              file=sys.stderr)
        return 2
    engine = engine_tool()
    engine.build()
    for name in engine.models():
        engine.convert(name)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    partial = args.json.with_suffix(".partial.jsonl")     # each run as it ends: none is lost
    partial.write_text("", encoding="utf-8")
    samples = []                             # (time, 1-minute load average) every 5 s
    stop = threading.Event()

    def sample_load():
        while not stop.is_set():
            samples.append((time.time(), os.getloadavg()[0]))
            stop.wait(5.0)

    sampler = threading.Thread(target=sample_load, daemon=True)
    sampler.start()
    runs = []

    def done(run):
        seen = [v for t, v in samples if run["started"] <= t <= run["started"] + run["seconds"]]
        run["load"] = ({"min": min(seen), "median": statistics.median(seen), "max": max(seen)}
                       if seen else None)
        runs.append(run)
        with partial.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(run) + "\n")
        if "failed" in run:
            print(f"seed {run['seed']}: FAILED after {run['seconds']:.0f} s: {run['failed']}",
                  flush=True)
            return
        print(f"seed {run['seed']}: measured {run['cpu_big_headline']:.2f}x, model "
              f"{run['cpu_big_predicted']:.2f}x, error {run['cpu_big_error']:+.1%} "
              f"({run['seconds']:.0f} s)", flush=True)

    keep = args.json.parent / "seeds_chapter8"
    keep.mkdir(parents=True, exist_ok=True)
    try:                                     # a failed run is recorded, the others go on
        if args.scale_only:                  # separate processes: separate clients and GILs
            with ProcessPoolExecutor(max_workers=args.parallel) as pool:
                for fut in as_completed([pool.submit(guarded, scale_run, s) for s in seeds]):
                    done(fut.result())
        else:                                # each execution has a kernel of its own
            with ThreadPoolExecutor(max_workers=args.parallel) as pool:
                for fut in as_completed([pool.submit(guarded, one_run, s, args.trials, keep)
                                         for s in seeds]):
                    done(fut.result())
    finally:
        stop.set()
    runs.sort(key=lambda r: r["seed"])
    failed = [r for r in runs if "failed" in r]
    runs = [r for r in runs if "failed" not in r]
    print("| seed | headline measured | cost model | error | error, wall clock | "
          "per-repeat errors | s | load min, median, max |")
    print("|--:|--:|--:|--:|--:|:--|--:|:--|")
    within = 0
    for r in runs:
        err = r["cpu_big_error"]
        within += abs(err) <= args.tolerance
        reps = ", ".join(signed_percent(e) for e in r["cpu_big_window_errors"])
        load = r.get("load")
        loads = ("-" if not load else
                 f"{load['min']:.1f}, {load['median']:.1f}, {load['max']:.1f}")
        wall = r.get("cpu_big_error_wall")
        print(f"| {r['seed']} | {r['cpu_big_headline']:.2f}× | {r['cpu_big_predicted']:.2f}× | "
              f"{err:+.1%} | {'-' if wall is None else f'{wall:+.1%}'} | {reps} | "
              f"{r['seconds']:.0f} | {loads} |")
    for r in failed:
        print(f"| {r['seed']} | failed: {r['failed']} | | | | | {r['seconds']:.0f} | |")
    print(f"cost model within {args.tolerance:.0%} of the headline in {within} of "
          f"{len(runs) + len(failed)} runs ({len(failed)} failed; {os.cpu_count()} cores, "
          f"{args.parallel} executions at a time)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(runs + failed, indent=1), encoding="utf-8")
    print(f"results: {args.json}; executed notebooks in {keep}")
    return 0 if within == len(runs) and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
