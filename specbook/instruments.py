"""Chapter 8's instruments on a served engine: pass timings, the sampled-text protocol, context.

The measuring parts of the served study (:mod:`specbook.served` runs them):

* :func:`step_times` and :func:`pass_times`: the engine's decoding steps inside a
  generation and its passes over new positions, behind the cost model's ``c`` and
  ``g(gamma)``, on the plain and the draft-only server;
  :func:`last_level_cache` and :func:`weight_bytes` put the weights beside the cache;
* the paired protocol on sampled text (:func:`sampled_protocol`): the mixed-language stream
  of held-out prompts at batch one (:func:`interleave_languages`), with a bootstrap
  interval over prompts (:func:`ratio_interval`), the repetition of a text
  (:func:`distinct_ngram_share`), the cost model's inputs from each window of pass timings
  by an estimator fixed before the run (:data:`COST_ESTIMATOR`, :func:`window_costs`) and
  its prediction (:func:`predicted_speedup`); the headline fixed before the run
  (:data:`HEADLINE`);
* the context of a run: a one-thread memory-bandwidth baseline (:func:`memory_bandwidth`),
  the CPU (:func:`cpu_model`), the pinned engine's commit (:func:`pinned_commit`) and the
  server's settings (:func:`server_context`, :func:`run_context`).

Used in Chapter 8.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

import numpy as np

from specdec import client as cl
from specdec import cost
from specdec import nn
from specdec.laws import check_int
from specdec.measure import cpu_model, rotation
from specdec.stats import ratio_interval

__all__ = ["thread_times", "pass_times", "step_times", "first_token_times", "last_level_cache", "weight_bytes", "COST_ESTIMATOR", "HEADLINE",
           "interleave_languages", "distinct_ngram_share", "ratio_interval", "memory_bandwidth",
           "cpu_model", "pinned_commit", "server_context", "run_context", "sampled_protocol",
           "window_costs", "predicted_speedup"]

# ------------------------------------------------------------------ pass timings
def _one(endpoint: cl.Endpoint, prompt: str, max_tokens: int) -> dict:
    """The engine's ``timings`` of one greedy request (llama.cpp reuses the cached prefix)."""
    spec = cl.RequestSpec("cost", prompt, max_tokens, cl.plain_sampling(0.0), 0,
                          extra={"cache_prompt": True})
    return dict(cl.closed_loop(endpoint, [spec]).records[0].timings)


def thread_times(pid: int, tid: int | None = None) -> tuple[float, float] | None:
    """Milliseconds that thread ``tid`` of process ``pid`` has run on a processor and has
    waited for one, so far.

    Read from Linux's ``/proc/PID/task/TID/schedstat``: its first field is the time the
    thread ran, its second the time it was ready to run but waited on a run queue while
    other threads held the processors (nanoseconds). ``tid`` defaults to ``pid``, the
    process's main thread: the thread that runs llama-server's decoding loop (its HTTP
    threads are others).

    Returns
    -------
    tuple of float, or None
        ``(ran_ms, waited_ms)``; None where the file does not exist (not Linux, no such
        process or thread, scheduler statistics compiled out).
    """
    tid = pid if tid is None else tid
    try:
        with open(f"/proc/{int(pid)}/task/{int(tid)}/schedstat") as fh:
            ran, waited = fh.read().split()[:2]
        return int(ran) / 1e6, int(waited) / 1e6
    except (OSError, ValueError):
        return None


def _check_endpoints(endpoints) -> None:
    """``endpoints`` must be a non-empty dict of names to Endpoint (named errors)."""
    if not isinstance(endpoints, dict):
        raise TypeError(f"endpoints: must be a dict of names to Endpoint (got "
                        f"{type(endpoints).__name__})")
    if not endpoints:
        raise ValueError("endpoints: must name at least one server")


def _checked_pids(pids, endpoints) -> dict:
    """``pids`` as a dict whose names are all among ``endpoints`` (named error)."""
    pids = dict(pids or {})
    if set(pids) - set(endpoints):
        raise ValueError(f"pids: names {sorted(set(pids) - set(endpoints))} are not among "
                         f"the endpoints {sorted(endpoints)}")
    return pids


def _timed(endpoint: cl.Endpoint, prompt: str, max_tokens: int,
           pid: int | None) -> tuple[dict, float | None, float | None]:
    """:func:`_one` with the CPU time the server's thread ``pid`` ran and waited during
    the request (:func:`thread_times`; None without a PID or thread times)."""
    before = None if pid is None else thread_times(pid)
    timings = _one(endpoint, prompt, max_tokens)
    after = None if pid is None else thread_times(pid)
    if before is None or after is None:
        return timings, None, None
    return timings, after[0] - before[0], after[1] - before[1]


