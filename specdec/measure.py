"""Measurement harness: what a speculative decoder costs on a real load.

The protocol of chapter 8, as code. For every language and decoding setting it records,
per request, the time to first token (TTFT), the inter-token latencies (ITL), the total
time, the tokens emitted, the cycles and the accepted/proposed draft tokens; per run, the
throughput; per setting, the peak memory. Baseline (target-only) and speculative runs are
interleaved inside every repeat, in a rotating order, so slow drift of the machine hits
all settings alike; timings are reported as the median and the interquartile range (IQR)
over repeats, and speedups are paired (same repeat, same language, same prompts).

It also measures the two cost ratios of the cost model: the draft cost ``c`` (one draft
forward step / one target forward step) and the verification cost ``g(gamma)`` (one
target pass scoring gamma + 1 positions / one target step), and how the gain changes when
B requests are decoded together (batched forward passes).

Everything that is arithmetic (percentiles, IQR, throughput, per-request metrics) is a
pure function of time stamps and can be checked on synthetic timings; decoders take a
``clock`` argument, and :class:`TickClock` is a deterministic fake clock.

Reports (:class:`Report`, :class:`Study`) carry what is needed to interpret a number:
model names, parameter counts and weight hashes, precision, sampling settings, gamma,
hardware (CPU, cores, BLAS), library versions and the prompt distribution.
"""

from __future__ import annotations

import ctypes
import math
import os
import platform
import time
import tracemalloc
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from . import decode as dec
from . import laws
from .nn import LANGUAGES, Transformer, load_heldout, load_manifest, load_model

__all__ = [
    "TickClock",
    "percentile",
    "percentiles",
    "median_iqr",
    "RequestMetrics",
    "request_metrics",
    "RunSummary",
    "summarize",
    "Setting",
    "Report",
    "Study",
    "environment",
    "model_info",
    "prompt_distribution",
    "peak_memory",
    "blas_threads",
    "limit_blas_threads",
    "step_costs",
    "compare",
    "concurrency",
    "cost_model_check",
    "run_study",
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


def median_iqr(values) -> tuple[float, float]:
    """Median and interquartile range (75th minus 25th percentile).

    Examples
    --------
    >>> median_iqr([1.0, 2.0, 3.0, 4.0, 5.0])
    (3.0, 2.0)
    """
    arr = _values(values, "values")
    q25, q50, q75 = np.percentile(arr, [25, 50, 75])
    return float(q50), float(q75 - q25)


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

    def as_dict(self) -> dict:
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


# ------------------------------------------------------------------------ settings
@dataclass(frozen=True)
class Setting:
    """A decoding configuration: the target alone (``draft is None``) or with a draft.

    Parameters
    ----------
    name : str
        Label in reports, e.g. ``"baseline"`` or ``"spec g=2"``.
    target : Transformer
    draft : Transformer or None
    gamma : int or None
        Draft length (required with a draft).
    """

    name: str
    target: Transformer
    draft: Transformer | None = None
    gamma: int | None = None

    def __post_init__(self) -> None:
        if self.draft is not None:
            laws.check_int(self.gamma, "gamma", minimum=1)
        elif self.gamma is not None:
            raise ValueError("gamma: only meaningful with a draft")

    @property
    def speculative(self) -> bool:
        return self.draft is not None

    def run(self, prompts, max_new_tokens: int, rng: np.random.Generator,
            sampling: dec.SamplingSettings, clock: Clock) -> dec.Decoded:
        """Decode ``prompts`` together (one batch)."""
        if self.draft is None:
            return dec.autoregressive(self.target, prompts, max_new_tokens, rng, sampling,
                                      clock=clock)
        return dec.speculative(self.target, self.draft, prompts, max_new_tokens, self.gamma,
                               rng, sampling, clock=clock)

    def describe(self) -> dict:
        return {"setting": self.name, "target": self.target.name,
                "draft": None if self.draft is None else self.draft.name, "gamma": self.gamma}


def _rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), *map(int, keys)]))


