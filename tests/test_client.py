"""Tests of the measurement client (specdec.client): the latency arithmetic on records with
known time stamps (exact), and the whole client against a scripted local server with
known delays, token counts and timings, including every failure it must name."""

from __future__ import annotations

import json
import math
import re
import socket

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from scripted_server import Script, ScriptedServer
from specdec import client as cl
from specdec.client.__main__ import main as cli


def record(times, texts=None, tokens=None, start=0.0, end=None, n=None, timings=None):
    texts = texts or ["x"] * len(times)
    n = n if n is not None else (tokens[-1] if tokens else len(times))
    return cl.RequestRecord("r", start, tuple(times), tuple(texts),
                            end if end is not None else times[-1], n,
                            chunk_tokens=None if tokens is None else tuple(tokens),
                            timings=timings or {})


# ------------------------------------------------------------------ arithmetic, exact
def test_record_latencies_exact():
    # chunks at 0.5, 0.75, 1.5 s carrying 1, 3 and 2 tokens (cumulative 1, 4, 6)
    r = record([0.5, 0.75, 1.5], tokens=[1, 4, 6], end=1.625)
    assert r.ttft == 0.5 and r.e2e == 1.625
    assert r.itls == (0.25, 0.75)
    assert r.tokens_per_chunk() == (1.0, 3.0, 2.0)
    assert r.token_latencies() == (0.25 / 3,) * 3 + (0.375,) * 2
    assert r.tpot == (1.625 - 0.5) / 5
    # without per-chunk counts the 6 tokens are spread evenly over the 3 chunks
    r2 = record([0.5, 0.75, 1.5], n=6, end=1.625)
    assert r2.tokens_per_chunk() == (2.0, 2.0, 2.0)
    assert r2.token_latencies() == (0.125, 0.125, 0.375, 0.375)


def test_record_round_trip_and_empty():
    r = record([0.5, 1.0], tokens=[1, 2], timings={"draft_n": 4, "draft_n_accepted": 1})
    assert cl.RequestRecord.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    assert r.draft_n == 4 and r.draft_n_accepted == 1
    empty = cl.RequestRecord("e", 0.0, (), (), 1.0, 0)
    assert math.isnan(empty.ttft) and math.isnan(empty.tpot) and empty.token_latencies() == ()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 4)), min_size=2, max_size=12))
def test_token_latencies_sum_to_the_decode_time(chunks):
    gaps, counts = zip(*chunks)
    times = np.cumsum(gaps) + 0.1
    r = record(times.tolist(), tokens=np.cumsum(counts).tolist())
    lat = r.token_latencies()
    assert len(lat) == sum(counts[1:])
    assert sum(lat) == pytest.approx(times[-1] - times[0])
    assert r.tpot == pytest.approx((times[-1] - times[0]) / (sum(counts) - 1))


def test_goodput_and_acceptance():
    a = record([0.1, 0.2, 0.3], n=3, timings={"draft_n": 4, "draft_n_accepted": 3})  # tpot 0.1
    b = record([0.4, 0.5], n=2, timings={"draft_n": 2, "draft_n_accepted": 0})         # tpot 0.1
    c = record([0.1, 0.9], n=2)                                                           # tpot 0.8
    assert cl.goodput([a, b, c], 2.0) == 1.5
    assert cl.goodput([a, b, c], 2.0, ttft_max=0.2) == 1.0
    assert cl.goodput([a, b, c], 2.0, tpot_max=0.5) == 1.0
    assert cl.goodput([a, b, c], 2.0, ttft_max=0.2, tpot_max=0.5) == 0.5
    assert cl.acceptance([a, b, c]) == {"draft_n": 6, "draft_n_accepted": 3, "acceptance": 0.5}
    assert math.isnan(cl.acceptance([c])["acceptance"])
    with pytest.raises(ValueError, match="wall"):
        cl.goodput([a], 0.0)


def test_arrival_times():
    t = cl.arrival_times(50_000, 5.0, 1.0, rng=3)
    gaps = np.diff(t)
    assert t[0] == 0 and np.all(gaps >= 0)
    # Poisson: mean 1/rate, coefficient of variation 1; gamma shape 0.25: CV 2 (5 sigma)
    assert abs(gaps.mean() - 0.2) < 5 * 0.2 / math.sqrt(gaps.size)
    assert abs(gaps.std() / gaps.mean() - 1) < 0.05
    bursty = np.diff(cl.arrival_times(50_000, 5.0, 0.25, rng=3))
    assert abs(bursty.std() / bursty.mean() - 2) < 0.1
    assert np.array_equal(cl.arrival_times(5, 2.0, rng=7), cl.arrival_times(5, 2.0, rng=7))
    for kwargs, match in [(dict(n=0, rate=1.0), "n:"), (dict(n=2, rate=0.0), "rate:"),
                          (dict(n=2, rate=1.0, burstiness=0.0), "burstiness:")]:
        with pytest.raises(ValueError, match=match):
            cl.arrival_times(**kwargs)


# ------------------------------------------------ server-sent events (httpx-sse + _EventText)
def _stream(texts, newline="\n", bom=False, pings=(), usage=True, done=True):
    """A completions stream as raw UTF-8 bytes, with the event each byte range ends.

    Text event k carries ``texts[k]`` and the cumulative count k + 1 on two ``data:`` lines
    (joined by a newline into one JSON object), raw UTF-8 as llama.cpp writes it; a comment
    follows event k for k in ``pings``; then the usage event and ``[DONE]``. Returns the
    bytes and, per event, the offset of the first byte of the line ending that ends it (the
    client can see that event once this byte has arrived)."""
    datas = [json.dumps({"choices": [{"text": t, "index": 0, "finish_reason": None}],
                         "timings": {"predicted_n": k + 1}}, ensure_ascii=False)
             for k, t in enumerate(texts)]
    if usage:
        datas.append(json.dumps({"choices": [], "usage": {"completion_tokens": len(texts),
                                                          "prompt_tokens": 1}}))
    if done:
        datas.append("[DONE]")
    out, ends = "\ufeff".encode() if bom else b"", []
    for k, d in enumerate(datas):
        lines = [d] if d == "[DONE]" else [d[:-1], " }"]      # two data lines, one object
        out += "".join(f"data: {x}{newline}" for x in lines).encode()
        ends.append(len(out))
        out += newline.encode()
        if k in pings:
            out += f": ping{newline}{newline}".encode()
    return out, ends


def _cut(stream: bytes, cuts) -> list[bytes]:
    cuts = sorted(cuts)
    return [stream[a:b] for a, b in zip([0] + cuts, cuts + [len(stream)])]


