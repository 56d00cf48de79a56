"""Exactness on the real models: speculative decoding samples the target's law.

For a held-out prompt, the law of the first one or two tokens of target-only sampling
is computed exactly from the target's logits (:func:`specdec.decode.target_sequence_law`).
Many independent speculative decodes of the same prompt (one batched call, one request
per row) are then counted and checked with :func:`specdec.stats.assert_law`, whose
false-alarm probability is 1e-9 for any number of trials and any seed: a correct decoder
fails this test with probability at most 1e-9 per case. Cells with an expected count
below 5 are pooled into one cell (pooling is a fixed function of the tokens, so the pooled
counts follow the pooled law exactly and the bound still holds).

On the real llama-server (skipped when it is not built: ``make engine``), the per-token
check (:mod:`specdec.stats.pertoken`) tests every emitted token: the plain and the speculative
servers pass with the numerical disagreement measured on the plain one as the tolerance,
and the positive controls fail: the server sampling at another temperature than the
client's law, and llama.cpp's synthetic acceptance (``--spec-synth-len``). Each test sends
a fixed number of requests (every request bounded by the endpoint's timeout) and prints
its tokens, detectable per-token TV and seconds.
"""

from __future__ import annotations

import numpy as np
import pytest

import time

from specdec import client as cl
from specdec import decode as dec
from specdec import nn, stats
from specdec.client import tokencheck as tc
from specdec.laws import tv_distance

HAVE_MODELS = (nn.MODELS_DIR / "manifest.json").exists()
pytestmark = [pytest.mark.skipif(not HAVE_MODELS, reason="models/ not built (make models)"),
              pytest.mark.usefixtures("one_blas_thread")]  # tests/conftest.py

FALSE_ALARM = 1e-9


@pytest.fixture(scope="module")
def models():
    return nn.load_model("target"), nn.load_model("draft")


@pytest.fixture(scope="module")
def prompts():
    return nn.load_heldout()


def first_tokens(target, draft, prompt, length, gamma, trials, settings, seed, chunk=1000):
    """Counts of the first ``length`` tokens over ``trials`` independent decodes, and the
    overall acceptance rate (requests decoded ``chunk`` at a time, one per batch row)."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((256,) * length, dtype=np.int64)
    accepted = proposed = 0
    for s in range(0, trials, chunk):
        out = dec.speculative(target, draft, [prompt] * min(chunk, trials - s), length, gamma,
                              rng, settings)
        toks = np.array(out.tokens)
        np.add.at(counts, tuple(toks[:, i] for i in range(length)), 1)
        accepted, proposed = accepted + sum(out.accepted), proposed + sum(out.proposed)
    return counts, accepted / proposed


CASES = [
    # language, prompt index, settings, gamma, length, trials
    ("it", 0, dec.SamplingSettings(), 2, 1, 5000),
    ("en", 1, dec.SamplingSettings(temperature=0.7), 1, 2, 5000),
    ("zh", 2, dec.SamplingSettings(top_k=20), 3, 2, 4000),
    ("es", 3, dec.SamplingSettings(temperature=1.2, top_p=0.9), 4, 2, 4000),
]


@pytest.mark.parametrize("lang,index,settings,gamma,length,trials", CASES,
                         ids=[f"{c[0]}-g{c[3]}-L{c[4]}" for c in CASES])
def test_speculative_first_tokens_follow_target_law(models, prompts, lang, index, settings,
                                                    gamma, length, trials):
    target, draft = models
    prompt = prompts[lang]["prompts"][index]
    law = dec.target_sequence_law(target, prompt, length, settings)
    counts, acceptance = first_tokens(target, draft, prompt, length, gamma, trials, settings,
                                      seed=[2026, index, gamma])
    assert counts.sum() == trials
    c, lw = stats.pool_sparse_cells(counts, law)
    stats.assert_law(c, lw, false_alarm=FALSE_ALARM)
    assert 0.0 < acceptance < 1.0           # the draft is neither useless nor perfect


def test_check_has_power_against_the_draft_law(models, prompts):
    """The same counts are rejected against the draft's own law (the test can fail)."""
    target, draft = models
    settings = dec.SamplingSettings()
    prompt = prompts["it"]["prompts"][0]
    p = dec.target_sequence_law(target, prompt, 1, settings)
    q = dec.target_sequence_law(draft, prompt, 1, settings)
    assert tv_distance(p, q) > 0.05
    counts, _ = first_tokens(target, draft, prompt, 1, 2, 3000, settings, seed=7)
    c, lq = stats.pool_sparse_cells(counts, q)
    with pytest.raises(AssertionError, match="inconsistent with the law"):
        stats.assert_law(c, lq, false_alarm=FALSE_ALARM)


def test_autoregressive_baseline_follows_target_law(models, prompts):
    target, _ = models
    settings = dec.SamplingSettings(temperature=0.9)
    prompt = prompts["en"]["prompts"][0]
    law = dec.target_sequence_law(target, prompt, 1, settings)
    out = dec.autoregressive(target, [prompt] * 3000, 1, np.random.default_rng(3), settings)
    counts = np.bincount(np.array(out.tokens)[:, 0], minlength=256)
    stats.assert_law(*stats.pool_sparse_cells(counts, law), false_alarm=FALSE_ALARM)


