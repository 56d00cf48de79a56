"""Cost model: E, speedup, sweeps, best gamma, the marginal rule, article claims 5-7."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from specdec import cost
from specdec.cost import (
    best_gamma,
    cycle_cost,
    expected_tokens,
    expected_tokens_joint,
    lengthening_pays,
    marginal_gain,
    speedup,
    speedup_joint,
    sweep,
    verification_cost,
)
from specdec.laws import LawError

alphas = st.floats(0.0, 1.0, allow_nan=False)
gammas = st.integers(1, 40)
costs = st.floats(0.0, 2.0, allow_nan=False)


# ------------------------------------------------------------------------- exact values


def test_article_section_6_values():
    assert round(expected_tokens(0.7, 6), 6) == 3.058819
    assert abs(expected_tokens(0.7, 6) - (1 - 0.7**7) / 0.3) < 1e-15
    assert round(speedup(0.7, 6, 0.05), 3) == 2.353
    b = best_gamma(0.7, 0.05, range(1, 17))
    assert (b.gamma, round(b.speedup, 3), round(b.expected_tokens, 6)) == (6, 2.353, 3.058819)
    b = best_gamma(0.7, 0.20, range(1, 17))
    assert (b.gamma, round(b.speedup, 3)) == (3, 1.583)


def test_article_section_7_verification_cost():
    s = speedup(0.7, 6, 0.05, g=3)
    assert round(s, 3) == 0.927 and s < 1
    assert speedup(0.7, 6, 0.05, g=lambda k: 3.0) == s
    assert abs(s - expected_tokens(0.7, 6) / 3.3) < 1e-15


@pytest.mark.parametrize("alpha, gamma, value", [
    (0.6, 2, 1.96), (0.7, 3, 2.53), (0.8, 2, 2.44), (0.8, 5, 3.69), (0.9, 2, 2.71), (0.9, 10, 6.86),
])
def test_leviathan_reference_values(alpha, gamma, value):
    """Eq. (1) of Leviathan et al. (2023) at selected points; with c = 0 the speedup is E."""
    assert round(expected_tokens(alpha, gamma), 2) == value
    assert speedup(alpha, gamma, 0.0) == expected_tokens(alpha, gamma)


def test_limits():
    assert expected_tokens(1.0, 7) == 8.0
    assert expected_tokens(0.0, 7) == 1.0
    assert speedup(0.0, 3, 0.1) == pytest.approx(1 / 1.3)
    assert speedup(1.0, 3, 0.0) == 4.0
    # accurate close to alpha = 1 (no cancellation)
    a = 1 - 1e-12
    assert abs(expected_tokens(a, 10) - sum(a**i for i in range(11))) < 1e-9


def test_joint_form_reduces_to_powers():
    for a in (0.0, 0.3, 0.7, 1.0):
        for g in (1, 4, 9):
            assert abs(expected_tokens_joint([a**i for i in range(1, g + 1)]) - expected_tokens(a, g)) < 1e-12
            assert abs(speedup_joint([a**i for i in range(1, g + 1)], 0.05) - speedup(a, g, 0.05)) < 1e-12
    assert expected_tokens_joint([[0.5, 0.25], [1.0, 1.0]]).tolist() == [1.75, 3.0]


def test_broadcasting_shapes():
    a = np.array([0.3, 0.7, 0.9])
    c = np.array([[0.05], [0.2]])
    assert speedup(a, 4, c).shape == (2, 3)
    assert expected_tokens(a[:, None], np.arange(1, 17)[None, :]).shape == (3, 16)
    A, C = np.meshgrid(np.linspace(0.01, 0.97, 7), np.linspace(0.01, 0.4, 5))
    assert speedup(A, 3, C).shape == (5, 7)
    assert isinstance(speedup(0.7, 6, 0.05), float)
    assert isinstance(lengthening_pays(0.7, 6, 0.05), bool)
    assert lengthening_pays(a, 3, 0.05).shape == (3,)


def test_sweep_matches_pointwise_and_article_grid():
    s = sweep()
    assert s.speedup.shape == (3, 2, 16) and s.expected_tokens.shape == (3, 16)
    for i, a in enumerate(cost.ARTICLE_ALPHAS):
        for j, c in enumerate(cost.ARTICLE_CS):
            for k, g in enumerate(cost.ARTICLE_GAMMAS):
                assert s.speedup[i, j, k] == pytest.approx(speedup(a, g, c), rel=1e-15)
            b = best_gamma(a, c)
            assert (b.gamma, b.speedup) == (int(s.best_gamma[i, j]), pytest.approx(float(s.best_speedup[i, j])))
    assert s.best_gamma[1].tolist() == [6, 3]
    rows = s.rows()
    assert len(rows) == 96 and sum(r["best"] for r in rows) == 6


def test_best_gamma_ties_and_grid():
    # alpha = 1, c = 0: S = gamma + 1 grows; the largest gamma of the grid wins
    assert best_gamma(1.0, 0.0, [1, 2, 3]).gamma == 3
    # alpha = 0: every gamma gives E = 1; with c = 0 all tie, the smallest wins
    assert best_gamma(0.0, 0.0, [2, 5, 9]).gamma == 2
    with pytest.raises(ValueError, match="scalars"):
        best_gamma([0.5, 0.6], 0.1)


def test_verification_cost_forms():
    assert verification_cost(4) == 1.0
    assert verification_cost(np.array([1, 2, 3]), lambda k: 1 + 0.5 * k).tolist() == [1.5, 2.0, 2.5]
    assert cycle_cost(6, 0.05, g=3, overhead=0.2) == pytest.approx(3.5)
    with pytest.raises(ValueError, match="g:"):
        verification_cost(2, 0.0)
    with pytest.raises(ValueError, match="g:"):
        verification_cost(2, lambda k: -1.0)
    with pytest.raises(ValueError, match="g:"):
        verification_cost(2, lambda k: "x")


@pytest.mark.parametrize("call, match", [
    (lambda: expected_tokens(-0.1, 3), "alpha"),
    (lambda: expected_tokens(1.1, 3), "alpha"),
    (lambda: expected_tokens(np.nan, 3), "alpha"),
    (lambda: expected_tokens(0.5, 0), "gamma"),
    (lambda: expected_tokens(0.5, 2.5), "gamma"),
    (lambda: expected_tokens(0.5, True), "gamma"),
    (lambda: expected_tokens(0.5, "3"), "gamma"),
    (lambda: speedup(0.5, 3, -0.01), "c"),
    (lambda: speedup(0.5, 3, np.inf), "c"),
    (lambda: speedup(0.5, 3, 0.1, overhead=-1), "overhead"),
    (lambda: speedup(0.5, [1, 0], 0.1), "gamma"),
    (lambda: expected_tokens_joint([0.5, 0.6]), "non-increasing"),
    (lambda: expected_tokens_joint([1.5]), "joint"),
    (lambda: expected_tokens_joint([]), "joint"),
    (lambda: sweep(alphas=[[0.5]]), "alphas"),
])
def test_invalid_inputs_raise(call, match):
    """None of the cost model's arguments is a law: ValueError or TypeError, never LawError."""
    with pytest.raises((ValueError, TypeError), match=match) as err:
        call()
    assert not isinstance(err.value, LawError)


