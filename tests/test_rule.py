"""The exact rule on the book's decoder (specbook/rule.py): the stream, the paired run, the
decoder's c and g, the per-token exactness check first (a broken decoder fails it), the
book-grade measurement end to end on small models, exact acceptance per language and the
achieved bandwidth; and the distillation of tools/train_models.py (teacher samples and
the forward KL). Small sizes; nothing here asserts a speed."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from specdec import decode as dec
from specdec import nn
from specdec.stats.pertoken import tokens_for
from specbook import rule
from specbook.served import rule_acceptance

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_blas_thread")  # tests/conftest.py


def _tiny(seed: int, layers: int = 1, d: int = 16, context: int = 96) -> nn.Transformer:
    return nn.Transformer.random(nn.TransformerConfig(layers, d, 4, context),
                                 np.random.default_rng(seed), f"m{seed}")


PAIRS = [("en", "hello there"), ("it", "ciao a tutti"), ("en", "good day"),
         ("it", "buongiorno")]


def test_the_stream_takes_languages_in_turn_and_refuses_bad_arguments():
    assert [lang for lang, _ in rule.rule_stream(2)] == ["it", "en", "zh", "es"] * 2
    held = nn.load_heldout()
    assert rule.rule_stream(1, ["en"]) == [("en", held["en"]["prompts"][0])]
    with pytest.raises(ValueError, match="^prompts_per_language: must be an integer >= 1"):
        rule.rule_stream(0)
    with pytest.raises(ValueError, match="^languages: \\['xx'\\]"):
        rule.rule_stream(1, ["xx"])


def test_decoder_costs_are_ratios_of_mean_pass_times():
    passes = {"step_seconds": 0.5, "steps": 50, "verify_seconds": 0.6, "verifications": 25,
              "draft_seconds": 0.02, "draft_steps": 100}
    got = rule.decoder_costs(passes, 4)
    assert got["step_ms"] == pytest.approx(10.0) and got["verify_ms"] == pytest.approx(24.0)
    assert got["c"] == pytest.approx(0.02) and got["g"] == pytest.approx(2.4)
    with pytest.raises(ValueError, match="^passes: no verifications timed"):
        rule.decoder_costs(dict(passes, verifications=0), 4)


def test_paired_run_pairs_every_prompt_and_counts_exactly():
    t, d = _tiny(0, 2), _tiny(1)
    out = rule.paired_decoder_run(t, d, PAIRS, gamma=2, temperature=1.0, repeats=2,
                                  max_new_tokens=5, seed=[3])
    assert out["languages"] == ["en", "it", "en", "it"]
    assert out["tokens"].tolist() == [10.0] * 4
    assert all(out["seconds"][k].shape == (4,) and (out["seconds"][k] > 0).all()
               for k in ("plain", "spec"))
    assert (out["proposed"] == 2 * out["cycles"]).all()         # gamma per cycle
    assert (out["accepted"] <= out["proposed"]).all()
    assert out["passes"]["steps"] == 4 * 2 * 4                   # 4 steps after the first
    assert out["passes"]["verifications"] == out["cycles"].sum()
    assert out["passes"]["draft_steps"] == 2 * out["cycles"].sum()
    # request (k, r) is seeded [seed, k, r]: the counts repeat with the seed
    again = rule.paired_decoder_run(t, d, PAIRS, gamma=2, temperature=1.0, repeats=2,
                                    max_new_tokens=5, seed=[3])
    assert again["accepted"].tolist() == out["accepted"].tolist()
    one = dec.speculative(t, d, [PAIRS[1][1]], 5, 2, np.random.default_rng([3, 1, 0]),
                          dec.SamplingSettings(1.0))
    two = dec.speculative(t, d, [PAIRS[1][1]], 5, 2, np.random.default_rng([3, 1, 1]),
                          dec.SamplingSettings(1.0))
    assert out["accepted"][1] == one.accepted[0] + two.accepted[0]
    for kwargs, name in (({"gamma": 0}, "gamma"), ({"repeats": True}, "repeats"),
                         ({"temperature": 0.0}, "temperature"),
                         ({"max_new_tokens": 2.5}, "max_new_tokens")):
        args = dict(gamma=2, temperature=1.0, repeats=1, max_new_tokens=3, seed=1) | kwargs
        with pytest.raises(ValueError, match=f"^{name}: must be"):
            rule.paired_decoder_run(t, d, PAIRS, **args)
    with pytest.raises(ValueError, match="^pairs: need at least 2"):
        rule.paired_decoder_run(t, d, PAIRS[:1], gamma=2, temperature=1.0, repeats=1,
                                max_new_tokens=3, seed=1)


def test_exactness_check_passes_the_decoder_and_fails_a_broken_one(monkeypatch):
    t, d = _tiny(0, 2), _tiny(1)
    prompts = [p for _, p in PAIRS]
    good = rule.decoder_exactness(t, d, prompts, gamma=2, resolution=0.3, max_tokens=20,
                                  seed=[5])
    assert good["passed"], good["message"]
    assert good["detectable_tv"] <= 0.3
    assert good["requests"] == math.ceil(tokens_for(0.3, false_alarm=1e-6, orderings=4) / 20)

    def draft_only(target, draft, prompts, max_new_tokens, gamma, rng, settings):
        return dec.autoregressive(draft, prompts, max_new_tokens, rng, settings)

    monkeypatch.setattr(rule.dec, "speculative", draft_only)   # emits the draft's law
    bad = rule.decoder_exactness(t, d, prompts, gamma=2, resolution=0.3, max_tokens=20,
                                 seed=[5])
    assert not bad["passed"]
    with pytest.raises(ValueError, match="^resolution: must be"):
        rule.decoder_exactness(t, d, prompts, gamma=2, resolution=0.0, seed=1)
    with pytest.raises(ValueError, match="^prompts: need at least one"):
        rule.decoder_exactness(t, d, [], gamma=2, seed=1)


def test_measure_rule_checks_first_then_times_and_predicts_with_the_cost_model(monkeypatch):
    out = rule.measure_rule("target", "draft", gamma=2, prompts_per_language=1, repeats=1,
                            max_new_tokens=6, resolution=0.5, check_tokens=20, seed=11)
    assert out["exactness"]["passed"] and out["exactness"]["resolution"] == 0.5
    assert out["prompts"] == 4 and len(out["per_prompt"]["plain_seconds"]) == 4
    s = out["speedup"]
    assert s["prompts"] == 4 and s["low"] <= s["speedup"] <= s["high"]
    per = out["per_prompt"]
    want = (sum(per["tokens"]) / sum(per["spec_seconds"])) / \
        (sum(per["tokens"]) / sum(per["plain_seconds"]))
    assert s["speedup"] == pytest.approx(want)
    assert out["acceptance"] == sum(per["accepted"]) / sum(per["proposed"])
    c = out["costs"]
    # the cost model with E as measured: the columns of Appendix F's table give it back
    assert out["tokens_per_pass"] == pytest.approx(sum(per["tokens"]) / sum(per["cycles"]))
    assert out["predicted"] == pytest.approx(out["tokens_per_pass"] / (2 * c["c"] + c["g"]))
    assert out["model_error"] == pytest.approx(out["predicted"] / s["speedup"] - 1)
    assert 1 <= out["tokens_per_pass"] <= 3                            # E <= gamma + 1
    # a decoder that fails its check is never timed
    monkeypatch.setattr(rule, "decoder_exactness",
                        lambda *a, **k: {"passed": False, "message": "moved", "seconds": 0,
                                         "detectable_tv": 0.1})
    with pytest.raises(RuntimeError, match="failed its exactness check: moved"):
        rule.measure_rule("target", "draft", gamma=2, prompts_per_language=1, repeats=1,
                          max_new_tokens=6)


def test_acceptance_by_language_is_rule_acceptance_on_each_language():
    t, d = _tiny(0, 2, context=64), _tiny(1, context=64)
    rows = rule.acceptance_by_language(t, {"d": d, "t": t}, temperatures=(1.0, 0.7),
                                       languages=("en", "zh"))
    assert [(r["draft"], r["temperature"], r["language"]) for r in rows] == \
        [(name, temp, lang) for name in ("d", "t") for temp in (1.0, 0.7)
         for lang in ("en", "zh")]
    held = nn.load_heldout()
    want = rule_acceptance(t, d, [held["zh"]["text"]], 0.7)
    assert rows[3] == {"draft": "d", "language": "zh", **want}
    for r in rows:                  # p(argmax q) <= 1 and sum min(p, q) <= 1
        assert 0 <= r["match"] <= 1 and 0 <= r["rejection"] <= 1
    assert all(r["rejection"] == pytest.approx(1.0) for r in rows[4:])   # a perfect draft
    with pytest.raises(ValueError, match="^languages: \\['xx'\\]"):
        rule.acceptance_by_language(t, {"d": d}, languages=("xx",))


@hsettings(max_examples=50, deadline=None)
@given(e=st.floats(1, 5), c=st.floats(0.001, 0.5), g=st.floats(1, 4),
       gamma=st.integers(1, 8))
def test_break_even_terms_each_make_the_cost_model_one(e, c, g, gamma):
    measured = rule.break_even(e, c, g, gamma, measured=0.9)
    assert measured["overhead"] == pytest.approx(e / 0.9 - g - c * gamma)
    assert measured["E"] == pytest.approx(e / 0.9)          # the cycle as the run priced it
    out = rule.break_even(e, c, g, gamma)
    assert out["predicted"] == pytest.approx(e / (g + c * gamma))
    assert out["E"] / (g + c * gamma) == pytest.approx(1.0)
    assert 1 + gamma * out["acceptance"] == pytest.approx(out["E"])
    if out["g"] > 0:
        assert e / (out["g"] + c * gamma) == pytest.approx(1.0)
    if out["c"] > 0:
        assert e / (g + out["c"] * gamma) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="^c: must be a finite number > 0"):
        rule.break_even(e, 0.0, g, gamma)


def test_decoder_bandwidth_is_weight_bytes_over_the_step():
    out = rule.decoder_bandwidth("draft", steps=8, gamma=2, megabytes=16, repeats=1)
    assert out["gamma"] == 2 and out["products_g"] > 0
    assert out["weight_bytes"] == 4 * nn.load_model("draft").n_parameters
    assert out["achieved_gbs"] == pytest.approx(out["weight_bytes"] / out["step_ms"] / 1e6)
    assert out["share"] == pytest.approx(out["achieved_gbs"] / out["read_gbs"])
    assert out["products_share"] == pytest.approx(out["products_ms"] / out["step_ms"])
    assert out["products_gbs"] == pytest.approx(out["weight_bytes"] / out["products_ms"] / 1e6)
    with pytest.raises(ValueError, match="^steps: must be an integer >= 2"):
        rule.decoder_bandwidth("draft", steps=1)


def test_the_headline_is_fixed_and_today_draft_is_first():
    assert rule.HEADLINE == {"target": "target_large", "draft": "draft", "gamma": 4,
                             "temperature": 1.0, "stream": "mixed", "batch": 1,
                             "break_even": 1.0, "confidence": 0.95}
    assert rule.DRAFTS == ("draft", "draft_distilled")


# --------------------------------------------------- the distillation (train_models.py)
def _train_module():
    name = "train_models_for_growth_tests"           # shared with tests/test_growth.py
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "train_models.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


CORPUS = {lang: (f"{lang} some training text, repeated; " * 20).encode()
          for lang in nn.LANGUAGES}


def test_teacher_samples_are_the_teacher_sampling_with_its_laws():
    tm = _train_module()
    teacher = _tiny(2, 2, context=24)
    tokens, log_p = tm.teacher_samples(CORPUS, teacher, 8, 6, 1.0, 3,
                                       np.random.default_rng(0), log=lambda *_: None)
    assert tokens.shape == (8, 24) and log_p.shape == (8, 18, 256)
    for i, lang in enumerate(nn.LANGUAGES):           # language-major corpus prefixes
        for row in tokens[2 * i:2 * i + 2]:
            assert bytes(row[:6].astype(np.uint8)) in CORPUS[lang]
    # the stored laws are the teacher's laws along its own text (cache vs one pass:
    # float rounding), and every sampled byte had positive probability
    full = dec.SamplingSettings(1.0).laws(
        teacher.forward(tokens[:, :-1]).reshape(-1, 256)).reshape(8, 23, 256)
    assert np.allclose(np.exp(log_p), full[:, 5:], atol=1e-5)
    picked = np.take_along_axis(log_p, tokens[:, 6:, None], axis=2)
    assert np.isfinite(picked).all()
    again, _ = tm.teacher_samples(CORPUS, teacher, 8, 6, 1.0, 4,
                                  np.random.default_rng(0), log=lambda *_: None)
    assert np.array_equal(again[:, :6], tokens[:, :6])            # same seed, same prefixes
    with pytest.raises(ValueError, match="^sequences"):
        tm.teacher_samples(CORPUS, teacher, 6, 6, 1.0, 3, np.random.default_rng(0))


@hsettings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), zero=st.booleans())
def test_forward_kl_is_the_kl_divergence_from_the_teacher(seed, zero):
    torch = pytest.importorskip("torch")
    tm = _train_module()
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(5), size=(2, 3))
    if zero:
        p[..., 0] = 0.0                                       # 0 log 0 = 0
        p /= p.sum(-1, keepdims=True)
    z = rng.standard_normal((2, 3, 5))
    q = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        log_p = np.log(p)
    want = np.mean(np.sum(np.where(p > 0, p * (np.where(p > 0, log_p, 0) - np.log(q)), 0), -1))
    got = float(tm.forward_kl(torch.tensor(z), torch.tensor(log_p)))
    assert got == pytest.approx(want, rel=1e-6, abs=1e-7) and got >= -1e-7  # float32 logits
    assert float(tm.forward_kl(torch.tensor(np.where(p > 0, log_p, -1e30)),
                               torch.tensor(log_p))) == pytest.approx(0.0, abs=1e-6)


def test_break_even_text_says_pays_or_what_would_have_to_change():
    run = {"speedup": {"speedup": 1.3, "low": 1.2, "high": 1.4}, "gamma": 4,
           "tokens_per_pass": 3.0, "acceptance": 0.5, "costs": {"c": 0.05, "g": 2.0}}
    assert rule.break_even_text(run) == "it pays (1.30×, 95% interval 1.20 to 1.40)."
    run["speedup"] = {"speedup": 1.07, "low": 0.99, "high": 1.16}
    assert rule.break_even_text(run) == ("it is not distinguishable from plain decoding "
                                         "(1.07×, 95% interval 0.99 to 1.16): the interval "
                                         "over prompts reaches 1.")
    run["speedup"] = {"speedup": 0.94, "low": 0.9, "high": 0.98}
    text = rule.break_even_text(run)
    assert text.startswith("it loses (0.94×")
    # a cycle cost 3 / 0.94 steps: 2.2 in the passes, the rest other work
    assert "A cycle cost 3.19 target steps for 3.00 tokens: g 2.00, c γ 0.20 and 0.99 of " \
        "other work." in text and "E would have to rise to 3.19" in text
    from specbook.sentences import split_sentences, words
    assert max(words(x) for x in split_sentences(text)) <= 40     # the page's sentence rule
    assert [rule.against_break_even(*x) for x in ((0.8, 0.9), (1.1, 1.2), (0.9, 1.1))] == \
        ["slower", "faster", "not distinguishable"]


def test_the_distilled_draft_is_today_draft_shape_recorded_and_reproducible_on_the_sample():
    manifest = nn.load_manifest()["models"]
    info = manifest["draft_distilled"]
    assert info["architecture"] == manifest["draft"]["architecture"]
    assert info["parameters"] == manifest["draft"]["parameters"]
    dist = info["training"]["distillation"]
    assert (dist["base"], dist["teacher"], dist["temperature"]) == \
        ("draft", "target_large", 1.0)
    assert dist["divergence"].startswith("forward KL")
    model = nn.load_model("draft_distilled")
    held = nn.load_heldout()
    for lang in nn.LANGUAGES:          # the manifest's bits per byte, recomputed
        got = nn.bits_per_byte(model, held[lang]["text"].encode())
        assert got == pytest.approx(info["sample_bits_per_byte"][lang], abs=1e-4)
        assert got < manifest["draft"]["sample_bits_per_byte"][lang]   # closer to the data