def test_greedy_speculative_equals_greedy_target(models, prompts):
    """Temperature 0: both laws are one-hot, so the output is the target's greedy text."""
    target, draft = models
    greedy = dec.SamplingSettings(temperature=0)
    for lang in nn.LANGUAGES:
        prompt = prompts[lang]["prompts"][0]
        a = dec.autoregressive(target, prompt, 24, np.random.default_rng(0), greedy)
        b = dec.speculative(target, draft, prompt, 24, 3, np.random.default_rng(1), greedy)
        assert a.tokens == b.tokens


def test_decoder_validation(models):
    target, draft = models
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="gamma"):
        dec.speculative(target, draft, "ciao", 4, 0, rng)
    with pytest.raises(ValueError, match="exceeds the context"):
        dec.speculative(target, draft, "x" * 100, 30, 4, rng)
    with pytest.raises(ValueError, match="max_new_tokens"):
        dec.autoregressive(target, "ciao", 0, rng)
    with pytest.raises(ValueError, match="at least one token"):
        dec.autoregressive(target, [""], 3, rng)


# ------------------------------------------------------------------ the real llama-server
def _load_engine():
    from tools import engine

    return engine


@pytest.fixture(scope="module")
def engine():
    """The engine tool, if llama-server is already built (never builds it here)."""
    module = _load_engine()
    if not module._works(module.server_binary()):
        pytest.skip("llama-server not built (make engine)")
    return module


GAMMA, SLOTS = 3, 4
PER_TOKEN_REQUESTS, PER_TOKEN_MAX = 160, 90        # 32-byte prompts + 90 < 128 positions


def _english(n=12):
    return nn.load_heldout()["en"]["prompts"][:n]


def _report(name, check):
    print(f"{name}: {'pass' if check.passed else 'FAIL'}, {check.tokens} tokens in "
          f"{check.requests} requests, detectable per-token TV {check.detectable_tv:.4f} "
          f"(tolerance {check.tolerance:.2e}), Holm p {check.pvalue:.2e}, means "
          f"{ {k: round(v, 4) for k, v in check.means.items()} }, "
          f"{check.extra['seconds']:.1f} s")


@pytest.mark.slow
def test_pertoken_exactness_of_one_target(engine):
    """The chapter's per-token study of one target (plain, with the draft, two controls)
    at a coarse resolution: both servers pass (each fails with probability at most 1e-6
    when exact within the measured tolerance), their detectable TV reaches the asked
    resolution, the same seeds give the same texts with and without the draft, each
    distinct text's laws are computed once, and both controls fail."""
    from specbook.served import pertoken_exactness

    t0 = time.perf_counter()
    got = pertoken_exactness(engine, "target", gamma=GAMMA, prompts=_english(),
                             resolution=0.05, max_tokens=PER_TOKEN_MAX, seed=100, stop_share=0.1,
                             slots=SLOTS, exact_cache=True, control_requests=20)
    print(f"disagreement: {got['disagreement']}, {got['requests']} requests, "
          f"same text {got['same_text']}, {got['distinct_texts']} distinct texts, "
          f"{got['seconds']:.1f} s (laws {got['laws_seconds']:.1f} s)")
    assert got["disagreement"]["positions"] > 50 and got["disagreement"]["max_tv"] < 5e-3
    for name in ("plain", "speculative"):
        check = got[name]
        assert check["passed"], check["message"]
        assert check["impossible"] == 0 and check["tokens"] > 0.9 * check["positions"]
        assert check["detectable_tv"] <= 0.05 and check["requests"] == got["requests"]
    # llama.cpp's rule: one random draw per emitted token, whatever the draft proposed
    assert got["same_text"]["identical"] >= 0.9 * got["requests"]
    assert got["distinct_texts"] <= 2 * got["requests"] + 2 * 20 - got["same_text"]["identical"]
    synth, top_k = got["controls"]["synthetic"], got["controls"]["top_k"]
    assert not synth["passed"] and synth["adjusted"]["draft_over_target"] < 1e-6
    assert not top_k["passed"] and top_k["adjusted"]["target"] < 1e-6
    assert got["synthetic_flag"] == f"--spec-synth-len {GAMMA + 1}"
    assert "--spec-synth-len" in got["server_args"]["synthetic"]
    print(f"total {time.perf_counter() - t0:.1f} s")


def test_pertoken_exactness_refuses_bad_arguments():
    from specbook.served import pertoken_exactness

    kw = dict(gamma=2, prompts=["abc"], max_tokens=10, seed=0)
    for name, bad in (("max_tokens", 0), ("gamma", 0), ("slots", 1.5), ("control_requests", -1)):
        with pytest.raises(ValueError, match=name):
            pertoken_exactness(None, "target", **{**kw, name: bad})
    with pytest.raises(ValueError, match="prompts"):
        pertoken_exactness(None, "target", **{**kw, "prompts": []})
    with pytest.raises(ValueError, match="resolution"):
        pertoken_exactness(None, "target", **kw, resolution=0.0)
    for name, bad in (("seed", -1), ("seed", "0"), ("prompts", "Hello"), ("prompts", [""]),
                      ("max_requests", 0)):
        with pytest.raises(ValueError, match=name):
            pertoken_exactness(None, "target", **{**kw, name: bad})
    with pytest.raises(ValueError, match="max_tokens: the longest prompt .* must fit"):
        pertoken_exactness(None, "target", **{**kw, "max_tokens": 126})