def pass_times(endpoints: dict, prefix: str, continuation: str, positions: Sequence[int],
               repeats: int, pids: dict | None = None, offset: int = 0) -> list[dict]:
    """Time of one forward pass over ``k`` new positions, per server: the engine's wall
    time (llama.cpp's ``timings.prompt_ms`` with ``timings.prompt_n == k``) and, where
    the server's PID is given, the CPU time its decoding thread spent on the request and
    the time it waited for a processor meanwhile.

    For every repeat, server (in an order that rotates with the repeat) and ``k`` in
    ``positions``: a request with ``prefix`` fills the server's cache, then a request with
    ``prefix + continuation[:k]`` makes the engine evaluate only the ``k`` new bytes in one
    batch: a target pass scoring ``k`` positions, the same kernel calls a verification
    pass of ``gamma + 1 = k`` positions makes (with logits for the last position only,
    256 of them: a negligible share). ``prefix`` and ``continuation`` must be ASCII so
    that characters are bytes are tokens. Rows where the engine evaluated another number
    of positions than ``k`` (it re-evaluates a cached byte when the new text starts with
    the byte it generated) are kept with their own ``prompt_n``.

    The CPU time (:func:`thread_times` before and after the second request) is the pass
    plus the sampling of one token and the request's bookkeeping on that thread (about
    0.05 ms here); unlike the wall time it does not grow while the thread waits for a
    processor that another process holds, which on a busy machine inflates a short pass
    and a long one by different factors. The wait is recorded too, but it is not the
    pass's own: on two cores the thread also waits to be woken for the request.

    Parameters
    ----------
    endpoints : dict of str to Endpoint
    prefix, continuation : str
        ASCII; ``continuation`` at least ``max(positions)`` characters.
    positions : sequence of int
        Numbers of new positions, each >= 1, timed on every server (a cost window times
        one to ``gamma + 1`` on the target).
    repeats : int
        >= 1.
    pids : dict of str to int, optional
        The PID of each endpoint's server (same keys); without it, or where the system
        does not report thread times, ``cpu_ms`` and ``wait_ms`` are None.
    offset : int
        Number of the first round, >= 0: the orders rotate with ``offset + repeat``, so
        rounds timed one at a time (a window spread through a stream) keep rotating.

    Returns
    -------
    list of dict
        ``server``, ``repeat`` (the round, from ``offset``), ``positions`` (the engine's
        ``prompt_n``), ``ms`` (the engine's wall time of the pass), ``cpu_ms`` and
        ``wait_ms`` (the decoding thread's CPU time and wait for a processor during the
        request, or None).

    Raises
    ------
    TypeError, ValueError
        Arguments of the wrong type or out of range (named).
    """
    if not (isinstance(prefix, str) and isinstance(continuation, str)):
        raise TypeError("prefix, continuation: must be strings")
    if not (prefix.isascii() and continuation.isascii()):
        raise ValueError("prefix, continuation: must be ASCII (one byte, one token)")
    _check_endpoints(endpoints)
    if isinstance(positions, (str, bytes)) or not isinstance(positions, (list, tuple, range)):
        raise TypeError(f"positions: must be a sequence of integers (got {positions!r})")
    if not positions:
        raise ValueError("positions: must hold at least one number of positions")
    positions = [check_int(k, "positions") for k in positions]
    longest = max(positions)
    repeats = check_int(repeats, "repeats")
    offset = check_int(offset, "offset", minimum=0)
    if longest > len(continuation):
        raise ValueError(f"continuation: needs at least {longest} characters")
    pids = _checked_pids(pids, endpoints)
    rows = []
    for r in range(offset, offset + repeats):
        for name in rotation(list(endpoints), r):
            pid = pids.get(name)
            for k in rotation(positions, r):
                _one(endpoints[name], prefix, 1)
                t, ran, wait = _timed(endpoints[name], prefix + continuation[:k], 1, pid)
                rows.append({"server": name, "repeat": r, "positions": int(t["prompt_n"]),
                             "ms": float(t["prompt_ms"]), "cpu_ms": ran, "wait_ms": wait})
    return rows


