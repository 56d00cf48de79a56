"""Driving the calling conventions: calling a sampler on a case and reading what it returns.

The kit's samplers follow one of the conventions of :mod:`specdec.conformance.conventions`
(a token step, vectorised or not, from laws or logits; a block cycle or vectorised decodes).
This module calls a sampler in its convention, draws the trials in chunks, and turns what
it returns into counts and per-cycle records for the checks of
:mod:`specdec.conformance.checks`, recording malformed returns as violations rather than
errors (a sampler that breaks its convention fails the case).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from specdec.conformance.cases import BlockCase, TokenCase
from specdec.conformance.conventions import CHUNK, LOGITS, SamplerSpec

__all__ = ["Malformed", "call_token", "tally_tokens", "encode_sequences", "Cycles",
           "run_block_scalar", "run_block_vectorised"]


class Malformed(Exception):
    """The sampler returned something the kit cannot read (a conformance failure)."""


def _as_token_array(x, n: int, vocab: int, what: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.shape != (n,):
        raise Malformed(f"{what}: expected shape ({n},), got {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise Malformed(f"{what}: expected integer token ids, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _as_flags(x, n: int) -> np.ndarray:
    arr = np.asarray(x)
    if arr.shape != (n,) or arr.dtype.kind not in "bui":
        raise Malformed(f"accepted flags: expected a ({n},) boolean array, got "
                         f"shape {arr.shape} dtype {arr.dtype}")
    if arr.dtype.kind != "b" and not np.isin(arr, (0, 1)).all():
        raise Malformed("accepted flags: must be booleans (or 0/1)")
    return arr.astype(bool)


def call_token(sampler, spec: SamplerSpec, case: TokenCase, rng: np.random.Generator,
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
                raise Malformed("return value: switches between tokens and (tokens, accepted)")
            if has_flags:
                if len(out) != 2:
                    raise Malformed(f"return value: expected tokens or (tokens, accepted), "
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
                    raise Malformed(f"return value {done + i}: expected (token, accepted), "
                                     f"got {out!r}")
                tok, acc = out
                if not isinstance(acc, (bool, np.bool_)) and acc not in (0, 1):
                    raise Malformed(f"return value {done + i}: accepted flag must be a bool, "
                                     f"got {acc!r}")
                flags[i] = bool(acc)
            else:
                tok = out
            if isinstance(tok, (bool, np.bool_)) or not isinstance(tok, (int, np.integer)):
                raise Malformed(f"return value {done + i}: expected an integer token id, "
                                 f"got {tok!r}")
            tokens[i] = tok
        yield tokens, (flags if reported else None)
        done += k


def tally_tokens(chunks, vocab: int):
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


def encode_sequences(rows: np.ndarray, lengths: np.ndarray, vocab: int) -> np.ndarray:
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
        raise Malformed(f"emitted: expected a sequence of token ids, got {emitted!r}") from None
    for t in toks:
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
            raise Malformed(f"emitted: expected integer token ids, got {t!r}")
    counts = []
    for name, v in (("accepted", acc), ("proposed", prop)):
        if isinstance(v, (list, tuple, np.ndarray)):
            v = len(v)                                  # a list of accepted / proposed tokens
        if v is not None and (isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer))):
            raise Malformed(f"{name}: expected a count, got {v!r}")
        counts.append(None if v is None else int(v))
    return [int(t) for t in toks], counts[0], counts[1]


@dataclass
class Cycles:
    """Per-cycle records of a block run (flattened over decodes)."""

    n_emitted: np.ndarray          # (C,) tokens emitted by each cycle
    n_accepted: np.ndarray | None  # (C,) as reported, or None
    n_proposed: np.ndarray | None  # (C,)
    ends_eos: np.ndarray | None    # (C,) last emitted token is EOS (None: unknown)
    first: np.ndarray              # (C,) bool, first cycle of its decode
    sequence: np.ndarray           # (C,) int, the decode each cycle belongs to


def run_block_scalar(sampler, case: BlockCase, rng, trials: int, clock: list):
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
    cycles = Cycles(np.array(rec_emit, dtype=np.int64),
                     np.array(rec_acc, dtype=np.int64) if reports else None,
                     np.array(rec_prop, dtype=np.int64) if reports else None,
                     np.array(rec_eos, dtype=bool), np.array(rec_first, dtype=bool),
                     np.array(rec_seq, dtype=np.int64))
    return rows, lens, cycles, [f"{m} ({k:,} cycles)" for m, k in violations.items()], bad


def run_block_vectorised(sampler, case: BlockCase, rng, trials: int, clock: list):
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
            raise Malformed(f"tokens: expected an integer array of shape ({n}, {length}), got "
                             f"shape {tokens.shape} dtype {tokens.dtype}")
        n_tok = getattr(out, "n_tokens", None)
        if n_tok is None:
            pad = tokens < 0
            n_tok = np.where(pad.any(axis=1), np.argmax(pad, axis=1), length)
        n_tok = np.asarray(n_tok, dtype=np.int64)
        body = np.arange(length)[None, :] < n_tok[:, None]
        if ((tokens >= vocab) & body).any() or ((tokens < 0) & body).any():
            raise Malformed(f"tokens: ids outside the vocabulary 0..{vocab - 1}")
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
    cycles = Cycles(cat["n_emitted"], cat["n_accepted"] if has_acc else None,
                     cat["n_proposed"] if has_acc else None,
                     cat["ends_eos"] if has_eos else None, cat["first"], cat["sequence"])
    return rows, lens, cycles, violations, bad
