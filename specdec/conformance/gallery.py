"""A gallery of speculative samplers: correct ones, and plausible ones with one bug each.

Every sampler here follows a calling convention of :mod:`specdec.conformance` and is
short enough to read in one glance; each buggy one differs from a correct sampler in one
or two lines, marked ``# BUG``. They exist to show that the conformance kit catches each
mistake (appendix "A conformance kit and a gallery of bugs"), and they are used by its
tests. Nothing here should be used to generate text.

Correct samplers
    :func:`vectorised_correct` (laws, vectorised), :func:`library_vectorised` (the
    library's Monte Carlo engine, :func:`specdec.simulate.simulate_tokens`),
    :func:`processed_correct` (logits, vectorised), :func:`library_generation` (the
    library's vectorised block engine); the library's scalar step
    :func:`specdec.step.sample_step` and cycle :func:`specdec.simulate.cycle.speculative_cycle`.

Bugs (numbered as in the appendix)
    1. :func:`always_accept` - the accept test always passes.
    2. :func:`greedy_draft` - the draft decodes greedily, the ratio uses its softmax law.
    3. :func:`truncated_draft` - the draft samples from its top-k/top-p law, the ratio
       uses its untruncated law.
    4. :func:`untempered_target` - temperature applied to the draft's law but not to the
       target's in the ratio.
    5. :func:`drop_rejected` - on rejection, the rejected token is removed from ``p`` and
       the rest renormalised (instead of the residual).
    6. :func:`shared_uniform` - one uniform for the accept test and the residual draw.
    7. :class:`StaleProposalsSampler` - proposals drafted after a rejection are reused in the
       next cycle (block).
    8. :class:`NoRollbackSampler` - the target's cache is not rolled back after a rejection
       (block).
    9. :func:`overcounting_cycle` - accounting: accepts after the first rejection are
       counted as accepted.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023 (PMLR 202), Algorithm 1, Sec. 2.3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from specdec import laws, simulate, step as token
from specdec.rules import cycle as stateful, token as tokenrule
from specdec.verify import draw, speculative_accept, verify
from specdec.conformance import batch_sampler, block_sampler, token_sampler

__all__ = [
    "vectorised_correct",
    "library_vectorised",
    "processed_correct",
    "always_accept",
    "greedy_draft",
    "truncated_draft",
    "untempered_target",
    "drop_rejected",
    "shared_uniform",
    "StaleProposalsSampler",
    "NoRollbackSampler",
    "overcounting_cycle",
    "library_generation",
    "GalleryEntry",
    "BUGS",
    "CORRECT_SAMPLERS",
]


# --------------------------------------------------------------------------------------
# Small helpers (every correct verification goes through the kernel specdec.verify.verify)
# --------------------------------------------------------------------------------------


def _verify(p: np.ndarray, q: np.ndarray, x: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
    """Verify ``n`` one-token drafts ``x`` against one pair of laws; no bonus token.

    ``p`` and ``q`` are the laws *the verifier believes in*; the bugs below feed it the
    wrong ones. Returns the emitted tokens and whether each was the accepted proposal.
    """
    out = verify(p[None], q[None], x.reshape(-1, 1), rng=rng)       # shared laws, gamma = 1
    return out.tokens[:, 0], out.n_accepted == 1


def _processed(logits, settings) -> np.ndarray:
    return laws.sampling_law(logits, **settings)


# --------------------------------------------------------------------------------------
# Correct samplers
# --------------------------------------------------------------------------------------


@token_sampler(vectorised=True)
def vectorised_correct(p, q, rng, n):
    """Speculative sampling, ``n`` independent steps at once.

    Parameters
    ----------
    p, q : numpy.ndarray, shape (V,)
        Target and draft laws (processed).
    rng : numpy.random.Generator
    n : int
        Number of steps.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        Emitted token ids, shape (n,), int64; whether each was the accepted proposal,
        shape (n,), bool.

    Examples
    --------
    >>> tokens, accepted = vectorised_correct(np.array([0.5, 0.3, 0.2]),
    ...     np.array([0.2, 0.5, 0.3]), np.random.default_rng(0), 4)
    >>> tokens.shape, accepted.dtype
    ((4,), dtype('bool'))
    """
    x = draw(q, rng.random(n))
    return _verify(p, q, x, rng)


@token_sampler(vectorised=True)
def library_vectorised(p, q, rng, n):
    """The library's vectorised engine (:func:`specdec.simulate.simulate_tokens`), rule "correct"."""
    return simulate.simulate_tokens(p, q, n, rng, rules=(tokenrule.TOKEN,))["correct"]


