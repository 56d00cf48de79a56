"""Exactness of a served engine, token by token: every emitted token is evidence.

Seeded responses, and every token of every response tested against the law it should have
been drawn from (:mod:`specdec.stats.pertoken`: the randomised probability integral transform, a
mean test per ordering, Holm): laws computed from the same weights
(:func:`native_responses`, :func:`model_pertoken_check`; the book's models on llama.cpp's
``/completion``) or the server's reported top log-probabilities with the rest pooled
(:func:`reported_responses`, :func:`reported_pertoken_check`; any OpenAI-compatible
server). :func:`served_pertoken_check` is one served configuration in one call;
:func:`engine_disagreement` measures the per-token TV between numpy's laws and the
engine's, the tolerance the null allows. llama.cpp reports no probabilities for the tokens
its speculative path emits, nor for tokens that end inside a UTF-8 character: the reported
laws then cannot be used (:class:`NoLogprobs` says so), the computed ones can.

The assumption-free cross-check on the first tokens of each response is
:mod:`specdec.client.exactness`. Used in Chapter 8 and by ``python -m specdec.client
--exactness``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from specdec.client.stream import ClientError, Endpoint, plain_sampling, post_all

__all__ = ["Response", "native_responses", "reported_responses", "response_law_table",
           "model_pertoken_check",
           "reported_pertoken_check", "engine_disagreement", "served_pertoken_check",
           "NoLogprobs"]

class NoLogprobs(ClientError):
    """The server returned no usable per-token probabilities (the message says why)."""


@dataclass(frozen=True)
class Response:
    """One seeded request's emitted tokens, as :func:`native_responses` or
    :func:`reported_responses` read them.

    Attributes
    ----------
    prompt : str
    seed : int
    tokens : tuple
        Emitted tokens in order: ids (native) or the keys of :func:`_entry_key`.
    stopped : bool
        The request ended before ``max_tokens`` (end of sequence, context).
    top : tuple or None
        Per position ``(keys, probabilities)`` of the tokens the server reported
        (reported responses only).
    """

    prompt: str
    seed: int
    tokens: tuple
    stopped: bool
    top: tuple | None = None


def _check_request_args(prompts, requests, max_tokens, temperature, seed):
    if isinstance(prompts, str) or not prompts or not all(
            isinstance(p, str) and p for p in prompts):
        raise ValueError("prompts: need a non-empty list of non-empty strings")
    if not (isinstance(requests, int) and requests >= 1):
        raise ValueError(f"requests: must be an integer >= 1 (got {requests!r})")
    if not (isinstance(max_tokens, int) and max_tokens >= 1):
        raise ValueError(f"max_tokens: must be an integer >= 1 (got {max_tokens!r})")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature)
            and temperature > 0):
        raise ValueError(f"temperature: must be > 0 for a per-token check (got "
                         f"{temperature!r}; at 0 every law is a point mass)")
    if not (isinstance(seed, int) and seed >= 0):
        raise ValueError(f"seed: must be an integer >= 0 (got {seed!r})")


def native_responses(endpoint: Endpoint, prompts: Sequence[str], requests: int, *,
                     max_tokens: int, temperature: float = 1.0, seed: int = 0,
                     concurrency: int = 4, extra: Mapping | None = None,
                     progress=None) -> list[Response]:
    """Token ids of ``requests`` seeded responses from llama.cpp's ``/completion``.

    Request ``k`` sends prompt ``prompts[k % len(prompts)]`` with seed ``seed + k``,
    every truncation off (:func:`~specdec.client.stream.plain_sampling`) unless ``extra``
    sets it, and ``return_tokens`` (ids of every emitted token, also those that end
    inside a UTF-8 character).

    Parameters
    ----------
    endpoint : Endpoint
    prompts : sequence of str
    requests : int
    max_tokens : int
        ``n_predict``.
    temperature : float
        > 0.
    seed : int
    concurrency : int
    extra : mapping, optional
        More request fields (e.g. ``{"top_k": 20}``).
    progress : callable, optional
        Called with 1 after each answer.

    Returns
    -------
    list of Response

    Raises
    ------
    ClientError
        A request failed or the answer has no ``tokens`` (not llama.cpp?).
    ValueError
        Bad arguments.
    """
    _check_request_args(prompts, requests, max_tokens, temperature, seed)
    bodies, seeds = [], []
    for k in range(requests):
        seeds.append(seed + k)
        bodies.append({"prompt": prompts[k % len(prompts)], "n_predict": max_tokens,
                       "return_tokens": True, "stream": False, "cache_prompt": True,
                       **plain_sampling(temperature), **dict(extra or {}),
                       "seed": seed + k})
    out = []
    for k, data in enumerate(post_all(endpoint, "/completion", bodies, concurrency=concurrency, seeds=seeds,
                                       progress=progress)):
        tokens = data.get("tokens")
        if not isinstance(tokens, list):
            raise ClientError(f"request {k} (seed {seeds[k]}) to {endpoint.url}/completion: "
                              f"no 'tokens' in the answer (not llama.cpp?)")
        out.append(Response(bodies[k]["prompt"], seeds[k], tuple(int(t) for t in tokens),
                            len(tokens) < max_tokens))
    return out


def _entry_key(e: Mapping):
    if "id" in e:
        return ("id", int(e["id"]))
    if e.get("bytes") is not None:
        return ("bytes", tuple(e["bytes"]))
    return ("token", e.get("token"))


def _entry_prob(e: Mapping) -> float:
    if "prob" in e:
        return float(e["prob"])
    return math.exp(float(e["logprob"]))


def _reported_positions(choice: Mapping, where: str) -> list[tuple]:
    """``(emitted key, top keys, top probabilities)`` per position of one choice, from
    the two formats servers use: ``logprobs.content`` (chat; llama.cpp for both APIs) and
    the legacy ``tokens``/``top_logprobs`` (OpenAI and vLLM completions)."""
    lp = choice.get("logprobs")
    if not lp:
        raise NoLogprobs(f"{where}: the answer has no log-probabilities ('logprobs' is "
                         f"{lp!r}); the per-token check needs a server that returns them")
    if isinstance(lp.get("content"), list):
        out = []
        for e in lp["content"]:
            tops = e.get("top_probs", e.get("top_logprobs")) or []
            out.append((_entry_key(e), [_entry_key(t) for t in tops],
                        [_entry_prob(t) for t in tops]))
        return out
    if isinstance(lp.get("tokens"), list) and isinstance(lp.get("top_logprobs"), list):
        out = []
        for tok, tops in zip(lp["tokens"], lp["top_logprobs"]):
            tops = tops or {}
            out.append((("token", tok), [("token", t) for t in tops],
                        [math.exp(float(v)) for v in tops.values()]))
        return out
    raise NoLogprobs(f"{where}: 'logprobs' has neither 'content' nor 'tokens' and "
                     f"'top_logprobs' (keys {sorted(lp)})")


def reported_responses(endpoint: Endpoint, prompts: Sequence[str], requests: int, *,
                       max_tokens: int, temperature: float = 1.0, seed: int = 0,
                       top_logprobs: int = 20, post_sampling_probs: bool = False,
                       concurrency: int = 4, extra: Mapping | None = None,
                       progress=None, sampling_fields: str = "all") -> list[Response]:
    """Seeded responses with the server's reported top log-probabilities per token.

    OpenAI-compatible, non-streamed: ``/v1/completions`` with ``logprobs: K``, or
    ``/v1/chat/completions`` with ``logprobs: true, top_logprobs: K`` (``endpoint.api``).
    ``post_sampling_probs`` asks llama.cpp for the probabilities after its sampling chain
    (temperature applied); without it llama.cpp, like vLLM's default, reports the model's
    raw law (temperature 1).

    Parameters
    ----------
    endpoint : Endpoint
    prompts : sequence of str
        Request ``k`` sends ``prompts[k % len(prompts)]`` with seed ``seed + k``.
    requests, max_tokens : int
    temperature : float
        > 0; every other truncation off.
    seed : int
    top_logprobs : int
        K, reported tokens per position (>= 1).
    post_sampling_probs : bool
    concurrency : int
    extra : mapping, optional
        More request fields.
    progress : callable, optional
        Called with 1 after each answer.
    sampling_fields : str
        ``"all"``: every truncation sent off; ``"temperature"``: the temperature alone
        (:func:`~specdec.client.stream.plain_sampling`).

    Returns
    -------
    list of Response
        ``tokens`` and ``top`` keyed by token id when the server reports ids (llama.cpp),
        else by the token's bytes or string.

    Raises
    ------
    NoLogprobs
        No log-probabilities in an answer, a position without reported tokens (llama.cpp
        reports none for tokens its speculative path emits), or fewer positions than
        tokens (llama.cpp drops those that end inside a UTF-8 character): the positions
        left would be chosen by the tokens themselves, and the check would be biased.
    ClientError
        A request failed.
    ValueError
        Bad arguments.
    """
    _check_request_args(prompts, requests, max_tokens, temperature, seed)
    if not (isinstance(top_logprobs, int) and top_logprobs >= 1):
        raise ValueError(f"top_logprobs: must be an integer >= 1 (got {top_logprobs!r})")
    bodies, seeds = [], []
    for k in range(requests):
        prompt = prompts[k % len(prompts)]
        body = {"max_tokens": max_tokens, "stream": False,
                **plain_sampling(temperature, sampling_fields),
                **dict(extra or {}), "seed": seed + k}
        if endpoint.api == "chat":
            body.update(messages=[{"role": "user", "content": prompt}], logprobs=True,
                        top_logprobs=top_logprobs)
        else:
            body.update(prompt=prompt, logprobs=top_logprobs)
        if post_sampling_probs:
            body["post_sampling_probs"] = True
        if endpoint.model:
            body["model"] = endpoint.model
        seeds.append(seed + k)
        bodies.append(body)
    out = []
    for k, data in enumerate(post_all(endpoint, endpoint.path, bodies, concurrency=concurrency, seeds=seeds,
                                       progress=progress)):
        where = f"request {k} (seed {seeds[k]}) to {endpoint.url}{endpoint.path}"
        choices = data.get("choices") or []
        if not choices:
            raise ClientError(f"{where}: no 'choices' in the answer")
        positions = _reported_positions(choices[0], where)
        n = (data.get("usage") or {}).get("completion_tokens")
        if n is not None and n != len(positions):
            raise NoLogprobs(f"{where}: {n} tokens emitted but {len(positions)} reported "
                             f"with probabilities (llama.cpp leaves out tokens that end "
                             f"inside a UTF-8 character); the tokens reported would be "
                             f"chosen by their values, so the check would be biased")
        empty = sum(1 for _, keys, _ in positions if not keys)
        if empty:
            raise NoLogprobs(f"{where}: {empty} of {len(positions)} positions have no "
                             f"reported top tokens (llama.cpp reports none for tokens "
                             f"emitted by its speculative path); compute the laws from "
                             f"the weights (specdec exactness model, laws='model') or use a "
                             f"server that reports every position")
        stopped = choices[0].get("finish_reason") not in ("length", None) or \
            len(positions) < max_tokens
        out.append(Response(bodies[k].get("prompt", bodies[k].get("messages", [{}])[0]
                                          .get("content")), seeds[k],
                            tuple(e for e, _, _ in positions), bool(stopped),
                            tuple((tuple(keys), tuple(ps)) for _, keys, ps in positions)))
    return out


def _padded(values: list[np.ndarray], pads: list[np.ndarray]) -> np.ndarray:
    """Per response, its transformed values then its padding (fresh uniforms)."""
    parts = [x for pair in zip(values, pads) for x in pair]
    return np.concatenate(parts) if parts else np.zeros(0)


def _pads(lengths: list[int], max_tokens: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.random(max_tokens - n) for n in lengths]


def response_law_table(responses: Sequence[Response], target, draft=None, *, settings,
                       max_tokens: int | None = None, workers: int = 1) -> dict:
    """The laws of every distinct response, one forward pass of each model over it.

    Responses with the same prompt and the same tokens (two servers sent the same seeds
    and emitted the same text) share one entry, so checks of several servers pay for
    each distinct text once.

    Parameters
    ----------
    responses : sequence of Response
        From :func:`native_responses`.
    target, draft : specdec.nn.Transformer
        ``draft`` optional (its laws give the ``draft_over_target`` ordering).
    settings : specdec.decode.SamplingSettings
    max_tokens : int, optional
        Refuse a response longer than this.
    workers : int
        Threads computing the passes (BLAS limited to one thread each), >= 1.

    Returns
    -------
    dict
        ``(prompt, tokens) -> (p, q)``: arrays of shape (len(tokens), vocabulary), ``q``
        None without a draft (:func:`specdec.stats.pertoken.response_laws`).

    Raises
    ------
    ValueError
        A response longer than ``max_tokens``; ``workers`` below 1.
    """
    from concurrent.futures import ThreadPoolExecutor

    from specdec.stats import pertoken as pt
    from specdec.measure import limit_blas_threads
    from specdec.nn import encode

    if not (isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1):
        raise ValueError(f"workers: must be an integer >= 1 (got {workers!r})")
    todo = {}
    for r in responses:
        if max_tokens is not None and len(r.tokens) > max_tokens:
            raise ValueError(f"responses: seed {r.seed} has {len(r.tokens)} tokens, more "
                             f"than max_tokens ({max_tokens})")
        todo.setdefault((r.prompt, tuple(int(t) for t in r.tokens)), None)

    def laws(key):
        prompt, toks = encode(key[0]), np.asarray(key[1], dtype=np.int64)
        p = pt.response_laws(target, prompt, toks, settings)
        q = None if draft is None else pt.response_laws(draft, prompt, toks, settings)
        return key, (p, q)

    with limit_blas_threads(1):
        if workers == 1:
            return dict(map(laws, todo))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return dict(pool.map(laws, todo))


def model_pertoken_check(responses: Sequence[Response], target, draft=None, *,
                         settings, max_tokens: int, rng, false_alarm: float = 1e-6,
                         power: float = 0.9, tolerance: float = 0.0,
                         extra: Mapping | None = None, table: Mapping | None = None):
    """Per-token check of native responses against laws computed from the same weights.

    For each response, one forward pass of ``target`` (and of ``draft``) over the prompt
    and the response gives the law of every emitted position
    (:func:`response_law_table`, :func:`specdec.stats.pertoken.response_laws`); each token is
    transformed along the orderings ``draft_over_target`` (with a draft) and ``target``
    (:func:`specdec.stats.pertoken.randomized_pit`, uniforms from ``rng``), stopped responses
    are padded with fresh uniforms, and :func:`specdec.stats.pertoken.pertoken_test` decides.

    Parameters
    ----------
    responses : sequence of Response
        From :func:`native_responses` (token ids; prompts are UTF-8 bytes, the book's
        byte-level models).
    target, draft : specdec.nn.Transformer
    settings : specdec.decode.SamplingSettings
        The law the client expects the server to sample.
    max_tokens : int
        Positions per response (the padding's length).
    rng : numpy.random.Generator
    false_alarm, power, tolerance : float
        See :func:`specdec.stats.pertoken.pertoken_test`.
    extra : mapping, optional
    table : mapping, optional
        Laws already computed (:func:`response_law_table` of the same models and
        settings); responses missing from it are computed.

    Returns
    -------
    specdec.stats.pertoken.PerTokenCheck
        ``extra`` holds ``distinct_texts`` (responses whose laws were computed here or
        looked up, counted once per distinct text).

    Raises
    ------
    ValueError
        No responses, a response longer than ``max_tokens``.
    """
    from specdec.stats import pertoken as pt
    from specdec.verify import check_rng

    rng = check_rng(rng)
    if not responses:
        raise ValueError("responses: need at least one")
    table = dict(table or {})
    vocab = target.config.vocab_size
    for key, laws in table.items():               # shapes only: the caller vouches for
        # the models and settings a table was built with
        if not (isinstance(laws, tuple) and len(laws) == 2
                and np.shape(laws[0]) == (len(key[1]), vocab)
                and (draft is None or np.shape(laws[1]) == (len(key[1]), vocab))):
            raise ValueError(f"table: the entry of the text after {key[0][:20]!r} must be "
                             f"(p, q) with p of shape ({len(key[1])}, {vocab})"
                             + (" and q likewise (a table built with the draft)"
                                if draft is not None else ""))
    missing = [r for r in responses
               if (r.prompt, tuple(int(t) for t in r.tokens)) not in table]
    table.update(response_law_table(missing, target, draft, settings=settings,
                                    max_tokens=max_tokens))
    p_laws, q_laws, tokens = [], [] if draft is not None else None, []
    for r in responses:
        key = (r.prompt, tuple(int(t) for t in r.tokens))
        if len(key[1]) > max_tokens:
            raise ValueError(f"responses: seed {r.seed} has {len(key[1])} tokens, more "
                             f"than max_tokens ({max_tokens})")
        p, q = table[key]
        p_laws.append(p)
        if draft is not None:
            q_laws.append(q)
        tokens.append(np.asarray(key[1], dtype=np.int64))
    distinct = len({(r.prompt, tuple(r.tokens)) for r in responses})
    try:
        return pt.laws_check(p_laws, tokens, max_tokens=max_tokens, rng=rng, q_laws=q_laws,
                             false_alarm=false_alarm, power=power, tolerance=tolerance,
                             extra={"settings": settings.to_dict(), "laws": "model",
                                    "target": target.name,
                                    "draft": None if draft is None else draft.name,
                                    "distinct_texts": distinct, **dict(extra or {})})
    except ValueError as exc:
        if "no tokens were emitted" in str(exc):
            raise ValueError("responses: no tokens were emitted (nothing to test)") from None
        raise


def reported_pertoken_check(responses: Sequence[Response], *, max_tokens: int, rng,
                            top_logprobs: int | None = None, false_alarm: float = 1e-6,
                            power: float = 0.9, tolerance: float = 0.0,
                            extra: Mapping | None = None):
    """Per-token check of responses against the probabilities the server reported.

    At each position the law is the reported top ``top_logprobs`` tokens with the rest
    pooled into one cell (:func:`specdec.stats.pertoken.pooled_top_cells`), ordered by the
    reported probability (the ``target`` ordering, pooled cell last); a token outside
    the top is randomised over the pooled cell as one cell.

    Parameters
    ----------
    responses : sequence of Response
        From :func:`reported_responses`.
    max_tokens : int
    rng : numpy.random.Generator
    top_logprobs : int, optional
        K of the request (cells from the K most probable reported tokens).
    false_alarm, power, tolerance : float
    extra : mapping, optional

    Returns
    -------
    specdec.stats.pertoken.PerTokenCheck
    """
    from specdec.stats import pertoken as pt
    from specdec.verify import check_rng

    rng = check_rng(rng)
    if not responses:
        raise ValueError("responses: need at least one")
    values, lengths, impossible, pooled = [], [], 0, 0
    for r in responses:
        if r.top is None:
            raise ValueError(f"responses: seed {r.seed} has no reported probabilities")
        if len(r.tokens) > max_tokens:
            raise ValueError(f"responses: seed {r.seed} has {len(r.tokens)} tokens, more "
                             f"than max_tokens ({max_tokens})")
        if not r.tokens:
            lengths.append(0)
            values.append(np.zeros(0))
            continue
        laws_, cells = pt.pooled_top_cells([k for k, _ in r.top], [p for _, p in r.top],
                                           list(r.tokens), top_logprobs)
        rows = np.arange(cells.size)
        impossible += int((laws_[rows, cells] <= 0).sum())
        pooled += int((cells == laws_.shape[1] - 1).sum())
        values.append(pt.randomized_pit(laws_, cells, rng.random(cells.size)))
        lengths.append(int(cells.size))
    pits = {"target": _padded(values, _pads(lengths, max_tokens, rng))}
    if not sum(lengths):
        raise ValueError("responses: no tokens were emitted (nothing to test)")
    return pt.pertoken_test(pits, tokens=max(1, sum(lengths)), requests=len(responses),
                            impossible=impossible, false_alarm=false_alarm, power=power,
                            tolerance=tolerance,
                            extra={"laws": "reported", "top_logprobs": top_logprobs,
                                   "max_tokens": max_tokens, "tokens_in_pooled_cell": pooled,
                                   **dict(extra or {})})


def _reported_at(tokens: Sequence[int]) -> list[int]:
    """Positions of a byte-level response that llama.cpp reports probabilities for: those
    after which the text does not end inside a UTF-8 character (its ``validate_utf8``:
    a lead byte among the last 1 to 3 bytes whose character is not complete)."""
    text, out = bytearray(), []
    for i, t in enumerate(tokens):
        text.append(int(t) & 0xFF)
        incomplete = False
        for back in range(1, min(4, len(text)) + 1):
            c = text[-back]
            need = 2 if c & 0xE0 == 0xC0 else 3 if c & 0xF0 == 0xE0 else \
                4 if c & 0xF8 == 0xF0 else 0
            if need and back < need:
                incomplete = True
                break
        if not incomplete:
            out.append(i)
    return out


def engine_disagreement(endpoint: Endpoint, prompts: Sequence[str], model, settings, *,
                        requests: int = 8, max_tokens: int = 32, seed: int = 0,
                        concurrency: int = 4) -> dict:
    """Per-token TV between the engine's probabilities and numpy's, same positions.

    llama.cpp's ``/completion`` with ``n_probs`` = the vocabulary and
    ``post_sampling_probs`` reports the law its sampler used at each position (after the
    temperature); :func:`specdec.stats.pertoken.response_laws` computes numpy's. The server
    leaves out tokens that end inside a UTF-8 character (entries are matched to positions
    by the same rule, and by token id) and reports nothing for those of its speculative
    path (empty entries are skipped): a measurement, so the choice of positions biases
    nothing.

    Parameters
    ----------
    endpoint : Endpoint
        A llama.cpp server of ``model`` (the plain server: every position reported).
    prompts : sequence of str
    model : specdec.nn.Transformer
    settings : specdec.decode.SamplingSettings
    requests, max_tokens, seed, concurrency : int

    Returns
    -------
    dict
        ``positions`` compared, ``max_tv``, ``median_tv``, ``max_abs`` (largest
        probability difference).

    Raises
    ------
    ClientError
        A request failed, or no position could be compared.
    """
    from specdec.stats import pertoken as pt
    from specdec.measure import limit_blas_threads
    from specdec.nn import encode

    _check_request_args(prompts, requests, max_tokens, settings.temperature, seed)
    vocab = model.config.vocab_size
    extra = {"n_probs": vocab, "post_sampling_probs": True}
    if settings.top_k is not None:
        extra["top_k"] = settings.top_k
    if settings.top_p is not None:
        extra["top_p"] = settings.top_p
    bodies = [{"prompt": prompts[k % len(prompts)], "n_predict": max_tokens,
               "return_tokens": True, "stream": False, **plain_sampling(settings.temperature),
               **extra, "seed": seed + k} for k in range(requests)]
    tvs, worst = [], 0.0
    with limit_blas_threads(1):
        for body, data in zip(bodies, post_all(endpoint, "/completion", bodies,
                                               concurrency=concurrency,
                                               seeds=[b["seed"] for b in bodies])):
            tokens = data.get("tokens") or []
            entries = data.get("completion_probabilities") or []
            at = _reported_at(tokens)
            if not tokens or len(at) != len(entries) or any(
                    int(e.get("id", -1)) != tokens[i] for i, e in zip(at, entries)):
                continue
            p = pt.response_laws(model, encode(body["prompt"]), tokens, settings)
            for i, e in zip(at, entries):
                tops = e.get("top_probs") or []
                if not tops:
                    continue
                engine_law = np.zeros(vocab)
                for t in tops:
                    engine_law[int(t["id"])] = _entry_prob(t)
                diff = np.abs(engine_law - p[i])
                tvs.append(0.5 * float(diff.sum()))
                worst = max(worst, float(diff.max()))
    if not tvs:
        raise ClientError(f"{endpoint.url}/completion: no position with the engine's "
                          f"probabilities to compare (a speculative server, or only "
                          f"multi-byte characters?)")
    return {"positions": len(tvs), "max_tv": max(tvs), "median_tv": float(np.median(tvs)),
            "max_abs": worst}


def served_pertoken_check(endpoint: Endpoint, prompts: Sequence[str], *, requests: int,
                          max_tokens: int, settings=None, laws: str = "model", target=None,
                          draft=None, seed: int = 0, false_alarm: float = 1e-6,
                          power: float = 0.9, tolerance: float = 0.0,
                          top_logprobs: int = 20, post_sampling_probs: bool = False,
                          concurrency: int = 4, extra: Mapping | None = None,
                          progress=None, sampling_fields: str = "all"):
    """One served configuration's per-token exactness check, in one call.

    Sends ``requests`` seeded requests (prompts in turn, seeds ``seed`` to
    ``seed + requests - 1``), then tests every emitted token
    (:mod:`specdec.stats.pertoken`): ``laws="model"`` computes each position's law from the
    book's models (:func:`native_responses`, :func:`model_pertoken_check`; llama.cpp's
    ``/completion``), ``laws="reported"`` takes the server's reported top
    log-probabilities (:func:`reported_responses`, :func:`reported_pertoken_check`; any
    OpenAI-compatible server). The transform's uniforms come from
    ``numpy.random.default_rng([seed, 1])``. Two servers may be sent the same seeds:
    each check keeps its level; with llama.cpp, whose rule consumes one random draw per
    emitted token, the texts then coincide where both servers are exact alike (a
    draw-for-draw comparison for free, but the two verdicts are then not independent
    evidence). Disjoint seeds give independent evidence instead.

    Parameters
    ----------
    endpoint : Endpoint
    prompts : sequence of str
    requests, max_tokens : int
    settings : specdec.decode.SamplingSettings, optional
        The law the client expects (default temperature 1, no truncation). With
        ``laws="model"``, the server is asked for the same settings; with
        ``laws="reported"`` its temperature, top-k and top-p are sent.
    laws : {"model", "reported"}
    target, draft : specdec.nn.Transformer, optional
        The book's models (``laws="model"``; the draft adds the ``draft_over_target``
        ordering).
    seed : int
    false_alarm, power, tolerance : float
        ``tolerance``: per-token TV the null allows (see :func:`engine_disagreement`).
    top_logprobs : int
    post_sampling_probs : bool
        ``laws="reported"``: ask llama.cpp for its post-sampling probabilities.
    concurrency : int
    extra : mapping, optional
        More request fields, sent as they are (e.g. a server setting the law does not
        know, for a positive control).
    progress : callable, optional
        Called with 1 after each answer (the command line's progress bar).
    sampling_fields : str
        ``laws="reported"``: ``"all"`` sends every truncation off, ``"temperature"`` the
        temperature alone (vLLM, SGLang); ``laws="model"`` always sends all (llama.cpp).

    Returns
    -------
    specdec.stats.pertoken.PerTokenCheck
        ``extra`` holds ``seconds`` (requests and test), ``requests_seconds``.

    Raises
    ------
    ValueError
        An unknown ``laws``, ``laws="model"`` without ``target``, bad arguments.
    NoLogprobs, ClientError
        See :func:`reported_responses`, :func:`native_responses`.
    """
    import time

    from specdec.decode import SamplingSettings

    settings = SamplingSettings() if settings is None else settings
    fields = dict(extra or {})
    if settings.top_k is not None:
        fields.setdefault("top_k", settings.top_k)
    if settings.top_p is not None:
        fields.setdefault("top_p", settings.top_p)
    rng = np.random.default_rng([seed, 1])
    t0 = time.perf_counter()
    if laws == "model":
        if target is None:
            raise ValueError("target: laws='model' needs the target model")
        got = native_responses(endpoint, prompts, requests, max_tokens=max_tokens,
                               temperature=settings.temperature, seed=seed,
                               concurrency=concurrency, extra=fields, progress=progress)
        t1 = time.perf_counter()
        check = model_pertoken_check(got, target, draft, settings=settings,
                                     max_tokens=max_tokens, rng=rng, false_alarm=false_alarm,
                                     power=power, tolerance=tolerance)
    elif laws == "reported":
        got = reported_responses(endpoint, prompts, requests, max_tokens=max_tokens,
                                 temperature=settings.temperature, seed=seed,
                                 top_logprobs=top_logprobs,
                                 post_sampling_probs=post_sampling_probs,
                                 concurrency=concurrency, extra=fields, progress=progress,
                                 sampling_fields=sampling_fields)
        t1 = time.perf_counter()
        check = reported_pertoken_check(got, max_tokens=max_tokens, rng=rng,
                                        top_logprobs=top_logprobs, false_alarm=false_alarm,
                                        power=power, tolerance=tolerance)
    else:
        raise ValueError(f"laws: must be 'model' or 'reported' (got {laws!r})")
    t2 = time.perf_counter()
    info = {**dict(check.extra), "endpoint": endpoint.url, "seed": seed,
            "settings": settings.to_dict(), "request_fields": fields,
            "requests_seconds": t1 - t0, "seconds": t2 - t0}
    return dataclasses.replace(check, extra=info)