def _over_transport(chunks, api="completions"):
    """stream_request over an in-process transport that delivers exactly ``chunks``; its
    clock reads the index of the chunk being delivered, so each stamp says which chunk the
    client had read when it saw the event."""
    import asyncio

    import httpx

    now = {"chunk": -1}

    async def body():
        for i, c in enumerate(chunks):
            now["chunk"] = i
            yield c

    def handler(request):
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              content=body())

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await cl.stream_request(client, cl.Endpoint("http://127.0.0.1:9", api=api),
                                           cl.RequestSpec("sse", "x", 8),
                                           clock=lambda: now["chunk"])
    return asyncio.run(go())


def _chunk_of(chunks, offset):
    """The index of the chunk that holds byte ``offset``."""
    start = 0
    for i, c in enumerate(chunks):
        if start <= offset < start + len(c):
            return i
        start += len(c)
    raise AssertionError(offset)


# every character a JSON encoder may leave raw in a string, the Unicode line breaks first
TEXTS = st.lists(st.text(alphabet=st.sampled_from(list("ab\u00e9\u4e2d\U0001f600 \u0085\u2028"
                                                      "\u2029\x0b\x0c\x1c\x1d\x1e")),
                         min_size=1, max_size=6) | st.text(min_size=1),
                 min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(texts=TEXTS, newline=st.sampled_from(["\n", "\r\n", "\r"]), bom=st.booleans(),
       pings=st.sets(st.integers(0, 6)), data=st.data())
def test_any_split_of_a_stream_gives_the_same_events_each_stamped_as_it_arrives(
        texts, newline, bom, pings, data):
    """Any cut of a valid stream into chunks (inside a UTF-8 character or the byte-order
    mark, between the CR and the LF of a line ending, empty chunks) gives the same events,
    one time stamp per text event, and each stamp is the chunk in which the event's final
    line ending began: only CR LF, LF and CR end a line (NEL, U+2028, U+2029 and the other
    characters ``str.splitlines`` breaks at stay inside their JSON), the two data lines of
    an event join into one object, and no event waits for the next chunk (a CR that ends
    a chunk ends its line at once)."""
    stream, ends = _stream(texts, newline, bom, pings)
    chunks = _cut(stream, data.draw(st.lists(st.integers(0, len(stream)), max_size=14)))
    r = _over_transport(chunks)
    n = len(texts)
    assert r.chunk_texts == tuple(texts) and len(r.chunk_times) == n
    assert r.completion_tokens == n and r.chunk_tokens == tuple(range(1, n + 1))
    assert r.chunk_times == tuple(_chunk_of(chunks, e) for e in ends[:n])
    assert r.end == _chunk_of(chunks, ends[-1])                      # [DONE]


def _awkward(stream, *markers, after=0):
    """Cut points just inside each occurrence of each marker (after its first ``after``+1
    bytes), e.g. inside every U+2028 or between every CR and LF."""
    cuts = set()
    for m in markers:
        k = stream.find(m)
        while k >= 0:
            cuts.update(range(k + 1, k + len(m)) if after < 0 else {k + 1 + after})
            k = stream.find(m, k + 1)
    return sorted(c for c in cuts if 0 < c < len(stream))


LS, NEL, EMOJI = "\u2028".encode(), "\u0085".encode(), "\U0001f600".encode()
AWKWARD = {
    # name: (texts, newline, bom, where to cut)
    "U+2028 and NEL cut inside their bytes": (("a\u2028b", "\u0085", "c\u2029"), "\n", False,
                                              lambda s: _awkward(s, LS, NEL, after=-1)),
    "a 4-byte character cut after each byte": (("\U0001f600", "x\U0001f600y"), "\n", False,
                                               lambda s: _awkward(s, EMOJI, after=-1)),
    "CR LF cut between CR and LF": (("a", "b\u2028", "c"), "\r\n", False,
                                    lambda s: _awkward(s, b"\r\n")),
    "CR endings, each ending a chunk": (("a", "\u0085b", "c"), "\r", False,
                                        lambda s: _awkward(s, b"\r")),
    "byte-order mark cut twice": (("a", "b"), "\n", True, lambda s: [1, 2]),
}


@pytest.mark.parametrize("case", list(AWKWARD))
def test_scripted_server_awkward_chunk_boundaries(case):
    """A real HTTP server writes the stream in chunks cut at the awkward places (each
    write flushed after 5 ms, Nagle off); the record holds exactly the scripted events."""
    texts, newline, bom, where = AWKWARD[case]
    stream, _ = _stream(texts, newline, bom)
    chunks = _cut(stream, where(stream))
    assert len(chunks) > len(texts)
    with ScriptedServer(Script(chunks=tuple((0.005, c) for c in chunks))) as url:
        run = cl.closed_loop(cl.Endpoint(url), [cl.RequestSpec("cut", "x", 8)], 1)
    (r,) = run.records
    n = len(texts)
    assert r.chunk_texts == texts and len(r.chunk_times) == n
    assert r.completion_tokens == n and r.chunk_tokens == tuple(range(1, n + 1))
    assert r.start <= r.chunk_times[0] and list(r.chunk_times) == sorted(r.chunk_times)
    assert r.chunk_times[-1] <= r.end


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_an_event_is_stamped_when_its_line_ending_arrives(newline):
    """The chunk carrying the first event ends with the first character of its final line
    ending (the CR alone for CR LF and CR); the rest comes 0.5 s later. The first event is
    stamped on arrival, not when the next chunk comes (httpx-sse alone would hold the CR)."""
    stream, ends = _stream(("a", "b"), newline)
    chunks = _cut(stream, [ends[0] + 1])
    with ScriptedServer(Script(chunks=((0.0, chunks[0]), (0.5, chunks[1])))) as url:
        (r,) = cl.closed_loop(cl.Endpoint(url), [cl.RequestSpec("cr", "x", 8)], 1).records
    assert r.chunk_texts == ("a", "b") and r.itls[0] >= 0.4


def _raw(body: bytes, api="completions"):
    """One request to a scripted server that sends ``body`` in one write, then closes."""
    with ScriptedServer(Script(chunks=((0.0, body),))) as url:
        return cl.closed_loop(cl.Endpoint(url, api=api), [cl.RequestSpec("raw", "x", 8)],
                              1).records[0]


def test_comments_fields_and_an_unterminated_done_are_no_events():
    """Comments, ``id``/``retry``/``event`` lines without data, unknown fields and a
    ``[DONE]`` that the stream ends without its blank line change nothing."""
    stream, _ = _stream(("a", "b"), done=False)
    cut = stream.index(b"\n") + 1                 # between the two data lines of event 0
    body = (b": hello\n\nretry: 100\n\nevent: ping\n\n" + stream[:cut] + b"foo: 1\n"
            + stream[cut:] + b"data: [DONE]")
    r = _raw(body)
    assert r.chunk_texts == ("a", "b") and r.completion_tokens == 2
    assert r.chunk_tokens == (1, 2)


@pytest.mark.parametrize("tail, match", [
    (b"data: {\"choices\": [], \"usage\": {\"completion_", "ended inside an event"),
    (b"data: {\"choices\": [], \"usage\": {\"completion_tokens\": 2}}\n",
     "ended inside an event"),
    (b"data: {\"choices\": [], \"usage\": {\"completion_tokens\": 2}}\r",
     "ended inside an event"),
    (b"", "no token count")])
def test_a_stream_cut_short_is_named(tail, match):
    """httpx-sse drops an event no blank line ended without a word: the client names a
    stream that ends inside one (unterminated data, even a whole line), and a stream that
    ends without its final chunk (no usage, no per-chunk counts) has no token count."""
    events = b"".join(b'data: {"choices": [{"text": "%s", "index": 0}]}\n\n' % t
                      for t in (b"a", b"b"))
    with ScriptedServer(Script(chunks=((0.0, events), (0.01, tail)))) as url:
        with pytest.raises(cl.ClientError, match=rf"request 'cut' to {url}.*{match}"):
            cl.closed_loop(cl.Endpoint(url), [cl.RequestSpec("cut", "x")], 1)


@pytest.mark.parametrize("body", [
    b'data: {"error": {"message": "out of memory", "code": 500}}\n\n',
    b'event: error\ndata: {"message": "out of memory"}\n\n'])
def test_error_events_are_named(body):
    ok = b'data: {"choices": [{"text": "a", "index": 0}]}\n\n'
    with ScriptedServer(Script(chunks=((0.0, ok + body),))) as url:
        with pytest.raises(cl.ClientError,
                           match=rf"request 'e' to {url}.*server error event.*out of memory"):
            cl.closed_loop(cl.Endpoint(url), [cl.RequestSpec("e", "x")], 1)


def test_a_stream_is_utf8_whatever_charset_it_declares():
    """The specification decodes every event stream as UTF-8; httpx would follow the
    header (``charset=latin-1``: 'é' as 'Ã©')."""
    import asyncio

    import httpx

    stream, _ = _stream(("é", "中"))

    def handler(request):
        return httpx.Response(200, content=stream, headers={
            "content-type": "text/event-stream; charset=latin-1"})

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await cl.stream_request(client, cl.Endpoint("http://127.0.0.1:9"),
                                           cl.RequestSpec("l1", "x"))
    assert asyncio.run(go()).chunk_texts == ("é", "中")


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_client_keeps_unicode_line_separators_inside_events(newline):
    """A generated NEL, line or paragraph separator, raw in the JSON as llama.cpp sends it,
    stays in its chunk (httpx's aiter_lines would cut the event there: 'malformed
    event'); every SSE line ending works."""
    texts = ("a\u2028b", "\u0085", "c\u2029\x1c")
    script = Script(delays=(0.0, 0.0, 0.0), texts=texts, tokens=(3, 2, 5), newline=newline)
    with ScriptedServer(script) as url:
        run = cl.closed_loop(cl.Endpoint(url), [cl.RequestSpec("nel", "x", 10)], 1)
    (r,) = run.records
    assert r.chunk_texts == texts and r.text == "".join(texts) and r.completion_tokens == 10


def test_endpoint_and_spec_validation():
    assert cl.Endpoint("http://127.0.0.1:9/v1/").url == "http://127.0.0.1:9"
    for url in ("127.0.0.1:8080", "ftp://x", "http://"):
        with pytest.raises(ValueError, match="url"):
            cl.Endpoint(url)
    with pytest.raises(ValueError, match="api"):
        cl.Endpoint("http://127.0.0.1:1", api="embeddings")
    with pytest.raises(ValueError, match="prompt"):
        cl.RequestSpec("r0", "")
    with pytest.raises(ValueError, match="temperature"):
        cl.plain_sampling(-1.0)
    body = cl.RequestSpec("r0", "hi", 5, cl.plain_sampling(1.0), seed=9).body(
        cl.Endpoint("http://127.0.0.1:1", api="chat", model="m"))
    assert body["messages"] == [{"role": "user", "content": "hi"}] and body["seed"] == 9
    assert body["stream"] is True and body["top_k"] == -1 and body["min_p"] == 0.0
    assert body["model"] == "m" and body["stream_options"] == {"include_usage": True}


# --------------------------------------------------------------- scripted server
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_client_against_scripted_server(api):
    script = Script(delays=(0.06, 0.03, 0.04), texts=("ab", "c", "d"), tokens=(2, 1, 1))
    with ScriptedServer(script) as url:
        ep = cl.Endpoint(url, api=api)
        spec = cl.RequestSpec("it-0", "ciao", 4, cl.plain_sampling(1.0), seed=5, language="it")
        run = cl.closed_loop(ep, [spec], 1, setting="spec")
    (r,) = run.records
    assert r.text == "abcd" and r.completion_tokens == 4 and r.chunk_tokens == (2, 3, 4)
    assert r.tokens_per_chunk() == (2.0, 1.0, 1.0) and r.language == "it"
    assert r.draft_n == 6 and r.draft_n_accepted == 3
    # the client cannot see an event before the server slept for it
    assert r.ttft >= 0.06 and r.chunk_times[-1] - r.start >= 0.13 and r.e2e >= 0.13
    assert r.ttft + sum(r.itls) <= r.e2e
    body = script.bodies[0]
    assert body["seed"] == 5 and body["temperature"] == 1.0 and body["max_tokens"] == 4
    s = cl.summarize_run(run, ttft_max=10.0, tpot_max=10.0)
    assert s["completion_tokens"] == 4 and s["requests"] == 1
    assert s["acceptance"] == 0.5 and s["goodput"] == pytest.approx(1 / run.wall)
    assert s["output_throughput"] == pytest.approx(4 / run.wall)


def test_closed_and_open_loop_keep_order_and_overlap():
    script = Script(delays=(0.1, 0.01), texts=("a", "b"), tokens=(1, 1), timings={})
    specs = [cl.RequestSpec(f"en-{k}", "hello", 2, seed=k) for k in range(4)]
    with ScriptedServer(script) as url:
        ep = cl.Endpoint(url)
        serial = cl.closed_loop(ep, specs, 1)
        parallel = cl.closed_loop(ep, specs, 4)
        opened = cl.open_loop(ep, specs, rate=math.inf)
    assert [r.id for r in parallel.records] == [s.id for s in specs]
    assert serial.wall >= 4 * 0.11
    # four in flight at once: every request started before the first one ended (a
    # comparison of wall times would depend on how busy the machine is)
    starts = [r.start for r in parallel.records]
    assert max(starts) < min(r.start + r.e2e for r in parallel.records)
    assert opened.load == {"kind": "open", "rate": math.inf, "burstiness": 1.0}
    assert math.isnan(cl.summarize_run(serial)["acceptance"])


def test_client_runs_inside_a_running_event_loop():
    """Jupyter kernels run an event loop; the client must still work there."""
    import asyncio

    with ScriptedServer(Script(timings={})) as url:
        async def inside():
            return cl.closed_loop(cl.Endpoint(url), [cl.RequestSpec("k-0", "hi", 4)])
        run = asyncio.run(inside())
    assert run.records[0].completion_tokens == 4


def test_prompt_lengths_in_server_tokens():
    with ScriptedServer() as url:
        out = cl.prompt_lengths(cl.Endpoint(url), {"zh": ["更新护照", "好"], "en": ["abc"]})
    assert out["zh"]["tokens"] == {"min": 3, "median": 7.5, "max": 12}
    assert out["zh"]["characters"] == {"min": 1, "median": 2.5, "max": 4}
    assert out["en"]["bytes"]["max"] == 3


@pytest.mark.parametrize("mode, match", [
    ("http500", "HTTP 500"), ("json", "not a streaming answer"),
    ("malformed", "malformed event"), ("nousage", "no token count"),
    ("drop", r"connection lost \(RemoteProtocolError: Server disconnected")])
def test_failures_name_the_request(mode, match):
    with ScriptedServer(Script(mode=mode)) as url:
        with pytest.raises(cl.ClientError, match=rf"request 'es-3' to {url}.*{match}"):
            cl.closed_loop(cl.Endpoint(url), [cl.RequestSpec("es-3", "hola")])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_refused_connection_names_the_request():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(cl.ClientError, match=r"request 'it-0' .*connection failed"):
        cl.closed_loop(cl.Endpoint(url, timeout=5), [cl.RequestSpec("it-0", "ciao")])


# ------------------------------------------------------------------------- CLI
def test_cli_sweep_and_paired(tmp_path, capsys):
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"it": ["ciao", "buona sera"], "en": ["hello"]}))
    out = tmp_path / "r.json"
    script = Script(delays=(0.01, 0.01), texts=("a", "b"), tokens=(1, 1))
    with ScriptedServer(script) as url, ScriptedServer(Script(timings={})) as base:
        assert cli(["--endpoint", url, "--prompts", str(prompts), "--concurrency", "1,2",
                    "--max-tokens", "2", "--ttft-max", "1", "--out", str(out)]) == 0
        data = json.loads(out.read_text())
        assert data["schema"] == cl.SCHEMA and len(data["runs"]) == 2
        assert [r["load"]["concurrency"] for r in data["runs"]] == [1, 2]
        assert all(len(r["records"]) == 3 for r in data["runs"])
        assert data["prompt_lengths"]["it"]["tokens"]["max"] == 10
        assert cli(["--endpoint", url, "--baseline", base, "--prompts", str(prompts),
                    "--repeats", "2", "--rate", "50", "--out", str(out)]) == 0
        paired = json.loads(out.read_text())["paired"]
        spec_rows = [r for r in paired["rows"] if r["setting"] == "speculative"]
        assert len(spec_rows) == 2 and all(r["speedup"] > 0 for r in spec_rows)
        assert all(r["speedup_q1"] <= r["speedup"] <= r["speedup_q3"] and r["speedup_iqr"]
                   == r["speedup_q3"] - r["speedup_q1"] for r in spec_rows)
        assert len(paired["runs"]) == 2 * 2 * 2
        # interleaved: the order of settings rotates with the repeat
        order = [(r["repeat"], r["setting"]) for r in paired["runs"] if r["language"] == "it"]
        assert order == [(0, "baseline"), (0, "speculative"), (1, "speculative"), (1, "baseline")]
    printed = capsys.readouterr().out
    assert "concurrency 2:" in printed and "speedup" in printed and "rate 50/s" in printed


