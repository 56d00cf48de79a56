"""A real serving engine for chapter 8: llama.cpp's ``llama-server`` with the book's models.

Tooling, not library: the book's build, the tests and ``make engine`` use it to

* **build** ``llama-server`` from the llama.cpp sources vendored in the PyPI source
  distribution of ``llama-cpp-python`` (version and SHA-256 pinned below, fetched once with
  ``pip download``), with cmake and a C++ compiler, into a per-machine cache
  ``$SPECDEC_CACHE`` (default ``~/.cache/specdec-book``) under
  ``llama-server/<key>/``, where the key hashes the source and the build flags; a build
  that is present is reused (``GGML_NATIVE=ON`` makes it specific to this machine's CPU);
* **convert** the book's models (``models/*.npz``, :mod:`specdec.nn`) to GGUF with the
  ``gguf`` package, float32 tensors whatever the storage of the ``.npz`` (the large
  target is stored as float16 and computed in float32, in numpy and here): architecture
  ``gpt2`` (learned positions, pre-LayerNorm, tanh GELU, head tied to the token
  embedding), zero biases (llama.cpp requires them), a 256-token byte-level BPE
  vocabulary (token id = byte, GPT-2's byte-to-unicode map, one inert merge because an
  empty merge list is refused), BOS and EOS set to byte 0xFF, which
  never occurs in UTF-8 text;
* **build llama-speculative**: :func:`build_speculative` compiles llama.cpp's example
  ``examples/speculative/speculative.cpp`` (stochastic verification, one or several
  draft sequences) from the same pinned sources, linked against the shared libraries
  of the cached ``llama-server`` build (same sources, same flags: no library is
  compiled twice and the llama-server cache is left as it is), into
  ``llama-speculative/<key>/`` with its own copy of those libraries; the key hashes the
  source, the llama-server key and the compile flags;
* **serve**: :func:`serve` starts the server on 127.0.0.1 on a free port, with or without
  the draft (``-md draft.gguf --spec-type draft-simple --spec-draft-n-max gamma``: ``-md``
  alone loads the draft and does not use it), one thread (``-t 1``), waits until
  ``/health`` answers, and always stops it by PID. On Linux the server is also tied to the
  life of the process that started it (:func:`tie_to_parent`), so that a run interrupted
  in any way (SIGTERM, SIGINT, a timeout, a Jupyter kernel killed with SIGKILL) leaves
  no server behind; ``python tools/engine.py serve`` stops with its server.

Command line: ``python tools/engine.py build [--target llama-speculative]|convert|serve|
adopt DIR|path [--target llama-speculative]``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

from specdec.client import llama

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LLAMA_CPP_PYTHON = "0.3.36"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
SDIST_NAME = f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
VENDOR = f"llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp"
CMAKE_FLAGS = ("-DLLAMA_CURL=OFF", "-DGGML_NATIVE=ON", "-DCMAKE_BUILD_TYPE=Release",
               "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF")
TARGET = "llama-server"
SPECULATIVE = "llama-speculative"
SPECULATIVE_SOURCE = "examples/speculative/speculative.cpp"
# What cmake gives a consumer of llama-common and llama at these flags (its flags.make for
# llama-server, whose targets link the same libraries); the headers have no other switch.
SPECULATIVE_CXXFLAGS = ("-std=c++17", "-O3", "-DNDEBUG", "-pthread", "-DGGML_BACKEND_SHARED",
                        "-DGGML_SHARED", "-DGGML_USE_CPU", "-DLLAMA_SHARED",
                        "-DLLAMA_SUBPROCESS")
SPECULATIVE_INCLUDES = ("include", "common", "ggml/include", "vendor")
SPECULATIVE_LIBS = ("llama-common", "llama", "ggml", "ggml-cpu", "ggml-base")
EOS_BYTE = 0xFF
GGUF_FORMAT = "specdec-gpt2-bytes-1"     # bump when the conversion changes


# One error for a build that failed and a server that did not start (specdec.client.llama).
EngineError = llama.EngineError
Server = llama.Server
tie_to_parent = llama.tie_to_parent


def cache_root() -> Path:
    env = os.environ.get("SPECDEC_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specdec-book"


def build_key() -> str:
    """16 hex digits naming a build: the source's SHA-256 and the cmake flags."""
    text = "|".join((SDIST_SHA256, TARGET, *CMAKE_FLAGS))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_dir() -> Path:
    return cache_root() / "llama-server" / build_key()