def step_times(endpoints: dict, prefix: str, steps: int, repeats: int,
               pids: dict | None = None, offset: int = 0) -> list[dict]:
    """Time of one decoding step inside a generation, per server: what a step of a stream
    costs, without the work a request adds once (reading and tokenizing it, finding its
    slot and cached prefix, answering).

    For every repeat and server (in an order that rotates with the repeat): a request with
    ``prefix`` fills the server's cache; then, on the same cached prefix, a one-token
    request and a request of ``1 + steps`` tokens (greedy). Both evaluate the same one
    position and sample the first token; the longer one then decodes ``steps`` more, one
    position each. The difference of the two, over the steps decoded, is the marginal
    time of a step: in wall time from the engine's ``timings.predicted_ms``, and in CPU
    time of the server's decoding thread (:func:`thread_times` around each request).

    A one-position pass timed alone (:func:`pass_times`) includes a request's fixed work
    once; a speculative cycle of ``gamma`` draft steps would count the draft's ``gamma``
    times over, a few tenths of a millisecond each on a draft whose step costs less.

    The requests are streamed, as the paired stream's are, so a step includes the work of
    sending its token (a few hundredths of a millisecond of CPU time here). A plain stream
    pays it per token; a speculative cycle pays it per emitted token, not per draft step,
    so a cost model built on these steps charges the draft's ``gamma`` steps a little
    more than the cycle spends on them: about 1% of a large-target cycle here, more on a
    target whose step is a fraction of a millisecond.

    Parameters
    ----------
    endpoints : dict of str to Endpoint
        Non-empty.
    prefix : str
        ASCII (one byte, one token).
    steps : int
        Decoding steps timed per repeat, >= 1.
    repeats : int
        >= 1.
    pids : dict of str to int, optional
        The PID of each endpoint's server (same keys); without it, or where the system
        does not report thread times, ``cpu_ms`` is None.
    offset : int
        Number of the first round, >= 0 (rotates the order as in :func:`pass_times`).

    Returns
    -------
    list of dict
        ``server``, ``repeat``, ``steps`` (the steps the engine decoded: ``steps`` unless
        it stopped early), ``ms`` (wall time per step, milliseconds), ``cpu_ms`` (CPU
        time per step, or None).

    Raises
    ------
    TypeError, ValueError
        Arguments of the wrong type or out of range (named).
    RuntimeError
        A server reported no ``predicted_n`` or ``predicted_ms`` (llama.cpp's
        ``timings``), decoded more than one token for the one-token request, or none
        beyond the first for the longer one.
    """
    if not isinstance(prefix, str):
        raise TypeError("prefix: must be a string")
    if not prefix.isascii() or not prefix:
        raise ValueError("prefix: must be non-empty ASCII (one byte, one token)")
    _check_endpoints(endpoints)
    steps = check_int(steps, "steps")
    repeats = check_int(repeats, "repeats")
    offset = check_int(offset, "offset", minimum=0)
    pids = _checked_pids(pids, endpoints)
    rows = []
    for r in range(offset, offset + repeats):
        for name in rotation(list(endpoints), r):
            pid, ep = pids.get(name), endpoints[name]
            _one(ep, prefix, 1)
            short, short_cpu, _ = _timed(ep, prefix, 1, pid)
            long, long_cpu, _ = _timed(ep, prefix, 1 + steps, pid)
            for got in (short, long):
                missing = [k for k in ("predicted_n", "predicted_ms") if k not in got]
                if missing:
                    raise RuntimeError(f"step_times: {name!r} reported no "
                                       f"{' or '.join(missing)} in its timings (llama.cpp's "
                                       f"server reports both; this server cannot be timed "
                                       f"step by step this way)")
            if int(short["predicted_n"]) != 1:
                raise RuntimeError(f"step_times: {name!r} decoded {short['predicted_n']} "
                                   f"tokens for a one-token request (does it ignore "
                                   f"max_tokens?)")
            decoded = int(long["predicted_n"]) - 1
            if decoded < 1:
                raise RuntimeError(f"step_times: {name!r} decoded {long['predicted_n']} "
                                   f"token(s) for a request of {1 + steps}: no step beyond "
                                   f"the first token (did it stop at an end of text?)")
            cpu = (None if short_cpu is None or long_cpu is None else
                   (long_cpu - short_cpu) / decoded)
            rows.append({"server": name, "repeat": r, "steps": decoded,
                         "ms": (float(long["predicted_ms"]) - float(short["predicted_ms"]))
                         / decoded, "cpu_ms": cpu})
    return rows


def first_token_times(endpoints: dict, prompt: str, temperature: float, seed: int,
                      order: int = 0) -> list[dict]:
    """Time to first token of one request per server, ``prompt`` and one token (the
    servers in an order that rotates with ``order``): what a request costs before its
    decoding steps, the fixed part of the cost model per request (:func:`predicted_speedup`).

    The time is the whole one-token request's, sent to answered, as the client times it:
    a byte that ends inside a UTF-8 character arrives with no text of its own, so the
    client's time to first *text* is not defined for every one-token request.

    Returns
    -------
    list of dict
        ``setting`` (the endpoint's name), ``ms`` (milliseconds).
    """
    spec = cl.RequestSpec("first-token", prompt, 1, cl.plain_sampling(temperature), seed)
    return [{"setting": name,
             "ms": 1e3 * cl.closed_loop(endpoints[name], [spec], 1).records[0].e2e}
            for name in rotation(list(endpoints), order)]


def _fastest_and_median(rows, server, k, key="ms"):
    ms = [x[key] for x in rows if x["server"] == server and x["positions"] == k]
    if not ms:
        raise RuntimeError(f"no pass of {k} positions measured on {server}")
    return float(np.min(ms)), float(np.median(ms))


def last_level_cache() -> int | None:
    """Size in bytes of the largest CPU cache of processor 0 (Linux sysfs), None when the
    system does not say."""
    best = None
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        try:
            size = int(text.rstrip("KMG")) * scale
        except ValueError:
            continue
        if best is None or level > best[0]:
            best = (level, size)
    return None if best is None else best[1]