def test_cli_errors(tmp_path, capsys):
    assert cli(["--endpoint", "localhost:1"]) == 2
    assert "url" in capsys.readouterr().err
    assert cli(["--endpoint", "http://127.0.0.1:1", "--concurrency", "0"]) == 2
    url = f"http://127.0.0.1:{free_port()}"
    assert cli(["--endpoint", url, "--timeout", "5", "--out", str(tmp_path / "x.json")]) == 3
    assert "connection failed" in capsys.readouterr().err
    written = json.loads((tmp_path / "x.json").read_text())         # the failure recorded
    assert written["complete"] is False and written["runs"] == []
    assert "tokenize request 0" in written["failure"]["error"]
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert cli(["--endpoint", url, "--prompts", str(bad)]) == 2
    assert "--prompts" in capsys.readouterr().err
    # every bad argument is refused before any request, naming the flag
    for argv, flag in ((["--endpoint", "ftp://127.0.0.1:1"], "--endpoint"),
                       (["--baseline", "127.0.0.1:1"], "--baseline"),
                       (["--max-tokens", "0"], "--max-tokens"),
                       (["--prompts-per-language", "0"], "--prompts-per-language"),
                       (["--seed", "-5"], "--seed"),
                       (["--rate", "2", "--burstiness", "0"], "--burstiness"),
                       (["--rate", "2", "--burstiness", "-1"], "--burstiness"),
                       (["--ttft-max", "-1"], "--ttft-max"),
                       (["--tpot-max", "0"], "--tpot-max"),
                       (["--repeats", "2"], "--repeats"),
                       (["--rate", "2", "--concurrency", "4"], "--concurrency"),
                       (["--languages", "xx"], "--languages"),
                       (["--prompts", str(tmp_path / "missing.json")], "--prompts"),
                       (["--out", str(tmp_path / "no" / "dir" / "r.json")], "--out"),
                       (["--out", str(tmp_path)], "--out")):
        full = ["--endpoint", url] + argv if argv[0] != "--endpoint" else argv
        assert cli(full) == 2, argv
        assert flag in capsys.readouterr().err, argv


