"""EAGLE's tree verification (eagle-llm 1.2.1, sampling path) under the kit's block convention.

EAGLE drafts a tree: at every node with children the draft head's law ``q`` (after the
logits processor) is sampled ``k`` times *without replacement* (``torch.multinomial(...,
replacement=False)``), and each child carries the conditional probability it was drawn
with, ``q(x_j) / (1 - sum_{i<j} q(x_i))``. The target scores every node, and
``evaluate_posterior`` verifies the tree top-down. :class:`EagleTreeSampler` is the one
translation: from the kit's toy models it builds the inputs EAGLE's own functions build in
``EaModel.ea_generate`` (``generate_tree_buffers`` for a complete tree of the kit's
widths, the draft's ``sample`` for the children of every node, ``generate_candidates``,
then ``evaluate_posterior`` and the final ``torch.multinomial`` of
``update_inference_inputs``), with raw logits ``temperature * log(law)`` so that EAGLE's
own logits processor turns them back into the kit's laws. It neither fixes nor hides what
EAGLE does.

The rule, as read from the code of eagle-llm 1.2.1 (:data:`RULE`, file:line in the
installed package ``eagle/model/``):

* children drawn without replacement from the processed draft law, each with its
  conditional probability (``cnets.py:708-724``, ``Model.sample``);
* at the accepted node, the target law ``p`` is the processed logits (``utils.py:374-376``);
  the children are tried in order, each token once (``utils.py:378-384``); child ``j`` is
  accepted when ``u <= r(x_j) / q_j(x_j)``, ``u = random.random()`` (``utils.py:385-391``);
* after a rejection the residual is ``(r - q')^+`` renormalised, ``q'`` the draft law with
  the siblings tried before masked and renormalised (``utils.py:396-405``): together with
  the conditional probability in the ratio, recursive rejection sampling without
  replacement (:class:`specdec.rules.trees.RecursiveRejection` ``("without")``);
* every child rejected: the next token from the residual (``utils.py:407-408``);
  otherwise (an accepted leaf, the deepest level accepted) from
  ``softmax(logits[best, accept_length - 1])``: the *raw* logits, without the logits
  processor (``utils.py:409-411``); drawn by ``torch.multinomial`` (``utils.py:458-460``).

At temperature 1 with no top-k / top-p the processor is the identity, and the rule is
recursive rejection without replacement, exact. At any other temperature the bonus token
(and the token after an accepted leaf) follows ``softmax(logits)`` instead of the tempered
law: the ``tempered_0.6`` setting (:data:`SETTINGS`) fails, by the TV
:func:`predicted_tv` computes from the rule as read (reports/eagle-bonus-temperature.md:
reproduction, diagnosis, fix; the repository's later code applies the processor there,
SafeAILab/EAGLE#215).

Randomness: EAGLE draws from torch's global generator and Python's ``random`` module;
the adapter seeds both from the kit's generator at the start of every cycle.

End of sequence: EAGLE's tree ignores it; ``ea_generate`` stops after the cycle that
emits it. The adapter returns the cycle's tokens up to the first end-of-sequence, as the
generation's caller reads them, and gives the models the point mass on EOS past it (never
emitted).

Controls (:data:`CONTROLS`): a one-line change, applied in the adapter, that must fail.

Requires the engine environment of ``tools/py_engines.py`` (``eagle``); run
``python -m specdec.conformance.adapters.eagle`` with its interpreter for a JSON summary.

References
----------
.. [1] Y. Li, F. Wei, C. Zhang, H. Zhang, "EAGLE: Speculative Sampling Requires Rethinking
   Feature Uncertainty", ICML 2024, Sec. 4.2 (tree verification at temperature > 0).
.. [2] W. Jeon et al., "Recursive Speculative Decoding: Accelerating LLM Inference via
   Sampling Without Replacement", arXiv:2402.14160, 2024.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Mapping

import numpy as np

from specdec.conformance.adapters import Adapter, Environment, TRANSFORMERS_STACK
from specdec.conformance.matrix import MatrixRow, Scope, battery_row, control_text

__all__ = ["ADAPTER", "ENVIRONMENT", "matrix_rows",
           "PINNED", "RULE", "CONTROLS", "SETTINGS", "EagleTreeSampler", "version",
           "check_version", "read_cycle", "predicted_tv", "run_all", "main"]

#: The eagle-llm release the adapter and :data:`RULE` were written against.
PINNED = "1.2.1"

#: The pinned environment this adapter runs in (built by tools/py_engines.py, which
#: reads this expression from the source: literals, this module's constants and the
#: package's pins only).
ENVIRONMENT = Environment(
    "eagle", PINNED, (*TRANSFORMERS_STACK, "eagle-llm==1.2.1"),
    "import importlib.metadata as m, eagle.model.utils; print(m.version('eagle-llm'))",
    pip_args=("--no-deps",),
    notes="eagle-llm declares gradio==3.50.2, fschat, openai==0.28.0, anthropic, "
          "protobuf==3.19.0 and an unpinned torch (its demo and evaluation scripts); "
          "the verification code (eagle/model/utils.py, cnets.py) needs torch and "
          "transformers' logits processors only, so it is installed with --no-deps on "
          "the pinned torch + transformers stack (TRANSFORMERS_STACK).")

#: The rule as read from the pinned sources: (step, what it does, where: file:line in eagle/model/).
RULE = (
    ("draft children", "k children per node drawn without replacement from the processed "
     "draft law (torch.multinomial, replacement=False); child j carries "
     "q(x_j) / (1 - sum_{i<j} q(x_i)), its law given the earlier draws", "cnets.py:708-724"),
    ("target law", "logits of the accepted node through the logits processor, softmax",
     "utils.py:372-376"),
    ("accept test", "children tried in order, each token once; accept when "
     "random.random() <= r(x_j) / q_j(x_j); q_j <= 0 skipped", "utils.py:378-395"),
    ("residual", "after a rejection r <- (r - q')^+ / Z, q' the draft law with the siblings "
     "already tried masked and renormalised (sampling without replacement)",
     "utils.py:396-406"),
    ("correction", "every child of the node rejected: the next token from the residual r",
     "utils.py:407-408"),
    ("bonus token", "accepted leaf or deepest level accepted: softmax of the raw target "
     "logits at the last accepted node, without the logits processor (temperature, top-k, "
     "top-p not applied)", "utils.py:409-412"),
    ("draw", "the next token by torch.multinomial(sample_p, 1)", "utils.py:458-460"),
)

#: Controls: name -> the one-line change, applied by :class:`EagleTreeSampler`.
CONTROLS = {
    "original_q": "the ratio uses the unconditional draft probability q(x_j) instead of the "
                  "conditional one (the division by 1 - cumulative_sum in Model.sample "
                  "removed): the question of SafeAILab/EAGLE#74, specdec.rules.trees.ORIGINAL_Q's "
                  "ratio",
}

#: Settings of the JSON summary: name -> temperature of EAGLE's logits processor.
SETTINGS = {"temperature_1": 1.0, "tempered_0.6": 0.6}

#: Token count EAGLE's buffers are laid out for (``utils.py:13``).
_TOPK = 10


def version() -> str:
    """The installed eagle-llm version.

    Raises
    ------
    ImportError
        If eagle-llm is not installed in this interpreter.
    """
    import importlib.metadata as md

    try:
        return md.version("eagle-llm")
    except md.PackageNotFoundError:
        raise ImportError(f"eagle: eagle-llm is not installed in this interpreter "
                          f"({sys.executable}); run `python tools/py_engines.py eagle` and use "
                          f"the interpreter it prints") from None


def check_version(expected: str = PINNED) -> str:
    """The installed eagle-llm version, checked against ``expected``.

    Raises
    ------
    ImportError
        If eagle-llm is not installed.
    RuntimeError
        If the installed version is not ``expected`` (RULE's file:line references are
        those of ``expected``).
    """
    found = version()
    if found != expected:
        raise RuntimeError(f"eagle: the adapter was written against eagle-llm {expected} "
                           f"(RULE's file:line references), but {found} is installed")
    return found


@lru_cache(maxsize=1)
def _eagle():
    """EAGLE's functions: utils (imported), and ``Model.sample`` of cnets.py.

    ``eagle/model/cnets.py`` imports transformers internals at module level that
    transformers 5 no longer has; ``Model.sample`` uses none of them (torch only), so its
    source is taken from the installed file as is and compiled alone.
    """
    check_version()
    import importlib.util

    import torch
    from eagle.model import utils

    spec = importlib.util.find_spec("eagle.model.cnets")
    source = Path(spec.origin).read_text()
    tree = ast.parse(source)
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    fn = next(n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "sample")
    namespace = {"torch": torch}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), spec.origin, "exec"), namespace)
    return dict(torch=torch, utils=utils, sample=namespace["sample"], sample_line=fn.lineno)


def read_cycle(best_candidate, accept_length, candidates, token, vocab_size: int, eos):
    """EAGLE's outputs of one cycle as the kit's ``(emitted, n_accepted)``.

    Parameters
    ----------
    best_candidate, accept_length : int
        What ``evaluate_posterior`` returns (path index, accepted tokens on it).
    candidates : array of int, shape (n_paths, depth + 1)
        EAGLE's candidate paths (column 0 the root, ``-1`` padding).
    token : int
        The token drawn from ``sample_p``.
    vocab_size : int
    eos : int or None

    Returns
    -------
    tuple
        ``(emitted, n_accepted)``: the accepted tokens then ``token``, cut after the first
        end-of-sequence.

    Raises
    ------
    ValueError
        If ``best_candidate`` or ``accept_length`` is outside the tree, an accepted token is
        padding or outside the vocabulary, or ``token`` is outside the vocabulary.
    """
    cand = np.asarray(candidates)
    b, n = int(best_candidate), int(accept_length)
    if not 0 <= b < cand.shape[0]:
        raise ValueError(f"output: best_candidate {b} outside the {cand.shape[0]} tree paths")
    if not 0 <= n < cand.shape[1]:
        raise ValueError(f"output: accept_length {n} outside 0..{cand.shape[1] - 1}")
    acc = [int(t) for t in cand[b, 1:n + 1]]
    if any(not 0 <= t < vocab_size for t in acc):
        raise ValueError(f"output: accepted path {acc} has a token outside 0..{vocab_size - 1}")
    if not 0 <= int(token) < vocab_size:
        raise ValueError(f"output: drawn token {int(token)} outside 0..{vocab_size - 1}")
    emitted = acc + [int(token)]
    if eos is not None and eos in emitted:
        cut = emitted.index(eos) + 1
        return tuple(emitted[:cut]), min(n, cut)
    return tuple(emitted), n


def _full_tree(widths) -> list:
    """EAGLE's ``tree_choices`` of the complete tree with ``widths[d]`` children at depth d."""
    out = []
    for depth in range(1, len(widths) + 1):
        out.extend(list(p) for p in itertools.product(*(range(w) for w in widths[:depth])))
    return out


