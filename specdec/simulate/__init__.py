"""Monte Carlo engines for one speculative step.

Two engines with different jobs:

* :func:`simulate_step` (and :func:`simulate_tokens`, :func:`running_frequencies`): a
  vectorised numpy engine that runs many rules on the *same* trials. Each trial has one
  proposal and one accept uniform shared by every rule; after a rejection each rule
  draws from its own recovery law. The counts of different rules are therefore
  dependent (positively correlated), which sharpens comparisons between rules.
* :func:`article_reference_run`: the article's pure-Python protocol with
  :class:`random.Random`, reproducing its published counts to the unit.

How the vectorised engine works
-------------------------------
One uniform ``U`` per trial decides both the proposal and the accept test. The unit
interval is cut into the proposal intervals of ``q`` (token ``x`` owns a piece of length
``q(x)``) and ``x`` is proposed when ``U`` falls in its piece. The position of ``U``
inside that piece, ``u = (U - start_x) / q(x)``, is uniform on [0, 1) and independent of
``x``: it *is* the accept uniform, so ``x`` is accepted iff ``u < a(x)``. Every piece is
therefore split into an accepted part of length ``q(x) a(x) = m(x)`` and a rejected part
of length ``q(x) - m(x)``, and counting the trials in each of the ``2V`` cells gives the
proposal and the accept decision at once. Rules with another acceptance probability
(``INVERTED_RATIO``) add their own cut points to the same pieces.

``SHARED_UNIFORM`` genuinely reuses the accept uniform: on a rejection its recovery is
the residual's inverse CDF evaluated at the same ``u`` (which then lies in ``[a(x), 1)``),
so its outcome is a deterministic function of ``U`` and it is counted by adding the
residual's CDF points, mapped into the rejected part of each piece, as further cut
points. (Rescaling ``u`` to ``(u - a(x)) / (1 - a(x))`` would produce a fresh uniform and
silently repair the bug; this engine does not do that.)

Rules whose recovery does not depend on ``U`` draw one fresh uniform per *rejected*
trial: a categorical draw from the recovery law (the same law for every rejection for
``CORRECT``, ``FALLBACK_P``, ``RESAMPLE_Q``, ``UNCLIPPED_RATIO``, ``INVERTED_RATIO``;
the law after the rejected proposal for ``DROP_REJECTED``). A recovery law with a single
support point needs no uniform. ``M_PLUS_R`` is not a procedure; it is simulated by one
independent categorical draw per trial from its normalised law. Rules are the objects of
:mod:`specdec.rules.token`; results are keyed by their ``name``.

These engines count trials in cells of the unit interval, which is what makes them
fast (hundreds of millions of trials per second, ``make bench``); they do not sample row
by row and so do not call the verification kernel :func:`specdec.verify.verify`. Their
tests check them against the exact laws, and every inverse-CDF draw here is
:func:`specdec.verify.draw`. Rules whose recovery depends on the proposal
(``DROP_REJECTED``, ``SHARED_UNIFORM``) cost up to V x V work here and are refused above
:data:`MAX_VOCAB_PER_PROPOSAL_RECOVERY`; their exact laws cost O(V) at any V.

Counts are accumulated chunk by chunk in preallocated buffers, so memory does not grow
with the number of trials. With the default ``dtype=np.float32`` the uniforms lie on the
grid ``k / 2**24``, so each cell probability is realised to within ``2**-24 ≈ 6e-8``;
pass ``dtype=np.float64`` for ``2**-53``.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023, Sec. 2-3, App. A.1.
.. [2] C. Chen et al., "Accelerating Large Language Model Decoding with Speculative
   Sampling", arXiv:2302.01318, 2023.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from specdec.rules import token as tokenrule
from specdec.laws import check_int, check_pair
from specdec.step import ARTICLE_P, ARTICLE_Q, residual
from specdec.verify import cdf, check_rng, draw, speculative_accept

__all__ = [
    "ARTICLE_SEED",
    "ARTICLE_TRIALS",
    "simulate_step",
    "simulate_tokens",
    "running_frequencies",
    "article_reference_run",
]

#: Seed of the article's run (Python ``random.Random``).
ARTICLE_SEED: int = 20260923
#: Number of trials of the article's run.
ARTICLE_TRIALS: int = 200_000

# Up to this many cut points, counting by one comparison pass per cut point is faster
# than a binary search per trial.
_COMPARE_LIMIT = 24


#: Largest vocabulary for rules whose recovery depends on the rejected proposal or reuses
#: the accept uniform (``DROP_REJECTED``, ``SHARED_UNIFORM``): their plans cost up to V x V
#: numbers of work (one recovery law per rejected proposal, or the residual's CDF points in
#: every proposal's piece). Their exact laws (``output_law``) have no such limit.
MAX_VOCAB_PER_PROPOSAL_RECOVERY = 4096


@dataclass(frozen=True)
class _RulePlan:
    rule: tokenrule.TokenByToken
    direct: np.ndarray  # (cells,) token emitted directly by the cell, or -1
    rejected: np.ndarray  # (cells,) proposal rejected in the cell (needs a recovery draw), or -1
    recovery: np.ndarray | None  # (V,) recovery law for every rejection, None if per proposal
    independent: np.ndarray | None = None  # a rule that does not propose: law of one draw

    def recovery_after(self, p: np.ndarray, q: np.ndarray, x: int) -> np.ndarray:
        return self.recovery if self.recovery is not None else self.rule.recovery(p, q, x)


@dataclass(frozen=True)
class _Plan:
    v: int
    edges: np.ndarray  # (cells - 1,) interior cell edges in U-space, increasing, float64
    rules: dict[str, _RulePlan]


def _check_rules(rules, v: int) -> tuple[tokenrule.TokenByToken, ...]:
    if isinstance(rules, tokenrule.TokenByToken):
        rules = (rules,)
    try:
        rules = tuple(rules)
    except TypeError:
        raise TypeError(f"rules: must be a sequence of token-by-token rules of specdec.rules.token (got {rules!r})") from None
    if not rules:
        raise ValueError("rules: must name at least one rule")
    for r in rules:
        tokenrule.check_token_rule(r, "rules")
        if (r.recovery_depends_on_proposal or r.reuses_accept_uniform) and v > MAX_VOCAB_PER_PROPOSAL_RECOVERY:
            raise ValueError(
                f"rules: {r.name} needs up to V x V numbers in the Monte Carlo engines and V = {v} "
                f"exceeds {MAX_VOCAB_PER_PROPOSAL_RECOVERY}; its exact law "
                "(specdec.step.output_law) works at any V")
    if len({r.name for r in rules}) != len(set(rules)):
        raise ValueError("rules: two different rules share one name")
    return tuple(dict.fromkeys(rules))


def _check_dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype: must be float32 or float64 (got {dt})")
    return dt


def _build_plan(p: np.ndarray, q: np.ndarray, rules: tuple[tokenrule.TokenByToken, ...]) -> _Plan:
    """Cut [0, 1) into cells on which every rule's outcome is determined or a rejection."""
    v = p.size
    thresholds = {rule: rule.acceptance(p, q) for rule in rules if rule.proposes}
    shared = [rule for rule in rules if rule.reuses_accept_uniform]
    if shared:
        a_shared = thresholds[shared[0]]
        r_cdf = cdf(residual(p, q))

    qc = cdf(q)
    starts = np.concatenate(([0.0], qc[:-1]))
    cell_x: list[int] = []
    cell_mid: list[float] = []
    upper: list[float] = []
    for x in range(v):
        if q[x] == 0.0:
            continue
        cuts = {0.0, 1.0}
        for t in thresholds.values():
            cuts.add(float(t[x]))
        if shared:
            a = float(a_shared[x])
            cuts.update(float(c) for c in r_cdf if a < c < 1.0)
        cuts_arr = np.array(sorted(c for c in cuts if 0.0 <= c <= 1.0))
        width = qc[x] - starts[x]
        edges = starts[x] + width * cuts_arr
        edges[0], edges[-1] = starts[x], qc[x]
        for i in range(cuts_arr.size - 1):
            cell_x.append(x)
            cell_mid.append(0.5 * (cuts_arr[i] + cuts_arr[i + 1]))
            upper.append(float(edges[i + 1]))
    edges = np.maximum.accumulate(np.array(upper[:-1], dtype=np.float64))
    cx = np.array(cell_x, dtype=np.int64)
    mid = np.array(cell_mid)

    plans: dict[str, _RulePlan] = {}
    for rule in rules:
        none = np.full(cx.size, -1)
        if not rule.proposes:
            plans[rule.name] = _RulePlan(rule, direct=none, rejected=none, recovery=None,
                                         independent=rule.output_law(p, q))
            continue
        acc = mid < thresholds[rule][cx]
        if rule.reuses_accept_uniform:
            # the recovery is the residual's inverse CDF at the same accept uniform
            plans[rule.name] = _RulePlan(rule, direct=np.where(acc, cx, draw(residual(p, q), mid)),
                                         rejected=none, recovery=None)
            continue
        recovery = None if rule.recovery_depends_on_proposal else rule.recovery(p, q)
        plans[rule.name] = _RulePlan(rule, direct=np.where(acc, cx, -1), rejected=np.where(acc, -1, cx),
                                     recovery=recovery)
    return _Plan(v=v, edges=edges, rules=plans)


