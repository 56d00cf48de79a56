"""Tests for specdec.laws: validation messages, TV distance, softmax, sampling laws."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from specdec.laws import (
    LawError,
    check_int,
    check_real,
    check_law,
    check_pair,
    sampling_law,
    softmax,
    tv_distance,
)

# ------------------------------------------------------------------ strategies


from strategies import laws, logit_vectors  # noqa: E402


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    "value, fragment",
    [
        ([0.5, float("nan"), 0.5], "p: entries must be finite (found nan at index 1)"),
        ([0.5, float("inf")], "p: entries must be finite (found inf at index 1)"),
        ([1.1, -0.1], "p: entries must be non-negative (found -0.1 at index 1)"),
        ([0.5, 0.4], "p: probabilities must sum to 1 within atol=1e-09 (sum = 0.9)"),
        ([[0.5, 0.5]], "p: must be a 1-D probability vector (got ndim 2"),
        ([], "p: must not be empty"),
        (0.5, "p: must be a 1-D probability vector (got ndim 0"),
        (["a", "b"], "p: must be a 1-D array of real numbers"),
    ],
)
def test_check_law_messages(value, fragment):
    with pytest.raises(LawError) as err:
        check_law(value)
    assert fragment in str(err.value)


def test_check_law_is_a_value_error_naming_the_argument():
    with pytest.raises(ValueError, match=r"^q: probabilities must sum to 1"):
        check_law([0.2, 0.2], name="q")


def test_check_law_returns_float64_copy_unchanged():
    src = np.array([0.25, 0.75], dtype=np.float32)
    out = check_law(src)
    assert out.dtype == np.float64 and out.tolist() == [0.25, 0.75]
    out[0] = 9
    assert src[0] == np.float32(0.25)


def test_check_law_atol():
    check_law([0.5, 0.5 + 1e-10])
    with pytest.raises(LawError, match="sum to 1"):
        check_law([0.5, 0.5 + 1e-6])
    check_law([0.5, 0.5 + 1e-6], atol=1e-5)


def test_check_pair_size_mismatch_message():
    with pytest.raises(LawError, match=r"^q: vocabulary size 4 does not match p \(3\)$"):
        check_pair([0.5, 0.3, 0.2], [0.25] * 4)
    with pytest.raises(LawError, match=r"^draft: vocabulary size 2 does not match target \(3\)"):
        check_pair([0.5, 0.3, 0.2], [0.5, 0.5], names=("target", "draft"))


def test_check_pair_validates_each_argument_by_name():
    with pytest.raises(LawError, match=r"^q: entries must be non-negative"):
        check_pair([0.5, 0.5], [1.5, -0.5])


@pytest.mark.parametrize(
    "value, kwargs, error, message",
    [
        (0, {}, ValueError, "gamma: must be an integer >= 1 (got 0)"),
        (2.5, {}, ValueError, "gamma: must be an integer >= 1 (got 2.5)"),
        (True, {}, TypeError, "gamma: must be an integer >= 1 (got True)"),
        ("3", {}, TypeError, "gamma: must be an integer >= 1 (got '3')"),
        (None, {}, TypeError, "gamma: must be an integer >= 1 (got None)"),
        (float("nan"), {}, ValueError, "gamma: must be an integer >= 1 (got nan)"),
        (17, {"maximum": 16}, ValueError, "gamma: must be an integer in [1, 16] (got 17)"),
        (-1, {"minimum": 0}, ValueError, "gamma: must be an integer >= 0 (got -1)"),
    ],
)
def test_check_int_messages(value, kwargs, error, message):
    """gamma, trials, seeds are not laws: ValueError (TypeError for a non-number), never LawError."""
    with pytest.raises(error) as err:
        check_int(value, "gamma", **kwargs)
    assert type(err.value) is error
    assert str(err.value) == message


@pytest.mark.parametrize("value, interval, error", [
    (0.0, "(0, 1]", ValueError), (1.5, "(0, 1]", ValueError), (float("nan"), "[0, 1]", ValueError),
    (1.0, "[0, 1)", ValueError), ("x", "(0, 1]", ValueError), (None, "(0, 1]", TypeError),
])
def test_check_real_names_the_argument_and_interval(value, interval, error):
    with pytest.raises(error, match=rf"^top_p: must be (a real number )?in {re.escape(interval)}") as err:
        check_real(value, "top_p", interval)
    assert type(err.value) is error


def test_check_real_accepts_the_closed_ends():
    assert check_real(1, "top_p", "(0, 1]") == 1.0 and check_real(0, "x", "[0, 1)") == 0.0


def test_check_int_accepts_integral_values():
    assert check_int(np.int64(7), "trials") == 7
    assert check_int(2e5, "trials") == 200_000
    assert type(check_int(np.int32(3), "gamma")) is int
    assert check_int(-5, "seed", minimum=None) == -5


# ------------------------------------------------------------------ TV distance


def test_tv_article_value():
    assert tv_distance([0.5, 0.3, 0.2], [0.35, 0.39, 0.26]) == pytest.approx(0.15, abs=1e-15)
    assert tv_distance([1.0, 0.0], [0.0, 1.0]) == 1.0


def test_tv_validates():
    with pytest.raises(LawError, match="q: vocabulary size"):
        tv_distance([0.5, 0.5], [1.0, 0.0, 0.0])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_tv_is_max_over_events(data):
    p = data.draw(laws(max_size=6))
    q = data.draw(laws(size=p.size))
    tv = tv_distance(p, q)
    subsets = [[i for i in range(p.size) if (s >> i) & 1] for s in range(2**p.size)]
    best = max(abs(p[s].sum() - q[s].sum()) for s in subsets)
    assert tv == pytest.approx(best, abs=1e-12)
    assert 0.0 <= tv <= 1.0 + 1e-12
    assert tv == pytest.approx(tv_distance(q, p), abs=1e-15)


# ------------------------------------------------------------------ softmax


def test_softmax_values_and_masking():
    np.testing.assert_allclose(softmax([0.0, math.log(3.0)]), [0.25, 0.75])
    np.testing.assert_allclose(softmax([0.0, math.log(3.0)], temperature=0.5), [0.1, 0.9])
    assert softmax([1000.0, 1000.0]).tolist() == [0.5, 0.5]  # no overflow
    assert softmax([0.0, -np.inf, 1.0])[1] == 0.0


@pytest.mark.parametrize(
    "logits, temperature, error, fragment",
    [
        ([0.0, np.nan], 1.0, LawError, "logits: entries must be finite or -inf"),
        ([0.0, np.inf], 1.0, LawError, "logits: entries must be finite or -inf"),
        ([-np.inf, -np.inf], 1.0, LawError, "logits: at least one entry must be finite"),
        ([0.0, 1.0], 0.0, ValueError, "temperature: must be finite and > 0"),
        ([0.0, 1.0], -1.0, ValueError, "temperature: must be finite and > 0"),
        ([0.0, 1.0], "hot", ValueError, "temperature: must be a real number"),
        ([0.0, 1.0], None, TypeError, "temperature: must be a real number"),
        ([], 1.0, LawError, "logits: must not be empty"),
    ],
)
def test_softmax_errors(logits, temperature, error, fragment):
    """Logits define a law (LawError); the temperature is a setting (ValueError, TypeError)."""
    with pytest.raises(error, match=fragment) as err:
        softmax(logits, temperature)
    assert type(err.value) is error


@settings(max_examples=60, deadline=None)
@given(logit_vectors, st.floats(0.05, 5.0))
def test_softmax_is_a_law_and_shift_invariant(z, t):
    law = softmax(z, t)
    check_law(law)
    np.testing.assert_allclose(softmax(z + 3.0, t), law, atol=1e-12)


# ------------------------------------------------------------------ sampling_law


def test_sampling_law_default_is_softmax():
    z = [1.0, 2.0, 0.5]
    np.testing.assert_allclose(sampling_law(z), softmax(z))


def test_greedy_is_one_hot_first_argmax():
    assert sampling_law([1.0, 3.0, 3.0], temperature=0).tolist() == [0.0, 1.0, 0.0]
    assert sampling_law([5.0, 3.0, 9.0], temperature=0, mask=[True, True, False]).tolist() == [1.0, 0.0, 0.0]


def test_top_k_ties_keep_lower_ids():
    law = sampling_law([1.0, 2.0, 2.0, 2.0], top_k=2)
    assert law.tolist() == [0.0, 0.5, 0.5, 0.0]


def test_top_k_keeps_k_largest():
    z = np.array([0.1, 3.0, -1.0, 2.0, 0.5])
    expected = np.zeros(5)
    expected[[1, 3]] = softmax([3.0, 2.0])
    np.testing.assert_allclose(sampling_law(z, top_k=2), expected)


def test_top_p_smallest_prefix_reaching_mass():
    z = np.log([0.5, 0.3, 0.2])
    assert sampling_law(z, top_p=0.5).tolist() == [1.0, 0.0, 0.0]
    np.testing.assert_allclose(sampling_law(z, top_p=0.51), [0.625, 0.375, 0.0])
    np.testing.assert_allclose(sampling_law(z, top_p=0.8), [0.625, 0.375, 0.0])  # 0.5 + 0.3 reaches 0.8
    np.testing.assert_allclose(sampling_law(z, top_p=0.81), [0.5, 0.3, 0.2])
    np.testing.assert_allclose(sampling_law(z, top_p=1.0), [0.5, 0.3, 0.2])


def test_order_mask_temperature_top_k_top_p():
    z = np.array([2.0, 1.0, 0.0, 3.0])
    # mask removes token 3; temperature 0.5; top-k 2 keeps 0 and 1; top-p 0.9 keeps both
    law = sampling_law(z, temperature=0.5, top_k=2, top_p=0.9, mask=[True, True, True, False])
    expected = softmax([4.0, 2.0])
    np.testing.assert_allclose(law, [expected[0], expected[1], 0.0, 0.0])
    # top-p applies to the law renormalised after top-k
    law = sampling_law(z, temperature=0.5, top_k=2, top_p=0.85, mask=[True, True, True, False])
    assert law.tolist() == [1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "kwargs, error, fragment",
    [
        ({"top_k": 0}, ValueError, "top_k: must be an integer in [1, 3] (got 0)"),
        ({"top_k": 4}, ValueError, "top_k: must be an integer in [1, 3] (got 4)"),
        ({"top_k": "2"}, TypeError, "top_k: must be an integer in [1, 3] (got '2')"),
        ({"top_p": 0.0}, ValueError, "top_p: must be in (0, 1] (got 0.0)"),
        ({"top_p": 1.5}, ValueError, "top_p: must be in (0, 1] (got 1.5)"),
        ({"temperature": -0.1}, ValueError, "temperature: must be finite and >= 0"),
        ({"temperature": np.inf}, ValueError, "temperature: must be finite and >= 0"),
        ({"mask": [True, False]}, ValueError, "mask: must have shape (3,)"),
        ({"mask": [1, 0, 1]}, TypeError, "mask: must be boolean"),
        ({"mask": [False, False, False]}, LawError, "mask: removes every token"),
    ],
)
def test_sampling_law_errors(kwargs, error, fragment):
    """Settings that are not laws raise ValueError or TypeError; an empty law is a LawError."""
    with pytest.raises(error) as err:
        sampling_law([0.0, 1.0, 2.0], **kwargs)
    assert type(err.value) is error
    assert fragment in str(err.value)


@settings(max_examples=80, deadline=None)
@given(
    logit_vectors,
    st.one_of(st.just(0.0), st.floats(0.1, 3.0)),
    st.one_of(st.none(), st.integers(1, 8)),
    st.one_of(st.none(), st.floats(0.05, 1.0)),
)
def test_sampling_law_properties(z, t, k, top_p):
    k = None if k is None else min(k, z.size)
    law = sampling_law(z, temperature=t, top_k=k, top_p=top_p)
    check_law(law)
    kept = law > 0
    assert kept.sum() >= 1
    if k is not None:
        assert kept.sum() <= k
    if t == 0:
        assert law.max() == 1.0 and int(np.argmax(law)) == int(np.argmax(z))
    # kept tokens are a top set of the logits; distinct logits can still tie once they
    # are turned into probabilities (e.g. 0 and 1e-278), and ties go to the lower id
    order = np.argsort(-z, kind="stable")
    kept_sorted = kept[order]
    tempered = sampling_law(z, temperature=t) if t > 0 else z
    assert not np.any(~kept_sorted[:-1] & kept_sorted[1:]) or np.unique(tempered).size < z.size
