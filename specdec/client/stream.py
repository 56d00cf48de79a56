"""One streamed request to an OpenAI-compatible server, timed chunk by chunk.

:func:`stream_request` posts a request to ``/v1/completions`` or ``/v1/chat/completions``
with ``"stream": true``, reads the server-sent events (SSE) as they arrive (parsed by
httpx-sse, see :class:`_EventText` for what is added to it) and stamps each one with the
client's clock; :class:`RequestRecord` keeps the stamps, the text of every
chunk, the ``usage`` and the engine's own ``timings`` (llama.cpp), and computes the
latencies users feel from them:

* TTFT: first chunk carrying text minus submission;
* inter-chunk latencies (ITL): differences of consecutive text chunks;
* per-token latencies: each chunk's gap divided over the tokens it carries (a chunk may
  carry several: a speculative cycle, or the bytes of one UTF-8 character held back by
  the server), using the server's cumulative token counts when the chunks report them
  (llama.cpp's ``timings.predicted_n`` with ``timings_per_token``, vLLM's
  ``continuous_usage_stats``), else spreading the tokens evenly over the chunks;
* TPOT: (end-to-end - TTFT) / (tokens - 1);
* end-to-end: the final event minus submission.

Tokens are counted from ``usage.completion_tokens`` (or llama.cpp's
``timings.predicted_n``), never from chunks. Everything that can go wrong (a bad URL, a
refused connection, an HTTP error, a non-streaming answer, a malformed event, an error
event, a stream that ends inside an event, a stream without usage) raises
:class:`ClientError` naming the request. Used in Chapter 8.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import httpx
import httpx_sse

__all__ = ["ClientError", "Endpoint", "RequestSpec", "RequestRecord", "plain_sampling",
           "stream_request", "run_async", "post_all"]

APIS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


@functools.lru_cache(maxsize=1)
def tls_context():
    """httpx's default certificate verification (certifi's roots), made once per process
    and shared by every client this package opens: making it costs about 40 ms, more
    than a short request to a local server, and a measurement that opens a client per
    request would otherwise pay it every time (an SSL context is safe to share between
    clients and threads)."""
    return httpx.create_ssl_context(trust_env=False)


class ClientError(RuntimeError):
    """A request failed: the message names the request, the URL and what went wrong."""


def run_async(make: Callable[[], "Coroutine"]):  # noqa: F821
    """Run the coroutine ``make()`` to completion and return its result, from plain code
    or from code that already runs an event loop (a Jupyter kernel), where
    :func:`asyncio.run` is refused: there it runs in a thread with its own loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


@dataclass(frozen=True)
class Endpoint:
    """Where requests go.

    Parameters
    ----------
    url : str
        Base URL of the server, ``http://host:port`` (a trailing ``/v1`` is accepted).
    api : {"completions", "chat"}
        ``/v1/completions`` (raw prompt) or ``/v1/chat/completions`` (one user message;
        the server applies its chat template).
    model : str or None
        The ``model`` field of every request (vLLM and SGLang need it; llama.cpp ignores it).
    timeout : float
        Seconds to wait for a connection or for the next event.

    Raises
    ------
    ValueError
        A URL that is not ``http(s)://host[:port]``, an unknown api, a timeout <= 0.
    """

    url: str
    api: str = "completions"
    model: str | None = None
    timeout: float = 60.0

    def __post_init__(self) -> None:
        url = str(self.url).rstrip("/")
        if url.endswith("/v1"):
            url = url[:-3]
        try:
            parsed = httpx.URL(url)
        except Exception as err:  # httpx.InvalidURL and friends
            raise ValueError(f"url: not a URL ({self.url!r}: {err})") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"url: must be http(s)://host[:port] (got {self.url!r})")
        if self.api not in APIS:
            raise ValueError(f"api: must be one of {sorted(APIS)} (got {self.api!r})")
        if not (isinstance(self.timeout, (int, float)) and self.timeout > 0):
            raise ValueError(f"timeout: must be a positive number of seconds (got {self.timeout!r})")
        object.__setattr__(self, "url", url)

    @property
    def path(self) -> str:
        return APIS[self.api]


#: What :func:`plain_sampling` may send: every truncation explicitly off (llama.cpp, whose own
#: defaults truncate), or the temperature alone (vLLM and SGLang, whose defaults do not
#: truncate; vLLM warns that ``min_p`` does not work with speculative decoding).
SAMPLING_FIELDS = ("all", "temperature")


