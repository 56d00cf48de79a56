"""Command line: ``python -m specdec.conformance package.module:function``."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .cases import block_cases, token_cases
from .conventions import BLOCK, LAWS, LOGITS, TOKEN, load_sampler
from .runner import run_battery


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: ``python -m specdec.conformance package.module:function``.

    Prints the Markdown report. Exit status: 0 if the sampler passes, 1 if it fails, 2 on
    a usage error (bad arguments, sampler not importable, undecidable convention).
    """
    ap = argparse.ArgumentParser(
        prog="python -m specdec.conformance",
        description="Test a speculative sampler against the exact target law "
                    "(standard battery, family-wise false-alarm control).")
    ap.add_argument("sampler", nargs="?", help="package.module:function")
    ap.add_argument("--kind", choices=(TOKEN, BLOCK))
    ap.add_argument("--vectorised", action="store_true", default=None,
                    help="token sampler takes a trailing n and returns n draws")
    ap.add_argument("--inputs", choices=(LAWS, LOGITS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trials", type=int, default=None)
    ap.add_argument("--false-alarm", type=float, default=1e-3)
    ap.add_argument("--power", type=float, default=0.9)
    ap.add_argument("--cases", default=None, help="comma-separated case names")
    ap.add_argument("--list-cases", action="store_true", help="print the standard cases and exit")
    ap.add_argument("--timings", action="store_true", help="add wall times to the report")
    args = ap.parse_args(argv)
    if args.list_cases:
        for c in token_cases():
            print(f"token  {c.name:16s} {c.description}")
        for c in block_cases():
            print(f"block  {c.name:16s} {c.description}")
        return 0
    if not args.sampler:
        ap.print_usage(sys.stderr)
        print("error: the sampler (package.module:function) is required", file=sys.stderr)
        return 2
    try:
        sampler = load_sampler(args.sampler)
        cases = None if args.cases is None else [c.strip() for c in args.cases.split(",") if c.strip()]
        report = run_battery(sampler, kind=args.kind, vectorised=args.vectorised, inputs=args.inputs,
                             cases=cases, seed=args.seed, trials=args.trials,
                             false_alarm=args.false_alarm, power=args.power)
    except (ImportError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.to_markdown(timings=args.timings))
    return 0 if report.passed else 1



if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
