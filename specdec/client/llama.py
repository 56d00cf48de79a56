"""llama.cpp's ``llama-server``, started and stopped by this process: a binary and GGUF paths in.

The server tools (:mod:`specdec.client`: the benchmark, the per-token exactness check) run
against any OpenAI-compatible server; this module starts one of llama.cpp's for them, with
nothing known of how the binary was built or where the models came from (the book builds
both with ``tools/engine.py``; an engineer gives her own):

* :func:`serve` starts ``llama-server`` on 127.0.0.1 on a free port, with or without a draft
  model (``-md DRAFT --spec-type draft-simple --spec-draft-n-max gamma``: ``-md`` alone
  loads the draft and does not use it), waits until ``/health`` answers, yields a
  :class:`Server` and always stops it by PID (SIGTERM, then SIGKILL after 10 s);
* on Linux the server is also tied to the life of the process that started it
  (:func:`tie_to_parent`), so a run interrupted in any way (SIGTERM, SIGINT, a timeout, a
  Jupyter kernel killed with SIGKILL) leaves no server behind;
* :func:`serve_until_stopped` serves until SIGTERM or Ctrl-C, or until the server dies
  (``specdec serve``).

Only the loopback address is ever used. The shared libraries next to the binary are put
on ``LD_LIBRARY_PATH`` (:func:`library_env`), as llama.cpp's build leaves them there.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["EngineError", "Server", "serve", "serve_until_stopped", "tie_to_parent",
           "free_port", "library_env"]


class EngineError(RuntimeError):
    """The engine could not be built, converted or started; the message says why."""


def library_env(folder: Path) -> dict:
    """The environment with ``folder`` (a binary's own, holding its ``.so`` files) first on
    ``LD_LIBRARY_PATH``."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, (str(folder),
                                                           env.get("LD_LIBRARY_PATH"))))
    return env


@dataclass(frozen=True)
class Server:
    """A running llama-server: its URL, PID, command line and log file.

    :meth:`poll` says whether it still runs (None) or how it ended (its exit status,
    ``-N`` when killed by signal ``N``).
    """

    url: str
    pid: int
    port: int
    args: tuple[str, ...]
    log: Path
    draft: str | None
    gamma: int | None
    process: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    def poll(self) -> int | None:
        """None while the server runs, else its exit status (``-N``: killed by signal N)."""
        return None if self.process is None else self.process.poll()


# Run as ``python -I -S -c _TIED PARENT_PID PROGRAM ARGS...`` in the child: ask the kernel
# for SIGKILL when the parent dies (prctl(PR_SET_PDEATHSIG), PR_SET_PDEATHSIG = 1), check
# that the parent did not die before that (it would then be another process), and
# replace this interpreter by the program: same PID, nothing left in between.
_TIED = """\
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_PDEATHSIG): " + os.strerror(ctypes.get_errno()))
if os.getppid() != int(sys.argv[1]):
    sys.exit("the parent process exited before its child started")
os.execv(sys.argv[2], sys.argv[2:])
"""


def tie_to_parent(args: list[str]) -> list[str]:
    """The command line that runs ``args`` killed (SIGKILL) when the caller's process dies.

    Linux's ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` is set in the child, before it becomes
    ``args[0]`` by ``execv`` (same PID), by a small interpreter (``python -I -S``, about
    20 ms) rather than by ``preexec_fn``, which is unsafe in a process with threads such
    as a Jupyter kernel. The kernel delivers the signal however the parent ends: normal
    exit, an exception, SIGTERM or SIGINT without a handler, SIGKILL (papermill's timeout
    kills the kernel so), a crash, the OOM killer; no handler or watchdog process has to
    survive for it, and a watchdog could itself be killed first (``timeout`` signals the
    whole process group). The child checks that its parent is still the caller after
    the call, which closes the window in which the parent could die unnoticed.

    The signal follows the *thread* that started the child: start a server from a thread
    that outlives it (:func:`serve` is a context manager: its thread does). Elsewhere
    than Linux ``args`` is returned unchanged and only :func:`serve`'s own stopping applies.

    Parameters
    ----------
    args : list of str
        Program (an absolute path) and its arguments.

    Returns
    -------
    list of str
        The command line to give :class:`subprocess.Popen`.
    """
    if not sys.platform.startswith("linux") or not sys.executable:
        return list(args)
    return [sys.executable, "-I", "-S", "-c", _TIED, str(os.getpid()), *args]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the caller retries if it is taken before use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _stop(proc: subprocess.Popen, group: bool = False) -> None:
    """Stop a server by PID: SIGTERM, then SIGKILL if it has not ended in 10 s.

    ``group``: the server leads a process group of its own (its children, e.g. vLLM's
    engine core and worker, may outlive it), and the whole group is signalled, waiting
    until every member is gone.
    """
    if not group:
        if proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(10)
            deadline = time.monotonic() + 10          # the children may outlive the leader
            while time.monotonic() < deadline:
                os.killpg(proc.pid, 0)
                time.sleep(0.2)
        except ProcessLookupError:
            break
        except subprocess.TimeoutExpired:
            continue
    if proc.poll() is None:
        proc.wait(10)


