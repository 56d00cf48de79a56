"""Decoding real models: autoregressive baseline and exact speculative sampling.

Both decoders work on a batch of requests (B prompts decoded together; B = 1 is the
usual single-request case) with the numpy transformers of :mod:`specdec.nn`, and turn
logits into the law actually sampled from with :func:`specdec.laws.sampling_law`, with
the same settings for target and draft (:class:`SamplingSettings`). The speculative
decoder is the algorithm of Leviathan et al. (2023):

1. the draft proposes gamma tokens autoregressively, each sampled from its law q;
2. the target scores the confirmed tail and the gamma proposals in **one** forward pass
   (gamma + 1 positions), giving the target laws p at every proposal and one more;
3. proposals are accepted left to right; at the first rejection a token is drawn from
   the residual and the cycle ends; if all gamma are accepted, a bonus token is drawn
   from the target law after the last proposal (the kernel :func:`specdec.verify.verify`,
   one row per live request);
4. both caches are rolled back (:meth:`specdec.nn.KVCache.truncate`) to the confirmed
   prefix; the draft's proposals after a rejection are discarded, never reused.

The verification is the library's kernel: there is no second implementation of the
acceptance step here, and every token is drawn with :func:`specdec.verify.draw`.

Time stamps: every decoder takes a ``clock`` (default :func:`time.perf_counter`) and
records when each token became available to the caller, so the measurement harness
(:mod:`specdec.measure`) can compute time to first token and inter-token latencies; a
fake clock makes them deterministic in tests. Tokens emitted by the same speculative
cycle share one time stamp.

References
----------
Leviathan, Kalman, Matias (2023), Fast Inference from Transformers via Speculative
Decoding, ICML, PMLR 202, Algorithm 1 and section 2.3.
Chen et al. (2023), Accelerating Large Language Model Decoding with Speculative Sampling,
arXiv:2302.01318, Algorithm 2.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from specdec.rules import base as cycles
from specdec import laws
from specdec.nn import KVCache, Transformer, decode as decode_bytes, encode
from specdec.verify import check_rng, draw, verify

__all__ = [
    "SamplingSettings",
    "Decoded",
    "as_prompts",
    "autoregressive",
    "speculative",
    "stepwise",
    "target_sequence_law",
    "real_paths",
]


@dataclass(frozen=True)
class SamplingSettings:
    """Logit post-processing applied identically to target and draft.

    Parameters
    ----------
    temperature : float
        ``>= 0``; 0 is greedy decoding.
    top_k : int or None
    top_p : float or None

    Examples
    --------
    >>> SamplingSettings(temperature=0).law(np.array([0.0, 2.0, 1.0])).tolist()
    [0.0, 1.0, 0.0]
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        # validate once, with the library's own checks
        laws.sampling_law(np.zeros(2), temperature=self.temperature,
                          top_k=None if self.top_k is None else min(self.top_k, 2),
                          top_p=self.top_p)
        if self.top_k is not None:
            laws.check_int(self.top_k, "top_k", minimum=1)

    def law(self, logits: np.ndarray) -> np.ndarray:
        """The sampled law (V,) from one logit vector (V,)."""
        return laws.sampling_law(logits, temperature=self.temperature, top_k=self.top_k,
                                 top_p=self.top_p)

    def laws(self, logits: np.ndarray) -> np.ndarray:
        """The sampled laws (N, V) of logit vectors (N, V), one per row, at once.

        Row ``i`` equals ``self.law(logits[i])`` exactly; see
        :func:`specdec.laws.sampling_laws`, which raises :class:`specdec.laws.LawError`
        naming the offending row.

        Examples
        --------
        >>> s = SamplingSettings(temperature=0.5)
        >>> z = np.array([[0.0, 1.0, 2.0], [3.0, 0.0, -np.inf]])
        >>> bool(np.array_equal(s.laws(z), np.stack([s.law(z[0]), s.law(z[1])])))
        True
        """
        return laws.sampling_laws(logits, temperature=self.temperature, top_k=self.top_k,
                                  top_p=self.top_p)

    def to_dict(self) -> dict:
        """The settings as a JSON-ready dict (``temperature``, ``top_k``, ``top_p``)."""
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}