def _run_batches(setting: Setting, prompts: Sequence, batch: int, max_new_tokens: int,
                 rng: np.random.Generator, sampling: dec.SamplingSettings,
                 clock: Clock) -> tuple[list[RequestMetrics], float, dict]:
    """Decode ``prompts`` in consecutive batches of ``batch`` requests.

    Returns the per-request metrics, the wall time, and the mean in-situ time of one
    target pass and one draft pass (``target_pass_s``, ``draft_pass_s``; nan if none).
    """
    metrics: list[RequestMetrics] = []
    totals = {"target": 0.0, "draft": 0.0, "target_passes": 0, "draft_passes": 0}
    t0 = clock()
    for s in range(0, len(prompts), batch):
        out = setting.run(list(prompts[s:s + batch]), max_new_tokens, rng, sampling, clock)
        metrics.extend(request_metrics(out))
        for k in totals:
            totals[k] += out.pass_seconds.get(k, 0)
    wall = clock() - t0
    passes = {f"{k}_pass_s": totals[k] / totals[f"{k}_passes"] if totals[f"{k}_passes"]
              else float("nan") for k in ("target", "draft")}
    return metrics, wall, passes


# ------------------------------------------------------------------------- reports
def _fmt(value) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        a = abs(value)
        if a == 0:
            return "0"
        if a >= 100:
            return f"{value:.1f}"
        if a >= 1:
            return f"{value:.3f}"
        return f"{value:.3g}"
    return "-" if value is None else str(value)


def markdown_table(rows: Sequence[Mapping], columns: Sequence[str] | None = None) -> str:
    """A Markdown table of tidy rows (floats with 3-4 significant digits).

    Examples
    --------
    >>> print(markdown_table([{"a": 1, "b": 0.5}]))
    | a | b |
    |---|---|
    | 1 | 0.5 |
    """
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c)) for c in columns) + " |")
    return "\n".join(lines)


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
        Columns shown by :meth:`to_markdown`.
    """

    title: str
    rows: tuple[dict, ...]
    raw: tuple[dict, ...] = ()
    metadata: dict = field(default_factory=dict)
    columns: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"title": self.title, "rows": [dict(r) for r in self.rows],
                "raw": [dict(r) for r in self.raw], "metadata": self.metadata}

    def to_markdown(self, columns: Sequence[str] | None = None, *, metadata: bool = False) -> str:
        out = [f"**{self.title}**", "", markdown_table(self.rows, columns or self.columns or None)]
        if metadata:
            out += ["", _metadata_markdown(self.metadata)]
        return "\n".join(out)


def _metadata_markdown(meta: Mapping) -> str:
    lines = []
    for key, value in meta.items():
        if isinstance(value, Mapping):
            inner = ", ".join(f"{k}={_fmt(v) if isinstance(v, float) else v}"
                              for k, v in value.items() if not isinstance(v, (Mapping, list)))
            lines.append(f"- {key}: {inner}")
        else:
            lines.append(f"- {key}: {value}")
    return "\n".join(lines)


# ----------------------------------------------------------------------- metadata
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


_BLAS_NAMES = [(f"{pre}_get_num_threads{suf}", f"{pre}_set_num_threads{suf}")
               for pre in ("scipy_openblas", "openblas") for suf in ("64_", "_64", "")]


def _openblas_libraries() -> list[tuple[str, ctypes.CDLL, str, str]]:
    """OpenBLAS libraries loaded in this process, with their thread get/set symbols."""
    try:
        with open("/proc/self/maps") as fh:
            fields = [line.split() for line in fh]
        paths = sorted({f[-1] for f in fields if len(f) >= 6 and ".so" in f[-1]
                        and "openblas" in os.path.basename(f[-1]).lower()})
    except OSError:  # pragma: no cover - not Linux
        return []
    out = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:  # pragma: no cover
            continue
        for get, set_ in _BLAS_NAMES:
            if hasattr(lib, get) and hasattr(lib, set_):
                out.append((path, lib, get, set_))
                break
    return out


def blas_threads() -> dict[str, int]:
    """Threads used by each OpenBLAS library loaded in this process (file name -> count)."""
    return {os.path.basename(p): int(getattr(lib, get)()) for p, lib, get, _ in
            _openblas_libraries()}


@contextmanager
def limit_blas_threads(threads: int | None):
    """Run a block with the BLAS libraries of this process limited to ``threads``.

    Small matrix products (a few positions times a few hundred features) are slower
    with several BLAS threads, and erratic on a busy machine; batch-1 decoding of small
    models is usually measured single-threaded. ``None`` leaves the settings alone.
    Uses :mod:`threadpoolctl` when it is installed, else OpenBLAS's own entry points.

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
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        libs = _openblas_libraries()
        before = [int(getattr(lib, get)()) for _, lib, get, _ in libs]
        for _, lib, _, set_ in libs:
            getattr(lib, set_)(threads)
        try:
            yield
        finally:
            for (_, lib, _, set_), n in zip(libs, before):
                getattr(lib, set_)(n)
    else:
        with threadpool_limits(limits=threads, user_api="blas"):
            yield


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
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        usable = os.cpu_count()
    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "usable_cores": usable,
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