class EagleTreeSampler:
    """EAGLE's tree verification as the kit's block sampler ``f(target, draft, prefix, gamma, rng)``.

    Parameters
    ----------
    top_widths : tuple of int
        Children per node at the top of the tree, filled with 1 to depth ``gamma``
        (as :class:`specdec.rules.RuleSampler`): ``(2,)`` drafts two candidates for the
        first token and a chain below each.
    temperature : float
        Temperature of EAGLE's logits processor (``prepare_logits_processor``); the adapter
        feeds the logits ``temperature * log(law)``, so that the processed laws are the
        kit's.
    control : str, optional
        A key of :data:`CONTROLS`.

    Raises
    ------
    ValueError
        Bad widths, temperature <= 0, unknown control.
    """

    def __init__(self, top_widths=(2,), temperature: float = 1.0, control: str | None = None):
        from specdec.rules import RuleSampler
        from specdec.rules.trees import RecursiveRejection

        if not temperature > 0:
            raise ValueError(f"temperature: must be > 0 (EAGLE's sampling path; got {temperature})")
        if control is not None and control not in CONTROLS:
            raise ValueError(f"control: must be one of {', '.join(CONTROLS)} (got {control!r})")
        if any(int(w) > _TOPK for w in top_widths):
            raise ValueError(f"top_widths: EAGLE's buffers hold at most {_TOPK} children per node")
        self._exact = RuleSampler(RecursiveRejection("without"), top_widths=tuple(top_widths))
        self.top_widths = self._exact.top_widths
        self.temperature = float(temperature)
        self.control = control
        self._buffers = {}
        self.__name__ = f"eagle-{PINNED} tree{self.top_widths} T={temperature:g}" + \
            (f" control={control}" if control else "")

    def __repr__(self) -> str:
        return self.__name__

    def first_cycle_accepted_law(self, target, draft, prefix, gamma):
        """Accepted-count law of the exact rule this tree verification should implement."""
        return self._exact.first_cycle_accepted_law(target, draft, prefix, gamma)

    def _tree(self, widths):
        if widths not in self._buffers:
            e = _eagle()
            choices = _full_tree(widths)
            self._buffers[widths] = (choices, e["utils"].generate_tree_buffers(choices, device="cpu"))
        return self._buffers[widths]

    def _logits(self, law, eos, ctx):
        torch = _eagle()["torch"]
        if eos is not None and eos in ctx:          # past an EOS: never emitted
            law = np.eye(len(law))[eos]
        with np.errstate(divide="ignore"):
            return torch.tensor(self.temperature * np.log(law), dtype=torch.float32)

    def __call__(self, target, draft, prefix, gamma, rng):
        e = _eagle()
        torch, utils, sample = e["torch"], e["utils"], e["sample"]
        widths = tuple(self._exact.shape(gamma))
        choices, buf = self._tree(widths)
        prefix = tuple(int(t) for t in prefix)
        eos = target.eos
        V = target.vocab_size
        torch.manual_seed(int(rng.integers(2**62)))
        import random
        random.seed(int(rng.integers(2**62)))
        processor = utils.prepare_logits_processor(temperature=self.temperature)

        def law_of(model, ctx):
            if eos is not None and eos in ctx:
                return np.eye(V)[eos]
            return model.next_law(ctx)

        # draft: the children of every node with children, in EAGLE's order (by depth, then path)
        tokens_of = {(): None}
        ss_token, ss_prob, ss_op = [], [], []
        for depth, w in enumerate(widths):
            parents = [p for p in tokens_of if len(p) == depth]
            parents.sort()
            rows_t, rows_p, rows_op = [], [], []
            for path in parents:
                ctx = prefix + tuple(tokens_of[path[:i + 1]] for i in range(depth))
                logits = self._logits(law_of(draft, ctx), eos, ctx)[None]
                idx, prob, op = sample(None, logits, processor, k=w)
                if self.control == "original_q":
                    prob = torch.gather(op, 1, idx)
                pad = _TOPK - w
                rows_t.append(torch.cat([idx, torch.zeros((1, pad), dtype=idx.dtype)], 1))
                rows_p.append(torch.cat([prob, torch.zeros((1, pad), dtype=prob.dtype)], 1))
                rows_op.append(op)
                for c in range(w):
                    tokens_of[path + (c,)] = int(idx[0, c])
            ss_token.append(torch.cat(rows_t))
            ss_prob.append(torch.cat(rows_p))
            ss_op.append(torch.cat(rows_op))
        tree_logits = (torch.cat(ss_token), torch.cat(ss_prob), ss_op)
        root = torch.tensor([[prefix[-1] if prefix else 0]])
        candidates, cart_prob, tree_candidates = utils.generate_candidates(
            tree_logits, buf["tree_indices"], buf["retrieve_indices"], root, processor)
        # target logits at every position of every candidate path (what tree_decoding returns)
        cand = candidates.numpy()
        logits = torch.zeros((cand.shape[0], cand.shape[1], V), dtype=torch.float32)
        for j in range(cand.shape[0]):
            for i in range(cand.shape[1]):
                toks = tuple(int(t) for t in cand[j, 1:i + 1])
                if any(t < 0 for t in toks):
                    continue                            # padding of a shorter path
                ctx = prefix + toks
                logits[j, i] = self._logits(law_of(target, ctx), eos, ctx)
        best, n_acc, sample_p = utils.evaluate_posterior(
            logits, candidates, processor, cart_prob, tree_logits[2], buf["p_indices"],
            tree_candidates, buf["b_indices"])
        token = int(torch.multinomial(sample_p, 1))
        emitted, n = read_cycle(int(best), int(n_acc), cand, token, V, eos)
        return emitted, n, len(widths)