def plain_sampling(temperature: float, fields: str = "all") -> dict:
    """Request fields that make a server sample the plain softmax at ``temperature``.

    ``fields="all"``: every truncation off (top-k, top-p, min-p, typical-p, XTC, DRY,
    repetition penalties, top-n-sigma, mirostat), so the emitted law is
    softmax(logits / temperature), the law the book computes exactly. llama.cpp's own
    defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05) would sample something
    else; vLLM and SGLang read ``top_k`` and ``min_p`` too and ignore the llama.cpp-only
    fields. ``fields="temperature"``: the temperature alone, for a server whose defaults
    truncate nothing. Temperature 0 is greedy.

    Raises
    ------
    ValueError
        A negative or non-finite temperature, or ``fields`` not in :data:`SAMPLING_FIELDS`.
    """
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature)
            and temperature >= 0):
        raise ValueError(f"temperature: must be a finite number >= 0 (got {temperature!r})")
    if fields not in SAMPLING_FIELDS:
        raise ValueError(f"fields: must be one of {', '.join(SAMPLING_FIELDS)} (got {fields!r})")
    if fields == "temperature":
        return {"temperature": float(temperature)}
    return {"temperature": float(temperature), "top_k": -1, "top_p": 1.0, "min_p": 0.0,
            "typical_p": 1.0, "xtc_probability": 0.0, "dry_multiplier": 0.0,
            "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
            "top_n_sigma": -1.0, "mirostat": 0}


@dataclass(frozen=True)
class RequestSpec:
    """One request to send.

    ``id`` names the request in errors and results; ``sampling`` holds the sampling fields
    (see :func:`plain_sampling`); ``seed`` the per-request seed (None: the server's);
    ``extra`` any other fields, sent as given.
    """

    id: str
    prompt: str
    max_tokens: int = 64
    sampling: Mapping = field(default_factory=lambda: plain_sampling(1.0))
    seed: int | None = None
    language: str = ""
    extra: Mapping = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str) or not self.prompt:
            raise ValueError(f"prompt: request {self.id!r} needs a non-empty string")
        if not (isinstance(self.max_tokens, int) and self.max_tokens >= 1):
            raise ValueError(f"max_tokens: must be an integer >= 1 (got {self.max_tokens!r})")

    def body(self, endpoint: Endpoint) -> dict:
        """The JSON body of the request (streaming, with usage in the last chunk)."""
        body = {"stream": True, "max_tokens": self.max_tokens,
                "stream_options": {"include_usage": True}, "timings_per_token": True,
                **dict(self.sampling), **dict(self.extra)}
        if endpoint.model is not None:
            body["model"] = endpoint.model
        if self.seed is not None:
            body["seed"] = int(self.seed)
        if endpoint.api == "chat":
            body["messages"] = [{"role": "user", "content": self.prompt}]
        else:
            body["prompt"] = self.prompt
        return body


