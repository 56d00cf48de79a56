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

Exactness, per token (``specdec exactness reported|model``, or ``--exactness`` here): seeded
requests, and every emitted token tested against the law it should have been drawn from
(:mod:`specdec.stats.pertoken`: randomised probability integral transform, a mean test per
ordering, Holm). ``reported`` works with any OpenAI-compatible server that returns
log-probabilities: the law of each position is the reported top ``--top-logprobs`` tokens
with the rest pooled, ordered by the reported probability; sample at ``--temperature 1``
(servers report the raw law) or give ``--post-sampling-probs`` (llama.cpp reports the law
after its sampling chain) or ``--processed-logprobs`` (vLLM started with ``--logprobs-mode
processed_logprobs``). ``model`` computes the laws with the book's models (``--target``,
``--draft``) for the book's own llama-server (``specdec serve``); the numerical disagreement
between numpy and the engine is measured on ``--baseline`` (a plain server of the same
target) unless ``--tolerance`` is given. Prints the verdict, the p-values, the tokens tested
and the detectable per-token TV at power 0.9 for errors that move mass along the orderings
(toward the draft; a temperature or truncation mismatch); a Kolmogorov-Smirnov test per
ordering adds power against errors of other shapes, such as another model's law, with no
stated resolution for them (``specdec exactness first-tokens`` is the assumption-free
cross-check). Exit status 0 pass, 1 fail, 2 usage, 3 a request failed or Ctrl-C stopped the
run (no verdict; the results file records the failure), 4 nothing could be tested (no usable
log-probabilities, a baseline whose laws are not the model's, or too few tokens to detect
anything): no verdict.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

from specdec.client import SCHEMA
from specdec.client.load import (NoTokenizer, RunFailed, closed_loop, failure_record, open_loop, paired,
                   prompt_lengths, summarize_run)
from specdec.client.stream import ClientError, Endpoint, RequestSpec, plain_sampling

INCOMPLETE = 3                      # exit status: a request failed; results so far written
UNTESTABLE = 4                      # exit status: no usable laws, nothing tested (no verdict)
#: A measured numpy-vs-engine disagreement above this (per-token TV) means another model or
#: other settings, not rounding (the book's models measure below 3e-3): refused, untested.
MAX_TOLERANCE = 0.05


def _numbers(text: str, kind, name: str) -> list:
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: comma-separated numbers (got {text!r})")
    if not values or any(not (v > 0) for v in values):
        raise argparse.ArgumentTypeError(f"{name}: every value must be > 0 (got {text!r})")
    return values


def _run_options(p: argparse.ArgumentParser, out: str, what: str) -> None:
    """--timeout, --out and --no-progress, shared by every server command."""
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds to wait to connect or for the next bytes of a response "
                        "(default 60)")
    p.add_argument("--out", type=Path, default=Path(out), help=f"{what} (default {out})")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar on standard error")


#: Options of the load runs only (``specdec bench``), refused by the exactness checks.
BENCH_ONLY = ("--concurrency", "--rate", "--burstiness", "--ttft-max", "--tpot-max", "--repeats")


