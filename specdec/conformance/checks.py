"""The case checks: one case run against its exact laws (law, accounting, identities).

:func:`run_case` runs one case of :mod:`specdec.conformance.cases` on a sampler: it drives
the sampler (:mod:`specdec.conformance.drive`), tests the emitted law and the reported
accounting against the exact laws with a pooled chi-square and a TV interval
(:func:`gof_check`), and records every deterministic violation. No multiple-testing
adjustment happens here: the battery (:mod:`specdec.conformance.runner`) does it.
"""

from __future__ import annotations

import dataclasses
import math
import time
import zlib

import numpy as np

from specdec.stats import gof as kitstats
from specdec import laws, rules, stats, verify
from specdec.rules import token as tokenrule

from specdec.conformance import plan
from specdec.conformance.cases import BatchCase, BlockCase, TokenCase, batch_cases, block_cases, rule_cases, token_cases
from specdec.conformance.conventions import (AUTO, BATCH, BLOCK, COUNTED, FROM_Q, NOT_COUNTED, OWN, TOKEN, SamplerSpec,
                          describe_sampler)
from specdec.conformance.diagnosis import impossible_message
from specdec.conformance.drive import Malformed, call_token, encode_sequences, run_block_scalar, run_block_vectorised, tally_tokens
from specdec.conformance.report import CaseResult, Check, CycleAccounting

__all__ = ["gof_check", "failed_call", "token_accounting", "run_token_case", "accepted_law_of", "declared_accepted_law",
           "sequence_counts", "run_block_case", "run_batch_case", "case_rng", "resolve_cases",
           "run_case"]


def gof_check(name: str, counts: np.ndarray, law: np.ndarray, *, min_expected: float, max_bins: int,
         confidence: float) -> tuple[Check, float]:
    """Pooled chi-square + TV interval; returns the check and the per-trial noncentrality."""
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    if max_bins is None:                       # the number of bins grows with the trials
        max_bins = kitstats.bins_for_trials(max(n, 1))
    res = kitstats.pooled_chisquare(counts, law, min_expected=min_expected, max_bins=max_bins)
    binning, binned, impossible = res.binning, res.binned, res.impossible
    dof, stat, pvalue, lam1 = res.dof, res.statistic, res.pvalue, res.noncentrality
    if n > 0:
        ci = stats.tv_ci(np.append(binned, impossible), np.append(binning.law, 0.0), confidence)
        tv, lo, hi = ci.estimate, ci.low, ci.high
    else:
        tv = lo = hi = float("nan")
    if binning.pooled_cells:
        method = (f"Pearson chi-square, {binning.n_bins} bins "
                  f"({binning.pooled_cells} of {int((binning.bin_of >= 0).sum())} cells pooled)")
    else:
        method = f"Pearson chi-square, {binning.n_bins} cells"
    if dof == 0:
        method = "impossible outcomes only (one possible bin)"
    check = Check(name, method, n, stat, dof, pvalue, binning.n_bins, binning.pooled_cells,
                  impossible, tv, lo, hi)
    return check, lam1


def failed_call(case, kind: str, trials: int, t0: float, exc: Exception):
    """The result of a case whose sampler raised or returned what the kit cannot read.

    Both are conformance failures, reported (every trial counts as violating); returns
    ``(CaseResult, [], None)`` like :func:`run_case`.
    """
    if isinstance(exc, Malformed):
        msg, cause = f"malformed output: {exc}", f"The sampler's output could not be read ({exc})."
    else:
        msg = f"raised {type(exc).__name__}: {exc}"
        cause = f"The sampler raised {type(exc).__name__}: {exc}."
    return CaseResult(case.name, kind, case.description, trials, None, None, None, (msg,), False,
                      time.perf_counter() - t0, causes=(cause,), violating_trials=trials), [], None


