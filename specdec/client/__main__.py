"""Command line of the measurement client: ``python -m specdec.client --endpoint URL ...``.

Runs a closed-loop concurrency sweep (``--concurrency 1,2,4``) or an open-loop request-rate
sweep (``--rate 1,2,4``, ``--burstiness``), or with ``--baseline URL`` the paired,
interleaved protocol of chapter 8 (``--endpoint`` is the speculative server); prints one
line per load point and writes every request to a JSON file (schema in
:mod:`specdec.client`). Prompts: a JSON file ``{"language": ["prompt", ...]}`` or, by
default, the book's held-out prompts in Italian, English, Chinese and Spanish.

Exit status: 0 when every request was measured; 2 for bad arguments (nothing is sent);
3 when a request failed or Ctrl-C stopped the run: the message names the request, and the
results file is still written, with every request measured before it and the failure
(``"complete": false``, ``"failure"``: request, error, time).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from . import SCHEMA
from .load import (NoTokenizer, RunFailed, closed_loop, failure_record, open_loop, paired,
                   prompt_lengths, summarize_run)
from .stream import ClientError, Endpoint, RequestSpec, plain_sampling

INCOMPLETE = 3                      # exit status: a request failed; results so far written


def _numbers(text: str, kind, name: str) -> list:
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: comma-separated numbers (got {text!r})")
    if not values or any(not (v > 0) for v in values):
        raise argparse.ArgumentTypeError(f"{name}: every value must be > 0 (got {text!r})")
    return values


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specdec.client", description=__doc__.split(
        "\n\n")[0], epilog=__doc__[__doc__.index("Exit status"):].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoint", required=True, help="base URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--baseline", help="base URL of the same server without speculation: "
                                      "run the paired protocol against it")
    p.add_argument("--api", choices=("completions", "chat"), default="completions")
    p.add_argument("--model", help="model name sent with every request (vLLM, SGLang)")
    p.add_argument("--prompts", type=Path, help='JSON file {"language": ["prompt", ...]}')
    p.add_argument("--languages", help="comma-separated subset of the prompt languages")
    p.add_argument("--prompts-per-language", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0, help="request k gets seed SEED + k")
    p.add_argument("--concurrency", default=None,
                   help="closed loop: comma-separated levels (default 1)")
    p.add_argument("--rate", help="open loop: comma-separated request rates (requests/s)")
    p.add_argument("--burstiness", type=float, default=1.0,
                   help="gamma shape of the gaps between arrivals (1: Poisson)")
    p.add_argument("--ttft-max", type=float, help="goodput limit on TTFT, seconds")
    p.add_argument("--tpot-max", type=float, help="goodput limit on TPOT, seconds")
    p.add_argument("--repeats", type=int, default=None,
                   help="paired protocol: repeats (default 3)")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--out", type=Path, default=Path("specdec-client-results.json"))
    p.add_argument("--no-progress", action="store_true")
    return p


def _prompts(args) -> dict[str, list[str]]:
    if args.prompts is not None:
        try:
            data = json.loads(args.prompts.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"--prompts {args.prompts}: {err}") from None
        if not (isinstance(data, dict) and data and all(
                isinstance(v, list) and v and all(isinstance(s, str) and s for s in v)
                for v in data.values())):
            raise ValueError(f"--prompts {args.prompts}: must be a JSON object "
                             f'{{"language": ["prompt", ...]}} with non-empty lists')
    else:
        from ..nn import load_heldout
        data = {k: v["prompts"] for k, v in load_heldout().items()}
    if args.languages:
        wanted = [x.strip() for x in args.languages.split(",") if x.strip()]
        missing = [x for x in wanted if x not in data]
        if missing:
            raise ValueError(f"--languages: no prompts for {missing} "
                             f"(have {sorted(data)})")
        data = {k: data[k] for k in wanted}
    n = args.prompts_per_language
    return {k: list(v[:n]) for k, v in data.items()}


def _progress(total: int, enabled: bool, label: str):
    if not enabled:
        return None, lambda: None
    from tqdm import tqdm
    bar = tqdm(total=total, desc=label, unit="req", file=sys.stderr, leave=False)
    return bar.update, bar.close


def _line(s: dict) -> str:
    load = s["load"]
    where = (f"concurrency {load['concurrency']}" if load["kind"] == "closed"
             else f"rate {load['rate']:g}/s (burstiness {load['burstiness']:g})")
    acc = "" if math.isnan(s["acceptance"]) else f", acceptance {s['acceptance']:.3f}"
    return (f"{where}: {s['output_throughput']:.1f} tokens/s, goodput "
            f"{s['goodput']:.2f} req/s, TTFT p50 {1e3 * s['ttft']['p50']:.1f} ms, "
            f"TPOT p50 {1e3 * s['tpot']['p50']:.2f} ms, ITL p99 "
            f"{1e3 * s['itl']['p99']:.2f} ms{acc}")


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        conc = _numbers(args.concurrency or "1", int, "--concurrency")
        rates = None if args.rate is None else _numbers(args.rate, float, "--rate")
        endpoint = _endpoint("--endpoint", args.endpoint, args)
        base = None if args.baseline is None else _endpoint("--baseline", args.baseline, args)
        sampling = plain_sampling(args.temperature)
        for flag, value in (("--max-tokens", args.max_tokens),
                            ("--prompts-per-language", args.prompts_per_language),
                            ("--repeats", args.repeats)):
            if value is not None and value < 1:
                raise ValueError(f"{flag}: must be >= 1 (got {value})")
        if args.seed < 0:
            raise ValueError(f"--seed: must be >= 0 (got {args.seed}); servers read a "
                             "negative seed as 'random'")
        if not (math.isfinite(args.burstiness) and args.burstiness > 0):
            raise ValueError(f"--burstiness: must be a finite number > 0 (got {args.burstiness})")
        for flag, value in (("--ttft-max", args.ttft_max), ("--tpot-max", args.tpot_max)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{flag}: must be a finite number of seconds > 0 (got {value})")
        if args.repeats is not None and base is None:
            raise ValueError("--repeats: only the paired protocol repeats; give --baseline too")
        if rates is not None and args.concurrency is not None:
            raise ValueError("--rate and --concurrency: give one of them (open or closed loop)")
        if not args.out.parent.is_dir():
            raise ValueError(f"--out: directory {str(args.out.parent)!r} does not exist")
        if args.out.is_dir():
            raise ValueError(f"--out: {str(args.out)!r} is a directory; name a file in it")
        prompts = _prompts(args)
    except (ValueError, argparse.ArgumentTypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    show = not args.no_progress and sys.stderr.isatty()
    result = {"schema": SCHEMA, "command": list(sys.argv if argv is None else argv),
              "endpoint": {"url": endpoint.url, "api": endpoint.api, "model": endpoint.model},
              "baseline": None if base is None else base.url, "sampling": sampling,
              "max_tokens": args.max_tokens, "seed": args.seed, "complete": False,
              "failure": None, "runs": []}
    close = lambda: None                             # noqa: E731
    try:
        result["prompt_lengths"] = _lengths(endpoint, prompts)
        specs = [RequestSpec(f"{lang}-{k}", p, args.max_tokens, sampling, args.seed + k, lang)
                 for lang, ps in prompts.items() for k, p in enumerate(ps)]
        if base is not None:
            n = (args.repeats or 3) * 2 * len(specs)
            update, close = _progress(n, show, "paired")
            out = paired({"baseline": base, "speculative": endpoint}, prompts,
                         baseline="baseline", repeats=args.repeats or 3,
                         max_tokens=args.max_tokens, sampling=sampling, seed=args.seed,
                         progress=update)
            close()
            result["paired"] = out
            for row in out["rows"]:
                if "speedup" in row:
                    print(f"{row['language']}: speedup {row['speedup']:.3f} (IQR "
                          f"{row['speedup_iqr']:.3f}), acceptance {row['acceptance']:.3f}")
        points = ([("open", r) for r in rates] if rates else [("closed", c) for c in conc])
        for kind, value in points:
            update, close = _progress(len(specs), show, f"{kind} {value:g}")
            run = (open_loop(endpoint, specs, value, args.burstiness, args.seed,
                             progress=update) if kind == "open"
                   else closed_loop(endpoint, specs, value, progress=update))
            close()
            s = summarize_run(run, ttft_max=args.ttft_max, tpot_max=args.tpot_max)
            result["runs"].append({**s, "records": [r.to_dict() for r in run.records],
                                   "complete": True})
            print(_line(s))
        result["complete"] = True
    except RunFailed as err:                 # keep what was measured before it
        close()
        if isinstance(err.partial, dict):
            result["paired"] = err.partial
        else:
            s = summarize_run(err.partial, ttft_max=args.ttft_max, tpot_max=args.tpot_max)
            result["runs"].append({**s, "records": [r.to_dict() for r in err.partial.records],
                                   "complete": False})
        result["failure"] = err.failure
    except ClientError as err:               # before any run: prompt lengths
        result["failure"] = failure_record(None, str(err), time.perf_counter(),
                                           during="prompt lengths (/tokenize)")
    except KeyboardInterrupt:
        result["failure"] = failure_record(None, "interrupted (KeyboardInterrupt)",
                                           time.perf_counter())
    args.out.write_text(json.dumps(result, indent=1, allow_nan=True), encoding="utf-8")
    if result["complete"]:
        print(f"results: {args.out}")
        return 0
    measured = sum(len(r["records"]) for r in result["runs"]) + sum(
        len(r["records"]) for r in result.get("paired", {}).get("runs", []))
    print(f"error: {result['failure']['error']}\nresults so far: {args.out} ({measured} "
          f"requests measured; the failure recorded under 'failure')", file=sys.stderr)
    return INCOMPLETE


def _endpoint(flag: str, url: str, args) -> Endpoint:
    try:
        return Endpoint(url, args.api, args.model, args.timeout)
    except ValueError as err:
        raise ValueError(f"{flag}: {err}") from None


def _lengths(endpoint: Endpoint, prompts) -> dict:
    try:
        return prompt_lengths(endpoint, prompts)
    except NoTokenizer as err:                        # a server without /tokenize
        out = prompt_lengths(None, prompts)
        for v in out.values():
            v["tokens"] = f"unavailable: {err}"
        return out


if __name__ == "__main__":
    sys.exit(main())
