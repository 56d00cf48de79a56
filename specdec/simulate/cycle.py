"""From token to block: one speculative cycle of length gamma, its exact law, its accounting.

One **cycle** of speculative decoding, from a confirmed prefix ``x``:

1. *Draft.* The draft model proposes ``d_1, ..., d_gamma`` autoregressively:
   ``d_i ~ q(. | x, d_1..d_{i-1})``. Drafting stops early after an end-of-sequence (EOS)
   proposal, so ``n_proposed <= gamma``.
2. *Score.* The target evaluates ``p(. | x, d_1..d_{i-1})`` for every drafted position,
   and one more position ``p(. | x, d_1..d_k)``, in one causal pass.
3. *Verify.* Proposals are tested in order (``u < p(d_i) / q(d_i)``). The accepted
   prefix is kept. At the first rejection, a token is drawn from the residual
   ``(p - q)^+ / Z`` of that position and every later proposal is discarded: it was
   conditioned on a token that is not in the text.
4. *Bonus.* If all ``k`` proposals are accepted and the last is not EOS, one extra token is
   drawn from the target's law at the next position ``p(. | x, d_1..d_k)``.

Steps 3 and 4 are the kernel :func:`specdec.verify.verify`, called by the scalar cycle
(:func:`speculative_cycle`, :func:`generate`) with one row and by the vectorised engines
(:func:`simulate_cycles`, :func:`simulate_generation`) with one row per cycle.
5. *Roll back.* Model caches keep only the emitted tokens; the unconfirmed tail is dropped.

A cycle therefore emits between 1 and ``gamma + 1`` tokens (fewer when EOS ends it), and
the emitted sequence has exactly the law of sampling from the target alone. This module
holds the samplers: the scalar reference cycle under any cycle rule, and the vectorised
engines. The cycle rules (the correct cycle and one object per bug) and the exact laws
that check the claim by enumerating every draft trajectory and every accept/reject
branch are :mod:`specdec.rules.cycle`; the accounting of a run is :mod:`specdec.cost.accounting`.

Sequences follow the convention of :func:`specdec.models.sequence_law`: tuples of token
ids after the prompt, truncated to the requested length; a sequence ends at its first EOS
(except under the ``EMIT_AFTER_EOS`` bug, whose output may continue after an EOS).

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023, Sec. 2.3 (Algorithm 1) and Sec. 3.1.
.. [2] C. Chen et al., "Accelerating Large Language Model Decoding with Speculative
   Sampling", arXiv:2302.01318, 2023, Algorithm 2.
.. [3] Z. Sun et al., "Block Verification Accelerates Speculative Decoding", ICLR 2025,
   arXiv:2403.10444 (token-by-token verification of a block, as here, is exact but not
   the optimal block-level rule).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from specdec.laws import check_int
from specdec.rules.cycle import CORRECT_CYCLE, CycleRule, check_cycle_rule
from specdec.models import ToyModel, check_models, check_prefix
from specdec.verify import check_rng, draw, verify

__all__ = [
    "CycleResult",
    "Generation",
    "CycleBatch",
    "GenerationBatch",
    "Accounting",
    "speculative_cycle",
    "generate",
    "simulate_cycles",
    "simulate_generation",
]



# --------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CycleResult:
    """Outcome of one speculative cycle.

    Attributes
    ----------
    emitted : tuple of int
        Tokens appended to the text by this cycle (1 to ``gamma + 1`` of them).
    drafted : tuple of int
        All proposals of the cycle, accepted or not (``n_proposed`` tokens).
    n_accepted : int
        Length of the accepted prefix of ``drafted`` (proposals after the first rejection
        are never counted, even if they would have passed the test).
    n_proposed : int
        Number of proposals (``gamma``, or fewer when drafting stopped at EOS).
    hit_eos : bool
        Whether ``emitted`` contains the end-of-sequence token.
    bonus : bool
        Whether the last emitted token is the extra target token drawn after all
        proposals were accepted.
    """

    emitted: tuple[int, ...]
    drafted: tuple[int, ...]
    n_accepted: int
    n_proposed: int
    hit_eos: bool
    bonus: bool

    @property
    def n_emitted(self) -> int:
        """Number of emitted tokens."""
        return len(self.emitted)

    @property
    def rejected(self) -> bool:
        """Whether a proposal was rejected (the last emitted token is a residual draw)."""
        return self.n_accepted < self.n_proposed


@dataclass(frozen=True)
class Generation:
    """A generated continuation and the cycles that produced it.

    Attributes
    ----------
    tokens : tuple of int
        The first ``length`` emitted tokens (shorter if the text ended at EOS).
    cycles : tuple of CycleResult
        Every cycle run, in order (the last one may have emitted past ``length``).
    """

    tokens: tuple[int, ...]
    cycles: tuple[CycleResult, ...]


@dataclass(frozen=True)
class CycleBatch:
    """``n`` independent cycles from the same prefix (vectorised engine).

    Attributes
    ----------
    emitted : numpy.ndarray of int, shape (n, gamma + 1)
        Emitted tokens, padded with ``-1``.
    n_emitted, n_accepted, n_proposed : numpy.ndarray of int, shape (n,)
        Per-cycle counts (tokens).
    hit_eos, bonus : numpy.ndarray of bool, shape (n,)
        See :class:`CycleResult`.
    gamma : int
        Draft length.
    """

    emitted: np.ndarray
    n_emitted: np.ndarray
    n_accepted: np.ndarray
    n_proposed: np.ndarray
    hit_eos: np.ndarray
    bonus: np.ndarray
    gamma: int


@dataclass(frozen=True)
class GenerationBatch:
    """``n`` independent generations (vectorised engine).

    Attributes
    ----------
    tokens : numpy.ndarray of int, shape (n, length)
        Row ``i`` holds the first ``n_tokens[i]`` tokens of sequence ``i``; ``-1`` after.
    n_tokens : numpy.ndarray of int, shape (n,)
        Length of each sequence (``length``, or less when it ended at EOS).
    n_cycles : numpy.ndarray of int, shape (n,)
        Cycles run per sequence.
    sequence : numpy.ndarray of int, shape (total_cycles,)
        For each cycle (flattened over all sequences), the sequence it belongs to.
    n_emitted, n_accepted, n_proposed : numpy.ndarray of int, shape (total_cycles,)
        Per-cycle counts (tokens), before truncation to ``length``.
    hit_eos, bonus : numpy.ndarray of bool, shape (total_cycles,)
        Per-cycle flags.
    gamma : int
        Draft length.
    """

    tokens: np.ndarray
    n_tokens: np.ndarray
    n_cycles: np.ndarray
    sequence: np.ndarray
    n_emitted: np.ndarray
    n_accepted: np.ndarray
    n_proposed: np.ndarray
    hit_eos: np.ndarray
    bonus: np.ndarray
    gamma: int

    def sequences(self) -> list[tuple[int, ...]]:
        """The generated sequences as tuples (the keys of :func:`block_sequence_law`)."""
        return [tuple(row[:k].tolist()) for row, k in zip(self.tokens, self.n_tokens)]

    def sequence_counts(self) -> dict[tuple[int, ...], int]:
        """Number of times each sequence was generated."""
        out: dict[tuple[int, ...], int] = defaultdict(int)
        for s in self.sequences():
            out[s] += 1
        return dict(out)


# --------------------------------------------------------------------------------------
# Scalar reference sampler
# --------------------------------------------------------------------------------------


def _sample_cycle(target: ToyModel, draft: ToyModel, ctx: tuple, stale: tuple, gamma: int,
                  rng: np.random.Generator, variant: CycleRule):
    """One cycle of ``variant``; returns the result and the proposals with their draft context."""
    eos = target.eos
    stop_at_eos = variant.stops_at_eos
    props: list[int] = []
    srcs: list[tuple] = []
    qlaws: list[np.ndarray] = []
    # 1. draft autoregressively (reused proposals first under the stale variants)
    while len(props) < gamma:
        cj = ctx + tuple(props)
        j = len(props)
        if j < len(stale):
            x, src = stale[j]
            qr = draft.next_law(variant.stale_q_context(cj, src))
        else:
            qr = draft.next_law(cj)
            x, src = draw(qr, rng.random()), cj
        props.append(x)
        srcs.append(src)
        qlaws.append(qr)
        if stop_at_eos and x == eos:
            break
    k = len(props)
    # 2. the target scores every drafted position and the next one (no bonus after an EOS;
    #    under the bug, the bonus is drawn from the last drafted position's law)
    plaws = [target.next_law(ctx + tuple(props[:j])) for j in range(k + 1)]
    if stop_at_eos and props[-1] == eos:
        plaws.pop()
    else:
        plaws[k] = plaws[variant.bonus_index(k)]
    # 3.-4. verify in order: residual at the first rejection, bonus if all were accepted
    out = verify(np.array(plaws)[None], np.array(qlaws)[None], np.array([props]), rng=rng)
    n_acc = int(out.n_accepted[0])
    emitted = tuple(out.tokens[0, :out.n_emitted[0]].tolist())
    res = CycleResult(emitted=emitted, drafted=tuple(props), n_accepted=n_acc, n_proposed=k,
                      hit_eos=eos is not None and eos in emitted, bonus=bool(out.bonus[0]))
    return res, tuple(zip(props, srcs))


def speculative_cycle(target: ToyModel, draft: ToyModel, prefix, gamma: int, rng: np.random.Generator,
                      *, variant: CycleRule = CORRECT_CYCLE) -> CycleResult:
    """Run one speculative cycle from ``prefix`` (reference implementation, one sequence).

    The steps are those of the module docstring: draft ``gamma`` tokens (stopping after an
    EOS proposal), let the target score every position, and verify with the kernel
    :func:`specdec.verify.verify` (longest accepted prefix, a residual draw at the first
    rejection, one target token when all are accepted), never emitting past EOS. Random
    numbers are consumed in this order: one uniform per fresh proposal, one per proposal
    for the accept tests (all drawn at once, as the kernel does), one for the residual
    or bonus draw.

    Parameters
    ----------
    target, draft : ToyModel
        Models over the same vocabulary, with the same EOS id.
    prefix : sequence of int
        Confirmed context (prompt and tokens emitted so far); must not contain EOS.
    gamma : int
        Draft length (>= 1).
    rng : numpy.random.Generator
        Source of randomness.
    variant : specdec.rules.cycle.CycleRule
        :data:`specdec.rules.cycle.CORRECT_CYCLE` (default) or a rule of
        :data:`specdec.rules.cycle.CYCLE_RULES`. A single cycle from a fresh state is identical
        under the correct cycle, ``NO_ROLLBACK`` and the stale rules (they differ only in
        the state handed to the *next* cycle; use :func:`generate`).

    Returns
    -------
    CycleResult

    Raises
    ------
    ValueError
        Invalid prefix, gamma, models of different vocabularies or EOS ids.
    TypeError
        Models that are not ToyModels, ``variant`` not a cycle rule, ``rng`` neither a
        Generator nor a seed.

    References
    ----------
    Leviathan et al. (2023), Sec. 2.3, Algorithm 1.

    Examples
    --------
    >>> from specdec.models import toy_pair
    >>> p, q = toy_pair()
    >>> res = speculative_cycle(p, q, (), 4, np.random.default_rng(0))
    >>> 1 <= res.n_emitted <= 5 and res.n_accepted <= res.n_proposed <= 4
    True
    """
    check_models(target, draft)
    ctx = check_prefix(prefix, target.vocab_size, eos=target.eos)
    gamma = check_int(gamma, "gamma", minimum=1)
    rng = check_rng(rng)
    variant = check_cycle_rule(variant)
    res, _ = _sample_cycle(target, draft, ctx, (), gamma, rng, variant)
    return res


def generate(target: ToyModel, draft: ToyModel, prefix, gamma: int, length: int, rng: np.random.Generator,
             *, variant: CycleRule = CORRECT_CYCLE) -> Generation:
    """Generate up to ``length`` tokens by repeated speculative cycles.

    Cycles run until at least ``length`` tokens are emitted or an EOS is emitted; the
    returned tokens are the first ``length`` (the output of the last cycle may be cut).
    Under the stateful bugs (``STALE_PROPOSALS``, ``NO_ROLLBACK``) and under
    ``STALE_ORIGINAL_Q`` each cycle hands its discarded proposals to the next one as
    defined in :func:`block_sequence_law`.

    Parameters
    ----------
    target, draft : ToyModel
        Models over the same vocabulary.
    prefix : sequence of int
        Prompt (no EOS).
    gamma : int
        Draft length (>= 1).
    length : int
        Number of tokens wanted (>= 1).
    rng : numpy.random.Generator
        Source of randomness.
    variant : specdec.rules.cycle.CycleRule
        :data:`specdec.rules.cycle.CORRECT_CYCLE` (default) or a rule of
        :data:`specdec.rules.cycle.CYCLE_RULES`.

    Returns
    -------
    Generation

    Raises
    ------
    ValueError, TypeError
        Invalid arguments, each named in the message (sizes through
        :func:`specdec.laws.check_int`).

    Examples
    --------
    >>> from specdec.models import toy_pair
    >>> p, q = toy_pair()
    >>> out = generate(p, q, (), 3, 5, np.random.default_rng(1))
    >>> len(out.tokens) <= 5 and sum(c.n_emitted for c in out.cycles) >= len(out.tokens)
    True
    """
    check_models(target, draft)
    prompt = check_prefix(prefix, target.vocab_size, eos=target.eos)
    gamma = check_int(gamma, "gamma", minimum=1)
    length = check_int(length, "length", minimum=1)
    rng = check_rng(rng)
    variant = check_cycle_rule(variant)
    eos = target.eos
    ctx, stale, text, cycles = prompt, (), (), []
    while len(text) < length and (eos is None or eos not in text):
        res, drafted = _sample_cycle(target, draft, ctx, stale, gamma, rng, variant)
        cycles.append(res)
        ctx, stale = variant.next_state(ctx, res.emitted, drafted, res.n_accepted)
        text += res.emitted
    return Generation(tokens=text[:length], cycles=tuple(cycles))


# --------------------------------------------------------------------------------------
# Vectorised Monte Carlo engine (correct algorithm)
# --------------------------------------------------------------------------------------


def _batch_cycle(target: ToyModel, draft: ToyModel, buf: np.ndarray, lens: np.ndarray, gamma: int,
                 rng: np.random.Generator):
    """One correct cycle for every row of ``buf`` (modified in place); returns per-row arrays."""
    n = lens.shape[0]
    v = target.vocab_size
    eos = -1 if target.eos is None else target.eos
    rows = np.arange(n)
    props = np.zeros((n, gamma), dtype=np.int64)
    qlaws = np.empty((n, gamma, v))
    drafting = np.ones(n, dtype=bool)
    n_prop = np.zeros(n, dtype=np.int64)
    for j in range(gamma):
        ql = draft.next_law_batch(buf, lens + j)
        x = draw(ql, rng.random(n))
        buf[rows, lens + j] = x
        props[:, j] = x
        qlaws[:, j] = ql
        n_prop += drafting
        drafting &= x != eos
    plaws = np.empty((n, gamma + 1, v))
    for j in range(gamma + 1):  # the target scores every drafted position and the next one
        plaws[:, j] = target.next_law_batch(buf, lens + j)
    out = verify(plaws, qlaws, props, n_prop, rng)
    n_acc = out.n_accepted
    eos_stop = out.bonus & (props[rows, n_prop - 1] == eos)
    bonus = out.bonus & ~eos_stop
    extra = out.tokens[rows, n_acc]
    has_extra = ~eos_stop
    buf[rows[has_extra], (lens + n_acc)[has_extra]] = extra[has_extra]
    n_emit = n_acc + has_extra
    hit_eos = eos_stop | (extra == eos)
    return n_emit, n_acc, n_prop, hit_eos, bonus


def _check_batch_args(target, draft, prefix, gamma, n, rng):
    check_models(target, draft)
    prompt = check_prefix(prefix, target.vocab_size, eos=target.eos)
    gamma = check_int(gamma, "gamma", minimum=1)
    n = check_int(n, "n", minimum=1)
    return prompt, gamma, n, check_rng(rng)


def simulate_cycles(target: ToyModel, draft: ToyModel, prefix, gamma: int, n: int,
                    rng: np.random.Generator, *, chunk: int = 2**16) -> CycleBatch:
    """``n`` independent correct cycles from the same prefix, vectorised with numpy.

    Parameters
    ----------
    target, draft : ToyModel
        Models over the same vocabulary (table models are gathered in one numpy step per
        position; ``law_fn`` models are called once per distinct prefix).
    prefix : sequence of int
        Confirmed context (no EOS).
    gamma : int
        Draft length (>= 1).
    n : int
        Number of cycles (>= 1).
    rng : numpy.random.Generator
        Source of randomness.
    chunk : int
        Cycles simulated per numpy step (working memory is about
        ``chunk * (gamma + 1) * V * 16`` bytes whatever ``n``). The random stream, hence the
        exact output for a given seed, depends on ``chunk``; its law does not.

    Returns
    -------
    CycleBatch

    Raises
    ------
    ValueError, TypeError
        Invalid arguments, each named in the message (sizes through
        :func:`specdec.laws.check_int`).

    Examples
    --------
    >>> from specdec.models import toy_pair
    >>> p, q = toy_pair()
    >>> b = simulate_cycles(p, q, (), 4, 1000, np.random.default_rng(0))
    >>> b.emitted.shape, bool((b.n_emitted >= 1).all() and (b.n_emitted <= 5).all())
    ((1000, 5), True)
    """
    prompt, gamma, n, rng = _check_batch_args(target, draft, prefix, gamma, n, rng)
    chunk = check_int(chunk, "chunk", minimum=1)
    parts = []
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        buf = np.zeros((m, len(prompt) + gamma + 1), dtype=np.int64)
        buf[:, : len(prompt)] = prompt
        lens = np.full(m, len(prompt), dtype=np.int64)
        n_emit, n_acc, n_prop, hit_eos, bonus = _batch_cycle(target, draft, buf, lens, gamma, rng)
        emitted = buf[:, len(prompt):]
        emitted[np.arange(gamma + 1)[None, :] >= n_emit[:, None]] = -1
        parts.append((emitted, n_emit, n_acc, n_prop, hit_eos, bonus))
    cat = [np.concatenate(x) for x in zip(*parts)]
    return CycleBatch(emitted=cat[0], n_emitted=cat[1], n_accepted=cat[2], n_proposed=cat[3],
                      hit_eos=cat[4], bonus=cat[5], gamma=gamma)


def simulate_generation(target: ToyModel, draft: ToyModel, prefix, gamma: int, length: int, n: int,
                        rng: np.random.Generator, *, chunk: int = 2**16) -> GenerationBatch:
    """``n`` independent generations of up to ``length`` tokens, vectorised with numpy.

    Every sequence runs correct cycles (as :func:`generate` with the correct cycle)
    until it has ``length`` tokens or has emitted EOS; all unfinished sequences advance by
    one cycle per numpy step.

    Parameters
    ----------
    target, draft : ToyModel
        Models over the same vocabulary.
    prefix : sequence of int
        Prompt (no EOS), shared by all sequences.
    gamma : int
        Draft length (>= 1).
    length : int
        Tokens wanted per sequence (>= 1).
    n : int
        Number of sequences (>= 1).
    rng : numpy.random.Generator
        Source of randomness.
    chunk : int
        Sequences simulated together (bounds the working memory, as in
        :func:`simulate_cycles`; the output for a given seed depends on it, its law does not).

    Returns
    -------
    GenerationBatch

    Raises
    ------
    ValueError, TypeError
        Invalid arguments, each named in the message (sizes through
        :func:`specdec.laws.check_int`).

    Examples
    --------
    >>> from specdec.models import toy_pair
    >>> p, q = toy_pair()
    >>> g = simulate_generation(p, q, (), 3, 6, 500, np.random.default_rng(0))
    >>> g.tokens.shape, int(g.n_cycles.sum()) == g.n_emitted.size
    ((500, 6), True)
    """
    prompt, gamma, n, rng = _check_batch_args(target, draft, prefix, gamma, n, rng)
    length = check_int(length, "length", minimum=1)
    chunk = check_int(chunk, "chunk", minimum=1)
    parts = [_generation_chunk(target, draft, prompt, gamma, length, min(chunk, n - start), rng)
             for start in range(0, n, chunk)]
    offsets = np.cumsum([0] + [len(pt["n_tokens"]) for pt in parts[:-1]])
    for off, pt in zip(offsets, parts):
        pt["sequence"] = pt["sequence"] + off
    cat = {k: np.concatenate([pt[k] for pt in parts]) for k in parts[0]}
    return GenerationBatch(gamma=gamma, **cat)


def _generation_chunk(target, draft, prompt, gamma, length, n, rng) -> dict:
    """Arrays of :class:`GenerationBatch` for ``n`` sequences (one numpy step per cycle)."""
    p0 = len(prompt)
    eos = -1 if target.eos is None else target.eos
    w = p0 + length + gamma + 1
    buf = np.zeros((n, w), dtype=np.int64)
    buf[:, :p0] = prompt
    lens = np.full(n, p0, dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    ended = np.zeros(n, dtype=bool)
    n_cycles = np.zeros(n, dtype=np.int64)
    rec = {k: [] for k in ("sequence", "n_emitted", "n_accepted", "n_proposed", "hit_eos", "bonus")}
    while not done.all():
        act = np.flatnonzero(~done)
        sub = buf[act]
        sub_lens = lens[act]
        n_emit, n_acc, n_prop, hit_eos, bonus = _batch_cycle(target, draft, sub, sub_lens, gamma, rng)
        buf[act] = sub
        lens[act] = sub_lens + n_emit
        n_cycles[act] += 1
        ended[act] |= hit_eos
        done[act] = ended[act] | (lens[act] - p0 >= length)
        for k, val in zip(rec, (act, n_emit, n_acc, n_prop, hit_eos, bonus)):
            rec[k].append(val)
    # sequences are stored cycle-major; sort by sequence (stable) so each one's cycles are contiguous
    flat = {k: np.concatenate(v) for k, v in rec.items()}
    order = np.argsort(flat["sequence"], kind="stable")
    flat = {k: v[order] for k, v in flat.items()}
    n_tok = np.minimum(lens - p0, length)
    if target.eos is not None:
        text = buf[:, p0:p0 + length]
        is_eos = text == eos
        first = np.where(is_eos.any(axis=1), np.argmax(is_eos, axis=1) + 1, length)
        n_tok = np.minimum(n_tok, first)
    tokens = buf[:, p0:p0 + length].copy()
    tokens[np.arange(length)[None, :] >= n_tok[:, None]] = -1
    return dict(tokens=tokens, n_tokens=n_tok, n_cycles=n_cycles, **flat)