def predicted_tv(case, temperature: float, top_widths=(2,)) -> float:
    """Exact TV of the rule as read (:data:`RULE`) from the target on ``case``'s first tokens.

    Recursive rejection without replacement over the complete tree of the widths, except
    that the token after the deepest level is drawn from the raw law
    ``softmax(temperature * log p) = p ** temperature / Z`` (``utils.py:409-411``), the
    law EAGLE draws it from when fed the logits ``temperature * log(p)``; 0 at
    temperature 1.

    Parameters
    ----------
    case : specdec.conformance.BlockCase
        Without end-of-sequence.
    temperature : float
        > 0.
    top_widths : tuple of int

    Returns
    -------
    float
        TV between that law and the target's, of the case's ``length`` tokens.

    Raises
    ------
    ValueError
        ``temperature`` <= 0, or a case with end-of-sequence.

    References
    ----------
    .. [1] W. Jeon et al., arXiv:2402.14160, 2024 (recursive rejection without replacement).
    """
    from specdec.rules import base as cycles
    from specdec import rules
    from specdec.laws import law_tv
    from specdec.models import sequence_law
    from specdec.rules.trees import RecursiveRejection

    if not temperature > 0:
        raise ValueError(f"temperature: must be > 0 (got {temperature})")
    if case.target.eos is not None:
        raise ValueError(f"case: {case.name!r} has an end-of-sequence token; predicted_tv "
                         f"takes cases without one")
    rule = RecursiveRejection("without")
    widths = tuple(rules.RuleSampler(rule, top_widths=tuple(top_widths)).shape(case.gamma))
    depth = len(widths)

    def raw(law):
        w = np.asarray(law, dtype=np.float64) ** temperature
        return (w / w.sum()).tolist()

    def cycle(ctx):
        n = len(ctx)
        oracle = cycles.LawOracle(
            lambda c: raw(case.target.next_law(c)) if len(c) - n == depth
            else case.target.next_law(c).tolist(),
            lambda c: case.draft.next_law(c).tolist(), case.target.vocab_size, None, lambda c: c)
        return rule.outcomes(oracle, ctx, widths)

    outer = cycles.model_oracle(case.target, case.draft)
    law = cycles.rule_sequence_law(cycle, outer, case.prefix, case.length)
    return float(law_tv(law, sequence_law(case.target, case.prefix, case.length)))