@token_sampler(vectorised=True, inputs="logits")
def processed_correct(target_logits, draft_logits, rng, n, *, temperature=1.0, top_k=None,
                      top_p=None):
    """Speculative sampling from logits: both models' laws processed with the same settings.

    Parameters
    ----------
    target_logits, draft_logits : numpy.ndarray, shape (V,)
    rng : numpy.random.Generator
    n : int
    temperature, top_k, top_p :
        Sampling settings, see :func:`specdec.laws.sampling_law`.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        Tokens (n,) and accepted flags (n,).
    """
    settings = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    p, q = _processed(target_logits, settings), _processed(draft_logits, settings)
    return _verify(p, q, draw(q, rng.random(n)), rng)


# --------------------------------------------------------------------------------------
# Token-level bugs
# --------------------------------------------------------------------------------------


@token_sampler
def always_accept(p, q, rng):
    """Bug 1: the accept test always passes, so the output law is the draft's ``q``.

    Typical cause: a comparison that is vacuous (``u <= max(1, p/q)``), or an accept flag
    initialised to ``True`` and never updated. Caught whenever ``q != p``.
    """
    x = int(draw(q, rng.random()))
    u = rng.random()
    if u <= max(1.0, p[x] / q[x]):  # BUG: max instead of min; the test is always true
        return x
    return int(draw(token.residual(p, q), rng.random()))


@token_sampler(vectorised=True, inputs="logits")
def greedy_draft(target_logits, draft_logits, rng, n, *, temperature=1.0, top_k=None, top_p=None):
    """Bug 2: the draft decodes greedily, but the ratio uses the draft's sampling law.

    The proposal is a point mass on the draft's arg-max, so the law to put in the ratio is
    that point mass, not ``q``. Every other token can then only come from the residual,
    and the arg-max is accepted too rarely or too often.
    """
    settings = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    p, q = _processed(target_logits, settings), _processed(draft_logits, settings)
    x = np.full(n, int(np.argmax(draft_logits)))  # BUG: greedy proposal...
    return _verify(p, q, x, rng)                  # ...verified as if drawn from q


@token_sampler(vectorised=True, inputs="logits")
def truncated_draft(target_logits, draft_logits, rng, n, *, temperature=1.0, top_k=None,
                    top_p=None):
    """Bug 3: the draft samples from its top-k/top-p law, the ratio uses its untruncated law.

    The truncated law puts more mass on the kept tokens than the untruncated softmax says,
    so they are accepted too often, and the residual misses the mass of the others. Seen
    only when truncation is on.
    """
    settings = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    p, q = _processed(target_logits, settings), _processed(draft_logits, settings)
    q_untruncated = laws.softmax(draft_logits, temperature)  # BUG: the ratio's q
    return _verify(p, q_untruncated, draw(q, rng.random(n)), rng)


@token_sampler(vectorised=True, inputs="logits")
def untempered_target(target_logits, draft_logits, rng, n, *, temperature=1.0, top_k=None,
                      top_p=None):
    """Bug 4: temperature applied to the draft's law but not to the target's in the ratio.

    The step is then exact, but for the wrong target: the output law is the target at
    temperature 1. Seen whenever the temperature is not 1.
    """
    settings = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    p_t1 = _processed(target_logits, dict(settings, temperature=1.0))  # BUG: temperature lost
    q = _processed(draft_logits, settings)
    return _verify(p_t1, q, draw(q, rng.random(n)), rng)


@token_sampler
def drop_rejected(p, q, rng):
    """Bug 5: after rejecting ``x``, draw from ``p`` without ``x``, renormalised.

    "Do not give the rejected token a second chance" sounds like a refinement of falling
    back to ``p``; it is the same mistake. The recovery must be the residual
    ``(p - q)^+ / Z``. Exact law: ``specdec.step.output_law(p, q, tokenrule.DROP_REJECTED)``.
    """
    x = int(draw(q, rng.random()))
    if speculative_accept(p[x], q[x], rng.random()):
        return x
    rest = np.array(p, dtype=np.float64)
    rest[x] = 0.0  # BUG: should be the residual (p - q)^+ / Z
    return int(draw(rest / rest.sum(), rng.random()))


