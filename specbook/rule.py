"""Does the exact rule pay on this CPU? The book's decoder with and without a draft.

Chapter 8 measures llama.cpp's server, whose matching rule (a greedy draft, kept while the
target's own sample equals it) caps acceptance at the target's top-token probability
(Appendix E); on sampled text at temperature 1 it is slower than plain decoding. This
module measures the rule with room, on the book's numpy decoder (:mod:`specdec.decode`,
KV cache): exact speculative sampling (a sampled draft, accepted with ``min(1, p/q)``,
recovered from the residual; :func:`specdec.decode.speculative`) against the same decoder
without the draft (:func:`specdec.decode.autoregressive`), on the large target.

* :func:`measure_rule`: the book-grade measurement of one configuration (draft, gamma,
  temperature): the per-token exactness check of the decoder's tokens first
  (:func:`decoder_exactness`), then the paired, interleaved timing
  (:func:`paired_decoder_run`) with a BCa interval over prompts
  (:func:`specdec.stats.ratio_interval`), the decoder's own ``c`` and ``g`` measured in
  situ and the cost model's prediction ``E / (g + c gamma)`` with the measured ``E``
  (:func:`specdec.cost.cycle_cost`).
  ``benchmarks/bench_rule.py`` (``make bench``) and Appendix F call it.
* :func:`acceptance_by_language`: the exact expected acceptance per position of both
  rules, per language, along the held-out text (:func:`specbook.served.rule_acceptance`).
* :func:`decoder_bandwidth`: the decoder's time per step against the bytes of weights a
  step reads, and the machine's measured read bandwidth
  (:func:`specbook.instruments.memory_bandwidth`).

Headline, fixed before any run (:data:`HEADLINE`): the speedup of the mixed-language
stream (the held-out prompts, languages taking turns, one request at a time: batch one)
at temperature 1 and gamma 4 with today's draft (the server's draft, so that only the rule
differs from chapter 8's run), against break-even (1.0), with a 95% paired bootstrap
interval over prompts.

Used in Appendix F and by ``benchmarks/bench_rule.py``.
"""

from __future__ import annotations

import math
import os
import time
from typing import Callable, Sequence

import numpy as np

from specdec import cost
from specdec import decode as dec
from specdec import nn
from specdec.laws import check_int
from specdec.measure import limit_blas_threads
from specdec.stats import ratio_interval
from specbook.instruments import (interleave_languages, memory_bandwidth,
                                  weight_bytes)

__all__ = ["HEADLINE", "DRAFTS", "rule_stream", "paired_decoder_run", "decoder_costs",
           "decoder_exactness", "measure_rule", "acceptance_by_language",
           "decoder_bandwidth", "break_even", "verdict",
           "against_break_even", "break_even_text"]

#: The headline, fixed before any run: the configuration whose speedup answers the question.
HEADLINE = {"target": "target_large", "draft": "draft", "gamma": 4, "temperature": 1.0,
            "stream": "mixed", "batch": 1, "break_even": 1.0, "confidence": 0.95}

#: The drafts measured: today's (trained on the corpus) and the one distilled on the large
#: target's own samples (``tools/train_models.py``, ``DISTILL``).
DRAFTS = ("draft", "draft_distilled")


def _positive_int(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name}: must be an integer >= {low} (got {value!r})")
    return int(value)