# ------------------------------------------------------------- nothing measured is lost
def _kill_after(server: ScriptedServer, n: int):
    """A progress callback that stops ``server`` (no more connections) after ``n`` requests."""
    done = []

    def progress(k):
        done.append(k)
        if len(done) == n:
            server.httpd.shutdown()
            server.httpd.server_close()
    return progress


def test_a_failed_run_keeps_the_requests_measured_before_it():
    server = ScriptedServer(Script(delays=(0.01, 0.01), texts=("a", "b"), tokens=(1, 1)))
    specs = [cl.RequestSpec(f"en-{k}", "hello", 2, seed=k) for k in range(6)]
    with server as url:
        with pytest.raises(cl.RunFailed, match=r"request 'en-3' .*connection (failed|lost)") as info:
            cl.closed_loop(cl.Endpoint(url, timeout=5), specs, 1, progress=_kill_after(server, 3),
                           setting="spec")
    err = info.value
    assert isinstance(err, cl.ClientError)
    assert [r.id for r in err.partial.records] == ["en-0", "en-1", "en-2"]
    assert all(r.completion_tokens == 2 for r in err.partial.records)
    f = err.failure
    assert f["request"] == "en-3" and re.search("connection (failed|lost)", f["error"])
    assert f["setting"] == "spec" and f["load"] == {"kind": "closed", "concurrency": 1}
    assert f["clock"] >= err.partial.records[-1].end and 0 < f["after"] == err.partial.wall
    assert f["time_utc"].endswith("+00:00")
    s = cl.summarize_run(err.partial)
    assert s["requests"] == 3 and s["completion_tokens"] == 6