@dataclass(frozen=True)
class RequestRecord:
    """What one streamed request did, with the client's time stamps (seconds).

    Attributes
    ----------
    id, language : str
    start : float
        Clock reading just before the request was sent.
    chunk_times : tuple of float
        Arrival time of every event that carried text, in order.
    chunk_texts : tuple of str
        Their text.
    chunk_tokens : tuple of int or None
        Cumulative completion tokens after each text chunk, when the server reports them.
    end : float
        Arrival of the last event (``[DONE]`` or the end of the stream).
    completion_tokens, prompt_tokens : int
        From ``usage`` (or llama.cpp ``timings``), never counted from chunks.
    timings : dict
        The engine's final ``timings`` object (llama.cpp: ``predicted_n``,
        ``predicted_ms``, ``prompt_ms``, and with a draft ``draft_n``,
        ``draft_n_accepted``), empty when the server sends none.
    finish_reason : str
    """

    id: str
    start: float
    chunk_times: tuple[float, ...]
    chunk_texts: tuple[str, ...]
    end: float
    completion_tokens: int
    prompt_tokens: int = 0
    chunk_tokens: tuple[int, ...] | None = None
    timings: Mapping = field(default_factory=dict)
    finish_reason: str = ""
    language: str = ""

    @property
    def text(self) -> str:
        return "".join(self.chunk_texts)

    @property
    def ttft(self) -> float:
        """Time to first token, seconds (first text chunk minus submission)."""
        return self.chunk_times[0] - self.start if self.chunk_times else math.nan

    @property
    def e2e(self) -> float:
        """End-to-end latency, seconds (last event minus submission)."""
        return self.end - self.start

    @property
    def itls(self) -> tuple[float, ...]:
        """Inter-chunk latencies, seconds (chunks - 1 values)."""
        t = self.chunk_times
        return tuple(b - a for a, b in zip(t, t[1:]))

    @property
    def tpot(self) -> float:
        """Time per output token after the first: (e2e - ttft) / (tokens - 1)."""
        n = self.completion_tokens
        return (self.e2e - self.ttft) / (n - 1) if n > 1 and self.chunk_times else math.nan

    def tokens_per_chunk(self) -> tuple[float, ...]:
        """Tokens carried by each text chunk: differences of the server's cumulative
        counts when reported, else ``completion_tokens / chunks`` each."""
        n = len(self.chunk_times)
        if n == 0:
            return ()
        if self.chunk_tokens is not None and len(self.chunk_tokens) == n:
            c = (0,) + tuple(self.chunk_tokens)
            return tuple(float(b - a) for a, b in zip(c, c[1:]))
        return (self.completion_tokens / n,) * n

    def token_latencies(self) -> tuple[float, ...]:
        """Per-token latencies after the first chunk, seconds: chunk k's gap divided by
        the tokens it carries, once per token (tokens of the first chunk are covered by
        TTFT)."""
        out: list[float] = []
        for gap, k in zip(self.itls, self.tokens_per_chunk()[1:]):
            whole = max(int(round(k)), 1)
            out.extend([gap / k if k > 0 else gap] * whole)
        return tuple(out)

    @property
    def draft_n(self) -> int:
        return int(self.timings.get("draft_n", 0))

    @property
    def draft_n_accepted(self) -> int:
        return int(self.timings.get("draft_n_accepted", 0))

    def to_dict(self) -> dict:
        return {"id": self.id, "language": self.language, "start": self.start,
                "chunk_times": list(self.chunk_times), "chunk_texts": list(self.chunk_texts),
                "chunk_tokens": None if self.chunk_tokens is None else list(self.chunk_tokens),
                "end": self.end, "completion_tokens": self.completion_tokens,
                "prompt_tokens": self.prompt_tokens, "timings": dict(self.timings),
                "finish_reason": self.finish_reason, "ttft": self.ttft, "e2e": self.e2e,
                "tpot": self.tpot}

    @classmethod
    def from_dict(cls, d: Mapping) -> "RequestRecord":
        return cls(id=d["id"], start=d["start"], chunk_times=tuple(d["chunk_times"]),
                   chunk_texts=tuple(d["chunk_texts"]), end=d["end"],
                   completion_tokens=d["completion_tokens"],
                   prompt_tokens=d.get("prompt_tokens", 0),
                   chunk_tokens=None if d.get("chunk_tokens") is None
                   else tuple(d["chunk_tokens"]), timings=d.get("timings", {}),
                   finish_reason=d.get("finish_reason", ""), language=d.get("language", ""))


class _EventText:
    r"""The response as :class:`httpx_sse.EventSource` reads it, with what httpx-sse lacks.

    The server-sent events are split and parsed by httpx-sse (``EventSource(...).aiter_sse()``):
    its line decoder ends a line only at CR LF, LF or CR, as the SSE specification
    (WHATWG HTML, "Server-sent events") says, so a NEL, U+2028 or U+2029 that a JSON encoder
    left raw (llama.cpp's does) stays inside its event, where ``httpx``'s ``aiter_lines``
    (``str.splitlines``) would cut it ("malformed event"). ``EventSource`` reads two things
    of the response it wraps, ``headers`` and ``aiter_text()``; this object gives it both,
    with three changes for what httpx-sse 0.4.3 does not do (each checked by
    ``tests/test_client.py``):

    1. **UTF-8, one leading byte-order mark dropped.** ``aiter_text`` decodes with the
       charset the header declares and keeps a leading BOM: U+FEFF then starts the first
       field name (``"\ufeffdata"``), a field httpx-sse ignores, so the first event would
       vanish without an error. The specification decodes the stream as UTF-8 and drops one
       leading BOM: the response's ``encoding`` is set to ``utf-8-sig`` (httpx's incremental
       decoder also keeps a character split between chunks whole, invalid bytes replaced).
    2. **A CR that ends a chunk ends its line at once.** httpx-sse's line decoder holds such
       a CR until the next chunk arrives, to see whether an LF follows; on a stream whose
       lines end with CR every event would then be stamped when the next one arrives. Here
       the CR is completed to CR LF at once, and an LF that starts the next chunk (the second
       half of a CR LF) is dropped.
    3. **The end of the stream is marked.** httpx-sse silently drops an event that no blank
       line ended (a stream cut inside an event looks complete). After the server's last
       byte this yields one blank line and sets :attr:`ended`: an event that only this blank
       line completes is one the stream ended inside.
    """

    def __init__(self, response: httpx.Response) -> None:
        response.encoding = "utf-8-sig"   # (1); allowed until the text is first read
        self._response = response
        self.headers = response.headers
        self.ended = False

    async def aiter_text(self):
        cr = False                        # the last text ended with a CR, completed to CR LF
        async for text in self._response.aiter_text():
            if cr and text.startswith("\n"):
                text = text[1:]           # (2) the LF of that CR LF
            cr = text.endswith("\r")
            if text:                      # (httpx yields no empty text; a lone LF may be left)
                yield text + "\n" if cr else text
        self.ended = True
        yield "\n\n"                      # (3)


