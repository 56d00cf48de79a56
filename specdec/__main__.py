"""The ``specdec`` command: the tools an engineer runs on her own sampler and server.

``specdec kit``, ``specdec bench``, ``specdec exactness`` and ``specdec serve`` are the
commands of the conformance kit (:mod:`specdec.conformance`) and the server tools
(:mod:`specdec.client`); ``python -m specdec.conformance`` and ``python -m specdec.client``
run the same code. Each sub-command's ``--help`` says what it needs and what its exit
statuses mean, then lists its options.
"""

from __future__ import annotations

import sys
from typing import Sequence

KIT = """\
specdec kit SAMPLER [options]: test a speculative sampler (package.module:function) against
the exact target law with the kit's battery of cases.

Needs: the sampler importable from this Python (PYTHONPATH=. for a module of your own).
Prints the plan on standard error, then a Markdown report with three verdicts
(exactness, accounting, efficiency) and the detectable TV of the run.
Exit status: 0 pass, 1 fail, 2 usage error (bad arguments, sampler not importable,
calling convention undecidable).
"""

BENCH = """\
specdec bench --endpoint URL [options]: time an OpenAI-compatible streaming server
(llama.cpp, vLLM, SGLang): concurrency or request-rate sweeps, or with --baseline URL the
paired, interleaved protocol of chapter 8 (the speculative server against the plain one).

Needs: a running server on a URL you give; nothing is started and no other address is
contacted. Prints TTFT, TPOT, ITL percentiles, throughput, goodput and the server's
reported acceptance per load point; writes every request to --out (JSON).
Exit status: 0 every request measured, 2 usage error (nothing sent), 3 a request failed
or Ctrl-C stopped the run (the results file still holds what was measured).
"""

EXACTNESS = """\
specdec exactness {reported,model,first-tokens} --endpoint URL [options]: test what a
server emits against the law it should have been drawn from.

  reported  the server's own log-probabilities (any OpenAI-compatible server that returns
            them): at --temperature 1; below 1, --post-sampling-probs on llama.cpp,
            or --processed-logprobs on vLLM started with --logprobs-mode
            processed_logprobs.
  model     the laws computed with the book's models (--target, --draft) for the book's
            own llama-server; --baseline is a plain server of the same target, on which
            the numerical disagreement is measured.
  first-tokens  the law of the first tokens after one prompt, from many seeded
            requests to llama.cpp's /completion: against the book's --target law, or
            against a --baseline server (chi-square, no model needed). The
            assumption-free cross-check of the two above.

reported and model test every emitted token (randomised PIT, Holm).

Needs: a running server on a URL you give. Prints the verdict, the p-values, the tokens
tested and the detectable per-token TV at power 0.9.
Exit status: 0 pass, 1 fail, 2 usage error (nothing sent), 3 a request failed (the
server's message is printed, e.g. HTTP 400) or Ctrl-C stopped the run (no verdict), 4
nothing could be tested (no usable log-probabilities, a baseline whose laws are not the
model's, or too few tokens): no verdict.
`specdec exactness MODE --help` lists the options of each mode.

On vLLM or SGLang: reported, with --model NAME, --sampling-fields temperature (send no
llama.cpp field) and, for models that stop early, --field ignore_eos=true.
On llama.cpp's server with the book's models: model, with --baseline a plain server of
the same target. Its speculative path reports no probabilities for the tokens its draft
emits, and a byte-level model's tokens that end inside a UTF-8 character are not
reported, so reported refuses both (exit 4).
"""

SERVE = """\
specdec serve --binary LLAMA_SERVER --model TARGET.gguf [--draft-model DRAFT.gguf]:
start llama.cpp's llama-server on 127.0.0.1 on a free port (with a draft: speculative
decoding, --gamma draft tokens) and serve until Ctrl-C or SIGTERM.

Needs: a llama-server binary (its shared libraries beside it) and GGUF files: your own
build of llama.cpp and models, or, in a clone of the book's repository, `make engine`
(llama-server from the pinned sources and the book's models in GGUF).
Prints the server's URL and PID. Each slot (--parallel) holds 128 positions, the book's
models' context; the server's log is written under the temporary directory, in
specdec-llama-server/.
Exit status: 0 stopped by Ctrl-C or SIGTERM (the server stopped by PID), 1 the server
died or could not start (the tail of its log is printed), 2 usage error.
"""

