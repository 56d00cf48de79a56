"""The diagnosis: what a failed check most likely means, in words.

Each failing check of a case (:mod:`specdec.conformance.checks`) gets one sentence naming
the check, its statistic and adjusted p-value, and the likely cause: per case for the
token cases (:data:`LAW_CAUSES`), per kind otherwise.
"""

from __future__ import annotations

import numpy as np

from specdec.conformance.conventions import BATCH, BLOCK, TOKEN
from specdec.conformance.report import CaseResult, format_pvalue

__all__ = ["impossible_message", "LAW_CAUSES", "BLOCK_LAW_CAUSE", "BATCH_LAW_CAUSE", "diagnose"]


def impossible_message(counts: np.ndarray, law: np.ndarray, what: str) -> list[str]:
    bad = (law <= 0) & (counts > 0)
    if not bad.any():
        return []
    idx = np.flatnonzero(bad)
    shown = ", ".join(f"{int(i)} ({int(counts[i])}x)" for i in idx[:5])
    return [f"{int(counts[bad].sum())} {what} of probability 0 under the target: {shown}"]


#: What each standard case isolates: the likely cause when its law check fails.
LAW_CAUSES = {
    "article": "the accept test or the recovery draw is wrong (the article's example)",
    "equal": "with p = q every proposal must be accepted: the accept test rejects proposals "
             "it must keep, or the residual is evaluated although Z = 0",
    "disjoint": "every proposal must be rejected and the token drawn from the residual: "
                "the recovery is not the residual (p - q)+ / Z",
    "draft_zero": "a token the draft never proposes must come from the residual: the "
                  "residual misses tokens where q = 0",
    "target_zero": "a token with p = 0 must always be rejected: the accept test or the "
                   "residual lets it through",
    "onehot_target": "the target is one-hot: the accept test or the residual is wrong",
    "onehot_draft": "the draft is one-hot: the ratio p/q or the residual is wrong",
    "nearly_equal": "a small bias (Z = 0.002): a rounding or precision error in the ratio "
                    "or in the draws",
    "spread_residual": "the residual spreads over several tokens: the residual draw is not "
                       "independent of the accept test (a reused uniform?) or not from "
                       "(p - q)+ / Z",
    "processed": "the laws in the ratio are not the laws sampled from: temperature, top-k "
                 "or top-p applied to one model or one side only",
    "large_vocab": "the laws in the ratio are not the laws sampled from (processing of a "
                   "large vocabulary), or an error confined to the tail of the vocabulary",
}

BLOCK_LAW_CAUSE = ("the law of the decoded sequence is wrong: state carried between cycles "
                   "(proposals reused after a rejection, a cache not rolled back), a wrong "
                   "verification of a block, or a bonus token drawn from the wrong position")


BATCH_LAW_CAUSE = ("a request's tokens do not follow its own law: one request's settings "
                   "(temperature, top-k, top-p, greedy) applied to others, rows of the flattened "
                   "batch misaligned (ragged offsets, empty drafts), or a wrong verification")


def diagnose(res: CaseResult, kind: str) -> tuple[str, ...]:
    """The failing checks of a case and their likely causes, in words."""
    out = []
    for v in res.violations:
        if "after end-of-sequence" in v:
            why = ("a decode ends at end-of-sequence: the tokens drafted after an accepted "
                   "end-of-sequence were emitted")
        elif "probability 0" in v:
            why = ("the target never produces these: a proposal accepted where p = 0, or a "
                   "recovery drawn from a law other than the residual")
        elif "emit" in v:
            why = "a cycle emits its accepted proposals plus one corrected or bonus token"
        else:
            why = "the sampler's output breaks the calling convention or the sampler failed"
        out.append(f"Exactness: {v} ({why}).")
    law = res.law
    if law is not None and law.failed and law.impossible == 0:
        why = LAW_CAUSES.get(res.name, BLOCK_LAW_CAUSE if kind == BLOCK else BATCH_LAW_CAUSE
                             if kind == BATCH else
                             "the accept test, the recovery or the processing of the laws is wrong")
        out.append(f"Exactness: the law check failed ({law.method}, chi-square "
                   f"{law.statistic:.1f} on {law.dof} dof, Holm-adjusted p "
                   f"{_p_clause(law.adjusted_pvalue)}; TV found {law.tv:.4f} "
                   f"[{law.tv_low:.4f}, {law.tv_high:.4f}]). Likely cause: {why}.")
    for v in res.accounting_violations:
        if kind == TOKEN:
            why = ("the accepted flag must say whether the emitted token is the accepted "
                   "proposal; if the proposals are not drawn from q, declare proposals='own'")
        elif "accepted_eos" in v:
            why = "declare accepted_eos='counted', or leave it to be detected"
        else:
            why = ("the accepted count must be the length of the accepted prefix: accepts after "
                   "the first rejection, or the corrected or bonus token, were counted")
        out.append(f"Accounting: {v} (likely cause: {why}).")
    acc = res.accounting
    if acc is not None and acc.failed and acc.impossible == 0:
        if kind == TOKEN:
            why = ("the accepted flags do not match the emitted tokens (a flag set for residual "
                   "draws, or cleared for accepted proposals), or the proposals are not drawn "
                   "from q (declare proposals='own')")
        else:
            why = ("the reported counts are not the accepted prefix of each cycle, the proposals "
                   "are not drawn from q (declare proposals='own'), or an accepted "
                   "end-of-sequence is counted inconsistently (declare accepted_eos=)")
        out.append(f"Accounting: {acc.method} failed (chi-square {acc.statistic:.1f} on "
                   f"{acc.dof} dof, Holm-adjusted p {_p_clause(acc.adjusted_pvalue)}). Likely "
                   f"cause: {why}.")
    return tuple(out)


def _p_clause(p: float) -> str:
    """``= 0.031`` or ``< 10⁻³⁰⁰``: a p-value after its symbol, in the report's format."""
    text = format_pvalue(p)
    return text if text.startswith("<") else f"= {text}"