# --------------------------------------------------------------------------- costs
def step_costs(target: Transformer, draft: Transformer, gammas: Sequence[int] = (1, 2, 4, 6),
               *, prefix: int = 48, batch: int = 1, repeats: int = 50, seed: int = 0,
               clock: Clock = time.perf_counter) -> Report:
    """Measured draft cost ``c`` and verification cost ``g(gamma)``.

    One *target step* is a target forward pass of one new position per sequence, with
    ``prefix`` positions already cached; one *draft step* the same for the draft; the
    *block* for gamma is one target pass of ``gamma + 1`` new positions. Operations are
    interleaved inside every repeat and the cache is rolled back after each, so all run
    on the same state; costs are medians over ``repeats``.

    Returns
    -------
    Report
        Rows: one per gamma with ``c``, ``g`` (= block / target step), the three
        median times in seconds and their IQRs.
    """
    repeats = laws.check_int(repeats, "repeats", minimum=1)
    batch = laws.check_int(batch, "batch", minimum=1)
    gammas = [laws.check_int(g, "gamma", minimum=1) for g in gammas]
    if prefix + max(gammas) + 1 > min(target.config.context, draft.config.context):
        raise ValueError("prefix: prefix + gamma + 1 exceeds the model context")
    rng = _rng(seed, 0)
    toks = rng.integers(32, 127, size=(batch, prefix + max(gammas) + 1))
    tcache, dcache = target.new_cache(batch), draft.new_cache(batch)
    target.forward(toks[:, :prefix], tcache)
    draft.forward(toks[:, :prefix], dcache)
    ops = {"target": (target, tcache, 1), "draft": (draft, dcache, 1)}
    ops.update({f"block{g}": (target, tcache, g + 1) for g in gammas})
    times: dict[str, list[float]] = {k: [] for k in ops}
    names = list(ops)
    for r in range(repeats + 2):                     # two warm-up rounds
        for k in names[r % len(names):] + names[:r % len(names)]:
            model, cache, t = ops[k]
            x = toks[:, prefix:prefix + t]
            t0 = clock()
            model.forward(x, cache)
            dt = clock() - t0
            cache.truncate(prefix)
            if r >= 2:
                times[k].append(dt)
    tm, tiqr = median_iqr(times["target"])
    dm, diqr = median_iqr(times["draft"])
    rows = []
    for g in gammas:
        bm, biqr = median_iqr(times[f"block{g}"])
        rows.append({"target": target.name, "draft": draft.name, "batch": batch, "gamma": g,
                     "c": dm / tm, "g": bm / tm, "target_step_s": tm, "target_step_iqr_s": tiqr,
                     "draft_step_s": dm, "draft_step_iqr_s": diqr, "block_s": bm,
                     "block_iqr_s": biqr})
    meta = {"prefix": prefix, "batch": batch, "repeats": repeats,
            "definition": "c = draft step / target step; g = target pass over gamma+1 "
                          "positions / target step (forward passes only, medians)"}
    return Report(title=f"Step costs: {target.name} with {draft.name}, batch {batch}",
                  rows=tuple(rows), raw=tuple({"op": k, "seconds": v} for k in times
                                                for v in times[k]),
                  metadata=meta, columns=("target", "batch", "gamma", "c", "g",
                                          "target_step_s", "draft_step_s", "block_s"))


