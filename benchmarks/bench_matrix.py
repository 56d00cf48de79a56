"""Appendix C, the conformance matrix, at its defaults: its execution time against its budget.

Executes ``notebooks/a3-kit-on-real-implementations.md`` once as the book's build does
(the transformers releases and the engines' environments are created first if needed, and
that is not counted), then prints the page's wall time, the budget (600 s with warm
caches on an idle 2-core machine), each job's seconds as the page's matrix reports them,
and the machine's load average before and after, so a run on a busy machine is visibly
marked as disturbed.

Run with ``.venv/bin/python benchmarks/bench_matrix.py [--seed N]``.
"""

from __future__ import annotations

import sys

from _common import REPO, cores, engine_tool, execute_notebook, load_line, notebook_args

BUDGET = 600.0


def main(argv=None) -> int:
    args = notebook_args(__doc__, argv)
    sys.path.insert(0, str(REPO / "tools"))
    import hf_envs
    import py_engines

    engine = engine_tool()
    engine.build()
    engine.build_speculative()
    for name in engine.models():
        engine.convert(name)
    for rel in hf_envs.RELEASES:
        hf_envs.ensure(rel)
    for name in ("vllm", "eagle", "medusa"):
        py_engines.ensure(name)
    _, seconds, load_before, load_after = execute_notebook(
        REPO / "notebooks" / "a3-kit-on-real-implementations.md", seed=args.seed,
        trials=args.trials, out=args.out)
    print(f"appendix C (the matrix) executed in {seconds:.1f} s (budget {BUDGET:.0f} s with "
          f"warm caches on an idle {cores()}-core machine): "
          f"{'within' if seconds <= BUDGET else 'OVER'} budget")
    print(load_line(load_before, load_after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
