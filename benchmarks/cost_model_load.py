"""Chapter 8's cost model against the same measurement under three kinds of load.

For one target (default the large one) with the book's draft at ``gamma`` (default 4), the
same three llama-servers as chapter 8's memory-bound run (plain, with the draft, the draft
alone; one slot, one thread each) take, under each condition in turn:

* a paired stream of sampled requests (the held-out prompts of every language, temperature
  1, ``--tokens`` tokens, seeded, the two servers alternating request by request), whose
  decoding speedup is the ratio of the engine's own per-token decode times
  (``timings.predicted_ms / predicted_n``, plain over speculative, no HTTP or time to
  first token in it), with the acceptance the speculative server reports;
* ``--windows`` rounds of the chapter's cost window (:func:`step_times`: the target's and
  the draft's decoding steps inside a generation; :func:`pass_times`: the target's passes
  over 1 to ``gamma + 1`` new positions), reduced by the chapter's own estimator
  (:func:`window_costs`) to ``c`` and ``g`` in CPU time and in wall time, and the
  decoding model ``E / (gamma c + g)`` of each (:func:`predicted_speedup`).

The conditions: ``idle``; ``cpu``, two busy loops (one per core of a 2-core machine); and
``memory``, one process copying a 128 MB array over and over beside one busy loop. Each
neighbour is a subprocess started before the condition's requests and stopped by its PID
after them (and killed with this process however it ends, on Linux). The script prints
the neighbours' PIDs, then one line per condition: measured decoding speedup, the two
models and their relative errors, ``g`` and ``c`` on each clock, and the share of the
timings' wall time spent waiting for a processor. It measures; it asserts nothing.

Run with ``.venv/bin/python benchmarks/cost_model_load.py [--target NAME] [--gamma N]
[--prompts N] [--tokens N] [--windows N] [--conditions idle,cpu,memory]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

import numpy as np

from _common import REPO, engine_tool

sys.path.insert(0, str(REPO))

from specdec import client as cl
from specdec import nn
from specbook.instruments import (interleave_languages, pass_times,  # noqa: E402
                                      predicted_speedup, step_times, window_costs)
from specdec.measure import rotation  # noqa: E402

#: What each condition runs beside the servers (Python source for ``python -c``).
NEIGHBOURS = {
    "idle": (),
    "cpu": ("while True: pass", "while True: pass"),
    "memory": ("import numpy as np\na = np.ones(32_000_000, np.float32)\nb = np.empty_like(a)\n"
               "while True: np.copyto(b, a)", "while True: pass"),
}
PREFIX = "The history of the city begins with a small settlement on the river, and"
STEPS = 16                     # decoding steps per step timing, as chapter 8's windows
CONTINUATION = " later the town grew into a market for the region around it."


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1 (got {text!r})")
    return value


def conditions(text: str) -> list[str]:
    names = [c for c in text.split(",") if c]
    unknown = sorted(set(names) - set(NEIGHBOURS))
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"must be a comma list of {', '.join(NEIGHBOURS)} "
                                         f"(got {text!r})")
    return names


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="target_large",
                   choices=("target", "target_wide", "target_large"))
    p.add_argument("--gamma", type=positive_int, default=4)
    p.add_argument("--prompts", type=positive_int, default=10, help="per language")
    p.add_argument("--tokens", type=positive_int, default=32)
    p.add_argument("--windows", type=positive_int, default=12)
    p.add_argument("--conditions", type=conditions, default=list(NEIGHBOURS))
    p.add_argument("--seed", type=int, default=2026)
    args = p.parse_args(argv)
    if args.gamma + 1 > len(CONTINUATION):
        p.error(f"--gamma: must be at most {len(CONTINUATION) - 1} (a verification pass of "
                f"gamma + 1 new positions is timed on a {len(CONTINUATION)}-byte text)")
    fewest = min(len(v["prompts"]) for v in nn.load_heldout().values())
    if args.prompts > fewest:
        p.error(f"--prompts: must be at most {fewest}, the held-out prompts of the smallest "
                f"language (got {args.prompts})")
    return args


def neighbour(engine, source: str) -> subprocess.Popen:
    """A neighbour process running ``source``, killed by the kernel if this one dies
    (tools/engine.py's tie_to_parent, Linux) and otherwise stopped by PID in main."""
    return subprocess.Popen(engine.tie_to_parent([sys.executable, "-c", source]))


def measure(servers, prompts, args) -> dict:
    """One condition: the paired stream, then the cost windows, on running servers."""
    base, spec, alone = servers
    eps = {"baseline": cl.Endpoint(base.url), "speculative": cl.Endpoint(spec.url)}
    timings = {"baseline": [], "speculative": []}
    for k, prompt in enumerate(prompts):
        for name in rotation(["baseline", "speculative"], k):   # the chapter's order
            spec_k = cl.RequestSpec(f"r{k}", prompt, args.tokens, cl.plain_sampling(1.0),
                                    args.seed + k)
            timings[name].append(cl.closed_loop(eps[name], [spec_k], 1).records[0].timings)
    per_token = {name: sum(t["predicted_ms"] for t in ts) / sum(t["predicted_n"] for t in ts)
                 for name, ts in timings.items()}
    drafted = sum(t.get("draft_n", 0) for t in timings["speculative"])
    accepted = sum(t.get("draft_n_accepted", 0) for t in timings["speculative"])
    cost_eps = {"target": eps["baseline"], "draft": cl.Endpoint(alone.url)}
    pids = {"target": base.pid, "draft": alone.pid}
    passes = pass_times({"target": cost_eps["target"]}, PREFIX, CONTINUATION,
                        tuple(range(1, args.gamma + 2)), args.windows,
                        pids={"target": base.pid})
    steps = step_times(cost_eps, PREFIX, STEPS, args.windows, pids=pids)
    cost = window_costs(passes, steps, args.gamma)
    acceptance = accepted / drafted if drafted else 0.0
    measured = per_token["baseline"] / per_token["speculative"]
    model = predicted_speedup(acceptance, cost["c"], cost["g"], args.gamma)
    model_wall = predicted_speedup(acceptance, cost["c_wall"], cost["g_wall"], args.gamma)
    return {"measured": measured, "model": model, "model_wall": model_wall,
            "acceptance": acceptance, **per_token, **cost}


def main(argv=None) -> int:
    args = parse(argv)
    engine = engine_tool()
    engine.build()
    held = nn.load_heldout()
    prompts = [p for _, p in interleave_languages(
        {lang: held[lang]["prompts"][:args.prompts] for lang in nn.LANGUAGES})]
    quiet = lambda *a: None  # noqa: E731
    print(f"{args.target} with the draft at gamma = {args.gamma}: {len(prompts)} prompts x "
          f"{args.tokens} tokens per condition, {args.windows} cost "
          f"window{'s' if args.windows > 1 else ''}")
    # SIGTERM ends the run like Ctrl-C: the blocks below stop neighbours and servers
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    with engine.serve(args.target, log=quiet) as base, \
            engine.serve(args.target, "draft", args.gamma, log=quiet) as spec, \
            engine.serve("draft", log=quiet) as alone:
        for condition in args.conditions:
            neighbours = []
            try:
                neighbours += [neighbour(engine, src) for src in NEIGHBOURS[condition]]
                if neighbours:
                    print(f"{condition}: neighbour PIDs "
                          + ", ".join(str(n.pid) for n in neighbours), flush=True)
                    time.sleep(1.0)
                started = time.monotonic()
                r = measure((base, spec, alone), prompts, args)
                load = os.getloadavg()[0]       # the last minute's, mostly this condition's
            finally:
                for proc in neighbours:         # stopped by PID, whatever happened
                    proc.kill()
                    proc.wait()
            seconds = time.monotonic() - started
            print(f"{condition:>6} ({len(neighbours)} neighbours, {seconds:.0f} s, load "
                  f"{load:.2f} at the end): measured {r['measured']:.3f}x "
                  f"(plain {r['baseline']:.2f} ms/token, speculative "
                  f"{r['speculative']:.2f}, acceptance {r['acceptance']:.3f}); model from "
                  f"CPU time {r['model']:.3f}x ({r['model'] / r['measured'] - 1:+.1%}, "
                  f"g {r['g']:.2f}, c {r['c']:.3f}), from wall time {r['model_wall']:.3f}x "
                  f"({r['model_wall'] / r['measured'] - 1:+.1%}, g {r['g_wall']:.2f}, "
                  f"c {r['c_wall']:.3f}); waiting "
                  + ("-" if np.isnan(r["waiting"]) else f"{max(r['waiting'], 0.0):.0%}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