# ---------------------------------------------------------------------- comparisons
def _aggregate(raw: Sequence[dict], keys: Sequence[str], baseline: Mapping[tuple, str]) -> list[dict]:
    """Median/IQR over repeats per group, with paired speedups against the baseline."""
    groups: dict[tuple, list[dict]] = {}
    for row in raw:
        groups.setdefault(tuple(row[k] for k in keys), []).append(row)
    out = []
    for key, rows in groups.items():
        agg = dict(zip(keys, key))
        agg.update({k: rows[0][k] for k in ("target", "draft", "gamma") if k in rows[0]})
        agg["repeats"] = len(rows)
        hist: list[int] = []
        for r in rows:
            for k, n in enumerate(r.get("accepted_length_counts", ())):
                hist.extend([0] * (k + 1 - len(hist)))
                hist[k] += n
        agg["accepted_length_counts"] = tuple(hist)
        for metric in ("throughput", "char_throughput", "ttft_p50", "ttft_p90", "ttft_p99",
                       "itl_p50", "itl_p90", "itl_p99", "itl_mean", "total_p50", "acceptance",
                       "tokens_per_cycle", "wall", "target_pass_s", "draft_pass_s"):
            if metric not in rows[0]:
                continue
            vals = [r[metric] for r in rows if not math.isnan(r[metric])]
            m, iqr = median_iqr(vals) if vals else (float("nan"), float("nan"))
            agg[metric] = m
            if metric in ("throughput", "ttft_p50", "itl_mean", "wall"):
                agg[metric + "_iqr"] = iqr
        base = baseline.get(key)
        if base is not None:
            ratio = [r["throughput"] / b["throughput"] for r in rows for b in raw
                     if b["repeat"] == r["repeat"] and b["setting"] == base
                     and all(b[k] == r[k] for k in keys if k != "setting")]
            agg["speedup"], agg["speedup_iqr"] = median_iqr(ratio)
        out.append(agg)
    return out


def compare(settings: Sequence[Setting], prompts: Mapping[str, Sequence[str]], *,
            max_new_tokens: int = 48, repeats: int = 3, seed: int = 2026,
            sampling: dec.SamplingSettings = dec.SamplingSettings(),
            baselines: Mapping[str, str] | None = None, memory: bool = True,
            clock: Clock = time.perf_counter) -> Report:
    """Per-language latency and throughput of several settings, interleaved and repeated.

    Inside each repeat, for each language, every setting decodes the language's prompts
    one request at a time (batch 1); the order of settings rotates with the repeat.

    Parameters
    ----------
    settings : sequence of Setting
        Distinct names.
    prompts : mapping language -> list of str
    max_new_tokens, repeats, seed : int
    sampling : SamplingSettings
    baselines : mapping setting name -> baseline setting name, optional
        Whose throughput each setting's speedup is paired with. By default every
        speculative setting is compared with the non-speculative setting of the same
        target.
    memory : bool
        Also measure the peak memory of one request per setting (untimed, tracemalloc).
    clock : callable

    Returns
    -------
    Report
        Rows per (language, setting): medians and IQRs over repeats of throughput
        (tokens/s), TTFT and ITL percentiles (s), acceptance, tokens per cycle, speedup
        against the baseline; raw rows per repeat.
    """
    repeats = laws.check_int(repeats, "repeats", minimum=1)
    names = [s.name for s in settings]
    if len(set(names)) != len(names):
        raise ValueError("settings: names must be distinct")
    if baselines is None:
        baselines = {}
        for s in settings:
            if s.speculative:
                base = [b.name for b in settings if not b.speculative and b.target is s.target]
                if base:
                    baselines[s.name] = base[0]
    langs = list(prompts)
    raw = []
    for r in range(repeats):
        for li, lang in enumerate(langs):
            order = settings[r % len(settings):] + settings[:r % len(settings)]
            for s in order:
                rng = _rng(seed, r, li, names.index(s.name))
                metrics, wall, passes = _run_batches(s, prompts[lang], 1, max_new_tokens, rng,
                                                     sampling, clock)
                raw.append({"repeat": r, "language": lang, **s.describe(),
                            **summarize(metrics, wall).as_dict(), **passes})
    keyed = {(lang, name): baselines[name] for lang in langs for name in baselines}
    rows = _aggregate(raw, ("language", "setting"), keyed)
    if memory:
        for s in settings:
            first = next(iter(prompts.values()))[0]
            peak = peak_memory(lambda: s.run([first], max_new_tokens, _rng(seed, 99),
                                             sampling, time.perf_counter))
            for row in rows:
                if row["setting"] == s.name:
                    row["peak_memory_mib"] = peak / 2**20
    meta = {"sampling": sampling.as_dict(), "max_new_tokens": max_new_tokens,
            "repeats": repeats, "seed": seed, "batch": 1,
            "settings": [s.describe() for s in settings],
            "prompt_distribution": prompt_distribution(prompts),
            "interleaving": "per repeat and language, settings in rotating order",
            "timing": "median and IQR over repeats; percentiles pool the requests of a run"}
    return Report(title="Latency and throughput per language (batch 1)", rows=tuple(rows),
                  raw=tuple(raw), metadata=meta,
                  columns=("language", "setting", "throughput", "throughput_iqr", "speedup",
                           "speedup_iqr", "ttft_p50", "ttft_p90", "itl_mean", "itl_p50",
                           "itl_p99", "acceptance", "tokens_per_cycle", "peak_memory_mib"))