def server_binary() -> Path:
    return build_dir() / TARGET


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sdist(log=print) -> Path:
    """The pinned source distribution, downloaded once with pip and checked by SHA-256."""
    folder = cache_root() / "sdist"
    path = folder / SDIST_NAME
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        log(f"engine: downloading {SDIST_NAME} with pip (once)")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", str(folder), "-q"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not path.exists():
            raise EngineError(f"pip download of llama-cpp-python=={LLAMA_CPP_PYTHON} failed:\n"
                              f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    digest = _sha256(path)
    if digest != SDIST_SHA256:
        raise EngineError(f"{path}: SHA-256 {digest} is not the pinned {SDIST_SHA256}; "
                          f"delete the file to download it again")
    return path


def _tools() -> dict:
    found = {"cmake": shutil.which("cmake"),
             "C++ compiler": next(filter(None, (os.environ.get("CXX") and shutil.which(
                 os.environ["CXX"]), shutil.which("c++"), shutil.which("g++"),
                 shutil.which("clang++"))), None),
             "C compiler": next(filter(None, (shutil.which("cc"), shutil.which("gcc"),
                                              shutil.which("clang"))), None)}
    missing = [k for k, v in found.items() if not v]
    if missing:
        raise EngineError(f"building llama-server needs {', '.join(missing)}: not found on "
                          f"PATH (Debian/Ubuntu: apt-get install cmake g++)")
    return found


def _works(binary: Path) -> bool:
    if not binary.exists():
        return False
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                          env=_env(binary.parent), timeout=60)
    return done.returncode == 0


_env = llama.library_env


def _install(bin_dir: Path, log=print) -> Path:
    """Copy llama-server and its shared libraries from a build's bin/ into the cache."""
    dest = build_dir()
    tmp = Path(tempfile.mkdtemp(prefix=".install-", dir=dest.parent))
    for item in bin_dir.iterdir():
        if item.name == TARGET or ".so" in item.name:
            shutil.copy2(item, tmp / item.name, follow_symlinks=False)
    if not (tmp / TARGET).exists():
        shutil.rmtree(tmp)
        raise EngineError(f"{bin_dir}: no {TARGET} binary there")
    (tmp / "build.json").write_text(json.dumps({
        "llama_cpp_python": LLAMA_CPP_PYTHON, "sdist_sha256": SDIST_SHA256,
        "cmake_flags": CMAKE_FLAGS, "target": TARGET, "from": str(bin_dir)}, indent=1))
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    if not _works(dest / TARGET):
        raise EngineError(f"{dest / TARGET} does not run (--version failed)")
    log(f"engine: {TARGET} installed in {dest}")
    return dest / TARGET


def build_stage(log_text: str) -> str:
    """How far a cmake build is, from its log: ``"configuring"``, or the last ``[ NN%]``
    make printed (``"43%"``).

    >>> build_stage("$ cmake -S src -B build\\n-- The C compiler")
    'configuring'
    >>> build_stage("[  7%] Building C object a.o\\n[ 43%] Building CXX object b.o\\n")
    '43%'
    """
    import re

    found = re.findall(r"^\[\s*(\d+)%\]", log_text, re.M)
    return f"{found[-1]}%" if found else "configuring"


