"""The decoders' sampling settings: the vectorised laws equal the one-vector rule exactly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from specdec import decode as dec
from specdec.laws import LawError

logit = st.one_of(st.floats(-30.0, 30.0, width=32), st.just(-np.inf))


@st.composite
def logit_rows(draw):
    n = draw(st.integers(1, 5))
    v = draw(st.integers(1, 40))
    z = draw(arrays(np.float32, (n, v), elements=logit))
    z[:, draw(st.integers(0, v - 1))] = draw(st.floats(-30.0, 30.0, width=32))  # one finite
    return z


@settings(max_examples=300, deadline=None)
@given(logit_rows(),
       st.sampled_from([1.0, 0.5, 0.7, 1.3, 2.0]))
def test_laws_equal_law_row_by_row_plain_temperature(z, temperature):
    s = dec.SamplingSettings(temperature=temperature)
    out = s.laws(z)
    assert out.shape == z.shape and out.dtype == np.float64
    assert np.array_equal(out, np.stack([s.law(row) for row in z]))   # bit for bit
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=0, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(logit_rows(), st.sampled_from([
    dict(temperature=0), dict(top_k=1), dict(top_k=3), dict(top_p=0.5),
    dict(temperature=0.8, top_k=2, top_p=0.9)]))
def test_laws_equal_law_row_by_row_other_settings(z, kw):
    if "top_k" in kw:
        kw = dict(kw, top_k=min(kw["top_k"], z.shape[1]))
    s = dec.SamplingSettings(**kw)
    assert np.array_equal(s.laws(z), np.stack([s.law(row) for row in z]))


def test_laws_errors_name_the_row():
    s = dec.SamplingSettings()
    z = np.zeros((3, 4))
    z[2, 1] = np.nan
    with pytest.raises(LawError, match=r"logits: row 2: .*finite or -inf"):
        s.laws(z)
    z = np.zeros((2, 4))
    z[1] = -np.inf
    with pytest.raises(LawError, match=r"logits: row 1: .*at least one entry must be finite"):
        s.laws(z)
    with pytest.raises(LawError, match=r"logits: must have shape \(N, V\)"):
        s.laws(np.zeros(4))


def test_stepwise_is_seeded_sized_and_refuses_bad_input_by_name():
    from specdec import nn
    from specdec.rules import token as tokenrule

    target = nn.Transformer.random(nn.TransformerConfig(1, 8, 2, 16), np.random.default_rng(0), "t")
    draft = nn.Transformer.random(nn.TransformerConfig(1, 8, 2, 16), np.random.default_rng(1), "d")
    a = dec.stepwise(target, draft, ["ab", "cde"], 5, tokenrule.TOKEN, np.random.default_rng(3))
    b = dec.stepwise(target, draft, ["ab", "cde"], 5, tokenrule.TOKEN, np.random.default_rng(3))
    assert a == b and [len(t) for t in a] == [5, 5]
    assert all(0 <= x < 256 for t in a for x in t)
    with pytest.raises(ValueError, match="max_new_tokens"):
        dec.stepwise(target, draft, ["ab"], 0, tokenrule.TOKEN, 0)
    with pytest.raises(ValueError, match="max_new_tokens: prompt"):
        dec.stepwise(target, draft, ["abcdefghij"], 7, tokenrule.TOKEN, 0)   # 17 > 16
    with pytest.raises((TypeError, ValueError), match="rule"):
        dec.stepwise(target, draft, ["ab"], 2, "correct", 0)