def test_a_failed_paired_run_keeps_the_complete_runs():
    prompts = {"it": ["ciao", "buona sera"], "en": ["hello"]}
    script = Script(delays=(0.01, 0.01), texts=("a", "b"), tokens=(1, 1))
    spec_server, base_server = ScriptedServer(script), ScriptedServer(Script(timings={}))
    # repeat 0: it/baseline (2 requests), it/speculative (2), en/baseline (1), en/spec (1);
    # repeat 1: it/speculative (2), then it/baseline: its server is gone after request 8
    with spec_server as url, base_server as base:
        eps = {"baseline": cl.Endpoint(base, timeout=5), "speculative": cl.Endpoint(url)}
        with pytest.raises(cl.RunFailed) as info:
            cl.paired(eps, prompts, baseline="baseline", repeats=2, max_tokens=2,
                      progress=_kill_after(base_server, 8))
    out, f = info.value.partial, info.value.failure
    order = [(r["repeat"], r["language"], r["setting"], r["complete"]) for r in out["runs"]]
    assert order == [(0, "it", "baseline", True), (0, "it", "speculative", True),
                     (0, "en", "baseline", True), (0, "en", "speculative", True),
                     (1, "it", "speculative", True), (1, "it", "baseline", False)]
    assert out["complete"] is False and out["runs"][-1]["records"] == []
    assert f["request"] == "it-0" and f["repeat"] == 1 and f["language"] == "it"
    assert f["setting"] == "baseline"
    rows = {(r["language"], r["setting"]): r for r in out["rows"]}
    assert rows[("it", "speculative")]["repeats"] == 2 and rows[("it", "baseline")]["repeats"] == 1
    assert rows[("it", "speculative")]["speedup"] > 0       # from repeat 0, the one complete pair


def test_cli_writes_the_results_so_far_when_the_server_dies(tmp_path, capsys):
    import threading
    import time

    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"en": [f"hello {k}" for k in range(40)]}))
    out = tmp_path / "r.json"
    script = Script(delays=(0.02, 0.02), texts=("a", "b"), tokens=(1, 1))
    server = ScriptedServer(script)

    def kill():                    # the server goes away as the 5th request arrives
        while len(script.bodies) < 5:
            time.sleep(0.001)
        server.httpd.shutdown()
        server.httpd.server_close()
    with server as url:
        killer = threading.Thread(target=kill, daemon=True)
        killer.start()
        code = cli(["--endpoint", url, "--prompts", str(prompts), "--prompts-per-language",
                    "40", "--max-tokens", "2", "--timeout", "5", "--out", str(out)])
        killer.join()
    assert code == 3
    err = capsys.readouterr().err
    data = json.loads(out.read_text())
    assert data["complete"] is False and len(data["runs"]) == 1
    run = data["runs"][0]
    measured = [r["id"] for r in run["records"]]
    assert run["complete"] is False and 4 <= len(measured) < 40 and run["requests"] == len(measured)
    assert measured == [f"en-{k}" for k in range(len(measured))]      # in order, none lost
    f = data["failure"]
    assert f["request"] == f"en-{len(measured)}" and f["request"] in err
    # refused (the port closed) or dropped (accepted into the backlog, then closed): a race
    assert re.search("connection (failed|lost)", f["error"]) and f["load"]["concurrency"] == 1
    assert f"results so far: {out} ({len(measured)} requests measured" in err


def test_a_failed_open_loop_keeps_the_requests_measured_before_it():
    server = ScriptedServer(Script(delays=(0.01, 0.01), texts=("a", "b"), tokens=(1, 1)))
    specs = [cl.RequestSpec(f"es-{k}", "hola", 2, seed=k) for k in range(12)]
    with server as url:
        with pytest.raises(cl.RunFailed, match="connection (failed|lost)") as info:
            cl.open_loop(cl.Endpoint(url, timeout=5), specs, 20.0, rng=4,
                         progress=_kill_after(server, 3))
    done = [r.id for r in info.value.partial.records]
    f = info.value.failure
    assert len(done) >= 3 and f["request"] not in done and f["request"].startswith("es-")
    assert f["load"] == {"kind": "open", "rate": 20.0, "burstiness": 1.0}
    assert all(r.completion_tokens == 2 for r in info.value.partial.records)


# ------------------------------------------------------------------ per-token exactness
def _chain(v=6, seed=0):
    """A Markov chain over v tokens; the last one (the stop token) is rare."""
    law = np.random.default_rng(seed).dirichlet(np.full(v, 0.8), size=v)
    law[:, -1] = 0.005
    return law / law.sum(axis=1, keepdims=True)


def _tempered(law, t):
    x = law ** (1 / t)
    return x / x.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("fmt", ["openai", "content"])
def test_cli_exactness_reported_passes_an_exact_server_and_fails_a_biased_one(
        tmp_path, capsys, fmt):
    law = _chain()
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"xx": ["one", "two", "three"]}))
    argv = ["--prompts", str(prompts), "--exactness", "reported", "--temperature", "1",
            "--requests", "100", "--max-tokens", "40", "--top-logprobs", "3"]
    with ScriptedServer(Script(law=law, logprobs_format=fmt, stop=5)) as url:
        out = tmp_path / "good.json"
        assert cli(["--endpoint", url, *argv, "--out", str(out)]) == 0
        captured = capsys.readouterr()
        printed = captured.out
        assert "per-token exactness: pass" in printed and "detectable per-token TV" in printed
        assert "toward the draft" not in printed                 # no draft was tested
        assert "exactness (reported laws)" in captured.err and "/100" in captured.err  # progress
        check = json.loads(out.read_text())["exactness"]
        assert check["passed"] and check["requests"] == 100
        assert check["positions"] == 100 * 40 and 0 < check["tokens"] < 100 * 40  # stops
        assert check["extra"]["tokens_in_pooled_cell"] > 0
        assert check["detectable_tv"] < 0.12
    # the server samples at temperature 0.6 but reports the law at 1
    with ScriptedServer(Script(law=law, sample=_tempered(law, 0.6), logprobs_format=fmt,
                               stop=5)) as url:
        assert cli(["--endpoint", url, *argv, "--out", str(tmp_path / "bad.json")]) == 1
        printed = capsys.readouterr().out
        assert "per-token exactness: FAIL" in printed and "not uniform" in printed
        # sampled colder than the reported law: the tokens are more likely than it says
        assert "mean PIT along 'target'" in printed and "as if sampled colder" in printed