def parser(prog: str = "python -m specdec.client", mode: str = "all",
           law: str | None = None) -> argparse.ArgumentParser:
    """The command line: ``mode`` "all" (``python -m specdec.client``, every option),
    "bench" (``specdec bench``: no exactness options) or "exactness" (``specdec exactness
    reported|model``: no load options, and with ``law`` only that mode's options)."""
    if mode not in ("all", "bench", "exactness"):
        raise ValueError(f"mode: must be 'all', 'bench' or 'exactness' (got {mode!r})")
    if law not in (None, "reported", "model"):
        raise ValueError(f"law: must be None, 'reported' or 'model' (got {law!r})")
    only = {"reported": {"--baseline", "--target", "--draft", "--top-k"},
            "model": {"--top-logprobs", "--post-sampling-probs", "--processed-logprobs"},
            None: set()}[law]                    # the other mode's options, left out
    paragraphs = __doc__.split("\n\n")
    # `specdec bench` prints its own summary, needs and exit statuses first (specdec.__main__)
    keep = {"all": paragraphs[1:], "bench": paragraphs[1:2], "exactness": paragraphs[3:]}[mode]
    description = {
        None: "Test every token a server emits against its law.",
        "reported": "Test every token a server emits against the law it reports (its "
                    "log-probabilities).\nNeeds: a running OpenAI-compatible server that "
                    "returns log-probabilities, on a URL you give. On vLLM or SGLang add "
                    "--model NAME and --sampling-fields temperature, and --field "
                    "ignore_eos=true for a model that stops early.",
        "model": "Test every token the book's own llama-server emits against the law the "
                 "book's models compute.\nNeeds: llama-server serving the book's GGUF models "
                 "(specdec serve) on a URL you give, --target, and --baseline (a plain "
                 "server of the same target) or --tolerance."}[law]
    epilog = re.sub(r":mod:`([^`]+)`", r"\1", "\n\n".join(keep).replace("``", ""))
    if mode == "exactness":                 # `specdec exactness` has no --exactness option
        epilog = epilog.replace(", or --exactness here", "")
    p = argparse.ArgumentParser(prog=prog, description={"all": paragraphs[0].replace("``", ""),
                                                        "bench": None,
                                                        "exactness": description}[mode],
                                epilog=epilog,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoint", required=True, help="base URL, e.g. http://127.0.0.1:8080")
    baseline_help = {
        "all": "base URL of the same server without speculation: run the paired protocol "
               "against it (with --exactness model: measure the numerical disagreement there)",
        "bench": "base URL of the same server without speculation: run the paired, "
                 "interleaved protocol against it",
        "exactness": "model: base URL of a plain server of the same target, on which the "
                     "numerical disagreement between numpy and the engine is measured"}[mode]
    if "--baseline" not in only:
        p.add_argument("--baseline", help=baseline_help)
    p.add_argument("--api", choices=("completions", "chat"), default="completions",
                   help="OpenAI route: /v1/completions (default) or /v1/chat/completions")
    p.add_argument("--model", help="model name sent with every request (vLLM, SGLang)")
    p.add_argument("--prompts", type=Path, help='JSON file {"language": ["prompt", ...]}')
    p.add_argument("--languages",
                   help="comma-separated subset of the prompt languages (default: all)")
    p.add_argument("--prompts-per-language", type=int, default=None,
                   help="prompts used per language (default: every prompt of a --prompts "
                        "file; 4 of the book's held-out prompts)")
    p.add_argument("--max-tokens", type=int, default=64,
                   help="tokens generated per request (default 64)")
    p.add_argument("--temperature", type=float, default=None,
                   help={"all": "sampling temperature (default: 0, greedy, for timing; 1 with "
                                "--exactness, which needs a sampled law)",
                         "bench": "sampling temperature (default 0, greedy)",
                         "exactness": "sampling temperature (default 1; > 0)"}[mode])
    p.add_argument("--seed", type=int, default=0,
                   help="request k gets seed SEED + k (default 0)")
    if mode != "exactness":
        p.add_argument("--concurrency", default=None,
                       help="closed loop: comma-separated levels (default 1)")
        p.add_argument("--rate", help="open loop: comma-separated request rates (requests/s)")
        p.add_argument("--burstiness", type=float, default=1.0,
                       help="gamma shape of the gaps between arrivals (default 1: Poisson)")
        p.add_argument("--ttft-max", type=float, help="goodput limit on TTFT, seconds")
        p.add_argument("--tpot-max", type=float, help="goodput limit on TPOT, seconds")
        p.add_argument("--repeats", type=int, default=None,
                       help="paired protocol: repeats (default 3)")
    _run_options(p, "specdec-client-results.json", "JSON results file")
    p.add_argument("--sampling-fields", choices=("all", "temperature"), default="all",
                   help="all: send every truncation off (llama.cpp, whose defaults truncate); "
                        "temperature: send the temperature alone (vLLM, SGLang: their "
                        "defaults do not truncate, and vLLM warns that min_p does not work "
                        "with speculation)")
    p.add_argument("--field", action="append", default=[], metavar="KEY=VALUE",
                   help="one more request field, sent with every request (VALUE read as "
                        "JSON, else as a string; e.g. --field ignore_eos=true); repeatable")
    if mode == "bench":
        p.set_defaults(exactness=None)
        return p
    g = p.add_argument_group("per-token exactness" + (" (--exactness)" if mode == "all" else ""))
    if mode == "all":
        g.add_argument("--exactness", choices=("reported", "model"),
                       help="test every emitted token: against the server's reported "
                            "log-probabilities, or against the book's models")
    g.add_argument("--requests", type=int, default=200,
                   help="seeded requests (prompts in turn; default 200)")
    def add(flag, **kw):                       # an option of one mode: only in its help
        if flag not in only:
            g.add_argument(flag, **kw)

    add("--top-logprobs", type=int, default=20,
        help="reported: top tokens per position, the rest pooled (default 20)")
    add("--post-sampling-probs", action="store_true",
        help="reported: ask llama.cpp for the law after its sampling chain "
             "(needed at a temperature other than 1)")
    add("--processed-logprobs", action="store_true",
        help="reported: the server already reports the law after temperature "
             "and truncation (vLLM started with --logprobs-mode "
             "processed_logprobs), so any --temperature can be tested")
    add("--target", required=law == "model",
        help="model: the book's target model (e.g. target)")
    add("--draft", help="model: the book's draft model (adds the draft/target ordering)")
    add("--top-k", type=int,
        help="model: the law's top-k, sent to the server (default: none, the full law)")
    p.set_defaults(baseline=None, target=None, draft=None, top_k=None, top_logprobs=20,
                   post_sampling_probs=False, processed_logprobs=False)
    g.add_argument("--false-alarm", type=float, default=1e-6,
                   help="probability that an exact server fails (default 1e-6)")
    g.add_argument("--tolerance", type=float,
                   help="per-token TV the null allows (numerical disagreement); model: "
                        "measured on --baseline when not given, reported: default 0")
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
        from specdec.nn import load_heldout
        data = {k: v["prompts"] for k, v in load_heldout().items()}
    if args.languages:
        wanted = [x.strip() for x in args.languages.split(",") if x.strip()]
        missing = [x for x in wanted if x not in data]
        if missing:
            raise ValueError(f"--languages: no prompts for {missing} "
                             f"(have {sorted(data)})")
        data = {k: data[k] for k in wanted}
    n = args.prompts_per_language         # None: a file's every prompt, 4 of the book's
    if n is None and args.prompts is None:
        n = 4
    return {k: list(v[:n]) for k, v in data.items()}


def _fields(items) -> dict:
    """``--field KEY=VALUE`` options as request fields (VALUE as JSON, else a string)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--field: must be KEY=VALUE (got {item!r})")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def _progress(total: int, enabled: bool, label: str):
    if not enabled:
        return None, lambda: None
    from tqdm import tqdm
    bar = tqdm(total=total, desc=label, unit="req", file=sys.stderr, leave=False)
    return bar.update, bar.close


def _line(s: dict, limits: bool = True, label: str = "") -> str:
    """One load point's line; goodput only under limits (without them it is throughput)."""
    load = s["load"]
    where = (f"concurrency {load['concurrency']}" if load["kind"] == "closed"
             else f"rate {load['rate']:g}/s (burstiness {load['burstiness']:g})")
    acc = "" if math.isnan(s["acceptance"]) else f", acceptance {s['acceptance']:.3f}"
    good = (f"goodput {s['goodput']:.2f} req/s" if limits
            else "goodput n/a (no --ttft-max or --tpot-max)")
    return (f"{label}{where}: {s['output_throughput']:.1f} tokens/s, {good}, "
            f"TTFT p50 {1e3 * s['ttft']['p50']:.1f} ms, "
            f"TPOT p50 {1e3 * s['tpot']['p50']:.2f} ms, ITL p99 "
            f"{1e3 * s['itl']['p99']:.2f} ms{acc}")


def main(argv=None, prog: str = "python -m specdec.client", mode: str = "all",
         exactness: str | None = None) -> int:
    """Run the client; ``mode`` and ``exactness`` as :func:`parser` (``specdec bench``,
    ``specdec exactness reported|model``); return the exit status."""
    args = parser(prog, mode, law=exactness if mode == "exactness" else None).parse_args(argv)
    if mode == "exactness":
        args.exactness = exactness
    if args.exactness:
        return _exactness(args, argv)
    try:
        conc = _numbers(args.concurrency or "1", int, "--concurrency")
        rates = None if args.rate is None else _numbers(args.rate, float, "--rate")
        endpoint = _endpoint("--endpoint", args.endpoint, args)
        base = None if args.baseline is None else _endpoint("--baseline", args.baseline, args)
        if args.temperature is None:
            args.temperature = 0.0
        sampling = {**plain_sampling(args.temperature, args.sampling_fields),
                    **_fields(args.field)}
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
                    spread = (f"IQR {row['speedup_iqr']:.3f}" if (args.repeats or 3) > 1
                              else "IQR n/a: one repeat")
                    print(f"{row['language']}: speedup {row['speedup']:.3f} ({spread}), "
                          f"acceptance {row['acceptance']:.3f}")
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
            print(_line(s, args.ttft_max is not None or args.tpot_max is not None,
                        "speculative server only, " if base is not None else ""))
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


def _exactness(args, argv) -> int:
    from specdec.decode import SamplingSettings
    from specdec.client import tokencheck as tc

    try:
        endpoint = _endpoint("--endpoint", args.endpoint, args)
        base = None if args.baseline is None else _endpoint("--baseline", args.baseline, args)
        for flag, value in (("--requests", args.requests), ("--max-tokens", args.max_tokens),
                            ("--top-logprobs", args.top_logprobs),
                            ("--prompts-per-language", args.prompts_per_language)):
            if value is not None and value < 1:
                raise ValueError(f"{flag}: must be >= 1 (got {value})")
        if args.temperature is None:
            args.temperature = 1.0
        if not (math.isfinite(args.temperature) and args.temperature > 0):
            raise ValueError(f"--temperature: must be > 0 for an exactness check (got "
                             f"{args.temperature:g}; at 0 every law is a point mass)")
        if args.seed < 0:
            raise ValueError(f"--seed: must be >= 0 (got {args.seed})")
        if not (0 < args.false_alarm < 1):
            raise ValueError(f"--false-alarm: must be in (0, 1) (got {args.false_alarm})")
        if args.tolerance is not None and not (0 <= args.tolerance < 0.5):
            raise ValueError(f"--tolerance: must be in [0, 0.5) (got {args.tolerance})")
        for flag in BENCH_ONLY:
            if flag != "--burstiness" and getattr(args, flag[2:].replace("-", "_"),
                                                  None) is not None:
                raise ValueError(f"{flag}: a load option, not used by the exactness check")
        if args.exactness == "reported":
            for flag in ("--target", "--draft", "--top-k"):
                if getattr(args, flag[2:].replace("-", "_")) is not None:
                    raise ValueError(f"{flag}: only with the model mode (specdec exactness model)")
            if args.post_sampling_probs and args.processed_logprobs:
                raise ValueError("--processed-logprobs: not with --post-sampling-probs "
                                 "(one is vLLM's server setting, the other llama.cpp's "
                                 "request field)")
            if args.temperature != 1 and not (args.post_sampling_probs
                                              or args.processed_logprobs):
                raise ValueError(f"--temperature {args.temperature:g}: servers report the "
                                 "raw law (temperature 1) by default; give "
                                 "--post-sampling-probs (llama.cpp), --processed-logprobs "
                                 "(vLLM with --logprobs-mode processed_logprobs) or "
                                 "--temperature 1")
            models = (None, None)
        else:
            if args.target is None:
                raise ValueError("--target: the model mode needs the book's target "
                                 "model (e.g. --target target)")
            for flag in ("--post-sampling-probs", "--processed-logprobs"):
                if getattr(args, flag[2:].replace("-", "_")):
                    raise ValueError(f"{flag}: only with the reported mode (specdec "
                                     "exactness reported)")
            if args.tolerance is None and base is None:
                raise ValueError("--tolerance: give it, or --baseline URL (a plain server "
                                 "of the same target) to measure it")
            from specdec.nn import load_model
            try:
                models = (load_model(args.target),
                          None if args.draft is None else load_model(args.draft))
            except (KeyError, FileNotFoundError, ValueError) as err:
                raise ValueError(f"--target/--draft: {err}") from None
        settings = SamplingSettings(temperature=args.temperature, top_k=args.top_k)
        extra = _fields(args.field)
        if args.exactness == "model" and args.sampling_fields != "all":
            raise ValueError("--sampling-fields temperature: the model mode talks to "
                             "llama.cpp, whose defaults truncate; leave it at 'all'")
        prompts = [p for ps in _prompts(args).values() for p in ps]
        if not args.out.parent.is_dir() or args.out.is_dir():
            raise ValueError(f"--out: {str(args.out)!r} must name a file in an existing "
                             "directory")
    except (ValueError, argparse.ArgumentTypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    result = {"schema": SCHEMA, "command": list(sys.argv if argv is None else argv),
              "endpoint": {"url": endpoint.url, "api": endpoint.api, "model": endpoint.model}}
    try:
        tolerance = args.tolerance or 0.0
        if args.exactness == "model" and args.tolerance is None:
            measured = tc.engine_disagreement(base, prompts, models[0], settings,
                                              seed=args.seed + 2 ** 30)  # seeds not tested
            result["disagreement"] = measured
            tolerance = measured["max_tv"]
            print(f"numpy and the engine: max per-token TV {measured['max_tv']:.2e} over "
                  f"{measured['positions']} positions (the tolerance)")
            if tolerance > MAX_TOLERANCE:
                raise tc.NoLogprobs(
                    f"the baseline server's laws differ from --target {args.target}'s by a "
                    f"per-token TV of {tolerance:.3f} (more than {MAX_TOLERANCE}): not the "
                    f"same model, or not the same settings; nothing was tested")
        update, close = _progress(args.requests, not args.no_progress,
                                  f"exactness ({args.exactness} laws)")
        try:
            check = tc.served_pertoken_check(
                endpoint, prompts, requests=args.requests, max_tokens=args.max_tokens,
                settings=settings, laws=args.exactness, target=models[0], draft=models[1],
                seed=args.seed, false_alarm=args.false_alarm, tolerance=tolerance,
                top_logprobs=args.top_logprobs, post_sampling_probs=args.post_sampling_probs,
                progress=update, extra=extra, sampling_fields=args.sampling_fields)
        finally:
            close()
    except (tc.NoLogprobs, ValueError) as err:   # nothing to test: no usable laws
        print(f"error: {err}", file=sys.stderr)
        return UNTESTABLE
    except (ClientError, KeyboardInterrupt) as err:   # a request failed, or Ctrl-C: no verdict
        error = str(err) or "interrupted (KeyboardInterrupt)"
        result["failure"] = failure_record(None, error, time.perf_counter(),
                                           during="exactness requests")
        args.out.write_text(json.dumps(result, indent=1, allow_nan=True), encoding="utf-8")
        print(f"error: {error}\nno verdict; results so far: {args.out} (the failure "
              f"recorded under 'failure')", file=sys.stderr)
        return INCOMPLETE
    result["exactness"] = check.to_dict()
    if check.detectable_tv >= 1:
        args.out.write_text(json.dumps(result, indent=1, allow_nan=True), encoding="utf-8")
        print(f"error: {check.tokens} tokens could not detect even a per-token TV of 1: no "
              f"verdict (ask for more --requests or --max-tokens)", file=sys.stderr)
        return UNTESTABLE
    verdict = "pass" if check.passed else "FAIL"
    pvals = ", ".join(f"{k} {v:.2e}" for k, v in check.adjusted.items())
    print(f"per-token exactness: {verdict} ({check.tokens} tokens in {check.requests} "
          f"requests; Holm-adjusted p-values {pvals}; false alarm {check.false_alarm:g}; "
          f"detectable per-token TV {check.detectable_tv:.4f} at power {check.power:g}, for an "
          f"error that moves mass along the orderings ({', '.join(check.means)}): "
          + ("toward the draft, or " if "draft_over_target" in check.means else "")
          + f"a temperature or truncation mismatch; the Kolmogorov-Smirnov "
          f"tests add power against other shapes, such as another model's law, with no "
          f"stated resolution; {check.extra['seconds']:.1f} s)")
    if not check.passed:
        from specdec.stats.pertoken import mean_direction

        for order, mean in check.means.items():
            print(f"  mean PIT along {order!r}: {mean:.4f}, {mean_direction(order, mean)}")
    if check.message:
        print(check.message)
    args.out.write_text(json.dumps(result, indent=1, allow_nan=True), encoding="utf-8")
    print(f"results: {args.out}")
    return 0 if check.passed else 1


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


FIRST_TOKENS = """\
The law of the first tokens after one prompt, from many seeded requests to llama.cpp's
native /completion endpoint (return_tokens), every truncation off: the assumption-free
cross-check of the per-token test (specdec.client.exactness). With --target (the book's
models) the speculative server's draws are tested against the exact law computed from the
same weights, and a --baseline server's draws are the control: if they fail, the settings
or the model differ and nothing is tested (exit 4). With --baseline alone, a chi-square
test of homogeneity asks whether both servers draw from one law (no model needed; less
power). The tests of the verdict share --false-alarm (Bonferroni).

Needs: llama.cpp servers on URLs you give (the native /completion endpoint, which returns
token ids); for other servers use `specdec exactness reported`. Writes the draws and the
tests to --out (JSON).
Exit status: 0 pass, 1 fail, 2 usage error (nothing sent), 3 a request failed or Ctrl-C
stopped the run (no verdict), 4 the baseline failed the control: nothing was tested.
"""


def first_tokens_parser(prog: str = "specdec exactness first-tokens") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=FIRST_TOKENS,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoint", required=True, help="base URL of the (speculative) server")
    p.add_argument("--baseline", help="base URL of the same target without speculation")
    p.add_argument("--target", help="the book's target model (e.g. target): test against "
                                    "its exact law")
    p.add_argument("--prompt", help="the prompt (default: the book's first English "
                                    "held-out prompt)")
    p.add_argument("--requests", type=int, default=2000,
                   help="seeded requests per server (default 2000)")
    p.add_argument("--tokens", type=int, default=2,
                   help="first tokens counted per request (default 2; at most 2 with --target)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="tokens generated per request (default --tokens + 8, so that the "
                        "counted positions are drafted)")
    p.add_argument("--temperature", type=float, default=1.0, help="> 0 (default 1)")
    p.add_argument("--seed", type=int, default=0,
                   help="request k gets seed SEED + k, and SEED + REQUESTS + k on the baseline")
    p.add_argument("--stop-token", type=int, default=255,
                   help="token id that ends a request, padding the tokens it did not emit "
                        "(default 255, the end of text of the book's GGUF files)")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    p.add_argument("--false-alarm", type=float, default=1e-6,
                   help="probability that an exact server fails (default 1e-6)")
    p.add_argument("--field", action="append", default=[], metavar="KEY=VALUE",
                   help="one more request field (VALUE read as JSON, else a string)")
    _run_options(p, "specdec-first-tokens.json", "JSON file of the draws and seeds")
    return p


def first_tokens_main(argv=None, prog: str = "specdec exactness first-tokens") -> int:
    """``specdec exactness first-tokens``: exit 0 pass, 1 fail, 2 usage, 3 a request failed
    or Ctrl-C, 4 the control failed (nothing tested)."""
    from specdec.client import exactness as ex

    args = first_tokens_parser(prog).parse_args(argv)
    args.api, args.model = "completions", None       # llama.cpp's /completion takes neither
    try:
        endpoint = _endpoint("--endpoint", args.endpoint, args)
        base = None if args.baseline is None else _endpoint("--baseline", args.baseline, args)
        if base is None and args.target is None:
            raise ValueError("--baseline/--target: give a plain server, the book's target "
                             "model, or both (nothing to compare with)")
        for flag in ("--requests", "--tokens", "--concurrency"):
            value = getattr(args, flag[2:])
            if value < 1:
                raise ValueError(f"{flag}: must be >= 1 (got {value})")
        if args.max_tokens is not None and args.max_tokens < args.tokens:
            raise ValueError(f"--max-tokens: must be >= --tokens {args.tokens} "
                             f"(got {args.max_tokens})")
        if not (math.isfinite(args.temperature) and args.temperature > 0):
            raise ValueError(f"--temperature: must be > 0 (got {args.temperature:g})")
        if args.seed < 0:
            raise ValueError(f"--seed: must be >= 0 (got {args.seed})")
        if not (0 < args.false_alarm < 1):
            raise ValueError(f"--false-alarm: must be in (0, 1) (got {args.false_alarm})")
        if not args.out.parent.is_dir() or args.out.is_dir():
            raise ValueError(f"--out: {str(args.out)!r} must name a file in an existing "
                             "directory")
        extra = _fields(args.field)
        if args.prompt is None:
            from specdec.nn import load_heldout
            args.prompt = load_heldout()["en"]["prompts"][0]
        law = None
        if args.target is not None:
            if args.tokens > 2:
                raise ValueError(f"--tokens: at most 2 with --target (got {args.tokens}; "
                                 "the exact law has V ** tokens cells)")
            from specdec.decode import SamplingSettings, target_sequence_law
            from specdec.nn import load_model
            try:
                model = load_model(args.target)
            except (KeyError, FileNotFoundError, ValueError) as err:
                raise ValueError(f"--target: {err}") from None
            if not 0 <= args.stop_token < model.config.vocab_size:
                raise ValueError(f"--stop-token: must be a token id of --target, in "
                                 f"[0, {model.config.vocab_size}) (got {args.stop_token})")
            law = target_sequence_law(model, args.prompt, args.tokens,
                                      SamplingSettings(temperature=args.temperature))
            if args.tokens == 2:
                law = ex.pad_law(law, args.stop_token)
    except (ValueError, argparse.ArgumentTypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    servers = {"speculative": endpoint, **({} if base is None else {"baseline": base})}
    result = {"schema": SCHEMA, "command": list(sys.argv if argv is None else argv),
              "prompt": args.prompt, "temperature": args.temperature, "tokens": args.tokens,
              "requests": args.requests, "seed": args.seed, "draws": {}}
    draws = {}
    # disjoint seeds: llama.cpp draws one number per emitted token, so an exact server and
    # its plain twin give the same text for the same seed, and two coupled samples would
    # pass the two-sample test by construction
    seeds = {"speculative": args.seed, "baseline": args.seed + args.requests}
    result["seeds"] = {k: [v, v + args.requests - 1] for k, v in seeds.items() if k in servers}
    try:
        for name, server in servers.items():
            update, close = _progress(args.requests, not args.no_progress,
                                      f"first tokens ({name})")
            try:
                draws[name] = ex.first_tokens(
                    server, args.prompt, args.requests, k=args.tokens,
                    temperature=args.temperature, seed=seeds[name], pad=args.stop_token,
                    generate=args.max_tokens, extra=extra, concurrency=args.concurrency,
                    progress=update)
            finally:
                close()
            result["draws"][name] = draws[name].tolist()
    except (ClientError, KeyboardInterrupt) as err:
        error = str(err) or "interrupted (KeyboardInterrupt)"
        result["failure"] = failure_record(None, error, time.perf_counter(),
                                           during="first-tokens requests")
        args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
        print(f"error: {error}\nno verdict; results so far: {args.out}", file=sys.stderr)
        return INCOMPLETE
    tests = (law is not None) + (base is not None)
    alpha = args.false_alarm / tests            # the verdict's tests share the false alarm
    verdict = []
    if law is not None and base is not None:
        control = ex.first_tokens_law_test(draws["baseline"], law, false_alarm=args.false_alarm)
        result["control"] = control.to_dict()
        print(f"control (baseline against --target {args.target}'s law): "
              f"{'pass' if control.passed else 'FAIL'} (p {control.pvalue:.2e})")
        if not control.passed:
            args.out.write_text(json.dumps(result, indent=1, allow_nan=True), encoding="utf-8")
            print(f"error: the baseline server's first tokens do not follow --target "
                  f"{args.target}'s law: another model or other settings; nothing was "
                  f"tested\nresults: {args.out}", file=sys.stderr)
            return UNTESTABLE
    if law is not None:
        check = ex.first_tokens_law_test(draws["speculative"], law, false_alarm=alpha)
        result["law_test"] = check.to_dict()
        verdict.append(check.passed)
        print(f"law test ({args.requests} requests, {check.cells} cells): "
              f"{'pass' if check.passed else 'FAIL'} (p {check.pvalue:.2e}, false alarm "
              f"{alpha:.1e}); TV to the exact law {check.tv.estimate:.4f} "
              f"[{check.tv.low:.4f}, {check.tv.high:.4f}]; detectable TV "
              f"{check.detectable_tv:.4f} at power {check.power:g}")
    if base is not None:
        two = ex.two_sample(draws["baseline"], draws["speculative"], false_alarm=alpha)
        result["two_sample"] = two.to_dict()
        verdict.append(two.passed)
        print(f"two-sample test against the baseline ({two.cells} cells): "
              f"{'pass' if two.passed else 'FAIL'} (p {two.pvalue:.2e}, false alarm "
              f"{alpha:.1e}); plug-in TV between the two {two.tv_estimate:.4f}; "
              f"detectable TV {two.detectable_tv:.4f} at power {two.power:g}")
    result["passed"] = all(verdict)
    args.out.write_text(json.dumps(result, indent=1, allow_nan=True), encoding="utf-8")
    print(f"first-tokens exactness: {'pass' if result['passed'] else 'FAIL'}\n"
          f"results: {args.out}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
