"""Running cases and batteries: calling the sampler, counting outcomes, testing them."""

from __future__ import annotations

import dataclasses
import math
import time
import zlib
from dataclasses import dataclass

import numpy as np

from specdec import laws, rules, stats, verify
from specdec import tokenrule

from . import plan
from .cases import BatchCase, BlockCase, TokenCase, batch_cases, block_cases, rule_cases, token_cases
from .conventions import (AUTO, BATCH, BLOCK, CHUNK, COUNTED, FROM_Q, LOGITS, NOT_COUNTED, OWN,
                          TOKEN, SamplerSpec, describe_sampler)
from .report import CaseResult, Check, CycleAccounting, Report

__all__ = ["run_case", "run_battery", "assert_conforms"]


def _gof(name: str, counts: np.ndarray, law: np.ndarray, *, min_expected: float, max_bins: int,
         confidence: float) -> tuple[Check, float]:
    """Pooled chi-square + TV interval; returns the check and the per-trial noncentrality."""
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    if max_bins is None:                       # the number of bins grows with the trials
        max_bins = stats.bins_for_trials(max(n, 1))
    res = stats.pooled_chisquare(counts, law, min_expected=min_expected, max_bins=max_bins)
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


# --------------------------------------------------------------------------------------
# Running a token case
# --------------------------------------------------------------------------------------


class _Malformed(Exception):
    """The sampler returned something the kit cannot read (a conformance failure)."""


