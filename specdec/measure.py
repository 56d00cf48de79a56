"""Measurement arithmetic: per-request timings, run summaries, reports and their context.

What every measurement of chapter 8 shares, in process (:mod:`specdec.protocol`) or over
HTTP (:mod:`specdec.client`): per request the time to first token (TTFT), the
inter-token latencies (ITL), the total time, the tokens emitted, the cycles and the
accepted/proposed draft tokens; per run the throughput and the TTFT/ITL percentiles;
medians and interquartile ranges (IQR) over repeats; a :class:`Report` that carries what
is needed to interpret a number (models, weight hashes, precision, sampling settings,
hardware, library versions, prompt distribution); the BLAS thread limit under which
small models are timed (:mod:`threadpoolctl`).

Everything here is a pure function of time stamps and can be checked on synthetic
timings; :class:`TickClock` is a deterministic fake clock for the decoders' ``clock``
argument. Used in Chapter 8.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
import platform
import time
import tracemalloc
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from specdec import decode as dec
from specdec import laws
from specdec.nn import Transformer

__all__ = [
    "Clock",
    "idle_cores",
    "TickClock",
    "percentile",
    "percentiles",
    "median_iqr",
    "quartiles",
    "RequestMetrics",
    "request_metrics",
    "RunSummary",
    "summarize",
    "Report",
    "rotation",
    "environment",
    "usable_cores",
    "model_info",
    "prompt_distribution",
    "peak_memory",
    "blas_threads",
    "limit_blas_threads",
]

Clock = Callable[[], float]


# ------------------------------------------------------------------------ arithmetic
class TickClock:
    """A fake clock that advances by ``step`` seconds at every reading.

    Parameters
    ----------
    step : float or sequence of float
        Increment per call; a sequence is cycled through (e.g. ``[0.001, 0.003]``).
    start : float

    Examples
    --------
    >>> clock = TickClock(0.5)
    >>> clock(), clock(), clock()
    (0.0, 0.5, 1.0)
    """

    def __init__(self, step: float | Sequence[float] = 0.001, start: float = 0.0):
        self._steps = [float(step)] if np.ndim(step) == 0 else [float(s) for s in step]
        if not self._steps or any(not math.isfinite(s) or s < 0 for s in self._steps):
            raise ValueError("step: must be finite and >= 0")
        self._t = float(start)
        self._i = 0
        self.calls = 0

    def __call__(self) -> float:
        now = self._t
        self._t += self._steps[self._i % len(self._steps)]
        self._i += 1
        self.calls += 1
        return now


def _values(values, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float).reshape(-1)
    if arr.size == 0:
        raise ValueError(f"{name}: needs at least one value")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: values must be finite")
    return arr


def percentile(values, q: float) -> float:
    """The ``q``-th percentile (linear interpolation between order statistics).

    Parameters
    ----------
    values : array_like
        Non-empty, finite (seconds, tokens/s, ...).
    q : float
        In [0, 100].

    Examples
    --------
    >>> percentile([1, 2, 3, 4], 50)
    2.5
    >>> percentile([10.0], 99)
    10.0
    """
    if not 0 <= q <= 100:
        raise ValueError(f"q: must be in [0, 100] (got {q})")
    return float(np.percentile(_values(values, "values"), q))


def percentiles(values, qs: Sequence[float] = (50, 90, 99)) -> dict[str, float]:
    """``{"p50": ..., "p90": ..., "p99": ...}`` of ``values``.

    Examples
    --------
    >>> percentiles(range(101))
    {'p50': 50.0, 'p90': 90.0, 'p99': 99.0}
    """
    return {f"p{q:g}": percentile(values, q) for q in qs}


def quartiles(values) -> tuple[float, float, float]:
    """First quartile, median and third quartile (25th, 50th, 75th percentiles).

    Linear interpolation between order statistics (``numpy.percentile``'s default), so
    the median need not be centred between the quartiles: a bar from ``q1`` to ``q3``
    is the interquartile range as it lies. Used for Chapter 8's error bars.

    Parameters
    ----------
    values : array_like
        Non-empty, finite.

    Returns
    -------
    (q1, median, q3) : tuple of float

    Raises
    ------
    ValueError
        If ``values`` is empty or not all finite.

    Examples
    --------
    >>> quartiles([1.0, 2.0, 3.0, 4.0, 10.0])
    (2.0, 3.0, 4.0)
    """
    arr = _values(values, "values")
    q25, q50, q75 = np.percentile(arr, [25, 50, 75])
    return float(q25), float(q50), float(q75)


def median_iqr(values) -> tuple[float, float]:
    """Median and interquartile range (75th minus 25th percentile); see :func:`quartiles`.

    Examples
    --------
    >>> median_iqr([1.0, 2.0, 3.0, 4.0, 5.0])
    (3.0, 2.0)
    """
    q25, q50, q75 = quartiles(values)
    return q50, q75 - q25


@dataclass(frozen=True)
class RequestMetrics:
    """Timings of one request.

    Attributes
    ----------
    ttft : float
        Time to first token: first emission minus submission, seconds.
    itls : tuple of float
        Inter-token latencies: differences of consecutive emission times (tokens - 1
        values), seconds. Tokens emitted by one speculative cycle arrive together, so
        several of these are 0.
    total : float
        Last emission minus submission, seconds.
    tokens : int
    cycles, accepted, proposed : int
        Target passes, accepted and proposed draft tokens.
    characters : int
        Characters of the emitted text (0 if unknown).
    accepted_lengths : tuple of int
        Proposals accepted in each cycle (speculative decoding only).
    """

    ttft: float
    itls: tuple[float, ...]
    total: float
    tokens: int
    cycles: int = 0
    accepted: int = 0
    proposed: int = 0
    characters: int = 0
    accepted_lengths: tuple[int, ...] = ()

    @classmethod
    def from_times(cls, start: float, emit_times: Sequence[float], *, cycles: int = 0,
                   accepted: int = 0, proposed: int = 0, characters: int = 0,
                   accepted_lengths: Sequence[int] = ()) -> "RequestMetrics":
        """Metrics from the submission time and the emission time of each token.

        Raises
        ------
        ValueError
            No tokens, non-finite times, times going backwards or before ``start``.

        Examples
        --------
        >>> m = RequestMetrics.from_times(0.0, [0.5, 0.7, 1.0])
        >>> m.ttft, m.total, m.tokens, [round(x, 3) for x in m.itls]
        (0.5, 1.0, 3, [0.2, 0.3])
        """
        times = _values(emit_times, "emit_times")
        if not math.isfinite(start):
            raise ValueError("start: must be finite")
        if times[0] < start or np.any(np.diff(times) < 0):
            raise ValueError("emit_times: must be non-decreasing and not before start")
        return cls(ttft=float(times[0] - start), itls=tuple(np.diff(times).tolist()),
                   total=float(times[-1] - start), tokens=int(times.size), cycles=int(cycles),
                   accepted=int(accepted), proposed=int(proposed), characters=int(characters),
                   accepted_lengths=tuple(int(a) for a in accepted_lengths))

    @property
    def itl_mean(self) -> float:
        """Mean time per token after the first: (total - ttft) / (tokens - 1)."""
        return (self.total - self.ttft) / (self.tokens - 1) if self.tokens > 1 else float("nan")


def request_metrics(decoded: dec.Decoded) -> list[RequestMetrics]:
    """One :class:`RequestMetrics` per request of a decoded batch.

    Characters are counted on the UTF-8 decoding of the emitted bytes (an incomplete
    character cut by the length limit counts as one).
    """
    lengths = decoded.accepted_lengths or ((),) * len(decoded.tokens)
    return [RequestMetrics.from_times(decoded.start, t, cycles=c, accepted=a, proposed=p,
                                      characters=len(text), accepted_lengths=al)
            for t, c, a, p, text, al in zip(decoded.emit_times, decoded.cycles,
                                            decoded.accepted, decoded.proposed,
                                            decoded.texts, lengths)]


@dataclass(frozen=True)
class RunSummary:
    """Aggregate of the requests of one run (one setting, one language, one repeat).

    ``throughput`` is emitted tokens per second of wall time of the run and
    ``char_throughput`` the same in characters; TTFT and ITL percentiles pool every
    request (ITL: every gap); ``acceptance`` is accepted / proposed draft tokens;
    ``tokens_per_cycle`` is emitted tokens per target pass (E measured; the last cycle of
    a request may be cut by the length limit); ``accepted_length_counts[k]`` is the
    number of cycles that accepted exactly k proposals.
    """

    requests: int
    tokens: int
    wall: float
    throughput: float
    ttft_p50: float
    ttft_p90: float
    ttft_p99: float
    itl_p50: float
    itl_p90: float
    itl_p99: float
    itl_mean: float
    total_p50: float
    acceptance: float
    tokens_per_cycle: float
    char_throughput: float = float("nan")
    accepted_length_counts: tuple[int, ...] = ()

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def summarize(requests: Sequence[RequestMetrics], wall: float) -> RunSummary:
    """Aggregate per-request metrics of one run.

    Parameters
    ----------
    requests : sequence of RequestMetrics
        Non-empty.
    wall : float
        Wall time of the whole run, seconds, > 0.

    Examples
    --------
    >>> reqs = [RequestMetrics.from_times(0.0, [1.0, 2.0]),
    ...         RequestMetrics.from_times(2.0, [4.0, 4.5])]
    >>> s = summarize(reqs, wall=4.5)
    >>> s.throughput, s.ttft_p50, s.itl_p50
    (0.8888888888888888, 1.5, 0.75)
    """
    if not requests:
        raise ValueError("requests: needs at least one request")
    if not (math.isfinite(wall) and wall > 0):
        raise ValueError(f"wall: must be a positive number of seconds (got {wall})")
    tokens = sum(r.tokens for r in requests)
    ttft = percentiles([r.ttft for r in requests])
    gaps = [g for r in requests for g in r.itls]
    itl = percentiles(gaps) if gaps else dict.fromkeys(("p50", "p90", "p99"), float("nan"))
    after_first = sum(r.tokens - 1 for r in requests)
    proposed = sum(r.proposed for r in requests)
    cycles = sum(r.cycles for r in requests)
    return RunSummary(
        requests=len(requests), tokens=tokens, wall=float(wall), throughput=tokens / wall,
        ttft_p50=ttft["p50"], ttft_p90=ttft["p90"], ttft_p99=ttft["p99"],
        itl_p50=itl["p50"], itl_p90=itl["p90"], itl_p99=itl["p99"],
        itl_mean=(sum(r.total - r.ttft for r in requests) / after_first
                  if after_first else float("nan")),
        total_p50=percentile([r.total for r in requests], 50),
        acceptance=sum(r.accepted for r in requests) / proposed if proposed else float("nan"),
        tokens_per_cycle=tokens / cycles if cycles else float("nan"),
        char_throughput=sum(r.characters for r in requests) / wall,
        accepted_length_counts=tuple(np.bincount(
            [a for r in requests for a in r.accepted_lengths]).tolist()))

# ------------------------------------------------------------------------- reports
@dataclass(frozen=True)
class Report:
    """Tidy results of one measurement with the context needed to read them.

    Attributes
    ----------
    title : str
    rows : tuple of dict
        Aggregated rows (one per language x setting, or per batch size, ...).
    raw : tuple of dict
        Per-repeat rows the aggregate was computed from.
    metadata : dict
        Models (name, parameters, weight hash), precision, sampling settings, gammas,
        hardware, library versions, prompt distribution, repeats, seed.
    columns : tuple of str
        Columns a table of it shows (``specbook.tables.report_markdown`` in the book).
    """

    title: str
    rows: tuple[dict, ...]
    raw: tuple[dict, ...] = ()
    metadata: dict = field(default_factory=dict)
    columns: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"title": self.title, "rows": [dict(r) for r in self.rows],
                "raw": [dict(r) for r in self.raw], "metadata": self.metadata}



# ----------------------------------------------------------------------- metadata
def rotation(items: Sequence, repeat: int) -> list:
    """``items`` rotated left by ``repeat`` (the interleaving order of one repeat).

    Chapter 8's protocol runs every setting inside every repeat, in an order that rotates
    with the repeat, so slow drift of the machine hits all settings alike.

    Examples
    --------
    >>> rotation(["baseline", "spec"], 0), rotation(["baseline", "spec"], 1)
    (['baseline', 'spec'], ['spec', 'baseline'])
    """
    items = list(items)
    if not items:
        return []
    k = int(repeat) % len(items)
    return items[k:] + items[:k]


def cpu_model(path: str | Path = "/proc/cpuinfo") -> str:
    """The processor's model name (Linux ``/proc/cpuinfo``), or ``"not reported"``."""
    try:
        for line in Path(path).read_text(errors="replace").splitlines():
            if line.lower().startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "not reported"


def blas_threads() -> dict[str, int]:
    """Threads of each BLAS library loaded in this process (file name -> count), as
    :func:`threadpoolctl.threadpool_info` reports them."""
    return {os.path.basename(info["filepath"]): int(info["num_threads"])
            for info in threadpool_info() if info.get("user_api") == "blas"}


@contextmanager
def limit_blas_threads(threads: int | None):
    """Run a block with the BLAS libraries of this process limited to ``threads``.

    Small matrix products (a few positions times a few hundred features) are slower
    with several BLAS threads, and erratic on a busy machine; batch-1 decoding of small
    models is usually measured single-threaded. ``None`` leaves the settings alone.
    Uses :func:`threadpoolctl.threadpool_limits`, which restores the previous limits on
    exit.

    Raises
    ------
    ValueError
        ``threads`` is not an integer >= 1.

    Examples
    --------
    >>> with limit_blas_threads(1):
    ...     all(n == 1 for n in blas_threads().values())
    True
    """
    if threads is None:
        yield
        return
    threads = laws.check_int(threads, "threads", minimum=1)
    with threadpool_limits(limits=threads, user_api="blas"):
        yield


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity; ``os.cpu_count()`` where the
    system does not say), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _cpu_ticks(path: str = "/proc/stat") -> tuple[int, int] | None:
    """(idle, total) jiffies of all CPUs since boot (Linux), None where not reported."""
    try:
        with open(path) as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(x) for x in fields[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)       # idle + iowait
    return idle, sum(ticks[:8])                 # guest time is already in user time


