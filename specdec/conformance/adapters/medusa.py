"""Medusa's typical acceptance (medusa-llm 0.1) measured with the kit's measurement mode.

Typical acceptance is lossy by design: it accepts a candidate when the target gives it
enough probability, not with the ratio that preserves the target's law. The kit does not
give it a verdict; :func:`specdec.conformance.measure_loss` measures how far its law is
from the target's (TV and KL with intervals), beside the exact TV of the library's rule
``specdec.rules.lossy.Lossy("typical")``.

:class:`MedusaSampler` is the one translation, a block sampler
``f(target, draft, prefix, gamma, rng)``: from the kit's toy models it builds the inputs of
Medusa's own functions as ``MedusaModel.medusa_generate`` does (``generate_medusa_buffers``
for the choices ``[1] * (gamma + 1)``, ``generate_candidates``, ``evaluate_posterior``),
with raw logits ``temperature * log(law)`` so that Medusa's own temperature gives the
kit's laws back. Medusa head ``i`` (which predicts the token ``i + 2`` places ahead without
seeing the tokens between) is the draft's law after the draft's own greedy chain.

The rule, as read from the code of medusa-llm 0.1 (:data:`RULE`, file:line in the installed
package ``medusa/model/``):

* the first token of every cycle is the target's arg-max at the confirmed position, at any
  temperature (``utils.py:213``, ``torch.argmax(logits[:, -1])``);
* the candidates are the top-k tokens of each head, their Cartesian product
  (``utils.py:214-218``): deterministic;
* a candidate token ``x`` is accepted while ``p_T(x) > min(epsilon, alpha * exp(-H(p_T)))``,
  ``p_T = softmax(logits / temperature)`` (``utils.py:303-315``); the longest accepted
  prefix wins, ties broken by likelihood (``utils.py:318-328``);
* the cycle emits the root and the accepted tokens (``utils.py:372-374``); the next
  cycle's root is the arg-max after them.

Nothing in the sampling path is random: at temperature > 0 medusa-llm 0.1 decodes one
sequence, whatever the seed. Its measured TV is therefore ``1 - P(that sequence)``; the
library's ``"typical"`` rule (candidates drawn from the draft, bonus sampled: Medusa's
paper, Sec. 3.3.1, and later Medusa releases) is another, less lossy rule, reported beside
it as ``exact_typical``.

Requires the engine environment of ``tools/py_engines.py`` (``medusa``); run
``python -m specdec.conformance.adapters.medusa`` with its interpreter for a JSON summary.

References
----------
.. [1] T. Cai et al., "Medusa: Simple LLM Inference Acceleration Framework with Multiple
   Decoding Heads", ICML 2024, arXiv:2401.10774, Sec. 3.3.1 (typical acceptance).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import lru_cache
from typing import Mapping

import numpy as np

from specdec.conformance.adapters import Adapter, Environment, TRANSFORMERS_STACK
from specdec.conformance.matrix import MatrixRow, Scope

__all__ = ["ADAPTER", "ENVIRONMENT", "matrix_rows",
           "PINNED", "RULE", "MedusaSampler", "version", "check_version", "read_cycle",
           "exact_tv", "run_all", "main"]

#: The medusa-llm release the adapter and :data:`RULE` were written against.
PINNED = "0.1"

#: The pinned environment this adapter runs in (built by tools/py_engines.py, which
#: reads this expression from the source: literals, this module's constants and the
#: package's pins only).
ENVIRONMENT = Environment(
    "medusa", PINNED, (*TRANSFORMERS_STACK, "medusa-llm==0.1"),
    "import importlib.metadata as m, medusa.model.utils; print(m.version('medusa-llm'))",
    pip_args=("--no-deps",),
    notes="medusa-llm declares fschat, accelerate, sentencepiece, protobuf and an "
          "unpinned torch; its typical acceptance (medusa/model/utils.py) needs torch "
          "only, so it is installed with --no-deps on the pinned stack.")

#: The rule as read from the pinned sources: (step, what it does, where: file:line in medusa/model/).
RULE = (
    ("first token", "the target's arg-max at the confirmed position, at any temperature",
     "utils.py:213"),
    ("candidates", "top-k of each Medusa head (medusa_choices[1:]), Cartesian product: "
     "deterministic", "utils.py:214-218, medusa_model.py:228"),
    ("accept test", "candidate x accepted while p_T(x) > min(posterior_threshold, "
     "posterior_alpha * exp(-H(p_T))), p_T = softmax(logits / temperature); longest "
     "accepted prefix, ties by likelihood", "utils.py:303-328"),
    ("emitted", "the root and the accepted candidate tokens; the next root is the arg-max "
     "after them", "utils.py:372-374, 387"),
)

#: Block cases measured: the kit's standard chain cases without end-of-sequence.
CASES = ("block_g1", "block_g2", "block_close_g3")


def version() -> str:
    """The installed medusa-llm version.

    Raises
    ------
    ImportError
        If medusa-llm is not installed in this interpreter.
    """
    import importlib.metadata as md

    try:
        return md.version("medusa-llm")
    except md.PackageNotFoundError:
        raise ImportError(f"medusa: medusa-llm is not installed in this interpreter "
                          f"({sys.executable}); run `python tools/py_engines.py medusa` and use "
                          f"the interpreter it prints") from None


def check_version(expected: str = PINNED) -> str:
    """The installed medusa-llm version, checked against ``expected``.

    Raises
    ------
    ImportError
        If medusa-llm is not installed.
    RuntimeError
        If the installed version is not ``expected``.
    """
    found = version()
    if found != expected:
        raise RuntimeError(f"medusa: the adapter was written against medusa-llm {expected} "
                           f"(RULE's file:line references), but {found} is installed")
    return found


@lru_cache(maxsize=1)
def _medusa():
    check_version()
    import torch
    from medusa.model import utils

    return dict(torch=torch, utils=utils)


def read_cycle(best_candidate, accept_length, candidates, vocab_size: int, eos):
    """Medusa's outputs of one cycle as the kit's ``(emitted, n_accepted)``.

    Parameters
    ----------
    best_candidate, accept_length : int
        What ``evaluate_posterior`` returns.
    candidates : array of int, shape (n_candidates, heads + 1)
        Column 0 the root (the target's arg-max), then one token per head.
    vocab_size : int
    eos : int or None

    Returns
    -------
    tuple
        ``(emitted, n_accepted)``: ``candidates[best, :accept_length + 1]``, cut after the
        first end-of-sequence.

    Raises
    ------
    ValueError
        If ``best_candidate`` or ``accept_length`` is outside the candidates, or a token is
        outside the vocabulary.
    """
    cand = np.asarray(candidates)
    b, n = int(best_candidate), int(accept_length)
    if not 0 <= b < cand.shape[0]:
        raise ValueError(f"output: best_candidate {b} outside the {cand.shape[0]} candidates")
    if not 0 <= n < cand.shape[1]:
        raise ValueError(f"output: accept_length {n} outside 0..{cand.shape[1] - 1}")
    emitted = [int(t) for t in cand[b, :n + 1]]
    if any(not 0 <= t < vocab_size for t in emitted):
        raise ValueError(f"output: emitted {emitted} has a token outside 0..{vocab_size - 1}")
    if eos is not None and eos in emitted:
        emitted = emitted[:emitted.index(eos) + 1]
        n = min(n, len(emitted) - 1)
    return tuple(emitted), n


class MedusaSampler:
    """Medusa's typical acceptance as the kit's block sampler ``f(target, draft, prefix, gamma, rng)``.

    Parameters
    ----------
    temperature : float
        Medusa's ``temperature`` (> 0: the typical-acceptance path).
    posterior_threshold, posterior_alpha : float
        Medusa's ``epsilon`` and ``alpha`` (its defaults 0.09 and 0.3).

    Raises
    ------
    ValueError
        temperature <= 0, or thresholds outside (0, 1].
    """

    def __init__(self, temperature: float = 1.0, posterior_threshold: float = 0.09,
                 posterior_alpha: float = 0.3):
        if not temperature > 0:
            raise ValueError(f"temperature: must be > 0 (typical acceptance; got {temperature})")
        for name, v in (("posterior_threshold", posterior_threshold),
                        ("posterior_alpha", posterior_alpha)):
            if not 0 < v <= 1:
                raise ValueError(f"{name}: must be in (0, 1] (got {v})")
        self.temperature = float(temperature)
        self.epsilon = float(posterior_threshold)
        self.alpha = float(posterior_alpha)
        self._buffers = {}
        self.__name__ = (f"medusa-{PINNED} typical T={temperature:g} eps={posterior_threshold:g} "
                         f"alpha={posterior_alpha:g}")

    def __repr__(self) -> str:
        return self.__name__

    def _logits(self, law):
        torch = _medusa()["torch"]
        with np.errstate(divide="ignore"):
            return torch.tensor(self.temperature * np.log(law), dtype=torch.float32)

    def __call__(self, target, draft, prefix, gamma, rng):
        m = _medusa()
        torch, utils = m["torch"], m["utils"]
        prefix = tuple(int(t) for t in prefix)
        V, eos = target.vocab_size, target.eos
        choices = [1] * (int(gamma) + 1)
        if gamma not in self._buffers:
            self._buffers[gamma] = utils.generate_medusa_buffers(choices, device="cpu")
        buf = self._buffers[gamma]
        # the target's logits at the confirmed position (what the previous cycle leaves)
        logits = self._logits(target.next_law(prefix))[None, None]
        root = int(torch.argmax(logits[:, -1]))
        # head i: the draft's law after the root and the draft's own greedy chain of i tokens
        heads, ctx = [], prefix + (root,)
        for _ in range(int(gamma)):
            law = draft.next_law(ctx) if eos not in ctx else np.eye(V)[eos]
            heads.append(self._logits(law))
            ctx = ctx + (int(np.argmax(law)),)
        medusa_logits = torch.stack(heads)[:, None, None, :]       # (heads, 1, 1, V)
        candidates, tree_candidates = utils.generate_candidates(
            medusa_logits, logits, choices[1:], buf["tree_indices"], self.temperature)
        cand = candidates.numpy()
        tl = torch.zeros((cand.shape[0], cand.shape[1], V), dtype=torch.float32)
        for j in range(cand.shape[0]):
            for i in range(cand.shape[1]):
                c = prefix + tuple(int(t) for t in cand[j, :i + 1])
                tl[j, i] = self._logits(target.next_law(c) if eos not in c else np.eye(V)[eos])
        best, n = utils.evaluate_posterior(tl, candidates, self.temperature, self.epsilon,
                                           self.alpha)
        emitted, n_acc = read_cycle(int(best), int(n), cand, V, eos)
        return emitted, n_acc, int(gamma)


def exact_tv(case, temperature: float = 1.0, epsilon: float = 0.09, alpha: float = 0.3) -> float:
    """Exact TV of the library's typical-acceptance rule on ``case``'s first tokens.

    ``specdec.rules.lossy.Lossy("typical")`` with the same thresholds, its law of the case's
    ``length`` tokens against the target's (both from the case's models: the temperature
    is already in the laws the adapter feeds).
    """
    from specdec.rules import lossy
    from specdec.laws import law_tv
    from specdec.models import sequence_law

    rule = lossy.Lossy("typical", {"epsilon": epsilon, "delta": alpha})
    law = rule.sequence_law(case.target, case.draft, case.prefix, case.gamma, case.length)
    return float(law_tv(law, sequence_law(case.target, case.prefix, case.length)))


def run_all(*, seed: int = 0, trials: int = 20_000, cases=CASES, temperature: float = 1.0,
            epsilon: float = 0.09, alpha: float = 0.3) -> dict:
    """The kit's measurement mode on Medusa's typical acceptance, beside the library's exact TV.

    Returns
    -------
    dict
        ``engine``, ``version``, ``rule``, and per case: the measured TV with its interval,
        the KL with its interval, outcomes impossible under the target, the exact TV of
        the library's typical rule, and the verdict text "lossy by design, ...".
    """
    import torch

    from specdec.conformance import block_cases, measure_loss

    torch.set_num_threads(1)
    sampler = MedusaSampler(temperature, epsilon, alpha)
    by_name = {c.name: c for c in block_cases()}
    t0 = time.perf_counter()
    rep = measure_loss(sampler, kind="block", cases=list(cases), seed=seed, trials=int(trials))
    rows = []
    for c in rep.cases:
        d = c.to_dict()
        exact = exact_tv(by_name[c.name], temperature, epsilon, alpha)
        rows.append({"case": c.name, "trials": d["trials"], "tv": d["tv"],
                     "tv_interval": [d["tv_low"], d["tv_high"]], "kl": d["kl"],
                     "kl_interval": [d["kl_low"], d["kl_high"]], "impossible": d["impossible"],
                     "exact_typical": exact,
                     "verdict": f"lossy by design, TV measured {d['tv']:.4f} "
                                f"[{d['tv_low']:.4f}, {d['tv_high']:.4f}], exact {exact:.4f} "
                                f"(library's typical rule)"})
    return {"engine": "medusa-llm", "version": check_version(), "seed": seed,
            "temperature": temperature, "posterior_threshold": epsilon, "posterior_alpha": alpha,
            "rule": [{"step": s, "rule": r, "where": w} for s, r, w in RULE],
            "seconds": round(time.perf_counter() - t0, 1), "cases": rows}


def main(argv=None) -> int:
    """``python -m specdec.conformance.adapters.medusa [--seed N] [...]``: print the JSON summary."""
    ap = argparse.ArgumentParser(prog="python -m specdec.conformance.adapters.medusa",
                                 description="Measure how lossy Medusa's typical acceptance "
                                             "(medusa-llm) is with the kit's measurement mode.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trials", type=int, default=20_000)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args(argv)
    if args.seed < 0:
        ap.error("--seed: must be >= 0")
    if args.trials < 2:
        ap.error("--trials: must be >= 2")
    if not args.temperature > 0:
        ap.error("--temperature: must be > 0")
    try:
        version()
    except ImportError as exc:
        print(exc, file=sys.stderr)
        return 2
    json.dump(run_all(seed=args.seed, trials=args.trials, cases=args.cases.split(","),
                      temperature=args.temperature), sys.stdout, indent=1)
    print()
    return 0


def matrix_rows(summary: Mapping, *, rule: str) -> list[MatrixRow]:
    """Rows of :mod:`specdec.conformance.adapters.medusa`'s summary (measurement mode)."""
    rows = []
    for c in summary["cases"]:
        low, high = c["tv_interval"]
        rows.append(MatrixRow(
            implementation="Medusa typical acceptance", version=summary["version"],
            interface="function (evaluate_posterior), measurement mode",
            setting=f"temperature {summary['temperature']:g}, case {c['case']}", rule=rule,
            verdict="LOSSY", tv=c["tv"], tv_low=low, tv_high=high, trials=c["trials"],
            seconds=summary.get("seconds"),
            note=f"lossy by design: the first token is the target's arg-max and the "
                 f"candidates the heads' top-k, so it decodes one sequence at any "
                 f"temperature (a sampled typical rule, the library's, has TV "
                 f"{c['exact_typical']:.3f} on this case)"))
    return rows


#: This engine in Appendix C's first table.
SCOPE = Scope("Medusa", ("Medusa typical acceptance",),
              "the `medusa-llm` reference package's `evaluate_posterior`, measured",
              "typical acceptance: accept while p(x) > min(ε, α·exp(−H(p)))",
              "the heads; vLLM's Medusa", "-",
              where={"lossy": "not meant to be exact"}, position=40)

#: The adapter's declaration (:mod:`specdec.conformance.adapters`).
ADAPTER = Adapter("medusa", ENVIRONMENT, SCOPE, matrix_rows, example={
    "summary": {"version": PINNED, "temperature": 1.0, "cases": [
    {"case": "c", "trials": 10, "tv": 0.9, "tv_interval": [0.7, 1.0], "exact_typical": 0.9}]},
    "facts": {"rule": "r"}})


if __name__ == "__main__":
    sys.exit(main())