def _as_token_array(x, n: int, vocab: int, what: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.shape != (n,):
        raise _Malformed(f"{what}: expected shape ({n},), got {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise _Malformed(f"{what}: expected integer token ids, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _as_flags(x, n: int) -> np.ndarray:
    arr = np.asarray(x)
    if arr.shape != (n,) or arr.dtype.kind not in "bui":
        raise _Malformed(f"accepted flags: expected a ({n},) boolean array, got "
                         f"shape {arr.shape} dtype {arr.dtype}")
    if arr.dtype.kind != "b" and not np.isin(arr, (0, 1)).all():
        raise _Malformed("accepted flags: must be booleans (or 0/1)")
    return arr.astype(bool)


def _call_token(sampler, spec: SamplerSpec, case: TokenCase, rng: np.random.Generator,
                trials: int, clock: list):
    """Yield the sampler's outputs in chunks: (tokens (k,), accepted flags (k,) or None).

    ``clock[0]`` accumulates the seconds spent inside the sampler.
    """
    if spec.inputs == LOGITS:
        args = (case.target_logits.copy(), case.draft_logits.copy())
        kwargs = case.settings
    else:
        args = (case.p.copy(), case.q.copy())
        kwargs = {}
    reported = None
    if spec.vectorised:
        done = 0
        while done < trials:
            n = min(CHUNK, trials - done)
            t = time.perf_counter()
            out = sampler(*args, rng, n, **kwargs)
            clock[0] += time.perf_counter() - t
            has_flags = isinstance(out, tuple)
            if reported is None:
                reported = has_flags
            elif reported != has_flags:
                raise _Malformed("return value: switches between tokens and (tokens, accepted)")
            if has_flags:
                if len(out) != 2:
                    raise _Malformed(f"return value: expected tokens or (tokens, accepted), "
                                     f"got a tuple of {len(out)}")
                yield _as_token_array(out[0], n, case.vocab_size, "tokens"), _as_flags(out[1], n)
            else:
                yield _as_token_array(out, n, case.vocab_size, "tokens"), None
            done += n
        return
    done = 0
    while done < trials:
        k = min(4096, trials - done)
        tokens = np.empty(k, dtype=np.int64)
        flags = np.empty(k, dtype=bool)
        for i in range(k):
            t = time.perf_counter()
            out = sampler(*args, rng, **kwargs)
            clock[0] += time.perf_counter() - t
            has_flags = isinstance(out, tuple)
            if reported is None:
                reported = has_flags
            if reported:
                if not (isinstance(out, tuple) and len(out) == 2):
                    raise _Malformed(f"return value {done + i}: expected (token, accepted), "
                                     f"got {out!r}")
                tok, acc = out
                if not isinstance(acc, (bool, np.bool_)) and acc not in (0, 1):
                    raise _Malformed(f"return value {done + i}: accepted flag must be a bool, "
                                     f"got {acc!r}")
                flags[i] = bool(acc)
            else:
                tok = out
            if isinstance(tok, (bool, np.bool_)) or not isinstance(tok, (int, np.integer)):
                raise _Malformed(f"return value {done + i}: expected an integer token id, "
                                 f"got {tok!r}")
            tokens[i] = tok
        yield tokens, (flags if reported else None)
        done += k


def _tally_tokens(chunks, vocab: int):
    """Counts over chunks: (token counts (V,), joint counts (2V,) or None, violations, bad)."""
    counts = np.zeros(vocab, dtype=np.int64)
    joint = None
    n_bad, examples = 0, set()
    for tokens, flags in chunks:
        out = (tokens < 0) | (tokens >= vocab)
        if out.any():
            n_bad += int(out.sum())
            examples.update(np.unique(tokens[out])[:5].tolist())
        ok = tokens[~out]
        counts += np.bincount(ok, minlength=vocab)
        if flags is not None:
            if joint is None:
                joint = np.zeros(2 * vocab, dtype=np.int64)
            joint += np.bincount(ok + vocab * (~flags[~out]), minlength=2 * vocab)
    violations = []
    if n_bad:
        shown = ", ".join(map(str, sorted(examples)[:5]))
        violations.append(f"{n_bad} token ids outside the vocabulary 0..{vocab - 1} (e.g. {shown})")
    return counts, joint, violations, n_bad


def _impossible_message(counts: np.ndarray, law: np.ndarray, what: str) -> list[str]:
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


def _token_accounting(case: TokenCase, joint, proposals: str, opts):
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
    check, lam = _gof("accounting", joint, np.concatenate([m, case.p - m]), **opts)
    check = dataclasses.replace(check, method="(token, accepted) against (min(p, q), (p - q)+): "
                                + check.method)
    if q_inconsistent:
        violations.append(f"{q_inconsistent} accept/reject outcomes that proposals drawn from q "
                          "never give (accepted where q = 0, or a residual draw where p <= q)")
    return check, lam, violations, q_inconsistent


def _token_case(sampler, spec, case: TokenCase, rng, trials, opts, proposals: str = FROM_Q):
    t0 = time.perf_counter()
    clock = [0.0]
    try:
        counts, joint, violations, n_bad = _tally_tokens(
            _call_token(sampler, spec, case, rng, trials, clock), case.vocab_size)
    except _Malformed as exc:
        return CaseResult(case.name, TOKEN, case.description, trials, None, None, None,
                          (f"malformed output: {exc}",), False, time.perf_counter() - t0,
                          causes=(f"The sampler's output could not be read ({exc}).",),
                          violating_trials=trials), [], None
    except Exception as exc:  # the sampler crashed: a conformance failure, reported
        return CaseResult(case.name, TOKEN, case.description, trials, None, None, None,
                          (f"raised {type(exc).__name__}: {exc}",), False,
                          time.perf_counter() - t0,
                          causes=(f"The sampler raised {type(exc).__name__}: {exc}.",),
                          violating_trials=trials), [], None
    violations += _impossible_message(counts, case.p, "tokens")
    law_check, lam_law = _gof("law", counts, case.p, **opts)
    bad_trials = n_bad + law_check.impossible
    acc_check, lam_acc, cycles, acc_viol, warnings = None, 0.0, None, [], []
    raw = None
    if joint is not None:
        acc_check, lam_acc, acc_viol, q_incons = _token_accounting(case, joint, proposals, opts)
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


# --------------------------------------------------------------------------------------
# Running a block case
# --------------------------------------------------------------------------------------


def _encode(rows: np.ndarray, lengths: np.ndarray, vocab: int) -> np.ndarray:
    """Injective integer code of variable-length token sequences (rows padded arbitrarily)."""
    width = rows.shape[1]
    weights = (vocab + 1) ** np.arange(width, dtype=np.int64)
    digits = np.where(np.arange(width)[None, :] < lengths[:, None], rows + 1, 0)
    return digits.astype(np.int64) @ weights


def _read_cycle(out) -> tuple[list[int], int | None, int | None]:
    """(emitted tokens, reported accepted count or None, reported proposed count or None)."""
    if hasattr(out, "emitted"):
        emitted = out.emitted
        acc = getattr(out, "n_accepted", getattr(out, "accepted", None))
        prop = getattr(out, "n_proposed", getattr(out, "proposed", None))
    elif isinstance(out, tuple) and len(out) == 3 and not isinstance(out[0], (int, np.integer)):
        emitted, acc, prop = out
    else:
        emitted, acc, prop = out, None, None
    try:
        toks = list(emitted)
    except TypeError:
        raise _Malformed(f"emitted: expected a sequence of token ids, got {emitted!r}") from None
    for t in toks:
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
            raise _Malformed(f"emitted: expected integer token ids, got {t!r}")
    counts = []
    for name, v in (("accepted", acc), ("proposed", prop)):
        if isinstance(v, (list, tuple, np.ndarray)):
            v = len(v)                                  # a list of accepted / proposed tokens
        if v is not None and (isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer))):
            raise _Malformed(f"{name}: expected a count, got {v!r}")
        counts.append(None if v is None else int(v))
    return [int(t) for t in toks], counts[0], counts[1]