def idle_cores(seconds: float = 1.0, *, sleep=time.sleep, path: str = "/proc/stat") -> float:
    """How many of this process's usable cores were idle over the next ``seconds``: the
    idle share of all CPUs' time (Linux ``/proc/stat``) times :func:`usable_cores`.

    What a job about to start can use without waiting for processors that other work
    holds (the one-minute load average lags by a minute and counts this process's own
    past work). Where the system does not report CPU times, every usable core counts as
    idle.

    Parameters
    ----------
    seconds : float
        Length of the sample, positive (seconds).

    Returns
    -------
    float
        In [0, usable_cores()].

    Raises
    ------
    ValueError
        ``seconds`` not positive.
    """
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"seconds: must be a positive number (got {seconds!r})")
    before = _cpu_ticks(path)
    sleep(seconds)
    after = _cpu_ticks(path)
    cores = usable_cores()
    if before is None or after is None or after[1] <= before[1]:
        return float(cores)
    share = (after[0] - before[0]) / (after[1] - before[1])
    return float(min(max(share, 0.0), 1.0) * cores)


def environment() -> dict:
    """Hardware and software of this run: CPU, cores, BLAS and its threads, versions."""
    import scipy
    import specdec
    blas = {}
    try:
        deps = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        blas = {"name": deps.get("name"), "version": deps.get("version")}
    except Exception:  # pragma: no cover - numpy without the dict mode
        blas = {"name": "unknown"}
    blas["threads"] = blas_threads()
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "usable_cores": usable_cores(),
            "machine": platform.machine(), "os": platform.platform(), "blas": blas,
            "python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "specdec": getattr(specdec, "__version__", "unknown")}


