"""Context- and position-dependent acceptance: exact joint laws, the carried regime (Markov
renewal-reward), E, S and best gamma through specdec.cost, simulation, cycle dependence."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec import cost, stats
from specdec.stats import dependence
from specdec.cost import workloads as W
from specdec.laws import LawError

FALSE_ALARM = 1e-9


def _brute_force_joint(w: W.MarkovWorkload, gamma: int, start=None) -> np.ndarray:
    """P(first i accepted) by summing over every regime path (no matrix algebra)."""
    k = w.alphas.size
    start = w.initial if start is None else start
    out = np.zeros(gamma)
    for path in itertools.product(range(k), repeat=gamma):
        pr = start[path[0]] * np.prod([w.transition[a, b] for a, b in zip(path, path[1:])])
        acc = 1.0
        for i, s in enumerate(path):
            acc *= w.alphas[s]
            out[i] += pr * acc
    return out


def _brute_force_kernel(w: W.MarkovWorkload, gamma: int) -> np.ndarray:
    """Cycle-start kernel by enumerating regime paths over gamma + 2 positions and outcomes."""
    k = w.alphas.size
    kern = np.zeros((k, k))
    for s0 in range(k):
        for path in itertools.product(range(k), repeat=gamma + 1):
            full = (s0,) + path                                   # positions 1 .. gamma + 2
            pr = np.prod([w.transition[a, b] for a, b in zip(full, full[1:])])
            for acc in itertools.product((True, False), repeat=gamma):
                po = np.prod([w.alphas[full[i]] if ok else 1 - w.alphas[full[i]] for i, ok in enumerate(acc)])
                a = next((i for i, ok in enumerate(acc) if not ok), gamma)
                # outcomes after the first rejection are summed over (they are never seen)
                kern[s0, full[a + 1]] += pr * po
    return kern


ALL = [W.bursty_workload(), W.alternating_workload(), W.mixture_workload([0.9, 0.3], [2 / 3, 1 / 3]),
       W.decaying_workload(), W.ConstantWorkload(0.7), W.PositionalWorkload([1.0, 0.5, 0.0])]
IDS = [w.name for w in ALL]


def test_markov_joint_matches_path_enumeration():
    for w in ALL[:3]:
        for gamma in (1, 2, 5):
            assert np.allclose(w.joint(gamma), _brute_force_joint(w, gamma, w.start_law(gamma)), atol=1e-14)
    three = W.MarkovWorkload([0.95, 0.6, 0.1], [[0.8, 0.15, 0.05], [0.2, 0.6, 0.2], [0.1, 0.3, 0.6]])
    assert np.allclose(three.joint(6), _brute_force_joint(three, 6, three.start_law(6)), atol=1e-14)
    assert np.allclose(three.fresh().joint(6), _brute_force_joint(three, 6), atol=1e-14)


@pytest.mark.parametrize("gamma", [1, 2, 4])
def test_cycle_kernel_matches_path_enumeration(gamma):
    for w in (W.bursty_workload(), W.alternating_workload(),
              W.MarkovWorkload([0.95, 0.6, 0.1], [[0.8, 0.15, 0.05], [0.2, 0.6, 0.2], [0.1, 0.3, 0.6]])):
        kern = w.cycle_kernel(gamma)
        assert np.allclose(kern, _brute_force_kernel(w, gamma), atol=1e-14)
        assert np.allclose(kern.sum(axis=1), 1.0)
        mu = w.start_law(gamma)
        assert np.allclose(mu @ kern, mu, atol=1e-14)


def test_carried_regime_values_at_gamma_6():
    """The carried regime reverses the ranking of the fresh-start model (issue numbers)."""
    bursty, alt = W.bursty_workload(), W.alternating_workload()
    assert cost.expected_tokens(bursty, 6) == pytest.approx(2.824830389761, abs=1e-9)
    assert cost.expected_tokens(bursty.fresh(), 6) == pytest.approx(3.753616013562, abs=1e-9)
    assert cost.expected_tokens(alt, 6) == pytest.approx(3.109580487211, abs=1e-9)
    assert cost.expected_tokens(alt.fresh(), 6) == pytest.approx(2.905064962062, abs=1e-9)
    b = cost.best_gamma(bursty, 0.05)
    assert (b.gamma, round(b.speedup, 3), b.edge) == (6, 2.173, None)
    f = cost.best_gamma(bursty.fresh(), 0.05)
    assert (f.gamma, round(f.speedup, 3)) == (10, 3.039)
    # a rejection hands a hard stretch to the next cycle: the start law leans to "hard"
    assert bursty.start_law(6)[1] > bursty.initial[1]
    assert bursty.cycle_correlation(6) > 0.3 and bursty.fresh().cycle_correlation(6) == 0.0


def test_constant_and_positional_closed_forms():
    assert np.allclose(W.ConstantWorkload(0.7).joint(4), 0.7 ** np.arange(1, 5))
    assert W.PositionalWorkload([1.0, 0.5, 0.0]).joint(5).tolist() == [1.0, 0.5, 0.0, 0.0, 0.0]
    w = W.PositionalWorkload([0.9, 0.8])
    assert np.allclose(w.joint(4), [0.9, 0.72, 0.576, 0.4608])
    # a Markov chain whose regimes all have the same alpha is the constant workload, carried or not
    same = W.MarkovWorkload([0.6, 0.6], [[0.5, 0.5], [0.2, 0.8]])
    assert np.allclose(same.joint(8), W.ConstantWorkload(0.6).joint(8), atol=1e-15)
    assert np.allclose(same.fresh().joint(8), W.ConstantWorkload(0.6).joint(8), atol=1e-15)
    # the mixture (fresh start, regime fixed per cycle): J_i = sum_k w_k alpha_k^i
    mix = W.mixture_workload([0.9, 0.3], [2 / 3, 1 / 3])
    i = np.arange(1, 7)
    assert not mix.carry
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
        e = cost.expected_tokens(w, gamma)
        assert e == pytest.approx(1 + law @ np.arange(gamma + 1), abs=1e-12)
        assert e == pytest.approx(cost.expected_tokens_joint(w.joint(gamma)), abs=1e-12)
        assert cost.speedup(w, gamma, 0.05) == pytest.approx(e / (1 + 0.05 * gamma))
        assert cost.speedup(w, gamma, 0.05, g=3, overhead=0.1) == pytest.approx(e / (3.1 + 0.05 * gamma))
    gm = np.arange(1, 17)
    s = cost.speedup(w, gm, 0.05)
    b = cost.best_gamma(w, 0.05, gm)
    assert b.gamma == gm[np.argmax(s)] and b.speedup == pytest.approx(s.max())
    assert np.allclose(cost.expected_tokens(w, gm), [cost.expected_tokens(w, int(k)) for k in gm])


def test_constant_workload_is_the_cost_model():
    w = W.ConstantWorkload(0.7)
    gm = np.arange(1, 17)
    assert np.allclose(cost.expected_tokens(w, gm), cost.expected_tokens(0.7, gm), atol=1e-12, rtol=0)
    assert cost.best_gamma(w, 0.05) == cost.best_gamma(0.7, 0.05)
    assert cost.best_gamma(w, 0.20).gamma == 3
    assert cost.lengthening_pays(w, 5, 0.05) and not cost.lengthening_pays(w, 6, 0.05)


def test_contrast_pair_equal_mean():
    bursty, const = W.contrast_pair(carry=False)
    assert bursty.mean_acceptance == const.mean_acceptance == pytest.approx(0.7)
    # fresh start: same first-position acceptance, hence the same E at gamma = 1 ...
    assert cost.expected_tokens(bursty, 1) == pytest.approx(cost.expected_tokens(const, 1), abs=1e-15)
    # ... but different accepted-length laws and different best draft lengths
    tv = 0.5 * np.abs(W.accepted_length_law(bursty, 6) - W.accepted_length_law(const, 6)).sum()
    assert tv > 0.1
    b, k = cost.best_gamma(bursty, 0.05), cost.best_gamma(const, 0.05)
    assert (b.gamma, k.gamma) == (10, 6) and b.speedup > k.speedup
    # carried: the bursty workload's cycles start in hard stretches more often, and it loses
    carried, _ = W.contrast_pair()
    assert cost.expected_tokens(carried, 1) < cost.expected_tokens(const, 1)
    assert cost.best_gamma(carried, 0.05).speedup < k.speedup


def test_workload_marginal_rule_matches_speedups():
    gm = np.arange(1, 17)
    for w in ALL:
        s = cost.speedup(w, gm, 0.05)
        for i, gamma in enumerate(gm[:-1].tolist()):
            diff = s[i + 1] - s[i]
            if abs(diff) > 1e-12:
                assert cost.lengthening_pays(w, gamma, 0.05) == (diff > 0)


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


@pytest.mark.parametrize("make", [W.bursty_workload, W.alternating_workload])
def test_cycles_continuing_along_the_chain_follow_the_renewal_law(make):
    """Requests start at the chain's stationary law; cycle k's start law is initial K^(k-1)."""
    w, gamma, cycles = make(), 6, 8
    a = W.simulate_requests(w, gamma, 100_000, cycles, np.random.default_rng(11))
    start = w.initial @ np.linalg.matrix_power(w.cycle_kernel(gamma), cycles - 1)
    assert np.allclose(w.start_law(gamma, cycle=cycles), start)
    j = _brute_force_joint(w, gamma, start)
    assert np.allclose(w.joint(gamma, start=start), j, atol=1e-14)
    law = -np.diff(np.concatenate(([1.0], j, [0.0])))
    counts = np.bincount(a[:, -1], minlength=gamma + 1)             # independent across requests
    stats.assert_law(counts, law, false_alarm=FALSE_ALARM)
    # the first cycle starts at the text's stationary law: the fresh-start law
    stats.assert_law(np.bincount(a[:, 0], minlength=gamma + 1),
                     W.accepted_length_law(w.fresh(), gamma), false_alarm=FALSE_ALARM)


def test_cycle_dependence_detects_the_carried_regime():
    rng = np.random.default_rng(5)
    carried = W.simulate_requests(W.bursty_workload(), 4, 300, 40, rng)
    fresh = W.simulate_requests(W.bursty_workload(carry=False), 4, 300, 40, rng)
    d, f = dependence.cycle_dependence(carried, rng, resamples=300), dependence.cycle_dependence(fresh, rng, resamples=300)
    assert d.verdict == "positive" and d.low < W.bursty_workload().cycle_correlation(4) < d.high
    assert f.low < 0 < f.high or abs(f.correlation) < 0.05
    assert d.pairs == 300 * 39 and d.requests == 300
    assert set(d.to_dict()) == {"correlation", "low", "high", "confidence", "pairs", "requests"}
    # ragged requests (as decoded ones are) and a request too short to give a pair
    ragged = dependence.cycle_dependence([[0, 1, 2], [3, 3], [1]], rng, resamples=100)
    assert ragged.pairs == 3 and ragged.requests == 2


def test_exact_cycle_correlation_matches_simulation():
    w = W.bursty_workload()
    a = W.simulate_requests(w, 6, 4000, 60, np.random.default_rng(8))[:, 20:]   # near stationarity
    x, y = a[:, :-1].ravel(), a[:, 1:].ravel()
    assert np.corrcoef(x, y)[0, 1] == pytest.approx(w.cycle_correlation(6), abs=0.02)


def test_simulated_regimes_follow_the_chain():
    w = W.bursty_workload(carry=False)
    s = w.sample_regimes(5, 200_000, np.random.default_rng(1))
    stats.assert_law(np.bincount(s[:, 0], minlength=2), w.initial, false_alarm=FALSE_ALARM)
    from_easy = s[:, 1][s[:, 0] == 0]
    stats.assert_law(np.bincount(from_easy, minlength=2), w.transition[0], false_alarm=FALSE_ALARM)


def test_simulated_outcomes_are_reproducible():
    w = W.alternating_workload()
    a = W.simulate_outcomes(w, 4, 100, np.random.default_rng(3))
    b = W.simulate_outcomes(w, 4, 100, np.random.default_rng(3))
    assert a.dtype == bool and a.shape == (100, 4) and np.array_equal(a, b)
    c1 = W.simulate_requests(w, 4, 10, 7, np.random.default_rng(3))
    assert np.array_equal(c1, W.simulate_requests(w, 4, 10, 7, np.random.default_rng(3)))


@settings(max_examples=60, deadline=None)
@given(a=st.lists(st.floats(0, 1), min_size=2, max_size=3), data=st.data())
def test_joint_is_a_valid_tail_sequence(a, data):
    k = len(a)
    rows = [data.draw(st.lists(st.floats(0.01, 1), min_size=k, max_size=k)) for _ in range(k)]
    t = np.array(rows) / np.array(rows).sum(axis=1, keepdims=True)
    for w in (W.MarkovWorkload(a, t), W.MarkovWorkload(a, t, carry=False)):
        j = w.joint(10)
        assert (j >= -1e-15).all() and (j <= 1 + 1e-15).all() and (np.diff(j) <= 1e-15).all()
        assert j[0] == pytest.approx(w.start_law(10) @ w.alphas)
    assert W.MarkovWorkload(a, t, carry=False).joint(1)[0] == pytest.approx(W.MarkovWorkload(a, t).mean_acceptance)


@pytest.mark.parametrize("call, match", [
    (lambda: W.ConstantWorkload(1.2), "alpha"),
    (lambda: W.PositionalWorkload([]), "alphas"),
    (lambda: W.PositionalWorkload([0.5, -0.1]), "alphas"),
    (lambda: W.MarkovWorkload([0.5, 0.6], [[1.0, 0.0]]), "transition"),
    (lambda: W.MarkovWorkload([0.5, 0.6], [[0.5, 0.6], [0.5, 0.5]]), "transition"),
    (lambda: W.MarkovWorkload([0.5, 0.6], np.eye(2)), "initial"),
    (lambda: W.MarkovWorkload([0.5, 0.6], np.eye(2), initial=[1.0]), "initial"),
    (lambda: W.MarkovWorkload([0.5, 0.6], np.eye(2), initial=[0.5, 0.5], names=("a",), carry=False), "names"),
    (lambda: W.MarkovWorkload([0.5, 0.6], np.eye(2), initial=[0.5, 0.5]), "cycle-start"),
    (lambda: W.MarkovWorkload([0.5, 0.6], [[0.5, 0.5], [0.5, 0.5]], carry="yes"), "carry"),
    (lambda: W.joint_acceptance(0.7, 3), "workload"),
    (lambda: W.joint_acceptance(W.ConstantWorkload(0.7), 0), "gamma"),
    (lambda: cost.speedup(W.ConstantWorkload(0.7), 3, -1.0), "c"),
    (lambda: cost.best_gamma(W.bursty_workload(), 0.05, None), "gammas"),
    (lambda: W.simulate_outcomes(W.ConstantWorkload(0.7), 3, 10, np.random.RandomState(0)), "rng"),
    (lambda: W.simulate_outcomes(W.ConstantWorkload(0.7), 3, 0, np.random.default_rng(0)), "n"),
    (lambda: W.simulate_requests(W.bursty_workload(), 3, 2, 0, np.random.default_rng(0)), "cycles"),
    (lambda: dependence.cycle_dependence([[1, 2]], np.random.default_rng(0)), "accepted_lengths"),
    (lambda: dependence.cycle_dependence([[1, 2], [-1, 0]], np.random.default_rng(0)), "accepted_lengths"),
    (lambda: dependence.cycle_dependence([[1, 2], [1, 0]], np.random.default_rng(0), confidence=1.5), "confidence"),
])
def test_invalid_inputs_raise(call, match):
    """Laws (transition rows, initial and cycle-start laws) raise LawError; every other
    argument raises a ValueError or TypeError that is not a LawError."""
    with pytest.raises((ValueError, TypeError), match=match) as err:
        call()
    law = match in ("transition", "initial", "cycle-start")
    assert isinstance(err.value, LawError) == law, err.value