def _case_summary(c) -> dict:
    def num(x):
        return None if x is None or not np.isfinite(x) else float(x)

    law = c.law
    return {"case": c.name, "trials": c.trials, "passed": c.passed, "exact": c.exact,
            "accounting_ok": c.accounting_ok,
            "tv": num(law.tv) if law else None,
            "tv_interval": [num(law.tv_low), num(law.tv_high)] if law else None,
            "tv_detectable": num(law.tv_detectable) if law else None,
            "seconds": round(c.seconds, 2), "causes": list(c.causes)}


def _battery(sampler, cases, seed, trials, false_alarm) -> dict:
    from specdec.conformance import block_cases, rule_cases, run_battery

    t0 = time.perf_counter()
    rep = run_battery(sampler, kind="block", cases=cases, seed=seed, trials=trials,
                      false_alarm=false_alarm)
    by_name = {c.name: c for c in block_cases() + rule_cases()}
    rows = [_case_summary(c) for c in rep.cases]
    if sampler.control is None:
        for row in rows:
            case = by_name.get(row["case"])
            if case is not None and case.target.eos is None:
                row["predicted_tv"] = predicted_tv(case, sampler.temperature, sampler.top_widths)
    return {"sampler": repr(sampler), "passed": rep.passed, "exact": rep.exact,
            "accounting_ok": rep.accounting_ok, "max_detectable_tv": float(rep.max_detectable_tv),
            "seconds": round(time.perf_counter() - t0, 1), "cases": rows}