def _event(data: str, where: str) -> dict | None:
    """One event's JSON object (None for the ``[DONE]`` sentinel); a ClientError naming
    ``where`` for anything else an OpenAI-style stream must not send."""
    if data.strip() == "[DONE]":
        return None
    try:
        event = json.loads(data)
    except json.JSONDecodeError:
        raise ClientError(f"{where}: malformed event (not JSON): {data[:120]!r}") from None
    if not isinstance(event, dict):
        raise ClientError(f"{where}: malformed event (not an object): {data[:120]!r}")
    if "error" in event:
        raise ClientError(f"{where}: server error event: {event['error']!r}")
    if "choices" not in event:
        raise ClientError(f"{where}: malformed event (no 'choices'): {data[:120]!r}")
    return event


def _chunk_text(event: Mapping, api: str) -> str | None:
    choices = event.get("choices")
    if not choices:
        return None
    choice = choices[0]
    if api == "chat":
        delta = choice.get("delta") or {}
        return delta.get("content") or None
    return choice.get("text") or None


def _finish(event: Mapping) -> str | None:
    choices = event.get("choices") or []
    return choices[0].get("finish_reason") if choices else None


async def stream_request(client: httpx.AsyncClient, endpoint: Endpoint, spec: RequestSpec,
                         clock: Callable[[], float] = time.perf_counter) -> RequestRecord:
    """Send ``spec`` to ``endpoint`` as a streaming request and time its events.

    Parameters
    ----------
    client : httpx.AsyncClient
    endpoint : Endpoint
    spec : RequestSpec
    clock : callable
        Seconds, monotonic (default :func:`time.perf_counter`).

    Returns
    -------
    RequestRecord

    Raises
    ------
    ClientError
        Naming ``spec.id`` and the URL: refused or failed connection, timeout, HTTP
        status other than 200, a response that is not ``text/event-stream`` (a
        non-streaming answer), an event that is not JSON or has no ``choices``, an error
        event (``{"error": ...}`` or ``event: error``), a stream that ends inside an event
        (data no blank line ended, other than ``[DONE]``), or a stream without a token
        count (no ``usage`` nor ``timings``: the final chunk never came).
    """
    url = endpoint.url + endpoint.path
    where = f"request {spec.id!r} to {url}"
    body = spec.body(endpoint)
    times: list[float] = []
    texts: list[str] = []
    cumulative: list[int] = []
    usage: dict = {}
    timings: dict = {}
    finish = ""
    start = clock()
    end = start
    try:
        async with client.stream("POST", url, json=body, timeout=endpoint.timeout) as resp:
            if resp.status_code != 200:
                detail = (await resp.aread()).decode("utf-8", "replace")[:300]
                raise ClientError(f"{where}: HTTP {resp.status_code}: {detail}")
            kind = resp.headers.get("content-type", "")
            if "text/event-stream" not in kind:
                detail = (await resp.aread()).decode("utf-8", "replace")[:200]
                raise ClientError(f"{where}: not a streaming answer (content-type "
                                  f"{kind or 'missing'!r}; body starts {detail!r}); does the "
                                  f"server support \"stream\": true?")
            text_source = _EventText(resp)
            async with contextlib.aclosing(
                    httpx_sse.EventSource(text_source).aiter_sse()) as events:
                async for sse in events:
                    now = clock()
                    if not sse.data:          # no data (only event, id or retry fields)
                        continue
                    if text_source.ended:     # only the blank line after the end completed it
                        if sse.data.strip() == "[DONE]":
                            continue          # a [DONE] without its blank line is still the end
                        raise ClientError(f"{where}: the stream ended inside an event: "
                                          f"{sse.data[:120]!r}")
                    end = now
                    if sse.event == "error":
                        raise ClientError(f"{where}: server error event: {sse.data[:300]!r}")
                    event = _event(sse.data, where)
                    if event is None:
                        continue
                    if event.get("usage"):
                        usage = event["usage"]
                    if event.get("timings"):
                        timings = event["timings"]
                    finish = _finish(event) or finish
                    text = _chunk_text(event, endpoint.api)
                    if text:
                        times.append(end)
                        texts.append(text)
                        count = (event.get("usage") or {}).get("completion_tokens")
                        if count is None:
                            count = (event.get("timings") or {}).get("predicted_n")
                        cumulative.append(-1 if count is None else int(count))
    except ClientError:
        raise
    except httpx.ConnectError as err:
        raise ClientError(f"{where}: connection failed ({err}); is a server listening "
                          f"there?") from None
    except httpx.TimeoutException as err:
        raise ClientError(f"{where}: timed out after {endpoint.timeout:g} s "
                          f"({type(err).__name__})") from None
    except (httpx.NetworkError, httpx.RemoteProtocolError) as err:
        raise ClientError(f"{where}: {_lost(err)}") from None
    except httpx.HTTPError as err:
        raise ClientError(f"{where}: {type(err).__name__}: {err}") from None
    tokens = usage.get("completion_tokens", timings.get("predicted_n"))
    if tokens is None:
        raise ClientError(f"{where}: the stream reported no token count (no 'usage' with "
                          f"stream_options.include_usage, no 'timings'); tokens are never "
                          f"counted from chunks")
    prompt_tokens = usage.get("prompt_tokens", timings.get("prompt_n", 0))
    known = bool(cumulative) and all(c >= 0 for c in cumulative)
    return RequestRecord(id=spec.id, start=start, chunk_times=tuple(times),
                         chunk_texts=tuple(texts), end=end, completion_tokens=int(tokens),
                         prompt_tokens=int(prompt_tokens or 0),
                         chunk_tokens=tuple(cumulative) if known else None,
                         timings=dict(timings), finish_reason=finish or "",
                         language=spec.language)