def concurrency(target: Transformer, draft: Transformer, prompts: Sequence[str], *,
                batch_sizes: Sequence[int] = (1, 2, 4, 8), gamma: int = 2,
                max_new_tokens: int = 48, repeats: int = 3, seed: int = 2026,
                sampling: dec.SamplingSettings = dec.SamplingSettings(),
                clock: Clock = time.perf_counter) -> Report:
    """Throughput when B requests are decoded together, with and without a draft.

    For each batch size B the first B prompts are decoded as one batch (batched
    forward passes), by the target alone and speculatively; the pair is interleaved
    inside every repeat. With speculation, requests of a batch accept different numbers
    of tokens, so the batch is ragged and a request leaves when it is done.

    Returns
    -------
    Report
        Rows per (batch, setting): throughput (tokens/s, all requests), TTFT and ITL,
        and for the speculative setting the paired gain over the baseline.
    """
    repeats = laws.check_int(repeats, "repeats", minimum=1)
    sizes = [laws.check_int(b, "batch_sizes", minimum=1) for b in batch_sizes]
    if max(sizes) > len(prompts):
        raise ValueError(f"prompts: need at least {max(sizes)} prompts (got {len(prompts)})")
    base = Setting("baseline", target)
    spec = Setting(f"speculative gamma={gamma}", target, draft, gamma)
    raw = []
    for r in range(repeats):
        for bi, b in enumerate(sizes):
            for s in ((base, spec) if r % 2 == 0 else (spec, base)):
                rng = _rng(seed, r, bi, int(s.speculative))
                metrics, wall, passes = _run_batches(s, list(prompts[:b]), b, max_new_tokens,
                                                     rng, sampling, clock)
                raw.append({"repeat": r, "batch": b, **s.describe(),
                            **summarize(metrics, wall).as_dict(), **passes})
    rows = _aggregate(raw, ("batch", "setting"), {(b, spec.name): base.name for b in sizes})
    meta = {"sampling": sampling.as_dict(), "max_new_tokens": max_new_tokens, "gamma": gamma,
            "repeats": repeats, "seed": seed, "batch_sizes": sizes,
            "batching": "static batch per request group; speculative rows are ragged and "
                        "leave the batch when done"}
    return Report(title=f"Concurrency: {target.name} with {draft.name}", rows=tuple(rows),
                  raw=tuple(raw), metadata=meta,
                  columns=("batch", "setting", "throughput", "throughput_iqr", "speedup",
                           "speedup_iqr", "ttft_p50", "itl_mean", "acceptance"))


