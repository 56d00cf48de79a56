"""Chapter 8's served study: the protocol run against a real engine, llama.cpp's server.

The book's use of :mod:`specdec.client` on ``llama-server`` serving the book's models
(built, converted and started by ``tools/engine.py``, loaded by :func:`load_engine`):

1. exactness first, black box: the law of the first two bytes after a prompt, with and
   without the draft, against the exact law of the same weights; the two samples against
   each other; the same-seed identity of the texts; and a non-exact setting (llama.cpp's
   synthetic acceptance, a benchmarking option) that the check must reject;
2. the paired, interleaved protocol, baseline against draft, on the mixed-language
   stream of held-out prompts at batch one (:func:`sampled_protocol`), at temperatures 0
   and 1, with bootstrap intervals over prompts; at temperature 0 the texts of the two
   servers are compared and their repetition measured (:func:`distinct_ngram_share`);
3. an open-loop request-rate sweep (Poisson arrivals) with goodput under TTFT/TPOT limits
   set from the plain server's distribution, for several limits;
4. the server's reported acceptance beside the acceptance of its rule (greedy draft,
   accept while the target's sample equals the draft token) and of the rejection rule,
   computed exactly from the same models along held-out text (:func:`rule_acceptance`);
5. the scale study (:func:`run_scale_study`): targets of growing weight size, the cost
   model's inputs timed in windows interleaved with the paired repeats, a memory-bandwidth
   baseline, and the context of every run (:func:`run_context`).

Used in Chapter 8.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .. import client as cl
from .. import decode as dec
from .. import nn
from ..client import exactness as ex
from ..laws import check_int
from ..measure import rotation

__all__ = ["load_engine", "rule_acceptance", "ServedStudy", "run_served_study", "pass_times",
           "weight_bytes", "ScaleStudy", "run_scale_study"]


def load_engine():
    """``tools/engine.py`` of the repository the models come from (tooling, not library)."""
    path = Path(__file__).resolve().parents[2] / "tools" / "engine.py"   # the checkout's root
    name = "specdec_book_engine_tool"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or not path.exists():
        raise FileNotFoundError(f"{path}: the engine tool is missing from this checkout")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def rule_acceptance(target: nn.Transformer, draft: nn.Transformer, texts: Sequence[str],
                    temperature: float) -> dict:
    """Per-position acceptance of two verification rules along ``texts``, exactly.

    At every position of every text (windows of the model context), with ``p`` the
    target's and ``q`` the draft's next-byte law at ``temperature``:

    * ``rejection``: the rule of Leviathan et al. (2023), a draft token sampled from
      ``q``, accepted with probability ``min(1, p/q)``: acceptance ``sum min(p, q)``;
    * ``match``: llama.cpp's rule, a greedy draft token ``argmax q``, accepted when the
      target's own sample equals it: acceptance ``p[argmax q]``.

    At temperature 0 both are ``1[argmax p == argmax q]``. Returns the means over
    positions and the number of positions.
    """
    settings = dec.SamplingSettings(temperature=temperature)
    match, rejection = [], []
    ctx = min(target.config.context, draft.config.context)
    for text in texts:
        tokens = nn.encode(text)
        for s in range(0, max(tokens.size - 1, 1), ctx):
            window = tokens[s:s + ctx]
            if window.size < 2:
                continue
            p = settings.laws(target.forward(window[None])[0])
            q = settings.laws(draft.forward(window[None])[0])
            greedy = np.argmax(q, axis=1)
            match.append(p[np.arange(len(p)), greedy])
            rejection.append(np.minimum(p, q).sum(axis=1))
    match, rejection = np.concatenate(match), np.concatenate(rejection)
    return {"temperature": temperature, "match": float(match.mean()),
            "rejection": float(rejection.mean()), "positions": int(match.size)}


@dataclass(frozen=True)
class ServedStudy:
    """Everything the served part of chapter 8 measured (see the module docstring)."""

    exactness: dict
    paired: dict
    rates: list
    acceptance: list
    metadata: dict
    seconds: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _version(binary: Path, engine) -> str:
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                          env=engine._env(binary.parent), timeout=60)
    lines = (done.stdout + done.stderr).strip().splitlines()
    return next((line for line in lines if "version" in line), lines[-1] if lines else "?")


def run_served_study(*, seed: int = 2026, gamma: int = 3, prompts_per_language: int = 20,
                     greedy_prompts_per_language: int = 5, max_tokens: int = 48,
                     repeats: int = 3,
                     temperatures: Sequence[float] = (0.0, 1.0), exact_trials: int = 1000,
                     identity_requests: int = 24, rates: Sequence[float] = (10, 40, 160),
                     rate_requests: int = 32, slots: int = 4,
                     limit_factors: Sequence[float] = (1.0, 1.5, 2.0, 3.0),
                     limit_factor: float = 1.5, log=lambda *_: None) -> ServedStudy:
    """Run the served study (its duration is ``seconds`` of the result; chapter 8 reports it).

    Parameters
    ----------
    seed : int
        Request seeds start here (request k of a batch gets ``seed + k``).
    gamma : int
        Draft length of the speculative server (``--spec-draft-n-max``).
    prompts_per_language, max_tokens, repeats : int
        The paired protocol's prompts per language (held-out prompts), tokens per
        request, repeats (:func:`sampled_protocol`: the mixed-language stream at batch
        one, intervals over prompts).
    greedy_prompts_per_language : int
        The first prompts per language that temperature 0 is timed on (greedy text is
        shown beside the sampled text, to check it, not to measure it as closely).
    temperatures : sequence of float
        Sampling temperatures of the paired protocol (all truncation off); at temperature
        0 the study records whether the two servers gave identical texts for every timed
        request (``paired[...]["identical"]``) and how repetitive the texts are.
    exact_trials, identity_requests : int
        Seeded requests per setting for the law of the first two bytes; requests of 32
        bytes for the same-seed identity.
    rates, rate_requests, slots : the open-loop sweep (requests/s, requests per rate,
        server slots).
    limit_factors, limit_factor : sequence of float, float
        Goodput limits, set from the baseline's distribution *before* the speculative
        server is judged: TTFT and TPOT limits of ``factor`` times the plain server's 90th
        percentiles at the lowest rate; goodput is reported for every factor of
        ``limit_factors``, and ``limit_factor`` (one of them, fixed before the run) is the
        one the figure shows.
    """
    if limit_factor not in limit_factors:
        raise ValueError(f"limit_factor: must be one of limit_factors {list(limit_factors)} "
                         f"(got {limit_factor!r})")
    t0 = time.perf_counter()
    engine = load_engine()
    binary = engine.build(log=log)
    held = nn.load_heldout()
    target, draft = nn.load_model("target"), nn.load_model("draft")
    prompts = {lang: held[lang]["prompts"][:prompts_per_language] for lang in nn.LANGUAGES}
    exact_prompt = held["en"]["prompts"][0]
    law = ex.pad_law(dec.target_sequence_law(target, exact_prompt, 2), engine.EOS_BYTE)
    exactness: dict = {"prompt": exact_prompt, "trials": exact_trials}
    with engine.serve("target", parallel=slots, exact_cache=True, log=log) as base, \
            engine.serve("target", "draft", gamma, parallel=slots, exact_cache=True,
                         log=log) as spec:
        draws = {}
        for name, server in (("baseline", base), ("speculative", spec)):
            draws[name] = ex.first_tokens(cl.Endpoint(server.url), exact_prompt, exact_trials,
                                          seed=seed, pad=engine.EOS_BYTE, generate=gamma + 4)
            exactness[name] = ex.first_tokens_law_test(draws[name], law).to_dict()
        exactness["two_sample"] = ex.two_sample(draws["baseline"], draws["speculative"]).to_dict()
        long = [ex.first_tokens(cl.Endpoint(s.url), exact_prompt, identity_requests, k=32,
                                seed=seed, pad=-1) for s in (base, spec)]
        exactness["identity"] = ex.same_seed_identity(list(long[0]), list(long[1]))
        exactness["server_args"] = {"baseline": list(base.args[1:]),
                                    "speculative": list(spec.args[1:])}
    with engine.serve("target", "draft", gamma, parallel=slots, exact_cache=True,
                      extra=("--spec-synth-len", str(gamma + 1)), log=log) as bad:
        bad_draws = ex.first_tokens(cl.Endpoint(bad.url), exact_prompt, exact_trials,
                                    seed=seed, pad=engine.EOS_BYTE, generate=gamma + 4)
        exactness["synthetic"] = ex.first_tokens_law_test(bad_draws, law).to_dict()
        exactness["synthetic_two_sample"] = ex.two_sample(draws["baseline"], bad_draws).to_dict()
        exactness["synthetic_flag"] = f"--spec-synth-len {gamma + 1}"
    paired, rate_runs = {}, []
    with engine.serve("target", parallel=slots, log=log) as base, \
            engine.serve("target", "draft", gamma, parallel=slots, log=log) as spec:
        endpoints = {"baseline": cl.Endpoint(base.url), "speculative": cl.Endpoint(spec.url)}
        lengths = cl.prompt_lengths(endpoints["baseline"], prompts)
        for temp in temperatures:
            these = prompts if temp > 0 else {lang: ps[:greedy_prompts_per_language]
                                              for lang, ps in prompts.items()}
            paired[f"{temp:g}"] = sampled_protocol(endpoints, these, baseline="baseline",
                                                   repeats=repeats, max_tokens=max_tokens,
                                                   temperature=temp, seed=seed)
        mixed = [p for _, p in interleave_languages(prompts)]
        specs = [cl.RequestSpec(f"rate-{k}", mixed[k % len(mixed)], max_tokens,
                                cl.plain_sampling(1.0), seed + k) for k in range(rate_requests)]
        for i, rate in enumerate(rates):
            for name in rotation(list(endpoints), i):
                rate_runs.append((rate, cl.open_loop(endpoints[name], specs, rate, 1.0,
                                                     rng=[seed, i], setting=name)))
        server_args = {"baseline": list(base.args[1:]), "speculative": list(spec.args[1:])}
    low = min(rates)
    calm = [rec for rate, run in rate_runs if rate == low and run.setting == "baseline"
            for rec in run.records]
    ttft_p90 = float(np.percentile([r.ttft for r in calm], 90))
    tpot_p90 = float(np.percentile([r.tpot for r in calm if np.isfinite(r.tpot)], 90))
    limits = [{"factor": float(f), "ttft_max": f * ttft_p90, "tpot_max": f * tpot_p90}
              for f in limit_factors]
    chosen = next(x for x in limits if x["factor"] == limit_factor)
    rate_rows = []
    for rate, run in rate_runs:
        row = {"rate": rate, **cl.summarize_run(run, ttft_max=chosen["ttft_max"],
                                                tpot_max=chosen["tpot_max"])}
        row["ttft_largest"] = float(max(r.ttft for r in run.records))
        row["goodput_by_factor"] = {f"{x['factor']:g}": cl.goodput(
            run.records, run.wall, ttft_max=x["ttft_max"], tpot_max=x["tpot_max"])
            for x in limits}
        rate_rows.append(row)
    texts = [held[lang]["text"][:600] for lang in nn.LANGUAGES]
    acceptance = [rule_acceptance(target, draft, texts, t) for t in temperatures]
    meta = {"engine": _version(binary, engine), "llama_cpp_python": engine.LLAMA_CPP_PYTHON,
            "sdist_sha256": engine.SDIST_SHA256, "build_key": engine.build_key(),
            "gamma": gamma, "slots": slots, "threads": 1, "max_tokens": max_tokens,
            "repeats": repeats, "seed": seed, "prompt_lengths": lengths,
            "server_args": server_args, "ttft_max": chosen["ttft_max"],
            "tpot_max": chosen["tpot_max"], "limit_factor": limit_factor, "limits": limits,
            "baseline_ttft_p90": ttft_p90, "baseline_tpot_p90": tpot_p90,
            "rates": list(rates), "rate_requests": rate_requests,
            "prompts_per_language": prompts_per_language,
            "greedy_prompts_per_language": greedy_prompts_per_language, "headline": HEADLINE,
            "context": run_context(engine, server_args)}
    return ServedStudy(exactness=exactness, paired=paired, rates=rate_rows,
                       acceptance=acceptance, metadata=meta,
                       seconds=time.perf_counter() - t0)


# ------------------------------------------------------------------ scale study
def _one(endpoint: cl.Endpoint, prompt: str, max_tokens: int) -> dict:
    """The engine's ``timings`` of one greedy request (llama.cpp reuses the cached prefix)."""
    spec = cl.RequestSpec("cost", prompt, max_tokens, cl.plain_sampling(0.0), 0,
                          extra={"cache_prompt": True})
    return dict(cl.closed_loop(endpoint, [spec]).records[0].timings)