def _lost(err: Exception) -> str:
    """The message for a connection the server dropped after accepting it (it stopped or
    crashed mid-request; a refused connection is ``ConnectError``, reported apart)."""
    detail = f": {err}" if str(err) else ""
    return (f"connection lost ({type(err).__name__}{detail}); the server closed it during "
            f"the request (did it stop or crash?)")


def post_all(endpoint: "Endpoint", path: str, bodies: Sequence[dict], *, concurrency: int,
             seeds: Sequence[int], progress=None) -> list[dict]:
    """POST every JSON body to ``endpoint.url + path``, ``concurrency`` at a time; the answers in order.

    The non-streaming requests of the exactness checks (seeded, one answer each). No
    connection is kept alive between requests (a server's slot is then free for the next
    seed at once).

    Parameters
    ----------
    endpoint : Endpoint
    path : str
        E.g. ``"/completion"`` (llama.cpp's native endpoint) or ``"/v1/completions"``.
    bodies : sequence of dict
        The request bodies.
    concurrency : int
        Requests in flight at once (>= 1).
    seeds : sequence of int
        The seed of each body, for the messages only.
    progress : callable, optional
        Called with 1 after each answer (e.g. a tqdm bar's ``update``).

    Returns
    -------
    list of dict
        The decoded JSON answers, in the order of ``bodies``.

    Raises
    ------
    ClientError
        A request that failed, answered with an HTTP error or with something that is not
        JSON; the message names the request, its seed and the URL.
    """
    url = endpoint.url + path
    out: list = [None] * len(bodies)

    async def main():
        sem = asyncio.Semaphore(concurrency)
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)
        async with httpx.AsyncClient(limits=limits, trust_env=False, verify=tls_context(),
                                     timeout=endpoint.timeout) as client:
            async def one(i):
                where = f"request {i} (seed {seeds[i]}) to {url}"
                async with sem:
                    try:
                        resp = await client.post(url, json=bodies[i])
                    except httpx.TimeoutException as err:
                        raise ClientError(f"{where}: {type(err).__name__}: no answer within "
                                          f"{endpoint.timeout:g} s") from None
                    except httpx.ConnectError as err:
                        raise ClientError(f"{where}: connection failed ({err}); is a server "
                                          f"listening there?") from None
                    except (httpx.NetworkError, httpx.RemoteProtocolError) as err:
                        raise ClientError(f"{where}: {_lost(err)}") from None
                    except httpx.HTTPError as err:
                        raise ClientError(f"{where}: {type(err).__name__}: {err}") from None
                if resp.status_code != 200:
                    raise ClientError(f"{where}: HTTP {resp.status_code}: {resp.text[:200]}")
                try:
                    out[i] = resp.json()
                except ValueError:
                    raise ClientError(f"{where}: the answer is not JSON: "
                                      f"{resp.text[:200]!r}") from None
                if progress is not None:
                    progress(1)
            await asyncio.gather(*(one(i) for i in range(len(bodies))))

    run_async(main)
    return out
