"""Does the exact rule pay? The book's decoder with and without each draft, on sampled text.

Chapter 8 measures llama.cpp's server, whose matching rule (a greedy draft, kept while the
target's own sample equals it) caps acceptance at the target's top-token probability
(Appendix E); on sampled text at temperature 1 it was slower than plain decoding. This
benchmark measures the rule with room: the book's numpy decoder (KV cache) running exact
speculative sampling (a sampled draft, accepted with min(1, p/q), recovered from the
residual; :func:`specdec.decode.speculative`) against the same decoder without the draft
(:func:`specdec.decode.autoregressive`), on the large target, once per draft: today's
(``draft``) and the one distilled on the large target's samples (``draft_distilled``).

The measurement is the book's, :func:`specbook.rule.measure_rule` (Appendix F runs the same
code): a per-token exactness check of the decoder's tokens first (here at a coarse
``--resolution``, 0.1 by default, to keep the benchmark short; the appendix checks at the
page's resolution), then every prompt of the mixed-language stream decoded by both
settings in every repeat, in alternating order, each request seeded on its own, one BLAS
thread (batch one). Headline, fixed before the run: the stream's speedup at temperature 1
and gamma 4, against break-even (1.0), with a 95% BCa interval over prompts
(:func:`specdec.stats.ratio_interval`). Also reported: acceptance per drafted token, tokens
per target pass (E), the decoder's c and g measured in situ, the cost model's prediction
E / (g + c gamma), and the per-language speedups.

This is a benchmark (``make bench`` runs it), not a test: its numbers depend on the machine
and its load, which is printed with them. Usage::

    python benchmarks/bench_rule.py [--target target_large] [--drafts draft,draft_distilled]
        [--gamma 4] [--temperature 1] [--prompts-per-language 5] [--repeats 2]
        [--max-new-tokens 64] [--resolution 0.1] [--seed 2026] [--json OUT]

Exit status 0, 1 when a decoder fails its exactness check, or 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))                 # the book's machinery, as cost_model_load.py

from specbook import rule  # noqa: E402

verdict = rule.verdict


def stream(prompts_per_language: int) -> list[tuple[str, str]]:
    """The mixed-language stream of chapter 8 (:func:`specbook.rule.rule_stream`)."""
    return rule.rule_stream(prompts_per_language)


def run(target: str = "target_large", draft: str = "draft", *, gamma: int = 4,
        temperature: float = 1.0, prompts_per_language: int = 5, repeats: int = 2,
        max_new_tokens: int = 64, seed: int = 2026, resolution: float | None = 0.1,
        log=print) -> dict:
    """:func:`specbook.rule.measure_rule` with the benchmark's defaults (one BLAS thread,
    a coarse exactness check); the same arguments, returns and errors."""
    return rule.measure_rule(target, draft, gamma=gamma, temperature=temperature,
                             prompts_per_language=prompts_per_language, repeats=repeats,
                             max_new_tokens=max_new_tokens, seed=seed,
                             resolution=resolution, threads=1, log=log)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/bench_rule.py",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="target_large")
    ap.add_argument("--drafts", default=",".join(rule.DRAFTS),
                    help="comma list of drafts (default: %(default)s)")
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--prompts-per-language", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--resolution", type=float, default=0.1,
                    help="exactness check's detectable per-token TV (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    results = []
    for draft in [d for d in args.drafts.split(",") if d]:
        try:
            out = run(args.target, draft, gamma=args.gamma, temperature=args.temperature,
                      prompts_per_language=args.prompts_per_language, repeats=args.repeats,
                      max_new_tokens=args.max_new_tokens, seed=args.seed,
                      resolution=args.resolution,
                      log=lambda s: print(s, file=sys.stderr, flush=True))
        except (ValueError, KeyError, FileNotFoundError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        except RuntimeError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        results.append(out)
        c = out["costs"]
        check = out["exactness"]
        print(f"exact rule, {out['target']} with {out['draft']}, gamma {out['gamma']}, "
              f"temperature {out['temperature']:g}, {out['prompts']} prompts x "
              f"{out['repeats']} repeats of {out['max_new_tokens']} tokens, batch one "
              f"(load {out['load_before']:.2f} before, {out['load_after']:.2f} after)")
        if check is not None:
            print(f"  exactness: {'pass' if check['passed'] else 'FAIL'} (detectable "
                  f"per-token TV {check['detectable_tv']:.3f})")
        print(f"  mixed-language stream: {verdict(out['speedup'])}")
        for lang, s in out["by_language"].items():
            print(f"  {lang}: {verdict(s)}")
        print(f"  acceptance per drafted token {out['acceptance']:.3f}; tokens per target "
              f"pass (E) {out['tokens_per_pass']:.2f}; c {c['c']:.3f}, g {c['g']:.2f} "
              f"(step {c['step_ms']:.1f} ms); cost model {out['predicted']:.2f}x "
              f"({100 * out['model_error']:+.0f}% of the measured)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
