"""Exactness on the real models: speculative decoding samples the target's law.

For a held-out prompt, the law of the first one or two tokens of target-only sampling
is computed exactly from the target's logits (:func:`specdec.decode.target_sequence_law`).
Many independent speculative decodes of the same prompt (one batched call, one request
per row) are then counted and checked with :func:`specdec.stats.assert_law`, whose
false-alarm probability is 1e-9 for any number of trials and any seed: a correct decoder
fails this test with probability at most 1e-9 per case. Cells with an expected count
below 5 are pooled into one cell (pooling is a fixed function of the tokens, so the pooled
counts follow the pooled law exactly and the bound still holds).
"""

from __future__ import annotations

import numpy as np
import pytest

from specdec import decode as dec
from specdec import nn, stats
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