def weight_bytes(model: nn.Transformer) -> int:
    """Bytes of float32 weights one step of ``model`` reads (the tied head counted once)."""
    return 4 * model.n_parameters


# ------------------------------------------------------------- sampled-text protocol
#: How c and g are estimated from the timings of one window of the protocol. Fixed
#: before the runs it is used in (not chosen by which estimator predicted better): the
#: median, over the repeats of the window, of the CPU time the server's decoding thread
#: spent on each timing (:func:`step_times`, :func:`pass_times`; combined by
#: :func:`window_costs`), on the same servers as the paired requests and spread through
#: the same stream. CPU time rather than wall time because a timing's wall time includes
#: the time the thread waited for a processor, which on a busy machine inflates a short
#: timing and a long one by different factors, while the paired streams, which keep the
#: servers busy for seconds, are slowed alike; the wall-time medians are kept beside it
#: (``c_wall``, ``g_wall``), and a window without CPU times falls back to them.
#:
#: What is timed was revised once, after a five-seed series in which the model predicted
#: 6% to 11% below the measured speedup every time: the steps had been one-position
#: passes timed alone, each with a request's fixed work (about 0.3 ms on this machine),
#: which a cycle of gamma draft steps counted gamma times. The steps are now timed inside
#: a generation (:func:`step_times`); the series that tests the revision was run after it
#: (``benchmarks/seeds_chapter8.py``).
COST_ESTIMATOR = "median CPU time"

#: The headline of the served speedups, fixed before any run: the speedup of the mixed
#: stream (every language's prompts interleaved, one request in flight) over all prompts.
HEADLINE = "mixed-language stream, one request in flight, temperature 1"


def interleave_languages(prompts: dict) -> list[tuple[str, str]]:
    """``(language, prompt)`` pairs in the order of a mixed stream: the first prompt of
    every language, then the second of every language, and so on.

    Parameters
    ----------
    prompts : dict of str to sequence of str
        Prompts per language (any lengths).

    Returns
    -------
    list of (str, str)
        Every prompt once, languages taking turns (a language with fewer prompts drops
        out when it runs out).

    Raises
    ------
    ValueError
        ``prompts`` holds no prompt.

    Examples
    --------
    >>> interleave_languages({"en": ["a", "b"], "it": ["c"]})
    [('en', 'a'), ('it', 'c'), ('en', 'b')]
    """
    depth = max((len(ps) for ps in prompts.values()), default=0)
    out = [(lang, ps[k]) for k in range(depth) for lang, ps in prompts.items() if k < len(ps)]
    if not out:
        raise ValueError("prompts: must hold at least one prompt")
    return out


def distinct_ngram_share(text: str | bytes, n: int = 4) -> float:
    """Share of distinct byte ``n``-grams among all ``n``-grams of ``text``.

    A repetition measure: 1 when no ``n``-gram repeats, near ``1 / L`` for a loop of
    period ``L`` ("the the the ..." has period 4). Text shorter than ``n + 1`` bytes has
    nothing to repeat and gives nan.

    Parameters
    ----------
    text : str or bytes
        A generated continuation (a str is measured in its UTF-8 bytes, the models' tokens).
    n : int
        Length of the grams, at least 1.

    Returns
    -------
    float
        Distinct ``n``-grams over the number of ``n``-grams, in (0, 1], or nan.

    Raises
    ------
    ValueError
        ``n`` is not an integer >= 1.

    Examples
    --------
    >>> distinct_ngram_share("the the the the ", 4)
    0.3076923076923077
    >>> distinct_ngram_share("abcdefgh", 4)
    1.0
    """
    n = check_int(n, "n")
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    if len(data) < n + 1:
        return float("nan")
    grams = [data[i:i + n] for i in range(len(data) - n + 1)]
    return len(set(grams)) / len(grams)


def memory_bandwidth(*, megabytes: int = 256, repeats: int = 5) -> dict:
    """This machine's memory bandwidth from one thread: numpy reading and copying an array
    far larger than the last-level cache.

    Two kernels on a float32 array of ``megabytes`` MB (``2**20`` bytes each): a read
    (``numpy.max``, which reads every element once and writes nothing: the access pattern
    of a matrix-vector product reading its weights) and a copy (``numpy.copyto``: reads
    and writes, counted as twice the array). Each is timed ``repeats`` times; the fastest
    and the median repeat are returned in GB/s (1e9 bytes per second).

    Parameters
    ----------
    megabytes : int
        Array size, at least 16 MB; choose it several times the last-level cache.
    repeats : int
        Timed repeats of each kernel, at least 1.

    Returns
    -------
    dict
        ``read_gbs``, ``read_gbs_median``, ``copy_gbs``, ``copy_gbs_median``, ``bytes``,
        ``repeats``.

    Raises
    ------
    ValueError
        ``megabytes`` below 16 or ``repeats`` below 1.

    References
    ----------
    McCalpin, J. D. (1995). Memory bandwidth and machine balance in current high
    performance computers. IEEE TCCA Newsletter (the STREAM copy kernel).
    """
    megabytes = check_int(megabytes, "megabytes", minimum=16)
    repeats = check_int(repeats, "repeats")
    n = megabytes * 2**20 // 4
    src = np.ones(n, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)                                  # touch every page once
    out = {"bytes": int(src.nbytes), "repeats": repeats}
    for name, run, moved in (("read", lambda: src.max(), src.nbytes),
                             ("copy", lambda: np.copyto(dst, src), 2 * src.nbytes)):
        seconds = []
        for _ in range(repeats):
            t = time.perf_counter()
            run()
            seconds.append(time.perf_counter() - t)
        out[f"{name}_gbs"] = moved / min(seconds) / 1e9
        out[f"{name}_gbs_median"] = moved / float(np.median(seconds)) / 1e9
    return out


