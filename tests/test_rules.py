"""Verification rules beyond token-by-token: block verification, trees, matching, lossy.

Every exact rule's sequence law must equal the target's by enumeration, on fixed and on
random toy models (hypothesis); every flawed or lossy rule must differ, by a TV that is
computed, not guessed; Monte Carlo samplers must agree with the enumerations.
"""

from __future__ import annotations

import math
from fractions import Fraction as F

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec import blockverify as bv
from specdec import cycles, lossy, matching, multidraft as md, stats
from specdec.block import accepted_count_law as token_accepted_law
from specdec.block import law_tv
from specdec.laws import LawError
from specdec.models import perturbed_draft, random_model, sequence_law, toy_pair

FALSE_ALARM = 1e-9
EXACT_TOL = 1e-12


def _small_pair(seed: int, closeness: float, eos: bool = True):
    target = random_model(3, rng=seed, order=1, positions=2, eos=-1 if eos else None)
    return target, perturbed_draft(target, closeness, rng=seed + 1)


pairs = st.builds(_small_pair, st.integers(0, 10_000), st.floats(0.0, 0.95), st.booleans())


# --------------------------------------------------------------------------------------
# Block verification
# --------------------------------------------------------------------------------------


def test_paper_example_exact_fractions():
    ex = bv.paper_example()
    assert ex.token == F(10, 9)
    assert ex.block == F(11, 9)
    assert ex.bound == F(12, 9)
    assert sum(ex.token_law) == 1 and sum(ex.block_law) == 1
    assert ex.token < ex.block < ex.bound


def test_paper_example_bound_derivation():
    # sum over i of sum over i-token blocks of min(P, Q): 2/3 for one token, 6/9 for two
    o = cycles.fixed_oracle([F(1, 3), F(2, 3)], [F(2, 3), F(1, 3)])
    assert bv.accepted_bound(o, None, (), 1) == F(2, 3)
    assert bv.accepted_bound(o, None, (), 2) - bv.accepted_bound(o, None, (), 1) == F(6, 9)


def test_paper_example_sequence_law_exact():
    o = cycles.fixed_oracle([F(1, 3), F(2, 3)], [F(2, 3), F(1, 3)])
    law = cycles.rule_sequence_law(lambda c: bv.cycle_outcomes(o, c, 2, "block"), o, (), 3)
    for seq, w in law.items():
        assert w == math.prod(F(1, 3) if t == 0 else F(2, 3) for t in seq)


@pytest.mark.parametrize("gamma", [1, 2, 3])
def test_block_exact_on_toy_pair(gamma):
    p, q = toy_pair()
    ref = sequence_law(p, (), gamma + 1)
    for v in bv.EXACT_VARIANTS:
        assert law_tv(bv.sequence_law(p, q, (), gamma, gamma + 1, v), ref) < EXACT_TOL
    for v in bv.FLAWED_VARIANTS:
        tv = law_tv(bv.sequence_law(p, q, (), gamma, gamma + 1, v), ref)
        assert (tv > 1e-4) if gamma >= 2 else (tv < EXACT_TOL)   # gamma = 1: nothing to get wrong


