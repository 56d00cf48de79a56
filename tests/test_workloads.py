"""Context- and position-dependent acceptance: exact joint laws, E, S, best gamma, simulation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec import cost, stats
from specdec import workloads as W
from specdec.laws import LawError

FALSE_ALARM = 1e-9


def _brute_force_joint(w: W.MarkovWorkload, gamma: int) -> np.ndarray:
    """P(first i accepted) by summing over every regime path (no matrix algebra)."""
    k = w.alphas.size
    out = np.zeros(gamma)
    for path in itertools.product(range(k), repeat=gamma):
        pr = w.initial[path[0]] * np.prod([w.transition[a, b] for a, b in zip(path, path[1:])])
        acc = 1.0
        for i, s in enumerate(path):
            acc *= w.alphas[s]
            out[i] += pr * acc
    return out


ALL = [W.bursty_workload(), W.alternating_workload(), W.mixture_workload([0.9, 0.3], [2 / 3, 1 / 3]),
       W.decaying_workload(), W.ConstantWorkload(0.7), W.PositionalWorkload([1.0, 0.5, 0.0])]
IDS = [w.name for w in ALL]


def test_markov_joint_matches_path_enumeration():
    for w in ALL[:3]:
        for gamma in (1, 2, 5):
            assert np.allclose(w.joint(gamma), _brute_force_joint(w, gamma), atol=1e-14)
    three = W.MarkovWorkload([0.95, 0.6, 0.1], [[0.8, 0.15, 0.05], [0.2, 0.6, 0.2], [0.1, 0.3, 0.6]])
    assert np.allclose(three.joint(6), _brute_force_joint(three, 6), atol=1e-14)


def test_constant_and_positional_closed_forms():
    assert np.allclose(W.ConstantWorkload(0.7).joint(4), 0.7 ** np.arange(1, 5))
    assert W.PositionalWorkload([1.0, 0.5, 0.0]).joint(5).tolist() == [1.0, 0.5, 0.0, 0.0, 0.0]
    w = W.PositionalWorkload([0.9, 0.8])
    assert np.allclose(w.joint(4), [0.9, 0.72, 0.576, 0.4608])
    # a Markov chain whose regimes all have the same alpha is the constant workload
    same = W.MarkovWorkload([0.6, 0.6], [[0.5, 0.5], [0.2, 0.8]])
    assert np.allclose(same.joint(8), W.ConstantWorkload(0.6).joint(8), atol=1e-15)
    # the mixture: J_i = sum_k w_k alpha_k^i
    mix = W.mixture_workload([0.9, 0.3], [2 / 3, 1 / 3])
    i = np.arange(1, 7)
    assert np.allclose(mix.joint(6), 2 / 3 * 0.9**i + 1 / 3 * 0.3**i, atol=1e-15)


def test_stationary_initial_law():
    w = W.bursty_workload()
    assert np.allclose(w.initial, [2 / 3, 1 / 3])
    assert np.allclose(w.initial @ w.transition, w.initial)
    assert w.mean_acceptance == pytest.approx(0.7, abs=1e-15)
    assert W.alternating_workload().mean_acceptance == pytest.approx(0.7, abs=1e-15)


@pytest.mark.parametrize("w", ALL, ids=IDS)
def test_exact_quantities_are_consistent(w):
    for gamma in (1, 3, 8):
        law = W.accepted_length_law(w, gamma)
        assert law.shape == (gamma + 1,) and abs(law.sum() - 1) < 1e-12 and (law >= 0).all()
        e = W.expected_tokens(w, gamma)
        assert e == pytest.approx(1 + law @ np.arange(gamma + 1), abs=1e-12)
        assert W.speedup(w, gamma, 0.05) == pytest.approx(e / (1 + 0.05 * gamma))
        assert W.speedup(w, gamma, 0.05, g=3, overhead=0.1) == pytest.approx(e / (3.1 + 0.05 * gamma))
    cv = W.curve(w, 0.05)
    assert cv.best_gamma == W.best_gamma(w, 0.05).gamma and cv.best_speedup == pytest.approx(cv.speedup.max())


def test_constant_workload_reproduces_the_cost_model():
    w = W.ConstantWorkload(0.7)
    for gamma in range(1, 17):
        assert W.expected_tokens(w, gamma) == pytest.approx(cost.expected_tokens(0.7, gamma), abs=1e-12)
    b = W.best_gamma(w, 0.05)
    assert (b.gamma, round(b.speedup, 3), round(b.expected_tokens, 6)) == (6, 2.353, 3.058819)
    assert W.best_gamma(w, 0.20).gamma == 3


def test_contrast_pair_equal_mean_different_best_gamma():
    bursty, const = W.contrast_pair()
    assert bursty.mean_acceptance == const.mean_acceptance == pytest.approx(0.7)
    # same first-position acceptance, hence the same E at gamma = 1 ...
    assert W.expected_tokens(bursty, 1) == pytest.approx(W.expected_tokens(const, 1), abs=1e-15)
    # ... but different accepted-length laws and different best draft lengths
    tv = 0.5 * np.abs(W.accepted_length_law(bursty, 6) - W.accepted_length_law(const, 6)).sum()
    assert tv > 0.1
    b, k = W.best_gamma(bursty, 0.05), W.best_gamma(const, 0.05)
    assert (b.gamma, k.gamma) == (10, 6)
    assert b.speedup > k.speedup
    assert W.best_gamma(bursty, 0.20).gamma == 4 and W.best_gamma(const, 0.20).gamma == 3
    # negatively correlated regimes go the other way
    assert W.best_gamma(W.alternating_workload(), 0.05).gamma < k.gamma


def test_workload_marginal_rule_matches_curve():
    for w in ALL:
        cv = W.curve(w, 0.05, range(1, 17))
        for i, gamma in enumerate(range(1, 16)):
            diff = cv.speedup[i + 1] - cv.speedup[i]
            if abs(diff) > 1e-12:
                assert W.lengthening_pays(w, gamma, 0.05) == (diff > 0)


@pytest.mark.parametrize("w", ALL, ids=IDS)
def test_simulated_accepted_lengths_follow_exact_law(w):
    gamma = 6
    rng = np.random.default_rng(IDS.index(w.name))
    a = W.simulate_accepted_lengths(w, gamma, 200_000, rng)
    law = W.accepted_length_law(w, gamma)
    keep = law > 0
    counts = np.bincount(a, minlength=gamma + 1)
    assert counts[~keep].sum() == 0
    stats.assert_law(counts[keep], law[keep] / law[keep].sum(), false_alarm=FALSE_ALARM)


def test_simulated_regimes_follow_the_chain():
    w = W.bursty_workload()
    s = w.sample_regimes(5, 200_000, np.random.default_rng(1))
    stats.assert_law(np.bincount(s[:, 0], minlength=2), w.initial, false_alarm=FALSE_ALARM)
    from_easy = s[:, 1][s[:, 0] == 0]
    stats.assert_law(np.bincount(from_easy, minlength=2), w.transition[0], false_alarm=FALSE_ALARM)


def test_simulated_outcomes_are_reproducible():
    w = W.alternating_workload()
    a = W.simulate_outcomes(w, 4, 100, np.random.default_rng(3))
    b = W.simulate_outcomes(w, 4, 100, np.random.default_rng(3))
    assert a.dtype == bool and a.shape == (100, 4) and np.array_equal(a, b)


@settings(max_examples=60, deadline=None)
@given(a=st.lists(st.floats(0, 1), min_size=2, max_size=3), data=st.data())
def test_joint_is_a_valid_tail_sequence(a, data):
    k = len(a)
    rows = [data.draw(st.lists(st.floats(0.01, 1), min_size=k, max_size=k)) for _ in range(k)]
    t = np.array(rows) / np.array(rows).sum(axis=1, keepdims=True)
    w = W.MarkovWorkload(a, t)
    j = w.joint(10)
    assert (j >= -1e-15).all() and (j <= 1 + 1e-15).all() and (np.diff(j) <= 1e-15).all()
    assert j[0] == pytest.approx(w.mean_acceptance)


@pytest.mark.parametrize("call, match", [
    (lambda: W.ConstantWorkload(1.2), "alpha"),
    (lambda: W.PositionalWorkload([]), "alphas"),
    (lambda: W.PositionalWorkload([0.5, -0.1]), "alphas"),
    (lambda: W.MarkovWorkload([0.5, 0.6], [[1.0, 0.0]]), "transition"),
    (lambda: W.MarkovWorkload([0.5, 0.6], [[0.5, 0.6], [0.5, 0.5]]), "transition"),
    (lambda: W.MarkovWorkload([0.5, 0.6], np.eye(2)), "initial"),
    (lambda: W.MarkovWorkload([0.5, 0.6], np.eye(2), initial=[1.0]), "initial"),
    (lambda: W.MarkovWorkload([0.5, 0.6], np.eye(2), initial=[0.5, 0.5], names=("a",)), "names"),
    (lambda: W.joint_acceptance(0.7, 3), "workload"),
    (lambda: W.joint_acceptance(W.ConstantWorkload(0.7), 0), "gamma"),
    (lambda: W.speedup(W.ConstantWorkload(0.7), 3, -1.0), "c"),
    (lambda: W.simulate_outcomes(W.ConstantWorkload(0.7), 3, 10, np.random.RandomState(0)), "rng"),
    (lambda: W.simulate_outcomes(W.ConstantWorkload(0.7), 3, 0, np.random.default_rng(0)), "n"),
])
def test_invalid_inputs_raise(call, match):
    with pytest.raises(LawError, match=match):
        call()