def token_accounting(case: TokenCase, joint, proposals: str, opts):
    """Accounting of a token case: (check or None, noncentrality, violations, q_inconsistent).

    ``proposals="q"``: the joint law of (token, accepted) must be ``(min(p, q), (p - q)+)``.
    ``"own"``: only what holds for every proposal law (an accepted token has p > 0).
    ``q_inconsistent`` counts outcomes that proposals from ``q`` never give but another
    proposal law can (accepted where q = 0 < p, or drawn from the residual where 0 < p <= q).
    """
    v = case.vocab_size
    m = np.minimum(case.p, case.q)
    acc_counts, rej_counts = joint[:v], joint[v:]
    violations = []
    bad = int(acc_counts[case.p <= 0].sum())
    if bad:
        violations.append(f"{bad} tokens reported accepted that the target never emits (p = 0)")
    q_inconsistent = int(acc_counts[(m <= 0) & (case.p > 0)].sum()
                         + rej_counts[((case.p - m) <= 0) & (case.p > 0)].sum())
    if proposals == OWN:
        return None, 0.0, violations, q_inconsistent
    check, lam = gof_check("accounting", joint, np.concatenate([m, case.p - m]), **opts)
    check = dataclasses.replace(check, method="(token, accepted) against (min(p, q), (p - q)+): "
                                + check.method)
    if q_inconsistent:
        violations.append(f"{q_inconsistent} accept/reject outcomes that proposals drawn from q "
                          "never give (accepted where q = 0, or a residual draw where p <= q)")
    return check, lam, violations, q_inconsistent


def run_token_case(sampler, spec, case: TokenCase, rng, trials, opts, proposals: str = FROM_Q):
    t0 = time.perf_counter()
    clock = [0.0]
    try:
        counts, joint, violations, n_bad = tally_tokens(
            call_token(sampler, spec, case, rng, trials, clock), case.vocab_size)
    except Exception as exc:  # malformed output, or the sampler crashed: reported
        return failed_call(case, TOKEN, trials, t0, exc)
    violations += impossible_message(counts, case.p, "tokens")
    law_check, lam_law = gof_check("law", counts, case.p, **opts)
    bad_trials = n_bad + law_check.impossible
    acc_check, lam_acc, cycles, acc_viol, warnings = None, 0.0, None, [], []
    raw = None
    if joint is not None:
        acc_check, lam_acc, acc_viol, q_incons = token_accounting(case, joint, proposals, opts)
        raw = (joint, q_incons)
        beta = float(np.minimum(case.p, case.q).sum())
        rate = float(joint[: case.vocab_size].sum() / max(trials, 1))
        cycles = CycleAccounting(trials, 1.0, rate, 1.0, rate, 1.0, beta)
        se = math.sqrt(max(beta * (1 - beta), 1e-12) / trials)
        if rate < beta - max(4 * se, 1e-3):
            warnings.append(f"acceptance {rate:.4f} is below the exact rule's {beta:.4f} with "
                            "proposals from q: exact but slower (proposals from another law?)")
    result = CaseResult(case.name, TOKEN, case.description, trials, law_check, acc_check, cycles,
                        tuple(violations), True, time.perf_counter() - t0,
                        accounting_violations=tuple(acc_viol), warnings=tuple(warnings),
                        violating_trials=bad_trials, sampler_seconds=clock[0])
    return result, [lam_law, lam_acc], raw


def accepted_law_of(spec: SamplerSpec, sampler):
    """The accepted-count law a block sampler's reported counts are checked against.

    Returns
    -------
    (callable, str or None)
        ``law(target, draft, prefix, gamma)`` and the convention sentence for the report
        (``None`` for the default, token by token).
    """
    law = spec.accepted_law
    if law is None:
        own = getattr(sampler, "first_cycle_accepted_law", None)
        if callable(own):
            return own, (f"accepted counts checked against the accepted-count law of the "
                         f"sampler's rule ({sampler!r}: its first_cycle_accepted_law)")
        return tokenrule.TOKEN.first_cycle_accepted_law, None
    if isinstance(law, str):
        names = {"token": "token-by-token verification", "correct": "token-by-token verification",
                 "block": "block verification", "matching": "the matching rule"}
        return rules.accepted_law(law), (f"accepted counts checked against the accepted-count "
                                         f"law of {names.get(law, f'the rule {law!r}')} (declared)")
    return law, ("accepted counts checked against the declared accepted-count law "
                 f"({getattr(law, '__qualname__', repr(law))})")