# ------------------------------------------------------------------- the marginal rule


def test_marginal_rule_article_points():
    # alpha 0.7: at c 0.05 lengthening pays up to gamma 5 -> 6 and stops at 6 -> 7
    pays = [lengthening_pays(0.7, g, 0.05) for g in range(1, 16)]
    assert pays[:5] == [True] * 5 and not any(pays[5:])
    pays = [lengthening_pays(0.7, g, 0.20) for g in range(1, 16)]
    assert pays[:2] == [True] * 2 and not any(pays[2:])
    m = marginal_gain(0.7, 6, 0.05)
    assert m.gain == pytest.approx(0.7**7 * 1.3) and m.price == pytest.approx(0.05 * expected_tokens(0.7, 6))
    # alpha = 0: nothing to gain, a positive price
    assert not lengthening_pays(0.0, 1, 0.05) and marginal_gain(0.0, 1, 0.05).gain == 0.0


@settings(max_examples=400, deadline=None)
@given(alpha=alphas, gamma=gammas, c=costs, g0=st.floats(0.2, 5.0), slope=st.floats(0.0, 0.5),
       overhead=st.floats(0.0, 1.0))
def test_marginal_rule_equals_brute_force(alpha, gamma, c, g0, slope, overhead):
    """gain > price  <=>  S(gamma + 1) > S(gamma), for g(gamma) = g0 + slope gamma."""
    g = lambda k: g0 + slope * k
    s0 = speedup(alpha, gamma, c, g=g, overhead=overhead)
    s1 = speedup(alpha, gamma + 1, c, g=g, overhead=overhead)
    assume(abs(s1 - s0) > 1e-9 * max(s0, s1))  # exclude floating-point ties
    assert lengthening_pays(alpha, gamma, c, g=g, overhead=overhead) == (s1 > s0)