def test_cli_exactness_below_temperature_1_on_a_server_reporting_the_processed_law(
        tmp_path, capsys):
    """vLLM started with --logprobs-mode processed_logprobs reports the law after its
    temperature: --processed-logprobs tests it at 0.7 without llama.cpp's request field."""
    law = _tempered(_chain(), 0.7)           # what the server samples from and reports
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"xx": ["one", "two"]}))
    argv = ["--prompts", str(prompts), "--exactness", "reported", "--temperature", "0.7",
            "--processed-logprobs", "--requests", "60", "--max-tokens", "30",
            "--top-logprobs", "3", "--no-progress", "--out", str(tmp_path / "r.json")]
    with ScriptedServer(Script(law=law, stop=5)) as url:
        assert cli(["--endpoint", url, *argv]) == 0
    assert "per-token exactness: pass" in capsys.readouterr().out


def test_cli_exactness_errors(tmp_path, capsys):
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"xx": ["one"]}))
    base = ["--prompts", str(prompts), "--out", str(tmp_path / "r.json")]
    with ScriptedServer(Script(law=_chain(), mode="nologprobs")) as url:
        assert cli(["--endpoint", url, *base, "--exactness", "reported",
                    "--temperature", "1", "--requests", "3"]) == 4     # untestable, no verdict
        assert "no log-probabilities" in capsys.readouterr().err
    for argv, flag in ((["--exactness", "reported", "--temperature", "0"], "--temperature"),
                       (["--exactness", "reported", "--temperature", "0.7"],
                        "--post-sampling-probs"),
                       (["--exactness", "reported", "--temperature", "0.7"],
                        "--processed-logprobs"),
                       (["--exactness", "reported", "--temperature", "0.7",
                         "--processed-logprobs", "--post-sampling-probs"],
                        "--processed-logprobs: not with"),
                       (["--exactness", "model", "--temperature", "1", "--target", "target",
                         "--tolerance", "0", "--processed-logprobs"],
                        "--processed-logprobs: only with"),
                       (["--exactness", "reported", "--temperature", "1", "--target", "t"],
                        "--target"),
                       (["--exactness", "model", "--temperature", "1"], "--target"),
                       (["--exactness", "model", "--temperature", "1", "--target", "target"],
                        "--tolerance"),
                       (["--exactness", "model", "--temperature", "1", "--target", "nope",
                         "--tolerance", "0"], "--target"),
                       (["--exactness", "reported", "--temperature", "1", "--requests", "0"],
                        "--requests"),
                       (["--exactness", "reported", "--temperature", "1", "--rate", "1"],
                        "--rate")):
        assert cli(["--endpoint", "http://127.0.0.1:1", *base, *argv]) == 2, argv
        assert flag in capsys.readouterr().err, argv


def test_reported_positions_that_cannot_be_used_are_refused():
    from specdec.client import tokencheck as tc

    where = "request 0"
    speculative = {"logprobs": {"content": [
        {"id": 1, "logprob": -0.1, "top_logprobs": [{"id": 1, "logprob": -0.1}]},
        {"id": 2, "logprob": 0.0, "top_logprobs": []}]}}
    positions = tc._reported_positions(speculative, where)
    assert [len(k) for _, k, _ in positions] == [1, 0]
    with pytest.raises(tc.NoLogprobs, match="no log-probabilities"):
        tc._reported_positions({"logprobs": None}, where)
    # llama.cpp reports a byte once the text no longer ends inside a UTF-8 character
    assert tc._reported_at(list("abé中d".encode())) == [0, 1, 3, 6, 7]
    with pytest.raises(tc.NoLogprobs, match="neither 'content'"):
        tc._reported_positions({"logprobs": {"other": 1}}, where)


@pytest.fixture(scope="module")
def book_target():
    from specdec import nn

    if not (nn.MODELS_DIR / "target.npz").exists():
        pytest.skip("models/ not built (make models)")
    return nn.load_model("target")


@pytest.mark.usefixtures("one_blas_thread")          # tests/conftest.py
def test_cli_exactness_model_against_a_scripted_llama_cpp(tmp_path, capsys, book_target):
    """The scripted /completion decodes with the book's target: exact at the request's
    temperature, and a server that samples at a temperature of its own fails."""
    from specdec import decode as dec
    from specdec.client import tokencheck as tc

    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"en": ["The cat sat on the", "Once upon a time"]}))
    out = tmp_path / "r.json"
    with ScriptedServer(Script(model=book_target)) as url:
        assert cli(["--endpoint", url, "--prompts", str(prompts), "--exactness", "model",
                    "--target", "target", "--draft", "draft", "--temperature", "1",
                    "--tolerance", "0", "--requests", "24", "--max-tokens", "16",
                    "--out", str(out)]) == 0, capsys.readouterr()
        check = json.loads(out.read_text())["exactness"]
        assert check["tokens"] == 24 * 16 and set(check["adjusted"]) == {
            "draft_over_target", "target", "ks:draft_over_target", "ks:target"}
        assert set(check["means"]) == {"draft_over_target", "target"}
    with ScriptedServer(Script(model=book_target, temperature=0.5)) as url:
        bad = tc.served_pertoken_check(cl.Endpoint(url), ["The cat sat on the"],
                                       requests=24, max_tokens=16, target=book_target,
                                       settings=dec.SamplingSettings(temperature=1.0))
    assert not bad.passed and bad.adjusted["target"] < 1e-6
    assert bad.extra["seconds"] > 0 and bad.extra["settings"]["temperature"] == 1.0


def test_cli_exactness_without_a_verdict_when_the_server_dies(tmp_path, capsys):
    """A request that fails is not a failed check: exit 3, the failure in the results file."""
    import threading
    import time

    law = _chain()
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"xx": ["one", "two"]}))
    out = tmp_path / "r.json"
    script = Script(law=law, logprobs_format="openai", stop=5)
    server = ScriptedServer(script)

    def kill():                    # the server goes away as the 5th request arrives
        deadline = time.monotonic() + 30
        while len(script.bodies) < 5 and time.monotonic() < deadline:
            time.sleep(0.001)
        server.httpd.shutdown()
        server.httpd.server_close()

    with server as url:
        threading.Thread(target=kill, daemon=True).start()
        status = cli(["--endpoint", url, "--prompts", str(prompts), "--exactness", "reported",
                      "--temperature", "1", "--requests", "200", "--max-tokens", "20",
                      "--timeout", "5", "--out", str(out)])
    assert status == 3
    err = capsys.readouterr().err
    assert "no verdict" in err and str(out) in err
    saved = json.loads(out.read_text())
    assert "exactness" not in saved and saved["failure"]["during"] == "exactness requests"
    assert saved["failure"]["error"]


def test_tls_context_is_made_once_and_still_verifies():
    import ssl

    from specdec.client.stream import tls_context

    ctx = tls_context()
    assert ctx is tls_context()                       # shared by every client
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname


