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

Nothing measured is lost: when a request fails (or the run is interrupted with Ctrl-C),
these functions stop the run and raise :class:`RunFailed`, a :class:`ClientError` that
holds the requests measured before the failure and a record of it (:func:`failure_record`).

Used in Chapter 8.
"""

from __future__ import annotations

import asyncio
import datetime
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import httpx
import numpy as np

from specdec.measure import median_iqr, percentiles, quartiles, rotation
from specdec.client.stream import (ClientError, Endpoint, RequestRecord, RequestSpec, run_async,
                     stream_request, tls_context)

__all__ = ["arrival_times", "Run", "RunFailed", "failure_record", "closed_loop", "open_loop",
           "goodput", "summarize_run", "acceptance", "NoTokenizer", "tokenize",
           "prompt_lengths", "paired"]

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


def failure_record(request: str | None, error: str, clock_value: float, **where) -> dict:
    """What a results file records of the failure that stopped a run.

    Parameters
    ----------
    request : str or None
        Id of the request that failed (None: the run was interrupted between requests).
    error : str
        The error's message.
    clock_value : float
        The run's clock when the failure was seen (the clock of the records' time stamps).
    **where
        Where it happened: ``setting``, ``load``, ``after`` (seconds into the run), and
        for :func:`paired` ``repeat`` and ``language``.

    Returns
    -------
    dict
        ``request``, ``error``, ``time_utc`` (ISO 8601, milliseconds), ``clock`` and
        ``where``'s items.
    """
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
    return {"request": request, "error": error, "time_utc": now, "clock": clock_value,
            **where}


class RunFailed(ClientError):
    """A run stopped before its end: a request failed (the message names it, as
    :class:`ClientError` does) or the run was interrupted (Ctrl-C).

    Attributes
    ----------
    failure : dict
        :func:`failure_record`: which request, what error, when, in which run.
    partial : Run or dict
        What was measured before it: from :func:`closed_loop` and :func:`open_loop` a
        :class:`Run` of the requests that completed (in the order given; ``wall`` up to
        the failure); from :func:`paired`, its output over the runs done so far (the
        interrupted run last, ``"complete": False``).
    """

    def __init__(self, message: str, failure: dict, partial):
        super().__init__(message)
        self.failure = failure
        self.partial = partial


class _RequestFailed(Exception):
    def __init__(self, spec: RequestSpec, error: ClientError, at: float):
        super().__init__(str(error))
        self.spec, self.error, self.at = spec, error, at


async def _measured(client, endpoint, spec, clock, out, i, progress):
    try:
        out[i] = await stream_request(client, endpoint, spec, clock)
    except ClientError as err:
        raise _RequestFailed(spec, err, clock()) from None
    if progress:
        progress(1)


async def _all_or_none(coros) -> None:
    """Run ``coros`` concurrently; at the first exception cancel the others and raise it."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _closed(endpoint, specs, concurrency, clock, progress, client, out):
    queue = list(enumerate(specs))[::-1]

    async def worker():
        while queue:
            i, spec = queue.pop()
            await _measured(client, endpoint, spec, clock, out, i, progress)

    await _all_or_none(worker() for _ in range(min(concurrency, len(specs))))


async def _open(endpoint, specs, times, clock, progress, client, out):
    t0 = clock()

    async def one(i, spec, at):
        delay = at - (clock() - t0)
        if delay > 0:
            await asyncio.sleep(delay)
        await _measured(client, endpoint, spec, clock, out, i, progress)

    await _all_or_none(one(i, s, float(t)) for i, (s, t) in enumerate(zip(specs, times)))


def _run(measure, n: int, connections: int, clock, load: dict, setting: str) -> Run:
    """Drive ``measure(client, out)`` and make its :class:`Run`; raise :class:`RunFailed`
    with the requests measured so far when a request fails or Ctrl-C interrupts it."""
    out: list[RequestRecord | None] = [None] * n
    started: list[float] = []

    async def main():
        async with _client(connections) as client:
            started.append(clock())
            await measure(client, out)
            return clock() - started[0]

    try:
        wall = run_async(main)
    except _RequestFailed as err:
        at, request, error = err.at, err.spec.id, str(err.error)
        message = error
    except KeyboardInterrupt:
        at, request, error = clock(), None, "interrupted (KeyboardInterrupt)"
        message = f"run {setting or dict(load)}: {error}"
    else:
        return Run(tuple(out), wall, load, setting)
    t0 = started[0] if started else at
    failure = failure_record(request, error, at, setting=setting, load=dict(load),
                             after=at - t0)
    done = tuple(r for r in out if r is not None)
    raise RunFailed(message, failure, Run(done, at - t0, load, setting))


def _client(connections: int) -> httpx.AsyncClient:
    """One connection per request, closed after it (no keep-alive): a server may close an
    idle kept-alive connection just as the client reuses it (llama.cpp's server does),
    which would fail a request for a reason that has nothing to do with serving; a new
    connection on the same host costs a fraction of a millisecond of TTFT, every request
    alike, as it does a new user."""
    limits = httpx.Limits(max_connections=max(connections, 1), max_keepalive_connections=0)
    return httpx.AsyncClient(limits=limits, trust_env=False, verify=tls_context())


