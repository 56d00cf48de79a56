"""Command line: ``python -m specdec.conformance package.module:function``.

Unless ``--trials`` is given, the kit first runs a short pilot of every case, prints the
plan (trials per case, estimated time, the detectable TV it buys) to standard error,
then runs it. ``--resolution TV`` asks for a detectable TV; ``--budget SECONDS`` for the
best TV that time allows; ``--plan`` prints the plan and stops. ``--accepted-law`` names
the accepted-count law of a block sampler's rule (``token``, ``block``, ``matching`` or
``package.module:function``). ``--measure`` measures the sampler's loss instead of
testing it (TV and KL with intervals, :func:`specdec.conformance.measure_loss`; exit 0).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from specdec.conformance.cases import (BLOCK_CASE_NAMES, RULE_CASE_NAMES, batch_cases, block_cases, rule_cases,
                    token_cases)
from specdec.conformance.conventions import (ACCEPTED_LAWS, AUTO, BATCH, BLOCK, COUNTED, FROM_Q, LAWS, LOGITS, NOT_COUNTED,
                          OWN, TOKEN, check_accepted_law, describe_sampler, load_sampler)
from specdec.conformance.loss import measure_loss
from specdec.conformance.checks import resolve_cases
from specdec.conformance.pilot import plan_battery
from specdec.conformance.runner import run_battery


def main(argv: Sequence[str] | None = None, prog: str = "python -m specdec.conformance") -> int:
    """Command-line entry point: ``python -m specdec.conformance package.module:function``.

    Prints the Markdown report. Exit status: 0 if the sampler passes, 1 if it fails, 2 on
    a usage error (bad arguments, sampler not importable, undecidable convention).
    """
    ap = argparse.ArgumentParser(
        prog=prog,
        description="Test a speculative sampler against the exact target law "
                    "(standard battery, family-wise false-alarm control).")
    ap.add_argument("sampler", nargs="?", help="package.module:function")
    ap.add_argument("--kind", choices=(TOKEN, BLOCK, BATCH),
                    help="token: one step f(p, q, rng); block: a whole gamma-token cycle; "
                         "batch: cycles of several sequences at once (default: read from "
                         "the signature)")
    ap.add_argument("--vectorised", action="store_true", default=None,
                    help="token sampler takes a trailing n and returns n draws")
    ap.add_argument("--inputs", choices=(LAWS, LOGITS),
                    help="laws: p and q as probabilities; logits: raw logits with a "
                         "temperature keyword (default: read from the signature)")
    ap.add_argument("--proposals", choices=(AUTO, FROM_Q, OWN), default=None,
                    help="where the sampler's proposals come from (default: detected)")
    ap.add_argument("--accepted-eos", choices=(AUTO, COUNTED, NOT_COUNTED), default=None,
                    help="whether an accepted end-of-sequence is reported as accepted (default: "
                         "detected)")
    ap.add_argument("--rule", default=None, metavar="NAME",
                    help="block samplers: the verification rule the sampler implements, whose "
                         "accepted-count law its counts must follow (a name of specdec.rules: "
                         + ", ".join(ACCEPTED_LAWS) + ")")
    ap.add_argument("--accepted-law", default=None,
                    help="block samplers: as --rule NAME, or package.module:function, a law of "
                         "the toy models")
    ap.add_argument("--measure", action="store_true",
                    help="measure the loss (TV and KL with intervals) instead of testing")
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of the numpy Generator handed to the sampler (default 0)")
    ap.add_argument("--trials", type=int, default=None, help="trials per case (no pilot; default: planned from a pilot "
                         "to reach --resolution)")
    ap.add_argument("--resolution", type=float, default=None,
                    help="detectable TV wanted on every case (default 0.001 vectorised, "
                         "0.01 per step)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds for the whole battery: the best resolution it allows "
                         "(default: none, --resolution decides)")
    ap.add_argument("--plan", action="store_true", help="print the plan (after a pilot) and stop")
    ap.add_argument("--false-alarm", type=float, default=1e-3,
                    help="probability that an exact sampler fails the whole battery "
                         "(default 1e-3)")
    ap.add_argument("--power", type=float, default=0.9,
                    help="probability of catching an error as large as the detectable TV "
                         "(default 0.9)")
    ap.add_argument("--cases", default=None, help="comma-separated case names")
    ap.add_argument("--list-cases", action="store_true", help="print the standard cases and exit")
    ap.add_argument("--timings", action="store_true", help="add wall times to the report")
    ap.add_argument("--no-progress", action="store_true",
                    help="no progress bar on standard error")
    args = ap.parse_args(argv)
    if args.list_cases:
        for c in token_cases():
            print(f"token  {c.name:16s} {c.description}")
        for c in block_cases():
            print(f"block  {c.name:16s} {c.description}")
        for c in rule_cases():
            print(f"block  {c.name:16s} {c.description} (opt-in)")
        for c in batch_cases():
            print(f"batch  {c.name:16s} {c.description}")
        return 0
    if not args.sampler:
        ap.print_usage(sys.stderr)
        print("error: the sampler (package.module:function) is required", file=sys.stderr)
        return 2
    try:
        _check_arguments(args)
        sampler = load_sampler(args.sampler)
        cases = None if args.cases is None else [c.strip() for c in args.cases.split(",") if c.strip()]
        if cases is None and args.sampler.startswith("rule:"):
            # a registry rule: the block cases and the rule case, where its flaws show
            cases = list(BLOCK_CASE_NAMES + RULE_CASE_NAMES)
        if args.measure:
            report = measure_loss(sampler, kind=args.kind, vectorised=args.vectorised,
                                  inputs=args.inputs, cases=cases, seed=args.seed, trials=args.trials)
            print(report.to_markdown())
            return 0
        if args.rule is not None and args.accepted_law is not None:
            raise ValueError("--rule: give the rule or --accepted-law, not both")
        if args.rule is not None and args.rule not in ACCEPTED_LAWS:
            raise ValueError(f"--rule: one of {', '.join(ACCEPTED_LAWS)} (got {args.rule!r})")
        law = args.rule if args.rule is not None else args.accepted_law
        if law is not None and law not in ACCEPTED_LAWS:
            if ":" not in law:
                raise ValueError(f"--accepted-law: one of {', '.join(ACCEPTED_LAWS)} or "
                                 f"package.module:function (got {law!r})")
            law = load_sampler(law, "--accepted-law")
            try:
                check_accepted_law(law)
            except TypeError as exc:
                raise ValueError(f"--accepted-law: {str(exc).removeprefix('accepted_law: ')}") \
                    from None
        conv = dict(kind=args.kind, vectorised=args.vectorised, inputs=args.inputs,
                    proposals=args.proposals, accepted_eos=args.accepted_eos, accepted_law=law)
        trials = args.trials
        resolution = None
        if trials is None:
            spec = describe_sampler(sampler, **conv)
            case_list = resolve_cases(spec.kind, cases)
            the_plan = plan_battery(spec, sampler, case_list, resolution=args.resolution,
                                    budget=args.budget, false_alarm=args.false_alarm,
                                    power=args.power, seed=args.seed, pilot=True)
            print(f"plan: {the_plan.summary()}", file=sys.stderr, flush=True)
            if args.plan:
                print("| case | trials | detectable TV | seconds (estimated) |")
                print("|:--|--:|--:|--:|")
                for name, n, tv, c in zip(the_plan.cases, the_plan.trials, the_plan.tv_detectable,
                                          the_plan.seconds_per_trial):
                    print(f"| {name} | {n:,} | {tv:.2g} | {n * c:.1f} |")
                return 0
            trials, resolution = the_plan.trials_by_case, the_plan.resolution
        bar = {}

        def progress(case, done, total):       # a bar over the battery's trials, on stderr
            if args.no_progress:
                return
            if "bar" not in bar:
                from tqdm import tqdm
                bar["bar"] = tqdm(total=total, desc="battery", unit="trial", file=sys.stderr,
                                  leave=False, unit_scale=True)
            bar["bar"].update(done)
            if case is not None:
                bar["bar"].set_postfix_str(f"{case} done", refresh=True)

        try:
            report = run_battery(sampler, **conv, cases=cases, seed=args.seed, trials=trials,
                                 false_alarm=args.false_alarm, power=args.power,
                                 progress=progress)
        finally:
            if "bar" in bar:
                bar["bar"].close()
        if resolution is not None:
            import dataclasses

            report = dataclasses.replace(report, resolution=resolution)
    except (ImportError, ValueError, TypeError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.to_markdown(timings=args.timings))
    return 0 if report.passed else 1


def _check_arguments(args) -> None:
    """Usage errors found before anything is imported or run (each names its flag)."""
    if args.seed < 0:
        raise ValueError(f"--seed: must be a non-negative integer (got {args.seed})")
    if not 0 < args.false_alarm < 1:
        raise ValueError(f"--false-alarm: must lie in (0, 1) (got {args.false_alarm})")
    sizing = [flag for flag, value in (("--trials", args.trials), ("--resolution", args.resolution),
                                       ("--budget", args.budget)) if value is not None]
    if len(sizing) > 1:
        raise ValueError(f"{' and '.join(sizing)}: give at most one; each sets the trials "
                         "(--trials directly, --resolution and --budget through a pilot)")
    if args.plan and args.trials is not None:
        raise ValueError("--plan: the plan comes from a pilot; use it with --resolution or "
                         "--budget (or neither), not with --trials")
    if args.measure and (args.plan or args.resolution is not None or args.budget is not None):
        raise ValueError("--measure: takes --trials (or its default), not --plan, "
                         "--resolution or --budget")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