def model_info(model: Transformer, manifest: Mapping | None = None) -> dict:
    """Name, shape, parameter count, precision and weight hash of a model."""
    c = model.config
    info = {"name": model.name, "layers": c.n_layers, "d_model": c.d_model,
            "heads": c.n_heads, "context": c.context, "parameters": model.n_parameters,
            "precision": "float32", "weight_sha256": model.weight_hash()[:16]}
    if manifest and model.name in manifest.get("models", {}):
        info["file_sha256"] = manifest["models"][model.name].get("sha256", "")[:16]
    return info


def prompt_distribution(prompts: Mapping[str, Sequence[str]]) -> dict:
    """Per language: number of prompts and their length in bytes (min/median/max)."""
    out = {}
    for lang, ps in prompts.items():
        sizes = [len(p.encode("utf-8")) for p in ps]
        out[lang] = {"prompts": len(ps), "bytes_min": min(sizes),
                     "bytes_median": float(np.median(sizes)), "bytes_max": max(sizes)}
    return out


def peak_memory(fn: Callable[[], object]) -> int:
    """Peak memory allocated while ``fn()`` runs (Python objects and numpy buffers), bytes.

    Uses :mod:`tracemalloc`, which slows the call down: never time the same call.
    """
    was = tracemalloc.is_tracing()
    if not was:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    if not was:
        tracemalloc.stop()
    return int(peak - base)