def _count_cells(u: np.ndarray, edges: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """Number of ``u`` in each cell ``[edges[i-1], edges[i])``; shape (len(edges) + 1,)."""
    n = u.size
    if edges.size <= _COMPARE_LIMIT:
        below = np.empty(edges.size + 2, dtype=np.int64)
        below[0], below[-1] = 0, n
        mask = scratch[:n]
        for i, e in enumerate(edges):
            np.less(u, e, out=mask)
            below[i + 1] = np.count_nonzero(mask)
        return np.diff(below)
    idx = np.searchsorted(edges, u, side="right")
    return np.bincount(idx, minlength=edges.size + 1).astype(np.int64)


def _categorical_counts(law: np.ndarray, k: int, rng: np.random.Generator, ubuf: np.ndarray,
                        scratch: np.ndarray) -> np.ndarray:
    """Counts of ``k`` independent draws from ``law`` (inverse CDF of fresh uniforms)."""
    v = law.size
    out = np.zeros(v, dtype=np.int64)
    support = np.flatnonzero(law > 0)
    if k == 0:
        return out
    if support.size == 1:
        out[support[0]] = k
        return out
    c = cdf(law)
    edges = c[support[:-1]].astype(ubuf.dtype)
    done = 0
    while done < k:
        n = min(k - done, ubuf.size)
        u = rng.random(dtype=ubuf.dtype, out=ubuf[:n])
        out[support] += _count_cells(u, edges, scratch)
        done += n
    return out


def _weighted_bincount(index: np.ndarray, weights: np.ndarray, v: int) -> np.ndarray:
    keep = index >= 0
    return np.rint(np.bincount(index[keep], weights=weights[keep], minlength=v)).astype(np.int64)


def simulate_step(p, q, trials: int, rng: np.random.Generator,
                  rules=(tokenrule.TOKEN, tokenrule.FALLBACK_P), *, chunk: int = 2**20,
                  dtype=np.float32) -> dict[str, np.ndarray]:
    """Counts of emitted tokens over many independent steps, for several rules at once.

    All rules see the same proposals and the same accept uniforms (see the module
    docstring for the single-uniform construction); each rule then recovers from its
    own law with its own uniforms. Work is done in chunks of ``chunk`` trials with
    preallocated buffers, so memory stays flat as ``trials`` grows.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws.
    trials : int
        Number of independent steps, ``>= 1``.
    rng : numpy.random.Generator or int
        Source of randomness (see :func:`specdec.verify.check_rng`).
    rules : sequence of specdec.rules.token.TokenByToken
        Rules of :data:`specdec.rules.token.STEP_RULES` (all are supported; ``M_PLUS_R`` is
        simulated by an independent draw from its normalised law, see the module notes).
    chunk : int
        Trials per chunk; memory is about 9 bytes per trial of one chunk with
        float32 (two uniform buffers and a boolean scratch buffer), whatever ``trials``.
    dtype : {numpy.float32, numpy.float64}
        Precision of the uniforms: float32 is faster and realises each cell probability
        to within ``2**-24``.

    Returns
    -------
    dict of str to numpy.ndarray
        ``counts[rule.name]`` has shape (V,), dtype int64, and sums to ``trials``. Its
        expectation is ``trials * output_law(p, q, rule)``.

    Raises
    ------
    LawError
        Invalid laws.
    ValueError
        ``trials`` or ``chunk`` < 1, no rule, a proposal-dependent rule above the
        vocabulary limit, unsupported ``dtype``, a negative seed.
    TypeError
        A rule that is not a step rule, ``rng`` neither a Generator nor a seed.

    References
    ----------
    Leviathan et al. (2023), Sec. 2.3 and App. A.1.

    Examples
    --------
    >>> rng = np.random.default_rng(1)
    >>> counts = simulate_step([0.5, 0.3, 0.2], [0.2, 0.5, 0.3], 10_000, rng)
    >>> sorted(counts), int(counts["correct"].sum())
    (['correct', 'fallback_p'], 10000)
    """
    p, q = check_pair(p, q)
    trials = check_int(trials, "trials", minimum=1)
    chunk = check_int(chunk, "chunk", minimum=1)
    rng = check_rng(rng)
    rules = _check_rules(rules, p.size)
    dt = _check_dtype(dtype)
    plan = _build_plan(p, q, rules)
    v = plan.v
    edges = plan.edges.astype(dt)
    size = min(chunk, trials)
    ubuf = np.empty(size, dtype=dt)
    rbuf = np.empty(size, dtype=dt)
    scratch = np.empty(size, dtype=bool)
    counts = {name: np.zeros(v, dtype=np.int64) for name in plan.rules}
    done = 0
    while done < trials:
        n = min(size, trials - done)
        u = rng.random(dtype=dt, out=ubuf[:n])
        cells = _count_cells(u, edges, scratch)
        weights = cells.astype(np.float64)
        for name, rp in plan.rules.items():
            if rp.independent is not None:
                counts[name] += _categorical_counts(rp.independent, n, rng, rbuf, scratch)
                continue
            counts[name] += _weighted_bincount(rp.direct, weights, v)
            rejections = _weighted_bincount(rp.rejected, weights, v)
            if rp.recovery is not None:
                counts[name] += _categorical_counts(rp.recovery, int(rejections.sum()), rng,
                                                    rbuf, scratch)
                continue
            for x in np.flatnonzero(rejections):
                counts[name] += _categorical_counts(rp.recovery_after(p, q, x), int(rejections[x]),
                                                    rng, rbuf, scratch)
        done += n
    return counts


def simulate_tokens(p, q, trials: int, rng: np.random.Generator,
                    rules=(tokenrule.TOKEN, tokenrule.FALLBACK_P)) -> dict[str, np.ndarray]:
    """The token emitted at every trial, for several rules on shared trials.

    Same coupling as :func:`simulate_step` (one uniform decides proposal and acceptance
    for all rules; each rule draws its own recovery), in float64, keeping the
    per-trial outcomes. Memory grows with ``trials``: use it for figures, and
    :func:`simulate_step` for counts.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws.
    trials : int
        Number of steps, in ``[1, 10**8]``.
    rng : numpy.random.Generator or int
        Source of randomness (see :func:`specdec.verify.check_rng`).
    rules : sequence of specdec.rules.token.TokenByToken
        Rules of :data:`specdec.rules.token.STEP_RULES`.

    Returns
    -------
    dict of str to numpy.ndarray
        ``tokens[rule.name]`` has shape (trials,), dtype int64; token ids in ``[0, V)``.

    Raises
    ------
    LawError
        Invalid laws.
    ValueError, TypeError
        ``trials`` out of range; otherwise as :func:`simulate_step`.

    Examples
    --------
    >>> out = simulate_tokens([0.5, 0.5], [0.5, 0.5], 5, np.random.default_rng(0), [tokenrule.TOKEN])
    >>> out["correct"].shape
    (5,)
    """
    p, q = check_pair(p, q)
    trials = check_int(trials, "trials", minimum=1, maximum=10**8)
    rng = check_rng(rng)
    rules = _check_rules(rules, p.size)
    plan = _build_plan(p, q, rules)
    u = rng.random(trials)
    cell = np.searchsorted(plan.edges, u, side="right")
    out: dict[str, np.ndarray] = {}
    for name, rp in plan.rules.items():
        if rp.independent is not None:
            out[name] = draw(rp.independent, rng.random(trials))
            continue
        tokens = rp.direct[cell].astype(np.int64)
        rej_x = rp.rejected[cell]
        hit = np.flatnonzero(rej_x >= 0)
        if not rp.rule.reuses_accept_uniform:
            fresh = rng.random(hit.size)
            if rp.recovery is not None:
                tokens[hit] = draw(rp.recovery, fresh)
            else:
                for x in np.unique(rej_x[hit]):
                    sel = rej_x[hit] == x
                    tokens[hit[sel]] = draw(rp.recovery_after(p, q, x), fresh[sel])
        out[name] = tokens
    return out


def running_frequencies(p, q, trials: int, rng: np.random.Generator,
                        rules=(tokenrule.TOKEN, tokenrule.FALLBACK_P), symbol: int = 0) -> dict[str, np.ndarray]:
    """Running frequency of one symbol after 1, 2, ..., ``trials`` shared trials.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws.
    trials : int
        Number of steps, in ``[1, 10**8]`` (the output holds ``trials`` floats per rule).
    rng : numpy.random.Generator or int
        Source of randomness (see :func:`specdec.verify.check_rng`).
    rules : sequence of specdec.rules.token.TokenByToken
        Rules of :data:`specdec.rules.token.STEP_RULES`, simulated on shared trials.
    symbol : int
        Token id whose frequency is tracked (0 = the article's A).

    Returns
    -------
    dict of str to numpy.ndarray
        ``freq[rule.name][n - 1]`` is the fraction of the first ``n`` trials that emitted
        ``symbol``; shape (trials,), float64. It converges to
        ``output_law(p, q, rule)[symbol]`` -- the wrong limit for a wrong rule.

    Raises
    ------
    LawError, ValueError, TypeError
        As :func:`simulate_tokens`, or ``symbol`` outside ``[0, V)``.

    Examples
    --------
    >>> f = running_frequencies([0.5, 0.3, 0.2], [0.2, 0.5, 0.3], 1000, np.random.default_rng(3))
    >>> f["fallback_p"].shape
    (1000,)
    """
    p, q = check_pair(p, q)
    symbol = check_int(symbol, "symbol", minimum=0, maximum=p.size - 1)
    tokens = simulate_tokens(p, q, trials, rng, rules)
    n = np.arange(1, tokens[next(iter(tokens))].size + 1)
    return {rule: np.cumsum(t == symbol) / n for rule, t in tokens.items()}


def article_reference_run(trials: int = ARTICLE_TRIALS, seed: int = ARTICLE_SEED, *,
                          p=ARTICLE_P, q=ARTICLE_Q) -> dict[str, list[int]]:
    """The article's experiment, draw for draw: pure Python and ``random.Random``.

    Protocol (one generator for both variants; every draw is one ``random()`` call):

    1. propose ``x`` with ``rng.choices(symbols, weights=q)``;
    2. draw the accept uniform ``u = rng.random()`` on every trial and accept if
       ``u < min(1, p(x)/q(x))`` (via :func:`specdec.verify.speculative_accept`); an
       accepted ``x`` is emitted by both variants;
    3. only after a rejection, draw the correct variant's recovery from the residual with
       ``rng.choices(symbols, weights=r)`` (this consumes a uniform even when the residual
       has a single support point, as in the article), then the flawed variant's
       recovery from ``p`` with ``rng.choices(symbols, weights=p)``.

    The residual weights are ``max(p - q, 0) / z`` with ``z = 1 - sum(min(p, q))``, as in
    the article's snippet. With the defaults this reproduces the article's table
    exactly: correct A 100018, B 59688, C 40294; fallback_p A 70010, B 77662, C 52328.

    Parameters
    ----------
    trials : int
        Number of trials (default 200 000).
    seed : int
        Seed of :class:`random.Random` (default 20260923).
    p, q : sequence of float
        Target and draft laws (default: the article's A, B, C example).

    Returns
    -------
    dict of str to list of int
        ``{"correct": counts, "fallback_p": counts}``, counts per symbol in id order.

    Raises
    ------
    LawError
        Invalid laws.
    ValueError
        ``trials`` < 1.

    References
    ----------
    The article, Sec. 4 (Python 3.14.0, ``random.Random``, seed 20260923). Python's
    ``random.choices`` and ``random.random`` have been stable across 3.x releases.

    Examples
    --------
    >>> article_reference_run(trials=10, seed=1)["correct"]
    [4, 1, 5]
    """
    pa, qa = check_pair(p, q)
    trials = check_int(trials, "trials", minimum=1)
    seed = check_int(seed, "seed", minimum=None)
    pl, ql = [float(x) for x in pa], [float(x) for x in qa]
    symbols = list(range(len(pl)))
    m = [min(a, b) for a, b in zip(pl, ql)]
    z = 1.0 - sum(m)
    r = [max(a - b, 0.0) / z for a, b in zip(pl, ql)] if z > 0 else pl
    rng = random.Random(seed)
    correct = [0] * len(pl)
    wrong = [0] * len(pl)
    choices, uniform, accept = rng.choices, rng.random, speculative_accept
    for _ in range(trials):
        x = choices(symbols, weights=ql)[0]
        if accept(pl[x], ql[x], uniform()):
            correct[x] += 1
            wrong[x] += 1
        else:
            correct[choices(symbols, weights=r)[0]] += 1
            wrong[choices(symbols, weights=pl)[0]] += 1
    return {"correct": correct, "fallback_p": wrong}
