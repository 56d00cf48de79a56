#!/usr/bin/env python3
"""Look at the built HTML in a real browser: headless Chromium, driven over the DevTools
protocol through a pipe (``--remote-debugging-pipe``), standard library only.

    python tools/browser.py [--html _build/html] [--out _build/screenshots] [PAGE ...]

writes a PNG screenshot of each page (default: the landing page and every chapter; with
``--full`` the whole page) and prints, for each, the typeset formulas, console errors, any
request that left the machine and anything wider than the text column. ``make screenshots`` runs it; tests/test_publishing.py uses :func:`inspect_pages`.

The pages are served on 127.0.0.1 by a throwaway HTTP server (as on GitHub Pages, and
because Chromium refuses web fonts such as MathJax's over ``file://``). Chromium runs with
background networking, component updates, sync and first-run tasks off, so the only
requests are the page's own. Debian: ``apt-get install chromium``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic",
         "--disable-default-apps", "--disable-extensions", "--mute-audio",
         "--hide-scrollbars", "--remote-debugging-pipe")

# Resolves once the page's MathJax finished typesetting; the number of formulas it made.
MATHJAX_DONE = """
new Promise((resolve) => {
  const count = () => document.querySelectorAll('mjx-container').length;
  const start = Date.now();
  (function wait() {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(() => resolve(count()), () => resolve(-1));
    } else if (Date.now() - start > %d) { resolve(count()); }
    else { setTimeout(wait, 50); }
  })();
})
"""


# What does not fit the text column: code blocks and outputs whose lines are wider than
# their box (they scroll) or that hold a word longer than a line (it is cut mid-word
# where the line wraps), tables, figures and formulas wider than the article.
OVERFLOWS = """
(() => {
  const main = document.querySelector('main article') || document.querySelector('article')
    || document.body;
  const limit = main.getBoundingClientRect().right + 1;
  const out = [];
  const where = (el) => {
    const s = el.closest('section[id]');
    return s ? '#' + s.id : '';
  };
  const text = (el) => (el.innerText || el.textContent || '').trim().split('\\n')[0].slice(0, 80);
  for (const el of main.querySelectorAll('pre')) {
    if (el.scrollWidth > el.clientWidth + 1) {
      const longest = (el.innerText || '').split('\\n').reduce((a, b) => b.length > a.length ? b : a, '');
      out.push({kind: 'code', where: where(el), width: el.scrollWidth, box: el.clientWidth,
                text: longest.slice(0, 120)});
      continue;
    }
    // Lines that wrap do so at spaces; a run without spaces longer than the line is cut
    // mid-word instead (monospace: its width is its length times one character's).
    const probe = document.createElement('span');
    probe.textContent = 'x'.repeat(100);
    probe.style.whiteSpace = 'pre';
    el.appendChild(probe);
    const charWidth = probe.getBoundingClientRect().width / 100;
    probe.remove();
    const style = getComputedStyle(el);
    const indent = Math.max(0, parseFloat(style.textIndent) || 0);  // wrapped parts' indent
    const room = el.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight)
      - indent;
    const words = (el.innerText || '').split(/\\s+/);
    const word = words.reduce((a, b) => b.length > a.length ? b : a, '');
    // (a box that wraps anywhere on purpose, such as a BibTeX entry's URL, is exempt)
    if (charWidth > 0 && word.length * charWidth > room + 1 && style.overflowWrap !== 'anywhere') {
      out.push({kind: 'cut word', where: where(el), width: Math.round(word.length * charWidth),
                box: Math.round(room), text: word.slice(0, 120)});
    }
  }
  for (const el of main.querySelectorAll('table, img, svg, mjx-container[display="true"]')) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > limit) {
      out.push({kind: el.tagName.toLowerCase(), where: where(el), width: Math.round(r.width),
                box: Math.round(main.getBoundingClientRect().width), text: text(el)});
    }
  }
  const wrappers = main.querySelectorAll('.table-wrapper, .pst-scrollable-table-container, .output');
  for (const el of wrappers) {
    if (el.scrollWidth > el.clientWidth + 1) {
      out.push({kind: 'scroll', where: where(el), width: el.scrollWidth, box: el.clientWidth,
                text: text(el)});
    }
  }
  return out;
})()
"""


def find_chromium() -> str | None:
    """Path of a Chromium/Chrome executable, or None."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageReport:
    """What a page did in the browser."""

    url: str
    formulas: int = 0  # mjx-container elements after MathJax finished
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL the page requested
    screenshot: bytes | None = None
    final_url: str = ""  # after redirects
    overflows: list[dict] = field(default_factory=list)  # what is wider than the column

    def external_requests(self, origin: str) -> list[str]:
        return [u for u in self.requests
                if not (u.startswith(origin) or u.startswith(("data:", "blob:", "about:")))]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # noqa: D401 - silence the access log
        pass


