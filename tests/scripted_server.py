"""A small scripted OpenAI-compatible streaming server for the client's tests.

It listens on 127.0.0.1 on a free port (a thread of this process) and answers
``/v1/completions`` and ``/v1/chat/completions`` with a script: events sent after known
delays, with the text, the cumulative token counts, a final ``usage`` and llama.cpp-style
``timings`` the test chose. Modes reproduce the failures the client must name: an HTTP
error, a non-streaming JSON answer, a malformed event, a stream without token counts;
``chunks`` sends a stream's raw bytes cut where the test chose (inside a UTF-8 character,
between the CR and the LF of a line ending, in a byte-order mark), each write flushed
after its delay with Nagle's algorithm off. ``/tokenize`` counts UTF-8 bytes, like the
book's byte-level models.

For the per-token exactness checks it also answers non-streamed requests with
log-probabilities: a scripted law over a small vocabulary (a Markov chain: the law of a
token depends on the one before), reported as the top ``logprobs`` tokens in OpenAI's
legacy format or in llama.cpp's ``content`` format, and sampled from the same law (exact)
or from another one (biased); and llama.cpp's native ``/completion`` with
``return_tokens``, decoded by a numpy model of :mod:`specdec.nn` at the request's
temperature (or at a temperature of its own, a server whose setting differs).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np


@dataclass
class Script:
    """Per request: ``delays[k]`` seconds before event k, ``texts[k]`` its text and
    ``tokens[k]`` the tokens it carries; ``mode`` one of ``ok``, ``http500``, ``json``,
    ``malformed``, ``nousage``, ``drop`` (the connection closed with no answer, as a server
    that stops mid-request)."""

    delays: tuple = (0.05, 0.02, 0.02)
    texts: tuple = ("ab", "c", "d")
    tokens: tuple = (2, 1, 1)
    timings: dict = field(default_factory=lambda: {"draft_n": 6, "draft_n_accepted": 3})
    mode: str = "ok"
    bodies: list = field(default_factory=list)         # request bodies received
    # per-token laws: law[i] is the reported law after token i (row 0 also starts)
    law: np.ndarray | None = None
    sample: np.ndarray | None = None                   # the law sampled (default: law)
    logprobs_format: str = "openai"                    # or "content" (llama.cpp)
    stop: int | None = None                            # a token that ends a response
    model: object = None                               # specdec.nn.Transformer: /completion
    temperature: float | None = None                   # /completion's own, else the request's
    newline: str = "\n"                                # SSE line ending: LF, CR LF or CR
    # the raw body of a streamed answer, sent as it is instead of the scripted events:
    # (delay, bytes) pairs, each written and flushed after its delay
    chunks: tuple | None = None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):                      # quiet
        pass

    def _json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._json(200, {"status": "ok"})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self):
        script: Script = self.server.script
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/tokenize":
            self._json(200, {"tokens": list(body.get("content", "").encode("utf-8"))})
            return
        script.bodies.append(body)
        if self.path == "/completion" and script.model is not None:
            self._native(script, body)
            return
        if self.path == "/v1/completions" and script.law is not None and not body.get("stream"):
            self._logprobs(script, body)
            return
        chat = self.path == "/v1/chat/completions"
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self._json(404, {"error": "not found"})
            return
        if script.mode == "drop":
            self.close_connection = True
            return
        if script.mode == "http500":
            self._json(500, {"error": {"message": "scripted failure"}})
            return
        if script.mode == "json":
            self._json(200, {"choices": [{"text": "abcd"}], "usage": {"completion_tokens": 4}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        if script.chunks is not None:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.wfile.flush()
            for delay, chunk in script.chunks:
                time.sleep(delay)
                self.wfile.write(chunk)
                self.wfile.flush()
            return
        done = 0
        for delay, text, k in zip(script.delays, script.texts, script.tokens):
            time.sleep(delay)
            done += k
            choice = ({"delta": {"content": text}, "index": 0, "finish_reason": None} if chat
                      else {"text": text, "index": 0, "finish_reason": None})
            event = {"choices": [choice], "timings": {"predicted_n": done}}
            if script.mode == "nousage":
                event.pop("timings")
            self._send(json.dumps(event, ensure_ascii=False))
            if script.mode == "malformed":
                self._send("{not json")
                return
        if script.mode != "nousage":
            self._send(json.dumps({"choices": [], "usage": {
                "completion_tokens": done, "prompt_tokens": len(str(body.get("prompt", "")))},
                "timings": {"predicted_n": done, **script.timings}}))
        self._send("[DONE]")

    def _logprobs(self, script: Script, body: dict):
        law = np.asarray(script.law, dtype=float)
        sample = law if script.sample is None else np.asarray(script.sample, dtype=float)
        rng = np.random.default_rng(int(body.get("seed", 0)))
        k = body.get("logprobs")
        names = [f"t{i}" for i in range(law.shape[1])]
        prev, tokens, entries = 0, [], []
        for _ in range(int(body.get("max_tokens", 16))):
            tok = int(rng.choice(law.shape[1], p=sample[prev]))
            top = np.argsort(-law[prev], kind="stable")[:k] if k else []
            tops = [(int(j), float(law[prev, j])) for j in top if law[prev, j] > 0]
            entries.append((tok, float(law[prev, tok]), tops))
            tokens.append(tok)
            prev = tok
            if tok == script.stop:
                break
        if script.mode == "nologprobs" or not k:
            logprobs = None
        elif script.logprobs_format == "content":
            logprobs = {"content": [
                {"id": t, "token": names[t], "logprob": float(np.log(p)) if p else -1e30,
                 "top_logprobs": [{"id": j, "token": names[j], "logprob": float(np.log(q))}
                                  for j, q in tops]} for t, p, tops in entries]}
        else:
            logprobs = {"tokens": [names[t] for t, _, _ in entries],
                        "token_logprobs": [float(np.log(p)) if p else None
                                           for _, p, _ in entries],
                        "top_logprobs": [{names[j]: float(np.log(q)) for j, q in tops}
                                         for _, _, tops in entries]}
        finish = "stop" if tokens and tokens[-1] == script.stop else "length"
        self._json(200, {"choices": [{"text": "".join(names[t] for t in tokens), "index": 0,
                                      "logprobs": logprobs, "finish_reason": finish}],
                         "usage": {"completion_tokens": len(tokens), "prompt_tokens": 1}})

    def _native(self, script: Script, body: dict):
        from specdec import decode as dec

        t = script.temperature if script.temperature is not None else body["temperature"]
        top_k = body.get("top_k", -1)
        settings = dec.SamplingSettings(temperature=t, top_k=None if top_k in (None, -1, 0)
                                        else int(top_k))
        out = dec.autoregressive(script.model, body["prompt"], int(body["n_predict"]),
                                 np.random.default_rng(int(body["seed"])), settings)
        self._json(200, {"content": out.texts[0], "tokens": list(out.tokens[0]),
                         "stop": True, "stop_type": "limit"})

    def _send(self, data: str):
        # raw UTF-8, as llama.cpp's JSON encoder writes it (U+2028 and U+0085 unescaped)
        end = self.server.script.newline
        self.wfile.write(f"data: {data}{end}{end}".encode())
        self.wfile.flush()


class ScriptedServer:
    """Context manager: ``with ScriptedServer(Script(...)) as url: ...``."""

    def __init__(self, script: Script | None = None):
        self.script = script or Script()

    def __enter__(self) -> str:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.script = self.script
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