@dataclass
class _Cycles:
    """Per-cycle records of a block run (flattened over decodes)."""

    n_emitted: np.ndarray          # (C,) tokens emitted by each cycle
    n_accepted: np.ndarray | None  # (C,) as reported, or None
    n_proposed: np.ndarray | None  # (C,)
    ends_eos: np.ndarray | None    # (C,) last emitted token is EOS (None: unknown)
    first: np.ndarray              # (C,) bool, first cycle of its decode
    sequence: np.ndarray           # (C,) int, the decode each cycle belongs to


def _run_block_scalar(sampler, case: BlockCase, rng, trials: int, clock: list):
    """Decode ``trials`` times with a one-cycle sampler; (sequences, cycles, violations)."""
    target, draft = case.target, case.draft
    vocab, eos = int(target.vocab_size), target.eos
    gamma, length, prefix0 = case.gamma, case.length, tuple(case.prefix)
    reset = getattr(sampler, "reset", None)
    violations: dict[str, int] = {}
    seqs: list[tuple] = []
    rec_emit, rec_acc, rec_prop, rec_eos, rec_first, rec_seq = [], [], [], [], [], []
    reports = True
    bad = np.zeros(trials, dtype=bool)

    def violation(msg):
        violations[msg] = violations.get(msg, 0) + 1
        bad[i] = True

    for i in range(trials):
        if callable(reset):
            reset()
        out: list[int] = []
        first = True
        while len(out) < length and not (eos is not None and eos in out):
            t = time.perf_counter()
            res = sampler(target, draft, prefix0 + tuple(out), gamma, rng)
            clock[0] += time.perf_counter() - t
            emitted, acc, prop = _read_cycle(res)
            if not emitted:
                violation("a cycle emitted no token (a cycle emits at least one)")
                break
            if any(t < 0 or t >= vocab for t in emitted):
                violation(f"token ids outside the vocabulary 0..{vocab - 1}")
                break
            if eos is not None and eos in emitted[:-1]:
                violation("tokens emitted after end-of-sequence within a cycle")
            reports = reports and acc is not None and prop is not None
            rec_emit.append(len(emitted))
            rec_acc.append(-1 if acc is None else acc)
            rec_prop.append(-1 if prop is None else prop)
            rec_eos.append(eos is not None and emitted[-1] == eos)
            rec_first.append(first)
            rec_seq.append(i)
            first = False
            out.extend(emitted)
        seq = out[:length]
        if eos is not None and eos in seq:
            seq = seq[: seq.index(eos) + 1]
        seqs.append(seq)
    rows = np.zeros((trials, length), dtype=np.int64)
    lens = np.array([len(x) for x in seqs], dtype=np.int64)
    for i, x in enumerate(seqs):
        rows[i, : len(x)] = x
    cycles = _Cycles(np.array(rec_emit, dtype=np.int64),
                     np.array(rec_acc, dtype=np.int64) if reports else None,
                     np.array(rec_prop, dtype=np.int64) if reports else None,
                     np.array(rec_eos, dtype=bool), np.array(rec_first, dtype=bool),
                     np.array(rec_seq, dtype=np.int64))
    return rows, lens, cycles, [f"{m} ({k:,} cycles)" for m, k in violations.items()], bad