#: Block cases of the summary: the kit's rule case (where tree flaws show) and a standard one.
CASES = ("rules_far_g3", "block_g1")


def run_all(*, seed: int = 0, trials: int = 20_000, control_trials: int = 20_000,
            top_widths=(2,), false_alarm: float = 1e-3, cases=CASES,
            settings=tuple(SETTINGS)) -> dict:
    """The kit's block battery on EAGLE's tree verification, per setting, with its control.

    Parameters
    ----------
    seed : int
    trials : int
        Decodes per case of the engine as shipped.
    control_trials : int
        Decodes per case of the control (temperature 1 only).
    top_widths : tuple of int
    false_alarm : float
    cases : sequence of str
    settings : sequence of str
        Keys of :data:`SETTINGS` to run (default all).

    Returns
    -------
    dict
        ``engine``, ``version``, ``rule``, and per setting the battery as shipped (and at
        temperature 1 the control's, which must fail).
    """
    import torch

    torch.set_num_threads(1)
    out = {"engine": "eagle-llm", "version": check_version(), "seed": seed,
           "top_widths": list(top_widths), "false_alarm": false_alarm,
           "rule": [{"step": s, "rule": r, "where": w} for s, r, w in RULE],
           "controls": dict(CONTROLS), "settings": {}}
    for name in settings:
        temp = SETTINGS[name]
        row = {"temperature": temp,
               "as_shipped": _battery(EagleTreeSampler(top_widths, temp), list(cases), seed,
                                      trials, false_alarm)}
        if temp == 1.0:
            row["controls"] = {}
            for control in CONTROLS:
                crep = _battery(EagleTreeSampler(top_widths, temp, control), list(cases),
                                seed + 1, control_trials, false_alarm)
                crep["failed"] = not crep["passed"]
                row["controls"][control] = crep
        out["settings"][name] = row
    return out