def _temperature(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or not math.isfinite(value):
        raise ValueError(f"temperature: must be a finite number > 0 (got {value!r})")
    return float(value)


def rule_stream(prompts_per_language: int,
                languages: Sequence[str] = nn.LANGUAGES) -> list[tuple[str, str]]:
    """The mixed-language stream of chapter 8: ``(language, prompt)`` pairs, languages
    taking turns (:func:`specbook.instruments.interleave_languages` on the held-out
    prompts, the first ``prompts_per_language`` of each language).

    Raises
    ------
    ValueError
        ``prompts_per_language`` not an integer >= 1, or an unknown language.
    """
    prompts_per_language = _positive_int("prompts_per_language", prompts_per_language)
    held = nn.load_heldout()
    unknown = [lang for lang in languages if lang not in held]
    if unknown:
        raise ValueError(f"languages: {unknown} not among the held-out languages {sorted(held)}")
    return interleave_languages({lang: held[lang]["prompts"][:prompts_per_language]
                                 for lang in languages})


def paired_decoder_run(target: nn.Transformer, draft: nn.Transformer,
                       pairs: Sequence[tuple[str, str]], *, gamma: int, temperature: float,
                       repeats: int, max_new_tokens: int, seed,
                       log: Callable[[str], None] = lambda *_: None) -> dict:
    """Time the decoder with and without the draft on every prompt, paired and interleaved.

    Every prompt is decoded by both settings in every repeat, in an order that alternates
    with the prompt and the repeat; request ``(k, r)`` is seeded ``[*seed, k, r]`` in both
    settings (a fresh :func:`numpy.random.default_rng`). Tokens per request are fixed (no
    early stop), so a speedup is a ratio of times. Time spent inside the models' forward
    passes is taken from each result's ``pass_seconds`` (in situ).

    Parameters
    ----------
    target, draft : specdec.nn.Transformer
    pairs : sequence of (str, str)
        ``(language, prompt)``, e.g. :func:`rule_stream`.
    gamma, repeats, max_new_tokens : int
        At least 1.
    temperature : float
        > 0, no truncation, the same for both models.
    seed : int or sequence of int
    log : callable
        Receives one progress line per repeat.

    Returns
    -------
    dict
        ``languages`` (per prompt); ``seconds``: ``{"plain": array, "spec": array}`` of
        shape (prompts,), seconds summed over the repeats; ``tokens`` (per prompt, over the
        repeats); ``accepted``, ``proposed``, ``cycles`` (per prompt, speculative);
        ``passes``: in-situ seconds and counts of the plain decoder's target steps
        (``step_seconds``, ``steps``), the speculative decoder's verification passes
        (``verify_seconds``, ``verifications``) and draft steps (``draft_seconds``,
        ``draft_steps``).

    Raises
    ------
    ValueError
        An argument out of its range, fewer than 2 prompts.
    """
    gamma = _positive_int("gamma", gamma)
    repeats = _positive_int("repeats", repeats)
    max_new_tokens = _positive_int("max_new_tokens", max_new_tokens)
    temperature = _temperature(temperature)
    pairs = list(pairs)
    if len(pairs) < 2:
        raise ValueError(f"pairs: need at least 2 prompts for an interval (got {len(pairs)})")
    seed = list(np.atleast_1d(seed).tolist())
    settings = dec.SamplingSettings(temperature=temperature)
    n = len(pairs)
    seconds = {"plain": np.zeros(n), "spec": np.zeros(n)}
    accepted, proposed, cycles = np.zeros(n, int), np.zeros(n, int), np.zeros(n, int)
    passes = dict.fromkeys(("step_seconds", "steps", "verify_seconds", "verifications",
                            "draft_seconds", "draft_steps"), 0)
    t0 = time.perf_counter()
    for r in range(repeats):
        for k, (_, prompt) in enumerate(pairs):
            order = ("plain", "spec") if (k + r) % 2 == 0 else ("spec", "plain")
            for name in order:
                rng = np.random.default_rng([*seed, k, r])
                start = time.perf_counter()
                if name == "plain":
                    out = dec.autoregressive(target, [prompt], max_new_tokens, rng, settings)
                else:
                    out = dec.speculative(target, draft, [prompt], max_new_tokens, gamma,
                                          rng, settings)
                seconds[name][k] += time.perf_counter() - start
                ps = out.pass_seconds
                if name == "plain":
                    passes["step_seconds"] += ps["target"]
                    passes["steps"] += ps["target_passes"]
                else:
                    passes["verify_seconds"] += ps["target"]
                    passes["verifications"] += ps["target_passes"]
                    passes["draft_seconds"] += ps["draft"]
                    passes["draft_steps"] += ps["draft_passes"]
                    accepted[k] += out.accepted[0]
                    proposed[k] += out.proposed[0]
                    cycles[k] += out.cycles[0]
        log(f"repeat {r + 1}/{repeats} done ({time.perf_counter() - t0:.0f} s)")
    return {"languages": [lang for lang, _ in pairs], "seconds": seconds,
            "tokens": np.full(n, float(max_new_tokens * repeats)), "accepted": accepted,
            "proposed": proposed, "cycles": cycles, "passes": passes}


def decoder_costs(passes: dict, gamma: int) -> dict:
    """The cost model's ``c`` and ``g`` of the decoder, from in-situ pass timings.

    ``c`` is the mean draft step over the mean target step, ``g`` the mean verification
    pass (``gamma + 1`` positions) over the mean target step, all timed inside the paired
    run (:func:`paired_decoder_run`'s ``passes``), so under the same load.

    Returns
    -------
    dict
        ``step_ms``, ``verify_ms``, ``draft_ms`` (milliseconds), ``c``, ``g``.

    Raises
    ------
    ValueError
        A count of passes that is zero (nothing was timed).
    """
    for key in ("steps", "verifications", "draft_steps"):
        if not passes.get(key):
            raise ValueError(f"passes: no {key} timed")
    step = passes["step_seconds"] / passes["steps"]
    verify = passes["verify_seconds"] / passes["verifications"]
    draft = passes["draft_seconds"] / passes["draft_steps"]
    return {"step_ms": 1e3 * step, "verify_ms": 1e3 * verify, "draft_ms": 1e3 * draft,
            "c": draft / step, "g": verify / step, "gamma": _positive_int("gamma", gamma)}


def decoder_exactness(target: nn.Transformer, draft: nn.Transformer, prompts: Sequence[str],
                      *, gamma: int, temperature: float = 1.0, resolution: float = 0.02,
                      max_tokens: int = 90, false_alarm: float = 1e-6, seed,
                      batch: int = 32, workers: int = 2) -> dict:
    """Every token the decoder emits, tested against the target's law at its position.

    As chapter 8 checks the book's decoder (its ``book_pt``): the speculative decoder
    emits ``max_tokens`` tokens for as many requests (the ``prompts`` taken in turn,
    ``batch`` at a time) as make the per-token TV ``resolution`` detectable with power 0.9
    at level ``false_alarm`` along two orderings (:func:`specdec.stats.pertoken.tokens_for`);
    the law of every position is computed from the same weights, one forward pass over
    each response (:func:`specdec.client.tokencheck.response_law_table`, ``workers``
    threads), and each token goes through the randomised probability integral
    transform (:func:`specdec.client.tokencheck.model_pertoken_check`).

    Parameters
    ----------
    target, draft : specdec.nn.Transformer
    prompts : sequence of str
    gamma, max_tokens, batch, workers : int
        At least 1.
    temperature : float
        > 0; decoder and check use the same law.
    resolution : float
        In (0, 1].
    false_alarm : float
        In (0, 1).
    seed : int or sequence of int
        Decoding uses ``default_rng([*seed, 0, i])`` for batch ``i``, the check
        ``default_rng([*seed, 1])``.

    Returns
    -------
    dict
        :meth:`specdec.stats.pertoken.PerTokenCheck.to_dict` (``passed``, ``message``,
        ``detectable_tv``, ...) with ``requests``, ``seconds``, ``gamma``, ``temperature``.

    Raises
    ------
    ValueError
        An argument out of its range, no prompts.
    """
    from specdec.client import tokencheck as tc
    from specdec.laws import check_real
    from specdec.stats.pertoken import tokens_for

    gamma = _positive_int("gamma", gamma)
    max_tokens = _positive_int("max_tokens", max_tokens)
    batch = _positive_int("batch", batch)
    workers = _positive_int("workers", workers)
    temperature = _temperature(temperature)
    if isinstance(resolution, bool):
        raise ValueError(f"resolution: must be a real number in (0, 1] (got {resolution!r})")
    check_real(resolution, "resolution", "(0, 1]")
    if not prompts:
        raise ValueError("prompts: need at least one prompt")
    seed = list(np.atleast_1d(seed).tolist())
    t0 = time.perf_counter()
    need = tokens_for(resolution, false_alarm=false_alarm, orderings=4)
    requests = [prompts[k % len(prompts)] for k in range(math.ceil(need / max_tokens))]
    settings = dec.SamplingSettings(temperature=temperature)
    tokens = []
    for i in range(0, len(requests), batch):
        out = dec.speculative(target, draft, requests[i:i + batch], max_tokens, gamma,
                              np.random.default_rng([*seed, 0, i // batch]), settings)
        tokens.extend(out.tokens)
    got = [tc.Response(p, k, tuple(int(x) for x in r), len(r) < max_tokens)
           for k, (p, r) in enumerate(zip(requests, tokens))]
    table = tc.response_law_table(got, target, draft, settings=settings,
                                  max_tokens=max_tokens, workers=workers)
    check = tc.model_pertoken_check(got, target, draft, settings=settings,
                                    max_tokens=max_tokens,
                                    rng=np.random.default_rng([*seed, 1]),
                                    false_alarm=false_alarm, table=table).to_dict()
    return {**check, "requests": len(requests), "gamma": gamma, "temperature": temperature,
            "resolution": float(resolution), "seconds": time.perf_counter() - t0}


def measure_rule(target: str = "target_large", draft: str = "draft", *, gamma: int = 4,
                 temperature: float = 1.0, prompts_per_language: int = 5, repeats: int = 2,
                 max_new_tokens: int = 64, seed: int = 2026, resolution: float | None = 0.02,
                 check_tokens: int = 90, false_alarm: float = 1e-6, threads: int | None = 1,
                 log: Callable[[str], None] = lambda *_: None) -> dict:
    """The book-grade measurement of the exact rule on the book's decoder.

    1. Exactness first: :func:`decoder_exactness` on the stream's prompts at
       ``resolution`` (``None`` skips it: a quick benchmark run); a failed check stops
       here (no speed is measured for a decoder that is not exact).
    2. The paired, interleaved timing (:func:`paired_decoder_run`) on the mixed-language
       stream (:func:`rule_stream`), BLAS held to ``threads`` threads (batch one).
    3. The speedup of the stream and of each language with a 95% BCa interval over
       prompts (:func:`specdec.stats.ratio_interval`); acceptance per drafted token;
       ``E``, tokens per target pass; the decoder's ``c`` and ``g`` (:func:`decoder_costs`)
       and the cost model's prediction ``E / (g + c gamma)`` with the measured ``E``
       (:func:`specdec.cost.cycle_cost`).

    Parameters
    ----------
    target, draft : str
        The book's models (:func:`specdec.nn.load_model`), e.g. ``"draft"`` or
        ``"draft_distilled"``.
    gamma, prompts_per_language, repeats, max_new_tokens, check_tokens : int
        At least 1 (at least 2 prompts in all, for an interval).
    temperature : float
        > 0, no truncation.
    seed : int
        Requests ``[seed, k, r]``; the interval ``[seed, 99]`` (stream) and
        ``[seed, 100 + i]`` (language ``i``); the check ``[seed, 7]``.
    resolution : float or None
        The check's detectable per-token TV, in (0, 1]; None: no check.
    false_alarm : float
        The check's level.
    threads : int or None
        BLAS threads while timing (None: leave them).
    log : callable
        Progress lines.

    Returns
    -------
    dict
        The settings; ``exactness`` (the check's dict, or None); ``per_prompt``
        (``language``, ``plain_seconds``, ``spec_seconds``, ``tokens``, ``cycles``,
        ``accepted``, ``proposed`` per prompt); ``speedup`` (``speedup``, ``low``, ``high``, ``prompts``,
        ``confidence``: the stream) and ``by_language``; ``acceptance``;
        ``tokens_per_pass`` (E); ``costs`` (:func:`decoder_costs`); ``predicted`` and
        ``model_error`` (predicted over measured, minus 1); ``seconds`` per setting;
        ``load_before``, ``load_after`` (1-minute load averages).

    Raises
    ------
    ValueError
        An argument out of its range; ``RuntimeError`` when the exactness check fails.
    """
    for name, value in (("gamma", gamma), ("prompts_per_language", prompts_per_language),
                        ("repeats", repeats), ("max_new_tokens", max_new_tokens),
                        ("check_tokens", check_tokens)):
        _positive_int(name, value)
    temperature = _temperature(temperature)
    pairs = rule_stream(prompts_per_language)
    if len(pairs) < 2:
        raise ValueError("prompts_per_language: the stream needs at least 2 prompts")
    load = (lambda: os.getloadavg()[0]) if hasattr(os, "getloadavg") else (lambda: None)
    load_before = load()
    big, small = nn.load_model(target), nn.load_model(draft)
    exact = None
    if resolution is not None:
        exact = decoder_exactness(big, small, [p for _, p in pairs], gamma=gamma,
                                  temperature=temperature, resolution=resolution,
                                  max_tokens=check_tokens, false_alarm=false_alarm,
                                  seed=[seed, 7])
        log(f"exactness: {'passed' if exact['passed'] else 'FAILED'}, detectable per-token TV "
            f"{exact['detectable_tv']:.3f} ({exact['seconds']:.0f} s) {exact['message']}")
        if not exact["passed"]:
            raise RuntimeError(f"the decoder failed its exactness check: {exact['message']}")
    with limit_blas_threads(threads):
        run = paired_decoder_run(big, small, pairs, gamma=gamma, temperature=temperature,
                                 repeats=repeats, max_new_tokens=max_new_tokens, seed=[seed],
                                 log=log)
    sec, tok = run["seconds"], run["tokens"]
    head = ratio_interval(sec["plain"], tok, sec["spec"], tok, seed=[seed, 99])
    by_language = {}
    for i, lang in enumerate(dict.fromkeys(run["languages"])):
        idx = [k for k, g in enumerate(run["languages"]) if g == lang]
        if len(idx) >= 2:
            by_language[lang] = ratio_interval(sec["plain"][idx], tok[idx], sec["spec"][idx],
                                               tok[idx], seed=[seed, 100 + i])
    proposed = int(run["proposed"].sum())
    acceptance = int(run["accepted"].sum()) / proposed
    costs = decoder_costs(run["passes"], gamma)
    # E as measured (tokens per target pass), not 1 + gamma a: a request's last cycle drafts
    # only the tokens still to generate, so 1 + gamma a overstates E by a few per cent at 64
    # tokens, and the table prints E beside c and g
    tokens_per_pass = float(tok.sum() / run["cycles"].sum())
    predicted = tokens_per_pass / float(cost.cycle_cost(gamma, costs["c"], g=costs["g"]))
    return {"target": target, "draft": draft, "gamma": gamma, "temperature": temperature,
            "prompts": len(pairs), "repeats": repeats, "max_new_tokens": max_new_tokens,
            "seed": seed, "threads": threads, "exactness": exact,
            "per_prompt": {"language": run["languages"],
                           "plain_seconds": sec["plain"].tolist(),
                           "spec_seconds": sec["spec"].tolist(), "tokens": tok.tolist(),
                           "cycles": run["cycles"].tolist(),
                           "accepted": run["accepted"].tolist(),
                           "proposed": run["proposed"].tolist()},
            "speedup": head, "by_language": by_language, "acceptance": acceptance,
            "tokens_per_pass": tokens_per_pass, "costs": costs, "predicted": predicted,
            "model_error": predicted / head["speedup"] - 1.0,
            "seconds": {k: float(v.sum()) for k, v in sec.items()},
            "load_before": load_before, "load_after": load()}


def acceptance_by_language(target: nn.Transformer, drafts: dict[str, nn.Transformer],
                           temperatures: Sequence[float] = (1.0, 0.7),
                           languages: Sequence[str] = nn.LANGUAGES) -> list[dict]:
    """Exact expected acceptance per position of both rules, per draft, language and
    temperature.

    Along each language's held-out text (:func:`specdec.nn.load_heldout`, never trained
    on), as :func:`specbook.served.rule_acceptance`: ``rejection`` = mean of
    ``sum_x min(p, q) = 1 - TV(p, q)`` (a sampled draft under the rejection rule),
    ``match`` = mean of ``p(argmax q)`` (a greedy draft kept when the target's sample
    equals it), from the models' laws at each temperature: expectations, not samples.
    Each model scores each text once (:func:`specbook.served.window_logits`).

    Parameters
    ----------
    target : specdec.nn.Transformer
    drafts : dict of str to specdec.nn.Transformer
        The drafts, by name.
    temperatures : sequence of float
    languages : sequence of str

    Returns
    -------
    list of dict
        One row per (draft, temperature, language), in that order: ``draft``,
        ``temperature``, ``language``, ``rejection``, ``match``, ``positions``.

    Raises
    ------
    ValueError
        A language without held-out text.
    """
    from specbook.served import acceptance_from_logits, window_logits

    held = nn.load_heldout()
    unknown = [lang for lang in languages if lang not in held]
    if unknown:
        raise ValueError(f"languages: {unknown} have no held-out text")
    ctx = min([target.config.context] + [d.config.context for d in drafts.values()])
    p_logits = {lang: window_logits(target, [held[lang]["text"]], ctx) for lang in languages}
    rows = []
    for name, draft in drafts.items():
        q_logits = {lang: window_logits(draft, [held[lang]["text"]], ctx)
                    for lang in languages}
        for t in temperatures:
            for lang in languages:
                rows.append({"draft": name, "language": lang, **acceptance_from_logits(
                    p_logits[lang], q_logits[lang], t)})
    return rows


def break_even(tokens_per_pass: float, c: float, g: float, gamma: int,
               measured: float | None = None) -> dict:
    """What each term of the cycle would have to be, the others fixed, for break-even.

    The cost model prices a cycle at ``g + c gamma`` target steps for ``E`` tokens. Given
    the ``measured`` speedup ``S``, the cycle really cost ``E / S`` steps: the rest,
    ``overhead = E / S - g - c gamma`` steps, is work outside the timed passes (sampling,
    the acceptance test, rolling back the caches, Python), negative when the passes timed
    in situ cost more than the run shows. Without ``measured`` the overhead is 0 (the cost
    model alone). Break-even needs ``E = g + c gamma + overhead``.

    Returns
    -------
    dict
        ``E`` (the tokens per target pass needed), ``acceptance`` (the acceptance per
        drafted token giving it, ``(E - 1) / gamma``), ``g`` (``E - c gamma - overhead``
        with today's E), ``c`` (``(E - g - overhead) / gamma``; negative: no draft is cheap
        enough), ``overhead`` and ``predicted`` (the cost model's ``E / (g + c gamma)``).

    Raises
    ------
    ValueError
        A term that is not a finite positive number.

    Examples
    --------
    >>> out = break_even(2.4, 0.05, 2.5, 4)
    >>> round(out["E"], 2), round(out["acceptance"], 3), round(out["g"], 2), round(out["c"], 3)
    (2.7, 0.425, 2.2, -0.025)
    >>> round(break_even(2.4, 0.05, 2.5, 4, measured=0.8)["overhead"], 2)   # 2.4/0.8 - 2.7
    0.3
    """
    gamma = _positive_int("gamma", gamma)
    named = [("tokens_per_pass", tokens_per_pass), ("c", c), ("g", g)]
    if measured is not None:
        named.append(("measured", measured))
    for name, value in named:
        if isinstance(value, bool) or not (isinstance(value, (int, float))
                                           and math.isfinite(value) and value > 0):
            raise ValueError(f"{name}: must be a finite number > 0 (got {value!r})")
    model = g + c * gamma
    overhead = 0.0 if measured is None else tokens_per_pass / measured - model
    need = model + overhead
    return {"E": need, "acceptance": (need - 1.0) / gamma,
            "g": tokens_per_pass - c * gamma - overhead,
            "c": (tokens_per_pass - g - overhead) / gamma, "overhead": overhead,
            "predicted": tokens_per_pass / model}


def decoder_bandwidth(target: str = "target_large", *, steps: int = 64, prompt_bytes: int = 32,
                      gamma: int = 4, threads: int | None = 1, megabytes: int = 256,
                      repeats: int = 5) -> dict:
    """The decoder's achieved bandwidth, and the share of its step spent in weight products.

    One request of ``steps`` tokens (:func:`specdec.decode.autoregressive`, temperature
    1, seed 0) after the first ``prompt_bytes`` bytes of a held-out prompt, BLAS held to
    ``threads``; the step is the mean in-situ time of its target steps
    (``pass_seconds["target"] / target_passes``). A step reads every weight once in
    float32 (:func:`specbook.instruments.weight_bytes`), so ``achieved = weight bytes /
    step``; beside it the machine's one-thread read bandwidth
    (:func:`specbook.instruments.memory_bandwidth`, median repeat), and the time of the
    step's matrix products alone (one position through every weight matrix and the tied
    head, the median of ``repeats`` rounds of ``steps`` products): what a step would take
    if everything around the products (layer norms, attention over the cache, Python) were
    free; and the same products for ``gamma + 1`` positions at once, over the one-position
    products (``products_g``: the verification pass's g if only the products counted).

    Returns
    -------
    dict
        ``step_ms``, ``products_ms``, ``products_share`` (products over step),
        ``weight_bytes``, ``achieved_gbs``, ``products_gbs`` (weight bytes over the products'
        time), ``products_g``, ``read_gbs`` (median), ``share`` (achieved over read),
        ``gamma``, ``threads``.

    Raises
    ------
    ValueError
        ``steps`` below 2, ``gamma`` or ``repeats`` below 1.
    """
    steps = _positive_int("steps", steps, 2)
    gamma = _positive_int("gamma", gamma)
    repeats = _positive_int("repeats", repeats)
    model = nn.load_model(target)
    prompt = nn.load_heldout()[nn.LANGUAGES[0]]["prompts"][0].encode()[:prompt_bytes]
    w = model.weights
    mats = [w[f"blocks.{i}.{k}.weight"] for i in range(model.config.n_layers)
            for k in ("qkv", "proj", "fc", "out")] + [np.ascontiguousarray(w["tok_emb.weight"].T)]
    one = [np.ones((1, m.shape[0]), np.float32) for m in mats]
    block = [np.ones((gamma + 1, m.shape[0]), np.float32) for m in mats]
    with limit_blas_threads(threads):
        out = dec.autoregressive(model, [prompt], steps, np.random.default_rng(0),
                                 dec.SamplingSettings(temperature=1.0))
        rounds = {1: [], gamma + 1: []}
        for _ in range(repeats):                  # the two sizes alternate: same load
            for rows in (one, block):
                t0 = time.perf_counter()
                for _ in range(steps):
                    for x, m in zip(rows, mats):
                        x @ m
                rounds[rows[0].shape[0]].append((time.perf_counter() - t0) / steps)
        bw = memory_bandwidth(megabytes=megabytes, repeats=repeats)
    step = out.pass_seconds["target"] / out.pass_seconds["target_passes"]
    products = float(np.median(rounds[1]))
    wb = weight_bytes(model)
    achieved = wb / step / 1e9
    return {"target": target, "step_ms": 1e3 * step, "products_ms": 1e3 * products,
            "products_share": products / step, "weight_bytes": wb, "achieved_gbs": achieved,
            "products_gbs": wb / products / 1e9,
            "products_g": float(np.median(rounds[gamma + 1])) / products,
            "read_gbs": bw["read_gbs_median"], "share": achieved / bw["read_gbs_median"],
            "gamma": gamma, "threads": threads}


def verdict(speedup: dict) -> str:
    """A speedup against break-even, e.g. ``1.31x (95% interval 1.22-1.40): faster than
    plain decoding``."""
    s, lo, hi = speedup["speedup"], speedup["low"], speedup["high"]
    where = ("faster than plain decoding" if lo > 1 else "slower than plain decoding" if hi < 1
             else "not distinguishable from break-even")
    return f"{s:.2f}x (95% interval {lo:.2f}-{hi:.2f}): {where}"


def against_break_even(low: float, high: float) -> str:
    """``faster``, ``slower`` or ``not distinguishable`` from plain decoding, by a 95%
    interval against 1.0."""
    return "slower" if high < 1 else "faster" if low > 1 else "not distinguishable"


def break_even_text(run: dict) -> str:
    """Short sentences: does the measured speedup of ``run`` (:func:`measure_rule`) clear
    break-even, and if not, what each term of the cycle would have to be, with the work
    outside the timed passes as measured (:func:`break_even` with ``measured``). The first
    sentence starts in lower case (the page writes its subject before it).

    Examples
    --------
    >>> run = {"speedup": {"speedup": 0.8, "low": 0.75, "high": 0.85}, "gamma": 4,
    ...        "tokens_per_pass": 2.4, "acceptance": 0.35, "costs": {"c": 0.05, "g": 2.5}}
    >>> print(break_even_text(run))  # doctest: +NORMALIZE_WHITESPACE
    it loses (0.80×, 95% interval 0.75 to 0.85). A cycle cost 3.00 target steps for 2.40
    tokens: g 2.50, c γ 0.20 and 0.30 of other work. To break even, E would have to rise
    to 3.00 tokens per pass (acceptance per drafted token 0.500, not 0.350). Or g would
    have to fall to 1.90 steps; no draft is cheap enough.
    """
    s = run["speedup"]
    side = against_break_even(s["low"], s["high"])
    head = f"{s['speedup']:.2f}×, 95% interval {s['low']:.2f} to {s['high']:.2f}"
    if side == "faster":
        return f"it pays ({head})."
    gamma, c, g, e = run["gamma"], run["costs"]["c"], run["costs"]["g"], run["tokens_per_pass"]
    need = break_even(e, c, g, gamma, measured=s["speedup"])
    if side != "slower":      # the interval reaches 1: nothing has to change to break even
        return (f"it is not distinguishable from plain decoding ({head}): the interval over "
                f"prompts reaches 1.")
    verb = "loses"
    text = (f"it {verb} ({head}). A cycle cost {e / s['speedup']:.2f} target steps for "
            f"{e:.2f} tokens: g {g:.2f}, c γ {c * gamma:.2f} and {need['overhead']:.2f} of "
            f"other work. To break even, E would have to rise to {need['E']:.2f} tokens per "
            f"pass (acceptance per drafted token {need['acceptance']:.3f}, not "
            f"{run['acceptance']:.3f})"
            + (", more than γ + 1 allows. " if need["E"] > gamma + 1 else ". "))
    text += (f"Or g would have to fall to {need['g']:.2f} steps" if need["g"] > 0
             else "No verification pass is cheap enough")
    text += (f", or c to {need['c']:.3f}." if need["c"] > 0
             else "; no draft is cheap enough.")
    return text