def test_a_prompts_file_is_used_whole_unless_a_count_is_given(tmp_path):
    """--prompts FILE used the first 4 prompts per language unless --prompts-per-language
    was also given; a file is now used whole, and the book's prompts stay at 4."""
    import argparse

    from specdec.client.__main__ import _prompts

    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"en": [f"p{k}" for k in range(7)], "it": ["a", "b"]}))
    ns = dict(languages=None, prompts_per_language=None)
    got = _prompts(argparse.Namespace(prompts=prompts, **ns))
    assert got == {"en": [f"p{k}" for k in range(7)], "it": ["a", "b"]}
    got = _prompts(argparse.Namespace(prompts=prompts, **{**ns, "prompts_per_language": 3}))
    assert got == {"en": ["p0", "p1", "p2"], "it": ["a", "b"]}
    book = _prompts(argparse.Namespace(prompts=None, **ns))
    assert book and all(len(v) == 4 for v in book.values())


def test_a_failed_check_says_which_way_the_tokens_lean():
    from specdec.stats.pertoken import mean_direction, pertoken_test

    assert mean_direction("target", 0.56).startswith("above 1/2: the emitted tokens are "
                                                     "less likely")
    assert "colder or truncated" in mean_direction("target", 0.44)
    assert "toward the draft" in mean_direction("draft_over_target", 0.45)
    assert "away from the draft" in mean_direction("draft_over_target", 0.55)
    assert mean_direction("mine", 0.6) == ("above 1/2: the emitted tokens fall later in the "
                                           "'mine' ordering than the law puts them")
    rng = np.random.default_rng(0)
    hot = rng.uniform(0.2, 1.0, 4000)                  # mean 0.6: tokens late in the order
    check = pertoken_test({"target": hot}, tokens=4000, requests=40)
    assert not check.passed and "as if sampled hotter" in check.message


def test_requests_carry_only_the_fields_asked_for(tmp_path, capsys):
    """--sampling-fields temperature sends the temperature alone (vLLM warns about min_p
    with speculation); --field adds a field to every request; a malformed one is refused
    by name before anything is sent."""
    from specdec.client.__main__ import _fields

    assert cl.plain_sampling(0.7, "temperature") == {"temperature": 0.7}
    assert cl.plain_sampling(0.7)["min_p"] == 0.0 and cl.plain_sampling(0.7)["top_k"] == -1
    with pytest.raises(ValueError, match="^fields: must be one of all, temperature"):
        cl.plain_sampling(1.0, "none")
    assert _fields(["ignore_eos=true", "n=2", "stop=end", 'logit_bias={"1": -5}']) == \
        {"ignore_eos": True, "n": 2, "stop": "end", "logit_bias": {"1": -5}}
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"xx": ["one", "two"]}))
    script = Script(delays=(0.01,), texts=("a",), tokens=(1,))
    with ScriptedServer(script) as url:
        assert cli(["--endpoint", url, "--prompts", str(prompts), "--max-tokens", "1",
                    "--sampling-fields", "temperature", "--field", "ignore_eos=true",
                    "--temperature", "1", "--out", str(tmp_path / "r.json")]) == 0
        assert script.bodies and all(b["temperature"] == 1.0 and b["ignore_eos"] is True
                                     and "min_p" not in b and "top_k" not in b
                                     for b in script.bodies)
        sent = len(script.bodies)
        assert cli(["--endpoint", url, "--prompts", str(prompts), "--field", "oops",
                    "--out", str(tmp_path / "r.json")]) == 2
        assert "--field: must be KEY=VALUE (got 'oops')" in capsys.readouterr().err
        assert len(script.bodies) == sent                        # nothing was sent


def test_exactness_refuses_a_baseline_whose_laws_are_another_models(tmp_path, capsys,
                                                                     monkeypatch):
    """A new user's --target draft against a target server measured a 'disagreement' of
    0.705 and passed with a detectable TV of 1: a measured tolerance above MAX_TOLERANCE now
    stops the run untested (exit 4), and the temperature defaults to 1 for exactness."""
    from specdec.client import __main__ as cm
    from specdec.client import tokencheck as tc

    seen = {}

    def disagreement(endpoint, prompts, model, settings, *, seed):
        seen["temperature"] = settings.temperature
        return {"max_tv": 0.705, "positions": 320}

    monkeypatch.setattr(tc, "engine_disagreement", disagreement)
    monkeypatch.setattr(tc, "served_pertoken_check",
                        lambda *a, **k: pytest.fail("nothing may be tested"))
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"xx": ["one"]}))
    code = cli(["--endpoint", "http://127.0.0.1:1", "--baseline", "http://127.0.0.1:2",
                "--exactness", "model", "--target", "draft", "--prompts", str(prompts),
                "--out", str(tmp_path / "r.json")])
    assert code == cm.UNTESTABLE == 4 and seen["temperature"] == 1.0
    err = capsys.readouterr().err
    assert "per-token TV of 0.705 (more than 0.05): not the same model" in err


def test_a_load_point_line_says_goodput_only_under_limits():
    from specdec.client.__main__ import _line

    s = {"load": {"kind": "closed", "concurrency": 2}, "acceptance": float("nan"),
         "output_throughput": 123.45, "goodput": 7.5, "ttft": {"p50": 0.0123},
         "tpot": {"p50": 0.00456}, "itl": {"p99": 0.0201}}
    assert _line(s, limits=False) == ("concurrency 2: 123.5 tokens/s, goodput n/a (no "
                                      "--ttft-max or --tpot-max), TTFT p50 12.3 ms, TPOT p50 "
                                      "4.56 ms, ITL p99 20.10 ms")
    assert "goodput 7.50 req/s" in _line(s, limits=True)
    assert _line(s, False, "speculative server only, ").startswith(
        "speculative server only, concurrency 2:")


# ------------------------------------------- specdec exactness first-tokens, scripted
def _first_tokens_cli(argv):
    from specdec.__main__ import main as specdec_main

    return specdec_main(["exactness", "first-tokens", "--no-progress", *argv])


@pytest.mark.usefixtures("one_blas_thread")          # tests/conftest.py
def test_cli_first_tokens_passes_an_exact_server_and_fails_a_hot_one(tmp_path, capsys,
                                                                      book_target):
    """The scripted /completion samples the book's target at the request's temperature
    (exact) or at 2 (hot). Against the exact law of the first two bytes and against a
    plain server, the exact one passes and the hot one fails; a hot baseline fails the
    control and nothing is tested (exit 4); the draws are saved."""
    out = tmp_path / "ft.json"
    common = ["--requests", "400", "--max-tokens", "2", "--out", str(out)]
    with ScriptedServer(Script(model=book_target)) as exact, \
            ScriptedServer(Script(model=book_target)) as plain, \
            ScriptedServer(Script(model=book_target, temperature=2.0)) as hot:
        assert _first_tokens_cli(["--endpoint", exact, "--baseline", plain,
                                  "--target", "target", *common]) == 0, capsys.readouterr()
        saved = json.loads(out.read_text())
        assert saved["passed"] and saved["control"]["passed"] and saved["law_test"]["passed"]
        assert saved["two_sample"]["passed"] and len(saved["draws"]["speculative"]) == 400
        assert saved["law_test"]["false_alarm"] == pytest.approx(0.5e-6)   # two tests share it
        assert 0 < saved["law_test"]["detectable_tv"] < 0.5
        capsys.readouterr()
        assert _first_tokens_cli(["--endpoint", hot, "--target", "target", *common]) == 1
        printed = capsys.readouterr().out
        assert "law test" in printed and "FAIL" in printed and "two-sample" not in printed
        assert _first_tokens_cli(["--endpoint", hot, "--baseline", plain, *common]) == 1
        assert not json.loads(out.read_text())["two_sample"]["passed"]
        assert _first_tokens_cli(["--endpoint", exact, "--baseline", hot, "--target",
                                  "target", *common]) == 4
        assert "nothing was tested" in capsys.readouterr().err
        assert "law_test" not in json.loads(out.read_text())