@contextlib.contextmanager
def _reporting(logfile: Path, t0: float, log=print, every: float = 30.0):
    """While the block runs, say every ``every`` seconds how far the build in ``logfile``
    is and how long it has taken (a line per report: readable in a build log)."""
    import threading

    done = threading.Event()

    def report():
        while not done.wait(every):
            try:
                stage = build_stage(logfile.read_text(errors="replace"))
            except OSError:
                continue
            log(f"engine: building {TARGET}: {stage} after "
                f"{(time.perf_counter() - t0) / 60:.1f} min")

    thread = threading.Thread(target=report, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@contextlib.contextmanager
def _build_lock(log=print):
    """One build at a time on this machine: an exclusive lock on a file of the cache.

    Two builds in the same work folder remove each other's sources (seen when a test
    started a build while ``make engine`` ran); the second waits, says for how long, and
    then finds the binary built.
    """
    import fcntl

    path = cache_root() / "engine-build.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"engine: another build holds {path}; waiting for it")
            t0 = time.monotonic()
            fcntl.flock(fh, fcntl.LOCK_EX)
            log(f"engine: waited {time.monotonic() - t0:.0f} s for the other build")
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build(jobs: int | None = None, log=print) -> Path:
    """``llama-server`` from the pinned sources, built once per machine; its path."""
    binary = server_binary()
    if _works(binary):
        return binary
    with _build_lock(log):
        if _works(binary):                       # built while this one waited
            return binary
        return _build(jobs, log)


def _build(jobs: int | None, log) -> Path:
    _tools()
    source = sdist(log)
    work = cache_root() / "work" / build_key()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    with tarfile.open(source) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(VENDOR + "/")]
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # 3.11.4+
        tar.extractall(work, members=members, **safe)
    src, out = work / VENDOR, work / "build"
    logfile = cache_root() / f"build-{build_key()}.log"
    jobs = jobs or max(os.cpu_count() or 1, 1)
    log(f"engine: building {TARGET} from llama-cpp-python {LLAMA_CPP_PYTHON} (once per "
        f"machine; 5-10 min on 2 cores; log {logfile})")
    t0 = time.perf_counter()
    with open(logfile, "w") as fh, _reporting(logfile, t0, log):
        for cmd in (["cmake", "-S", str(src), "-B", str(out), *CMAKE_FLAGS],
                    ["cmake", "--build", str(out), "--target", TARGET, "-j", str(jobs)]):
            fh.write("$ " + " ".join(cmd) + "\n")
            fh.flush()
            if subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT).returncode != 0:
                tail = logfile.read_text(errors="replace")[-3000:]
                raise EngineError(f"{' '.join(cmd[:3])} failed (log {logfile}):\n{tail}")
    (build_dir().parent).mkdir(parents=True, exist_ok=True)
    path = _install(out / "bin", log)
    shutil.rmtree(work, ignore_errors=True)
    log(f"engine: built in {time.perf_counter() - t0:.0f} s")
    return path


def adopt(cmake_build: Path, log=print) -> Path:
    """Install an existing cmake build of the same pinned sources and flags (for
    example a trial build) into the cache instead of building again."""
    cache = Path(cmake_build) / "CMakeCache.txt"
    if not cache.exists():
        raise EngineError(f"{cmake_build}: not a cmake build directory (no CMakeCache.txt)")
    text = cache.read_text(errors="replace")
    if VENDOR not in text:
        raise EngineError(f"{cmake_build}: not built from {VENDOR}")
    for flag in CMAKE_FLAGS:
        name, value = flag[2:].split("=")
        if not any(line.startswith(name + ":") and line.endswith("=" + value)
                   for line in text.splitlines()):
            raise EngineError(f"{cmake_build}: built without {flag}")
    build_dir().parent.mkdir(parents=True, exist_ok=True)
    return _install(Path(cmake_build) / "bin", log)


def speculative_key() -> str:
    """16 hex digits naming a llama-speculative build: the source's SHA-256, the
    llama-server build it links against and the compile flags."""
    text = "|".join((SDIST_SHA256, SPECULATIVE, SPECULATIVE_SOURCE, build_key(),
                     *SPECULATIVE_CXXFLAGS, *SPECULATIVE_LIBS))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def speculative_dir() -> Path:
    return cache_root() / SPECULATIVE / speculative_key()


def speculative_binary() -> Path:
    return speculative_dir() / SPECULATIVE