def pinned_commit(engine) -> str:
    """The llama.cpp commit vendored in the pinned llama-cpp-python source distribution
    (its ``.git/modules/vendor/llama.cpp/HEAD``), read from the cached sdist at run time;
    ``"not recorded"`` when the sdist is absent or holds no such file."""
    import tarfile

    path = engine.cache_root() / "sdist" / engine.SDIST_NAME
    want = f"llama_cpp_python-{engine.LLAMA_CPP_PYTHON}/.git/modules/vendor/llama.cpp/HEAD"
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:                      # .git comes first: stop there
                if member.name == want:
                    text = tar.extractfile(member).read().decode().strip()
                    return text if len(text) == 40 else "not recorded"
    except (OSError, tarfile.TarError):
        pass
    return "not recorded"


def _arg(args: Sequence[str], flag: str, default: str) -> str:
    args = list(args)
    return args[args.index(flag) + 1] if flag in args[:-1] else default


def server_context(args: Sequence[str]) -> dict:
    """The settings of one llama-server command line that shape its speed: slots, context,
    threads, KV cache types, flash attention, draft and draft length (llama.cpp's defaults
    where the command line leaves them: f16 cache, flash attention ``auto``).

    Parameters
    ----------
    args : sequence of str
        The server's arguments (with or without the binary first).

    Returns
    -------
    dict
        ``slots``, ``context``, ``threads``, ``batch_threads``, ``cache_k``, ``cache_v``,
        ``flash_attention``, ``draft`` (file name or None), ``gamma`` (or None).
    """
    args = [str(a) for a in args]
    draft = _arg(args, "-md", "")
    return {"slots": int(_arg(args, "-np", "1")), "context": int(_arg(args, "-c", "0")),
            "threads": int(_arg(args, "-t", "0")), "batch_threads": int(_arg(args, "-tb", "0")),
            "cache_k": _arg(args, "-ctk", "f16"), "cache_v": _arg(args, "-ctv", "f16"),
            "flash_attention": _arg(args, "-fa", "auto"),
            "draft": Path(draft).name if draft else None,
            "gamma": int(_arg(args, "--spec-draft-n-max", "0")) if draft else None}


def run_context(engine, servers: dict) -> dict:
    """The context of a served run: engine source and build, machine, and every server's
    settings (:func:`server_context`)."""
    import os
    import platform

    return {"llama_cpp_commit": pinned_commit(engine),
            "llama_cpp_python": engine.LLAMA_CPP_PYTHON, "sdist_sha256": engine.SDIST_SHA256,
            "build_flags": " ".join(engine.CMAKE_FLAGS), "build_key": engine.build_key(),
            "cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "last_level_cache_bytes": last_level_cache(),
            "servers": {name: server_context(args) for name, args in servers.items()}}


def _record_row(rec, k: int, repeat: int, setting: str) -> dict:
    return {"prompt": k, "language": rec.language, "repeat": repeat, "setting": setting,
            "seconds": float(rec.e2e), "tokens": int(rec.completion_tokens),
            "ttft": float(rec.ttft), "tpot": float(rec.tpot), "draft_n": rec.draft_n,
            "draft_n_accepted": rec.draft_n_accepted, "text": rec.text}


