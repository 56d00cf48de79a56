"""Load on a streaming server: closed-loop concurrency, open-loop arrivals, goodput, and
the paired, interleaved baseline-versus-speculative protocol of chapter 8.

* :func:`closed_loop`: ``concurrency`` clients, each sending its next request as soon as
  the previous one finished (the load of ``vllm bench serve --max-concurrency``).
* :func:`open_loop`: requests sent at arrival times drawn by :func:`arrival_times`, a
  Poisson process (``burstiness`` 1) or a gamma renewal process (``burstiness`` < 1 is
  burstier, > 1 more regular), whether or not earlier requests have finished (the load
  of ``--request-rate`` with ``--burstiness``).
* :func:`summarize_run`: TTFT, TPOT, ITL, per-token latency and end-to-end percentiles,
  throughput, goodput under stated TTFT and TPOT limits (:func:`goodput`) and the
  acceptance the server reports.
* :func:`paired`: baseline and speculative servers run the same prompts of each language
  inside every repeat, in an order that rotates with the repeat; speedups are paired
  (same repeat, language, prompts) and reported as median and IQR.

Used in Chapter 8.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import httpx
import numpy as np

from ..measure import median_iqr, percentiles, quartiles, rotation
from .stream import (ClientError, Endpoint, RequestRecord, RequestSpec, run_async,
                     stream_request)

__all__ = ["arrival_times", "Run", "closed_loop", "open_loop", "goodput", "summarize_run",
           "acceptance", "NoTokenizer", "tokenize", "prompt_lengths", "paired"]

Progress = Callable[[int], None]


def arrival_times(n: int, rate: float, burstiness: float = 1.0, rng=None) -> np.ndarray:
    """Send times (seconds from the start) of ``n`` requests at ``rate`` requests/s.

    Gaps between arrivals are independent gamma variables with shape ``burstiness`` and
    mean ``1 / rate``: exponential (a Poisson process) at ``burstiness`` 1, burstier
    below 1 (coefficient of variation ``1 / sqrt(burstiness)``). The first request is
    sent at 0. ``rate = inf`` sends everything at once.

    Parameters
    ----------
    n : int
        >= 1.
    rate : float
        > 0, requests per second.
    burstiness : float
        > 0, the gamma shape.
    rng : numpy.random.Generator or int seed

    Returns
    -------
    ndarray (n,)
        Non-decreasing, starting at 0.

    Examples
    --------
    >>> arrival_times(3, math.inf).tolist()
    [0.0, 0.0, 0.0]
    >>> t = arrival_times(20_000, 4.0, rng=1)
    >>> round(float(np.diff(t).mean()), 2)
    0.25
    """
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n: must be an integer >= 1 (got {n!r})")
    if not (rate > 0):
        raise ValueError(f"rate: must be > 0 requests/s (got {rate!r})")
    if not (math.isfinite(burstiness) and burstiness > 0):
        raise ValueError(f"burstiness: must be a finite number > 0 (got {burstiness!r})")
    if math.isinf(rate):
        return np.zeros(n)
    gen = np.random.default_rng(rng)
    gaps = gen.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])


@dataclass(frozen=True)
class Run:
    """The requests of one load run and its wall time.

    ``load`` describes it: ``{"kind": "closed", "concurrency": c}`` or
    ``{"kind": "open", "rate": r, "burstiness": b}``.
    """

    records: tuple[RequestRecord, ...]
    wall: float
    load: Mapping = field(default_factory=dict)
    setting: str = ""

    def to_dict(self) -> dict:
        return {"setting": self.setting, "load": dict(self.load), "wall": self.wall,
                "requests": [r.to_dict() for r in self.records]}


async def _closed(endpoint, specs, concurrency, clock, progress, client):
    queue = list(enumerate(specs))[::-1]
    out: list[RequestRecord | None] = [None] * len(specs)

    async def worker():
        while queue:
            i, spec = queue.pop()
            out[i] = await stream_request(client, endpoint, spec, clock)
            if progress:
                progress(1)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(specs)))))
    return out


async def _open(endpoint, specs, times, clock, progress, client):
    t0 = clock()

    async def one(spec, at):
        delay = at - (clock() - t0)
        if delay > 0:
            await asyncio.sleep(delay)
        rec = await stream_request(client, endpoint, spec, clock)
        if progress:
            progress(1)
        return rec

    return await asyncio.gather(*(one(s, float(t)) for s, t in zip(specs, times)))


def _client(connections: int) -> httpx.AsyncClient:
    """One connection per request, closed after it (no keep-alive): a server may close an
    idle kept-alive connection just as the client reuses it (llama.cpp's server does),
    which would fail a request for a reason that has nothing to do with serving; a new
    connection on the same host costs a fraction of a millisecond of TTFT, every request
    alike, as it does a new user."""
    limits = httpx.Limits(max_connections=max(connections, 1), max_keepalive_connections=0)
    return httpx.AsyncClient(limits=limits, trust_env=False)


def closed_loop(endpoint: Endpoint, specs: Sequence[RequestSpec], concurrency: int = 1, *,
                clock: Callable[[], float] = time.perf_counter,
                progress: Progress | None = None, setting: str = "") -> Run:
    """Run ``specs`` with ``concurrency`` requests in flight at all times.

    Requests start in the order given; records come back in that order. Raises
    :class:`~specdec.client.stream.ClientError` for the first request that fails.
    """
    if not (isinstance(concurrency, int) and concurrency >= 1):
        raise ValueError(f"concurrency: must be an integer >= 1 (got {concurrency!r})")
    if not specs:
        raise ValueError("specs: needs at least one request")

    async def main():
        async with _client(concurrency) as client:
            t0 = clock()
            recs = await _closed(endpoint, specs, concurrency, clock, progress, client)
            return recs, clock() - t0

    recs, wall = run_async(main)
    return Run(tuple(recs), wall, {"kind": "closed", "concurrency": concurrency}, setting)


def open_loop(endpoint: Endpoint, specs: Sequence[RequestSpec], rate: float,
              burstiness: float = 1.0, rng=None, *,
              clock: Callable[[], float] = time.perf_counter,
              progress: Progress | None = None, setting: str = "") -> Run:
    """Send ``specs`` at the arrival times of :func:`arrival_times` (``rate`` requests/s),
    whether or not earlier requests have finished."""
    if not specs:
        raise ValueError("specs: needs at least one request")
    times = arrival_times(len(specs), rate, burstiness, rng)

    async def main():
        async with _client(len(specs)) as client:
            t0 = clock()
            recs = await _open(endpoint, specs, times, clock, progress, client)
            return recs, clock() - t0

    recs, wall = run_async(main)
    return Run(tuple(recs), wall, {"kind": "open", "rate": float(rate),
                                   "burstiness": float(burstiness)}, setting)


def goodput(records: Sequence[RequestRecord], wall: float, *, ttft_max: float | None = None,
            tpot_max: float | None = None) -> float:
    """Requests per second that met every stated limit (DistServe's goodput).

    A request counts when its TTFT is at most ``ttft_max`` and its TPOT at most
    ``tpot_max`` (seconds; None: no limit; a one-token request has no TPOT and meets any
    TPOT limit).

    Examples
    --------
    >>> r = [RequestRecord("a", 0.0, (0.1, 0.2), ("x", "y"), 0.2, 2),
    ...      RequestRecord("b", 0.0, (0.5, 0.6), ("x", "y"), 0.6, 2)]
    >>> goodput(r, 2.0, ttft_max=0.2), goodput(r, 2.0)
    (0.5, 1.0)
    """
    if not (math.isfinite(wall) and wall > 0):
        raise ValueError(f"wall: must be a positive number of seconds (got {wall!r})")
    ok = 0
    for r in records:
        if ttft_max is not None and not r.ttft <= ttft_max:
            continue
        if tpot_max is not None and r.completion_tokens > 1 and not r.tpot <= tpot_max:
            continue
        ok += 1
    return ok / wall


def acceptance(records: Sequence[RequestRecord]) -> dict:
    """Draft tokens proposed and accepted as the server reports them (llama.cpp
    ``timings.draft_n`` and ``draft_n_accepted``), and their ratio (nan without a draft)."""
    n = sum(r.draft_n for r in records)
    a = sum(r.draft_n_accepted for r in records)
    return {"draft_n": n, "draft_n_accepted": a, "acceptance": a / n if n else math.nan}


def _pcts(values) -> dict:
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return dict.fromkeys(("p50", "p90", "p99", "mean"), math.nan)
    return {**percentiles(vals), "mean": float(np.mean(vals))}


def summarize_run(run: Run, *, ttft_max: float | None = None,
                  tpot_max: float | None = None) -> dict:
    """Aggregate of one run (times in seconds, throughputs per second of wall time).

    Keys: ``requests``, ``wall``, ``completion_tokens``, ``output_throughput`` (tokens/s),
    ``request_throughput``, ``goodput`` (with ``ttft_max``, ``tpot_max``), and
    ``ttft``, ``tpot``, ``itl`` (inter-chunk), ``token_latency``, ``e2e``, each a dict of
    ``p50``, ``p90``, ``p99`` and ``mean``; ``draft_n``, ``draft_n_accepted``,
    ``acceptance`` as the server reports them.
    """
    recs = run.records
    tokens = sum(r.completion_tokens for r in recs)
    return {"setting": run.setting, "load": dict(run.load), "requests": len(recs),
            "wall": run.wall, "completion_tokens": tokens,
            "output_throughput": tokens / run.wall, "request_throughput": len(recs) / run.wall,
            "goodput": goodput(recs, run.wall, ttft_max=ttft_max, tpot_max=tpot_max),
            "ttft_max": ttft_max, "tpot_max": tpot_max,
            "ttft": _pcts(r.ttft for r in recs), "tpot": _pcts(r.tpot for r in recs),
            "itl": _pcts(g for r in recs for g in r.itls),
            "token_latency": _pcts(g for r in recs for g in r.token_latencies()),
            "e2e": _pcts(r.e2e for r in recs), **acceptance(recs)}


class NoTokenizer(ClientError):
    """The server answers, but has no usable ``/tokenize`` endpoint."""


def tokenize(endpoint: Endpoint, texts: Sequence[str]) -> list[int]:
    """Length of each text in the server's tokens, from its ``/tokenize`` endpoint
    (llama.cpp: ``{"content": ...}`` -> ``{"tokens": [...]}``; vLLM and SGLang:
    ``{"prompt": ...}`` -> ``{"count": n, "tokens": [...]}``).

    Raises
    ------
    NoTokenizer
        The server has no tokenize endpoint or answers something else.
    ClientError
        The connection failed.
    """
    out = []
    with httpx.Client(trust_env=False, timeout=endpoint.timeout) as client:
        for i, text in enumerate(texts):
            where = f"tokenize request {i} to {endpoint.url}/tokenize"
            try:
                resp = client.post(endpoint.url + "/tokenize",
                                   json={"content": text, "add_special": False}
                                   | ({"model": endpoint.model} if endpoint.model else {}))
                if resp.status_code != 200:
                    resp = client.post(endpoint.url + "/tokenize",
                                       json={"prompt": text, "add_special_tokens": False,
                                             "model": endpoint.model})
            except httpx.ConnectError as err:
                raise ClientError(f"{where}: connection failed ({err}); is a server "
                                  f"listening there?") from None
            except httpx.HTTPError as err:
                raise ClientError(f"{where}: {type(err).__name__}: {err}") from None
            if resp.status_code != 200:
                raise NoTokenizer(f"{where}: HTTP {resp.status_code}: {resp.text[:200]}")
            try:
                data = resp.json()
            except ValueError:
                data = {}
            if isinstance(data, dict) and "count" in data:
                out.append(int(data["count"]))
            elif isinstance(data, dict) and isinstance(data.get("tokens"), list):
                out.append(len(data["tokens"]))
            else:
                raise NoTokenizer(f"{where}: no 'tokens' or 'count' in {resp.text[:120]!r}")
    return out


def prompt_lengths(endpoint: Endpoint | None, prompts: Mapping[str, Sequence[str]]) -> dict:
    """Per language: prompts, characters and UTF-8 bytes (min/median/max), and server
    tokens (min/median/max) when ``endpoint`` is given."""
    out = {}
    for lang, ps in prompts.items():
        chars = [len(p) for p in ps]
        data = {"prompts": len(ps), "characters": _mmm(chars),
                "bytes": _mmm([len(p.encode("utf-8")) for p in ps])}
        if endpoint is not None:
            data["tokens"] = _mmm(tokenize(endpoint, ps))
        out[lang] = data
    return out


def _mmm(values) -> dict:
    return {"min": int(min(values)), "median": float(np.median(values)),
            "max": int(max(values))}


def paired(endpoints: Mapping[str, Endpoint], prompts: Mapping[str, Sequence[str]], *,
           baseline: str, repeats: int = 3, max_tokens: int = 64,
           sampling: Mapping | None = None, seed: int = 0, concurrency: int = 1,
           clock: Callable[[], float] = time.perf_counter,
           progress: Progress | None = None) -> dict:
    """Chapter 8's protocol against servers: every setting, every language, every repeat.

    Inside each repeat, for each language, every endpoint (a *setting*: the baseline
    server and the speculative ones) runs the language's prompts in a closed loop at
    ``concurrency``, in an order that rotates with the repeat; request ``k`` of a
    language gets seed ``seed + k`` in every setting and repeat, so the settings see the
    same requests. Output throughput is paired with the baseline's of the same repeat and
    language.

    Returns
    -------
    dict
        ``runs``: one summary per (repeat, language, setting) (:func:`summarize_run`,
        plus ``repeat``, ``language``, ``records``); ``rows``: per (language, setting),
        medians and IQRs over repeats of output throughput, TTFT p50, TPOT p50, ITL p99,
        acceptance, and against the baseline ``speedup`` (median of the paired ratios),
        ``speedup_q1``, ``speedup_q3`` (their quartiles) and ``speedup_iqr``.
    """
    from .stream import plain_sampling

    if baseline not in endpoints:
        raise ValueError(f"baseline: {baseline!r} is not one of the settings {sorted(endpoints)}")
    if not (isinstance(repeats, int) and repeats >= 1):
        raise ValueError(f"repeats: must be an integer >= 1 (got {repeats!r})")
    sampling = plain_sampling(1.0) if sampling is None else dict(sampling)
    names = list(endpoints)
    runs = []
    for r in range(repeats):
        for lang, ps in prompts.items():
            specs = [RequestSpec(f"{lang}-{k}", p, max_tokens, sampling, seed + k, lang)
                     for k, p in enumerate(ps)]
            for name in rotation(names, r):
                run = closed_loop(endpoints[name], specs, concurrency, clock=clock,
                                  progress=progress, setting=name)
                runs.append({"repeat": r, "language": lang, **summarize_run(run),
                             "records": [rec.to_dict() for rec in run.records]})
    rows = []
    for lang in prompts:
        base = {x["repeat"]: x for x in runs if x["language"] == lang and x["setting"] == baseline}
        for name in names:
            mine = [x for x in runs if x["language"] == lang and x["setting"] == name]
            row = {"language": lang, "setting": name, "repeats": len(mine)}
            for key, get in (("output_throughput", lambda x: x["output_throughput"]),
                             ("ttft_p50", lambda x: x["ttft"]["p50"]),
                             ("tpot_p50", lambda x: x["tpot"]["p50"]),
                             ("itl_p99", lambda x: x["itl"]["p99"]),
                             ("acceptance", lambda x: x["acceptance"])):
                vals = [get(x) for x in mine if math.isfinite(get(x))]
                row[key], row[key + "_iqr"] = median_iqr(vals) if vals else (math.nan, math.nan)
            if name != baseline:
                ratio = [x["output_throughput"] / base[x["repeat"]]["output_throughput"]
                         for x in mine]
                q1, row["speedup"], q3 = quartiles(ratio)
                row["speedup_q1"], row["speedup_q3"], row["speedup_iqr"] = q1, q3, q3 - q1
            rows.append(row)
    return {"protocol": "paired, interleaved: settings in rotating order inside every repeat "
                        "and language; request k has seed seed + k in every setting",
            "baseline": baseline, "repeats": repeats, "max_tokens": max_tokens,
            "concurrency": concurrency, "seed": seed, "sampling": sampling,
            "endpoints": {k: {"url": e.url, "api": e.api, "model": e.model}
                          for k, e in endpoints.items()},
            "rows": rows, "runs": runs}
