#!/usr/bin/env python3
"""Does the exact rule pay? The book's decoder with and without the draft, on sampled text.

Chapter 8 measures llama.cpp's server, whose matching rule (a greedy draft, kept while the
target's own sample equals it) caps acceptance at the target's top-token probability
(Appendix E); on sampled text at temperature 1 it was slower than plain decoding. This
benchmark measures the rule with room: the book's numpy decoder (KV cache) running exact
speculative sampling (a sampled draft, accepted with min(1, p/q), recovered from the
residual; :func:`specdec.decode.speculative`) against the same decoder without the draft
(:func:`specdec.decode.autoregressive`), on the large target.

Headline, fixed before the run: the speedup of the mixed-language stream (the held-out
prompts, languages taking turns, one request at a time: batch one) at temperature 1 and
gamma 4, against break-even (1.0), with a 95% paired bootstrap interval over prompts
(:func:`specdec.stats.ratio_interval`). Design: every prompt is decoded by both settings in
every repeat, in an order that alternates with the prompt and the repeat, each request
seeded on its own; tokens per request are fixed (no early stop), so the speedup is a ratio
of times. Also reported: acceptance per drafted token, tokens per target pass (E) and the
per-language speedups.

This is a benchmark (``make bench`` runs it), not a test: its numbers depend on the machine
and its load, which is printed with them. Usage::

    python benchmarks/bench_rule.py [--target target_large] [--gamma 4] [--temperature 1]
        [--prompts-per-language 5] [--repeats 2] [--max-new-tokens 64] [--seed 2026]
        [--json OUT]

Exit status 0, or 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))                 # the book's machinery, as cost_model_load.py

from specdec import decode as dec  # noqa: E402
from specdec import nn  # noqa: E402
from specdec.measure import limit_blas_threads  # noqa: E402
from specdec.stats import ratio_interval  # noqa: E402
from specbook.instruments import interleave_languages  # noqa: E402


def stream(prompts_per_language: int) -> list[tuple[str, str]]:
    """The mixed-language stream of chapter 8: (language, prompt), languages taking turns
    (:func:`specbook.instruments.interleave_languages` on the held-out prompts)."""
    held = nn.load_heldout()
    return interleave_languages({lang: held[lang]["prompts"][:prompts_per_language]
                                 for lang in nn.LANGUAGES})


def run(target: str = "target_large", draft: str = "draft", *, gamma: int = 4,
        temperature: float = 1.0, prompts_per_language: int = 5, repeats: int = 2,
        max_new_tokens: int = 64, seed: int = 2026, log=print) -> dict:
    """Time both settings on every prompt of the stream; return the speedups and counts.

    Parameters
    ----------
    target, draft : str
        The book's models (:func:`specdec.nn.load_model`).
    gamma : int
        Draft length, at least 1.
    temperature : float
        Sampling temperature, > 0 (no truncation).
    prompts_per_language, repeats, max_new_tokens : int
        At least 1 (at least 2 prompts in all, for an interval).
    seed : int
        Request ``(k, r)`` is seeded ``[seed, k, r]`` in both settings.
    log : callable
        Progress lines.

    Returns
    -------
    dict
        ``speedup`` (with ``low``, ``high``: the stream), ``by_language``, ``acceptance``
        (accepted / proposed draft tokens), ``tokens_per_pass`` (E), the settings and the
        seconds per setting.

    Raises
    ------
    ValueError
        An argument out of its range.
    """
    for name, value, low in (("gamma", gamma, 1), ("prompts_per_language", prompts_per_language, 1),
                             ("repeats", repeats, 1), ("max_new_tokens", max_new_tokens, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}: must be an integer >= {low} (got {value!r})")
    if not (isinstance(temperature, (int, float)) and temperature > 0):
        raise ValueError(f"temperature: must be > 0 (got {temperature!r})")
    pairs = stream(prompts_per_language)
    if len(pairs) < 2:
        raise ValueError("prompts_per_language: the stream needs at least 2 prompts")
    big, small = nn.load_model(target), nn.load_model(draft)
    settings = dec.SamplingSettings(temperature=temperature)
    seconds = {"plain": np.zeros(len(pairs)), "spec": np.zeros(len(pairs))}
    accepted = proposed = passes = 0
    t0 = time.perf_counter()
    for r in range(repeats):
        for k, (lang, prompt) in enumerate(pairs):
            order = ("plain", "spec") if (k + r) % 2 == 0 else ("spec", "plain")
            for name in order:
                rng = np.random.default_rng([seed, k, r])
                start = time.perf_counter()
                if name == "plain":
                    out = dec.autoregressive(big, [prompt], max_new_tokens, rng, settings)
                else:
                    out = dec.speculative(big, small, [prompt], max_new_tokens, gamma, rng,
                                          settings)
                seconds[name][k] += time.perf_counter() - start
                if name == "spec":
                    accepted += sum(out.accepted)
                    proposed += sum(out.proposed)
                    passes += sum(out.cycles)
        log(f"repeat {r + 1}/{repeats} done ({time.perf_counter() - t0:.0f} s)")
    tokens = np.full(len(pairs), float(max_new_tokens * repeats))
    head = ratio_interval(seconds["plain"], tokens, seconds["spec"], tokens, seed=[seed, 99])
    by_language = {}
    for lang in nn.LANGUAGES:
        idx = [k for k, (g, _) in enumerate(pairs) if g == lang]
        if len(idx) >= 2:
            by_language[lang] = ratio_interval(seconds["plain"][idx], tokens[idx],
                                               seconds["spec"][idx], tokens[idx],
                                               seed=[seed, 100 + len(by_language)])
    return {"target": target, "draft": draft, "gamma": gamma, "temperature": temperature,
            "prompts": len(pairs), "repeats": repeats, "max_new_tokens": max_new_tokens,
            "seed": seed, "speedup": head, "by_language": by_language,
            "acceptance": accepted / proposed if proposed else float("nan"),
            "tokens_per_pass": (max_new_tokens * repeats * len(pairs)) / passes if passes
            else float("nan"),
            "seconds": {k: float(v.sum()) for k, v in seconds.items()},
            "load_before": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def verdict(speedup: dict) -> str:
    """The headline against break-even, e.g. ``1.31x (95% interval 1.22-1.40): faster``."""
    s, lo, hi = speedup["speedup"], speedup["low"], speedup["high"]
    where = ("faster than plain decoding" if lo > 1 else "slower than plain decoding" if hi < 1
             else "not distinguishable from break-even")
    return f"{s:.2f}x (95% interval {lo:.2f}-{hi:.2f}): {where}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/bench_rule.py",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="target_large")
    ap.add_argument("--draft", default="draft")
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--prompts-per-language", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    limit_blas_threads(1)
    try:
        out = run(args.target, args.draft, gamma=args.gamma, temperature=args.temperature,
                  prompts_per_language=args.prompts_per_language, repeats=args.repeats,
                  max_new_tokens=args.max_new_tokens, seed=args.seed,
                  log=lambda s: print(s, file=sys.stderr, flush=True))
    except (ValueError, KeyError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"exact rule, {out['target']} with {out['draft']}, gamma {out['gamma']}, temperature "
          f"{out['temperature']:g}, {out['prompts']} prompts x {out['repeats']} repeats of "
          f"{out['max_new_tokens']} tokens, batch one (load before: {out['load_before']})")
    print(f"  mixed-language stream: {verdict(out['speedup'])}")
    for lang, s in out["by_language"].items():
        print(f"  {lang}: {verdict(s)}")
    print(f"  acceptance per drafted token {out['acceptance']:.3f}; tokens per target pass "
          f"(E) {out['tokens_per_pass']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