def cost_model_check(latency: Report, costs: Report) -> Report:
    """Compare measured speedups with the cost model fed with measured quantities.

    For every speculative row of ``latency`` (batch 1), the cost model's prediction is
    ``S = E / (g(gamma) + c gamma)`` (:func:`specdec.cost.cycle_cost`) with ``E`` the
    measured tokens per cycle, and two versions of the denominator:

    * ``c``, ``g``: isolated micro-benchmarks from ``costs`` (same target, batch 1);
    * ``c_in_situ``, ``g_in_situ``: the mean time of a draft pass and of a target block
      pass measured inside the speculative runs, over the mean target pass of the
      baseline runs (same language, same target).

    ``implied_overhead`` is what the in-situ denominator lacks, in target steps per
    cycle, for the prediction to equal the measurement: ``E / S_measured - (g + c gamma)``
    (sampling laws, the accept loop, cache rollback, bookkeeping, prefill, minus the
    baseline's own per-token overheads).

    Returns
    -------
    Report
    """
    from . import cost

    table = {(r["target"], r["gamma"]): r for r in costs.rows if r["batch"] == 1}
    base = {(r["language"], r["target"]): r for r in latency.rows if r.get("draft") is None}
    rows = []
    for r in latency.rows:
        if r.get("gamma") is None or "speedup" not in r:
            continue
        k = table.get((r["target"], r["gamma"]))
        if k is None:
            continue
        gamma, e = r["gamma"], r["tokens_per_cycle"]
        denom = float(cost.cycle_cost(gamma, k["c"], g=k["g"]))
        row = {"language": r["language"], "setting": r["setting"], "target": r["target"],
               "gamma": gamma, "E": e, "c": k["c"], "g": k["g"], "predicted_speedup": e / denom}
        b = base.get((r["language"], r["target"]))
        if b is not None and "target_pass_s" in r and "target_pass_s" in b:
            c_situ = r["draft_pass_s"] / b["target_pass_s"]
            g_situ = r["target_pass_s"] / b["target_pass_s"]
            situ = float(cost.cycle_cost(gamma, c_situ, g=g_situ))
            row.update({"c_in_situ": c_situ, "g_in_situ": g_situ,
                        "predicted_in_situ": e / situ, "implied_overhead": e / r["speedup"] - situ})
        row["measured_speedup"] = r["speedup"]
        rows.append(row)
    return Report(title="Cost model with measured E, c and g(gamma) against measured speedup",
                  rows=tuple(rows), metadata={"formula": "S = E / (g(gamma) + c gamma)"},
                  columns=("language", "setting", "gamma", "E", "c", "g", "predicted_speedup",
                           "c_in_situ", "g_in_situ", "predicted_in_situ", "measured_speedup",
                           "implied_overhead"))