@token_sampler
def shared_uniform(p, q, rng):
    """Bug 6: the accept test's uniform is reused to draw from the residual.

    After a rejection of ``x`` that uniform is uniform on ``[a(x), 1)``, not on ``[0, 1)``,
    so the inverse-CDF draw favours the residual's last tokens. Invisible when the
    residual is a point mass (the article's example); the battery's ``spread_residual``
    case is built to show it. Exact law: ``specdec.step.output_law(p, q,
    tokenrule.SHARED_UNIFORM)``.
    """
    x = int(draw(q, rng.random()))
    u = rng.random()
    if speculative_accept(p[x], q[x], u):
        return x
    return int(draw(token.residual(p, q), u))  # BUG: u is not a fresh uniform


# --------------------------------------------------------------------------------------
# Block-level bugs (one speculative cycle over toy autoregressive models)
# --------------------------------------------------------------------------------------


def _propose(draft, context: tuple, k: int, rng) -> list[int]:
    """Draft up to ``k`` tokens autoregressively after ``context`` (stop after end-of-sequence)."""
    tokens: list[int] = []
    while len(tokens) < k and (draft.eos is None or draft.eos not in tokens):
        tokens.append(int(draw(draft.next_law(context + tuple(tokens)), rng.random())))
    return tokens


def _verify_block(ps: list, qs: list, proposals: list[int], rng, eos, u_accept=None):
    """Verify one cycle's proposals with the kernel; no bonus token after an end-of-sequence.

    ``ps[i]`` and ``qs[i]`` are the target and draft laws the verifier uses at position
    ``i`` (``ps`` has one more entry, for the bonus token). Returns the emitted tokens and
    the number of accepted proposals.
    """
    if eos is not None and proposals[-1] == eos:        # the text ended: no bonus token
        ps = ps[:-1]
    out = verify(np.array(ps)[None], np.array(qs)[None], np.array([proposals]), rng=rng,
                 u_accept=u_accept)
    return out.tokens[0, :out.n_emitted[0]].tolist(), int(out.n_accepted[0])


@block_sampler
class StaleProposalsSampler:
    """Bug 7: proposals drafted after a rejection are reused in the next cycle.

    After a rejection at position i, the proposals ``x_{i+1}, ...`` were drafted on a
    context that contains the rejected token. This sampler keeps them and proposes them
    first in the next cycle, asking the draft for their probabilities on the new
    (corrected) context, as a draft forward pass over the proposed block would. The ratio
    then uses a law the tokens were not drawn from. (Reusing them *with* the probabilities
    they were drawn with would be exact: any proposal mechanism is, if the ratio uses its
    true conditional law. ``specdec.rules.cycle`` calls that cycle rule ``STALE_ORIGINAL_Q``; this
    bug is its ``STALE_PROPOSALS``.)

    Callable as ``sampler(target, draft, prefix, gamma, rng) -> (emitted, accepted,
    proposed)``; ``reset()`` forgets the leftovers (the kit calls it before every decode).
    """

    def __init__(self):
        self.leftover: list[int] = []

    def reset(self) -> None:
        self.leftover = []

    def __call__(self, target, draft, prefix, gamma, rng):
        prefix = tuple(prefix)
        proposals = self.leftover[:gamma]                                  # BUG: stale tokens
        if target.eos not in proposals:
            proposals += _propose(draft, prefix + tuple(proposals), gamma - len(proposals), rng)
        qs = [draft.next_law(prefix + tuple(proposals[:i])) for i in range(len(proposals))]
        ps = [target.next_law(prefix + tuple(proposals[:i])) for i in range(len(proposals) + 1)]
        emitted, n_acc = _verify_block(ps, qs, proposals, rng, target.eos)
        self.leftover = proposals[n_acc + 1:]                              # BUG: kept
        return emitted, n_acc, len(proposals)


