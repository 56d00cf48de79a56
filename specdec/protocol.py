"""The chapter-8 protocol on in-process decoders: paired, interleaved, repeated.

For every language and decoding setting (:class:`Setting`: the target alone, or with a
draft at a draft length gamma) :func:`compare` decodes the same prompts one request at a
time, inside every repeat, in an order that rotates with the repeat
(:func:`specdec.measure.rotation`), and reports medians and IQRs over repeats with
speedups paired by repeat, language and prompts. :func:`concurrency` does the same for B
requests decoded together (batched forward passes). :func:`step_costs` measures the two
cost ratios of the cost model, the draft cost ``c`` (draft step / target step) and the
verification cost ``g(gamma)`` (a target pass over gamma + 1 positions / a target step);
:func:`cost_model_check` compares the cost model fed with them against the measured
speedups. The same protocol over HTTP, against a serving engine, is
:mod:`specdec.client`.

Decoders take a ``clock`` argument, so the arithmetic is checked with
:class:`specdec.measure.TickClock`. Used in Chapter 8.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

import numpy as np

from specdec import decode as dec
from specdec import laws
from specdec.measure import (Clock, Report, RequestMetrics, median_iqr, peak_memory, quartiles,
                      prompt_distribution, request_metrics, rotation, summarize)
from specdec.nn import Transformer

__all__ = ["Setting", "step_costs", "compare", "concurrency", "cost_model_check"]


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
        median times in seconds and their IQRs, the same from the fastest repeats
        (``c_min``, ``g_min``, ``*_min_s``), and ``disturbance``, the median target step
        over its fastest repeat minus one: near 0 on a quiet machine, large when other
        processes took the processor while it was timed.
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
    tmin, dmin = min(times["target"]), min(times["draft"])
    rows = []
    for g in gammas:
        bm, biqr = median_iqr(times[f"block{g}"])
        rows.append({"target": target.name, "draft": draft.name, "batch": batch, "gamma": g,
                     "c": dm / tm, "g": bm / tm, "target_step_s": tm, "target_step_iqr_s": tiqr,
                     "draft_step_s": dm, "draft_step_iqr_s": diqr, "block_s": bm,
                     "block_iqr_s": biqr, "target_step_min_s": tmin, "draft_step_min_s": dmin,
                     "block_min_s": min(times[f"block{g}"]),
                     "c_min": dmin / tmin if tmin > 0 else float("nan"),
                     "g_min": min(times[f"block{g}"]) / tmin if tmin > 0 else float("nan"),
                     "disturbance": tm / tmin - 1 if tmin > 0 else 0.0})
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
            q1, agg["speedup"], q3 = quartiles(ratio)
            agg["speedup_q1"], agg["speedup_q3"], agg["speedup_iqr"] = q1, q3, q3 - q1
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
        against the baseline (``speedup`` the median of the paired ratios,
        ``speedup_q1``/``speedup_q3`` their quartiles, ``speedup_iqr`` = q3 - q1); raw
        rows per repeat.
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
            order = rotation(settings, r)
            for s in order:
                rng = _rng(seed, r, li, names.index(s.name))
                metrics, wall, passes = _run_batches(s, prompts[lang], 1, max_new_tokens, rng,
                                                     sampling, clock)
                raw.append({"repeat": r, "language": lang, **s.describe(),
                            **summarize(metrics, wall).to_dict(), **passes})
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
    meta = {"sampling": asdict(sampling), "max_new_tokens": max_new_tokens,
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
        and for the speculative setting the paired gain over the baseline (``speedup``,
        its quartiles ``speedup_q1`` and ``speedup_q3``, and ``speedup_iqr``).
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
            for s in rotation((base, spec), r):
                rng = _rng(seed, r, bi, int(s.speculative))
                metrics, wall, passes = _run_batches(s, list(prompts[:b]), b, max_new_tokens,
                                                     rng, sampling, clock)
                raw.append({"repeat": r, "batch": b, **s.describe(),
                            **summarize(metrics, wall).to_dict(), **passes})
    rows = _aggregate(raw, ("batch", "setting"), {(b, spec.name): base.name for b in sizes})
    meta = {"sampling": asdict(sampling), "max_new_tokens": max_new_tokens, "gamma": gamma,
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
    from specdec import cost

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