# --------------------------------------------------------------------------- study
@dataclass(frozen=True)
class Study:
    """All chapter-8 measurements of one run.

    Attributes
    ----------
    latency : Report
        Per language and setting, batch 1: the deep target alone and with the draft at
        each gamma, and the wide target alone and with the draft.
    costs : Report
        c and g(gamma) of both targets.
    concurrency : Report
        Throughput and gain of speculation as the batch grows (deep target).
    model_check : Report
        :func:`cost_model_check` of ``latency`` against ``costs``.
    metadata : dict
        Models, hardware, versions, sampling, seed, prompt distribution, parameters.
    seconds : float
        Wall time of the study.
    """

    latency: Report
    costs: Report
    concurrency: Report
    model_check: Report
    metadata: dict
    seconds: float

    def to_dict(self) -> dict:
        return {"latency": self.latency.to_dict(), "costs": self.costs.to_dict(),
                "concurrency": self.concurrency.to_dict(),
                "model_check": self.model_check.to_dict(), "metadata": self.metadata,
                "seconds": self.seconds}

    def summary(self) -> dict[str, float]:
        """Headline numbers as a flat dict (for ``glue``).

        Keys: ``throughput_<setting>_<lang>`` for every setting, and for speculative
        settings ``speedup_``, ``acceptance_`` and ``tokens_per_cycle_<setting>_<lang>``
        (setting names with non-alphanumerics replaced by ``_``, e.g. ``spec_g_2``,
        ``wide_spec_g_2``); ``c_<target>`` and ``g<gamma>_<target>`` (``target``,
        ``target_wide``), with ``_B<batch>`` appended for batch sizes above 1;
        ``gain_B<batch>`` (concurrency); ``seconds``.
        """
        def slug(text: str) -> str:
            return "".join(ch if ch.isalnum() else "_" for ch in text).strip("_")

        out: dict[str, float] = {}
        for row in self.latency.rows:
            key = f"{slug(row['setting'])}_{row['language']}"
            out[f"throughput_{key}"] = row["throughput"]
            if "speedup" in row:
                out[f"speedup_{key}"] = row["speedup"]
                out[f"acceptance_{key}"] = row["acceptance"]
                out[f"tokens_per_cycle_{key}"] = row["tokens_per_cycle"]
        for row in self.costs.rows:
            suffix = "" if row["batch"] == 1 else f"_B{row['batch']}"
            out[f"c_{row['target']}{suffix}"] = row["c"]
            out[f"g{row['gamma']}_{row['target']}{suffix}"] = row["g"]
        for row in self.concurrency.rows:
            if "speedup" in row:
                out[f"gain_B{row['batch']}"] = row["speedup"]
        out["seconds"] = self.seconds
        return out

    def to_markdown(self) -> str:
        return "\n\n".join([self.latency.to_markdown(), self.costs.to_markdown(),
                            self.model_check.to_markdown(), self.concurrency.to_markdown(),
                            "**Run**",
                            _metadata_markdown(self.metadata)])


def study_prompts(prompts_per_language: int, languages: Sequence[str] = LANGUAGES,
                  models_dir=None) -> dict[str, list[str]]:
    """The first ``prompts_per_language`` committed held-out prompts of each language."""
    held = load_heldout(models_dir)
    out = {}
    for lang in languages:
        if lang not in held:
            raise ValueError(f"languages: no held-out prompts for {lang!r}")
        ps = held[lang]["prompts"]
        if prompts_per_language > len(ps):
            raise ValueError(f"prompts_per_language: at most {len(ps)} (got {prompts_per_language})")
        out[lang] = ps[:prompts_per_language]
    return out


def run_study(*, seed: int = 2026, max_new_tokens: int = 64, prompts_per_language: int = 6,
              repeats: int = 5, gammas: Sequence[int] = (1, 2, 4),
              wide_gammas: Sequence[int] = (2,), cost_gammas: Sequence[int] = (1, 2, 4, 6),
              cost_repeats: int = 60, batch_sizes: Sequence[int] = (1, 2, 4, 8, 16),
              concurrency_gamma: int = 2, concurrency_repeats: int = 3,
              sampling: dec.SamplingSettings = dec.SamplingSettings(),
              languages: Sequence[str] = LANGUAGES, models_dir=None,
              blas: int | None = 1, clock: Clock = time.perf_counter) -> Study:
    """Run every chapter-8 measurement with small, fast defaults (under a minute on an
    idle 2-core machine; the time scales with prompts x repeats x max_new_tokens).

    Parameters
    ----------
    seed : int
        Seeds every decoder (through :class:`numpy.random.SeedSequence`).
    max_new_tokens : int
        Bytes generated per request, the same for all languages.
    prompts_per_language, repeats : int
        Requests per language and run; interleaved repeats.
    gammas, wide_gammas : sequence of int
        Draft lengths for the deep and the wide target.
    cost_gammas, cost_repeats : for :func:`step_costs`, measured with a cached prefix of
        the median prompt length plus ``max_new_tokens // 2`` (the middle of a request).
    batch_sizes, concurrency_gamma, concurrency_repeats : for :func:`concurrency`
        (prompts drawn round-robin from the languages).
    sampling : SamplingSettings
    languages : sequence of str
    models_dir : path, optional
    blas : int or None
        BLAS threads during the study (default 1, see :func:`limit_blas_threads`);
        None keeps the library's setting.
    clock : callable

    Returns
    -------
    Study
    """
    with limit_blas_threads(blas):
        return _run_study(seed=seed, max_new_tokens=max_new_tokens,
                          prompts_per_language=prompts_per_language, repeats=repeats,
                          gammas=gammas, wide_gammas=wide_gammas, cost_gammas=cost_gammas,
                          cost_repeats=cost_repeats, batch_sizes=batch_sizes,
                          concurrency_gamma=concurrency_gamma,
                          concurrency_repeats=concurrency_repeats, sampling=sampling,
                          languages=languages, models_dir=models_dir, clock=clock)