def build_speculative(log=print) -> Path:
    """``llama-speculative`` from the pinned sources, built once per machine; its path.

    Builds (or reuses) ``llama-server`` first (:func:`build`), then compiles the one
    source file of the example against that build's shared libraries, copied beside the
    binary (``rpath $ORIGIN``), so that the result does not depend on the llama-server
    folder and the llama-server cache is not touched. About a minute on one core.

    Raises
    ------
    EngineError
        A missing compiler, the compilation failed (the log's tail is shown), or the
        binary does not run.
    """
    binary = speculative_binary()
    if _works(binary):
        return binary
    libs = build(log=log).parent
    cxx = _tools()["C++ compiler"]
    source = sdist(log)
    dest = speculative_dir()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=dest.parent))
    tmp.chmod(0o755)
    logfile = cache_root() / f"build-{SPECULATIVE}-{speculative_key()}.log"
    t0 = time.perf_counter()
    try:
        wanted = tuple(f"{VENDOR}/{d}/" for d in (*SPECULATIVE_INCLUDES,
                                                 str(Path(SPECULATIVE_SOURCE).parent)))
        with tarfile.open(source) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(wanted)]
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(tmp / "src", members=members, **safe)
        src = tmp / "src" / VENDOR
        for item in libs.iterdir():
            if any(item.name.startswith(f"lib{name}.so") for name in SPECULATIVE_LIBS):
                shutil.copy2(item, tmp / item.name, follow_symlinks=False)
        # every library a NEEDED entry, found by the binary's own RPATH: the copied
        # libraries keep the RUNPATH of the llama-server build tree, which is deleted
        cmd = [cxx, *SPECULATIVE_CXXFLAGS,
               *(f"-I{src / d}" for d in SPECULATIVE_INCLUDES), str(src / SPECULATIVE_SOURCE),
               "-o", str(tmp / SPECULATIVE), f"-L{tmp}", "-Wl,--no-as-needed",
               *(f"-l{name}" for name in SPECULATIVE_LIBS),
               "-Wl,--disable-new-dtags,-rpath,$ORIGIN"]
        log(f"engine: compiling {SPECULATIVE} against the llama-server build in {libs} "
            f"(log {logfile})")
        with open(logfile, "w") as fh:
            fh.write("$ " + " ".join(cmd) + "\n")
            fh.flush()
            if subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT).returncode != 0:
                tail = logfile.read_text(errors="replace")[-3000:]
                raise EngineError(f"compiling {SPECULATIVE} failed (log {logfile}):\n{tail}")
        shutil.rmtree(tmp / "src")
        seconds = time.perf_counter() - t0
        (tmp / "build.json").write_text(json.dumps({
            "llama_cpp_python": LLAMA_CPP_PYTHON, "sdist_sha256": SDIST_SHA256,
            "source": SPECULATIVE_SOURCE, "cxxflags": SPECULATIVE_CXXFLAGS,
            "libraries_from": str(libs), "llama_server_key": build_key(),
            "seconds": round(seconds, 1)}, indent=1))
        if not _works(tmp / SPECULATIVE):
            raise EngineError(f"{tmp / SPECULATIVE} does not run (--version failed)")
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"engine: {SPECULATIVE} built in {seconds:.0f} s, installed in {dest}")
    return binary


# ------------------------------------------------------------------------ GGUF
def _byte_vocab() -> list[str]:
    """GPT-2's byte-to-unicode map: the printable text of each byte token."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def models() -> tuple[str, ...]:
    """Names of the book's models: every model of the committed manifest."""
    from specdec import nn

    return tuple(nn.load_manifest()["models"])


def gguf_path(name: str) -> Path:
    from specdec import nn

    model = nn.load_model(name)
    tag = hashlib.sha256((model.weight_hash() + GGUF_FORMAT).encode()).hexdigest()[:16]
    return cache_root() / "gguf" / f"{name}-{tag}.gguf"


def convert(name: str, log=print) -> Path:
    """The book's model ``name`` as a GGUF file in the cache (converted once)."""
    import gguf

    from specdec import nn

    path = gguf_path(name)
    if path.exists():
        return path
    model = nn.load_model(name)
    cfg, w = model.config, model.weights
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    writer = gguf.GGUFWriter(str(tmp), "gpt2")
    writer.add_name(f"specdec-book {name}")
    writer.add_context_length(cfg.context)
    writer.add_embedding_length(cfg.d_model)
    writer.add_feed_forward_length(4 * cfg.d_model)
    writer.add_block_count(cfg.n_layers)
    writer.add_head_count(cfg.n_heads)
    writer.add_layer_norm_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    vocab = _byte_vocab()
    writer.add_token_list(vocab)
    types = [gguf.TokenType.NORMAL] * 256
    types[EOS_BYTE] = gguf.TokenType.CONTROL
    writer.add_token_types(types)
    writer.add_token_merges([f"{vocab[0]} {vocab[1]}"])      # inert: never a token
    writer.add_bos_token_id(EOS_BYTE)
    writer.add_eos_token_id(EOS_BYTE)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)
    zeros = lambda n: np.zeros(n, dtype=np.float32)
    d = cfg.d_model
    writer.add_tensor("token_embd.weight", f32(w["tok_emb.weight"]))
    writer.add_tensor("position_embd.weight", f32(w["pos_emb.weight"]))
    writer.add_tensor("output_norm.weight", f32(w["ln_f.weight"]))
    writer.add_tensor("output_norm.bias", f32(w["ln_f.bias"]))
    for i in range(cfg.n_layers):
        p, q = f"blocks.{i}.", f"blk.{i}."
        writer.add_tensor(q + "attn_norm.weight", f32(w[p + "ln1.weight"]))
        writer.add_tensor(q + "attn_norm.bias", f32(w[p + "ln1.bias"]))
        writer.add_tensor(q + "attn_qkv.weight", f32(w[p + "qkv.weight"].T))  # (out, in)
        writer.add_tensor(q + "attn_qkv.bias", zeros(3 * d))
        writer.add_tensor(q + "attn_output.weight", f32(w[p + "proj.weight"].T))
        writer.add_tensor(q + "attn_output.bias", zeros(d))
        writer.add_tensor(q + "ffn_norm.weight", f32(w[p + "ln2.weight"]))
        writer.add_tensor(q + "ffn_norm.bias", f32(w[p + "ln2.bias"]))
        writer.add_tensor(q + "ffn_up.weight", f32(w[p + "fc.weight"].T))
        writer.add_tensor(q + "ffn_up.bias", zeros(4 * d))
        writer.add_tensor(q + "ffn_down.weight", f32(w[p + "out.weight"].T))
        writer.add_tensor(q + "ffn_down.bias", zeros(d))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.rename(path)
    log(f"engine: {name} converted to {path}")
    return path