@pytest.mark.parametrize("argv, message", [
    ([], "--baseline/--target: give a plain server"),
    (["--target", "target", "--tokens", "3"], "--tokens: at most 2 with --target"),
    (["--baseline", "http://127.0.0.1:9", "--requests", "0"], "--requests: must be >= 1"),
    (["--baseline", "http://127.0.0.1:9", "--temperature", "0"], "--temperature: must be > 0"),
    (["--baseline", "http://127.0.0.1:9", "--tokens", "4", "--max-tokens", "2"],
     "--max-tokens: must be >= --tokens 4"),
    (["--target", "no_such_model"], "--target:"),
    (["--target", "target", "--stop-token", "256"], "--stop-token: must be a token id"),
])
def test_cli_first_tokens_refuses_bad_input_before_sending(argv, message, capsys, book_target):
    assert _first_tokens_cli(["--endpoint", "http://127.0.0.1:9", *argv]) == 2
    assert message in capsys.readouterr().err


def test_each_exactness_mode_lists_its_own_options_and_exit_statuses(capsys):
    """``specdec exactness reported --help`` lists no load-sweep option and no exit status
    of the benchmark; ``specdec bench --help`` no exactness option."""
    from specdec.__main__ import main as specdec_main

    for mode in ("reported", "model", "first-tokens"):
        assert specdec_main(["exactness", mode, "--help"]) == 0
        text = capsys.readouterr().out
        assert "Exit status" in text and "4 " in text, mode
        assert not any(f in text for f in ("--rate", "--ttft-max", "--burstiness",
                                           "--repeats", "every request was measured")), mode
        assert ("--concurrency" in text) == (mode == "first-tokens"), mode   # in flight
        assert "Needs:" in text, mode
        if mode != "first-tokens":          # and not the other mode's options
            other = {"reported": ("--target", "--top-k", "--baseline"),
                     "model": ("--top-logprobs", "--processed-logprobs")}[mode]
            assert not any(f"[{f}" in text for f in other), mode     # in its usage
    assert specdec_main(["bench", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--concurrency" in text and not any(
        f in text for f in ("--requests", "--top-logprobs", "--tolerance", "--exactness"))


def _parsers_of(command: list[str], monkeypatch, capsys) -> list:
    """The argparse parsers ``specdec COMMAND --help`` builds, caught as they parse."""
    import argparse

    from specdec.__main__ import main as specdec_main

    parsers = []
    parse = argparse.ArgumentParser.parse_known_args

    def catching(self, *args, **kwargs):
        parsers.append(self)
        return parse(self, *args, **kwargs)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", catching)
    assert specdec_main([*command, "--help"]) == 0, command
    capsys.readouterr()
    assert parsers, command
    return parsers


@pytest.mark.parametrize("command", [["kit"], ["bench"], ["exactness", "reported"],
                                     ["exactness", "model"], ["exactness", "first-tokens"],
                                     ["serve"]])
def test_every_option_of_every_command_says_what_it_does(command, monkeypatch, capsys):
    """Each option in ``specdec COMMAND --help`` has a help text: the parsers are caught as
    they parse, and every action but --help is read (a bare flag in the listing told a user
    nothing, e.g. ``--kind {token,block,batch}``)."""
    import argparse

    parsers = _parsers_of(command, monkeypatch, capsys)
    bare = [action.option_strings[0] for parser in parsers for action in parser._actions
            if action.option_strings and action.help in (None, "")
            and not isinstance(action, argparse._HelpAction)]
    assert bare == [], f"specdec {' '.join(command)}: options without help: {bare}"


def _printed_commands() -> list[tuple[str, list[str]]]:
    """Every ``specdec ...`` command line printed in a fenced block of the README, the
    book's pages or the chapters' sources: (where, its words), continuation lines joined
    and comments dropped."""
    import shlex
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    found = []
    for path in [repo / "README.md", *sorted((repo / "notebooks").glob("*.md")),
                 *sorted((repo / "book").glob("*.md"))]:
        for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", path.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True)
                if len(words) > 1 and words[0] == "specdec" and words[1] != "--help":
                    found.append((f"{path.name}: {line.strip()[:60]}", words[1:]))
    return found


@pytest.mark.parametrize("where, words", _printed_commands(), ids=lambda x: str(x)[:50])
def test_every_printed_command_uses_options_its_command_has(where, words, monkeypatch,
                                                            capsys):
    """A reader copies the commands of chapter 8, Appendix F and the README: each names a
    command that exists, and every --option in it is one that command takes (a renamed
    flag would otherwise survive in the prose)."""
    command = words[:2] if words[0] == "exactness" else words[:1]
    parsers = _parsers_of(command, monkeypatch, capsys)
    known = {s for parser in parsers for s in parser._option_string_actions}
    unknown = [w.split("=")[0] for w in words if w.startswith("--")
               and w.split("=")[0] not in known]
    assert unknown == [], f"{where}: not options of specdec {' '.join(command)}: {unknown}"


@pytest.mark.parametrize("argv, message", [
    (["--binary", "/bin/true", "--model", __file__, "--draft-model", __file__, "--gamma",
      "0"], "--gamma: must be"),
    (["--binary", "/bin/true", "--model", __file__, "--gamma", "2"],
     "--gamma: only with --draft-model"),
    (["--binary", "/no/llama-server", "--model", __file__], "--binary: no executable file"),
    (["--binary", "/bin/true", "--model", "/no/target.gguf"], "--model: no file"),
    (["--binary", "/bin/true", "--model", __file__, "--draft-model", "/no/d.gguf"],
     "--draft-model: no file"),
])
def test_serve_refuses_bad_input_with_exit_2_before_starting(argv, message, capsys):
    """specdec serve: a usage error exits 2 (as its --help says) and starts nothing."""
    from specdec.__main__ import main as specdec_main

    assert specdec_main(["serve", *argv]) == 2
    assert message in capsys.readouterr().err