def declared_accepted_law(law, gamma: int) -> np.ndarray:
    """A declared law as the ``(gamma + 1, 2)`` joint; ``ValueError`` naming ``accepted_law``."""
    arr = np.asarray(law, dtype=np.float64)
    if arr.shape == (gamma + 1,):
        arr = np.stack([arr, np.zeros_like(arr)], axis=1)
    if arr.shape != (gamma + 1, 2) or not np.isfinite(arr).all() or (arr < -1e-12).any() \
            or abs(arr.sum() - 1.0) > 1e-9:
        raise ValueError(f"accepted_law: must return a law of shape ({gamma + 1}, 2) or "
                         f"({gamma + 1},) that sums to 1 (got shape {arr.shape}, sum {arr.sum():.6g})")
    return np.clip(arr, 0.0, None)


def sequence_counts(case: BlockCase, rows: np.ndarray, lens: np.ndarray):
    """Counts of decoded sequences against the target's exact law of ``case.length`` tokens.

    Returns
    -------
    (law, counts, known)
        The exact law over the target's possible sequences ``(K,)``, their counts ``(K,)``,
        and per decode whether its sequence is one of them (``(n,)`` bool).
    """
    from specdec import models

    exact = models.sequence_law(case.target, tuple(case.prefix), case.length)
    keys = list(exact)
    vocab = int(case.target.vocab_size)
    law = np.array([exact[k] for k in keys])
    key_codes = encode_sequences(np.array([list(k) + [0] * (case.length - len(k)) for k in keys]),
                        np.array([len(k) for k in keys]), vocab)
    order = np.argsort(key_codes)
    codes = encode_sequences(rows, lens, vocab)
    pos = np.minimum(np.searchsorted(key_codes[order], codes), len(keys) - 1)
    known = key_codes[order][pos] == codes
    return law, np.bincount(order[pos[known]], minlength=len(keys)), known