def pass_times(endpoints: dict, prefix: str, continuation: str, positions: Sequence[int],
               repeats: int) -> list[dict]:
    """Wall time of one forward pass over ``k`` new positions, per server, as the engine
    times it (llama.cpp's ``timings.prompt_ms`` with ``timings.prompt_n == k``).

    For every repeat, server (in an order that rotates with the repeat) and ``k`` in
    ``positions``: a request with ``prefix`` fills the server's cache, then a request with
    ``prefix + continuation[:k]`` makes the engine evaluate only the ``k`` new bytes in one
    batch: a target pass scoring ``k`` positions, the same kernel calls a verification
    pass of ``gamma + 1 = k`` positions makes (with logits for the last position only,
    256 of them: a negligible share). ``prefix`` and ``continuation`` must be ASCII so
    that characters are bytes are tokens. Rows where the engine evaluated another number
    of positions than ``k`` (it re-evaluates a cached byte when the new text starts with
    the byte it generated) are kept with their own ``prompt_n``.

    Returns
    -------
    list of dict
        ``server``, ``repeat``, ``positions`` (the engine's ``prompt_n``), ``ms``.
    """
    if not (isinstance(prefix, str) and isinstance(continuation, str)):
        raise TypeError("prefix, continuation: must be strings")
    if not (prefix.isascii() and continuation.isascii()):
        raise ValueError("prefix, continuation: must be ASCII (one byte, one token)")
    positions = [check_int(k, "positions") for k in positions]
    if not positions:
        raise ValueError("positions: must hold at least one number of positions")
    repeats = check_int(repeats, "repeats")
    if max(positions) > len(continuation):
        raise ValueError(f"continuation: needs at least {max(positions)} characters")
    rows = []
    for r in range(repeats):
        for name in rotation(list(endpoints), r):
            for k in rotation(list(positions), r):
                _one(endpoints[name], prefix, 1)
                t = _one(endpoints[name], prefix + continuation[:k], 1)
                rows.append({"server": name, "repeat": r, "positions": int(t["prompt_n"]),
                             "ms": float(t["prompt_ms"])})
    return rows


