"""Tests of the serving engine (tools/engine.py) and of the client against it: the GGUF
conversion, the build's checks, and, on the real llama-server serving the book's models,
numerical agreement with specdec.nn, the harness, and the served law with and without the
draft (exact) and with a setting that is not exact.

The real-server tests are ``slow``: the first one on a machine builds llama-server (once,
cached; 10-30 minutes on 2 cores), then each starts a server for a few seconds.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from specdec import client as cl
from specdec import decode as dec
from specdec import nn
from specdec.client import exactness as ex

REPO = Path(__file__).resolve().parents[1]


def _load_engine():
    spec = importlib.util.spec_from_file_location("specdec_engine_tool", REPO / "tools" / "engine.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module                   # dataclasses look the module up
    spec.loader.exec_module(module)
    return module


engine = _load_engine()


# ------------------------------------------------------------------ no server needed
def test_byte_vocabulary_is_gpt2s_byte_map():
    vocab = engine._byte_vocab()
    assert len(vocab) == len(set(vocab)) == 256 and all(len(t) == 1 for t in vocab)
    assert vocab[ord("a")] == "a" and vocab[ord(" ")] == "\u0120" and vocab[0] == "\u0100"


def test_gguf_conversion_layout(tmp_path, monkeypatch):
    import gguf

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    path = engine.convert("draft", log=lambda *_: None)
    assert engine.convert("draft", log=lambda *_: None) == path         # converted once
    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: np.array(t.data) for t in reader.tensors}
    w = nn.load_model("draft").weights
    assert np.array_equal(tensors["token_embd.weight"], w["tok_emb.weight"])
    assert np.array_equal(tensors["blk.0.attn_qkv.weight"], w["blocks.0.qkv.weight"].T)
    assert np.array_equal(tensors["blk.0.ffn_down.weight"], w["blocks.0.out.weight"].T)
    assert not tensors["blk.0.ffn_up.bias"].any() and "output.weight" not in tensors  # tied
    field = reader.fields["general.architecture"]
    assert bytes(field.parts[field.data[0]]).decode() == "gpt2"
    assert int(reader.fields["tokenizer.ggml.eos_token_id"].parts[-1][0]) == engine.EOS_BYTE


def test_build_names_a_missing_tool(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))                # nothing on PATH
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(engine.EngineError, match="needs cmake, C\\+\\+ compiler, C compiler"):
        engine.build(log=lambda *_: None)


def test_sdist_hash_is_checked(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    (tmp_path / "sdist").mkdir()
    (tmp_path / "sdist" / engine.SDIST_NAME).write_bytes(b"not the sources")
    with pytest.raises(engine.EngineError, match="is not the pinned"):
        engine.sdist(log=lambda *_: None)


def test_adopt_refuses_other_builds(tmp_path):
    with pytest.raises(engine.EngineError, match="no CMakeCache"):
        engine.adopt(tmp_path)
    (tmp_path / "CMakeCache.txt").write_text("CMAKE_HOME_DIRECTORY:INTERNAL=/elsewhere\n")
    with pytest.raises(engine.EngineError, match="not built from"):
        engine.adopt(tmp_path)


def test_served_law_checks_on_synthetic_draws():
    rng = np.random.default_rng(5)
    law = rng.dirichlet(np.full(16, 0.5), size=16)
    law /= law.sum()
    draws = rng.choice(law.size, size=4000, p=law.ravel())
    tokens = np.stack(np.unravel_index(draws, law.shape), axis=1)
    good = ex.first_tokens_law_test(tokens, law)                     # fails with probability <= 1e-6
    assert good.passed and good.tv.low == 0.0 and good.detectable_tv < 0.2
    other = rng.dirichlet(np.full(256, 0.5)).reshape(16, 16)
    bad = ex.first_tokens_law_test(tokens, other)
    assert not bad.passed and "threshold" in bad.message
    again = rng.choice(law.size, size=4000, p=law.ravel())
    same = ex.two_sample(tokens, np.stack(np.unravel_index(again, law.shape), axis=1))
    assert same.passed and same.dof >= 1
    moved = rng.choice(other.size, size=4000, p=other.ravel())
    assert not ex.two_sample(tokens, np.stack(np.unravel_index(moved, law.shape), 1)).passed
    padded = ex.pad_law(law, 3)
    assert padded.sum() == pytest.approx(1.0) and padded[3, 3] == pytest.approx(law[3].sum())
    with pytest.raises(ValueError, match="pad stopped requests"):
        ex.first_tokens_law_test(np.array([[-1, 0]]), law)


def test_rule_acceptance_is_exact():
    from specdec.book.served import rule_acceptance

    t = nn.Transformer.random(nn.TransformerConfig(2, 16, 4, 64), np.random.default_rng(0), "t")
    d = nn.Transformer.random(nn.TransformerConfig(1, 8, 2, 64), np.random.default_rng(1), "d")
    texts = ["hello there", "ciao a tutti, come va?"]
    same = rule_acceptance(t, t, texts, 1.0)           # a perfect draft
    p = [dec.SamplingSettings().laws(t.forward(nn.encode(x)[None])[0]) for x in texts]
    assert same["rejection"] == pytest.approx(1.0)
    assert same["match"] == pytest.approx(np.concatenate([r.max(axis=1) for r in p]).mean())
    assert same["positions"] == sum(len(x.encode()) for x in texts)
    greedy = rule_acceptance(t, d, texts, 0.0)        # temperature 0: both rules agree
    assert greedy["match"] == greedy["rejection"]
    q = [dec.SamplingSettings().laws(d.forward(nn.encode(x)[None])[0]) for x in texts]
    want = np.concatenate([np.minimum(a, b).sum(axis=1) for a, b in zip(p, q)]).mean()
    assert rule_acceptance(t, d, texts, 1.0)["rejection"] == pytest.approx(want)


# ------------------------------------------------------------------ the real server
@pytest.fixture(scope="module")
def server_binary():
    return engine.build()


def _probs(url: str, prompt: str) -> np.ndarray:
    """The server's next-byte probabilities after ``prompt`` (its top 256 of 256). Greedy,
    so that the emitted byte is the one the probabilities are reported with (the server
    holds back an incomplete UTF-8 character, and its probabilities with it)."""
    body = {"prompt": prompt, "n_predict": 1, "n_probs": 256, **cl.plain_sampling(0.0)}
    req = urllib.request.Request(url + "/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        data = json.loads(resp.read())
    top = data["completion_probabilities"][0]["top_logprobs"]
    p = np.zeros(256)
    for entry in top:
        p[entry["id"]] = math.exp(entry["logprob"])
    return p


AGREEMENT = {True: 5e-4, False: 3e-3}    # max |p_server - p_numpy|; measured 2.4e-4, 1.2e-3


@pytest.mark.slow
@pytest.mark.parametrize("exact_cache", [True, False])
def test_server_agrees_with_numpy(server_binary, exact_cache):
    model = nn.load_model("target")
    held = nn.load_heldout()
    laws = {}
    for lang in nn.LANGUAGES:           # prompts whose most likely next byte is ASCII
        for prompt in held[lang]["prompts"][:12]:
            p = dec.SamplingSettings().law(model.forward(nn.encode(prompt)[None])[0, -1])
            if p.argmax() < 0x80:
                laws[prompt] = p
                break
    assert len(laws) >= 3
    with engine.serve("target", exact_cache=exact_cache) as server:
        worst = 0.0
        for prompt, p_numpy in laws.items():
            p_server = _probs(server.url, prompt)
            assert p_server.sum() == pytest.approx(1.0, abs=1e-3)
            worst = max(worst, float(np.abs(p_server - p_numpy).max()))
    print(f"max |p_server - p_numpy| = {worst:.2e} (exact_cache={exact_cache})")
    assert worst < AGREEMENT[exact_cache], worst


@pytest.mark.slow
def test_harness_against_the_real_server(server_binary):
    held = nn.load_heldout()
    prompts = {lang: held[lang]["prompts"][:2] for lang in ("it", "zh")}
    with engine.serve("target", "draft", gamma=3, parallel=2) as spec, \
            engine.serve("target") as base:
        ep = cl.Endpoint(spec.url)
        specs = [cl.RequestSpec(f"{k}", p, 24, cl.plain_sampling(0.0), seed=k)
                 for k, p in enumerate(prompts["it"] + prompts["zh"])]
        run = cl.closed_loop(ep, specs, 2)
        lengths = cl.prompt_lengths(ep, prompts)
        out = cl.paired({"baseline": cl.Endpoint(base.url), "spec": ep}, prompts,
                        baseline="baseline", repeats=2, max_tokens=16,
                        sampling=cl.plain_sampling(0.0))
    s = cl.summarize_run(run)
    assert all(r.completion_tokens == 24 for r in run.records)       # from usage
    assert s["draft_n"] > 0 and 0 <= s["draft_n_accepted"] <= s["draft_n"]
    assert all(r.ttft > 0 and r.tpot > 0 for r in run.records)
    # byte-level vocabulary: the server's token count of a prompt is its UTF-8 length
    assert lengths["zh"]["tokens"] == lengths["zh"]["bytes"]
    assert {r["setting"] for r in out["rows"] if "speedup" in r} == {"spec"}
    # greedy: the same text with and without the draft, request by request
    texts = {}
    for r in out["runs"]:
        texts.setdefault(r["setting"], []).extend(x["chunk_texts"] for x in r["records"])
    assert texts["baseline"] == texts["spec"]


def _law_and_draws(url, prompt, n, extra=None, target="target"):
    tokens = ex.first_tokens(cl.Endpoint(url), prompt, n, k=2, seed=1000,
                             pad=engine.EOS_BYTE, extra=extra)
    law = dec.target_sequence_law(nn.load_model(target), prompt, 2)
    return tokens, ex.pad_law(law, engine.EOS_BYTE)


@pytest.mark.slow
def test_served_engine_is_exact_with_and_without_draft(server_binary):
    prompt = nn.load_heldout()["en"]["prompts"][0]
    n = 1500
    with engine.serve("target", parallel=4, exact_cache=True) as base, \
            engine.serve("target", "draft", gamma=3, parallel=4, exact_cache=True) as spec:
        plain, law = _law_and_draws(base.url, prompt, n)
        drafted, _ = _law_and_draws(spec.url, prompt, n)
        long_a = ex.first_tokens(cl.Endpoint(base.url), prompt, 40, k=24, seed=7, pad=-1)
        long_b = ex.first_tokens(cl.Endpoint(spec.url), prompt, 40, k=24, seed=7, pad=-1)
    for tokens in (plain, drafted):
        check = ex.first_tokens_law_test(tokens, law)        # each fails with probability <= 1e-6
        assert check.passed, check.message
        assert check.detectable_tv < 0.3     # set by the law and the trials, not by chance
    assert ex.two_sample(plain, drafted).passed
    # one random draw per emitted token: the same seed gives the same text
    assert ex.same_seed_identity(list(long_a), list(long_b))["different"] == 0


@pytest.mark.slow
def test_served_large_target_is_exact_with_the_draft(server_binary):
    """The calibrated check of chapter 8 on the memory-bound target (float16 on disk,
    float32 GGUF): the speculative server's law of two bytes is the target's exact law."""
    prompt = nn.load_heldout()["it"]["prompts"][0]
    with engine.serve("target_large", "draft", gamma=4, parallel=4, exact_cache=True) as spec:
        drafted, law = _law_and_draws(spec.url, prompt, 1000, target="target_large")
    check = ex.first_tokens_law_test(drafted, law)           # fails with probability <= 1e-6
    assert check.passed, check.message
    assert check.detectable_tv < 0.35            # set by the law and the trials


@pytest.mark.slow
def test_synthetic_acceptance_is_caught(server_binary):
    """llama.cpp's benchmarking option accepts draft tokens at a set rate whatever the
    target says; at its maximum every drafted byte is accepted, so the second byte is the
    draft's greedy choice, and the check must fail."""
    prompt = nn.load_heldout()["en"]["prompts"][0]
    with engine.serve("target", "draft", gamma=3, parallel=4, exact_cache=True,
                      extra=("--spec-synth-len", "4")) as bad:
        tokens, law = _law_and_draws(bad.url, prompt, 1500)
    assert not ex.first_tokens_law_test(tokens, law).passed


def test_pass_times_refuses_bad_arguments_by_name():
    from specdec.book.served import pass_times

    for kwargs, message in ((dict(positions=[]), "positions: must hold at least one"),
                            (dict(positions=[0, 2]), "positions: must be an integer >= 1"),
                            (dict(positions=[1.5]), "positions: must be an integer >= 1"),
                            (dict(repeats=0), "repeats: must be an integer >= 1"),
                            (dict(repeats=1.5), "repeats: must be an integer >= 1")):
        args = dict(endpoints={}, prefix="abc", continuation="defgh", positions=[1, 2],
                    repeats=1) | kwargs
        with pytest.raises(ValueError, match=message):
            pass_times(**args)
    with pytest.raises(TypeError, match="prefix, continuation: must be strings"):
        pass_times({}, None, "defgh", [1], 1)
