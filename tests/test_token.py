"""Tests for specdec.step: the article's example, edge cases, every rule's exact law."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from specdec.rules import token as tokenrule
from specdec.rules.token import STEP_RULES
from specdec.laws import LawError, check_law, sampling_law, softmax, tv_distance
from specdec.stats import assert_law
from specdec.step import (
    ARTICLE_P,
    ARTICLE_Q,
    StepLaw,
    acceptance_probabilities,
    acceptance_rate,
    accepted_mass,
    logits_ratio_law,
    m_plus_r_raw,
    mixture_law,
    output_law,
    rejection_probability,
    residual,
    sample_step,
    step_law,
)

from strategies import pairs  # noqa: E402

P, Q = np.array(ARTICLE_P), np.array(ARTICLE_Q)


# ------------------------------------------------------------------ the article's example


def test_article_acceptance_and_accepted_mass():
    a = acceptance_probabilities(P, Q)
    assert a[0] == 1.0  # A always accepted
    assert a[1] == pytest.approx(0.6, abs=1e-15)  # B accepted 60% of the time
    assert a[2] == pytest.approx(2 / 3, abs=1e-15)  # C accepted with 2/3
    m = accepted_mass(P, Q)
    np.testing.assert_allclose(m, [0.20, 0.30, 0.20], atol=1e-15)
    np.testing.assert_allclose(Q * a, m, atol=1e-15)  # contribution = proposal x acceptance
    assert Q[2] * (2 / 3) == pytest.approx(0.20, abs=1e-15)


def test_article_beta_z_residual():
    assert acceptance_rate(P, Q) == pytest.approx(0.70, abs=1e-15)
    assert rejection_probability(P, Q) == pytest.approx(0.30, abs=1e-15)
    assert residual(P, Q).tolist() == [1.0, 0.0, 0.0]  # the whole deficit is at A
    np.testing.assert_allclose(P - accepted_mass(P, Q), [0.30, 0.0, 0.0], atol=1e-15)


def test_article_laws():
    np.testing.assert_allclose(output_law(P, Q), P, atol=1e-15)
    wrong = output_law(P, Q, tokenrule.FALLBACK_P)
    np.testing.assert_allclose(wrong, [0.35, 0.39, 0.26], atol=1e-15)
    assert tv_distance(wrong, P) == pytest.approx(0.15, abs=1e-15)
    assert P[0] - wrong[0] == pytest.approx(0.15, abs=1e-15)  # attained on {A}


def test_article_snippet():
    """The article's snippet, transcribed: m + z r = p and m + z p = the flawed law."""
    p, q = list(ARTICLE_P), list(ARTICLE_Q)
    m = [min(x, y) for x, y in zip(p, q)]
    z = 1 - sum(m)
    r = [max(x - y, 0) / z for x, y in zip(p, q)]
    np.testing.assert_allclose([a + z * b for a, b in zip(m, r)], output_law(p, q), atol=1e-15)
    np.testing.assert_allclose([a + z * b for a, b in zip(m, p)], output_law(p, q, tokenrule.FALLBACK_P), atol=1e-15)


def test_article_gallery_values():
    np.testing.assert_allclose(output_law(P, Q, tokenrule.RESAMPLE_Q), [0.26, 0.45, 0.29], atol=1e-15)
    np.testing.assert_allclose(output_law(P, Q, tokenrule.UNCLIPPED_RATIO), P, atol=1e-15)
    # shared uniform is harmless here: the residual has one support point
    np.testing.assert_allclose(output_law(P, Q, tokenrule.SHARED_UNIFORM), P, atol=1e-15)
    np.testing.assert_allclose(m_plus_r_raw(P, Q), [1.2, 0.3, 0.2], atol=1e-15)
    np.testing.assert_allclose(output_law(P, Q, tokenrule.M_PLUS_R), np.array([1.2, 0.3, 0.2]) / 1.7, atol=1e-15)
    # drop_rejected: rejections of B (0.2) redraw from (A, C) = (5/7, 2/7); of C (0.1) from (5/8, 3/8)
    expected = np.array([0.2 + 0.2 * 5 / 7 + 0.1 * 5 / 8, 0.3 + 0.1 * 3 / 8, 0.2 + 0.2 * 2 / 7])
    np.testing.assert_allclose(output_law(P, Q, tokenrule.DROP_REJECTED), expected, atol=1e-15)
    # inverted: accept with min(1, q/p) = (0.4, 1, 1) -> A keeps 0.08, rejection mass 0.12 goes to A
    np.testing.assert_allclose(output_law(P, Q, tokenrule.INVERTED_RATIO), [0.2, 0.5, 0.3], atol=1e-15)