MODES = ("reported", "model", "first-tokens")          # of specdec exactness
COMMANDS = {"kit": KIT, "bench": BENCH, "exactness": EXACTNESS, "serve": SERVE}

USAGE = """\
usage: specdec {kit,bench,exactness,serve} [options]   (specdec COMMAND --help for each)

Tools for speculative decoding, from the library behind the book "Speculative Decoding,
Exactly":

  kit        test your own speculative sampler against the exact target law
  bench      time an OpenAI-compatible server: TTFT, ITL, TPOT, throughput, goodput
  exactness  test every token a server emits against the target's law
  serve      start llama.cpp's llama-server on 127.0.0.1 with a target and a draft

Exit status: that of the command (0 success or pass, 1 fail, 2 usage error, 3 a run that
stopped before its end, 4 nothing could be tested: no verdict); 2 for an unknown command.
"""


def _wants_help(argv: Sequence[str]) -> bool:
    return any(a in ("-h", "--help") for a in argv)


def _serve(argv: Sequence[str]) -> int:
    import argparse

    from specdec.client import llama

    ap = argparse.ArgumentParser(prog="specdec serve")   # main() printed SERVE before --help
    ap.add_argument("--binary", required=True, help="the llama-server executable")
    ap.add_argument("--model", required=True, help="GGUF file of the target")
    ap.add_argument("--draft-model", help="GGUF file of the draft (speculative decoding)")
    ap.add_argument("--gamma", type=int, default=None,
                    help="draft tokens per cycle, with --draft-model (default 3)")
    ap.add_argument("--parallel", type=int, default=1,
                    help="slots, i.e. concurrent requests, of 128 positions each (default 1)")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads for generation and for prompt batches (llama-server's "
                         "-t and -tb; default 1)")
    args = ap.parse_args(argv)
    import os

    if args.gamma is not None and args.draft_model is None:
        print("error: --gamma: only with --draft-model (a server without a draft drafts "
              "nothing)", file=sys.stderr)
        return 2
    args.gamma = 3 if args.gamma is None else args.gamma
    problems = [f"{flag}: must be an integer >= 1 (got {value})"
                for flag, value in (("--gamma", args.gamma), ("--parallel", args.parallel),
                                    ("--threads", args.threads)) if value < 1]
    if not (os.path.isfile(args.binary) and os.access(args.binary, os.X_OK)):
        problems.append(f"--binary: no executable file {args.binary!r}")
    for flag, path in (("--model", args.model), ("--draft-model", args.draft_model)):
        if path is not None and not os.path.isfile(path):
            problems.append(f"{flag}: no file {path!r}")
    if problems:                          # usage errors: exit 2, nothing started
        print("error: " + "; ".join(problems), file=sys.stderr)
        return 2
    label = args.model + (f" with {args.draft_model}, gamma {args.gamma}"
                          if args.draft_model else "")
    try:
        context = llama.serve(args.binary, args.model, args.draft_model, args.gamma,
                              parallel=args.parallel, threads=args.threads)
    except (FileNotFoundError, TypeError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return llama.serve_until_stopped(context, label=label)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``specdec COMMAND ...``; return its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"error: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    if _wants_help(rest) and not (command == "exactness" and rest[0] in MODES):
        print(COMMANDS[command])
    try:
        if command == "kit":
            from specdec.conformance.__main__ import main as kit

            return kit(rest, prog="specdec kit")
        if command == "serve":
            return _serve(rest)
        from specdec.client.__main__ import main as client

        if command == "bench":
            if "--exactness" in rest:
                print("error: --exactness: use `specdec exactness reported|model ...`",
                      file=sys.stderr)
                return 2
            return client(rest, prog="specdec bench", mode="bench")
        if rest and rest[0] == "first-tokens":
            from specdec.client.__main__ import first_tokens_main

            return first_tokens_main(rest[1:])
        if not rest or rest[0] not in ("reported", "model"):
            if _wants_help(rest):
                return 0                       # the modes are listed above
            print("error: specdec exactness: the first argument must be 'reported', "
                  "'model' or 'first-tokens'", file=sys.stderr)
            return 2
        return client(rest[1:], prog=f"specdec exactness {rest[0]}", mode="exactness",
                      exactness=rest[0])
    except SystemExit as exit_:              # argparse's --help (0) and usage errors (2)
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 2)


if __name__ == "__main__":
    sys.exit(main())