@block_sampler
class NoRollbackSampler:
    """Bug 8: the target's cache is not rolled back after a rejection.

    The target's cache holds the tokens it has scored. After a rejection at position i,
    the entries for ``x_i, x_{i+1}, ...`` must be dropped before the corrected token is
    appended; this sampler forgets to, so every later target law is conditioned on a
    context with rejected tokens in it (the wrong last tokens and the wrong position).
    The draft's cache is rolled back correctly, and the emitted text looks right; its law
    is not. (``specdec.rules.cycle.NO_ROLLBACK`` forgets both caches.)

    Callable as ``sampler(target, draft, prefix, gamma, rng) -> (emitted, accepted,
    proposed)``; ``reset()`` empties the cache (the kit calls it before every decode).
    """

    def __init__(self):
        self.cache: tuple[int, ...] | None = None

    def reset(self) -> None:
        self.cache = None

    def __call__(self, target, draft, prefix, gamma, rng):
        prefix = tuple(prefix)
        if self.cache is None:
            self.cache = prefix
        proposals = _propose(draft, prefix, gamma, rng)
        qs = [draft.next_law(prefix + tuple(proposals[:i])) for i in range(len(proposals))]
        ps = [target.next_law(self.cache + tuple(proposals[:i]))            # the target reads
              for i in range(len(proposals) + 1)]                           # its cache
        emitted, n_acc = _verify_block(ps, qs, proposals, rng, target.eos)
        if n_acc < len(proposals):
            self.cache += tuple(proposals) + (emitted[-1],)  # BUG: should keep proposals[:n_acc]
        else:
            self.cache += tuple(emitted)
        return emitted, n_acc, len(proposals)


@block_sampler
def overcounting_cycle(target, draft, prefix, gamma, rng):
    """Accounting bug: accepts after the first rejection are counted as accepted.

    The emitted tokens are right (their law is exact); the reported number of accepted
    proposals is not: a cycle whose accept tests read [accept, reject, accept, accept]
    emits 2 tokens and must report 1 accepted proposal, not 3. The acceptance rate
    accepted / proposed is inflated.

    Returns
    -------
    (list of int, int, int)
        Emitted tokens, reported accepted count, proposed count.
    """
    prefix = tuple(prefix)
    proposals = _propose(draft, prefix, gamma, rng)
    k = len(proposals)
    qs = [draft.next_law(prefix + tuple(proposals[:i])) for i in range(k)]
    ps = [target.next_law(prefix + tuple(proposals[:i])) for i in range(k + 1)]
    u = rng.random((1, k))
    passed = [speculative_accept(ps[i][x], qs[i][x], u[0, i])
              for i, x in enumerate(proposals)]                  # every position is tested
    emitted, n_acc = _verify_block(ps, qs, proposals, rng, target.eos, u_accept=u)
    return emitted, sum(passed), k                               # BUG: should be n_acc


@block_sampler(vectorised=True)
def library_generation(target, draft, prefix, gamma, length, rng, n):
    """The library's vectorised block engine (:func:`specdec.simulate.cycle.simulate_generation`)."""
    from specdec.simulate import cycle as block

    return block.simulate_generation(target, draft, prefix, gamma, length, n, rng)


# --------------------------------------------------------------------------------------
# The gallery, as data
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GalleryEntry:
    """One sampler of the gallery.

    Attributes
    ----------
    key : str
        Short identifier.
    number : int
        Bug number in the appendix (0 for correct samplers).
    title : str
        What it does, in a few words.
    make : callable
        ``make() -> sampler`` (a fresh instance for stateful samplers).
    kind : str
        ``"token"`` or ``"block"``.
    exact : callable or None
        ``exact(case) -> law``: the exact output law of the sampler on a battery case,
        computed independently of any sampling (a ``(V,)`` array for token cases, a
        ``{sequence: probability}`` dict for block cases); ``None`` where the library has
        no such computation.
    """

    key: str
    number: int
    title: str
    make: Callable[[], Callable]
    kind: str
    exact: Callable | None = None

    def exact_tv(self, case) -> float | None:
        """Exact TV distance between the sampler's output law and the target, on ``case``."""
        if self.exact is None:
            return None
        law = self.exact(case)
        if self.kind == "token":
            return laws.tv_distance(law, case.p)
        from specdec import models

        return laws.law_tv(law, models.sequence_law(case.target, case.prefix, case.length))


def _block_library():
    from specdec.simulate import cycle as block

    return block.speculative_cycle


def _settings(case) -> dict:
    return dict(temperature=case.temperature, top_k=case.top_k, top_p=case.top_p)


def _accept(p, q) -> np.ndarray:
    """min(1, p/q), 1 where q = 0 (never proposed)."""
    return token.acceptance_probabilities(p, q)


def _exact_greedy(case) -> np.ndarray:
    g = int(np.argmax(case.draft_logits))
    point = np.zeros_like(case.q)
    point[g] = 1.0
    return token.mixture_law(point, _accept(case.p, case.q), token.residual(case.p, case.q))


def _exact_truncated(case) -> np.ndarray:
    q_full = laws.softmax(case.draft_logits, case.temperature)
    return token.mixture_law(case.q, _accept(case.p, q_full), token.residual(case.p, q_full))