def test_step_law_record():
    s = step_law(P, Q)
    assert isinstance(s, StepLaw)
    assert s.beta == pytest.approx(0.7) and s.z == pytest.approx(0.3)
    np.testing.assert_allclose(s.law, P, atol=1e-15)
    with pytest.raises(ValueError):
        s.m[0] = 1.0  # read-only
    with pytest.raises(AttributeError):
        s.z = 0.0  # frozen


# ------------------------------------------------------------------ edge cases


def test_equal_laws_no_residual_branch():
    p = np.array([0.1, 0.6, 0.3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            assert rejection_probability(p, p) == 0.0
            np.testing.assert_array_equal(residual(p, p), p)  # documented convention
            np.testing.assert_array_equal(acceptance_probabilities(p, p), [1.0, 1.0, 1.0])
            for rule in STEP_RULES:
                # with Z = 0 every rule is exact, even m + r (= 2p, normalised)
                np.testing.assert_allclose(output_law(p, p, rule), p, atol=1e-15)


def test_never_proposed_token_reaches_output_through_residual():
    p = np.array([0.5, 0.25, 0.25])
    q = np.array([0.5, 0.5, 0.0])
    with np.errstate(all="raise"):
        a = acceptance_probabilities(p, q)
        assert a.tolist() == [1.0, 0.5, 1.0]  # 1 by convention where q == 0
        assert residual(p, q).tolist() == [0.0, 0.0, 1.0]
        np.testing.assert_allclose(output_law(p, q), p, atol=1e-15)
    rng = np.random.default_rng(0)
    assert {sample_step(p, q, rng) for _ in range(200)} == {0, 1, 2}


def test_zero_target_mass_is_never_emitted_by_correct_rule():
    p = np.array([0.0, 1.0])
    q = np.array([0.9, 0.1])
    np.testing.assert_allclose(output_law(p, q), p)
    assert acceptance_probabilities(p, q)[0] == 0.0
    # the inverted ratio emits the forbidden token whenever it is proposed
    assert output_law(p, q, tokenrule.INVERTED_RATIO)[0] == pytest.approx(0.9)


def test_single_token_vocabulary():
    for rule in STEP_RULES:
        assert output_law([1.0], [1.0], rule).tolist() == [1.0]
    assert sample_step([1.0], [1.0], np.random.default_rng(0)) == 0


def test_validation_messages():
    with pytest.raises(LawError, match=r"^q: vocabulary size 4 does not match p \(3\)$"):
        output_law(P, [0.25] * 4)
    with pytest.raises(LawError, match=r"^p: probabilities must sum to 1"):
        residual([0.5, 0.3, 0.1], Q)
    with pytest.raises(TypeError, match=r"^rule: must be a token-by-token rule of specdec.rules.token"):
        output_law(P, Q, "fallback_p")
    with pytest.raises(TypeError, match=r"^rng: must be a numpy.random.Generator"):
        sample_step(P, Q, np.random.RandomState(0))


# ------------------------------------------------------------------ mixture_law


def test_mixture_law_row_recovery_and_unused_rows():
    q = np.array([0.5, 0.5, 0.0])
    accept = np.array([1.0, 0.5, 0.0])
    rec = np.array([[np.nan, np.nan, np.nan], [0.0, 0.0, 1.0], [np.nan, 0.0, 0.0]])
    np.testing.assert_allclose(mixture_law(q, accept, rec), [0.5, 0.25, 0.25])


@pytest.mark.parametrize(
    "accept, recovery, fragment",
    [
        ([1.0, 1.2], [0.5, 0.5], "accept: acceptance probabilities must be finite and in [0, 1]"),
        ([1.0], [0.5, 0.5], "accept: must have shape (2,)"),
        ([0.5, 0.5], [0.5, 0.4], "recovery: probabilities must sum to 1"),
        ([0.5, 0.5], [1.0], "recovery: vocabulary size 1 does not match q_propose (2)"),
        ([0.5, 0.5], [[1.0, 0.0], [0.2, 0.2]], "recovery[1]: probabilities must sum to 1"),
        ([0.5, 0.5], np.ones((2, 2, 2)), "recovery: must have shape (2,) or (2, 2)"),
    ],
)
def test_mixture_law_errors(accept, recovery, fragment):
    with pytest.raises(LawError) as err:
        mixture_law([0.5, 0.5], accept, recovery)
    assert fragment in str(err.value)


# ------------------------------------------------------------------ properties for all laws


@settings(max_examples=150, deadline=None)
@given(pairs())
def test_correct_rule_preserves_p(pq):
    p, q = pq
    with np.errstate(all="raise"):
        law = output_law(p, q)
        s = step_law(p, q)
    np.testing.assert_allclose(law, p, atol=1e-12)
    np.testing.assert_allclose(s.m + s.z * s.residual, p, atol=1e-12)
    assert s.beta + s.z == pytest.approx(1.0, abs=1e-12)
    assert s.beta == pytest.approx(1.0 - tv_distance(p, q), abs=1e-12)
    check_law(s.residual, atol=1e-12)
    assert np.all(s.residual[p <= q] == 0) or s.z == 0


@settings(max_examples=150, deadline=None)
@given(pairs())
def test_every_rule_gives_a_law(pq):
    p, q = pq
    for rule in STEP_RULES:
        check_law(output_law(p, q, rule), name=rule.name, atol=1e-12)


@settings(max_examples=150, deadline=None)
@given(pairs())
def test_fallback_p_identity(pq):
    """law - p = Z (p - r) and TV(law, p) = Z TV(p, r)."""
    p, q = pq
    z, r = rejection_probability(p, q), residual(p, q)
    law = output_law(p, q, tokenrule.FALLBACK_P)
    np.testing.assert_allclose(law - p, z * (p - r), atol=1e-12)
    assert tv_distance(law, p) == pytest.approx(z * tv_distance(p, r), abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(pairs())
def test_resample_q_identity(pq):
    p, q = pq
    z, r = rejection_probability(p, q), residual(p, q)
    np.testing.assert_allclose(output_law(p, q, tokenrule.RESAMPLE_Q) - p, z * (q - r), atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(pairs())
def test_unclipped_ratio_is_harmless(pq):
    p, q = pq
    np.testing.assert_allclose(output_law(p, q, tokenrule.UNCLIPPED_RATIO), output_law(p, q), atol=1e-15)


@settings(max_examples=100, deadline=None)
@given(pairs())
def test_m_plus_r_raw_sums_to_one_plus_beta(pq):
    p, q = pq
    raw = m_plus_r_raw(p, q)
    assert raw.sum() == pytest.approx(1.0 + acceptance_rate(p, q), abs=1e-12)
    np.testing.assert_allclose(output_law(p, q, tokenrule.M_PLUS_R), raw / raw.sum(), atol=1e-15)
    # it matches p only when r == p, i.e. m proportional to p
    law = output_law(p, q, tokenrule.M_PLUS_R)
    assert tv_distance(law, p) == pytest.approx(
        tv_distance((accepted_mass(p, q) + residual(p, q)) / raw.sum(), p), abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(pairs())
def test_drop_rejected_formula(pq):
    p, q = pq
    a = acceptance_probabilities(p, q)
    expected = np.minimum(p, q).copy()
    for x in range(p.size):
        w = q[x] * (1 - a[x])
        if w > 0:
            rest = p.copy()
            rest[x] = 0.0
            expected += w * rest / rest.sum()
    np.testing.assert_allclose(output_law(p, q, tokenrule.DROP_REJECTED), expected, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(pairs())
def test_shared_uniform_exact_by_quadrature(pq):
    """Integrate the shared-uniform procedure over a fine grid of u and compare."""
    p, q = pq
    a, r = acceptance_probabilities(p, q), residual(p, q)
    cdf = np.cumsum(r)
    cdf[np.flatnonzero(r > 0)[-1]:] = 1.0
    n = 20_000
    u = (np.arange(n) + 0.5) / n
    law = np.zeros(p.size)
    for x in np.flatnonzero(q > 0):
        out = np.where(u < a[x], x, np.searchsorted(cdf, u, side="right"))
        law += q[x] * np.bincount(out, minlength=p.size) / n
    np.testing.assert_allclose(output_law(p, q, tokenrule.SHARED_UNIFORM), law, atol=2 * p.size / n)


@settings(max_examples=100, deadline=None)
@given(pairs())
def test_shared_uniform_harmless_iff_residual_has_one_point(pq):
    p, q = pq
    law = output_law(p, q, tokenrule.SHARED_UNIFORM)
    if (residual(p, q) > 0).sum() <= 1:
        np.testing.assert_allclose(law, p, atol=1e-12)


def test_shared_uniform_wrong_with_two_residual_points():
    p = np.array([0.3, 0.1, 0.35, 0.25])
    q = np.array([0.4, 0.3, 0.1, 0.2])
    # residual on {2, 3} = (0.25, 0.05)/0.3; rejections carry u in [a(x), 1) with a = (0.75, 1/3)
    # x = 0: u in [0.75, 1) -> token 3 only when u >= 5/6: P = (1/6)/(1/4) = 2/3 vs 1/6
    law = output_law(p, q, tokenrule.SHARED_UNIFORM)
    expected = np.minimum(p, q).copy()
    expected[2] += 0.1 * (1 / 3) + 0.2 * ((5 / 6 - 1 / 3) / (2 / 3))
    expected[3] += 0.1 * (2 / 3) + 0.2 * ((1 - 5 / 6) / (2 / 3))
    np.testing.assert_allclose(law, expected, atol=1e-12)
    assert tv_distance(law, p) == pytest.approx(0.2 / 3, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(pairs())
def test_flawed_rules_deviate_only_where_theory_says(pq):
    p, q = pq
    z = rejection_probability(p, q)
    r = residual(p, q)
    if z == 0:  # no rejection: every rule except the inverted ratio is exact
        for rule in (tokenrule.FALLBACK_P, tokenrule.RESAMPLE_Q, tokenrule.DROP_REJECTED, tokenrule.SHARED_UNIFORM):
            np.testing.assert_allclose(output_law(p, q, rule), p, atol=1e-12)
    else:
        for rule, other in ((tokenrule.FALLBACK_P, p), (tokenrule.RESAMPLE_Q, q)):
            if tv_distance(other, r) > 1e-6:  # recovering from a law other than r is visible
                assert tv_distance(output_law(p, q, rule), p) > 0.5e-6 * z


# ------------------------------------------------------------------ logits and the ratio


def test_logits_ratio_on_processed_is_exact():
    t = np.array([2.0, 1.0, 0.5, -1.0, 0.0])
    d = np.array([0.0, 1.5, 0.5, 1.0, -2.0])
    for settings_ in ({}, {"temperature": 0.7}, {"top_k": 3}, {"top_p": 0.8}, {"temperature": 0.0},
                      {"temperature": 1.3, "top_k": 4, "top_p": 0.9}):
        np.testing.assert_allclose(logits_ratio_law(t, d, **settings_), sampling_law(t, **settings_),
                                   atol=1e-12)


def test_raw_softmax_equals_processed_without_processing():
    t = np.array([2.0, 1.0, 0.5])
    d = np.array([0.0, 1.5, 0.5])
    np.testing.assert_allclose(logits_ratio_law(t, d, ratio_on="raw_softmax"), softmax(t), atol=1e-12)


def test_raw_softmax_with_top_k_leaks_mass_outside_the_target_support():
    t = np.array([3.0, 2.0, 0.0, 1.0])
    d = np.array([0.0, 2.0, 3.0, 1.0])
    p = sampling_law(t, top_k=2)
    law = logits_ratio_law(t, d, ratio_on="raw_softmax", top_k=2)
    assert law[p == 0].sum() > 0 or tv_distance(law, p) > 0.01
    assert tv_distance(law, p) > 0.01


def test_exp_logits_depends_on_partition_functions():
    t = np.array([1.0, 0.0, 0.0])
    d = np.array([0.0, 1.0, 1.0])
    p = softmax(t)
    law = logits_ratio_law(t, d, ratio_on="exp_logits")
    assert tv_distance(law, p) > 0.05
    # shifting the draft logits changes nothing in the processed laws but changes this law
    shifted = logits_ratio_law(t, d + 2.0, ratio_on="exp_logits")
    assert tv_distance(shifted, law) > 0.01
    # no overflow for huge logits
    check_law(logits_ratio_law(t + 800, d + 800, ratio_on="exp_logits"))


def test_exp_logits_equal_partition_functions_is_exact():
    t = np.array([1.0, 0.0, 0.5])
    d = np.array([0.5, 1.0, 0.0])  # same multiset of logits: equal partition functions
    np.testing.assert_allclose(logits_ratio_law(t, d, ratio_on="exp_logits"), softmax(t), atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, 5, elements=st.floats(-5, 5)), arrays(np.float64, 5, elements=st.floats(-5, 5)),
       st.sampled_from(["processed", "raw_softmax", "exp_logits"]), st.floats(0.2, 2.0),
       st.one_of(st.none(), st.integers(1, 5)))
def test_logits_ratio_law_is_a_law(t, d, ratio_on, temperature, k):
    law = logits_ratio_law(t, d, ratio_on=ratio_on, temperature=temperature, top_k=k)
    check_law(law, atol=1e-12)
    if ratio_on == "processed":
        np.testing.assert_allclose(law, sampling_law(t, temperature=temperature, top_k=k), atol=1e-12)


def test_logits_ratio_law_errors():
    with pytest.raises(ValueError, match="^ratio_on: must be one of processed, raw_softmax, exp_logits"):
        logits_ratio_law([0.0, 1.0], [1.0, 0.0], ratio_on="logits")
    with pytest.raises(LawError, match=r"draft_logits: vocabulary size 3 does not match target_logits \(2\)"):
        logits_ratio_law([0.0, 1.0], [1.0, 0.0, 0.0])


# ------------------------------------------------------------------ accept test and samplers


@pytest.mark.parametrize("rule", STEP_RULES)
def test_sample_step_follows_output_law(rule):
    p = np.array([0.3, 0.1, 0.35, 0.25])
    q = np.array([0.4, 0.3, 0.1, 0.2])
    rng = np.random.default_rng(STEP_RULES.index(rule) + 100)
    n = 6_000
    counts = np.bincount([sample_step(p, q, rng, rule) for _ in range(n)], minlength=4)
    assert_law(counts, output_law(p, q, rule), false_alarm=1e-9)


def test_sample_step_detects_fallback_bias():
    rng = np.random.default_rng(7)
    counts = np.bincount([sample_step(P, Q, rng, tokenrule.FALLBACK_P) for _ in range(6_000)], minlength=3)
    with pytest.raises(AssertionError):
        assert_law(counts, P, false_alarm=1e-9)


@settings(max_examples=30, deadline=None)
@given(pairs(), st.sampled_from(STEP_RULES), st.integers(0, 2**32 - 1))
def test_sample_step_emits_only_tokens_with_positive_law(pq, rule, seed):
    p, q = pq
    law = output_law(p, q, rule)
    rng = np.random.default_rng(seed)
    for _ in range(20):
        assert law[sample_step(p, q, rng, rule)] > 0


# ------------------------------------------------------------------ large vocabularies


@pytest.mark.parametrize("rule", [tokenrule.DROP_REJECTED, tokenrule.SHARED_UNIFORM])
def test_flawed_laws_need_o_v_memory_at_a_million_tokens(rule):
    """The 4-token example padded with 999,996 tokens of probability 0: the law is the
    small one, padded, and the peak memory is a few arrays of V floats (no V x V)."""
    import tracemalloc

    p4 = np.array([0.3, 0.1, 0.35, 0.25])
    q4 = np.array([0.4, 0.3, 0.1, 0.2])
    v = 10**6
    p, q = np.zeros(v), np.zeros(v)
    p[[0, 10, 500_000, v - 1]] = p4
    q[[0, 10, 500_000, v - 1]] = q4
    tracemalloc.start()
    law = output_law(p, q, rule)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 40 * 8 * v            # tens of vectors of V float64, not V x V
    small = output_law(p4, q4, rule)
    np.testing.assert_allclose(law[[0, 10, 500_000, v - 1]], small, atol=1e-15)
    assert law.sum() == pytest.approx(1.0, abs=1e-12)


def test_every_flaw_is_a_named_frozen_object_with_a_docstring():
    names = [rule.name for rule in STEP_RULES]
    assert len(set(names)) == len(names) and names[0] == "correct"
    assert [r.exact for r in STEP_RULES] == [r.name in ("correct", "unclipped_ratio") for r in STEP_RULES]
    for rule in STEP_RULES:
        assert type(rule).__doc__ and repr(rule) == rule.name
        with pytest.raises(AttributeError):
            rule.name = "other"