def sampled_protocol(endpoints: dict, prompts: dict, *, baseline: str, repeats: int,
                     max_tokens: int, temperature: float, seed: int,
                     window=None, window_parts: int = 1, confidence: float = 0.95) -> dict:
    """The paired protocol on a mixed-language stream, with intervals over prompts.

    Every repeat sends the same stream (:func:`interleave_languages`: the languages take
    turns, one request in flight, request ``k`` seeded ``seed + k`` in every setting and
    repeat) to every setting, interleaved request by request: request ``k`` goes to every
    setting in an order that rotates with ``k`` and the repeat, so that a change in the
    machine's speed, which on a shared or virtual machine comes and goes within seconds,
    reaches every setting alike instead of the one whose turn it was. ``window``, when
    given, runs ``window_parts`` times per repeat, spread evenly through the stream
    (``window(repeat, part)`` before request ``round(part * n / window_parts)``): the pass
    timings of the cost model, on the same servers, in the same seconds as the requests.

    Parameters
    ----------
    endpoints : dict of str to Endpoint
        The settings, ``baseline`` among them.
    prompts : dict of str to sequence of str
        Prompts per language.
    baseline : str
        The setting every other is compared with.
    repeats, max_tokens : int
        Repeats of the stream (at least 1) and tokens per request.
    temperature : float
        Sampling temperature (every truncation off: :func:`specdec.client.plain_sampling`).
    seed : int
        First request seed; also seeds the bootstrap.
    window : callable or None
        ``window(repeat, part) -> object``.
    window_parts : int
        Calls of ``window`` per repeat, at least 1 and at most the stream's length.
    confidence : float
        Level of the bootstrap intervals (:func:`ratio_interval`).

    Returns
    -------
    dict
        ``requests``: one row per request (prompt index, language, repeat, setting,
        seconds, tokens, TTFT, TPOT, drafted and accepted tokens, text); ``streams``: per
        repeat and setting, ``wall`` (the sum of its requests' end-to-end seconds),
        tokens, throughput, acceptance and (not for the baseline) the paired ``speedup``
        of that repeat; ``windows``: per repeat, the list of what ``window`` returned;
        ``speedup``: per setting, the mixed stream's speedup with its interval over
        prompts (per-prompt seconds: the median over repeats) and ``by_language`` the
        same per language; ``identical``: per setting, the number of (prompt, repeat)
        whose text equals the baseline's, and ``compared``.

    Raises
    ------
    ValueError
        ``baseline`` not among ``endpoints``, ``repeats`` below 1, ``window_parts``
        outside [1, number of requests].
    """
    if baseline not in endpoints:
        raise ValueError(f"baseline: {baseline!r} is not one of the settings {sorted(endpoints)}")
    repeats = check_int(repeats, "repeats")
    stream = interleave_languages(prompts)
    window_parts = check_int(window_parts, "window_parts")
    if window is not None and window_parts > len(stream):
        raise ValueError(f"window_parts: at most the {len(stream)} requests of the stream "
                         f"(got {window_parts})")
    sampling = cl.plain_sampling(temperature)
    specs = [cl.RequestSpec(f"{lang}-{k}", p, max_tokens, sampling, seed + k, lang)
             for k, (lang, p) in enumerate(stream)]
    names = list(endpoints)
    requests, streams, windows = [], [], []
    for r in range(repeats):
        before = {round(j * len(specs) / window_parts): j for j in range(window_parts)}
        parts, records = [], {name: [] for name in names}
        for k, spec in enumerate(specs):
            if window is not None and k in before:
                parts.append(window(r, before[k]))
            for name in rotation(names, r + k):
                rec = cl.closed_loop(endpoints[name], [spec], 1, setting=name).records[0]
                records[name].append(rec)
                requests.append(_record_row(rec, k, r, name))
        if window is not None:
            windows.append(parts)
        for name in names:
            recs = records[name]
            acc = cl.acceptance(recs)
            wall = float(sum(x.e2e for x in recs))
            tokens = sum(x.completion_tokens for x in recs)
            streams.append({"repeat": r, "setting": name, "wall": wall, "tokens": tokens,
                            "throughput": tokens / wall, "acceptance": acc["acceptance"],
                            "draft_n": acc["draft_n"],
                            "draft_n_accepted": acc["draft_n_accepted"]})
    base_tp = {s["repeat"]: s["throughput"] for s in streams if s["setting"] == baseline}
    for s in streams:
        if s["setting"] != baseline:
            s["speedup"] = s["throughput"] / base_tp[s["repeat"]]

    def per_prompt(setting, which):
        rows = [x for x in requests if x["setting"] == setting and x["prompt"] in which]
        secs = np.array([np.median([x["seconds"] for x in rows if x["prompt"] == k])
                         for k in which])
        toks = np.array([np.median([x["tokens"] for x in rows if x["prompt"] == k])
                         for k in which])
        return secs, toks

    groups = {"mixed": list(range(len(stream)))}
    for lang in prompts:
        groups[lang] = [k for k, (la, _) in enumerate(stream) if la == lang]
    speedup, identical = {}, {}
    base_text = {(x["prompt"], x["repeat"]): x["text"] for x in requests
                 if x["setting"] == baseline}
    for name in names:
        if name == baseline:
            continue
        out = {}
        for g, which in groups.items():
            bt, bk = per_prompt(baseline, which)
            st, sk = per_prompt(name, which)
            mine = [x for x in requests if x["setting"] == name and x["prompt"] in which]
            drafted = sum(x["draft_n"] for x in mine)
            out[g] = {**ratio_interval(bt, bk, st, sk, seed=[seed, len(out)],
                                       confidence=confidence),
                      "acceptance": (sum(x["draft_n_accepted"] for x in mine) / drafted
                                     if drafted else float("nan")),
                      "per_repeat": [s["speedup"] for s in streams if s["setting"] == name]
                      if g == "mixed" else None}
        speedup[name] = out
        mine = [x for x in requests if x["setting"] == name]
        identical[name] = {"identical": sum(base_text[(x["prompt"], x["repeat"])] == x["text"]
                                            for x in mine), "compared": len(mine)}
    repetition = {}
    for g, which in groups.items():
        shares = [distinct_ngram_share(x["text"]) for x in requests
                  if x["setting"] == baseline and x["repeat"] == 0 and x["prompt"] in which]
        shares = [v for v in shares if np.isfinite(v)]
        repetition[g] = float(np.median(shares)) if shares else float("nan")
    return {"protocol": "mixed-language stream at batch one, interleaved request by "
                        "request (each request to every setting in rotating order, the "
                        "cost window's parts spread through the stream); request k seeded "
                        "seed + k in every setting and repeat; intervals: BCa bootstrap "
                        "over prompts", "baseline": baseline, "repeats": repeats,
            "max_tokens": max_tokens, "temperature": float(temperature), "seed": seed,
            "prompts": {lang: len(ps) for lang, ps in prompts.items()},
            "stream": [lang for lang, _ in stream], "requests": requests, "streams": streams,
            "windows": windows, "speedup": speedup, "identical": identical,
            "distinct_4gram_share": repetition}