def _run_block_vectorised(sampler, case: BlockCase, rng, trials: int, clock: list):
    """Call a vectorised block sampler in chunks; (sequences, cycles, violations, bad rows).

    A row's tokens are the entries before its length (``n_tokens``, else the first
    ``-1``); any of them after the row's first end-of-sequence is a violation (a decode
    ends at end-of-sequence), reported and counted, never silently cut.
    """
    target = case.target
    vocab, eos, length = int(target.vocab_size), target.eos, case.length
    rows_parts, lens_parts, bad_parts = [], [], []
    parts: dict[str, list] = {k: [] for k in ("n_emitted", "n_accepted", "n_proposed", "ends_eos",
                                              "first", "sequence")}
    has_acc = has_eos = None
    past_eos = 0
    done = 0
    while done < trials:
        n = min(CHUNK, trials - done)
        t = time.perf_counter()
        out = sampler(case.target, case.draft, tuple(case.prefix), case.gamma, length, rng, n)
        clock[0] += time.perf_counter() - t
        tokens = np.asarray(getattr(out, "tokens", out))
        if tokens.shape != (n, length) or tokens.dtype.kind not in "iu":
            raise _Malformed(f"tokens: expected an integer array of shape ({n}, {length}), got "
                             f"shape {tokens.shape} dtype {tokens.dtype}")
        n_tok = getattr(out, "n_tokens", None)
        if n_tok is None:
            pad = tokens < 0
            n_tok = np.where(pad.any(axis=1), np.argmax(pad, axis=1), length)
        n_tok = np.asarray(n_tok, dtype=np.int64)
        body = np.arange(length)[None, :] < n_tok[:, None]
        if ((tokens >= vocab) & body).any() or ((tokens < 0) & body).any():
            raise _Malformed(f"tokens: ids outside the vocabulary 0..{vocab - 1}")
        bad = np.zeros(n, dtype=bool)
        if eos is not None:
            hit = (tokens == eos) & body
            first_eos = np.where(hit.any(axis=1), np.argmax(hit, axis=1) + 1, length)
            bad = n_tok > first_eos                      # tokens emitted after end-of-sequence
            past_eos += int(bad.sum())
            n_tok = np.minimum(n_tok, first_eos)
        rows_parts.append(tokens.astype(np.int64))
        lens_parts.append(n_tok)
        bad_parts.append(bad)
        if all(hasattr(out, a) for a in ("sequence", "n_emitted")):
            seq_id = np.asarray(out.sequence, dtype=np.int64)
            first = np.zeros(seq_id.size, dtype=bool)
            first[np.unique(seq_id, return_index=True)[1]] = True
            parts["first"].append(first)
            parts["sequence"].append(seq_id + done)
            parts["n_emitted"].append(np.asarray(out.n_emitted, dtype=np.int64))
            acc_ok = hasattr(out, "n_accepted") and hasattr(out, "n_proposed")
            has_acc = acc_ok if has_acc is None else (has_acc and acc_ok)
            if acc_ok:
                parts["n_accepted"].append(np.asarray(out.n_accepted, dtype=np.int64))
                parts["n_proposed"].append(np.asarray(out.n_proposed, dtype=np.int64))
            eos_ok = hasattr(out, "hit_eos")
            has_eos = eos_ok if has_eos is None else (has_eos and eos_ok)
            if eos_ok:
                parts["ends_eos"].append(np.asarray(out.hit_eos, dtype=bool))
        done += n
    rows, lens, bad = np.concatenate(rows_parts), np.concatenate(lens_parts), np.concatenate(bad_parts)
    violations = [f"tokens emitted after end-of-sequence ({past_eos:,} decodes)"] if past_eos else []
    if not parts["n_emitted"]:
        return rows, lens, None, violations, bad
    cat = {k: (np.concatenate(v) if v else None) for k, v in parts.items()}
    cycles = _Cycles(cat["n_emitted"], cat["n_accepted"] if has_acc else None,
                     cat["n_proposed"] if has_acc else None,
                     cat["ends_eos"] if has_eos else None, cat["first"], cat["sequence"])
    return rows, lens, cycles, violations, bad


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