@dataclass(frozen=True)
class Decoded:
    """Result of decoding a batch of requests.

    Attributes
    ----------
    prompts : tuple of tuple of int
        The prompt tokens of each request.
    tokens : tuple of tuple of int
        Emitted tokens of each request (prompt excluded), ``max_new_tokens`` each.
    start : float
        Clock reading when decoding started (requests submitted), seconds.
    emit_times : tuple of tuple of float
        Clock reading when each emitted token became available, seconds.
    end : float
        Clock reading when the whole batch was done, seconds.
    cycles : tuple of int
        Target forward passes per request after the prompt (autoregressive: one per
        token; speculative: one per cycle).
    accepted, proposed : tuple of int
        Draft tokens accepted and proposed per request (0 for autoregressive). Proposals
        made in the last cycle beyond ``max_new_tokens`` are counted as proposed.
    gamma : int or None
        Draft length (None for autoregressive decoding).
    accepted_lengths : tuple of tuple of int
        Per request, the number of proposals accepted in each cycle (0 to gamma);
        empty for autoregressive decoding.
    pass_seconds : dict
        Clock time spent inside forward passes of the whole batch, measured in situ:
        ``{"prefill": s, "target": s, "draft": s}`` and the matching pass counts
        ``{"target_passes": n, "draft_passes": n}``. Target passes exclude the prefill
        (autoregressive: one per token after the first; speculative: one block of
        gamma + 1 positions per cycle); draft passes are single steps.
    """

    prompts: tuple[tuple[int, ...], ...]
    tokens: tuple[tuple[int, ...], ...]
    start: float
    emit_times: tuple[tuple[float, ...], ...]
    end: float
    cycles: tuple[int, ...]
    accepted: tuple[int, ...]
    proposed: tuple[int, ...]
    gamma: int | None = None
    accepted_lengths: tuple[tuple[int, ...], ...] = ()
    pass_seconds: dict = field(default_factory=dict)

    @property
    def texts(self) -> list[str]:
        """Emitted text of each request (UTF-8, invalid bytes replaced)."""
        return [decode_bytes(t) for t in self.tokens]

    @property
    def acceptance(self) -> float:
        """Accepted / proposed over the batch (nan for autoregressive decoding)."""
        proposed = sum(self.proposed)
        return sum(self.accepted) / proposed if proposed else float("nan")


def as_prompts(prompts) -> list[np.ndarray]:
    """Normalise prompts to a list of int64 token arrays.

    A single prompt (str, bytes or a 1-D sequence of ints) becomes a list of one.

    Raises
    ------
    ValueError
        Empty prompt list, empty prompt, or ids outside [0, 256).
    """
    if isinstance(prompts, (str, bytes)) or (
            isinstance(prompts, np.ndarray) and prompts.ndim == 1) or (
            isinstance(prompts, Sequence) and len(prompts) and isinstance(prompts[0], (int, np.integer))):
        prompts = [prompts]
    out = []
    for p in prompts:
        if isinstance(p, str):
            arr = encode(p)
        elif isinstance(p, bytes):
            arr = np.frombuffer(p, dtype=np.uint8).astype(np.int64)
        else:
            arr = np.asarray(p, dtype=np.int64).reshape(-1)
        if arr.size == 0:
            raise ValueError("prompts: every prompt needs at least one token")
        if arr.min() < 0 or arr.max() > 255:
            raise ValueError("prompts: token ids must lie in [0, 256)")
        out.append(arr)
    if not out:
        raise ValueError("prompts: need at least one prompt")
    return out


