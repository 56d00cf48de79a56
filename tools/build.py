#!/usr/bin/env python3
"""Execute the book's notebooks and render the book.

Data flow (one direction, nothing flows back)::

    notebooks/NN-slug.md --jupytext--> notebook in memory --papermill(seed, trials)-->
    .cache/executed/NN-slug-<fingerprint>.ipynb --(every notebook succeeded)-->
    book/chapters/NN-slug.ipynb --jupyter-book -W--> _build/.staging --rename--> _build/html

* Which notebooks run: every ``_toc.yml`` entry under ``book/chapters/``; its source is
  ``notebooks/<same name>.md``.
* When a notebook runs: its fingerprint is the sha256 of its source, every file of the
  library (``specdec/``), the book's machinery (``specbook/``), ``pyproject.toml``, this build tool and the parameters. An
  executed notebook is cached under its fingerprint, so an unchanged notebook is never
  re-run, and after a failure is fixed only the notebooks that did not succeed run again.
* When the HTML is rebuilt: when the fingerprint of everything Jupyter Book reads (the
  executed notebooks, ``book/``, ``_config.yml``, ``_toc.yml``, the tools the rendering
  uses, ``pyproject.toml``) differs from the one stored with the current ``_build/html``.
* One chapter alone (``--chapter NAME``, ``make chapter``): executes that chapter only, at
  the given parameters, into ``_build/chapter/``; ``book/chapters`` and the HTML are not
  touched.
* What a reader downloads: the executed notebook's ``parameters`` cell holds the values it
  ran with and papermill's injected cell is removed (:func:`bake_parameters`), so an
  edited seed takes effect when the notebook is run again.
* Several builds on one machine (other clones, ``make chapter`` beside ``make book``)
  execute in order: a chapter that times code (``execute: alone``) holds the machine's
  execution lock (:func:`machine_lock`, in the per-machine cache) alone, the other
  notebooks hold it shared, and a build that has to wait says for which process.
* A failure publishes nothing: ``book/chapters`` is updated only when every notebook
  succeeded, and the HTML is built in a staging directory and renamed into place only when
  Sphinx finished without a single warning.

Only the standard library is imported at module level, so ``--check-params`` runs with
any Python 3 before the virtual environment exists.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent

SEED_DEFAULT = 2026
TRIALS_DEFAULT = 200_000
SEED_LIMIT = 2**32  # numpy.random.default_rng accepts any non-negative int; keep it 32-bit
TRIALS_MAX = 50_000_000

FINGERPRINT_VERSION = "specdec-book-build/1"
# Files of tools/ that the rendering reads (Sphinx extension, generated inputs, LaTeX
# files): a change to one of them rebuilds the HTML, never re-executes a notebook.
RENDER_TOOLS = ("build.py", "book_ext.py", "execution_stats.py", "labels.py", "vendor.py", "latex")
KEEP_PER_NOTEBOOK = 4  # cached executions kept per notebook (e.g. a few seeds)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class BuildError(Exception):
    """A failure the user can act on; printed as is, without a traceback."""


# --------------------------------------------------------------------------- parameters


def parse_param(name: str, text: object, lo: int, hi: int, rule: str) -> int:
    """Parse a SEED/TRIALS value; raise BuildError naming the parameter and the rule."""
    raw = str(text).strip()
    if not re.fullmatch(r"[+-]?[0-9]+(_[0-9]+)*", raw):
        raise BuildError(f"{name} must be {rule} (got {raw!r})")
    value = int(raw)
    if not lo <= value <= hi:
        raise BuildError(f"{name} must be {rule} (got {value})")
    return value


def parse_params(seed: object, trials: object) -> dict[str, int]:
    """Validated papermill parameters ``{"seed": ..., "trials": ...}``."""
    return {
        "seed": parse_param("SEED", seed, 0, SEED_LIMIT - 1, "an integer with 0 <= SEED < 2**32"),
        "trials": parse_param(
            "TRIALS", trials, 1, TRIALS_MAX, f"an integer with 1 <= TRIALS <= {TRIALS_MAX:,}"
        ),
    }


# --------------------------------------------------------------------------- layout


class Layout:
    """Where the build reads and writes; every path can be overridden (tests use it)."""

    def __init__(self, root: Path, *, toc=None, config=None, notebooks=None, chapters=None,
                 out=None, cache=None, library=None):
        self.root = Path(root).resolve()
        r = self.root
        self.toc = Path(toc or r / "_toc.yml").resolve()
        self.config = Path(config or r / "_config.yml").resolve()
        self.notebooks = Path(notebooks or r / "notebooks").resolve()
        self.chapters = Path(chapters or r / "book" / "chapters").resolve()
        self.out = Path(out or r / "_build").resolve()
        self.cache = Path(cache or r / ".cache").resolve()
        self.library = Path(library or r / "specdec").resolve()
        self.book_dir = r / "book"

    def rel(self, path: Path) -> str:
        try:
            return str(Path(path).resolve().relative_to(self.root))
        except ValueError:
            return str(path)


def toc_documents(toc_path: Path) -> list[str]:
    """Every document named in a jupyter-book ``_toc.yml`` (root first, in reading order)."""
    import yaml

    data = yaml.safe_load(toc_path.read_text(encoding="utf-8"))
    docs: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            for key in ("root", "file"):
                if isinstance(node.get(key), str):
                    docs.append(re.sub(r"\.(md|ipynb)$", "", node[key]))
            for value in node.values():
                if isinstance(value, (list, dict)):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(data)
    return list(dict.fromkeys(docs))


def chapter_sources(layout: Layout) -> list[tuple[str, Path]]:
    """(name, source) for every toc entry that is an executed notebook."""
    prefix = layout.rel(layout.chapters).replace(os.sep, "/").rstrip("/") + "/"
    found = []
    for doc in toc_documents(layout.toc):
        if not doc.startswith(prefix):
            continue
        name = doc[len(prefix):]
        src = layout.notebooks / f"{name}.md"
        if not src.is_file():
            raise BuildError(
                f"{layout.rel(layout.toc)} lists {doc} but its source {layout.rel(src)} does not exist"
            )
        found.append((name, src))
    return found


# --------------------------------------------------------------------------- fingerprints


def _ignored(path: Path) -> bool:
    return any(part.startswith(".") or part == "__pycache__" for part in path.parts) or (
        path.suffix in {".pyc", ".pyo"}
    )


def tree_digest(base: Path, *, skip=lambda rel: False) -> str:
    """sha256 over the relative paths and contents of the files under ``base``."""
    h = hashlib.sha256()
    if base.is_dir():
        files = sorted(p for p in base.rglob("*") if p.is_file())
        for path in files:
            rel = path.relative_to(base)
            if _ignored(rel) or skip(rel):
                continue
            h.update(rel.as_posix().encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    elif base.is_file():
        h.update(hashlib.sha256(base.read_bytes()).digest())
    return h.hexdigest()


def tool_digest() -> str:
    """The build tool itself: this file and the matplotlibrc it gives the kernels."""
    h = hashlib.sha256()
    for path in (Path(__file__).resolve(), TOOLS / "matplotlibrc"):
        h.update(path.name.encode() + b"\0" + (path.read_bytes() if path.exists() else b"-"))
    return h.hexdigest()


def shared_digest(layout: Layout, params: dict[str, int]) -> str:
    """Everything a notebook depends on besides its own source."""
    h = hashlib.sha256(FINGERPRINT_VERSION.encode())
    h.update(b"library\0" + tree_digest(layout.library).encode())
    # the book's machinery, outside the wheel: the root's own, else this tool's checkout's
    # (kernel_environment puts both on the notebooks' path, in that order)
    machinery = next((d for d in (layout.root / "specbook", REPO / "specbook") if d.exists()),
                     None)
    h.update(b"specbook\0" + (tree_digest(machinery).encode() if machinery else b"-"))
    pyproject = layout.root / "pyproject.toml"
    h.update(b"pyproject\0" + (tree_digest(pyproject).encode() if pyproject.exists() else b"-"))
    h.update(b"tool\0" + tool_digest().encode())
    h.update(b"params\0" + json.dumps(params, sort_keys=True).encode())
    return h.hexdigest()


def notebook_fingerprint(source: Path, shared: str) -> str:
    h = hashlib.sha256(shared.encode())
    h.update(b"source\0" + source.read_bytes())
    return h.hexdigest()


def book_fingerprint(layout: Layout) -> str:
    """Everything Jupyter Book reads: config, toc, book/ (including the executed notebooks),
    the tools the rendering uses (RENDER_TOOLS), pyproject.toml, requirements-lock.txt and
    the edition of the build (its commit and tag: the citing page states them)."""
    h = hashlib.sha256(FINGERPRINT_VERSION.encode())
    for path in (layout.config, layout.toc):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    h.update(b"book\0" + tree_digest(layout.book_dir).encode())
    if not layout.chapters.is_relative_to(layout.book_dir):
        h.update(b"chapters\0" + tree_digest(layout.chapters).encode())
    for name in RENDER_TOOLS:
        h.update(name.encode() + b"\0" + tree_digest(TOOLS / name).encode())
    for name in ("pyproject.toml", "requirements-lock.txt"):  # versions; the lock is published
        path = layout.root / name
        h.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b"-"))
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))
    import book_ext  # the citing page states the commit and edition of the build

    h.update(b"edition\0" + json.dumps(book_ext.build_edition(layout.root), sort_keys=True).encode())
    return h.hexdigest()


# --------------------------------------------------------------------------- execution


def kernel_environment(layout: Layout) -> dict[str, str]:
    """Variables for the kernels: headless plots, deterministic output, library from root."""
    env = {
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "MATPLOTLIBRC": str(TOOLS / "matplotlibrc"),
        "PYTHONHASHSEED": "0",
        "SOURCE_DATE_EPOCH": "1767225600",  # 2026-01-01: fixed dates in SVG/PDF metadata
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        # the book's root first (its specdec and specbook), then this build tool's checkout,
        # whose book machinery (specbook/, outside the wheel) a book elsewhere uses too
        "PYTHONPATH": os.pathsep.join(
            dict.fromkeys([str(layout.root), str(REPO)]
                          + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        ),
    }
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = os.environ.get(var, "1")  # same float results whatever the core count
    return env


def _init_worker(env: dict[str, str], log: str, parent: int | None = None) -> None:
    """Set the kernel environment; send kernel chatter on stderr to a log file; on Linux,
    end with the build (``parent``: its PID).

    A worker whose build was killed would otherwise run its notebook to the end, and its
    kernel with it. Ended by SIGTERM, it takes its kernel along (the kernel exits when its
    parent is gone), and the kernel's servers with it (``tools/engine.py``).
    """
    if parent is not None and sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, int(signal.SIGTERM), 0, 0, 0)   # PR_SET_PDEATHSIG
        if os.getppid() != parent:                 # the build ended before the call
            os._exit(1)
    os.environ.update(env)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)


def _code_cell_line(source: Path, ordinal: int) -> int | None:
    """1-based line of the ``ordinal``-th (0-based) code cell fence in a MyST file."""
    count = -1
    for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), start=1):
        if line.lstrip().startswith(("```{code-cell}", "````{code-cell}")):
            count += 1
            if count == ordinal:
                return number
    return None


def _merge_streams(outputs: list) -> list:
    """Join consecutive stdout (or stderr) chunks: how the kernel split a print into
    messages depends on timing, the text does not."""
    merged: list = []
    for out in outputs:
        prev = merged[-1] if merged else None
        if (out.get("output_type") == "stream" and prev is not None
                and prev.get("output_type") == "stream" and prev.get("name") == out.get("name")):
            prev["text"] = "".join(prev["text"]) + "".join(out["text"])
        else:
            merged.append(out)
    return merged


def section_of_cells(nb) -> dict[str, str]:
    """The section (the last ``#`` or ``##`` heading before it) each code cell runs in,
    keyed by the cell's source, for the progress lines of a long execution.

    >>> import nbformat.v4 as v4
    >>> nb = v4.new_notebook(cells=[v4.new_code_cell("a = 1"),
    ...     v4.new_markdown_cell("(sec-x)=\\n## Does it pay?\\ntext"), v4.new_code_cell("b = 2")])
    >>> section_of_cells(nb)
    {'a = 1': '', 'b = 2': 'Does it pay?'}
    """
    title, found = "", {}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if re.match(r"^#{1,2} ", line):
                    title = line.lstrip("#").strip()
        elif cell.cell_type == "code":
            found.setdefault(cell.source, title)
    return found


def _elapsed(seconds: float) -> str:
    """``3 min 12 s`` or ``48 s``."""
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


#: The variable naming the file a notebook's long cells write progress lines to
#: (``specbook.progress.ENV``; the build's worker does not import the book's machinery).
PROGRESS_ENV = "SPECDEC_PROGRESS"


class _ProgressRelay:
    """Print the lines a notebook's kernel writes with :func:`specbook.progress.report`,
    as they arrive, while the notebook executes (a thread of the worker process; the
    kernel inherits ``SPECDEC_PROGRESS`` from it)."""

    def __init__(self, name: str, t0: float, poll: float = 1.0):
        import tempfile
        import threading

        fd, path = tempfile.mkstemp(prefix="specdec-progress-", suffix=".txt")
        os.close(fd)
        self.path, self.name, self.t0, self.poll = Path(path), name, t0, poll
        self.env, self.old = PROGRESS_ENV, os.environ.get(PROGRESS_ENV)
        os.environ[self.env] = str(self.path)
        self.done, self.offset = threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _emit(self) -> None:
        with open(self.path, encoding="utf-8") as fh:
            fh.seek(self.offset)
            text = fh.read()
        complete = text[:text.rfind("\n") + 1]          # whole lines only
        self.offset += len(complete.encode("utf-8"))
        for line in complete.splitlines():
            print(f"      {self.name}: {line} (at {_elapsed(time.perf_counter() - self.t0)})",
                  flush=True)

    def _run(self) -> None:
        while not self.done.wait(self.poll):
            self._emit()

    def stop(self) -> None:
        self.done.set()
        self.thread.join()
        self._emit()
        if self.old is None:
            os.environ.pop(self.env, None)
        else:
            os.environ[self.env] = self.old
        self.path.unlink(missing_ok=True)


def execute_notebook(task: dict) -> dict:
    """Run one notebook with papermill (in a worker process); never raises.

    Returns a dict with ``ok``, ``seconds`` and either ``path`` (the cached executed
    notebook) or ``error`` (a one-line message) and ``detail`` (traceback tail).
    """
    import jupytext
    import nbformat
    import papermill as pm

    source = Path(task["source"])
    staging = Path(task["staging"])
    staging.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    nb = jupytext.read(source, fmt="md:myst")
    nb.metadata.get("jupytext", {}).pop("cell_metadata_filter", None)  # keep every tag
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}
    hooks = {}
    if task.get("alone"):       # a long, timed execution: a line as it enters each section
        sections, current = section_of_cells(nb), [None]

        def on_cell_start(cell, cell_index):
            title = sections.get(cell.source)
            if title and title != current[0]:
                current[0] = title
                print(f"    {task['name']}: {title} (at {_elapsed(time.perf_counter() - t0)})",
                      flush=True)

        hooks["on_cell_start"] = on_cell_start   # nbclient's hook, through papermill
    relay = _ProgressRelay(task["name"], t0) if task.get("alone") else None
    try:
        result = pm.execute_notebook(
            nb, str(staging), parameters=task["params"], kernel_name="python3",
            language="python", cwd=str(source.parent), progress_bar=False, log_output=False,
            execution_timeout=task["timeout"], **hooks,
        )
    except pm.PapermillExecutionError as exc:
        executed = nbformat.read(staging, as_version=4) if staging.exists() else None
        index, ordinal = exc.cell_index, None
        if executed is not None:  # position in the source notebook (without the injected cell)
            before = executed.cells[: exc.cell_index]
            injected = [c for c in before if "injected-parameters" in c.metadata.get("tags", [])]
            index = exc.cell_index - len(injected)
            ordinal = sum(c.cell_type == "code" for c in before) - len(injected)
        line = _code_cell_line(source, ordinal) if ordinal is not None else None
        first = next((s for s in exc.source.splitlines() if s.strip()), "").strip()
        where = f"{task['rel']}:{line}" if line else task["rel"]
        message = (
            f"{where}: cell {index} (`{first}`) raised {exc.ename}: {ANSI.sub('', str(exc.evalue))}"
        )
        detail = ANSI.sub("", "\n".join(exc.traceback)).strip().splitlines()[-12:]
        if staging.exists():
            failed = Path(task["failed"])
            failed.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging, failed)
        return {"ok": False, "seconds": time.perf_counter() - t0, "error": message, "detail": detail}
    except Exception as exc:  # kernel died, timeout, bad notebook...
        staging.unlink(missing_ok=True)
        first = ANSI.sub("", str(exc)).strip().splitlines() or [""]
        return {"ok": False, "seconds": time.perf_counter() - t0,
                "error": f"{task['rel']}: {type(exc).__name__}: {first[0]}", "detail": []}
    finally:
        if relay is not None:
            relay.stop()
    seconds = time.perf_counter() - t0
    for cell in result.cells:
        if cell.cell_type == "code":
            cell.outputs = _merge_streams(cell.outputs)
    bake_parameters(result, task["params"])
    result.metadata["specdec"] = {
        "source": task["rel"], "fingerprint": task["fingerprint"],
        "parameters": task["params"], "seconds": round(seconds, 2),
    }
    nbformat.write(result, staging)
    os.replace(staging, task["path"])
    return {"ok": True, "seconds": seconds, "path": task["path"]}


def _literal(value) -> str:
    """``value`` as Python source, integers with ``_`` separators as the chapters write them."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10_000:
        return f"{value:_}"
    return repr(value)


def bake_parameters(nb, params: dict) -> None:
    """Write the values a notebook ran with into its ``parameters`` cell, in place.

    papermill runs a notebook by inserting a cell tagged ``injected-parameters`` after the
    cell tagged ``parameters``; a reader who downloads that notebook and edits the
    parameters cell would see the injected cell set the old values back. So the executed
    notebook keeps one parameters cell, holding the values of this run (one line
    ``name = value`` per parameter, replacing the default's line or appended), and no
    injected cell: re-run as it is, it computes what the page shows; edited, it computes
    with the edited values. The values stay in ``metadata.papermill.parameters`` too.
    """
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    nb.cells = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    if not tagged:
        return
    cell = tagged[0]
    lines = cell.source.splitlines()
    for name, value in params.items():
        line = f"{name} = {_literal(value)}"
        pattern = re.compile(rf"^{re.escape(name)}\s*(:[^=]*)?=")
        at = next((i for i, ln in enumerate(lines) if pattern.match(ln)), None)
        if at is None:
            lines.append(line)
        else:
            lines[at] = line
    cell.source = "\n".join(lines)


def check_kernel() -> None:
    """Kernel ``python3`` must start this interpreter (the project's virtual environment)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        raise BuildError("no Jupyter kernel 'python3': run `python -m ipykernel install --sys-prefix`")
    argv0 = spec.argv[0]
    generic = {"python", f"python{sys.version_info[0]}", "python%d.%d" % sys.version_info[:2]}
    here = Path(os.path.abspath(sys.executable)).parent
    if argv0 not in generic and Path(os.path.abspath(argv0)).parent != here:
        raise BuildError(
            f"kernel 'python3' runs {argv0}, not this environment ({sys.executable}); "
            f"run `{sys.executable} -m ipykernel install --sys-prefix`"
        )


def notebook_metadata(source: Path) -> dict:
    """The notebook-level metadata of a MyST notebook (its front matter), read by jupytext."""
    import jupytext

    try:
        return dict(jupytext.read(source, fmt="md:myst").metadata)
    except Exception as exc:  # jupytext surfaces YAML and format errors with varied types
        first = (str(exc).strip().splitlines() or [""])[0]
        raise BuildError(f"{source.name}: front matter cannot be read "
                         f"({type(exc).__name__}: {first})") from None


NEEDS = {
    "llama.cpp": "llama.cpp's llama-server and llama-speculative, built once per machine from "
                 "the pinned sources, and the book's models in GGUF (tools/engine.py)",
    "engines": "the Python engines' and transformers releases' environments, one table in "
               "tools/py_engines.py",
}


def notebook_spec(source: Path) -> dict:
    """The front matter ``specdec`` of a notebook, checked: ``execute`` (``parallel``, the
    default, or ``alone``) and ``needs`` (a list of :data:`NEEDS`' keys, default none)."""
    spec = notebook_metadata(source).get("specdec") or {}
    if not isinstance(spec, dict) or set(spec) - {"execute", "needs"}:
        raise BuildError(f"{source.name}: front matter specdec must be a mapping with the "
                         f"keys 'execute' and 'needs' (got {spec!r})")
    mode = spec.get("execute", "parallel")
    if mode not in ("parallel", "alone"):
        raise BuildError(f"{source.name}: front matter specdec.execute must be 'parallel' or "
                         f"'alone' (got {mode!r})")
    needs = spec.get("needs", [])
    if not isinstance(needs, list) or set(needs) - set(NEEDS):
        raise BuildError(f"{source.name}: front matter specdec.needs must be a list of "
                         f"{', '.join(NEEDS)} (got {needs!r})")
    return {"execute": mode, "needs": list(needs)}


def executes_alone(source: Path) -> bool:
    """Whether a notebook asks to run with nothing else executing (``specdec: {execute: alone}``).

    Chapters that time code (wall-clock measurements) declare it, so that the build's own
    parallel execution of other notebooks does not load the machine under their clocks.
    """
    return notebook_spec(source)["execute"] == "alone"


def notebook_needs(source: Path) -> list[str]:
    """What a notebook needs prepared before it runs (``specdec: {needs: [llama.cpp]}``):
    a chapter that runs no engine needs nothing beyond the project's own install."""
    return notebook_spec(source)["needs"]


def _relay(stream, prefix: str) -> None:
    """Copy a child's output lines to ours, each behind ``prefix`` (its lines stay whole
    when two preparations print at once)."""
    for line in stream:
        print(f"{prefix}{line.rstrip()}", flush=True)


def prepare(needs: set[str]) -> None:
    """Prepare what the notebooks about to execute need, and only that, saying what and how
    long it took (the first llama.cpp build takes 5-10 minutes on 2 cores).

    The engine environments (``engines``: ``tools/py_engines.py --all``, about 3 minutes
    into an empty cache, mostly downloading and unpacking) are created beside llama.cpp's
    build, which mostly compiles, as CI does; each of their lines is shown behind
    ``environments:``.

    Raises
    ------
    BuildError
        If either preparation fails (nothing is executed then).
    """
    import threading

    t0 = time.perf_counter()
    envs = relay = None
    if "engines" in needs:
        print(f"preparing the engine environments beside the rest ({NEEDS['engines']}); "
              f"cached after the first time", flush=True)
        envs = subprocess.Popen([sys.executable, str(TOOLS / "py_engines.py"), "--all"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        relay = threading.Thread(target=_relay, args=(envs.stdout, "  environments: "),
                                 daemon=True)
        relay.start()
    try:
        if "llama.cpp" in needs:
            print(f"preparing llama.cpp for the notebooks that run it ({NEEDS['llama.cpp']}); "
                  f"cached after the first build", flush=True)
            for extra in ([], ["--target", "llama-speculative"]):
                done = subprocess.run([sys.executable, str(TOOLS / "engine.py"), "build", *extra])
                if done.returncode != 0:
                    raise BuildError(f"tools/engine.py build {' '.join(extra)} failed with "
                                     f"status {done.returncode}: nothing was executed")
            print(f"llama.cpp ready ({time.perf_counter() - t0:.0f} s)", flush=True)
    except BaseException:
        if envs is not None:
            envs.terminate()
            envs.wait()
        raise
    if envs is not None:
        status = envs.wait()
        relay.join()
        if status != 0:
            raise BuildError(f"tools/py_engines.py --all failed with status {status} (its "
                             f"lines above, behind 'environments:'): nothing was executed")
        print(f"engine environments ready ({time.perf_counter() - t0:.0f} s)", flush=True)


#: Environment variable naming another lock file for :func:`machine_lock`: builds that use
#: it are ordered among themselves only. The test session sets it for the builds it runs
#: beside its own whole-book build (tests/conftest.py), so they do not wait for that
#: build's timed pages.
LOCK_ENV = "SPECDEC_EXECUTION_LOCK"


def machine_lock_path() -> Path:
    """The lock file that orders executions on this machine: ``$SPECDEC_EXECUTION_LOCK``
    if set (:data:`LOCK_ENV`), else in the per-machine cache (``$SPECDEC_CACHE``, else
    ``$XDG_CACHE_HOME/specdec-book``, else ``~/.cache/specdec-book``, as
    ``tools/engine.py``), which every clone shares."""
    if os.environ.get(LOCK_ENV):
        return Path(os.environ[LOCK_ENV])
    base = os.environ.get("SPECDEC_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specdec-book"
    return Path(base) / "execution.lock"


@contextlib.contextmanager
def machine_lock(exclusive: bool, what: str):
    """Hold the machine's execution lock while notebooks execute: shared for notebooks that
    may share the machine, exclusive for one that times code (``execute: alone``), so a
    timed chapter never runs beside another build's notebooks, in this clone or another,
    and two timed executions never overlap (they would time each other). A build that has
    to wait says which process it waits for. Where ``fcntl`` is missing (not POSIX) there
    is no lock.
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    path = machine_lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(exist_ok=True)
    with open(path, "r+", encoding="utf-8") as fh:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        try:
            fcntl.flock(fh, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = fh.read().strip() or "another build's notebooks"
            print(f"waiting: {holder} executing on this machine ({path})", flush=True)
            fcntl.flock(fh, mode)
        fh.seek(0)                      # no exclusive holder now: clear a killed one's name
        fh.truncate()
        if exclusive:                   # say who holds it, for a build that has to wait
            fh.write(f"PID {os.getpid()}, timing {what},")
        fh.flush()
        try:
            yield
        finally:
            if exclusive:
                fh.seek(0)
                fh.truncate()
                fh.flush()
            fcntl.flock(fh, fcntl.LOCK_UN)


def execute_all(layout: Layout, params: dict[str, int], *, jobs: int, timeout: int,
                force: bool = False, only: str | None = None) -> tuple[list[dict], bool]:
    """Execute what is not cached; return (rows for the timing table, all succeeded).

    ``only`` names one chapter: just that one is considered (``make chapter``).
    """
    shared = shared_digest(layout, params)
    executed_dir = layout.cache / "executed"
    rows, tasks = [], []
    sources = chapter_sources(layout)
    if only is not None:
        names = [name for name, _ in sources]
        if only not in names:
            raise BuildError(f"NAME must be one of the chapters of {layout.rel(layout.toc)} "
                             f"({', '.join(names)}); got {only!r}")
        sources = [(name, src) for name, src in sources if name == only]
    for name, source in sources:
        fp = notebook_fingerprint(source, shared)
        path = executed_dir / f"{name}-{fp[:20]}.ipynb"
        row = {"name": name, "rel": layout.rel(source), "path": path, "fingerprint": fp}
        if path.exists() and not force:
            meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get("specdec", {})
            row.update(status="cached", seconds=float(meta.get("seconds", 0.0)), ok=True)
        else:
            tasks.append({
                "name": name, "source": str(source), "rel": row["rel"], "path": str(path),
                "staging": str(layout.cache / "staging" / path.name),
                "failed": str(layout.cache / "failed" / f"{name}.ipynb"),
                "fingerprint": fp, "params": params, "timeout": timeout,
                "alone": executes_alone(source),
            })
            row.update(status="executed")
        rows.append(row)

    if tasks:
        check_kernel()
        prepare({need for t in tasks for need in notebook_needs(Path(t["source"]))})
        from concurrent.futures import ProcessPoolExecutor, as_completed
        import multiprocessing

        shared_tasks = [t for t in tasks if not t["alone"]]
        alone_tasks = [t for t in tasks if t["alone"]]
        workers = max(1, min(jobs, len(shared_tasks) or 1))
        print(f"executing {len(shared_tasks)} notebook(s) on {workers} worker(s)"
              + (f", then {len(alone_tasks)} alone (timing measurements)" if alone_tasks else "")
              + "...", flush=True)
        by_name = {row["name"]: row for row in rows}
        ctx = multiprocessing.get_context("spawn")
        executed_dir.mkdir(parents=True, exist_ok=True)
        log = layout.cache / "kernels.log"
        log.unlink(missing_ok=True)
        # First the notebooks that may share the machine, in parallel; then, one at a time
        # with nothing else running, those that time code.
        for batch, n_workers in ((shared_tasks, workers), *(([t], 1) for t in alone_tasks)):
            if not batch:
                continue
            timed = batch[0]["alone"]
            with machine_lock(timed, batch[0]["rel"]), \
                    ProcessPoolExecutor(n_workers, mp_context=ctx, initializer=_init_worker,
                                        initargs=(kernel_environment(layout), str(log),
                                                  os.getpid())) as pool:
                futures = {pool.submit(execute_notebook, t): t["name"] for t in batch}
                for future in as_completed(futures):
                    name, result = futures[future], future.result()
                    row = by_name[name]
                    row.update(ok=result["ok"], seconds=result["seconds"])
                    if not result["ok"]:
                        row.update(status="FAILED", error=result["error"], detail=result["detail"])
                    print(f"  {row['status']:<8} {name} ({result['seconds']:.1f} s)", flush=True)
        prune_cache(executed_dir, [r["name"] for r in rows])
    return rows, all(r["ok"] for r in rows)


def prune_cache(executed_dir: Path, names: list[str]) -> None:
    """Keep the most recent cached executions of each notebook."""
    for name in names:
        pattern = re.compile(re.escape(name) + r"-[0-9a-f]{20}\.ipynb$")
        entries = sorted((p for p in executed_dir.glob(f"{name}-*.ipynb") if pattern.match(p.name)),
                         key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in entries[KEEP_PER_NOTEBOOK:]:
            stale.unlink(missing_ok=True)


def chapter_output(layout: Layout, name: str, params: dict[str, int]) -> Path:
    """Where ``make chapter`` puts one chapter executed alone."""
    return layout.out / "chapter" / f"{name}-seed{params['seed']}-trials{params['trials']}.ipynb"


def publish_one_chapter(layout: Layout, row: dict, params: dict[str, int]) -> Path:
    """Copy one executed chapter to :func:`chapter_output`; the book is left as it is."""
    target = chapter_output(layout, row["name"], params)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".ipynb.tmp")
    shutil.copyfile(row["path"], tmp)
    os.replace(tmp, target)
    return target


def publish_chapters(layout: Layout, rows: list[dict]) -> None:
    """Copy every executed notebook to book/chapters (only called when all succeeded)."""
    layout.chapters.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for row in rows:
        target = layout.chapters / f"{row['name']}.ipynb"
        wanted.add(target.name)
        data = Path(row["path"]).read_bytes()
        if not target.exists() or target.read_bytes() != data:
            tmp = target.with_suffix(".ipynb.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, target)
    for stale in layout.chapters.glob("*.ipynb"):
        if stale.name not in wanted:
            stale.unlink()


# --------------------------------------------------------------------------- rendering


# Pages of _toc.yml that are generated at build time (git-ignored), not committed.
EXECUTION_STATS_PAGE = "book/execution-stats"
LABELS_PAGE = "book/labels"
GENERATED_PAGES = (EXECUTION_STATS_PAGE, LABELS_PAGE)


def prepare_book(layout: Layout, names: list[str]) -> None:
    """Generate the book's derived inputs, just before rendering.

    * ``book/execution-stats.md`` from the executed notebooks (tools/execution_stats.py);
      deterministic, so it only changes when a notebook does.
    * ``book/labels.md``, the index of section labels, from the sources of the pages in
      ``_toc.yml`` (tools/labels.py), when the toc lists it.
    * MathJax, served by the HTML itself (tools/vendor.py): fetched once into this
      repository's ``.cache/vendor`` and copied from there into another book root.
    """
    sys.path.insert(0, str(TOOLS))
    if (TOOLS / "execution_stats.py").exists():
        import execution_stats

        execution_stats.write_page(layout.chapters, layout.root / f"{EXECUTION_STATS_PAGE}.md", names)
    if (TOOLS / "labels.py").exists() and LABELS_PAGE in toc_documents(layout.toc):
        import labels

        labels.write_page(layout.root, layout.toc, layout.root / f"{LABELS_PAGE}.md")
    if (TOOLS / "vendor.py").exists():
        import vendor

        try:
            vendor.ensure_mathjax(REPO)
            vendor.ensure_mathjax(layout.root)
        except vendor.VendorError as exc:
            raise BuildError(str(exc)) from None


def _point_to_source(line: str, layout: Layout) -> str:
    """Shorten paths in a Sphinx message and name the source of an executed notebook."""
    line = line.replace(str(layout.root) + os.sep, "")
    chapters = re.escape(layout.rel(layout.chapters).replace(os.sep, "/"))
    m = re.search(rf"{chapters}/([^/\s:]+)\.ipynb", line)
    if m:
        line += f"  [source: {layout.rel(layout.notebooks / (m.group(1) + '.md'))}]"
    return line


def render_html(layout: Layout) -> tuple[str, float]:
    """Build the HTML unless nothing it reads changed; returns (status, seconds)."""
    html = layout.out / "html"
    stamp_name = ".fingerprint"
    fp = book_fingerprint(layout)
    stamp = html / stamp_name
    if (html / "index.html").exists() and stamp.exists() and stamp.read_text().strip() == fp:
        return "unchanged", 0.0

    print("rendering with jupyter-book...", flush=True)
    t0 = time.perf_counter()
    staging = layout.out / ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    jb = Path(sys.executable).parent / "jupyter-book"
    command = [str(jb) if jb.exists() else "jupyter-book", "build", str(layout.root),
               "--builder", "html", "--all", "-W", "--keep-going",
               "--config", str(layout.config), "--toc", str(layout.toc),
               "--path-output", str(staging)]
    env = dict(os.environ, PYTHONHASHSEED="0")
    # The book's Sphinx extension (tools/book_ext.py) is importable whatever the book root.
    env["PYTHONPATH"] = os.pathsep.join([str(TOOLS)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run(command, cwd=layout.root, env=env, capture_output=True, text=True)
    output = ANSI.sub("", proc.stdout + proc.stderr)
    problems = [ln for ln in output.splitlines() if re.search(r"WARNING|ERROR|CRITICAL", ln)]
    built = staging / "_build" / "html"
    if proc.returncode != 0 or problems or not (built / "index.html").exists():
        shutil.rmtree(staging, ignore_errors=True)
        tail = [_point_to_source(ln, layout) for ln in problems] or output.strip().splitlines()[-25:]
        raise BuildError(
            "jupyter-book failed (Sphinx warnings are errors; _build/html was left as it was):\n"
            + "\n".join("  " + ln for ln in tail)
        )
    (built / stamp_name).write_text(fp + "\n")
    old = layout.out / ".previous-html"
    shutil.rmtree(old, ignore_errors=True)
    if html.exists():
        os.rename(html, old)
    os.rename(built, html)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)
    return "built", time.perf_counter() - t0


# --------------------------------------------------------------------------- report


def print_table(rows: list[dict], html: tuple[str, float] | None, wall: float) -> None:
    width = max([len(r["name"]) for r in rows] + [len("jupyter-book (html)")])
    print(f"\n{'notebook':<{width}}  {'status':<9} {'seconds':>8}")
    print(f"{'-' * width}  {'-' * 9} {'-' * 8}")
    for r in rows:
        print(f"{r['name']:<{width}}  {r['status']:<9} {r.get('seconds', 0.0):>8.1f}")
    if html is not None:
        print(f"{'jupyter-book (html)':<{width}}  {html[0]:<9} {html[1]:>8.1f}")
    n_exec = sum(r["status"] == "executed" for r in rows)
    n_cached = sum(r["status"] == "cached" for r in rows)
    print(f"{n_exec} executed, {n_cached} cached (seconds of the run that produced them); "
          f"wall time {wall:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", default=str(SEED_DEFAULT), help="papermill parameter seed")
    parser.add_argument("--trials", default=str(TRIALS_DEFAULT), help="papermill parameter trials")
    parser.add_argument("--check-params", action="store_true", help="only validate SEED/TRIALS")
    parser.add_argument("--root", default=str(REPO), help="book root (default: this repository)")
    parser.add_argument("--toc", help="table of contents (default: ROOT/_toc.yml)")
    parser.add_argument("--config", help="Jupyter Book config (default: ROOT/_config.yml)")
    parser.add_argument("--notebooks-dir", help="jupytext sources (default: ROOT/notebooks)")
    parser.add_argument("--chapters-dir", help="executed notebooks (default: ROOT/book/chapters)")
    parser.add_argument("--out", help="build output (default: ROOT/_build)")
    parser.add_argument("--cache", help="executed-notebook cache (default: ROOT/.cache)")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    parser.add_argument("--jobs", type=int, default=cores or 1, help="parallel notebooks")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    parser.add_argument("--force", action="store_true", help="re-execute every notebook")
    parser.add_argument("--no-html", action="store_true", help="execute only, skip jupyter-book")
    parser.add_argument("--chapter", metavar="NAME",
                        help="execute only this chapter (e.g. 04-experiment) into "
                             "_build/chapter/; the book is not touched (make chapter NAME=...)")
    args = parser.parse_args(argv)
    wall = time.perf_counter()
    try:
        params = parse_params(args.seed, args.trials)
        if args.check_params:
            return 0
        layout = Layout(Path(args.root), toc=args.toc, config=args.config,
                        notebooks=args.notebooks_dir, chapters=args.chapters_dir,
                        out=args.out, cache=args.cache)
        rows, ok = execute_all(layout, params, jobs=args.jobs, timeout=args.timeout,
                               force=args.force, only=args.chapter)
        if not ok:
            print_table(rows, None, time.perf_counter() - wall)
            for r in rows:
                if not r["ok"]:
                    print(f"\nFAILED {r['error']}", file=sys.stderr)
                    for ln in r.get("detail", []):
                        print(f"    {ln}", file=sys.stderr)
            print(f"\nnothing published: {layout.rel(layout.chapters)} and "
                  f"{layout.rel(layout.out / 'html')} are unchanged; partial output of the failed "
                  f"notebook(s) in {layout.rel(layout.cache / 'failed')}", file=sys.stderr)
            return 1
        if args.chapter is not None:
            target = publish_one_chapter(layout, rows[0], params)
            print_table(rows, None, time.perf_counter() - wall)
            shown = layout.rel(target) if Path.cwd().resolve() == layout.root else str(target)
            print(f"\n{args.chapter} executed with seed {params['seed']}, trials "
                  f"{params['trials']:,}: open {shown} (Jupyter); the book is unchanged")
            return 0
        publish_chapters(layout, rows)
        html = None
        if not args.no_html:
            prepare_book(layout, [r["name"] for r in rows])
            html = render_html(layout)
        print_table(rows, html, time.perf_counter() - wall)
        if html is not None:
            index = layout.out / "html" / "index.html"
            shown = layout.rel(index) if Path.cwd().resolve() == layout.root else str(index)
            print(f"\nopen {shown}")
        return 0
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
