"""Chapter 8's in-process study: every measurement of the book's decoder in one call.

This is the book's use of the measurement library, not part of it: which models, which
settings, which prompts, in which order, with which knobs. The library it calls is
:mod:`specdec.protocol` (paired, interleaved comparisons and step costs) and
:mod:`specdec.measure` (arithmetic, reports, BLAS threads). Used in Chapter 8.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from specdec import decode as dec
from specdec.measure import Clock, Report, environment, limit_blas_threads, model_info, \
    prompt_distribution
from specdec.nn import LANGUAGES, load_heldout, load_manifest, load_model
from specdec.protocol import Setting, compare, concurrency, cost_model_check, step_costs
from specbook.tables import metadata_markdown, report_markdown

__all__ = ["Study", "study_prompts", "run_study"]


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
        Models, hardware, versions, sampling, seed, prompt distribution, parameters;
        ``disturbance``, the largest median-over-fastest target step of the cost
        micro-benchmarks minus one, and ``load_max``, the largest 1-minute load average
        seen during the study (the disturbance indicators).
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
        return "\n\n".join([*(report_markdown(r) for r in (self.latency, self.costs,
                                                             self.model_check, self.concurrency)),
                            "**Run**", metadata_markdown(self.metadata)])


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
    loads = [os.getloadavg()[0]]
    manifest = load_manifest(models_dir)
    target, wide, draft = (load_model(n, models_dir) for n in ("target", "target_wide", "draft"))
    prompts = study_prompts(max(prompts_per_language, 1), languages, models_dir)
    settings = [Setting("baseline", target)]
    settings += [Setting(f"spec g={g}", target, draft, g) for g in gammas]
    settings += [Setting("wide baseline", wide)]
    settings += [Setting(f"wide spec g={g}", wide, draft, g) for g in wide_gammas]
    latency = compare(settings, prompts, max_new_tokens=max_new_tokens, repeats=repeats,
                      seed=seed, sampling=sampling, clock=clock)
    loads.append(os.getloadavg()[0])
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
            "precision": "float32 (numpy)", "sampling": asdict(sampling),
            "tokens": "UTF-8 bytes (vocabulary 256)", "seed": seed,
            "max_new_tokens": max_new_tokens, "repeats": repeats,
            "prompts_per_language": prompts_per_language, "gammas": list(gammas),
            "wide_gammas": list(wide_gammas), "batch_sizes": list(batch_sizes),
            "hardware": environment(),
            "disturbance": max(r["disturbance"] for r in cost_rows),
            "load_max": max(loads + [os.getloadavg()[0]]),
            "prompt_distribution": prompt_distribution(prompts)}
    return Study(latency=latency, costs=costs, concurrency=conc,
                 model_check=cost_model_check(latency, costs), metadata=meta,
                 seconds=time.perf_counter() - t0)
