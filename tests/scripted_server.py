"""A small scripted OpenAI-compatible streaming server for the client's tests.

It listens on 127.0.0.1 on a free port (a thread of this process) and answers
``/v1/completions`` and ``/v1/chat/completions`` with a script: events sent after known
delays, with the text, the cumulative token counts, a final ``usage`` and llama.cpp-style
``timings`` the test chose. Modes reproduce the failures the client must name: an HTTP
error, a non-streaming JSON answer, a malformed event, a stream without token counts.
``/tokenize`` counts UTF-8 bytes, like the book's byte-level models.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Script:
    """Per request: ``delays[k]`` seconds before event k, ``texts[k]`` its text and
    ``tokens[k]`` the tokens it carries; ``mode`` one of ``ok``, ``http500``, ``json``,
    ``malformed``, ``nousage``."""

    delays: tuple = (0.05, 0.02, 0.02)
    texts: tuple = ("ab", "c", "d")
    tokens: tuple = (2, 1, 1)
    timings: dict = field(default_factory=lambda: {"draft_n": 6, "draft_n_accepted": 3})
    mode: str = "ok"
    bodies: list = field(default_factory=list)         # request bodies received


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
        chat = self.path == "/v1/chat/completions"
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self._json(404, {"error": "not found"})
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
        done = 0
        for delay, text, k in zip(script.delays, script.texts, script.tokens):
            time.sleep(delay)
            done += k
            choice = ({"delta": {"content": text}, "index": 0, "finish_reason": None} if chat
                      else {"text": text, "index": 0, "finish_reason": None})
            event = {"choices": [choice], "timings": {"predicted_n": done}}
            if script.mode == "nousage":
                event.pop("timings")
            self._send(json.dumps(event))
            if script.mode == "malformed":
                self._send("{not json")
                return
        if script.mode != "nousage":
            self._send(json.dumps({"choices": [], "usage": {
                "completion_tokens": done, "prompt_tokens": len(str(body.get("prompt", "")))},
                "timings": {"predicted_n": done, **script.timings}}))
        self._send("[DONE]")

    def _send(self, data: str):
        self.wfile.write(f"data: {data}\n\n".encode())
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