def closed_loop(endpoint: Endpoint, specs: Sequence[RequestSpec], concurrency: int = 1, *,
                clock: Callable[[], float] = time.perf_counter,
                progress: Progress | None = None, setting: str = "") -> Run:
    """Run ``specs`` with ``concurrency`` requests in flight at all times.

    Requests start in the order given; records come back in that order.

    Raises
    ------
    RunFailed
        At the first request that fails (requests still in flight are cancelled) or at
        Ctrl-C, with the requests measured before it (``partial``) and the failure.
    """
    if not (isinstance(concurrency, int) and concurrency >= 1):
        raise ValueError(f"concurrency: must be an integer >= 1 (got {concurrency!r})")
    if not specs:
        raise ValueError("specs: needs at least one request")
    return _run(lambda client, out: _closed(endpoint, specs, concurrency, clock, progress,
                                            client, out),
                len(specs), concurrency, clock, {"kind": "closed", "concurrency": concurrency},
                setting)


def open_loop(endpoint: Endpoint, specs: Sequence[RequestSpec], rate: float,
              burstiness: float = 1.0, rng=None, *,
              clock: Callable[[], float] = time.perf_counter,
              progress: Progress | None = None, setting: str = "") -> Run:
    """Send ``specs`` at the arrival times of :func:`arrival_times` (``rate`` requests/s),
    whether or not earlier requests have finished.

    Raises
    ------
    RunFailed
        As :func:`closed_loop` does.
    """
    if not specs:
        raise ValueError("specs: needs at least one request")
    times = arrival_times(len(specs), rate, burstiness, rng)
    return _run(lambda client, out: _open(endpoint, specs, times, clock, progress, client,
                                          out),
                len(specs), len(specs), clock, {"kind": "open", "rate": float(rate),
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
    per_s = (lambda x: x / run.wall) if run.wall > 0 else (lambda x: math.nan)  # a run cut short
    return {"setting": run.setting, "load": dict(run.load), "requests": len(recs),
            "wall": run.wall, "completion_tokens": tokens,
            "output_throughput": per_s(tokens), "request_throughput": per_s(len(recs)),
            "goodput": goodput(recs, run.wall, ttft_max=ttft_max, tpot_max=tpot_max)
            if run.wall > 0 else math.nan,
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
    with httpx.Client(trust_env=False, verify=tls_context(), timeout=endpoint.timeout) as client:
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
        plus ``repeat``, ``language``, ``records``, ``complete``); ``rows``: per
        (language, setting), medians and IQRs over repeats of output throughput, TTFT
        p50, TPOT p50, ITL p99, acceptance, and against the baseline ``speedup`` (median
        of the paired ratios), ``speedup_q1``, ``speedup_q3`` (their quartiles) and
        ``speedup_iqr``; ``complete``.

    Raises
    ------
    RunFailed
        When a request fails or Ctrl-C interrupts: ``partial`` is this dict over the runs
        done so far, the interrupted one last with ``"complete": False`` (rows from
        complete runs, speedups from repeats with both runs complete); the failure
        names the repeat and language.
    """
    from specdec.client.stream import plain_sampling

    if baseline not in endpoints:
        raise ValueError(f"baseline: {baseline!r} is not one of the settings {sorted(endpoints)}")
    if not (isinstance(repeats, int) and repeats >= 1):
        raise ValueError(f"repeats: must be an integer >= 1 (got {repeats!r})")
    sampling = plain_sampling(1.0) if sampling is None else dict(sampling)
    names = list(endpoints)
    runs = []

    def output(complete: bool) -> dict:
        return {"protocol": "paired, interleaved: settings in rotating order inside every "
                            "repeat and language; request k has seed seed + k in every setting",
                "baseline": baseline, "repeats": repeats, "max_tokens": max_tokens,
                "concurrency": concurrency, "seed": seed, "sampling": sampling,
                "endpoints": {k: {"url": e.url, "api": e.api, "model": e.model}
                              for k, e in endpoints.items()},
                "rows": _paired_rows(runs, prompts, names, baseline), "runs": runs,
                "complete": complete}

    for r in range(repeats):
        for lang, ps in prompts.items():
            specs = [RequestSpec(f"{lang}-{k}", p, max_tokens, sampling, seed + k, lang)
                     for k, p in enumerate(ps)]
            for name in rotation(names, r):
                failed = None
                try:
                    run = closed_loop(endpoints[name], specs, concurrency, clock=clock,
                                      progress=progress, setting=name)
                except RunFailed as err:
                    run, failed = err.partial, err
                    failed.failure.update(repeat=r, language=lang)
                runs.append({"repeat": r, "language": lang, **summarize_run(run),
                             "records": [rec.to_dict() for rec in run.records],
                             "complete": failed is None})
                if failed is not None:
                    raise RunFailed(str(failed), failed.failure, output(False)) from None
    return output(True)


def _paired_rows(runs: list, prompts, names: list, baseline: str) -> list:
    """The rows of :func:`paired` from its complete runs."""
    runs = [x for x in runs if x["complete"]]
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
            ratio = [x["output_throughput"] / base[x["repeat"]]["output_throughput"]
                     for x in mine if x["repeat"] in base]
            if name != baseline and ratio:
                q1, row["speedup"], q3 = quartiles(ratio)
                row["speedup_q1"], row["speedup_q3"], row["speedup_iqr"] = q1, q3, q3 - q1
            rows.append(row)
    return rows