def window_costs(passes: Sequence[dict], steps: Sequence[dict], gamma: int) -> dict:
    """c and g(1..gamma) of one window's timings, by :data:`COST_ESTIMATOR`: the median of
    the window's repeats of each timing, in CPU time where every timing has it.

    The costs are those of the stream's own work (but for the sending of a token, which
    :func:`step_times` counts in each draft step). The target's step ``t`` and the draft's
    step are steps inside a generation (:func:`step_times`); a verification of ``k``
    positions costs a step plus what the ``k - 1`` further positions add to a pass,
    ``t + P(k) - P(1)``, with ``P`` the passes over new positions timed alone
    (:func:`pass_times`; the difference removes the request's fixed work they include).
    So ``c`` is the draft's step over the target's and ``g(k - 1) = 1 + (P(k) - P(1)) / t``.

    Parameters
    ----------
    passes : sequence of dict
        Rows of :func:`pass_times` with server ``"target"`` (1 to ``gamma + 1``
        positions).
    steps : sequence of dict
        Rows of :func:`step_times` with servers ``"target"`` and ``"draft"``.
    gamma : int
        Draft length, >= 1.

    Returns
    -------
    dict
        ``clock`` (``"cpu"``, or ``"wall"`` when some timing has no CPU time),
        ``target_ms`` (the target's step), ``verify_ms`` (a verification of ``gamma +
        1`` positions), ``draft_ms`` (the draft's step), ``c``, ``g`` (=
        ``g_by_gamma[-1]``), ``g_by_gamma``, all on that clock; ``target_wall_ms``,
        ``verify_wall_ms``, ``draft_wall_ms``, ``c_wall``, ``g_wall`` from the wall-time
        medians; ``disturbance``: the largest ``median / fastest - 1`` of the wall times
        of the target's three timings (its step, its one- and ``gamma + 1``-position
        passes; the draft's step, a tenth of a millisecond whose spread says more about
        the timer than about the machine, is left out); ``waiting``: the share of the three costs' median wall time that was not
        CPU time, ``1 - cpu / wall`` (the time the decoding threads waited for a
        processor; slightly negative on a quiet machine, where the CPU time's bookkeeping
        shows; NaN without CPU times).

    Raises
    ------
    TypeError
        ``passes`` or ``steps`` is not a sequence of such rows.
    RuntimeError
        A needed timing was not measured, or a cost came out zero, negative or NaN (a
        window too small for its timings' spread, or a disturbed one: the message gives
        the medians).
    """
    gamma = check_int(gamma, "gamma")
    for name, rows, keys in (("passes", passes, ("server", "positions", "ms")),
                             ("steps", steps, ("server", "steps", "ms"))):
        if not isinstance(rows, (list, tuple)) or not all(
                isinstance(x, dict) and all(k in x for k in keys) for x in rows):
            source = "pass_times" if name == "passes" else "step_times"
            raise TypeError(f"{name}: must be a list of rows of {source} (dicts with "
                            f"{', '.join(map(repr, keys))}; got {type(rows).__name__})")
    needed = ([x for x in passes if x["server"] == "target" and 1 <= x["positions"] <= gamma + 1]
              + [x for x in steps if x["server"] in ("target", "draft")])
    cpu = bool(needed) and all(x.get("cpu_ms") is not None for x in needed)

    def step(server, key):
        ms = [x[key] for x in steps if x["server"] == server]
        if not ms:
            raise RuntimeError(f"no decoding step measured on {server}")
        return float(np.min(ms)), float(np.median(ms))

    def costs(key):
        t_min, t = step("target", key)
        d = step("draft", key)[1]
        p1_min, p1 = _fastest_and_median(passes, "target", 1, key)
        pv_min, pv = _fastest_and_median(passes, "target", gamma + 1, key)
        verify = [t + _fastest_and_median(passes, "target", k, key)[1] - p1
                  for k in range(2, gamma + 2)]
        if not (min(t_min, d, p1_min, pv_min, *verify) > 0):      # also catches NaN
            clock = "CPU" if key == "cpu_ms" else "wall"
            raise RuntimeError(
                f"window_costs: on the {clock} clock the target's step is {t:.4g} ms (fastest "
                f"{t_min:.4g}), the draft's {d:.4g} ms, and the target's passes P(1) = "
                f"{p1:.4g} ms, P({gamma + 1}) = {pv:.4g} ms, so a verification t + P(k) - "
                f"P(1) of {gamma + 1} positions is {verify[-1]:.4g} ms: every cost must be "
                f"positive. The window has too few timings for their spread, or was "
                f"disturbed; time more repeats")
        spread = max(t / t_min, p1 / p1_min, pv / pv_min) - 1.0
        return t, verify[-1], d, [v / t for v in verify], spread

    w1, wv, wd, wg, disturbance = costs("ms")
    t1, tv, d1, g_by = costs("cpu_ms")[:4] if cpu else (w1, wv, wd, wg)
    waiting = 1.0 - (t1 + tv + d1) / (w1 + wv + wd) if cpu else float("nan")
    return {"clock": "cpu" if cpu else "wall", "target_ms": t1, "verify_ms": tv,
            "draft_ms": d1, "c": d1 / t1, "g": g_by[-1], "g_by_gamma": g_by,
            "target_wall_ms": w1, "verify_wall_ms": wv, "draft_wall_ms": wd,
            "c_wall": wd / w1, "g_wall": wg[-1], "disturbance": disturbance,
            "waiting": waiting}


