"""Running cases and batteries: calling the sampler, counting outcomes, testing them."""

from __future__ import annotations

import dataclasses
import math
import time
import zlib
from dataclasses import dataclass

import numpy as np

from specdec import laws, stats

from .cases import BlockCase, TokenCase, block_cases, token_cases
from .conventions import BLOCK, CHUNK, DEFAULT_TRIALS, LOGITS, TOKEN, SamplerSpec, describe_sampler
from .report import CaseResult, Check, CycleAccounting, Report

__all__ = ["run_case", "run_battery", "assert_conforms"]


def _gof(name: str, counts: np.ndarray, law: np.ndarray, *, min_expected: float, max_bins: int,
         confidence: float) -> tuple[Check, float]:
    """Pooled chi-square + TV interval; returns the check and the per-trial noncentrality."""
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
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
                trials: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Draw ``trials`` outputs: (tokens (trials,), accepted flags (trials,) or None)."""
    if spec.inputs == LOGITS:
        args = (case.target_logits.copy(), case.draft_logits.copy())
        kwargs = case.settings
    else:
        args = (case.p.copy(), case.q.copy())
        kwargs = {}
    if spec.vectorised:
        toks, flags, reported = [], [], None
        done = 0
        while done < trials:
            n = min(CHUNK, trials - done)
            out = sampler(*args, rng, n, **kwargs)
            has_flags = isinstance(out, tuple)
            if reported is None:
                reported = has_flags
            elif reported != has_flags:
                raise _Malformed("return value: switches between tokens and (tokens, accepted)")
            if has_flags:
                if len(out) != 2:
                    raise _Malformed(f"return value: expected tokens or (tokens, accepted), "
                                     f"got a tuple of {len(out)}")
                toks.append(_as_token_array(out[0], n, case.vocab_size, "tokens"))
                flags.append(_as_flags(out[1], n))
            else:
                toks.append(_as_token_array(out, n, case.vocab_size, "tokens"))
            done += n
        return np.concatenate(toks), (np.concatenate(flags) if reported else None)
    tokens = np.empty(trials, dtype=np.int64)
    first = sampler(*args, rng, **kwargs)
    reported = isinstance(first, tuple)
    flags = np.empty(trials, dtype=bool) if reported else None
    out = first
    for i in range(trials):
        if i:
            out = sampler(*args, rng, **kwargs)
        if reported:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise _Malformed(f"return value {i}: expected (token, accepted), got {out!r}")
            tok, acc = out
            if not isinstance(acc, (bool, np.bool_)) and acc not in (0, 1):
                raise _Malformed(f"return value {i}: accepted flag must be a bool, got {acc!r}")
            flags[i] = bool(acc)
        else:
            tok = out
        if isinstance(tok, (bool, np.bool_)) or not isinstance(tok, (int, np.integer)):
            raise _Malformed(f"return value {i}: expected an integer token id, got {tok!r}")
        tokens[i] = tok
    return tokens, flags


def _token_counts(tokens: np.ndarray, vocab: int) -> tuple[np.ndarray, list[str]]:
    bad = (tokens < 0) | (tokens >= vocab)
    violations = []
    if bad.any():
        vals = np.unique(tokens[bad])[:5]
        violations.append(f"{int(bad.sum())} token ids outside the vocabulary 0..{vocab - 1} "
                          f"(e.g. {', '.join(map(str, vals))})")
    return np.bincount(tokens[~bad], minlength=vocab), violations


def _impossible_message(counts: np.ndarray, law: np.ndarray, what: str) -> list[str]:
    bad = (law <= 0) & (counts > 0)
    if not bad.any():
        return []
    idx = np.flatnonzero(bad)
    shown = ", ".join(f"{int(i)} ({int(counts[i])}x)" for i in idx[:5])
    return [f"{int(counts[bad].sum())} {what} of probability 0 under the target: {shown}"]


def _token_case(sampler, spec, case: TokenCase, rng, trials, opts) -> tuple[CaseResult, list]:
    t0 = time.perf_counter()
    try:
        tokens, flags = _call_token(sampler, spec, case, rng, trials)
    except _Malformed as exc:
        return CaseResult(case.name, TOKEN, case.description, trials, None, None, None,
                          (f"malformed output: {exc}",), False, time.perf_counter() - t0), []
    except Exception as exc:  # the sampler crashed: a conformance failure, reported
        return CaseResult(case.name, TOKEN, case.description, trials, None, None, None,
                          (f"raised {type(exc).__name__}: {exc}",), False,
                          time.perf_counter() - t0), []
    counts, violations = _token_counts(tokens, case.vocab_size)
    violations += _impossible_message(counts, case.p, "tokens")
    law_check, lam_law = _gof("law", counts, case.p, **opts)
    acc_check, lam_acc, cycles = None, 0.0, None
    if flags is not None:
        ok = (tokens >= 0) & (tokens < case.vocab_size)
        m = np.minimum(case.p, case.q)
        joint_law = np.concatenate([m, case.p - m])            # accepted x | rejected, then x
        joint = np.bincount(tokens[ok] + case.vocab_size * (~flags[ok]),
                            minlength=2 * case.vocab_size)
        acc_check, lam_acc = _gof("accounting", joint, joint_law, **opts)
        if acc_check.impossible:
            bad_acc = int(joint[: case.vocab_size][m <= 0].sum())
            bad_rej = int(joint[case.vocab_size:][(case.p - m) <= 0].sum())
            if bad_acc:
                violations.append(f"{bad_acc} tokens reported accepted that a correct step never "
                                  "accepts (min(p, q) = 0)")
            if bad_rej:
                violations.append(f"{bad_rej} tokens reported as residual draws that the residual "
                                  "never gives ((p - q)+ = 0)")
        beta = float(m.sum())
        rate = float(flags.mean())
        cycles = CycleAccounting(trials, 1.0, rate, 1.0, rate, 1.0, beta)
    result = CaseResult(case.name, TOKEN, case.description, trials, law_check, acc_check, cycles,
                        tuple(violations), True, time.perf_counter() - t0)
    return result, [lam_law, lam_acc]


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


def _run_block_scalar(sampler, case: BlockCase, rng, trials: int):
    """Decode ``trials`` times with a one-cycle sampler; (sequences, cycles, violations)."""
    target, draft = case.target, case.draft
    vocab, eos = int(target.vocab_size), target.eos
    gamma, length, prefix0 = case.gamma, case.length, tuple(case.prefix)
    reset = getattr(sampler, "reset", None)
    violations: dict[str, int] = {}
    seqs: list[tuple] = []
    rec_emit, rec_acc, rec_prop, rec_eos, rec_first = [], [], [], [], []
    reports = True

    def violation(msg):
        violations[msg] = violations.get(msg, 0) + 1

    for _ in range(trials):
        if callable(reset):
            reset()
        out: list[int] = []
        first = True
        while len(out) < length and not (eos is not None and eos in out):
            emitted, acc, prop = _read_cycle(sampler(target, draft, prefix0 + tuple(out), gamma, rng))
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
                     np.array(rec_eos, dtype=bool), np.array(rec_first, dtype=bool))
    return rows, lens, cycles, [f"{m} ({k:,} cycles)" for m, k in violations.items()]


def _run_block_vectorised(sampler, case: BlockCase, rng, trials: int):
    """Call a vectorised block sampler in chunks; (sequences, cycles, violations)."""
    target = case.target
    vocab, eos, length = int(target.vocab_size), target.eos, case.length
    rows_parts, lens_parts = [], []
    parts: dict[str, list] = {k: [] for k in ("n_emitted", "n_accepted", "n_proposed", "ends_eos",
                                              "first")}
    has_acc = has_eos = None
    done = 0
    while done < trials:
        n = min(CHUNK, trials - done)
        out = sampler(case.target, case.draft, tuple(case.prefix), case.gamma, length, rng, n)
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
        if eos is not None:
            hit = (tokens == eos) & body
            n_tok = np.where(hit.any(axis=1), np.argmax(hit, axis=1) + 1, n_tok)
        rows_parts.append(tokens.astype(np.int64))
        lens_parts.append(n_tok)
        if all(hasattr(out, a) for a in ("sequence", "n_emitted")):
            seq_id = np.asarray(out.sequence, dtype=np.int64)
            first = np.zeros(seq_id.size, dtype=bool)
            first[np.unique(seq_id, return_index=True)[1]] = True
            parts["first"].append(first)
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
    rows, lens = np.concatenate(rows_parts), np.concatenate(lens_parts)
    if not parts["n_emitted"]:
        return rows, lens, None, []
    cat = {k: (np.concatenate(v) if v else None) for k, v in parts.items()}
    cycles = _Cycles(cat["n_emitted"], cat["n_accepted"] if has_acc else None,
                     cat["n_proposed"] if has_acc else None,
                     cat["ends_eos"] if has_eos else None, cat["first"])
    return rows, lens, cycles, []


def _block_case(sampler, spec, case: BlockCase, rng, trials, opts) -> tuple[CaseResult, list]:
    from specdec import block, models

    t0 = time.perf_counter()

    def failed(msg):
        return CaseResult(case.name, BLOCK, case.description, trials, None, None, None, (msg,),
                          False, time.perf_counter() - t0), []

    try:
        run = _run_block_vectorised if spec.vectorised else _run_block_scalar
        rows, lens, cycles, violations = run(sampler, case, rng, trials)
    except _Malformed as exc:
        return failed(f"malformed output: {exc}")
    except Exception as exc:  # the sampler crashed: a conformance failure, reported
        return failed(f"raised {type(exc).__name__}: {exc}")
    target, draft, gamma = case.target, case.draft, case.gamma
    vocab, eos = int(target.vocab_size), target.eos
    exact = models.sequence_law(target, tuple(case.prefix), case.length)
    keys = list(exact)
    law = np.array([exact[k] for k in keys])
    key_codes = _encode(np.array([list(k) + [0] * (case.length - len(k)) for k in keys]),
                        np.array([len(k) for k in keys]), vocab)
    order = np.argsort(key_codes)
    codes = _encode(rows, lens, vocab)
    pos = np.minimum(np.searchsorted(key_codes[order], codes), len(keys) - 1)
    known = key_codes[order][pos] == codes
    counts = np.bincount(order[pos[known]], minlength=len(keys))
    outside = int((~known).sum())
    violations = list(violations)
    if outside:
        shown = ", ".join(str(tuple(rows[i, : lens[i]].tolist())) for i in np.flatnonzero(~known)[:3])
        violations.append(f"{outside} decodes produced sequences of probability 0 under the "
                          f"target (e.g. {shown})")
    law_check, lam_law = _gof("law", np.append(counts, outside), np.append(law / law.sum(), 0.0),
                              **opts)
    acc_check, lam_acc, summary = None, 0.0, None
    if cycles is not None and cycles.n_emitted.size:
        e = cycles.n_emitted
        bad = (e < 1) | (e > gamma + 1)
        if bad.any():
            violations.append(f"cycles must emit 1 to gamma + 1 = {gamma + 1} tokens "
                              f"({int(bad.sum()):,} cycles)")
        k_law = block.accepted_count_law(target, draft, tuple(case.prefix), gamma)
        e_law = block.cycle_length_law(target, draft, tuple(case.prefix), gamma)
        exact_e = float(np.arange(e_law.size) @ e_law)
        exact_a = float(np.arange(gamma + 1) @ k_law)
        acc, prop = cycles.n_accepted, cycles.n_proposed
        first = cycles.first
        if acc is not None:
            bad = (acc < 0) | (acc > prop) | (prop > gamma)
            if bad.any():
                violations.append(f"accounting: need 0 <= accepted <= proposed <= gamma = {gamma} "
                                  f"({int(bad.sum()):,} cycles)")
            ends = cycles.ends_eos if cycles.ends_eos is not None else np.full(e.size, eos is not None)
            bad = (acc != e - 1) & ~(ends & (acc == e))
            if bad.any():
                violations.append("accounting: the accepted proposals are the tokens emitted before "
                                  "the corrected or bonus token, so accepted = emitted - 1 "
                                  f"(or = emitted when the cycle ends at end-of-sequence) "
                                  f"({int(bad.sum()):,} cycles)")
            k_first = np.bincount(np.clip(acc[first], 0, gamma), minlength=gamma + 1)
            acc_check, lam_acc = _gof("accounting", k_first, k_law, **opts)
            acc_check = dataclasses.replace(
                acc_check, method="accepted proposals in the first cycle: " + acc_check.method)
        summary = CycleAccounting(
            int(e.size), float(e.mean()),
            float(acc.sum() / prop.sum()) if acc is not None and prop.sum() else None,
            float(e[first].mean()),
            float(acc[first].mean()) if acc is not None else None,
            exact_e, exact_a)
    result = CaseResult(case.name, BLOCK, case.description, trials, law_check, acc_check, summary,
                        tuple(violations), True, time.perf_counter() - t0)
    return result, [lam_law, lam_acc]


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
    standard = token_cases() if kind == TOKEN else block_cases()
    if cases is None:
        return standard
    if isinstance(cases, (str, TokenCase, BlockCase)):
        cases = [cases]
    by_name = {c.name: c for c in standard}
    out = []
    for c in cases:
        if isinstance(c, str):
            if c not in by_name:
                raise ValueError(f"cases: unknown {kind} case {c!r} (known: {', '.join(by_name)})")
            out.append(by_name[c])
        elif isinstance(c, TokenCase if kind == TOKEN else BlockCase):
            out.append(c)
        else:
            raise ValueError(f"cases: expected {kind} case names or "
                             f"{'TokenCase' if kind == TOKEN else 'BlockCase'} objects (got {c!r})")
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise ValueError(f"cases: names must be unique (got {names})")
    if not out:
        raise ValueError("cases: must not be empty")
    return tuple(out)


def run_case(sampler, case, *, spec: SamplerSpec | None = None, seed: int = 0,
             trials: int | None = None, min_expected: float = 10.0, max_bins: int = 100,
             confidence: float = 0.95) -> tuple[CaseResult, list[float]]:
    """Run one case; no multiple-testing adjustment (see :func:`run_battery`).

    Returns
    -------
    (CaseResult, list of float)
        The unadjusted result and the per-trial noncentralities estimated for its checks
        (law, accounting), used for the trials-needed estimate.
    """
    spec = spec or describe_sampler(sampler)
    kind = BLOCK if isinstance(case, BlockCase) else TOKEN
    if kind != spec.kind:
        raise ValueError(f"cases: a {kind} case cannot test a {spec.kind} sampler")
    if trials is None:
        key = ("block" if kind == BLOCK else "") + ("_vectorised" if spec.vectorised else "")
        trials = DEFAULT_TRIALS[{"": "scalar", "_vectorised": "vectorised"}.get(key, key)]
    trials = laws.check_int(trials, "trials")
    opts = dict(min_expected=min_expected, max_bins=max_bins, confidence=confidence)
    rng = _case_rng(seed, case.name)
    if kind == TOKEN:
        return _token_case(sampler, spec, case, rng, trials, opts)
    return _block_case(sampler, spec, case, rng, trials, opts)


def _check_probability(x, name: str, *, upper: float = 1.0, closed: bool = False) -> float:
    ok = isinstance(x, (int, float, np.floating)) and not isinstance(x, bool) and np.isfinite(x)
    if not ok or not (0.0 < x < upper or (closed and x == upper)):
        bracket = "]" if closed else ")"
        raise ValueError(f"{name}: must be a number in (0, {upper:g}{bracket} (got {x!r})")
    return float(x)


def run_battery(sampler, *, kind: str | None = None, vectorised: bool | None = None,
                inputs: str | None = None, cases=None, seed: int = 0, trials: int | None = None,
                false_alarm: float = 1e-3, power: float = 0.9, confidence: float = 0.95,
                min_expected: float = 10.0, max_bins: int = 100) -> Report:
    """Run the conformance battery on a sampler.

    Parameters
    ----------
    sampler : callable
        Token or block sampler (see the module docstring and :func:`describe_sampler`).
    kind, vectorised, inputs : optional
        Calling convention, when neither a mark nor the signature says it.
    cases : sequence of str or case objects, optional
        Subset (by name) or custom cases; default: the standard battery of the kind
        (:func:`token_cases` or :func:`block_cases`).
    seed : int
        Master seed, >= 0. Case ``c`` draws from ``SeedSequence(seed, spawn_key=(crc32(c),))``,
        so a report is reproducible and a case's draws do not depend on the others.
    trials : int, optional
        Repetitions per case (token steps, or decodes of ``length`` tokens). Default
        20,000 for a token sampler, 200,000 for a vectorised one, 10,000 for a block
        sampler.
    false_alarm : float
        Family-wise false-alarm probability: a correct sampler fails the battery with
        probability at most this (Holm over all statistical checks; impossible outcomes
        never happen to a correct sampler). In (0, 0.5].
    power : float
        Power at which the detectable TV is reported, in (0, 1).
    confidence : float
        Level of the TV intervals, in (0, 1).
    min_expected, max_bins :
        Binning rule, see :func:`pool_cells`.

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
    spec = describe_sampler(sampler, kind=kind, vectorised=vectorised, inputs=inputs)
    seed = laws.check_int(seed, "seed", minimum=0)
    if trials is not None:
        trials = laws.check_int(trials, "trials")
    _check_probability(false_alarm, "false_alarm", upper=0.5, closed=True)
    _check_probability(power, "power")
    _check_probability(confidence, "confidence")
    case_list = _resolve_cases(spec.kind, cases)
    raw = [run_case(sampler, c, spec=spec, seed=seed, trials=trials, min_expected=min_expected,
                    max_bins=max_bins, confidence=confidence) for c in case_list]
    # the family: every check with at least one degree of freedom
    family = [(i, j) for i, (res, _) in enumerate(raw)
              for j, chk in enumerate(res.checks) if chk.dof >= 1]
    m = len(family)
    adjusted = stats.holm_adjust([raw[i][0].checks[j].pvalue for i, j in family])
    adj_of = {key: a for key, a in zip(family, adjusted)}
    level = false_alarm / max(m, 1)
    results = []
    for i, (res, lams) in enumerate(raw):
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
        passed = not res.violations and not any(c.failed for c in new_checks) and res.law is not None
        results.append(dataclasses.replace(res, law=law_chk, accounting=acc_chk, passed=passed))
    return Report(spec, seed, float(false_alarm), float(power), float(confidence), "holm", m,
                  tuple(results), all(r.passed for r in results), time.perf_counter() - t0)


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


