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
   model's inputs timed in windows spread through the paired stream, a memory-bandwidth
   baseline, and the context of every run (:func:`run_context`).

The instruments these steps use (pass timings, the sampled-text protocol, the bandwidth
baseline, the run's context) are :mod:`specbook.instruments`.

Used in Chapter 8.
"""

from __future__ import annotations

import math
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from specdec import client as cl
from specdec import decode as dec
from specdec import nn
from specdec.client import exactness as ex
from specdec.measure import idle_cores, rotation
from specbook.instruments import (COST_ESTIMATOR, HEADLINE, first_token_times, interleave_languages,
                          last_level_cache,
                          memory_bandwidth, pass_times, predicted_speedup, run_context, step_times,
                          sampled_protocol, weight_bytes, window_costs)

__all__ = ["load_engine", "rule_acceptance", "window_logits", "acceptance_from_logits",
           "pertoken_exactness", "ServedStudy",
           "run_served_study", "ScaleStudy", "run_scale_study"]


ROOT = Path(__file__).resolve().parents[1]      # the checkout the book is built from


def load_engine():
    """The book's engine tooling, ``tools/engine.py`` (builds llama.cpp's binaries from the
    pinned sources, converts the book's models to GGUF, serves them by name): build
    tooling beside the book's machinery, not part of the library."""
    from tools import engine

    return engine


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
    positions, the cap of any greedy draft under ``match`` (``cap``: ``max p``) and the
    number of positions (:func:`acceptance_from_logits` on
    :func:`window_logits` of both models).
    """
    return acceptance_from_logits(window_logits(target, texts, draft.config.context),
                                  window_logits(draft, texts, target.config.context),
                                  temperature)


def window_logits(model: nn.Transformer, texts: Sequence[str],
                  context: int | None = None) -> np.ndarray:
    """The model's next-byte logits at every position of ``texts``, shape (positions, V).

    Each text is cut into consecutive windows of ``min(model context, context)`` bytes,
    each scored from its own start; a last window of one byte predicts nothing and is
    dropped (the positions :func:`rule_acceptance` averages over)."""
    ctx = min(model.config.context, context or model.config.context)
    out = []
    for text in texts:
        tokens = nn.encode(text)
        for s in range(0, max(tokens.size - 1, 1), ctx):
            window = tokens[s:s + ctx]
            if window.size >= 2:
                out.append(model.forward(window[None])[0])
    return np.concatenate(out)


def acceptance_from_logits(target_logits: np.ndarray, draft_logits: np.ndarray,
                           temperature: float) -> dict:
    """:func:`rule_acceptance` from both models' logits at the same positions (N, V)."""
    settings = dec.SamplingSettings(temperature=temperature)
    p, q = settings.laws(target_logits), settings.laws(draft_logits)
    match = p[np.arange(len(p)), np.argmax(q, axis=1)]
    rejection = np.minimum(p, q).sum(axis=1)
    return {"temperature": temperature, "match": float(match.mean()),
            "rejection": float(rejection.mean()),
            "cap": float(p.max(axis=1).mean()),     # the best greedy draft's: p[argmax p]
            "positions": int(match.size)}


#: Seconds a per-token check's request may wait for its answer: with every slot busy a
#: request waits for the others' tokens too, and a machine that gets busy mid-check
#: slows the servers several times over; the check should then take longer, not fail.
REQUEST_TIMEOUT = 900.0


def pertoken_exactness(engine, target: str, *, draft: str = "draft", gamma: int,
                       prompts: Sequence[str], resolution: float = 0.02, max_tokens: int,
                       seed: int, slots: int = 4, threads: int = 1,
                       stop_share: float = 0.05,
                       exact_cache: bool = False, control_requests: int = 60,
                       control_top_k: int = 4, disagreement_requests: int = 8,
                       false_alarm: float = 1e-6, max_requests: int = 5000,
                       log=lambda *_: None) -> dict:
    """Per-token exactness of one target served with and without the draft, and its
    positive controls, every emitted token tested (:mod:`specdec.stats.pertoken`).

    Three llama-servers run, at most ``threads`` threads each: the target plain, the target with
    the draft (draft length ``gamma``), and the target with the draft and llama.cpp's
    synthetic acceptance (``--spec-synth-len gamma + 1``, a benchmarking option that
    accepts drafted tokens at a fixed rate whatever the target says). They have the cache
    type and attention of the timed servers (``exact_cache``) and ``slots`` slots instead
    of one, so that the passes are batched. The cores idle when the check starts
    (:func:`specdec.measure.idle_cores`, one second) set the threads per server (at most
    ``threads``: a llama.cpp server whose threads wait for processors other work holds
    stalls at every synchronisation, about half as fast with two threads on a busy
    2-core machine as with one) and how many servers take requests at a time, so that
    no server waits for a core.

    1. The per-token disagreement between the plain server's sampling laws and numpy's
       (:func:`specdec.client.tokencheck.engine_disagreement`): every check's tolerance.
    2. Seeded requests (:func:`specdec.client.tokencheck.native_responses`, temperature 1,
       no truncation; two servers' requests in flight at once, so both cores work):
       ``plain`` and ``speculative`` get as many requests as make the detectable
       per-token TV ``resolution`` at the measured tolerance
       (:func:`specdec.stats.pertoken.tokens_for`, two orderings; enough more for a share
       ``stop_share`` of positions lost to responses that stop early), at the *same*
       seeds: llama.cpp's rule consumes one
       random draw per emitted token, so where both are exact alike they emit the same
       texts (``same_text`` counts them). The ``controls``, which must fail, get
       ``control_requests`` each on seeds of their own: ``synthetic`` (the third server)
       and ``top_k`` (the plain server asked for top-k ``control_top_k`` while the
       client's law keeps every byte).
    3. The laws of every distinct text from the same weights, once
       (:func:`specdec.client.tokencheck.response_law_table`, two threads), and each
       configuration's check (:func:`specdec.client.tokencheck.model_pertoken_check`,
       its own uniforms).

    Parameters
    ----------
    engine : module
        ``tools/engine.py`` (:func:`load_engine`).
    target, draft : str
        The book's model names.
    gamma : int
        Draft length, >= 1.
    prompts : sequence of str
        Prompts, taken in turn (the chapter passes its mixed-language stream).
    resolution : float
        The per-token TV each of ``plain`` and ``speculative`` must detect (with power
        0.9 at level ``false_alarm``), in (0, 1].
    max_tokens : int
        Tokens per request (prompt plus ``max_tokens`` must fit the 128 positions of a
        slot).
    seed : int
        Request seeds: ``seed`` onwards for the plain and (the same seeds) the
        speculative server, then the controls' (disjoint), and ``seed + 2**30`` onwards
        for the disagreement's requests; each check's uniforms come from
        ``numpy.random.default_rng([seed, 1, k])``, ``k`` its index.
    slots : int
        Server slots, >= 1.
    threads : int
        Most threads of each server (``-t`` and ``-tb``), >= 1; the number used is in the
        result.
    exact_cache : bool
        Float32 KV cache and no flash attention (``tools/engine.py serve``); False keeps
        llama.cpp's defaults, as the timed servers do.
    stop_share : float
        The share of positions expected to be lost to responses that end before
        ``max_tokens``, in [0, 0.5]: padding dilutes the evidence, the detectable TV
        scaling as positions over tokens, so the requests are multiplied by
        ``1 / (1 - stop_share)**2``.
    control_requests, control_top_k, disagreement_requests : int
    false_alarm : float
        Per check, in (0, 1).
    max_requests : int
        Refuse to send more than this many requests per configuration (a measured
        tolerance close to half the resolution would ask for an endless run).

    Returns
    -------
    dict
        ``plain``, ``speculative``: :meth:`specdec.stats.pertoken.PerTokenCheck.to_dict`;
        ``controls``: ``{"synthetic": ..., "top_k": ...}`` likewise; ``disagreement``
        (``positions``, ``max_tv``, ...); ``same_text`` (``requests`` and how many
        of them gave the plain and the speculative server the same text);
        ``distinct_texts`` and ``laws_seconds`` (the numpy passes); ``greedy_match``:
        over every position of the plain server's texts, the mean probability that the
        target's sample equals the draft's arg-max (``draft``: the acceptance llama.cpp's
        rule would give this draft there) and equals the target's own arg-max (``ideal``:
        no greedy draft, however trained, is accepted more often), with ``positions``;
        ``synthetic_flag``, ``control_top_k``,
        ``server_args`` (per configuration), ``target``, ``draft``, ``gamma``,
        ``slots``, ``threads``, ``exact_cache``, ``resolution``, ``requests`` (of each of ``plain``
        and ``speculative``; the controls get ``control_requests``),
        ``max_tokens``, ``seconds``.

    Raises
    ------
    ValueError
        A non-positive ``control_requests``, ``gamma``, ``slots``, ``threads`` or
        ``max_tokens``; a
        ``resolution`` outside (0, 1] or at most twice the measured tolerance; no prompts.
    specdec.client.ClientError, EngineError
        A request failed, a server did not start.

    Source: the randomised probability integral transform (Rosenblatt 1952; Diebold,
    Gunther and Tay 1998, sec. 2) with Holm's procedure over orderings; see
    :mod:`specdec.stats.pertoken`.
    """
    from concurrent.futures import ThreadPoolExecutor

    from specdec.client import tokencheck as tc

    from specdec.laws import check_real
    from specdec.stats.pertoken import tokens_for

    for name, value in (("max_tokens", max_tokens), ("control_requests", control_requests),
                        ("gamma", gamma), ("slots", slots), ("threads", threads),
                        ("control_top_k", control_top_k),
                        ("disagreement_requests", disagreement_requests)):
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise ValueError(f"{name}: must be an integer >= 1 (got {value!r})")
    # the requests' own rules (prompts, seed >= 0), before any server starts
    tc._check_request_args(prompts, 1, max_tokens, 1.0, seed)
    if isinstance(seed, bool) or seed >= 2 ** 31:
        raise ValueError(f"seed: must be an integer in [0, 2**31) (got {seed!r})")
    if not (isinstance(max_requests, int) and max_requests >= 1):
        raise ValueError(f"max_requests: must be an integer >= 1 (got {max_requests!r})")
    context = min(nn.load_model(target).config.context, nn.load_model(draft).config.context)
    longest = max(len(x.encode("utf-8")) for x in prompts)
    if longest + max_tokens + gamma > context:
        raise ValueError(f"max_tokens: the longest prompt ({longest} bytes) plus max_tokens "
                         f"({max_tokens}) plus gamma ({gamma}) must fit the models' context "
                         f"of {context} positions")
    for name, value, interval in (("resolution", resolution, "(0, 1]"),
                                  ("false_alarm", false_alarm, "(0, 1)"),
                                  ("stop_share", stop_share, "[0, 1]")):
        if isinstance(value, (bool, str)):
            raise ValueError(f"{name}: must be a real number in {interval} (got {value!r})")
        check_real(value, name, interval)
    if stop_share > 0.5:
        raise ValueError(f"stop_share: must be in [0, 0.5] (got {stop_share!r})")
    t0 = time.perf_counter()
    settings = dec.SamplingSettings(temperature=1.0)
    p_model, q_model = nn.load_model(target), nn.load_model(draft)
    synth_flag = ("--spec-synth-len", str(gamma + 1))
    free = max(1, round(idle_cores()))
    threads = min(threads, free)                  # what the idle cores hold
    busy = max(1, free // threads)                # servers taking requests at a time
    common = dict(parallel=slots, threads=threads, exact_cache=exact_cache, log=log)
    with engine.serve(target, **common) as base, \
            engine.serve(target, draft, gamma, **common) as spec, \
            engine.serve(target, draft, gamma, extra=synth_flag, **common) as bad:
        measured = tc.engine_disagreement(cl.Endpoint(base.url), prompts, p_model, settings,
                                          requests=disagreement_requests, max_tokens=40,
                                          seed=seed + 2 ** 30)   # seeds no check tests
        # two orderings (target, draft over target), a mean and a KS test each
        need = tokens_for(resolution, false_alarm=false_alarm, orderings=4,
                          tolerance=measured["max_tv"])
        requests = math.ceil(need / (1.0 - stop_share) ** 2 / max_tokens)
        if requests > max_requests:
            raise ValueError(f"resolution: {resolution:g} at the measured tolerance "
                             f"{measured['max_tv']:.3g} needs {requests:,} requests per "
                             f"server, more than max_requests ({max_requests:,})")
        # plain and speculative at the same seeds: llama.cpp's rule consumes one random
        # draw per emitted token, so the texts coincide where the two are exact alike, and
        # each distinct text's laws are computed once; the controls on seeds of their own
        jobs = {"speculative": (spec, requests, 0, None),     # the longest first
                "plain": (base, requests, 0, None),
                "synthetic": (bad, control_requests, requests, None),
                "top_k": (base, control_requests, requests + control_requests,
                          {"top_k": control_top_k})}

        def fetch(name):
            server, n, offset, fields = jobs[name]
            t = time.perf_counter()
            # a long timeout: a machine that gets busy mid-check slows it, never fails it
            got = tc.native_responses(cl.Endpoint(server.url, timeout=REQUEST_TIMEOUT),
                                      prompts, n,
                                      max_tokens=max_tokens, temperature=1.0,
                                      seed=seed + offset, concurrency=slots,
                                      extra=fields or {})
            return got, time.perf_counter() - t

        with ThreadPoolExecutor(max_workers=busy) as pool:
            fetched = dict(zip(jobs, pool.map(fetch, jobs)))
        t_laws = time.perf_counter()
        table = tc.response_law_table([r for got, _ in fetched.values() for r in got],
                                      p_model, q_model, settings=settings,
                                      max_tokens=max_tokens, workers=2)
        laws_seconds = time.perf_counter() - t_laws
        checks = {}
        for k, (name, (server, n, offset, fields)) in enumerate(jobs.items()):
            got, secs = fetched[name]
            checks[name] = tc.model_pertoken_check(
                got, p_model, q_model, settings=settings, max_tokens=max_tokens,
                rng=np.random.default_rng([seed, 1, k]), false_alarm=false_alarm,
                tolerance=measured["max_tv"], table=table,
                extra={"endpoint": server.url, "seed": seed + offset,
                       "request_fields": dict(fields or {}), "requests_seconds": secs})
        same = sum(a.tokens == b.tokens for a, b in zip(fetched["plain"][0],
                                                        fetched["speculative"][0]))
        # llama.cpp's rule on the plain server's texts: a greedy draft token is accepted
        # when the target's sample equals it, with probability p(argmax q); no draft can
        # do better than p's own arg-max, max p (an ideal greedy draft)
        match, ideal = [], []
        for r in fetched["plain"][0]:
            pl, ql = table[(r.prompt, tuple(int(t) for t in r.tokens))]
            if len(pl):
                match.append(pl[np.arange(len(pl)), np.argmax(ql, axis=1)])
                ideal.append(pl.max(axis=1))
        match, ideal = np.concatenate(match), np.concatenate(ideal)
        server_args = {"plain": list(base.args[1:]), "speculative": list(spec.args[1:]),
                       "synthetic": list(bad.args[1:])}
    return {"plain": checks["plain"].to_dict(), "speculative": checks["speculative"].to_dict(),
            "controls": {"synthetic": checks["synthetic"].to_dict(),
                         "top_k": checks["top_k"].to_dict()},
            "disagreement": measured, "synthetic_flag": " ".join(synth_flag),
            "control_top_k": control_top_k, "server_args": server_args, "target": target,
            "draft": draft, "gamma": gamma, "slots": slots, "threads": threads,
            "servers_at_once": busy, "idle_cores": free, "exact_cache": exact_cache,
            "resolution": float(resolution), "requests": requests, "max_tokens": max_tokens,
            "same_text": {"requests": requests, "identical": int(same)},
            "greedy_match": {"positions": int(match.size), "draft": float(match.mean()),
                             "ideal": float(ideal.mean())},
            "distinct_texts": len(table), "laws_seconds": laws_seconds,
            "seconds": time.perf_counter() - t0}


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
        # disjoint seeds: with one draw per emitted token, same seeds would give both
        # servers the same text and a two-sample test that passes by construction
        for offset, (name, server) in enumerate((("baseline", base), ("speculative", spec))):
            draws[name] = ex.first_tokens(cl.Endpoint(server.url), exact_prompt, exact_trials,
                                          seed=seed + offset * exact_trials,
                                          pad=engine.EOS_BYTE, generate=gamma + 4)
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
                                    seed=seed + 2 * exact_trials, pad=engine.EOS_BYTE,
                                    generate=gamma + 4)
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


@dataclass(frozen=True)
class ScaleStudy:
    """Speculation against the target's weight size on llama-server (see
    :func:`run_scale_study`)."""

    targets: list
    passes: list
    steps: list
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
                    cost_steps: int = 16,
                    bandwidth_megabytes: int = 256,
                    concurrency_target: str = "target_large",
                    concurrencies: Sequence[int] = (1, 2, 4), concurrency_repeats: int = 5,
                    concurrency_prompts_per_language: int = 2,
                    log=lambda *_: None) -> ScaleStudy:
    """The served protocol for targets of growing weight size, with the cost model timed
    in the same windows.

    For every target: a plain and a speculative llama-server (the book's draft, draft
    length ``gamma``, one slot, one thread) and the draft served alone. Each of
    ``repeats`` repeats runs the mixed-language stream on the plain and the speculative
    server, interleaved request by request (:func:`sampled_protocol`:
    ``prompts_per_language`` held-out prompts per language at ``temperature``, seeded, one
    request in flight), and a *cost window* spread through the same stream:
    ``cost_repeats`` rounds, one every ``1 / cost_repeats`` of the stream, each of
    :func:`step_times` (``cost_steps`` decoding steps inside a generation on the plain
    server and on the draft alone) and :func:`pass_times` (one to ``gamma + 1`` new
    positions on the plain server), in CPU time of each server's decoding thread, with a
    one-token request to both
    servers (:func:`first_token_times`, a stream prompt half a stream away from the next
    request, tagged with its language), and a :func:`memory_bandwidth` baseline at the
    first. From each repeat's window (estimator :data:`COST_ESTIMATOR`, fixed before the
    run, :func:`window_costs`):

    * ``c``: the draft's step over the target's;
    * ``g``: a verification of ``gamma + 1`` positions (a step plus what the further
      positions add to a pass) over the target's step, and ``g_by_gamma`` for every draft
      length from 1 to ``gamma``;
    * the cost model's speedup per request of ``max_tokens`` tokens
      (:func:`predicted_speedup` with the target's step and both servers' median time to
      first token, all three wall times, the clock the requests are timed on: a group's
      own times to first token for a language; ``predicted_decode`` is the per-step
      ``E / (gamma c + g)`` alone) with
      ``E = 1 + gamma a``, ``a`` the acceptance the server reported in the same repeat;
      beside the stream's measured speedup in that repeat, and their relative error;
    * the same from the wall-time medians (``c_wall``, ``g_wall``, ``error_wall``), and
      the share of the passes' wall time that was not CPU time (``waiting``).

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
        ``passes`` and ``steps``: every pass and step time (with ``target`` and
        ``window``); ``paired``: the
        protocol's output per target (without its cost windows, which are in
        ``windows`` of the metadata); ``concurrency``: rows per concurrency;
        ``metadata`` (with ``windows``: per target and repeat, c, g, bandwidth,
        prediction, measurement and error; and ``context``, :func:`run_context`);
        ``seconds``.
    """
    if not (isinstance(gamma, int) and gamma >= 1):
        raise ValueError(f"gamma: must be an integer >= 1 (got {gamma!r})")
    stream_length = len(languages) * prompts_per_language
    if not (isinstance(cost_repeats, int) and 1 <= cost_repeats <= stream_length):
        raise ValueError(f"cost_repeats: must be an integer from 1 to the {stream_length} "
                         f"requests of the stream (got {cost_repeats!r})")
    if not (isinstance(cost_steps, int) and cost_steps >= 1):
        raise ValueError(f"cost_steps: must be an integer >= 1 (got {cost_steps!r})")
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
    stream = interleave_languages(prompts)
    text = held["en"]["text"]
    ascii_text = "".join(ch for ch in text if ch.isascii() and ch.isprintable())
    prefix, continuation = ascii_text[:48], ascii_text[48:48 + gamma + 1]
    rows, passes, step_rows, paired_out, models, windows, servers = [], [], [], {}, {}, [], {}
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

            pids = {"target": base.pid, "draft": alone.pid}

            def window(r, part, name=name, cost_eps=cost_eps, pids=pids, eps=eps):
                k = r * cost_repeats + part
                got = pass_times({"target": cost_eps["target"]}, prefix, continuation,
                                 tuple(range(1, gamma + 2)), 1, pids={"target": pids["target"]},
                                 offset=k)
                steps = step_times(cost_eps, prefix, cost_steps, 1, pids=pids, offset=k)
                # the time to first token of a stream prompt half a stream away from the
                # request that follows the window (not the same prompt: that request
                # would find it in the slot's cache), with a seed no stream request has
                n = len(stream)
                lang, prompt = stream[(round(part * n / cost_repeats) + n // 2) % n]
                ttft = first_token_times(eps, prompt, temperature, seed + n + k, k)
                out = {"passes": [dict(x, target=name, window=r) for x in got],
                       "steps": [dict(x, target=name, window=r) for x in steps],
                       "ttft": [dict(x, language=lang) for x in ttft]}
                if part == 0:                       # one bandwidth baseline per repeat
                    out["bandwidth"] = memory_bandwidth(megabytes=bandwidth_megabytes,
                                                        repeats=3)
                return out

            out = sampled_protocol(eps, prompts, baseline="baseline", repeats=repeats,
                                   max_tokens=max_tokens, temperature=temperature,
                                   seed=seed, window=window, window_parts=cost_repeats)
            servers.update({f"{name}, plain": base.args[1:],
                            f"{name}, with the draft": spec.args[1:],
                            f"draft alone, beside {name}": alone.args[1:]})
        by_repeat = [{"passes": [x for part in parts for x in part["passes"]],
                      "steps": [x for part in parts for x in part["steps"]],
                      "ttft": [x for part in parts for x in part["ttft"]],
                      "bandwidth": parts[0]["bandwidth"]} for parts in out["windows"]]
        got = [x for w in by_repeat for x in w["passes"]]
        got_steps = [x for w in by_repeat for x in w["steps"]]
        passes += got
        step_rows += got_steps
        spec_streams = {s["repeat"]: s for s in out["streams"] if s["setting"] == "speculative"}

        def model(acceptance, cost, ttft, group="mixed"):
            """The cost model per request (c and g from the window's clock) and per
            decoding step, and per request with the wall-time passes; the times to first
            token of ``group``'s prompts (all of them for the mixed stream, or when the
            windows timed none of the group's)."""
            mine = [x for x in ttft if x["language"] == group]
            if group == "mixed" or {x["setting"] for x in mine} != {"baseline", "speculative"}:
                mine = ttft
            first = {k: float(np.median([x["ms"] for x in mine if x["setting"] == k]))
                     for k in ("baseline", "speculative")}
            # absolute times on one clock, the wall clock the requests are timed on (the
            # step and the times to first token); c and g are ratios on the window's clock
            per_request = dict(step_ms=cost["target_wall_ms"], ttft_ms=first["baseline"],
                               spec_ttft_ms=first["speculative"], tokens=max_tokens)
            return {"predicted_speedup": predicted_speedup(
                        acceptance, cost["c"], cost["g"], gamma, **per_request),
                    "predicted_decode": predicted_speedup(acceptance, cost["c"], cost["g"],
                                                          gamma),
                    "predicted_speedup_wall": predicted_speedup(
                        acceptance, cost["c_wall"], cost["g_wall"], gamma, **per_request),
                    "ttft_ms": first["baseline"], "spec_ttft_ms": first["speculative"]}

        for r, w in enumerate(by_repeat):
            cost_r = window_costs(w["passes"], w["steps"], gamma)
            s = spec_streams[r]
            m = model(s["acceptance"], cost_r, w["ttft"])
            windows.append({"target": name, "repeat": r, **cost_r, **m,
                            "bandwidth": w["bandwidth"], "acceptance": s["acceptance"],
                            "speedup": s["speedup"],
                            "error": m["predicted_speedup"] / s["speedup"] - 1.0,
                            "error_wall": m["predicted_speedup_wall"] / s["speedup"] - 1.0,
                            "error_decode": m["predicted_decode"] / s["speedup"] - 1.0,
                            "achieved_gbs": models[name]["weight_bytes"]
                            / cost_r["target_wall_ms"] / 1e6})
        pooled = window_costs(got, got_steps, gamma)
        all_ttft = [x for w in by_repeat for x in w["ttft"]]
        mine = [w for w in windows if w["target"] == name]
        read_gbs = float(np.median([w["bandwidth"]["read_gbs_median"] for w in mine]))
        base_rows = [x for x in out["requests"] if x["setting"] == "baseline"]
        for group, res in out["speedup"]["speculative"].items():
            which = [x for x in base_rows if group == "mixed" or x["language"] == group]
            base_tp = sum(x["tokens"] for x in which) / sum(x["seconds"] for x in which)
            m = model(res["acceptance"], pooled, all_ttft, group)
            rows.append({"target": name, "language": group, "gamma": gamma,
                         "temperature": float(temperature), **models[name],
                         "target_step_ms": pooled["target_wall_ms"],
                         "target_step_cpu_ms": pooled["target_ms"],
                         "verify_ms": pooled["verify_wall_ms"],
                         "draft_step_ms": pooled["draft_wall_ms"],
                         "disturbance": pooled["disturbance"], "waiting": pooled["waiting"],
                         "clock": pooled["clock"], "c": pooled["c"],
                         "g": pooled["g"], "g_by_gamma": pooled["g_by_gamma"],
                         "c_wall": pooled["c_wall"], "g_wall": pooled["g_wall"],
                         **m,
                         "error_wall": m["predicted_speedup_wall"] / res["speedup"] - 1.0,
                         "error_decode": m["predicted_decode"] / res["speedup"] - 1.0,
                         "acceptance": res["acceptance"], "E": 1.0 + gamma * res["acceptance"],
                         "speedup": res["speedup"],
                         "speedup_low": res["low"], "speedup_high": res["high"],
                         "prompts": res["prompts"],
                         "error": m["predicted_speedup"] / res["speedup"] - 1.0,
                         "baseline_throughput": base_tp,
                         "distinct_4gram_share": out["distinct_4gram_share"][group],
                         "achieved_gbs": models[name]["weight_bytes"] / pooled["target_wall_ms"]
                         / 1e6,
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
            "repeats": repeats, "cost_repeats": cost_repeats, "cost_steps": cost_steps,
            "cost_estimator": COST_ESTIMATOR, "headline": HEADLINE, "seed": seed,
            "prompts_per_language": prompts_per_language, "models": models,
            "draft": {"parameters": draft.n_parameters, "weight_bytes": weight_bytes(draft)},
            "concurrency_target": concurrency_target, "concurrencies": list(concurrencies),
            "concurrency_repeats": concurrency_repeats,
            "concurrency_prompts_per_language": concurrency_prompts_per_language,
            "cost_prefix_bytes": len(prefix), "last_level_cache_bytes": last_level_cache(),
            "windows": windows, "context": run_context(engine, servers)}
    return ScaleStudy(targets=rows, passes=passes, steps=step_rows, paired=paired_out, concurrency=conc_rows,
                      metadata=meta, seconds=time.perf_counter() - t0)