def _check_accepted_law(law, gamma: int) -> np.ndarray:
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
    key_codes = _encode(np.array([list(k) + [0] * (case.length - len(k)) for k in keys]),
                        np.array([len(k) for k in keys]), vocab)
    order = np.argsort(key_codes)
    codes = _encode(rows, lens, vocab)
    pos = np.minimum(np.searchsorted(key_codes[order], codes), len(keys) - 1)
    known = key_codes[order][pos] == codes
    return law, np.bincount(order[pos[known]], minlength=len(keys)), known


def _block_case(sampler, spec, case: BlockCase, rng, trials, opts):
    t0 = time.perf_counter()

    def failed(msg, cause):
        return CaseResult(case.name, BLOCK, case.description, trials, None, None, None, (msg,),
                          False, time.perf_counter() - t0, causes=(cause,),
                          violating_trials=trials), [], None

    try:
        run = _run_block_vectorised if spec.vectorised else _run_block_scalar
        clock = [0.0]
        rows, lens, cycles, violations, bad_rows = run(sampler, case, rng, trials, clock)
    except _Malformed as exc:
        return failed(f"malformed output: {exc}", f"The sampler's output could not be read ({exc}).")
    except Exception as exc:  # the sampler crashed: a conformance failure, reported
        return failed(f"raised {type(exc).__name__}: {exc}",
                      f"The sampler raised {type(exc).__name__}: {exc}.")
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
    law_check, lam_law = _gof("law", np.append(counts, outside), np.append(law / law.sum(), 0.0),
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
        joint = _check_accepted_law(law_fn(target, draft, tuple(case.prefix), gamma), gamma)
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
                acc_check, lam_acc = _gof("accounting", k_first, k_law, **opts)
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


def _batch_case(sampler, spec, case, rng, trials, opts):
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
                raise _Malformed(f"tokens: expected an integer array with {t * R} rows, got shape "
                                 f"{tokens.shape} dtype {tokens.dtype}")
            if n_emit.shape != (t * R,) or n_emit.dtype.kind not in "iu":
                raise _Malformed(f"n_emitted: expected ({t * R},) integers, got {n_emit.shape}")
            if tokens.shape[1] < width:
                tokens = np.pad(tokens, ((0, 0), (0, width - tokens.shape[1])), constant_values=-1)
            bad = (n_emit < 1) | (n_emit > nd + 1)
            if bad.any():
                violation("requests must emit 1 to n_draft + 1 tokens", bad.sum())
            n_emit = np.clip(n_emit, 1, nd + 1)
            pos = np.arange(width)[None, :]
            body = pos < n_emit[:, None]
            if ((tokens < 0) | (tokens >= V))[body].any():
                raise _Malformed(f"tokens: ids outside the vocabulary 0..{V - 1}")
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
    except _Malformed as exc:
        return CaseResult(case.name, BATCH, case.description, trials, None, None, None,
                          (f"malformed output: {exc}",), False, time.perf_counter() - t0,
                          causes=(f"The sampler's output could not be read ({exc}).",),
                          violating_trials=trials), [], None
    except Exception as exc:  # the sampler crashed: a conformance failure, reported
        return CaseResult(case.name, BATCH, case.description, trials, None, None, None,
                          (f"raised {type(exc).__name__}: {exc}",), False,
                          time.perf_counter() - t0,
                          causes=(f"The sampler raised {type(exc).__name__}: {exc}.",),
                          violating_trials=trials), [], None
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
            chk, lam1 = _gof("law", c, lw, **opts)
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


# --------------------------------------------------------------------------------------
# The battery
# --------------------------------------------------------------------------------------


def _case_rng(seed: int, name: str) -> np.random.Generator:
    """Independent stream per case: SeedSequence(seed) with a spawn key from the case name.

    The stream of a case does not depend on which other cases run, or in what order.
    """
    key = zlib.crc32(name.encode("utf-8"))
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(key,)))