@contextlib.contextmanager
def serve(directory: Path):
    """Serve ``directory`` on 127.0.0.1 (free port) in a thread; yields the origin URL."""
    handler = functools.partial(_Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.handle_error = lambda request, address: None  # a tab closed mid-response
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class Browser:
    """Headless Chromium over the DevTools protocol on a pipe (fd 3 in, fd 4 out)."""

    def __init__(self, executable: str | None = None, *, timeout: float = 60.0):
        self.executable = executable or find_chromium()
        if self.executable is None:
            raise RuntimeError("Chromium not found: install it (Debian: apt-get install chromium)")
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="specdec-chromium-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        def arrange():  # in the child: our pipe ends become its fds 3 and 4
            import fcntl

            high_r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            high_w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [self.executable, *FLAGS, f"--user-data-dir={self._profile.name}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=arrange, pass_fds=(3, 4))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    # -- protocol -----------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("no answer from Chromium")
            import select

            ready, _, _ = select.select([self._from_chrome], [], [], 0.5)
            if ready:
                chunk = os.read(self._from_chrome, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"Chromium exited (status {self.proc.poll()})")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, session: str, timeout: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout or self.timeout)
        for i, event in enumerate(self.events):
            if event.get("method") == method and event.get("sessionId") == session:
                return self.events.pop(i)
        while True:
            event = self._read_message(deadline)
            if event.get("method") == method and event.get("sessionId") == session:
                return event
            self.events.append(event)

    # -- pages --------------------------------------------------------------------------
    def inspect(self, url: str, *, width: int = 1280, height: int = 900,
                screenshot: bool = False, full_page: bool = False,
                mathjax_wait_ms: int = 15000) -> PageReport:
        """Load ``url`` in a fresh tab, wait for MathJax, collect what happened.

        ``full_page`` screenshots the whole page rather than the first screen.
        """
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                  "deviceScaleFactor": 1, "mobile": False}, session=session)
        self.events = [e for e in self.events if e.get("sessionId") != session]
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_event("Page.loadEventFired", session)
        report = PageReport(url)
        for attempt in range(4):  # a page may redirect (Jupyter Book's index.html does)
            try:
                done = self.send("Runtime.evaluate", {
                    "expression": MATHJAX_DONE % mathjax_wait_ms, "awaitPromise": True,
                    "returnByValue": True}, session=session, timeout=mathjax_wait_ms / 1000 + 30)
                break
            except RuntimeError as exc:
                if "navigated" not in str(exc) or attempt == 3:
                    raise
                self.wait_event("Page.loadEventFired", session)
        report.formulas = int(done.get("result", {}).get("value", 0))
        where = self.send("Runtime.evaluate", {"expression": "location.href",
                                               "returnByValue": True}, session=session)
        report.final_url = where.get("result", {}).get("value", url)
        time.sleep(0.3)  # late fonts and console messages
        self.send("Runtime.evaluate", {"expression": "1"}, session=session)
        found = self.send("Runtime.evaluate", {"expression": OVERFLOWS, "returnByValue": True},
                          session=session)
        report.overflows = found.get("result", {}).get("value") or []
        if screenshot:
            params = {"format": "png"}
            if full_page:
                size = self.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
                params.update(captureBeyondViewport=True, clip={
                    "x": 0, "y": 0, "width": width, "height": min(size["height"], 30000),
                    "scale": 1})
            shot = self.send("Page.captureScreenshot", params, session=session)
            report.screenshot = base64.b64decode(shot["data"])
        for event in self.events:
            if event.get("sessionId") != session:
                continue
            method, params = event.get("method"), event.get("params", {})
            if method == "Network.requestWillBeSent":
                report.requests.append(params["request"]["url"])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                report.console_errors.append(f"console.{params['type']}: {text}")
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                text = details.get("exception", {}).get("description") or details.get("text", "")
                report.console_errors.append(f"exception: {text}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                if entry.get("url", "").endswith("/favicon.ico"):
                    # the browser's own guess, made on pages without an icon link, such as
                    # Jupyter Book's redirecting index.html; no page asks for it
                    continue
                report.console_errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip())
        self.events = [e for e in self.events if e.get("sessionId") != session]
        self.send("Target.closeTarget", {"targetId": target})
        return report

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.send("Browser.close", timeout=5)
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_chrome, self._from_chrome):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._profile.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def inspect_pages(html_dir: Path, pages: list[str], *, screenshots: bool = False,
                  full_page: bool = False) -> list[PageReport]:
    """Serve ``html_dir`` and inspect each page (paths relative to it) in one browser."""
    with serve(html_dir) as origin, Browser() as browser:
        reports = []
        for page in pages:
            report = browser.inspect(f"{origin}/{page}", screenshot=screenshots,
                                     full_page=full_page)
            report.url = page
            report.final_url = report.final_url.replace(origin + "/", "")
            report.requests = [u.replace(origin, "") if u.startswith(origin) else u
                               for u in report.requests]
            reports.append(report)
        return reports


def default_pages(html_dir: Path) -> list[str]:
    chapters = sorted((html_dir / "book" / "chapters").glob("*.html"))
    return ["index.html"] + [p.relative_to(html_dir).as_posix() for p in chapters]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="*", help="pages relative to the HTML root")
    parser.add_argument("--html", default=str(REPO / "_build" / "html"))
    parser.add_argument("--out", default=str(REPO / "_build" / "screenshots"))
    parser.add_argument("--full", action="store_true", help="whole pages, not the first screen")
    args = parser.parse_args(argv)
    html, out = Path(args.html), Path(args.out)
    if not (html / "index.html").exists():
        print(f"error: no {html}/index.html: run `make book` first", file=sys.stderr)
        return 2
    if find_chromium() is None:
        print("error: Chromium not found; install it (Debian: apt-get install chromium)",
              file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    status = 0
    for report in inspect_pages(html, args.pages or default_pages(html), screenshots=True,
                                full_page=args.full):
        png = out / (report.url.replace("/", "_").removesuffix(".html") + ".png")
        png.write_bytes(report.screenshot or b"")
        external = [u for u in report.requests if u.startswith(("http:", "https:"))]
        print(f"{png}: {report.formulas} formulas, {len(report.console_errors)} console "
              f"errors, {len(external)} external requests")
        for line in report.console_errors + [f"external request: {u}" for u in external]:
            print(f"    {line}")
            status = 1
        for item in report.overflows:
            print(f"    wider than the column: {item['kind']} {item['where']} "
                  f"({item['width']} px in {item['box']} px): {item['text']}")
    return status


if __name__ == "__main__":
    sys.exit(main())