def _exact_untempered(case) -> np.ndarray:
    return laws.sampling_law(case.target_logits, **dict(_settings(case), temperature=1.0))


def _exact_stale(case) -> dict:
    return stateful.block_sequence_law(case.target, case.draft, case.prefix, case.gamma, case.length,
                                       stateful.STALE_PROPOSALS)


def _exact_target(case):
    from specdec import models

    if hasattr(case, "p"):
        return case.p
    return models.sequence_law(case.target, case.prefix, case.length)


#: The correct samplers, which must pass.
CORRECT_SAMPLERS: tuple[GalleryEntry, ...] = (
    GalleryEntry("library_step", 0, "library step (specdec.step.sample_step)",
                 lambda: token.sample_step, "token", _exact_target),
    GalleryEntry("library_vectorised", 0, "library engine (simulate_tokens), vectorised",
                 lambda: library_vectorised, "token", _exact_target),
    GalleryEntry("vectorised_correct", 0, "vectorised sampler of this module",
                 lambda: vectorised_correct, "token", _exact_target),
    GalleryEntry("processed_correct", 0, "from logits, same processing for both laws",
                 lambda: processed_correct, "token", _exact_target),
    GalleryEntry("library_cycle", 0, "library cycle (specdec.simulate.cycle.speculative_cycle)",
                 _block_library, "block", _exact_target),
    GalleryEntry("library_generation", 0, "library block engine (simulate_generation), vectorised",
                 lambda: library_generation, "block", _exact_target),
)

#: The buggy samplers, each of which must be caught.
BUGS: tuple[GalleryEntry, ...] = (
    GalleryEntry("always_accept", 1, "accept test always passes", lambda: always_accept, "token",
                 lambda case: case.q),
    GalleryEntry("greedy_draft", 2, "greedy draft, ratio on its softmax", lambda: greedy_draft,
                 "token", _exact_greedy),
    GalleryEntry("truncated_draft", 3, "draft samples top-k/top-p, ratio untruncated",
                 lambda: truncated_draft, "token", _exact_truncated),
    GalleryEntry("untempered_target", 4, "temperature on the draft only", lambda: untempered_target,
                 "token", _exact_untempered),
    GalleryEntry("drop_rejected", 5, "recovery: p without the rejected token",
                 lambda: drop_rejected, "token",
                 lambda case: token.output_law(case.p, case.q, tokenrule.DROP_REJECTED)),
    GalleryEntry("shared_uniform", 6, "one uniform for test and residual", lambda: shared_uniform,
                 "token", lambda case: token.output_law(case.p, case.q, tokenrule.SHARED_UNIFORM)),
    GalleryEntry("stale_proposals", 7, "stale proposals reused next cycle", StaleProposalsSampler, "block",
                 _exact_stale),
    GalleryEntry("no_rollback", 8, "target cache not rolled back", NoRollbackSampler, "block"),
    GalleryEntry("overcounting", 9, "accounting: accepts after a rejection counted",
                 lambda: overcounting_cycle, "block", _exact_target),
)


# --------------------------------------------------------------------------------------
# Samplers for the conformance kit's conventions (Issue: the kit on real implementations)
# --------------------------------------------------------------------------------------


@token_sampler(vectorised=True)
def argmax_draft(p, q, rng, n):
    """Correct, with its own proposals: the draft proposes its arg-max, the ratio uses that point mass.

    The proposal law is the point mass ``delta`` on ``x* = argmax q``; the step accepts
    ``x*`` with probability ``min(1, p(x*) / 1)`` and otherwise draws from the residual
    ``(p - delta)+ / Z``, which is ``p`` without ``x*``, renormalised. The output law is
    exactly ``p`` (Leviathan et al. 2023, App. A.1, with ``q = delta``), but the accepted
    flags cannot follow the joint law of proposals drawn from ``q``: the kit must detect
    that the proposals come from another law and not call the accounting wrong. Compare
    bug 2, :func:`greedy_draft`, which makes the same proposal but puts ``q`` in the ratio.
    """
    star = int(np.argmax(q))
    point = np.zeros_like(p)
    point[star] = 1.0
    return _verify(p, point, np.full(n, star), rng)