def _resolve_cases(kind: str, cases) -> tuple:
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
        trials = plan.trials_for_tv(plan.check_laws(case), plan.DEFAULT_RESOLUTION[
            plan.convention_key(spec)], level, 0.9, min_expected=min_expected)
    trials = laws.check_int(trials, "trials")
    opts = dict(min_expected=min_expected, max_bins=max_bins, confidence=confidence)
    rng = _case_rng(seed, case.name)
    if kind == TOKEN:
        mode = proposals or (OWN if spec.proposals == OWN else FROM_Q)
        return _token_case(sampler, spec, case, rng, trials, opts, mode)
    if kind == BATCH:
        return _batch_case(sampler, spec, case, rng, trials, opts)
    return _block_case(sampler, spec, case, rng, trials, opts)


def _causes(res: CaseResult, kind: str) -> tuple[str, ...]:
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
                   f"{law.statistic:.1f} on {law.dof} dof, Holm-adjusted p = "
                   f"{_fmt_p(law.adjusted_pvalue)}; TV found {law.tv:.4f} "
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
                   f"{acc.dof} dof, Holm-adjusted p = {_fmt_p(acc.adjusted_pvalue)}). Likely "
                   f"cause: {why}.")
    return tuple(out)


def _fmt_p(x: float) -> str:
    return f"{x:.2g}" if x >= 1e-3 else f"{x:.1e}"


def _check_probability(x, name: str, *, upper: float = 1.0, closed: bool = False) -> float:
    ok = isinstance(x, (int, float, np.floating)) and not isinstance(x, bool) and np.isfinite(x)
    if not ok or not (0.0 < x < upper or (closed and x == upper)):
        bracket = "]" if closed else ")"
        raise ValueError(f"{name}: must be a number in (0, {upper:g}{bracket} (got {x!r})")
    return float(x)