def _pad(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    if len(rows) == 1 and rows[0]:              # batch 1, the latency-critical case
        return np.array(rows, dtype=np.int64), np.array([len(rows[0])], dtype=np.int64)
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    out = np.zeros((len(rows), max(1, int(lengths.max()))), dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out, lengths


def _prefill(model: Transformer, prompts: list[np.ndarray], drop_last: bool,
             capacity: int) -> tuple[KVCache, np.ndarray | None]:
    """Cache of the prompts (without their last token if ``drop_last``) and last logits."""
    rows = [list(p[:-1]) if drop_last else list(p) for p in prompts]
    b = len(rows)
    if all(len(r) == 0 for r in rows):
        return model.new_cache(b, capacity), None
    if b > 1 and all(np.array_equal(prompts[0], p) for p in prompts[1:]):
        one = model.new_cache(1, capacity)
        logits = model.forward(np.array([rows[0]]), one)
        return one.repeat(b), np.repeat(logits[:, -1], b, axis=0)
    cache = model.new_cache(b, capacity)
    x, lengths = _pad(rows)
    logits = model.forward(x, cache, lengths=lengths)
    last = logits[np.arange(b), np.maximum(lengths - 1, 0)]
    return cache, last


def _check_budget(model: Transformer, prompts: list[np.ndarray], max_new_tokens: int,
                  extra: int) -> None:
    longest = max(p.size for p in prompts)
    if longest + max_new_tokens + extra > model.config.context:
        raise ValueError(
            f"max_new_tokens: prompt ({longest}) + max_new_tokens ({max_new_tokens})"
            + (f" + gamma ({extra})" if extra else "")
            + f" exceeds the context of {model.name} ({model.config.context})")


def autoregressive(model: Transformer, prompts, max_new_tokens: int, rng: np.random.Generator,
                   settings: SamplingSettings = SamplingSettings(), *,
                   clock: Callable[[], float] = time.perf_counter) -> Decoded:
    """Target-only sampling: one forward pass per emitted token (the baseline).

    Parameters
    ----------
    model : Transformer
    prompts : str, bytes, sequence of int, or a list of those
        One prompt per request; all are decoded together (batch B).
    max_new_tokens : int
        Tokens emitted per request (no early stop).
    rng : numpy.random.Generator or int
        Source of randomness (a seed makes a fresh Generator, see
        :func:`specdec.verify.check_rng`).
    settings : SamplingSettings
    clock : callable returning seconds

    Returns
    -------
    Decoded

    Raises
    ------
    ValueError
        Bad prompts, ``max_new_tokens < 1``, or a sequence that would exceed the context.
    TypeError
        ``rng`` neither a Generator nor a seed.
    """
    max_new_tokens = laws.check_int(max_new_tokens, "max_new_tokens", minimum=1)
    rng = check_rng(rng)
    prompts = as_prompts(prompts)
    _check_budget(model, prompts, max_new_tokens, 0)
    b = len(prompts)
    start = clock()
    capacity = max(p.size for p in prompts) + max_new_tokens + 1
    cache, logits = _prefill(model, prompts, drop_last=False, capacity=capacity)
    t_prefill = clock() - start
    t_target = 0.0
    out: list[list[int]] = [[] for _ in range(b)]
    times: list[list[float]] = [[] for _ in range(b)]
    for step in range(max_new_tokens):
        if step:
            t0 = clock()
            logits = model.forward(np.array([[o[-1]] for o in out]), cache)[:, -1]
            t_target += clock() - t0
        for i in range(b):
            out[i].append(draw(settings.law(logits[i]), rng.random()))
        now = clock()
        for i in range(b):
            times[i].append(now)
    end = clock()
    return Decoded(prompts=tuple(tuple(int(t) for t in p) for p in prompts),
                   tokens=tuple(tuple(o) for o in out), start=start,
                   emit_times=tuple(tuple(t) for t in times), end=end,
                   cycles=(max_new_tokens,) * b, accepted=(0,) * b, proposed=(0,) * b,
                   gamma=None, pass_seconds={"prefill": t_prefill, "target": t_target,
                                             "draft": 0.0, "target_passes": max_new_tokens - 1,
                                             "draft_passes": 0})


@dataclass
class _Row:
    seq: list[int]
    emitted: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    cycles: int = 0
    accepted: int = 0
    proposed: int = 0
    lengths: list[int] = field(default_factory=list)


def speculative(target: Transformer, draft: Transformer, prompts, max_new_tokens: int,
                gamma: int, rng: np.random.Generator,
                settings: SamplingSettings = SamplingSettings(), *,
                clock: Callable[[], float] = time.perf_counter) -> Decoded:
    """Exact speculative sampling with draft length ``gamma``.

    The emitted tokens have the same law as :func:`autoregressive` with the target and
    the same ``settings`` (the output law is preserved; the random stream differs, so
    the same seed gives different strings).

    Parameters
    ----------
    target, draft : Transformer
        Same vocabulary (byte tokens, so every id means the same event in both).
    prompts : str, bytes, sequence of int, or a list of those
        One prompt per request; all are decoded together. Requests that reach
        ``max_new_tokens`` leave the batch (their cache rows are dropped).
    max_new_tokens : int
        Tokens emitted per request; the last cycle's surplus is cut.
    gamma : int
        Draft length, ``>= 1``.
    rng : numpy.random.Generator or int
        Source of randomness (see :func:`specdec.verify.check_rng`).
    settings : SamplingSettings
        Applied to both models' logits.
    clock : callable returning seconds

    Returns
    -------
    Decoded

    Raises
    ------
    ValueError
        Mismatched vocabularies, bad prompts, ``gamma < 1``, ``max_new_tokens < 1``,
        or a sequence that would exceed either model's context.
    TypeError
        ``rng`` neither a Generator nor a seed.

    References
    ----------
    Leviathan, Kalman, Matias (2023), Algorithm 1.
    """
    gamma = laws.check_int(gamma, "gamma", minimum=1)
    max_new_tokens = laws.check_int(max_new_tokens, "max_new_tokens", minimum=1)
    rng = check_rng(rng)
    if target.config.vocab_size != draft.config.vocab_size:
        raise ValueError(f"draft: vocabulary size {draft.config.vocab_size} does not match "
                         f"the target ({target.config.vocab_size})")
    prompts = as_prompts(prompts)
    _check_budget(target, prompts, max_new_tokens, gamma)
    _check_budget(draft, prompts, max_new_tokens, gamma)
    b = len(prompts)
    start = clock()
    # Both caches hold the prompt without its last token: every cycle starts by feeding
    # the confirmed tokens each model has not seen yet ("pending"), then the proposals.
    capacity = max(p.size for p in prompts) + max_new_tokens + 2 * gamma + 2
    tcache, _ = _prefill(target, prompts, drop_last=True, capacity=capacity)
    dcache, _ = _prefill(draft, prompts, drop_last=True, capacity=capacity)
    passes = {"prefill": clock() - start, "target": 0.0, "draft": 0.0,
              "target_passes": 0, "draft_passes": 0}
    rows = [_Row(seq=[int(t) for t in p]) for p in prompts]
    live = list(range(b))                       # row index of each cache row
    while live:
        n = len(live)
        props: list[list[int]] = [[] for _ in range(n)]
        qs: list[list[np.ndarray]] = [[] for _ in range(n)]
        # 1. draft proposals, autoregressive, gamma forward passes of the draft
        for _ in range(gamma):
            feed = [(rows[r].seq + props[j])[int(dcache.lengths[j]):] for j, r in enumerate(live)]
            x, lengths = _pad(feed)
            t0 = clock()
            logits = draft.forward(x, dcache, lengths=lengths)
            passes["draft"] += clock() - t0
            passes["draft_passes"] += 1
            q_now = settings.laws(logits[np.arange(n), lengths - 1])     # (n, V)
            for j, x_j in enumerate(draw(q_now, rng.random(n)).tolist()):
                props[j].append(x_j)
                qs[j].append(q_now[j])
        # 2. the target scores pending tokens + gamma proposals in one pass
        feed = [(rows[r].seq + props[j])[int(tcache.lengths[j]):] for j, r in enumerate(live)]
        x, lengths = _pad(feed)
        t0 = clock()
        logits = target.forward(x, tcache, lengths=lengths)
        passes["target"] += clock() - t0
        passes["target_passes"] += 1
        # 3. accept / correct / bonus, every live row at once, with the library's kernel
        off = lengths - gamma - 1                # logits index of the law at proposal 0
        at = off[:, None] + np.arange(gamma + 1)
        p_all = settings.laws(logits[np.arange(n)[:, None], at].reshape(n * (gamma + 1), -1))
        out = verify(p_all.reshape(n, gamma + 1, -1), np.array(qs), np.array(props), rng=rng)
        keep_t = np.empty(n, dtype=np.int64)
        for j, r in enumerate(live):
            row = rows[r]
            n_acc = int(out.n_accepted[j])
            new = out.tokens[j, :n_acc + 1].tolist()
            row.cycles += 1
            row.proposed += gamma
            row.accepted += n_acc
            row.lengths.append(n_acc)
            confirmed = len(row.seq) + n_acc    # positions both caches may keep
            room = max_new_tokens - len(row.emitted)
            row.emitted.extend(new[:room])
            row.seq.extend(new[:room])
            keep_t[j] = min(confirmed, len(row.seq))
        now = clock()
        # 4. roll back the unconfirmed tail of both caches
        tcache.truncate(np.minimum(tcache.lengths, keep_t))
        dcache.truncate(np.minimum(dcache.lengths, keep_t))
        for j, r in enumerate(live):
            rows[r].times.extend([now] * (len(rows[r].emitted) - len(rows[r].times)))
        done = [j for j, r in enumerate(live) if len(rows[r].emitted) >= max_new_tokens]
        if done:
            stay = [j for j in range(n) if j not in done]
            live = [live[j] for j in stay]
            if live:
                tcache, dcache = tcache.select(stay), dcache.select(stay)
    end = clock()
    return Decoded(prompts=tuple(tuple(int(t) for t in p) for p in prompts),
                   tokens=tuple(tuple(r.emitted) for r in rows), start=start,
                   emit_times=tuple(tuple(r.times) for r in rows), end=end,
                   cycles=tuple(r.cycles for r in rows),
                   accepted=tuple(r.accepted for r in rows),
                   proposed=tuple(r.proposed for r in rows), gamma=gamma,
                   accepted_lengths=tuple(tuple(r.lengths) for r in rows),
                   pass_seconds=passes)


def stepwise(target: Transformer, draft: Transformer, prompts, max_new_tokens: int, rule,
             rng: np.random.Generator,
             settings: SamplingSettings = SamplingSettings()) -> list[tuple[int, ...]]:
    """One token per step by a token-by-token rule: a reference decoder for its law.

    At every step the draft proposes one token and ``rule`` (a
    :class:`specdec.rules.token.TokenByToken`: the exact rule, or one of its flaws in
    ``specdec.rules.token.STEP_FLAWS``) accepts it or draws the replacement
    (:meth:`~specdec.rules.token.TokenByToken.sample_step`), with the target's and the
    draft's laws under ``settings`` given everything before. With the exact rule each
    token is a draw from the target's law; with a flaw, from that flaw's step law, so
    the output of a flawed rule is a positive control for a per-token check
    (:mod:`specdec.stats.pertoken`). Every step runs both models over the whole sequence (no
    cache, one prompt at a time): meant for short runs and checks, not for speed.

    Parameters
    ----------
    target, draft : Transformer
        Same vocabulary.
    prompts : str, bytes, sequence of int, or a list of those
    max_new_tokens : int
        Tokens per request, >= 1 (prompt plus tokens within both contexts).
    rule : specdec.rules.token.TokenByToken
    rng : numpy.random.Generator or int
    settings : SamplingSettings
        Applied to both models' logits.

    Returns
    -------
    list of tuple of int
        The emitted tokens of each request, ``max_new_tokens`` each.

    Raises
    ------
    ValueError
        Mismatched vocabularies, bad prompts, ``max_new_tokens < 1``, a sequence beyond
        either context, a ``rule`` that is not a token-by-token rule.

    References
    ----------
    Leviathan, Kalman, Matias (2023), Algorithm 1 (one step, ``gamma = 1``).
    """
    from specdec.rules.token import check_token_rule

    rule = check_token_rule(rule)
    rng = check_rng(rng)
    if target.config.vocab_size != draft.config.vocab_size:
        raise ValueError("target, draft: vocabularies differ")
    rows = as_prompts(prompts)
    if not (isinstance(max_new_tokens, int) and max_new_tokens >= 1):
        raise ValueError(f"max_new_tokens: must be an integer >= 1 (got {max_new_tokens!r})")
    _check_budget(target, rows, max_new_tokens, 0)
    _check_budget(draft, rows, max_new_tokens, 0)
    out = []
    for row in rows:
        seq = np.asarray(row, dtype=np.int64)
        for _ in range(max_new_tokens):
            p = settings.laws(target.forward(seq[None])[0, -1:])[0]
            q = settings.laws(draft.forward(seq[None])[0, -1:])[0]
            seq = np.append(seq, rule.sample_step(p, q, rng))
        out.append(tuple(int(t) for t in seq[len(row):]))
    return out


def target_sequence_law(model: Transformer, prompt, length: int = 1,
                        settings: SamplingSettings = SamplingSettings()) -> np.ndarray:
    """Exact law of the first ``length`` tokens of target-only sampling after ``prompt``.

    Parameters
    ----------
    model : Transformer
    prompt : str, bytes or sequence of int
    length : int
        1 or 2.
    settings : SamplingSettings

    Returns
    -------
    numpy.ndarray
        Shape (V,) for ``length == 1``; (V, V) for ``length == 2`` with entry
        ``[x1, x2] = p(x1) p(x2 | x1)``. Sums to 1 (float64).
    """
    length = laws.check_int(length, "length", minimum=1, maximum=2)
    (prompt,) = as_prompts(prompt)
    if prompt.size + length > model.config.context:
        raise ValueError("prompt: too long for the model context")
    first = settings.law(model.forward(prompt[None])[0, -1])
    if length == 1:
        return first
    support = np.flatnonzero(first > 0)
    cache, _ = _prefill(model, [prompt], drop_last=False, capacity=prompt.size + 1)
    cache = cache.repeat(support.size)
    logits = model.forward(support[:, None], cache)[:, -1]
    joint = np.zeros((first.size, first.size))
    for i, x in enumerate(support):
        joint[x] = first[x] * settings.law(logits[i])
    return joint


def real_paths(target, draft, contexts, gamma: int, rng, settings=None, *, greedy: bool = False) -> list:
    """Draft paths of the book's real models (:mod:`specdec.nn`) from given contexts.

    For each context the draft proposes ``gamma`` tokens (sampled from its law under
    ``settings``, or greedy), and one target pass scores the ``gamma + 1`` positions. The
    returned paths carry the laws each verifier needs, so the accepted-count law of any
    chain rule given the path is exact (:func:`specdec.rules.base.path_accepted_law`); averaging over paths
    estimates the rule's accepted tokens per cycle on the real models, with the same
    drafts for every rule.

    Parameters
    ----------
    target, draft : specdec.nn.Transformer
        Same vocabulary.
    contexts : sequence of sequence of int
        Confirmed contexts (prompt and text), one path each, all of the same length
        (the models run on them as one batch).
    gamma : int
        Draft length.
    rng : numpy.random.Generator or int
    settings : specdec.decode.SamplingSettings, optional
        Applied to both models' logits (default: temperature 1).
    greedy : bool
        Greedy draft (its law is then a point mass).

    Returns
    -------
    list of specdec.rules.base.DraftPath
        ``prob`` is 1 for each (the paths are samples, not an enumeration).
    """
    settings = settings or SamplingSettings()
    gamma = laws.check_int(gamma, "gamma", minimum=1)
    rng = check_rng(rng)
    seq = np.array([[int(t) for t in c] for c in contexts], dtype=np.int64)
    if seq.ndim != 2 or seq.shape[0] == 0 or seq.shape[1] == 0:
        raise ValueError("contexts: must be a non-empty list of non-empty contexts of one length")
    n, c0 = seq.shape
    qs = []
    for _ in range(gamma):                       # one batched draft pass per position
        q = settings.laws(draft.forward(seq)[:, -1])
        if greedy:
            x = np.argmax(q, axis=1)
            q = np.zeros_like(q)
            q[np.arange(n), x] = 1.0
        else:
            x = np.asarray(draw(q, rng.random(n)), dtype=np.int64)
        qs.append(q)
        seq = np.concatenate([seq, x[:, None]], axis=1)
    logits = target.forward(seq)[:, c0 - 1:]     # one target pass: gamma + 1 positions
    out = []
    for i in range(n):
        ps = settings.laws(logits[i])
        out.append(cycles.DraftPath(tuple(int(t) for t in seq[i, c0:]), 1.0,
                             tuple(row.tolist() for row in ps), tuple(q[i].tolist() for q in qs)))
    return out
