"""Chapter 8's served study: the protocol run against a real engine, llama.cpp's server.

The book's use of :mod:`specdec.client` on ``llama-server`` serving the book's models
(built, converted and started by ``tools/engine.py``, loaded by :func:`load_engine`):

1. exactness first, black box: the law of the first two bytes after a prompt, with and
   without the draft, against the exact law of the same weights; the two samples against
   each other; the same-seed identity of the texts; and a non-exact setting (llama.cpp's
   synthetic acceptance, a benchmarking option) that the check must reject;
2. the paired, interleaved protocol, baseline against draft, per language, at
   temperatures 0 and 1;
3. an open-loop request-rate sweep (Poisson arrivals) with goodput under TTFT/TPOT limits;
4. the server's reported acceptance beside the acceptance of its rule (greedy draft,
   accept while the target's sample equals the draft token) and of the rejection rule,
   computed exactly from the same models along held-out text (:func:`rule_acceptance`).

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


def run_served_study(*, seed: int = 2026, gamma: int = 3, prompts_per_language: int = 3,
                     max_tokens: int = 48, repeats: int = 3,
                     temperatures: Sequence[float] = (0.0, 1.0), exact_trials: int = 1000,
                     identity_requests: int = 24, rates: Sequence[float] = (10, 40, 160),
                     rate_requests: int = 32, slots: int = 4, ttft_max: float = 0.05,
                     tpot_max: float = 0.002, log=lambda *_: None) -> ServedStudy:
    """Run the served study (about 30 s on an idle 2-core machine once the engine is built).

    Parameters
    ----------
    seed : int
        Request seeds start here (request k of a batch gets ``seed + k``).
    gamma : int
        Draft length of the speculative server (``--spec-draft-n-max``).
    prompts_per_language, max_tokens, repeats : int
        The paired protocol's requests per language, tokens per request, repeats.
    temperatures : sequence of float
        Sampling temperatures of the paired protocol (all truncation off).
    exact_trials, identity_requests : int
        Seeded requests per setting for the law of the first two bytes; requests of 32
        bytes for the same-seed identity.
    rates, rate_requests, slots : the open-loop sweep (requests/s, requests per rate,
        server slots).
    ttft_max, tpot_max : float
        Goodput limits, seconds.
    """
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
    paired, rate_rows = {}, []
    with engine.serve("target", parallel=slots, log=log) as base, \
            engine.serve("target", "draft", gamma, parallel=slots, log=log) as spec:
        endpoints = {"baseline": cl.Endpoint(base.url), "speculative": cl.Endpoint(spec.url)}
        lengths = cl.prompt_lengths(endpoints["baseline"], prompts)
        for temp in temperatures:
            paired[f"{temp:g}"] = cl.paired(endpoints, prompts, baseline="baseline",
                                            repeats=repeats, max_tokens=max_tokens,
                                            sampling=cl.plain_sampling(temp), seed=seed)
        mixed = [p for k in range(prompts_per_language) for ps in prompts.values()
                 for p in ps[k:k + 1]]
        specs = [cl.RequestSpec(f"rate-{k}", mixed[k % len(mixed)], max_tokens,
                                cl.plain_sampling(1.0), seed + k) for k in range(rate_requests)]
        for i, rate in enumerate(rates):
            for name in rotation(list(endpoints), i):
                run = cl.open_loop(endpoints[name], specs, rate, 1.0, rng=[seed, i],
                                   setting=name)
                rate_rows.append({"rate": rate, **cl.summarize_run(
                    run, ttft_max=ttft_max, tpot_max=tpot_max)})
        server_args = {"baseline": list(base.args[1:]), "speculative": list(spec.args[1:])}
    texts = [held[lang]["text"][:600] for lang in nn.LANGUAGES]
    acceptance = [rule_acceptance(target, draft, texts, t) for t in temperatures]
    meta = {"engine": _version(binary, engine), "llama_cpp_python": engine.LLAMA_CPP_PYTHON,
            "sdist_sha256": engine.SDIST_SHA256, "build_key": engine.build_key(),
            "gamma": gamma, "slots": slots, "threads": 1, "max_tokens": max_tokens,
            "repeats": repeats, "seed": seed, "prompt_lengths": lengths,
            "server_args": server_args, "ttft_max": ttft_max, "tpot_max": tpot_max,
            "rates": list(rates), "rate_requests": rate_requests}
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
                    gamma: int = 4, temperature: float = 0.0,
                    languages: Sequence[str] = nn.LANGUAGES, prompts_per_language: int = 2,
                    max_tokens: int = 64, repeats: int = 3, cost_repeats: int = 12,
                    concurrency_target: str = "target_large",
                    concurrencies: Sequence[int] = (1, 2, 4), concurrency_repeats: int = 2,
                    log=lambda *_: None) -> ScaleStudy:
    """The served protocol for targets of growing weight size, with the cost model.

    For every target: a plain and a speculative llama-server (the book's draft, draft
    length ``gamma``, one slot, one thread); the paired, interleaved protocol per language
    at ``temperature`` (:func:`specdec.client.paired`); and, interleaved with the draft
    served alone, the engine's own time of a one-position pass and of a
    ``gamma + 1``-position pass (:func:`pass_times`), which give

    * ``c``: the draft's one-position pass over the target's (fastest repeats; the
      medians are ``c_median``);
    * ``g``: the target's ``gamma + 1``-position pass over its one-position pass (fastest
      repeats; ``g_median``), and ``g_by_gamma``, the same ratio for every draft length
      from 1 to ``gamma`` (a list: passes of 2 to ``gamma + 1`` positions);
    * ``E``: tokens per target pass, ``1 + gamma * a`` with ``a`` the acceptance the server
      reports (accepted over drafted bytes: every cycle drafts ``gamma`` bytes);
    * the cost model's speedup ``E / (gamma c + g)`` (Leviathan et al. 2023, section 3.4,
      with a measured verification cost ``g`` in place of 1), beside the measured median
      paired speedup and its interquartile range.

    Then ``concurrency_target`` is run at each of ``concurrencies`` requests in flight
    (closed loop, as many slots, prompts of all languages mixed), plain against
    speculative, paired: the gain as the batch grows.

    Returns
    -------
    ScaleStudy
        ``targets``: one row per target and language; ``passes``: every pass time;
        ``paired``: the protocol's output per target; ``concurrency``: rows per
        concurrency; ``metadata``; ``seconds``.
    """
    if not (isinstance(gamma, int) and gamma >= 1):
        raise ValueError(f"gamma: must be an integer >= 1 (got {gamma!r})")
    t0 = time.perf_counter()
    engine = load_engine()
    engine.build(log=log)
    held = nn.load_heldout()
    prompts = {lang: held[lang]["prompts"][:prompts_per_language] for lang in languages}
    text = held["en"]["text"]
    ascii_text = "".join(ch for ch in text if ch.isascii() and ch.isprintable())
    prefix, continuation = ascii_text[:48], ascii_text[48:48 + gamma + 1]
    sampling = cl.plain_sampling(temperature)
    rows, passes, paired_out, models = [], [], {}, {}
    draft = nn.load_model("draft")
    for name in targets:
        model = nn.load_model(name)
        models[name] = {"parameters": model.n_parameters, "layers": model.config.n_layers,
                        "d_model": model.config.d_model, "weight_bytes": weight_bytes(model)}
        with engine.serve(name, log=log) as base, \
                engine.serve(name, "draft", gamma, log=log) as spec, \
                engine.serve("draft", log=log) as alone:
            eps = {"baseline": cl.Endpoint(base.url), "speculative": cl.Endpoint(spec.url)}
            got = pass_times({"target": eps["baseline"], "draft": cl.Endpoint(alone.url)},
                             prefix, continuation, tuple(range(1, gamma + 2)), cost_repeats)
            passes += [dict(x, target=name) for x in got]
            paired_out[name] = cl.paired(eps, prompts, baseline="baseline", repeats=repeats,
                                         max_tokens=max_tokens, sampling=sampling, seed=seed)
        t1, t1_med = _fastest_and_median(got, "target", 1)
        tv, tv_med = _fastest_and_median(got, "target", gamma + 1)
        d1, d1_med = _fastest_and_median(got, "draft", 1)
        # the fastest repeat: the pass's own cost without other processes' interference
        # (medians kept beside it); measured here, it predicts the large target's paired
        # speedups where medians taken on a busy machine did not
        g_by_gamma = [_fastest_and_median(got, "target", k)[0] / t1      # gamma = k - 1
                      for k in range(2, gamma + 2)]
        c, g = d1 / t1, g_by_gamma[-1]                                  # = tv / t1
        for row in paired_out[name]["rows"]:
            if row["setting"] != "speculative":
                continue
            e = 1.0 + gamma * row["acceptance"]
            rows.append({"target": name, "language": row["language"], "gamma": gamma,
                         "temperature": temperature, **models[name],
                         "target_pass_ms": t1_med, "target_pass_ms_fastest": t1,
                         "verify_pass_ms": tv_med, "draft_pass_ms": d1_med,
                         "disturbance": max(t1_med / t1, tv_med / tv, d1_med / d1) - 1.0,
                         "c": c, "g": g, "g_by_gamma": g_by_gamma, "c_median": d1_med / t1_med,
                         "g_median": tv_med / t1_med, "acceptance": row["acceptance"], "E": e,
                         "predicted_speedup": e / (gamma * c + g),
                         "speedup": row["speedup"], "speedup_q1": row["speedup_q1"],
                         "speedup_q3": row["speedup_q3"], "speedup_iqr": row["speedup_iqr"],
                         "baseline_throughput": next(
                             r["output_throughput"] for r in paired_out[name]["rows"]
                             if r["language"] == row["language"] and r["setting"] == "baseline"),
                         "throughput": row["output_throughput"]})
    conc_rows = []
    if concurrency_target:
        mixed = [p for k in range(prompts_per_language) for lang in languages
                 for p in prompts[lang][k:k + 1]]
        need = max(concurrencies)
        mixed = (mixed * (need // len(mixed) + 2))[:max(need * 2, len(mixed))]
        with engine.serve(concurrency_target, parallel=need, log=log) as base, \
                engine.serve(concurrency_target, "draft", gamma, parallel=need,
                             log=log) as spec:
            eps = {"baseline": cl.Endpoint(base.url), "speculative": cl.Endpoint(spec.url)}
            for n in concurrencies:
                out = cl.paired(eps, {"mixed": mixed}, baseline="baseline",
                                repeats=concurrency_repeats, max_tokens=max_tokens,
                                sampling=sampling, seed=seed, concurrency=n)
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
            "temperature": temperature, "threads": 1, "max_tokens": max_tokens,
            "repeats": repeats, "cost_repeats": cost_repeats, "seed": seed,
            "prompts_per_language": prompts_per_language, "models": models,
            "draft": {"parameters": draft.n_parameters, "weight_bytes": weight_bytes(draft)},
            "concurrency_target": concurrency_target, "concurrencies": list(concurrencies),
            "concurrency_repeats": concurrency_repeats,
            "cost_prefix_bytes": len(prefix), "last_level_cache_bytes": last_level_cache()}
    return ScaleStudy(targets=rows, passes=passes, paired=paired_out, concurrency=conc_rows,
                      metadata=meta, seconds=time.perf_counter() - t0)