def run_battery(sampler, *, kind: str | None = None, vectorised: bool | None = None,
                inputs: str | None = None, proposals: str | None = None,
                accepted_eos: str | None = None, accepted_law=None, cases=None, seed: int = 0,
                trials=None, resolution: float | None = None, budget: float | None = None,
                false_alarm: float = 1e-3, power: float = 0.9,
                confidence: float = 0.95, min_expected: float = 10.0,
                max_bins: int | None = None) -> Report:
    """Run the conformance battery on a sampler.

    Parameters
    ----------
    sampler : callable
        Token or block sampler (see the module docstring and :func:`describe_sampler`).
    kind, vectorised, inputs : optional
        Calling convention, when neither a mark nor the signature says it.
    proposals, accepted_eos : optional
        Accounting conventions (see :class:`specdec.conformance.SamplerSpec`), when the
        mark does not say them; by default they are detected from the data.
    accepted_law : str or callable, optional
        Block samplers: the accepted-count law of the sampler's verification rule, which
        its reported counts must follow (``"token"``, ``"block"``, ``"matching"``, or a
        callable ``law(target, draft, prefix, gamma)``; see
        :class:`specdec.conformance.SamplerSpec`). Default: the sampler's own
        ``first_cycle_accepted_law`` method if it has one, else token by token.
    cases : sequence of str or case objects, optional
        Subset (by name) or custom cases; default: the standard battery of the kind
        (:func:`token_cases` or :func:`block_cases`).
    seed : int
        Master seed, >= 0. Case ``c`` draws from ``SeedSequence(seed, spawn_key=(crc32(c),))``,
        so a report is reproducible and a case's draws do not depend on the others.
    trials : int or dict, optional
        Repetitions per case (token steps, or decodes of ``length`` tokens), for every
        case or by case name. Default: as many as the resolution asks for
        (:mod:`specdec.conformance.plan`).
    resolution : float, optional
        Detectable TV wanted on every case (default 0.001 for a vectorised token sampler,
        0.01 for one called per step, 0.005 and 0.02 for block samplers).
    budget : float, optional
        Seconds for the whole battery instead: a short pilot measures each case's speed
        and the trials are chosen so that every case reaches the smallest detectable TV
        the budget allows (the trial counts then depend on the machine's speed; the
        report states them).
    false_alarm : float
        Family-wise false-alarm probability: a correct sampler fails the battery with
        probability at most this (Holm over all statistical checks; impossible outcomes
        never happen to a correct sampler). In (0, 0.5].
    power : float
        Power at which the detectable TV is reported, in (0, 1).
    confidence : float
        Level of the TV intervals, in (0, 1).
    min_expected, max_bins :
        Binning rule, see :func:`specdec.stats.pool_cells`; ``max_bins=None`` (default)
        lets the number of bins grow with the trials (:func:`specdec.stats.bins_for_trials`).

    Returns
    -------
    Report

    Raises
    ------
    TypeError
        If ``sampler`` is not callable.
    ValueError
        Invalid ``seed``, ``trials``, ``false_alarm``, ``power``, ``confidence``, unknown
        case names, cases of the wrong kind, or an undecidable calling convention.

    Examples
    --------
    >>> from specdec import gallery
    >>> r = run_battery(gallery.vectorised_correct, cases=["article"], trials=10_000, seed=3)
    >>> r.passed, r.n_tests
    (True, 2)
    """
    t0 = time.perf_counter()
    spec = describe_sampler(sampler, kind=kind, vectorised=vectorised, inputs=inputs,
                            proposals=proposals, accepted_eos=accepted_eos,
                            accepted_law=accepted_law)
    seed = laws.check_int(seed, "seed", minimum=0)
    _check_probability(false_alarm, "false_alarm", upper=0.5, closed=True)
    _check_probability(power, "power")
    _check_probability(confidence, "confidence")
    case_list = _resolve_cases(spec.kind, cases)
    if isinstance(trials, dict):
        unknown = set(trials) - {c.name for c in case_list}
        if unknown:
            raise ValueError(f"trials: no case called {', '.join(sorted(unknown))} in this battery")
        per_case = {k: laws.check_int(v, f"trials[{k!r}]") for k, v in trials.items()}
    elif trials is not None:
        per_case = {c.name: laws.check_int(trials, "trials") for c in case_list}
    else:
        per_case = {}
    missing = [c for c in case_list if c.name not in per_case]
    the_plan = None
    if missing:
        the_plan = plan.plan_battery(spec, sampler, case_list, resolution=resolution, budget=budget,
                                     false_alarm=false_alarm, power=power,
                                     min_expected=min_expected, seed=seed)
        for c in missing:
            per_case[c.name] = the_plan.trials_by_case[c.name]
    raw = [run_case(sampler, c, spec=spec, seed=seed, trials=per_case[c.name],
                    min_expected=min_expected, max_bins=max_bins, confidence=confidence)
           for c in case_list]
    conventions = []
    if spec.kind == TOKEN and any(r[2] is not None for r in raw):
        if spec.proposals == AUTO:
            detected = [c.name for c, r in zip(case_list, raw) if r[2] is not None and r[2][1] > 0]
            if detected:
                conventions.append("proposals not drawn from q (detected in "
                                   + ", ".join(detected) + "): the accepted flags are checked by "
                                   "the identities that hold for every proposal law")
                opts = dict(min_expected=min_expected, max_bins=max_bins, confidence=confidence)
                raw = [_with_own_proposals(c, r, opts) for c, r in zip(case_list, raw)]
            else:
                conventions.append("proposals drawn from q (no outcome says otherwise)")
        else:
            conventions.append("proposals drawn from q (declared)" if spec.proposals == FROM_Q else
                               "proposals from the sampler's own law (declared): the accepted "
                               "flags are checked by the identities that hold for every "
                               "proposal law")
    for res, _, _ in raw:
        for text in res.conventions:
            if text not in conventions:
                conventions.append(text)
    # the family: every check with at least one degree of freedom
    family = [(i, j) for i, (res, _, _) in enumerate(raw)
              for j, chk in enumerate(res.checks) if chk.dof >= 1]
    m = len(family)
    adjusted = stats.holm_adjust([raw[i][0].checks[j].pvalue for i, j in family])
    adj_of = {key: a for key, a in zip(family, adjusted)}
    level = false_alarm / max(m, 1)
    results = []
    for i, (res, lams, _) in enumerate(raw):
        new_checks = []
        for j, chk in enumerate(res.checks):
            adj = adj_of.get((i, j), 1.0)
            tv_det = stats.detectable_tv(max(chk.trials, 1), chk.dof, level, power)
            failed = bool(chk.impossible > 0 or adj <= false_alarm)
            need = float("inf")                    # estimated only for what was caught
            if failed and chk.dof >= 1 and lams[j] > 0:
                need = stats.noncentrality(chk.dof, level, power) / lams[j]
            if failed and chk.impossible:
                frac = chk.impossible / chk.trials
                need = min(need, 1.0 if frac >= 1 else math.log1p(-power) / math.log1p(-frac))
            new_checks.append(dataclasses.replace(chk, adjusted_pvalue=float(adj),
                                                  tv_detectable=tv_det, trials_needed=need,
                                                  failed=failed))
        law_chk = new_checks[0] if res.law is not None else None
        acc_chk = new_checks[-1] if res.accounting is not None else None
        det_need = float("inf")
        if res.violating_trials:
            frac = res.violating_trials / res.trials
            det_need = 1.0 if frac >= 1 else math.log1p(-power) / math.log1p(-frac)
        res = dataclasses.replace(res, law=law_chk, accounting=acc_chk,
                                  violation_trials_needed=max(1.0, det_need))
        passed = res.exact and res.accounting_ok
        results.append(dataclasses.replace(res, passed=passed,
                                           causes=res.causes or _causes(res, spec.kind)))
    return Report(spec, seed, float(false_alarm), float(power), float(confidence), "holm", m,
                  tuple(results), all(r.passed for r in results), time.perf_counter() - t0,
                  tuple(conventions), None if the_plan is None else the_plan.resolution)


def _with_own_proposals(case, r, opts):
    """A token case's result redone with the accounting for proposals not from q."""
    res, lams, obs = r
    if obs is None:
        return r
    _, _, acc_viol, _ = _token_accounting(case, obs[0], OWN, opts)
    return (dataclasses.replace(res, accounting=None, accounting_violations=tuple(acc_viol)),
            lams[:1], obs)


def assert_conforms(sampler, **kwargs) -> Report:
    """pytest-friendly: run the battery and raise ``AssertionError`` with the report if it fails.

    Parameters
    ----------
    sampler : callable
    **kwargs
        As for :func:`run_battery`.

    Returns
    -------
    Report
        When the sampler passes.

    Raises
    ------
    AssertionError
        If the battery fails; the message is the Markdown report. With a fixed ``seed``
        the outcome is deterministic; a correct sampler fails for at most a fraction
        ``false_alarm`` of seeds.

    Examples
    --------
    >>> from specdec import gallery
    >>> _ = assert_conforms(gallery.vectorised_correct, cases=["equal"], trials=5_000)
    """
    report = run_battery(sampler, **kwargs)
    if not report.passed:
        raise AssertionError("sampler does not conform to the target law\n\n" + report.to_markdown())
    return report