def test_token_rule_matches_block_module():
    p, q = toy_pair()
    for gamma in (1, 2, 3):
        ours = np.array(bv.accepted_count_law(p, q, (), gamma, "token"), dtype=float)
        np.testing.assert_allclose(ours, token_accepted_law(p, q, (), gamma), atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(pairs, st.integers(1, 3))
def test_block_exact_and_never_worse_random(pair, gamma):
    p, q = pair
    ref = sequence_law(p, (), gamma + 1)
    assert law_tv(bv.sequence_law(p, q, (), gamma, gamma + 1, "block"), ref) < EXACT_TOL
    tok = float(bv.mean_accepted(p, q, (), gamma, "token"))
    blk = float(bv.mean_accepted(p, q, (), gamma, "block"))
    bound = float(bv.accepted_bound(p, q, (), gamma))
    assert tok <= blk + 1e-12 <= bound + 2e-12          # Sun et al., Theorem 2, and the bound


@settings(max_examples=15, deadline=None)
@given(pairs, st.integers(2, 3))
def test_block_flaws_have_computed_tv(pair, gamma):
    p, q = pair
    ref = sequence_law(p, (), gamma + 1)
    for v in bv.FLAWED_VARIANTS:
        tv = law_tv(bv.sequence_law(p, q, (), gamma, gamma + 1, v), ref)
        assert 0.0 <= tv <= 1.0


def test_block_sampler_matches_enumeration():
    p, q = toy_pair()
    gamma, n = 3, 8_000
    rng = np.random.default_rng(5)
    for v in ("block", "first_failure"):
        counts = np.zeros(gamma + 1, dtype=np.int64)
        for _ in range(n):
            _, k = bv.sample_cycle(p, q, (), gamma, rng, v)
            counts[k] += 1
        law = np.array(bv.accepted_count_law(p, q, (), gamma, v), dtype=float)
        stats.assert_law(counts[law > 0], law[law > 0], false_alarm=FALSE_ALARM)


def test_block_errors():
    p, q = toy_pair()
    with pytest.raises(ValueError, match="variant"):
        bv.sequence_law(p, q, (), 2, 3, "blocky")
    with pytest.raises(LawError, match="gamma"):
        bv.sequence_law(p, q, (), 0, 3)
    with pytest.raises(LawError, match="p: fractions"):
        cycles.fixed_oracle([F(1, 2), F(1, 3)], [F(1, 2), F(1, 2)])


# --------------------------------------------------------------------------------------
# Several drafts and trees
# --------------------------------------------------------------------------------------


TREES = [(1, 1), (2,), (2, 2), (3, 1), (2, 1, 1)]


@pytest.mark.parametrize("widths", TREES)
@pytest.mark.parametrize("drafting", md.DRAFTING)
def test_tree_exact_on_toy_pair(widths, drafting):
    p, q = toy_pair()
    ref = sequence_law(p, (), len(widths) + 1)
    assert law_tv(md.sequence_law(p, q, (), widths, len(widths) + 1, drafting), ref) < EXACT_TOL


@pytest.mark.parametrize("widths", [(2,), (2, 2)])
def test_tree_flaws_are_biased(widths):
    p, q = toy_pair()
    ref = sequence_law(p, (), len(widths) + 1)
    for drafting, variant in (("without", "original_q"), ("with", "no_residual_update"),
                              ("topk", "no_residual_update")):
        tv = law_tv(md.sequence_law(p, q, (), widths, len(widths) + 1, drafting, variant), ref)
        assert tv > 1e-3, (drafting, variant, tv)


def test_chain_tree_is_token_by_token():
    p, q = toy_pair()
    for gamma in (1, 2, 3):
        tree = np.array(md.accepted_count_law(p, q, (), (1,) * gamma), dtype=float)
        np.testing.assert_allclose(tree, token_accepted_law(p, q, (), gamma), atol=1e-12)


def test_more_candidates_accept_more():
    p, q = toy_pair()
    one, two, three = (float(md.mean_accepted(p, q, (), (k,), "without")) for k in (1, 2, 3))
    assert one < two < three
    assert md.scored_positions((2, 2)) == 7


@settings(max_examples=20, deadline=None)
@given(pairs, st.sampled_from([(2,), (2, 1), (1, 2), (3,)]), st.sampled_from(md.DRAFTING))
def test_tree_exact_random(pair, widths, drafting):
    p, q = pair
    ref = sequence_law(p, (), len(widths) + 1)
    assert law_tv(md.sequence_law(p, q, (), widths, len(widths) + 1, drafting), ref) < EXACT_TOL


def test_tree_errors():
    p, q = toy_pair()
    with pytest.raises(ValueError, match="widths"):
        md.sequence_law(p, q, (), (), 2)
    with pytest.raises(ValueError, match="widths"):
        md.sequence_law(p, q, (), (2, 0), 2)
    with pytest.raises(ValueError, match="drafting"):
        md.sequence_law(p, q, (), (2,), 2, "sometimes")
    with pytest.raises(ValueError, match="original_q"):
        md.sequence_law(p, q, (), (2,), 2, "with", "original_q")


# --------------------------------------------------------------------------------------
# The matching rule
# --------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(pairs, st.integers(1, 3), st.booleans())
def test_matching_exact_for_any_draft(pair, gamma, greedy):
    p, q = pair
    ref = sequence_law(p, (), gamma + 1)
    assert law_tv(matching.sequence_law(p, q, (), gamma, gamma + 1, greedy=greedy), ref) < EXACT_TOL


def test_matching_exact_for_unrelated_draft_and_flaw_biased():
    p, _ = toy_pair()
    far = perturbed_draft(p, 0.0, rng=99)
    ref = sequence_law(p, (), 4)
    assert law_tv(matching.sequence_law(p, far, (), 3, 4), ref) < EXACT_TOL
    assert law_tv(matching.sequence_law(p, far, (), 3, 4, variant="resample_on_mismatch"), ref) > 1e-2


def test_matching_acceptance_formulas():
    p, q = toy_pair()
    pv, qv = p.next_law(()), q.next_law(())
    a = matching.acceptance(pv, qv)
    law = matching.accepted_count_law(p, q, (), 1)
    assert law[1] == pytest.approx(a.sampled, abs=1e-12)
    greedy = matching.accepted_count_law(p, q, (), 1, greedy=True)
    assert greedy[1] == pytest.approx(a.greedy, abs=1e-12)
    assert a.sampled <= a.speculative and a.greedy <= a.speculative
    assert a.speculative == pytest.approx(float(token_accepted_law(p, q, (), 1)[1]), abs=1e-12)
    acc = matching.accepted_token_law(pv, qv)
    assert acc.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("greedy", [False, True])
def test_matching_same_seed_same_string(greedy):
    p, q = toy_pair(closeness=0.3)
    for seed in range(100):
        run = matching.generate(p, q, (), 3, 10, seed, seed + 7, greedy=greedy)
        assert run.tokens == matching.target_only(p, (), 10, seed)
        assert all(0 <= a <= 3 for a in run.accepted)


def test_matching_sequential_stream_differs_but_keeps_the_law():
    p, q = toy_pair(closeness=0.3)
    same = sum(matching.generate(p, q, (), 3, 10, s, s + 7, stream="sequential").tokens
               == matching.target_only(p, (), 10, s) for s in range(100))
    assert same < 100
    n, length = 6000, 2
    counts: dict = {}
    for s in range(n):
        key = matching.generate(p, q, (), 3, length, s, s + 1, stream="sequential").tokens
        counts[key] = counts.get(key, 0) + 1
    ref = sequence_law(p, (), length)
    keys = sorted(ref)
    stats.assert_law(np.array([counts.get(k, 0) for k in keys]), np.array([ref[k] for k in keys]),
                     false_alarm=FALSE_ALARM)


# --------------------------------------------------------------------------------------
# Lossy acceptance
# --------------------------------------------------------------------------------------


def test_lenient_exact_at_unit_thresholds_and_lossy_below():
    p, q = toy_pair()
    exact = lossy.measure(p, q, (), 2, 3, "lenient")
    assert exact.tv < EXACT_TOL and abs(exact.kl) < 1e-12
    assert exact.mean_accepted == pytest.approx(exact.exact_mean_accepted)
    prev_tv, prev_acc = 0.0, exact.mean_accepted
    for t_acc in (0.8, 0.5, 0.2):
        pt = lossy.measure(p, q, (), 2, 3, "lenient", {"t_acc": t_acc})
        assert pt.tv > prev_tv and pt.mean_accepted > prev_acc and pt.kl > 0
        prev_tv, prev_acc = pt.tv, pt.mean_accepted


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_typical_and_relaxed_are_lossy(temperature):
    p, q = toy_pair()
    for rule in ("typical", "relaxed"):
        pt = lossy.measure(p, q, (), 2, 3, rule, temperature=temperature)
        assert pt.tv > 1e-3 and pt.kl > 0


def test_typical_threshold_zero_accepts_everything():
    p, q = toy_pair(eos=None)
    law = lossy.accepted_count_law(p, q, (), 3, "typical", {"epsilon": 0.0})
    assert law[3] == pytest.approx(1.0)


def test_lossy_errors():
    with pytest.raises(ValueError, match="rule"):
        lossy.check_params("sloppy")
    with pytest.raises(LawError, match="t_acc"):
        lossy.check_params("lenient", {"t_acc": 1.5})
    with pytest.raises(ValueError, match="params"):
        lossy.check_params("typical", {"alpha": 1})
    with pytest.raises(LawError, match="temperature"):
        cycles.tempered(toy_pair()[0], 0.0)
    assert lossy.kl_divergence({(0,): 1.0}, {(1,): 1.0}) == math.inf


@pytest.mark.parametrize("widths,drafting,variant", [((2, 2), "without", "exact"), ((3, 1), "topk", "exact"),
                                                     ((2, 1), "with", "no_residual_update")])
def test_tree_sampler_matches_enumeration(widths, drafting, variant):
    p, q = toy_pair()
    rng = np.random.default_rng(3)
    n = 5_000
    counts = np.zeros(len(widths) + 1, dtype=np.int64)
    for _ in range(n):
        emitted, k, depth = md.sample_cycle(p, q, (), widths, rng, drafting, variant)
        assert depth == len(widths) and 1 <= len(emitted) <= depth + 1
        counts[k] += 1
    law = np.array(md.accepted_count_law(p, q, (), widths, drafting, variant), dtype=float)
    stats.assert_law(counts[law > 0], law[law > 0], false_alarm=FALSE_ALARM)


@pytest.mark.parametrize("variant", matching.VARIANTS)
def test_matching_sampler_matches_enumeration(variant):
    p, q = toy_pair()
    rng = np.random.default_rng(4)
    n, gamma = 6_000, 3
    counts: dict = {}
    for _ in range(n):
        emitted, k, k_prop = matching.sample_cycle(p, q, (), gamma, rng, variant=variant)
        assert k <= k_prop <= gamma
        counts[emitted] = counts.get(emitted, 0) + 1
    outs = matching.cycle_outcomes(cycles.model_oracle(p, q), (), gamma, variant=variant)
    law: dict = {}
    for w, em, _ in outs:
        law[em] = law.get(em, 0.0) + w
    assert set(counts) <= set(law)
    keys = sorted(law)
    stats.assert_law(np.array([counts.get(k, 0) for k in keys]), np.array([law[k] for k in keys]),
                     false_alarm=FALSE_ALARM)


def test_lossy_measurement_interval_covers_exact_tv():
    p, q = toy_pair()
    for rule, params in (("typical", None), ("lenient", {"t_acc": 0.5})):
        counts = lossy.decode_counts(lambda *a: lossy.sample_cycle(*a, rule, params), p, q, (), 3, 2,
                                     3_000, 11)
        exact = lossy.sequence_law(p, q, (), 3, 2, rule, params)
        est = lossy.estimate_loss(counts, sequence_law(p, (), 2), rng=12, confidence=1 - 1e-9,
                                  resamples=200, exact=exact)
        assert est.tv.low <= est.exact_tv <= est.tv.high     # the bound fails w.p. <= 1e-9
        assert est.kl_low <= est.kl_high and est.trials == 3_000
    with pytest.raises(LawError, match="counts"):
        lossy.estimate_loss({}, sequence_law(p, (), 2), rng=1)