@block_sampler(vectorised=True)
def past_eos_generation(target, draft, prefix, gamma, length, rng, n):
    """Bug: a vectorised block engine that does not stop at end-of-sequence.

    Decodes ``length`` tokens whatever they are: after an accepted end-of-sequence
    proposal, the proposals drafted after it are emitted too, and decoding goes on. The
    tokens up to the first end-of-sequence follow the exact law, so only a check for
    tokens after it catches the bug.
    """
    import dataclasses as _dc

    from specdec.simulate import cycle as block

    no_eos = [_dc.replace(m, eos=None) for m in (target, draft)]
    out = block.simulate_generation(*no_eos, prefix, gamma, length, n, rng)
    return out.tokens


def _batch_verify(target_logits, draft_probs, draft_tokens, n_draft, settings, rng,
                  row_settings):
    """Batched verification in the flattened ragged layout of :func:`specdec.conformance.batch_sampler`.

    Each request's target rows are turned into laws with ``row_settings(r)`` (rows with
    identical settings and logits are processed once); a greedy request's law is the
    point mass on the arg-max, which the exact rule then accepts iff the proposal is the
    arg-max and otherwise corrects to it. The rows go to the one kernel,
    :func:`specdec.verify.verify`, padded to the longest draft.
    """
    n_draft = np.asarray(n_draft, dtype=np.int64)
    R, V = n_draft.size, target_logits.shape[1]
    reps = n_draft + 1
    t_start = np.concatenate([[0], np.cumsum(reps)[:-1]])
    d_start = np.concatenate([[0], np.cumsum(n_draft)[:-1]])
    greedy = np.asarray(settings["greedy"], dtype=bool)
    p_flat = np.empty_like(target_logits)
    owner = np.repeat(np.arange(R), reps)
    groups: dict = {}
    for r in range(R):
        groups.setdefault(("greedy",) if greedy[r] else row_settings(r), []).append(r)
    for key, reqs in groups.items():
        rows = np.flatnonzero(np.isin(owner, reqs))
        if key == ("greedy",):
            point = np.zeros((rows.size, V))
            point[np.arange(rows.size), np.argmax(target_logits[rows], axis=1)] = 1.0
            p_flat[rows] = point
        else:                                # identical rows are processed once
            t, k, tp = key
            uniq, inverse = np.unique(target_logits[rows], axis=0, return_inverse=True)
            p_flat[rows] = laws.sampling_laws(uniq, temperature=t, top_k=k, top_p=tp)[inverse.ravel()]
    gamma = int(n_draft.max())
    pos = np.arange(gamma + 1)[None, :]
    p = np.zeros((R, gamma + 1, V))
    live = pos <= n_draft[:, None]
    p[live] = p_flat[(t_start[:, None] + pos)[live]]
    q = np.zeros((R, gamma, V))
    props = np.zeros((R, gamma), dtype=np.int64)
    live_q = pos[:, :gamma] < n_draft[:, None]
    src = (d_start[:, None] + pos[:, :gamma])[live_q]
    q[live_q] = draft_probs[src]
    props[live_q] = np.asarray(draft_tokens, dtype=np.int64)[src]
    q[~live_q] = 1.0 / V                     # ignored positions: any law
    out = verify(p, q, props, n_draft, rng)
    return out.tokens, out.n_emitted


def _row_settings(settings):
    def get(r):
        k = int(settings["top_k"][r])
        tp = float(settings["top_p"][r])
        return (float(settings["temperature"][r]), k or None, None if tp >= 1 else tp)
    return get


@batch_sampler
def batch_correct(target_logits, draft_probs, draft_tokens, n_draft, settings, rng):
    """Correct batched verification: every request with its own settings, ragged drafts.

    The flattened layout of vLLM's rejection sampler (one target row per proposal plus a
    bonus row per request); greedy requests accept a proposal iff it is the target's
    arg-max and emit the arg-max.
    """
    return _batch_verify(target_logits, draft_probs, draft_tokens, n_draft, settings, rng,
                         _row_settings(settings))


@batch_sampler
def batch_row0_temperature(target_logits, draft_probs, draft_tokens, n_draft, settings, rng):
    """Bug: the first request's temperature is applied to every request of the batch.

    A batch shares one sampling-parameter object, read once (``settings[0]``) instead of
    per row; the requests whose temperature differs get the wrong target law.
    """
    get = _row_settings(settings)
    t0 = float(settings["temperature"][0])

    def wrong(r):
        _, k, tp = get(r)
        return (t0, k, tp)                  # BUG: row 0's temperature for every request

    return _batch_verify(target_logits, draft_probs, draft_tokens, n_draft, settings, rng, wrong)