def _run_study(*, seed, max_new_tokens, prompts_per_language, repeats, gammas, wide_gammas,
               cost_gammas, cost_repeats, batch_sizes, concurrency_gamma, concurrency_repeats,
               sampling, languages, models_dir, clock) -> Study:
    t0 = time.perf_counter()
    manifest = load_manifest(models_dir)
    target, wide, draft = (load_model(n, models_dir) for n in ("target", "target_wide", "draft"))
    prompts = study_prompts(max(prompts_per_language, 1), languages, models_dir)
    settings = [Setting("baseline", target)]
    settings += [Setting(f"spec g={g}", target, draft, g) for g in gammas]
    settings += [Setting("wide baseline", wide)]
    settings += [Setting(f"wide spec g={g}", wide, draft, g) for g in wide_gammas]
    latency = compare(settings, prompts, max_new_tokens=max_new_tokens, repeats=repeats,
                      seed=seed, sampling=sampling, clock=clock)
    cost_rows, cost_raw = [], []
    # costs at the middle of a request: median prompt plus half the generated tokens
    prefix = int(np.median([len(p.encode("utf-8")) for ps in prompts.values() for p in ps]))
    prefix = min(prefix + max_new_tokens // 2,
                 target.config.context - max(cost_gammas) - 1)
    for tgt in (target, wide):
        rep = step_costs(tgt, draft, cost_gammas, prefix=prefix, repeats=cost_repeats,
                         seed=seed, clock=clock)
        cost_rows += rep.rows
        cost_raw += [dict(r, target=tgt.name, batch=1) for r in rep.raw]
    for b in batch_sizes:
        if b == 1:
            continue
        rep = step_costs(target, draft, (concurrency_gamma,), prefix=prefix, batch=b,
                         repeats=cost_repeats, seed=seed, clock=clock)
        cost_rows += rep.rows
        cost_raw += [dict(r, target=target.name, batch=b) for r in rep.raw]
    costs = Report(title="Step costs c and g(gamma) (batch 1 for both targets; the deep "
                         "target at the concurrency batch sizes)", rows=tuple(cost_rows),
                   raw=tuple(cost_raw), metadata=dict(rep.metadata, batch="per row"),
                   columns=rep.columns)
    need = max(batch_sizes)
    held = load_heldout(models_dir)
    mixed = [held[languages[i % len(languages)]]["prompts"][i // len(languages)]
             for i in range(need)]
    conc = concurrency(target, draft, mixed, batch_sizes=batch_sizes, gamma=concurrency_gamma,
                       max_new_tokens=max_new_tokens, repeats=concurrency_repeats, seed=seed,
                       sampling=sampling, clock=clock)
    meta = {"models": {m.name: model_info(m, manifest) for m in (target, wide, draft)},
            "precision": "float32 (numpy)", "sampling": sampling.as_dict(),
            "tokens": "UTF-8 bytes (vocabulary 256)", "seed": seed,
            "max_new_tokens": max_new_tokens, "repeats": repeats,
            "prompts_per_language": prompts_per_language, "gammas": list(gammas),
            "wide_gammas": list(wide_gammas), "batch_sizes": list(batch_sizes),
            "hardware": environment(),
            "prompt_distribution": prompt_distribution(prompts)}
    return Study(latency=latency, costs=costs, concurrency=conc,
                 model_check=cost_model_check(latency, costs), metadata=meta,
                 seconds=time.perf_counter() - t0)