def test_marginal_rule_closed_form_on_grid():
    """With g = 1: alpha^(g+1)(1 + c g) > c (1 - alpha^(g+1))/(1 - alpha), brute-forced on a grid."""
    a = np.linspace(0.0, 0.99, 100)[:, None, None]
    c = np.linspace(0.0, 0.5, 51)[None, :, None]
    g = np.arange(1, 21)[None, None, :]
    closed = a ** (g + 1) * (1 + c * g) > c * (1 - a ** (g + 1)) / (1 - a)
    brute = speedup(a, g + 1, c) > speedup(a, g, c)
    clear = np.abs(speedup(a, g + 1, c) - speedup(a, g, c)) > 1e-12
    assert (closed == brute)[clear].all()
    assert (lengthening_pays(a, g, c) == brute)[clear].all()


@settings(max_examples=200, deadline=None)
@given(alpha=st.floats(0.0, 0.999), c=st.floats(1e-3, 1.0))
def test_gain_falls_and_best_gamma_is_first_non_paying(alpha, c):
    """With alpha < 1 and c > 0 the speedup is unimodal on 1..40: the best gamma is the
    first at which lengthening stops paying."""
    grid = np.arange(1, 41)
    pays = lengthening_pays(alpha, grid, c)
    assume(not pays.all())
    first_stop = int(grid[np.argmin(pays)])
    assert not pays[first_stop - 1:].any()
    s = speedup(alpha, grid, c)
    assert best_gamma(alpha, c, grid).gamma == first_stop or np.isclose(s[first_stop - 1], s.max(), rtol=1e-12)


@settings(max_examples=200, deadline=None)
@given(alpha=alphas, gamma=gammas)
def test_expected_tokens_bounds_and_tail_sum(alpha, gamma):
    e = expected_tokens(alpha, gamma)
    assert 1.0 - 1e-12 <= e <= gamma + 1 + 1e-12
    assert abs(e - sum(alpha**i for i in range(gamma + 1))) < 1e-9 * (gamma + 1)
    assert expected_tokens(alpha, gamma + 1) >= e - 1e-12


# --------------------------------------------------------- claims of sections 5 to 7


SECTION_5_7_KEYS = [
    "s5_cycle_min_tokens", "s5_cycle_max_extra",
    "s6_grid_gamma_min", "s6_grid_gamma_max", "s6_grid_alpha_low", "s6_grid_alpha_mid",
    "s6_grid_alpha_high", "s6_grid_c_low", "s6_grid_c_high", "s6_c_ratio",
    "s6_best_gamma_c005", "s6_expected_tokens", "s6_speedup_c005", "s6_best_gamma_c020",
    "s6_speedup_c020", "s6_alpha0_tokens",
    "s7_numerator", "s7_ratio_g3", "s7_slower_g3", "s7_joint_identity",
]


@pytest.mark.parametrize("key", SECTION_5_7_KEYS)
def test_claims_of_sections_5_to_7_hold(key):
    from specbook import claims

    c = claims.claim(key)
    assert c.section == int(key[1])
    assert claims.check(key, c.recompute()) == pytest.approx(c.recompute())


def test_claims_values_and_failures():
    from specbook import claims

    assert claims.claim("s6_expected_tokens").stated == 3.058819
    assert claims.claim("s6_speedup_c005").stated == 2.353
    assert claims.claim("s6_best_gamma_c020").stated == 3
    assert claims.claim("s6_speedup_c020").stated == 1.583
    assert claims.claim("s7_ratio_g3").stated == 0.927
    claims.check("s6_best_gamma_c005", best_gamma(0.7, 0.05).gamma)
    claims.check("s7_ratio_g3", speedup(0.7, 6, 0.05, g=3))
    with pytest.raises(AssertionError, match="s6_best_gamma_c005"):
        claims.check("s6_best_gamma_c005", 7)
    with pytest.raises(AssertionError, match="s6_speedup_c005"):
        claims.check("s6_speedup_c005", 2.36)
    with pytest.raises(AssertionError, match="s7_slower_g3"):
        claims.check("s7_slower_g3", speedup(0.7, 6, 0.05))  # g = 1: faster, the claim is about g = 3


@pytest.mark.parametrize("kw, message", [
    (dict(gammas=[]), "gammas: must not be empty"),
    (dict(gammas=[0, 1]), "gammas: must be an integer >= 1"),
    (dict(alphas=[1.5]), "alphas: must be a probability"),
    (dict(cs=[-1.0]), "cs: must be >= 0"),
])
def test_sweep_errors_name_the_grid(kw, message):
    with pytest.raises(ValueError, match=message):
        cost.sweep(**kw)
    if "gammas" in kw:
        with pytest.raises(ValueError, match=message):
            cost.best_gamma(0.7, 0.05, gammas=kw["gammas"])