@contextlib.contextmanager
def local_server(command, *, name: str, env=None, log_dir=None, startup: float = 120.0,
                 poll: float = 0.1, group: bool = False):
    """Start a server on 127.0.0.1 on a free port, wait for its ``/health``, yield, stop it.

    The one start-and-stop of every server the tools run (llama.cpp's by :func:`serve`,
    vLLM's by :mod:`specdec.conformance.adapters.vllm_server`): a free port (retried up to
    three times when the server reports the address taken), a log file per port, the
    server tied to the caller (:func:`tie_to_parent`) and always stopped by PID
    (:func:`_stop`), however the block ends.

    Parameters
    ----------
    command : callable
        ``command(port) -> list of str``: the program (absolute path) and its arguments.
    name : str
        The server's name, in file names and messages.
    env : dict, optional
        Its environment (default this process's).
    log_dir : path, optional
        Where ``NAME-PORT.log`` goes (default a folder of the temporary directory).
    startup, poll : float
        Seconds to wait for ``/health``, and between two looks.
    group : bool
        Start it in a process group of its own and stop the whole group.

    Yields
    ------
    tuple
        ``(process, url, port, args, log)``.

    Raises
    ------
    EngineError
        The server exited, or did not answer ``/health`` within ``startup`` seconds (the
        log's tail is in the message), or no port could be had.
    """
    logdir = Path(log_dir) if log_dir is not None else \
        Path(tempfile.gettempdir()) / f"specdec-{name}"
    logdir.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):                      # a free port can be taken in between
        port = free_port()
        args = list(command(port))
        logfile = logdir / f"{name}-{port}.log"
        url = f"http://127.0.0.1:{port}"
        with open(logfile, "w") as fh:
            proc = subprocess.Popen(tie_to_parent(args), stdout=fh, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=group)
        try:
            deadline = time.monotonic() + startup
            while time.monotonic() < deadline and proc.poll() is None and not _healthy(url):
                time.sleep(poll)
            if proc.poll() is not None:
                tail = logfile.read_text(errors="replace")[-3000:]
                if attempt < 2 and any(w in tail.lower() for w in ("bind", "address already "
                                                                              "in use")):
                    continue
                raise EngineError(f"{name} exited with status {proc.returncode} "
                                  f"(log {logfile}):\n{tail}")
            if not _healthy(url):
                raise EngineError(f"{name} did not answer {url}/health within {startup:g} s "
                                  f"(log {logfile}):\n"
                                  f"{logfile.read_text(errors='replace')[-3000:]}")
            yield proc, url, port, args, logfile
            return
        finally:
            _stop(proc, group)
    raise EngineError(f"{name}: no free port after 3 attempts")


def _check_file(path, name: str) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name}: must be a path (got {type(path).__name__})")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{name}: {path} is not a file")
    return path