def _fastest_and_median(rows, server, k):
    ms = [x["ms"] for x in rows if x["server"] == server and x["positions"] == k]
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


@dataclass(frozen=True)
class ScaleStudy:
    """Speculation against the target's weight size on llama-server (see
    :func:`run_scale_study`)."""

    targets: list
    passes: list
    paired: dict
    concurrency: list
    metadata: dict
    seconds: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def run_scale_study(*, seed: int = 2026, targets: Sequence[str] = ("target", "target_wide",
                                                                  "target_large"),
                    gamma: int = 4, temperature: float = 1.0,
                    languages: Sequence[str] = nn.LANGUAGES, prompts_per_language: int = 20,
                    max_tokens: int = 32, repeats: int = 3, cost_repeats: int = 4,
                    bandwidth_megabytes: int = 256,
                    concurrency_target: str = "target_large",
                    concurrencies: Sequence[int] = (1, 2, 4), concurrency_repeats: int = 5,
                    concurrency_prompts_per_language: int = 2,
                    log=lambda *_: None) -> ScaleStudy:
    """The served protocol for targets of growing weight size, with the cost model timed
    in the same windows.

    For every target: a plain and a speculative llama-server (the book's draft, draft
    length ``gamma``, one slot, one thread) and the draft served alone. Each of
    ``repeats`` repeats runs, in an order that rotates with the repeat, the mixed-language
    stream on the plain server, the same stream on the speculative one
    (:func:`sampled_protocol`: ``prompts_per_language`` held-out prompts per language at
    ``temperature``, seeded, one request in flight) and a *cost window*:
    ``cost_repeats`` rounds of :func:`pass_times` (one to ``gamma + 1`` positions on the
    plain server, one on the draft alone) and a :func:`memory_bandwidth` baseline. From
    each window (estimator :data:`COST_ESTIMATOR`, fixed before the run,
    :func:`window_costs`):

    * ``c``: the draft's one-position pass over the target's;
    * ``g``: the target's ``gamma + 1``-position pass over its one-position pass, and
      ``g_by_gamma`` for every draft length from 1 to ``gamma``;
    * the cost model's speedup ``E / (gamma c + g)`` (:func:`predicted_speedup`) with
      ``E = 1 + gamma a``, ``a`` the acceptance the server reported in the same repeat;
      beside the stream's measured speedup in that repeat, and their relative error.

    Per language and for the whole stream the measured speedup comes with a bootstrap
    interval over prompts (:func:`ratio_interval`) and the prediction from the medians of
    every window's passes.

    Then ``concurrency_target`` is run at each of ``concurrencies`` requests in flight
    (closed loop, as many slots, ``concurrency_prompts_per_language`` prompts of every
    language mixed, ``concurrency_repeats`` repeats), plain against speculative, paired.

    Returns
    -------
    ScaleStudy
        ``targets``: one row per target and group (``"mixed"`` and each language);
        ``passes``: every pass time (with ``target`` and ``window``); ``paired``: the
        protocol's output per target (without its cost windows, which are in
        ``windows`` of the metadata); ``concurrency``: rows per concurrency;
        ``metadata`` (with ``windows``: per target and repeat, c, g, bandwidth,
        prediction, measurement and error; and ``context``, :func:`run_context`);
        ``seconds``.
    """
    if not (isinstance(gamma, int) and gamma >= 1):
        raise ValueError(f"gamma: must be an integer >= 1 (got {gamma!r})")
    t0 = time.perf_counter()
    engine = load_engine()
    engine.build(log=log)
    held = nn.load_heldout()
    for lang in languages:
        if len(held[lang]["prompts"]) < prompts_per_language:
            raise ValueError(f"prompts_per_language: the held-out set has "
                             f"{len(held[lang]['prompts'])} prompts in {lang!r}, fewer than "
                             f"{prompts_per_language}")
    prompts = {lang: held[lang]["prompts"][:prompts_per_language] for lang in languages}
    text = held["en"]["text"]
    ascii_text = "".join(ch for ch in text if ch.isascii() and ch.isprintable())
    prefix, continuation = ascii_text[:48], ascii_text[48:48 + gamma + 1]
    rows, passes, paired_out, models, windows, servers = [], [], {}, {}, [], {}
    draft = nn.load_model("draft")
    for name in targets:
        model = nn.load_model(name)
        models[name] = {"parameters": model.n_parameters, "layers": model.config.n_layers,
                        "d_model": model.config.d_model, "weight_bytes": weight_bytes(model)}
        with engine.serve(name, log=log) as base, \
                engine.serve(name, "draft", gamma, log=log) as spec, \
                engine.serve("draft", log=log) as alone:
            eps = {"baseline": cl.Endpoint(base.url), "speculative": cl.Endpoint(spec.url)}
            cost_eps = {"target": eps["baseline"], "draft": cl.Endpoint(alone.url)}

            def window(r, name=name, cost_eps=cost_eps):
                got = pass_times(cost_eps, prefix, continuation, tuple(range(1, gamma + 2)),
                                 cost_repeats)
                bw = memory_bandwidth(megabytes=bandwidth_megabytes, repeats=3)
                return {"passes": [dict(x, target=name, window=r) for x in got],
                        "bandwidth": bw}

            out = sampled_protocol(eps, prompts, baseline="baseline", repeats=repeats,
                                   max_tokens=max_tokens, temperature=temperature,
                                   seed=seed, window=window)
            servers.update({f"{name}, plain": base.args[1:],
                            f"{name}, with the draft": spec.args[1:],
                            f"draft alone, beside {name}": alone.args[1:]})
        got = [x for w in out["windows"] for x in w["passes"]]
        passes += got
        spec_streams = {s["repeat"]: s for s in out["streams"] if s["setting"] == "speculative"}
        for r, w in enumerate(out["windows"]):
            cost_r = window_costs(w["passes"], gamma)
            s = spec_streams[r]
            pred = predicted_speedup(s["acceptance"], cost_r["c"], cost_r["g"], gamma)
            windows.append({"target": name, "repeat": r, **cost_r,
                            "bandwidth": w["bandwidth"], "acceptance": s["acceptance"],
                            "predicted_speedup": pred, "speedup": s["speedup"],
                            "error": pred / s["speedup"] - 1.0,
                            "achieved_gbs": models[name]["weight_bytes"] / cost_r["target_ms"]
                            / 1e6})
        pooled = window_costs(got, gamma)
        mine = [w for w in windows if w["target"] == name]
        read_gbs = float(np.median([w["bandwidth"]["read_gbs_median"] for w in mine]))
        base_rows = [x for x in out["requests"] if x["setting"] == "baseline"]
        for group, res in out["speedup"]["speculative"].items():
            which = [x for x in base_rows if group == "mixed" or x["language"] == group]
            base_tp = sum(x["tokens"] for x in which) / sum(x["seconds"] for x in which)
            pred = predicted_speedup(res["acceptance"], pooled["c"], pooled["g"], gamma)
            rows.append({"target": name, "language": group, "gamma": gamma,
                         "temperature": float(temperature), **models[name],
                         "target_pass_ms": pooled["target_ms"],
                         "verify_pass_ms": pooled["verify_ms"],
                         "draft_pass_ms": pooled["draft_ms"],
                         "disturbance": pooled["disturbance"], "c": pooled["c"],
                         "g": pooled["g"], "g_by_gamma": pooled["g_by_gamma"],
                         "acceptance": res["acceptance"], "E": 1.0 + gamma * res["acceptance"],
                         "predicted_speedup": pred, "speedup": res["speedup"],
                         "speedup_low": res["low"], "speedup_high": res["high"],
                         "prompts": res["prompts"], "error": pred / res["speedup"] - 1.0,
                         "baseline_throughput": base_tp,
                         "distinct_4gram_share": out["distinct_4gram_share"][group],
                         "achieved_gbs": models[name]["weight_bytes"] / pooled["target_ms"] / 1e6,
                         "read_gbs": read_gbs})
        paired_out[name] = {k: v for k, v in out.items() if k != "windows"}
    conc_rows = []
    if concurrency_target:
        cprompts = {lang: ps[:concurrency_prompts_per_language] for lang, ps in prompts.items()}
        mixed = [p for _, p in interleave_languages(cprompts)]
        need = max(concurrencies)
        mixed = (mixed * (need // len(mixed) + 2))[:max(need * 2, len(mixed))]
        with engine.serve(concurrency_target, parallel=need, log=log) as base, \
                engine.serve(concurrency_target, "draft", gamma, parallel=need,
                             log=log) as spec:
            eps = {"baseline": cl.Endpoint(base.url), "speculative": cl.Endpoint(spec.url)}
            servers.update({f"{concurrency_target}, plain, {need} slots": base.args[1:],
                            f"{concurrency_target}, with the draft, {need} slots": spec.args[1:]})
            for n in concurrencies:
                out = cl.paired(eps, {"mixed": mixed}, baseline="baseline",
                                repeats=concurrency_repeats, max_tokens=max_tokens,
                                sampling=cl.plain_sampling(temperature), seed=seed,
                                concurrency=n)
                row = next(r for r in out["rows"] if r["setting"] == "speculative")
                base_row = next(r for r in out["rows"] if r["setting"] == "baseline")
                conc_rows.append({"target": concurrency_target, "concurrency": n,
                                  "speedup": row["speedup"], "speedup_q1": row["speedup_q1"],
                                  "speedup_q3": row["speedup_q3"],
                                  "speedup_iqr": row["speedup_iqr"],
                                  "acceptance": row["acceptance"],
                                  "baseline_throughput": base_row["output_throughput"],
                                  "throughput": row["output_throughput"]})
    meta = {"engine": _version(engine.server_binary(), engine), "gamma": gamma,
            "temperature": float(temperature), "threads": 1, "max_tokens": max_tokens,
            "repeats": repeats, "cost_repeats": cost_repeats,
            "cost_estimator": COST_ESTIMATOR, "headline": HEADLINE, "seed": seed,
            "prompts_per_language": prompts_per_language, "models": models,
            "draft": {"parameters": draft.n_parameters, "weight_bytes": weight_bytes(draft)},
            "concurrency_target": concurrency_target, "concurrencies": list(concurrencies),
            "concurrency_repeats": concurrency_repeats,
            "concurrency_prompts_per_language": concurrency_prompts_per_language,
            "cost_prefix_bytes": len(prefix), "last_level_cache_bytes": last_level_cache(),
            "windows": windows, "context": run_context(engine, servers)}
    return ScaleStudy(targets=rows, passes=passes, paired=paired_out, concurrency=conc_rows,
                      metadata=meta, seconds=time.perf_counter() - t0)


# ------------------------------------------------------------- sampled-text protocol
#: How c and g are estimated from the pass timings of one window of the protocol. Fixed
#: before any run (not chosen by which estimator predicted better afterwards): the median
#: of the passes timed in that window, on the same servers as the paired requests.
COST_ESTIMATOR = "median"

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


def ratio_interval(base_time, base_tokens, spec_time, spec_tokens, *, seed,
                   confidence: float = 0.95, resamples: int = 2000) -> dict:
    """Throughput ratio of two settings over the same prompts, with a bootstrap interval
    over prompts.

    The ratio is ``(sum spec_tokens / sum spec_time) / (sum base_tokens / sum base_time)``:
    the speedup of a stream that sends these prompts one after the other. The interval
    resamples prompts (each prompt's four numbers together: a paired bootstrap) with
    :func:`scipy.stats.bootstrap`, BCa method.

    Parameters
    ----------
    base_time, base_tokens, spec_time, spec_tokens : array_like, shape (n,)
        Per prompt: seconds and completion tokens of the baseline and of the other setting.
    seed : int or sequence of int
        Seed of the resampling generator (:func:`numpy.random.default_rng`).
    confidence : float
        Confidence level, in (0, 1).
    resamples : int
        Bootstrap resamples.

    Returns
    -------
    dict
        ``speedup``, ``low``, ``high``, ``prompts`` (n), ``confidence``.

    Raises
    ------
    ValueError
        Arrays of different shapes, fewer than 2 prompts, non-positive times or tokens, a
        confidence outside (0, 1).

    References
    ----------
    Efron, B. (1987). Better bootstrap confidence intervals. JASA 82(397), 171-185 (BCa).
    """
    from scipy import stats

    arrays = [np.asarray(a, dtype=float) for a in (base_time, base_tokens, spec_time,
                                                    spec_tokens)]
    names = ("base_time", "base_tokens", "spec_time", "spec_tokens")
    for a, name in zip(arrays, names):
        if a.ndim != 1 or a.shape != arrays[0].shape:
            raise ValueError(f"{name}: must be one-dimensional with one value per prompt, "
                             f"like base_time (shape {arrays[0].shape}, got {a.shape})")
        if not np.all(np.isfinite(a) & (a > 0)):
            raise ValueError(f"{name}: every value must be finite and positive")
    if arrays[0].size < 2:
        raise ValueError(f"base_time: needs at least 2 prompts (got {arrays[0].size})")
    if not (isinstance(confidence, float) and 0 < confidence < 1):
        raise ValueError(f"confidence: must be a float in (0, 1) (got {confidence!r})")
    resamples = check_int(resamples, "resamples")

    def ratio(bt, bk, st, sk, axis=-1):
        return (np.sum(sk, axis) / np.sum(st, axis)) / (np.sum(bk, axis) / np.sum(bt, axis))

    point = float(ratio(*arrays))
    if np.ptp([ratio(*(a[np.arange(a.size) != i] for a in arrays))
               for i in range(arrays[0].size)]) == 0:
        low = high = point                     # every prompt alike: nothing to resample
    else:
        res = stats.bootstrap(arrays, ratio, paired=True, vectorized=True, axis=-1,
                              confidence_level=confidence, n_resamples=resamples,
                              method="BCa", rng=np.random.default_rng(seed))
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return {"speedup": point, "low": low, "high": high, "prompts": int(arrays[0].size),
            "confidence": confidence}


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


def cpu_model(path: str | Path = "/proc/cpuinfo") -> str:
    """The processor's model name (Linux ``/proc/cpuinfo``), or ``"not reported"``."""
    try:
        for line in Path(path).read_text(errors="replace").splitlines():
            if line.lower().startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "not reported"


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
                     window=None, confidence: float = 0.95) -> dict:
    """The paired protocol on a mixed-language stream, with intervals over prompts.

    Every repeat sends the same stream (:func:`interleave_languages`: the languages take
    turns, one request in flight, request ``k`` seeded ``seed + k`` in every setting and
    repeat) to every setting in an order that rotates with the repeat; ``window``, when
    given, is one more slot in that rotation (``window(repeat)`` runs there and its result
    is kept: the pass timings of the cost model, on the same servers, in the same time
    window as the requests).

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
        ``window(repeat) -> object``, run once per repeat in the rotation.
    confidence : float
        Level of the bootstrap intervals (:func:`ratio_interval`).

    Returns
    -------
    dict
        ``requests``: one row per request (prompt index, language, repeat, setting,
        seconds, tokens, TTFT, TPOT, drafted and accepted tokens, text); ``streams``: per
        repeat and setting, wall time, tokens, throughput, acceptance and (not for the
        baseline) the paired ``speedup`` of that repeat; ``windows``: what ``window``
        returned, per repeat; ``speedup``: per setting, the mixed stream's speedup with
        its interval over prompts (per-prompt seconds: the median over repeats) and
        ``by_language`` the same per language; ``identical``: per setting, the number of
        (prompt, repeat) whose text equals the baseline's, and ``compared``.

    Raises
    ------
    ValueError
        ``baseline`` not among ``endpoints``, ``repeats`` below 1.
    """
    if baseline not in endpoints:
        raise ValueError(f"baseline: {baseline!r} is not one of the settings {sorted(endpoints)}")
    repeats = check_int(repeats, "repeats")
    stream = interleave_languages(prompts)
    sampling = cl.plain_sampling(temperature)
    specs = [cl.RequestSpec(f"{lang}-{k}", p, max_tokens, sampling, seed + k, lang)
             for k, (lang, p) in enumerate(stream)]
    names = list(endpoints)
    slots = names + (["window"] if window is not None else [])
    requests, streams, windows = [], [], []
    for r in range(repeats):
        for slot in rotation(slots, r):
            if slot == "window":
                windows.append(window(r))
                continue
            run = cl.closed_loop(endpoints[slot], specs, 1, setting=slot)
            requests += [_record_row(rec, k, r, slot) for k, rec in enumerate(run.records)]
            acc = cl.acceptance(run.records)
            streams.append({"repeat": r, "setting": slot, "wall": run.wall,
                            "tokens": sum(x.completion_tokens for x in run.records),
                            "throughput": sum(x.completion_tokens for x in run.records) / run.wall,
                            "acceptance": acc["acceptance"], "draft_n": acc["draft_n"],
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
    return {"protocol": "mixed-language stream at batch one, settings (and the cost "
                        "window) in rotating order inside every repeat; request k seeded "
                        "seed + k in every setting and repeat; intervals: BCa bootstrap "
                        "over prompts", "baseline": baseline, "repeats": repeats,
            "max_tokens": max_tokens, "temperature": float(temperature), "seed": seed,
            "prompts": {lang: len(ps) for lang, ps in prompts.items()},
            "stream": [lang for lang, _ in stream], "requests": requests, "streams": streams,
            "windows": windows, "speedup": speedup, "identical": identical,
            "distinct_4gram_share": repetition}


def window_costs(passes: Sequence[dict], gamma: int) -> dict:
    """c and g(1..gamma) of one window's pass timings, by :data:`COST_ESTIMATOR` (the
    median of the window's repeats of each pass).

    Parameters
    ----------
    passes : sequence of dict
        Rows of :func:`pass_times` with servers ``"target"`` and ``"draft"``.
    gamma : int
        Draft length: passes of 1 to ``gamma + 1`` positions on the target are needed.

    Returns
    -------
    dict
        ``target_ms`` (one-position pass), ``verify_ms`` (``gamma + 1`` positions),
        ``draft_ms``, ``c``, ``g`` (= ``g_by_gamma[-1]``), ``g_by_gamma``, and
        ``disturbance``: the largest ``median / fastest - 1`` of the three passes.

    Raises
    ------
    RuntimeError
        A needed pass was not measured.
    """
    def both(server, k):
        return _fastest_and_median(passes, server, k)

    t1_min, t1 = both("target", 1)
    tv_min, tv = both("target", gamma + 1)
    d1_min, d1 = both("draft", 1)
    g_by_gamma = [both("target", k)[1] / t1 for k in range(2, gamma + 2)]
    return {"target_ms": t1, "verify_ms": tv, "draft_ms": d1, "c": d1 / t1,
            "g": g_by_gamma[-1], "g_by_gamma": g_by_gamma,
            "disturbance": max(t1 / t1_min, tv / tv_min, d1 / d1_min) - 1.0}


def predicted_speedup(acceptance: float, c: float, g: float, gamma: int) -> float:
    """The cost model's speedup ``E / (gamma c + g)`` with ``E = 1 + gamma a``.

    Parameters
    ----------
    acceptance : float
        Accepted over drafted tokens, as the server reports it (every cycle drafts
        ``gamma``), in [0, 1].
    c, g : float
        Draft step over target step; verification pass over target step (positive).
    gamma : int
        Draft length, at least 1.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        An input out of its range.

    References
    ----------
    Leviathan, Kalman and Matias (2023), Fast inference from transformers via speculative
    decoding, section 3.4 (with a measured verification cost g in place of 1).
    """
    gamma = check_int(gamma, "gamma")
    if not (0 <= acceptance <= 1):
        raise ValueError(f"acceptance: must be in [0, 1] (got {acceptance!r})")
    if not (c > 0 and g > 0):
        raise ValueError(f"c, g: must be positive (got c={c!r}, g={g!r})")
    return (1.0 + gamma * acceptance) / (gamma * c + g)