@pytest.mark.slow
def test_served_pertoken_positive_controls_fail(engine, models):
    """The client's law at temperature 1 while the server samples at 0.8, and the
    client's law with top-k 20 while the server samples from every byte: both fail the
    per-token check (llama.cpp's synthetic acceptance is
    test_pertoken_exactness_of_one_target's control)."""
    target, draft = models
    prompts = _english()
    settings = dec.SamplingSettings(temperature=1.0)
    with engine.serve("target", "draft", gamma=GAMMA, parallel=SLOTS,
                      exact_cache=True) as spec:
        cold = tc.served_pertoken_check(cl.Endpoint(spec.url), prompts, requests=60,
                                        max_tokens=PER_TOKEN_MAX, settings=settings,
                                        target=target, draft=draft, seed=200,
                                        tolerance=1e-3, extra={"temperature": 0.8})
        # the client's law keeps the top 20 bytes, the server samples from all 256
        wide = tc.served_pertoken_check(cl.Endpoint(spec.url), prompts, requests=20,
                                        max_tokens=PER_TOKEN_MAX,
                                        settings=dec.SamplingSettings(top_k=20),
                                        target=target, draft=draft, seed=250,
                                        tolerance=1e-3, extra={"top_k": -1})
    for name, check in (("temperature 0.8 served, 1 assumed", cold),
                        ("all bytes served, top-k 20 assumed", wide)):
        _report(name, check)
        assert not check.passed
    assert cold.adjusted["target"] < 1e-6
    assert wide.impossible > 0


@pytest.mark.slow
def test_served_reported_laws(engine):
    """The black-box mode on llama-server: the plain server's reported post-sampling
    laws (bytes that start a multi-byte character banned, since llama.cpp reports no
    probabilities for a token that ends inside one) pass; the speculative server reports
    none for the tokens of its speculative path and is refused with that reason."""
    prompts = _english()
    ban = {"logit_bias": [[b, False] for b in range(0xC0, 0x100)]}
    with engine.serve("target", parallel=SLOTS, exact_cache=True) as base:
        check = tc.served_pertoken_check(cl.Endpoint(base.url), prompts, requests=60,
                                         max_tokens=PER_TOKEN_MAX, laws="reported",
                                         top_logprobs=20, post_sampling_probs=True,
                                         seed=400, extra=ban)
    _report("reported, plain", check)
    assert check.passed, check.message
    assert check.extra["tokens_in_pooled_cell"] > 0
    with engine.serve("target", "draft", gamma=GAMMA, parallel=SLOTS,
                      exact_cache=True) as spec:
        with pytest.raises(tc.NoLogprobs, match="speculative path"):
            tc.served_pertoken_check(cl.Endpoint(spec.url), prompts, requests=4,
                                     max_tokens=PER_TOKEN_MAX, laws="reported",
                                     post_sampling_probs=True, seed=500, extra=ban)


@pytest.mark.slow
def test_cli_exactness_against_real_llama_server(engine, tmp_path, capsys):
    """``python -m specdec.client --exactness model`` as a reader runs it: the speculative
    llama-server checked token by token, the tolerance measured on the plain server
    (``--baseline``); it passes, and the same command against the synthetic-acceptance
    server fails with exit status 1."""
    import json

    from specdec.client.__main__ import main as cli

    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"en": _english(6)}))
    common = ["--prompts", str(prompts), "--prompts-per-language", "6", "--exactness",
              "model", "--target", "target", "--draft", "draft", "--temperature", "1",
              "--requests", "60", "--max-tokens", "60", "--no-progress"]
    with engine.serve("target", parallel=SLOTS) as base, \
            engine.serve("target", "draft", gamma=GAMMA, parallel=SLOTS) as spec, \
            engine.serve("target", "draft", gamma=GAMMA, parallel=SLOTS,
                         extra=("--spec-synth-len", str(GAMMA + 1))) as bad:
        good_out, bad_out = tmp_path / "good.json", tmp_path / "bad.json"
        assert cli(["--endpoint", spec.url, "--baseline", base.url, *common,
                    "--out", str(good_out)]) == 0, capsys.readouterr()
        assert "per-token exactness: pass" in capsys.readouterr().out
        assert cli(["--endpoint", bad.url, "--baseline", base.url, *common, "--seed", "5000",
                    "--out", str(bad_out)]) == 1
        assert "per-token exactness: FAIL" in capsys.readouterr().out
    good = json.loads(good_out.read_text())
    assert good["exactness"]["passed"] and good["exactness"]["tokens"] > 0.9 * 60 * 60
    assert 0 < good["disagreement"]["max_tv"] < 5e-3
    assert not json.loads(bad_out.read_text())["exactness"]["passed"]