def run_block_case(sampler, spec, case: BlockCase, rng, trials, opts):
    t0 = time.perf_counter()
    try:
        run = run_block_vectorised if spec.vectorised else run_block_scalar
        clock = [0.0]
        rows, lens, cycles, violations, bad_rows = run(sampler, case, rng, trials, clock)
    except Exception as exc:  # malformed output, or the sampler crashed: reported
        return failed_call(case, BLOCK, trials, t0, exc)
    target, draft, gamma = case.target, case.draft, case.gamma
    vocab, eos = int(target.vocab_size), target.eos
    law, counts, known = sequence_counts(case, rows, lens)
    outside = int((~known).sum())
    violations = list(violations)
    bad_rows = bad_rows | ~known
    if outside:
        shown = ", ".join(str(tuple(rows[i, : lens[i]].tolist())) for i in np.flatnonzero(~known)[:3])
        violations.append(f"{outside} decodes produced sequences of probability 0 under the "
                          f"target (e.g. {shown})")
    law_check, lam_law = gof_check("law", np.append(counts, outside), np.append(law / law.sum(), 0.0),
                              **opts)
    acc_check, lam_acc, summary, acc_viol, warnings, conventions = None, 0.0, None, [], [], []
    raw = None
    if cycles is not None and cycles.n_emitted.size:
        e = cycles.n_emitted
        bad = (e < 1) | (e > gamma + 1)
        if bad.any():
            violations.append(f"cycles must emit 1 to gamma + 1 = {gamma + 1} tokens "
                              f"({int(bad.sum()):,} cycles)")
            bad_rows[np.unique(cycles.sequence[bad])] = True
        law_fn, law_text = accepted_law_of(spec, sampler)
        joint = declared_accepted_law(law_fn(target, draft, tuple(case.prefix), gamma), gamma)
        if law_text is not None and cycles.n_accepted is not None:
            conventions.append(law_text)
        k_law = joint.sum(axis=1)
        exact_e = float(np.arange(gamma + 1) @ k_law) + 1.0 - float(joint[:, 1].sum())
        exact_a = float(np.arange(gamma + 1) @ k_law)
        acc, prop = cycles.n_accepted, cycles.n_proposed
        first = cycles.first
        if acc is not None:
            bad = (acc < 0) | (acc > prop) | (prop > gamma)
            if bad.any():
                acc_viol.append(f"need 0 <= accepted <= proposed <= gamma = {gamma} "
                                f"({int(bad.sum()):,} cycles)")
                bad_rows[np.unique(cycles.sequence[bad])] = True
            ends = cycles.ends_eos if cycles.ends_eos is not None else np.full(e.size, eos is not None)
            counted_eos = ends & (acc == e)
            bad = (acc != e - 1) & ~counted_eos
            if bad.any():
                acc_viol.append("the accepted proposals are the tokens emitted before the "
                                "corrected or bonus token, so accepted = emitted - 1 (or = emitted "
                                f"when the cycle ends at an accepted end-of-sequence) "
                                f"({int(bad.sum()):,} cycles)")
                bad_rows[np.unique(cycles.sequence[bad])] = True
            convention = spec.accepted_eos
            if eos is not None:
                if convention == AUTO:
                    convention = COUNTED if counted_eos.any() else NOT_COUNTED
                    how = "detected"
                else:
                    how = "declared"
                conventions.append(f"an accepted end-of-sequence is "
                                   f"{'counted' if convention == COUNTED else 'not counted'} "
                                   f"as accepted ({how})")
                if convention == NOT_COUNTED and counted_eos.any():
                    acc_viol.append("cycles that end at an accepted end-of-sequence count it as "
                                    "accepted, against the declared convention accepted_eos="
                                    f"'not_counted' ({int(counted_eos.sum()):,} cycles)")
                    bad_rows[np.unique(cycles.sequence[counted_eos])] = True
                if convention == NOT_COUNTED:   # reported = accepted - [last accepted is EOS]
                    k_law = joint[:, 0].copy()
                    k_law[:-1] += joint[1:, 1]
            if spec.proposals == OWN:
                conventions.append("proposals from the sampler's own law (declared): the "
                                   "accepted counts are checked by the identities only")
            else:
                k_first = np.bincount(np.clip(acc[first], 0, gamma), minlength=gamma + 1)
                acc_check, lam_acc = gof_check("accounting", k_first, k_law, **opts)
                acc_check = dataclasses.replace(
                    acc_check, method="accepted proposals in the first cycle: " + acc_check.method)
            first_acc = float(acc[first].mean())
            se = float(np.sqrt(max(k_law @ np.arange(gamma + 1) ** 2 - exact_a**2, 1e-12)
                               / max(int(first.sum()), 1)))
            if first_acc < float(k_law @ np.arange(gamma + 1)) - max(4 * se, 1e-3):
                warnings.append(f"first-cycle accepted proposals {first_acc:.3f} below the exact "
                                f"rule's {exact_a:.3f}: exact but slower")
        summary = CycleAccounting(
            int(e.size), float(e.mean()),
            float(acc.sum() / prop.sum()) if acc is not None and prop.sum() else None,
            float(e[first].mean()),
            float(acc[first].mean()) if acc is not None else None,
            exact_e, exact_a)
    result = CaseResult(case.name, BLOCK, case.description, trials, law_check, acc_check, summary,
                        tuple(violations), True, time.perf_counter() - t0,
                        accounting_violations=tuple(acc_viol), warnings=tuple(warnings),
                        conventions=tuple(conventions), violating_trials=int(bad_rows.sum()),
                        sampler_seconds=clock[0])
    return result, [lam_law, lam_acc], raw


# --------------------------------------------------------------------------------------
# Running a batched case
# --------------------------------------------------------------------------------------