# ------------------------------------------------------------- edges and grid-free search


def test_best_gamma_reports_the_grid_edge():
    assert best_gamma(0.7, 0.05).edge is None and best_gamma(0.7, 0.05).interior
    edge = best_gamma(0.99, 0.01)
    assert (edge.gamma, edge.edge, edge.interior) == (16, "last", False)
    assert best_gamma(0.99, 0.01, range(1, 200)).gamma == 113
    assert best_gamma(0.0, 0.05).edge == "first"           # no draft helps: S(1) < 1
    assert best_gamma(0.7, 0.05, range(4, 7)).edge == "last"
    assert best_gamma(0.7, 0.05, [6]).edge == "last"
    assert set(best_gamma(0.7, 0.05).to_dict()) == {"gamma", "speedup", "expected_tokens", "edge"}


def test_grid_free_search_values():
    b = best_gamma(0.99, 0.01, None)
    assert (b.gamma, b.edge) == (113, None)
    assert b.speedup == pytest.approx(speedup(0.99, 113, 0.01))
    assert best_gamma(0.7, 0.05, None).gamma == 6 and best_gamma(0.7, 0.20, None).gamma == 3
    # alpha = 1 and c < 1: the speedup rises towards 1/c forever; the bound is reported
    top = best_gamma(1.0, 0.5, None, gamma_max=1000)
    assert (top.gamma, top.edge) == (1000, "last")
    assert best_gamma(0.0, 0.05, None).gamma == 1


@settings(max_examples=150, deadline=None)
@given(alpha=st.floats(0.0, 0.97), c=st.floats(0.001, 1.0), kappa=st.floats(0.0, 0.5),
       overhead=st.floats(0.0, 2.0))
def test_grid_free_search_finds_the_maximum_of_a_wide_grid(alpha, c, kappa, overhead):
    """Unimodality (constant alpha, affine verification cost): the search is the argmax."""
    g = (lambda k: 1 + kappa * k) if kappa else None
    grid = np.arange(1, 2001)
    s = np.asarray(speedup(alpha, grid, c, g=g, overhead=overhead))
    b = best_gamma(alpha, c, None, g=g, overhead=overhead)
    assert b.speedup == pytest.approx(s.max(), rel=1e-12, abs=1e-12)
    assert b.speedup >= s.max() - 1e-12
    # unimodal: S rises strictly up to the maximum's plateau and never rises after it
    k = b.gamma - 1
    assert np.all(np.diff(s[k:]) <= 1e-12)


def test_grid_free_search_refuses_what_it_cannot_certify():
    with pytest.raises(ValueError, match="convex"):
        best_gamma(0.9, 0.05, None, g=lambda k: 3.0 if k < 4 else 1.0)   # decreasing cost
    with pytest.raises(ValueError, match="convex"):
        best_gamma(0.9, 0.05, None, g=lambda k: 1 + np.sqrt(k))           # concave cost
    with pytest.raises(ValueError, match="gamma_max"):
        best_gamma(0.9, 0.05, None, gamma_max=1)


def test_shapes_that_do_not_broadcast_are_refused_by_name():
    with pytest.raises(ValueError, match=r"^alpha, gamma: shapes \(3,\), \(2,\) do not broadcast"):
        cost.speedup([0.5, 0.6, 0.7], [1, 2], 0.1)
    with pytest.raises(ValueError, match=r"^gamma, c, overhead: shapes \(2,\), \(3,\), \(\) do not"):
        cost.cycle_cost([1, 2], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"^alpha, gamma, c, overhead: shapes \(3,\), \(\), \(2,\)"):
        cost.speedup([0.5, 0.6, 0.7], 2, [0.1, 0.2])
    grid = cost.speedup([0.5, 0.6], [[1], [2]], 0.1)          # broadcasting shapes still work
    assert grid.shape == (2, 2) and grid[0, 0] == pytest.approx(1.5 / 1.1)


def test_strings_and_booleans_are_not_numbers_here():
    with pytest.raises(TypeError, match=r"^c: must be a real number"):
        cost.speedup(0.5, 3, "0.1")
    with pytest.raises(TypeError, match=r"^alpha: must be a real number"):
        cost.expected_tokens("0.5", 3)
    with pytest.raises(TypeError, match=r"^alpha: must be a real number"):
        cost.expected_tokens(True, 3)