@contextlib.contextmanager
def serve(binary, model, draft_model=None, gamma: int = 3, *, parallel: int = 1,
          threads: int = 1, exact_cache: bool = False, extra: tuple[str, ...] = (),
          startup: float = 120.0, log_dir=None, draft: str | None = None):
    """Start llama-server on 127.0.0.1 on a free port; yield a :class:`Server`; stop it.

    The server is stopped by PID (SIGTERM, then SIGKILL after 10 s) when the block ends,
    normally or by an exception; on Linux it is also killed when the calling process dies
    in a way that runs no code (:func:`tie_to_parent`).

    Parameters
    ----------
    binary : path
        The ``llama-server`` executable; its folder holds its shared libraries.
    model, draft_model : path
        GGUF files of the target and, for speculative decoding, the draft; no draft:
        plain decoding.
    gamma : int
        Draft length (``--spec-draft-n-max``; ``--spec-draft-n-min 0``, ``p-min 0``).
    parallel : int
        Slots (concurrent requests); the context is 128 positions per slot.
    threads : int
        ``-t`` and ``-tb``.
    exact_cache : bool
        Float32 KV cache and no flash attention (``-ctk f32 -ctv f32 -fa off``): the
        setting under which the book's models' logits agree with :mod:`specdec.nn`
        within 2.4e-4.
    extra : tuple of str
        More command-line arguments (e.g. ``--spec-synth-len 2`` for a non-exact server).
    startup : float
        Seconds to wait for ``/health``.
    log_dir : path, optional
        Where the server's log goes (``llama-server-PORT.log``); default a folder of the
        system's temporary directory.
    draft : str, optional
        A name for the draft in :attr:`Server.draft` (default the draft file's stem).

    Raises
    ------
    FileNotFoundError
        ``binary``, ``model`` or ``draft_model`` is not a file.
    ValueError
        ``gamma`` is not an integer >= 1.
    EngineError
        The server exited or did not become healthy in time (the log's tail is shown).
    """
    binary = _check_file(binary, "binary")
    model = _check_file(model, "model")
    if draft_model is not None:
        draft_model = _check_file(draft_model, "draft_model")
        draft = draft or draft_model.stem
    else:
        draft = None
    if isinstance(gamma, bool) or not (isinstance(gamma, int) and gamma >= 1):
        raise ValueError(f"gamma: must be an integer >= 1 (got {gamma!r})")
    args = [str(binary), "-m", str(model), "--host", "127.0.0.1",
            "-t", str(threads), "-tb", str(threads), "-np", str(parallel),
            "-c", str(128 * parallel), "--no-warmup", "--no-webui"]
    if draft_model is not None:
        args += ["-md", str(draft_model), "--spec-type", "draft-simple",
                 "--spec-draft-n-max", str(gamma), "--spec-draft-n-min", "0",
                 "--spec-draft-p-min", "0"]
    if exact_cache:
        args += ["-ctk", "f32", "-ctv", "f32", "-fa", "off"]
        if draft_model is not None:
            args += ["-ctkd", "f32", "-ctvd", "f32"]
    args += list(extra)
    with local_server(lambda port: args + ["--port", str(port)], name="llama-server",
                      env=library_env(binary.parent), log_dir=log_dir,
                      startup=startup) as (proc, url, port, full, logfile):
        yield Server(url, proc.pid, port, tuple(full), logfile, draft,
                     gamma if draft_model is not None else None, proc)


class _Stopped(BaseException):
    """Raised by the signal handler of :func:`serve_until_stopped`."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def serve_until_stopped(server_context, *, label: str, poll: float = 0.5, out=None,
                        err=None) -> int:
    """Serve until SIGTERM or SIGINT, or until the server dies.

    Parameters
    ----------
    server_context : context manager
        What starts and stops the server, yielding a :class:`Server`: a call of
        :func:`serve` (not yet entered).
    label : str
        What is served, for the messages (``"target with draft, gamma 3"``).
    poll : float
        Seconds between two checks that the server still runs.
    out, err : file, optional
        Where messages go (default standard output and standard error).

    Returns
    -------
    int
        0 when stopped by SIGTERM or SIGINT (Ctrl-C), the server stopped by PID; 1 when the
        server exited by itself or could not start (the message on ``err`` says how, with
        the tail of its log).
    """
    out, err = out or sys.stdout, err or sys.stderr

    def stop(signum, frame):
        for s in (signal.SIGTERM, signal.SIGINT):    # once: let the cleanup run in peace
            signal.signal(s, signal.SIG_IGN)
        raise _Stopped(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with server_context as server:
            print(f"serving {label} at {server.url} (PID {server.pid}); Ctrl-C or SIGTERM "
                  f"stops it", file=out, flush=True)
            while (code := server.poll()) is None:
                time.sleep(poll)
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else \
            f"exited with status {code}"
        tail = "\n".join(server.log.read_text(errors="replace").splitlines()[-12:])
        print(f"error: llama-server (PID {server.pid}, {server.url}) {how}; serve stops "
              f"(log {server.log}):\n{tail}", file=err, flush=True)
        return 1
    except _Stopped as stopped:
        print(f"serve: {signal.Signals(stopped.signum).name} received; llama-server stopped",
              file=out, flush=True)
        return 0
    except (EngineError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=err, flush=True)
        return 1
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