def predicted_speedup(acceptance: float, c: float, g: float, gamma: int, *,
                      step_ms: float | None = None, ttft_ms: float | None = None,
                      spec_ttft_ms: float | None = None, tokens: int | None = None) -> float:
    """The cost model's speedup: ``E / (gamma c + g)`` with ``E = 1 + gamma a`` per
    decoding step, or, given the request terms, per request.

    Per request, a plain request of ``N = tokens`` tokens costs its time to first token
    and then one step ``t = step_ms`` per token, a speculative one its own time to first
    token and then one cycle ``(gamma c + g) t`` per ``E`` tokens::

        speedup = (ttft + (N - 1) t) / (spec_ttft + (N - 1) (gamma c + g) t / E)

    which tends to ``E / (gamma c + g)`` as ``N`` grows: the time before the first token,
    the same order for both servers, dilutes the gain of a short request.

    Parameters
    ----------
    acceptance : float
        Accepted over drafted tokens, as the server reports it (every cycle drafts
        ``gamma``), in [0, 1].
    c, g : float
        Draft step over target step; verification pass over target step (positive).
    gamma : int
        Draft length, at least 1.
    step_ms, ttft_ms, spec_ttft_ms : float, optional
        The target's step and the two servers' times to first token (milliseconds,
        positive); all or none of them, with ``tokens``.
    tokens : int, optional
        Tokens per request, at least 1.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        An input out of its range, or only some of the request terms.

    References
    ----------
    Leviathan, Kalman and Matias (2023), Fast inference from transformers via speculative
    decoding, section 3.4 (with a measured verification cost g in place of 1, and the time
    to first token of each request).
    """
    gamma = check_int(gamma, "gamma")
    if not (0 <= acceptance <= 1):
        raise ValueError(f"acceptance: must be in [0, 1] (got {acceptance!r})")
    if not (c > 0 and g > 0):
        raise ValueError(f"c, g: must be positive (got c={c!r}, g={g!r})")
    per_step = (1.0 + gamma * acceptance) / float(cost.cycle_cost(gamma, c, g=g))  # E / (gamma c + g)
    terms = {"step_ms": step_ms, "ttft_ms": ttft_ms, "spec_ttft_ms": spec_ttft_ms,
             "tokens": tokens}
    given = [k for k, v in terms.items() if v is not None]
    if not given:
        return per_step
    if len(given) < len(terms):
        raise ValueError(f"step_ms, ttft_ms, spec_ttft_ms, tokens: give all or none (got "
                         f"only {', '.join(given)})")
    tokens = check_int(tokens, "tokens")
    for name in ("step_ms", "ttft_ms", "spec_ttft_ms"):
        v = terms[name]
        if not (isinstance(v, (int, float)) and np.isfinite(v) and v > 0):
            raise ValueError(f"{name}: must be a positive number of milliseconds (got {v!r})")
    decode = (tokens - 1) * step_ms
    return (ttft_ms + decode) / (spec_ttft_ms + decode / per_step)