def run_batch_case(sampler, spec, case, rng, trials, opts):
    """Replicate the case's requests ``trials`` times into large batches and check each."""
    t0 = time.perf_counter()
    clock = [0.0]
    R, V = case.n_requests, case.vocab_size
    n_draft = case.n_draft
    p_laws, q_laws = case.target_laws(), case.draft_laws()
    width = int(n_draft.max()) + 1
    # counts[r][j]: tokens emitted at position j by request r among trials reaching j
    counts = [np.zeros((k + 1, V), dtype=np.int64) for k in n_draft]
    violations: dict[str, int] = {}
    bad_total = 0
    greedy_out = {}
    per_call = max(1, min(trials, 32768 // max(R, 1)))
    tl_block = np.concatenate([np.concatenate([case.target_logits[r]]) for r in range(R)])
    done = 0

    def violation(msg, k):
        violations[msg] = violations.get(msg, 0) + int(k)

    try:
        while done < trials:
            t = min(per_call, trials - done)
            nd = np.tile(n_draft, t)                                       # (t R,)
            # proposals, request by request and trial by trial
            q_rows = np.concatenate([q_laws[r] for r in range(R)]) if n_draft.sum() else \
                np.zeros((0, V))
            q_all = np.tile(q_rows, (t, 1))
            x = verify.draw(q_all, rng.random(q_all.shape[0])) if q_all.shape[0] else \
                np.zeros(0, dtype=np.int64)
            target_logits = np.tile(tl_block, (t, 1))
            settings = {k: np.tile(v, t) for k, v in case.settings.items()}
            t1 = time.perf_counter()
            out = sampler(target_logits.copy(), q_all.copy(), x.copy(), nd.copy(), settings, rng)
            clock[0] += time.perf_counter() - t1
            tokens = np.asarray(getattr(out, "tokens", out[0] if isinstance(out, tuple) else out))
            n_emit = np.asarray(getattr(out, "n_emitted", out[1] if isinstance(out, tuple) else None))
            if tokens.ndim != 2 or tokens.shape[0] != t * R or tokens.dtype.kind not in "iu":
                raise Malformed(f"tokens: expected an integer array with {t * R} rows, got shape "
                                 f"{tokens.shape} dtype {tokens.dtype}")
            if n_emit.shape != (t * R,) or n_emit.dtype.kind not in "iu":
                raise Malformed(f"n_emitted: expected ({t * R},) integers, got {n_emit.shape}")
            if tokens.shape[1] < width:
                tokens = np.pad(tokens, ((0, 0), (0, width - tokens.shape[1])), constant_values=-1)
            bad = (n_emit < 1) | (n_emit > nd + 1)
            if bad.any():
                violation("requests must emit 1 to n_draft + 1 tokens", bad.sum())
            n_emit = np.clip(n_emit, 1, nd + 1)
            pos = np.arange(width)[None, :]
            body = pos < n_emit[:, None]
            if ((tokens < 0) | (tokens >= V))[body].any():
                raise Malformed(f"tokens: ids outside the vocabulary 0..{V - 1}")
            # accepted prefix: the emitted tokens before the last must be the proposals
            starts = np.concatenate([[0], np.cumsum(nd)[:-1]])
            prop = np.full((t * R, width), -1, dtype=np.int64)
            rows_i = np.repeat(np.arange(t * R), nd)
            cols_i = np.arange(nd.sum()) - np.repeat(starts, nd)
            prop[rows_i, cols_i] = x
            prefix_bad = ((tokens != prop) & (pos < (n_emit - 1)[:, None])).any(axis=1)
            if prefix_bad.any():
                violation("emitted tokens before the last must be the accepted proposals",
                          prefix_bad.sum())
            acc_rep = getattr(out, "n_accepted", None)
            if acc_rep is not None and (np.asarray(acc_rep) != n_emit - 1).any():
                violation("reported accepted counts differ from emitted - 1",
                          (np.asarray(acc_rep) != n_emit - 1).sum())
            bad_rows = bad | prefix_bad
            req = np.tile(np.arange(R), t)
            for r in range(R):
                sel = req == r
                tk, ne, pr = tokens[sel], n_emit[sel], prop[sel]
                if case.greedy[r]:
                    # deterministic: accept while the proposal is the target's arg-max
                    amax = np.argmax(p_laws[r], axis=1)
                    match = pr[:, : n_draft[r]] == amax[None, : n_draft[r]]
                    k = np.where(match.all(axis=1), n_draft[r], np.argmin(match, axis=1)) \
                        if n_draft[r] else np.zeros(sel.sum(), dtype=np.int64)
                    wrong = (ne != k + 1) | (tk[np.arange(tk.shape[0]), k] != amax[k])
                    if wrong.any():
                        violation("greedy requests must emit the target's arg-max along the "
                                  "accepted prefix", wrong.sum())
                        bad_rows[np.flatnonzero(sel)[wrong]] = True
                    greedy_out[r] = True
                for j in range(n_draft[r] + 1):
                    reached = ne > j
                    if reached.any():
                        counts[r][j] += np.bincount(tk[reached, j], minlength=V)[:V]
            bad_total += int(bad_rows.sum())
            done += t
    except Exception as exc:  # malformed output, or the sampler crashed: reported
        return failed_call(case, BATCH, trials, t0, exc)
    # the law: each request's emitted token at each reached position follows its own law;
    # conditionally on the positions reached, the per-(request, position) Pearson statistics
    # are independent, so their sum is chi-square with the summed degrees of freedom
    stat, dof, lam, impossible = 0.0, 0, 0.0, 0
    worst = None
    for r in range(R):
        for j in range(n_draft[r] + 1):
            c, lw = counts[r][j], p_laws[r][j]
            if c.sum() == 0:
                continue
            chk, lam1 = gof_check("law", c, lw, **opts)
            stat += chk.statistic
            dof += chk.dof
            impossible += chk.impossible
            lam += lam1 * chk.trials / max(trials, 1)
            if j == 0 and (worst is None or (chk.tv_low, chk.tv) > (worst.tv_low, worst.tv)):
                worst = chk
    viol = [f"{m} ({k:,} requests)" for m, k in violations.items()]
    if impossible:
        viol.append(f"{impossible} tokens of probability 0 under their request's target law")
    from scipy import stats as sps

    pvalue = float(sps.chi2.sf(stat, dof)) if dof else 1.0
    law = dataclasses.replace(
        worst, method=f"per-request, per-position laws ({R} requests, "
                      f"{int((n_draft + 1).sum())} positions): summed Pearson chi-square",
        trials=trials, statistic=stat, dof=dof, pvalue=pvalue, impossible=impossible)
    res = CaseResult(case.name, BATCH, case.description, trials, law, None, None, tuple(viol),
                     True, time.perf_counter() - t0, violating_trials=bad_total + impossible,
                     sampler_seconds=clock[0],
                     conventions=("greedy requests checked exactly (deterministic)",)
                     if greedy_out else ())
    return res, [lam], None


def case_rng(seed: int, name: str) -> np.random.Generator:
    """Independent stream per case: SeedSequence(seed) with a spawn key from the case name.

    The stream of a case does not depend on which other cases run, or in what order.
    """
    key = zlib.crc32(name.encode("utf-8"))
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(key,)))