# ------------------------------------------------------------------------ serving
# Starting and stopping a server is the server tools' (specdec.client.llama, which knows
# a binary and GGUF paths only); here the book's models are named and built first.

def serve(target: str = "target", draft: str | None = None, gamma: int = 3, *,
          parallel: int = 1, threads: int = 1, exact_cache: bool = False,
          extra: tuple[str, ...] = (), startup: float = 120.0, log=print):
    """:func:`specdec.client.llama.serve` with the book's models, by name: builds
    llama-server and converts the models first if needed (cached).

    Parameters
    ----------
    target, draft : str
        Names of the book's models (``target``, ``target_wide``, ``target_large``,
        ``draft``); no draft: plain decoding.
    gamma, parallel, threads, exact_cache, extra, startup
        As for :func:`specdec.client.llama.serve`.
    log : callable
        Where the build's progress goes.

    Raises
    ------
    EngineError
        The build failed, or the server exited or did not become healthy in time.
    """
    if not (isinstance(gamma, int) and gamma >= 1):
        raise ValueError(f"gamma: must be an integer >= 1 (got {gamma!r})")
    binary = build(log=log)
    return llama.serve(binary, convert(target, log),
                       None if draft is None else convert(draft, log), gamma,
                       parallel=parallel, threads=threads, exact_cache=exact_cache,
                       extra=extra, startup=startup, log_dir=cache_root() / "logs",
                       draft=draft)


def serve_until_stopped(target: str = "target", draft: str | None = None, gamma: int = 3,
                        *, poll: float = 0.5, out=None, err=None) -> int:
    """``python tools/engine.py serve``: :func:`specdec.client.llama.serve_until_stopped`
    with the book's models (0: stopped by SIGTERM or Ctrl-C; 1: the server died or could
    not start)."""
    label = target + (f" with {draft}, gamma {gamma}" if draft else "")
    try:
        context = serve(target, draft, gamma)
    except EngineError as error:
        print(f"error: {error}", file=err or sys.stderr, flush=True)
        return 1
    return llama.serve_until_stopped(context, label=label, poll=poll, out=out, err=err)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python tools/engine.py", description=__doc__.split(
        "\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build llama-server once and convert the models")
    b.add_argument("-j", "--jobs", type=int)
    b.add_argument("--target", choices=(TARGET, SPECULATIVE), default=TARGET,
                   help=f"{SPECULATIVE}: also compile llama.cpp's speculative example")
    a = sub.add_parser("adopt", help="install an existing cmake build of the pinned sources")
    a.add_argument("dir", type=Path)
    sub.add_parser("convert", help="convert the book's models to GGUF")
    s = sub.add_parser("serve", help="serve a model until SIGTERM or Ctrl-C (exit status 0) "
                                     "or until the server dies (exit status 1)")
    s.add_argument("--target", default="target")
    s.add_argument("--draft")
    s.add_argument("--gamma", type=int, default=3)
    pa = sub.add_parser("path", help="print the llama-server path (build it if needed), or "
                                     "with --model NAME the GGUF file of a book's model")
    pa.add_argument("--target", choices=(TARGET, SPECULATIVE), default=TARGET)
    pa.add_argument("--model", help="a book's model (target, target_large, draft, ...)")
    args = p.parse_args(argv)
    try:
        if args.cmd == "adopt":
            adopt(args.dir)
        elif args.cmd == "build":
            build(args.jobs)
            if args.target == SPECULATIVE:
                build_speculative()
            for name in models():
                convert(name)
        elif args.cmd == "convert":
            for name in models():
                print(convert(name))
        elif args.cmd == "path" and args.model:
            print(convert(args.model, log=lambda *_: None))
        elif args.cmd == "path":
            print(build_speculative() if args.target == SPECULATIVE else build())
        elif args.cmd == "serve":
            return serve_until_stopped(args.target, args.draft, args.gamma)
    except EngineError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