def main(argv=None) -> int:
    """``python -m specdec.conformance.adapters.eagle [--seed N] [...]``: print the JSON summary."""
    ap = argparse.ArgumentParser(prog="python -m specdec.conformance.adapters.eagle",
                                 description="Run the kit's block battery on EAGLE's tree "
                                             "verification (eagle-llm), at temperature 1 with "
                                             "its failing control, and tempered.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trials", type=int, default=20_000)
    ap.add_argument("--control-trials", type=int, default=20_000)
    ap.add_argument("--top-widths", default="2", help="comma-separated, e.g. 2 or 3,2")
    ap.add_argument("--false-alarm", type=float, default=1e-3)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--settings", default=",".join(SETTINGS),
                    help="comma-separated settings of the summary (default all)")
    ap.add_argument("--setting", choices=sorted(SETTINGS), default=None,
                    help="one setting only, as shipped (the reproduction)")
    args = ap.parse_args(argv)
    if args.seed < 0:
        ap.error("--seed: must be >= 0")
    if args.trials < 1 or args.control_trials < 1:
        ap.error("--trials, --control-trials: must be >= 1")
    try:
        widths = tuple(int(w) for w in args.top_widths.split(","))
    except ValueError:
        ap.error(f"--top-widths: must be comma-separated integers (got {args.top_widths!r})")
    try:
        version()
    except ImportError as exc:
        print(exc, file=sys.stderr)
        return 2
    cases = args.cases.split(",")
    settings = args.settings.split(",")
    unknown = [x for x in settings if x not in SETTINGS]
    if unknown:
        ap.error(f"--settings: unknown setting {unknown[0]!r} (one of {', '.join(SETTINGS)})")
    if args.setting is not None:
        import torch

        torch.set_num_threads(1)
        rep = _battery(EagleTreeSampler(widths, SETTINGS[args.setting]), cases, args.seed,
                       args.trials, args.false_alarm)
        json.dump({"engine": "eagle-llm", "version": check_version(), "setting": args.setting,
                   "as_shipped": rep}, sys.stdout, indent=1)
        print()
        return 0 if rep["passed"] else 1
    summary = run_all(seed=args.seed, trials=args.trials, control_trials=args.control_trials,
                      top_widths=widths, false_alarm=args.false_alarm, cases=cases, settings=settings)
    json.dump(summary, sys.stdout, indent=1)
    print()
    return 0 if all(s["as_shipped"]["passed"] for s in summary["settings"].values()) else 1


def matrix_rows(summary: Mapping, *, rule: str, report: str) -> list[MatrixRow]:
    """Rows of :mod:`specdec.conformance.adapters.eagle`'s summary, one per temperature."""
    rows = []
    for name, s in summary["settings"].items():
        temp = s["temperature"]
        failed = not s["as_shipped"]["passed"]
        rows.append(battery_row(
            s["as_shipped"], implementation="EAGLE tree verification",
            version=summary["version"], interface="function (evaluate_posterior), block cycle",
            setting=f"temperature {temp:g}, tree widths "
                    + "-".join(str(w) for w in summary["top_widths"]),
            rule=rule, control=control_text(s.get("controls", {})),
            note=f"bonus token from the untempered target ({report})" if failed else ""))
    return rows


#: This engine in Appendix C's first table.
SCOPE = Scope("EAGLE", ("EAGLE tree verification",),
              "the `eagle-llm` reference package's `evaluate_posterior` on the kit's block "
              "cases; not vLLM's or SGLang's EAGLE",
              "tree: accept a child with min(1, p/q), renormalise (p − q)+ over the rest",
              "the draft head; vLLM's and SGLang's EAGLE",
              "`eagle-bonus-temperature.md`: a release request (fixed on main, not on PyPI)",
              where={"rule": "at temperature ≠ 1 the bonus token is untempered"}, position=30)

#: The adapter's declaration (:mod:`specdec.conformance.adapters`).
ADAPTER = Adapter("eagle", ENVIRONMENT, SCOPE, matrix_rows, example={
    "summary": {"version": PINNED, "top_widths": [2], "settings": {"temperature_1": {
    "temperature": 1.0, "as_shipped": {"passed": True, "cases": [
        {"case": "c", "trials": 10, "passed": True, "tv": 0.01, "tv_interval": [0, 0.02],
         "tv_detectable": 0.05}]}}}},
    "facts": {"rule": "r", "report": "reports/r.md"}})


if __name__ == "__main__":
    sys.exit(main())