def resolve_cases(kind: str, cases) -> tuple:
    standard = {TOKEN: token_cases, BLOCK: block_cases, BATCH: batch_cases}[kind]()
    cls = {TOKEN: TokenCase, BLOCK: BlockCase, BATCH: BatchCase}[kind]
    if cases is None:
        return standard
    if isinstance(cases, (str, TokenCase, BlockCase)):
        cases = [cases]
    by_name = {c.name: c for c in standard + (rule_cases() if kind == BLOCK else ())}
    out = []
    for c in cases:
        if isinstance(c, str):
            if c not in by_name:
                raise ValueError(f"cases: unknown {kind} case {c!r} (known: {', '.join(by_name)})")
            out.append(by_name[c])
        elif isinstance(c, cls):
            out.append(c)
        else:
            raise ValueError(f"cases: expected {kind} case names or "
                             f"{cls.__name__} objects (got {c!r})")
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise ValueError(f"cases: names must be unique (got {names})")
    if not out:
        raise ValueError("cases: must not be empty")
    return tuple(out)


def run_case(sampler, case, *, spec: SamplerSpec | None = None, seed: int = 0,
             trials: int | None = None, min_expected: float = 10.0, max_bins: int | None = None,
             confidence: float = 0.95, proposals: str | None = None):
    """Run one case; no multiple-testing adjustment (see :func:`run_battery`).

    Returns
    -------
    (CaseResult, list of float, raw)
        The unadjusted result, the per-trial noncentralities estimated for its checks
        (law, accounting), used for the trials-needed estimate, and the raw accounting
        observations of a token case (None otherwise).
    """
    spec = spec or describe_sampler(sampler)
    kind = BLOCK if isinstance(case, BlockCase) else BATCH if isinstance(case, BatchCase) else TOKEN
    if kind != spec.kind:
        raise ValueError(f"cases: a {kind} case cannot test a {spec.kind} sampler")
    if trials is None:
        level = 1e-3 / 22
        trials = plan.trials_for_tv(plan.case_laws(case), plan.DEFAULT_RESOLUTION[
            plan.convention_key(spec)], level, 0.9, min_expected=min_expected)
    trials = laws.check_int(trials, "trials")
    opts = dict(min_expected=min_expected, max_bins=max_bins, confidence=confidence)
    rng = case_rng(seed, case.name)
    if kind == TOKEN:
        mode = proposals or (OWN if spec.proposals == OWN else FROM_Q)
        return run_token_case(sampler, spec, case, rng, trials, opts, mode)
    if kind == BATCH:
        return run_batch_case(sampler, spec, case, rng, trials, opts)
    return run_block_case(sampler, spec, case, rng, trials, opts)
