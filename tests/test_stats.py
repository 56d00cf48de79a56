"""Tests for specdec.stats: article numbers, calibration of the checks, power."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from specdec.stats import gof as kitstats
from specdec.rules import token as tokenrule
from specdec.laws import LawError
from specdec.stats import (
    GofResult,
    TvInterval,
    assert_law,
    detection_threshold,
    frequency_band,
    gof_test,
    law_pvalue,
    max_deviation_bound,
    standard_error,
    trials_to_detect,
    tv_ci,
    z_scores,
)
from specdec.step import ARTICLE_P, ARTICLE_Q, output_law

P = np.array(ARTICLE_P)
CORRECT = [100018, 59688, 40294]
WRONG = [70010, 77662, 52328]


# ------------------------------------------------------------------ standard errors and z


def test_article_standard_error():
    assert standard_error(0.5, 200_000) == pytest.approx(math.sqrt(0.25 / 200_000))
    assert round(standard_error(0.5, 200_000), 5) == 0.00112
    np.testing.assert_allclose(standard_error(P, 100), np.sqrt(P * (1 - P) / 100))
    assert standard_error(0.0, 10) == 0.0


def test_standard_error_errors():
    with pytest.raises(ValueError, match="n: must be an integer >= 1"):
        standard_error(0.5, 0)
    with pytest.raises(ValueError, match="prob: must be probabilities"):
        standard_error(1.5, 10)


def test_z_scores_article():
    z = z_scores(CORRECT, P)
    expected = (np.array(CORRECT) / 200_000 - P) / np.sqrt(P * (1 - P) / 200_000)
    np.testing.assert_allclose(z, expected)
    assert np.all(np.abs(z) < 2)
    assert np.all(np.abs(z_scores(WRONG, P)) > 40)


def test_z_scores_degenerate_cells():
    z = z_scores([5, 0, 5], [0.5, 0.0, 0.5])
    assert z.tolist() == [0.0, 0.0, 0.0]
    z = z_scores([4, 1, 5], [0.5, 0.0, 0.5])
    assert z[1] == math.inf


def test_counts_validation():
    with pytest.raises(LawError, match="counts: entries must be non-negative integers"):
        z_scores([1.5, 2], [0.5, 0.5])
    with pytest.raises(LawError, match="counts: entries must be non-negative integers"):
        z_scores([-1, 2], [0.5, 0.5])
    with pytest.raises(LawError, match=r"counts: vocabulary size 3 does not match law \(2\)"):
        z_scores([1, 2, 3], [0.5, 0.5])
    with pytest.raises(LawError, match="counts: must contain at least one trial"):
        gof_test([0, 0], [0.5, 0.5])
    with pytest.raises(LawError, match="law: probabilities must sum to 1"):
        assert_law([1, 1], [0.5, 0.6])


# ------------------------------------------------------------------ goodness of fit


def test_gof_matches_scipy_without_pooling():
    res = gof_test(CORRECT, P)
    ref = sps.chisquare(CORRECT, 200_000 * P)
    assert isinstance(res, GofResult)
    assert res.statistic == pytest.approx(ref.statistic) and res.pvalue == pytest.approx(ref.pvalue)
    assert res.dof == 2 and res.pooled_cells == ()
    g = gof_test(CORRECT, P, statistic="g")
    assert g.statistic == pytest.approx(sps.power_divergence(CORRECT, 200_000 * P,
                                                              lambda_="log-likelihood").statistic)
    assert gof_test(WRONG, P).pvalue < 1e-300


def test_gof_pools_small_expected_cells():
    law = [0.85, 0.09, 0.03, 0.03]
    res = gof_test([83, 10, 4, 3], law)  # expected 85, 9, 3, 3
    assert res.pooled_cells == (2, 3)
    assert res.dof == 2
    ref = sps.chisquare([83, 10, 7], [85, 9, 6])
    assert res.statistic == pytest.approx(ref.statistic)
    assert "pooled tokens [2, 3]" in res.method
    # pooled cell still below 5: merged with the smallest remaining cell
    res = gof_test([88, 7, 3, 2], [0.90, 0.06, 0.02, 0.02])  # 2 + 2 < 5: joins the 6
    assert res.pooled_cells == (1, 2, 3) and res.dof == 1
    res = gof_test([95, 3, 2], [0.96, 0.02, 0.02])
    assert res.pooled_cells == (0, 1, 2) and res.dof == 0 and res.pvalue == 1.0


def test_gof_impossible_and_zero_cells():
    res = gof_test([5, 1, 4], [0.5, 0.0, 0.5])
    assert res.statistic == math.inf and res.pvalue == 0.0
    res = gof_test([5, 0, 5], [0.5, 0.0, 0.5])
    assert res.dof == 1 and res.pvalue == pytest.approx(1.0)
    with pytest.raises(ValueError, match="statistic: must be 'pearson' or 'g'"):
        gof_test([1, 1], [0.5, 0.5], statistic="chi")


# ------------------------------------------------------------------ calibrated check


def test_assert_law_article_runs():
    assert assert_law(CORRECT, P) == 1.0
    with pytest.raises(AssertionError) as err:
        assert_law(WRONG, P)
    msg = str(err.value)
    assert "false_alarm = 1e-09, n = 200000" in msg and "token 0" in msg and "0.350050" in msg
    assert_law(WRONG, output_law(P, ARTICLE_Q, tokenrule.FALLBACK_P))


def test_assert_law_impossible_token():
    with pytest.raises(AssertionError, match="token 1 was emitted 1 times but has probability 0"):
        assert_law([10, 1, 10], [0.5, 0.0, 0.5])
    assert law_pvalue([10, 1, 10], [0.5, 0.0, 0.5]) == 0.0


def test_assert_law_false_alarm_validation():
    for bad in (0.0, 1.0, -0.1, "x"):
        with pytest.raises(ValueError, match="false_alarm: must be a probability in"):
            assert_law(CORRECT, P, false_alarm=bad)


def test_detection_threshold_is_above_asymptotic_one():
    for k in (2, 3, 10):
        for alpha in (1e-2, 1e-9):
            t = detection_threshold(alpha, k)
            assert t > sps.chi2.isf(alpha, k - 1)
            x = t / 2
            assert math.exp(-x) * (math.e * x / (k - 1)) ** (k - 1) == pytest.approx(alpha, rel=1e-8)
    assert detection_threshold(1e-9, 3) > detection_threshold(1e-3, 3)
    with pytest.raises(ValueError, match="cells: must be an integer >= 2"):
        detection_threshold(0.01, 1)


@pytest.mark.parametrize("n", [3, 20, 200])
def test_law_pvalue_is_valid_for_small_samples(n):
    """P(p-value <= alpha) <= alpha for a correct sampler, even for tiny n."""
    rng = np.random.default_rng(n)
    law = np.array([0.7, 0.2, 0.07, 0.03])
    counts = rng.multinomial(n, law, size=8_000)
    pv = np.array([law_pvalue(c, law) for c in counts])
    for alpha in (0.01, 0.05, 0.2):
        rate = (pv <= alpha).mean()
        # allow Monte Carlo error of the rate itself (binomial upper quantile, 1e-6)
        assert rate <= sps.binom.isf(1e-6, counts.shape[0], alpha) / counts.shape[0]


def test_law_pvalue_exact_enumeration_binary():
    """For two cells the false-alarm probability can be computed exactly."""
    law = np.array([0.3, 0.7])
    for n in (1, 5, 50, 500):
        k = np.arange(n + 1)
        pmf = sps.binom.pmf(k, n, law[0])
        pv = np.array([law_pvalue([i, n - i], law) for i in k])
        for alpha in (1e-1, 1e-3, 1e-6):
            assert pmf[pv <= alpha].sum() <= alpha


# ------------------------------------------------------------------ power and trials


def test_trials_to_detect_article_bias():
    n = trials_to_detect(0.15, law=P)
    assert n == trials_to_detect(None, law=P, alternative=output_law(P, ARTICLE_Q, tokenrule.FALLBACK_P))
    assert 500 < n < 2000
    assert trials_to_detect(0.15, law=P, method="asymptotic") < n
    assert trials_to_detect(0.015, law=P) > 50 * n  # ~ 1 / tv^2


def test_trials_to_detect_power_is_achieved_empirically():
    """Simulate the biased sampler at the predicted n: the check must fail it ~always."""
    alt = output_law(P, ARTICLE_Q, tokenrule.FALLBACK_P)
    n = trials_to_detect(0.15, law=P, false_alarm=1e-9, power=0.9)
    rng = np.random.default_rng(0)
    counts = rng.multinomial(n, alt, size=400)
    detected = sum(law_pvalue(c, P) < 1e-9 for c in counts) / 400
    assert detected >= 0.8


def test_trials_to_detect_outside_support_is_exact():
    law = np.array([0.5, 0.5, 0.0])
    alt = np.array([0.45, 0.45, 0.1])
    n = trials_to_detect(None, law=law, alternative=alt, power=0.99)
    assert 1 - 0.9**n >= 0.99 > 1 - 0.9 ** (n - 1)


def test_trials_to_detect_law_free_worst_case():
    assert trials_to_detect(0.15) > 0
    assert trials_to_detect(0.01) > trials_to_detect(0.1)


@pytest.mark.parametrize(
    "args, kwargs, error, fragment",
    [
        ((0.0,), {}, ValueError, "tv: must be in (0, 1]"),
        ((1.5,), {}, ValueError, "tv: must be in (0, 1]"),
        (("big",), {}, ValueError, "tv: must be a real number in (0, 1]"),
        ((float("nan"),), {}, ValueError, "tv: must be in (0, 1]"),
        ((None,), {}, ValueError, "tv: required unless alternative is given"),
        ((0.1,), {"alternative": [0.5, 0.5]}, LawError, "alternative: requires law"),
        ((0.1,), {"law": [0.5, 0.5], "alternative": [0.3, 0.7]}, ValueError,
         "tv: 0.1 does not match TV(law, alternative) = 0.2"),
        ((0.1,), {"law": [0.5, 0.5], "alternative": [0.3, 0.3, 0.4]}, LawError,
         "alternative: vocabulary size 3"),
        ((0.1,), {"power": 1.0}, ValueError, "power: must be a probability in (0, 1)"),
        ((0.1,), {"method": "exact"}, ValueError, "method: must be 'bound' or 'asymptotic'"),
        ((0.1,), {"law": [1.0, 0.0]}, LawError, "law: needs at least two tokens"),
    ],
)
def test_trials_to_detect_errors(args, kwargs, error, fragment):
    """Laws raise LawError; the TV, levels and method are not laws (ValueError)."""
    with pytest.raises(error) as err:
        trials_to_detect(*args, **kwargs)
    assert type(err.value) is error
    assert fragment in str(err.value)


# ------------------------------------------------------------------ TV intervals and bands


def test_tv_ci_bound_article():
    ci = tv_ci(WRONG, P)
    assert isinstance(ci, TvInterval)
    assert ci.low < 0.15 < ci.high and ci.method == "bound"
    eps = math.sqrt(2 * (math.log(2**3 - 2) - math.log(0.05)) / 200_000)
    assert ci.high - ci.low == pytest.approx(eps)
    assert tv_ci(CORRECT, P).low == 0.0


def test_tv_ci_bound_coverage():
    rng = np.random.default_rng(1)
    law = np.array([0.4, 0.3, 0.2, 0.1])
    alt = np.array([0.35, 0.35, 0.2, 0.1])
    true_tv = 0.05
    covered = 0
    for c in rng.multinomial(500, alt, size=300):
        ci = tv_ci(c, law, 0.9)
        covered += ci.low <= true_tv <= ci.high
    assert covered / 300 >= 0.9


def test_tv_ci_bootstrap():
    a = tv_ci(WRONG, P, method="bootstrap", rng=np.random.default_rng(0), resamples=500)
    b = tv_ci(WRONG, P, method="bootstrap", rng=np.random.default_rng(0), resamples=500)
    assert a == b and a.low < 0.15 < a.high
    with pytest.raises(TypeError, match="rng: bootstrap needs a numpy.random.Generator"):
        tv_ci(WRONG, P, method="bootstrap")
    with pytest.raises(ValueError, match="method: must be 'bound' or 'bootstrap'"):
        tv_ci(WRONG, P, method="exact")


def test_frequency_band_is_exact_binomial():
    n, p, alpha = 1000, 0.3, 0.01
    lo, hi = frequency_band(p, n, false_alarm=alpha)
    outside = sps.binom.cdf(lo * n - 1, n, p) + sps.binom.sf(hi * n, n, p)
    assert outside <= alpha
    lo2, hi2 = frequency_band([0.3, 0.5], n, false_alarm=alpha)
    assert lo2.shape == (2,) and lo2[0] == lo


def test_max_deviation_bound():
    b = max_deviation_bound(P, 200_000, false_alarm=1e-9)
    observed = np.max(np.abs(np.array(CORRECT) / 200_000 - P))
    assert observed < 0.0016 < b < 0.01
    assert max_deviation_bound(P, 2_000_000) < b


def test_trials_to_detect_worst_case_dominates_given_alternatives():
    rng = np.random.default_rng(3)
    law = np.array([0.4, 0.3, 0.2, 0.1])
    for _ in range(20):
        alt = rng.dirichlet(np.ones(4))
        tv = 0.5 * np.abs(alt - law).sum()
        worst = trials_to_detect(tv, law=law, power=0.9)
        given = trials_to_detect(None, law=law, alternative=alt, power=0.9)
        assert given <= worst + 1


def test_trials_to_detect_large_vocabulary_uses_pinsker():
    law = np.full(32, 1 / 32)
    n = trials_to_detect(0.05, law=law)
    assert n > trials_to_detect(0.05, law=np.full(8, 1 / 8)) > 0


def test_pool_sparse_cells_merges_by_expected_count_only():
    from specdec.stats import pool_sparse_cells

    c, lw = pool_sparse_cells([50, 45, 3, 2], [0.5, 0.44, 0.04, 0.02], min_expected=5)
    assert c.tolist() == [50, 45, 5] and np.allclose(lw, [0.5, 0.44, 0.06])
    c, lw = pool_sparse_cells([60, 40], [0.6, 0.4])  # nothing sparse: unchanged
    assert c.tolist() == [60, 40] and np.allclose(lw, [0.6, 0.4])
    c, lw = pool_sparse_cells(np.array([[5, 0], [0, 95]]), np.array([[0.04, 0.01], [0.0, 0.95]]))
    assert c.sum() == 100 and np.isclose(lw.sum(), 1.0)
    with pytest.raises(ValueError, match="min_expected"):
        pool_sparse_cells([1, 1], [0.5, 0.5], min_expected=-1)


def test_detectable_tv_refuses_power_below_level_and_never_exceeds_one():
    from specdec import stats

    with pytest.raises(ValueError, match="power: must exceed level"):
        kitstats.detectable_tv(1000, 2, 0.001, 0.0005)
    assert kitstats.detectable_tv(1, 2, 0.001, 0.9) == 1.0
    assert kitstats.detectable_tv(10**6, 2, 0.001, 0.9) < 0.01
