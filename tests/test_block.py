"""Speculative cycles: exact laws by enumeration, flawed variants, Monte Carlo, accounting."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec import cost, stats
from specdec.rules import cycle as stateful
from specdec.rules.cycle import CYCLE_FLAWS, CYCLE_RULES
from specdec.cost.accounting import Accounting, accepted_prefix_length, account, account_counts
from specdec.simulate.cycle import CycleResult, generate, simulate_cycles, simulate_generation, speculative_cycle
from specdec.laws import LawError, law_tv, tv_distance
from specdec.rules.cycle import block_sequence_law, cycle_accepted_law, cycle_length_law
from specdec.models import sequence_law as target_sequence_law  # the reference law
from specdec.models import ToyModel, model_from_function, perturbed_draft, random_model, toy_pair

FALSE_ALARM = 1e-9  # probability that a correct sampler fails one Monte Carlo check


def _pairs():
    """Several target/draft pairs: default, other seeds, order 1, far/identical drafts,
    a draft with zeros where the target has mass, no EOS, and a function-defined pair."""
    p, q = toy_pair()
    yield "default", p, q
    yield "seed 7, V=3", *toy_pair(3, seed=7, closeness=0.3)
    t1 = random_model(4, rng=11, order=1, positions=3)
    yield "order 1, closeness 0", t1, perturbed_draft(t1, 0.0, rng=12)
    yield "q = p", p, perturbed_draft(p, 1.0)
    sparse = q.table.copy()
    sparse[..., 0] = 0.0  # token 0 is never proposed: it can only come from the residual
    sparse /= sparse.sum(-1, keepdims=True)
    yield "q(0) = 0", p, ToyModel(4, p.eos, table=sparse, order=2)
    yield "no EOS", *toy_pair(3, seed=3, eos=None)
    base_p = np.array([0.5, 0.3, 0.2])
    fp = model_from_function(3, 2, lambda pre: np.roll(base_p, len(pre) % 3))
    fq = model_from_function(3, 2, lambda pre: np.roll([0.2, 0.5, 0.3], sum(pre) % 3))
    yield "law_fn", fp, fq


PAIRS = list(_pairs())
PAIR_IDS = [name for name, *_ in PAIRS]


def _check_samples(counts: dict, law: dict) -> float:
    """Calibrated check (false alarm FALSE_ALARM) that sampled sequences follow ``law``."""
    keys = sorted(set(law) | set(counts), key=lambda k: (len(k), k))
    c = np.array([counts.get(k, 0) for k in keys], dtype=np.int64)
    w = np.array([law.get(k, 0.0) for k in keys])
    return stats.assert_law(c, w / w.sum(), false_alarm=FALSE_ALARM)


def _sample(variant, p, q, prefix, gamma, length, n, seed):
    rng = np.random.default_rng(seed)
    counts: dict = {}
    for _ in range(n):
        s = generate(p, q, prefix, gamma, length, rng, variant=variant).tokens
        counts[s] = counts.get(s, 0) + 1
    return counts


# ----------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("name, p, q", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("gamma", [1, 2, 3, 4])
def test_correct_block_law_equals_target_law(name, p, q, gamma):
    for length, prefix in ((1, ()), (3, ()), (4, (0,)), (5, ())):
        ref = target_sequence_law(p, prefix, length)
        for variant in [r for r in CYCLE_RULES if r.exact] if length < 5 else (stateful.CORRECT_CYCLE,):
            law = block_sequence_law(p, q, prefix, gamma, length, variant)
            assert set(law) == set(ref), (name, variant, gamma, length)
            assert max(abs(law[k] - ref[k]) for k in ref) < 1e-12, (name, variant, gamma, length)


#: TV(block law, target law) of each flawed variant for the default pair, gamma 3, L 5.
REPORTED_TV = {}


@pytest.mark.parametrize("variant", CYCLE_FLAWS)
def test_flawed_variants_deviate(variant):
    p, q = toy_pair()
    ref = target_sequence_law(p, (), 5)
    law = block_sequence_law(p, q, (), 3, 5, variant)
    assert abs(sum(law.values()) - 1.0) < 1e-12
    tv = law_tv(law, ref)
    REPORTED_TV[variant] = tv
    print(f"TV({variant}) = {tv:.6f}")
    assert tv > 0.01


def test_flawed_variants_reference_values():
    """Regression values of TV for the default pair (gamma 3, L 5); the seeded tables fix them."""
    p, q = toy_pair()
    ref = target_sequence_law(p, (), 5)
    got = {v.name: law_tv(block_sequence_law(p, q, (), 3, 5, v), ref) for v in CYCLE_FLAWS}
    expected = {"stale_proposals": 0.1222, "no_rollback": 0.3263, "bonus_wrong_position": 0.1551,
                "emit_after_eos": 0.1351}
    assert list(got) == list(expected)
    for v in expected:
        assert abs(got[v] - expected[v]) < 5e-4, (v, got[v])


def test_when_each_flaw_is_invisible():
    """Each bug needs its trigger: the law is exact exactly when the trigger cannot occur."""
    p, q = toy_pair()
    ref3 = target_sequence_law(p, (), 3)
    # gamma = 1: nothing is discarded after a rejection, so nothing stale can be reused
    assert law_tv(block_sequence_law(p, q, (), 1, 3, stateful.STALE_PROPOSALS), ref3) < 1e-12
    # the bonus of the first cycle is token gamma + 1: beyond L = 3 when gamma = 3
    assert law_tv(block_sequence_law(p, q, (), 3, 3, stateful.BONUS_WRONG_POSITION), ref3) < 1e-12
    # without rejections (q = p) stale tails and uncropped caches never arise ...
    same = perturbed_draft(p, 1.0)
    for v in (stateful.STALE_PROPOSALS, stateful.NO_ROLLBACK):
        assert law_tv(block_sequence_law(p, same, (), 3, 4, v), target_sequence_law(p, (), 4)) < 1e-12
    # ... but a bonus from the wrong position still is wrong
    assert law_tv(block_sequence_law(p, same, (), 2, 4, stateful.BONUS_WRONG_POSITION),
                  target_sequence_law(p, (), 4)) > 0.01
    # without an EOS token, emitting after EOS cannot happen
    pn, qn = toy_pair(3, seed=3, eos=None)
    assert law_tv(block_sequence_law(pn, qn, (), 3, 4, stateful.EMIT_AFTER_EOS),
                  target_sequence_law(pn, (), 4)) < 1e-12


def test_emit_after_eos_puts_mass_past_eos():
    p, q = toy_pair()
    law = block_sequence_law(p, q, (), 3, 4, stateful.EMIT_AFTER_EOS)
    past = sum(v for k, v in law.items() if p.eos in k[:-1])
    assert past > 0.01
    assert all(p.eos not in k[:-1] for k in target_sequence_law(p, (), 4))


@pytest.mark.parametrize("variant", CYCLE_RULES)
def test_law_conventions(variant):
    p, q = toy_pair()
    law = block_sequence_law(p, q, (2,), 2, 4, variant)
    assert abs(sum(law.values()) - 1.0) < 1e-12
    assert all(v > 0 for v in law.values())
    for k in law:
        if variant is stateful.EMIT_AFTER_EOS:  # stops after the cycle that emitted EOS
            assert len(k) == 4 or p.eos in k
        else:
            assert len(k) == 4 or k[-1] == p.eos


# ------------------------------------------------------------------- cycle-length laws


@pytest.mark.parametrize("gamma", [1, 2, 3, 5])
def test_context_free_pair_gives_geometric_cycle_lengths(gamma):
    """If p and q ignore the prefix, acceptances are i.i.d. with alpha = 1 - TV(p, q):
    the cycle length is a truncated geometric and its mean is eq. (1) of Leviathan et al."""
    pv, qv = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.5, 0.3])
    p = model_from_function(3, None, lambda pre: pv)
    q = model_from_function(3, None, lambda pre: qv)
    alpha = 1.0 - tv_distance(pv, qv)
    law = cycle_length_law(p, q, (), gamma)
    expected = np.array([0.0] + [alpha ** (n - 1) * (1 - alpha) for n in range(1, gamma + 1)] + [alpha ** gamma])
    assert np.allclose(law, expected, atol=1e-12)
    assert abs(law @ np.arange(gamma + 2) - cost.expected_tokens(alpha, gamma)) < 1e-12
    acc = cycle_accepted_law(p, q, (), gamma)
    assert np.allclose(acc, law[1:], atol=1e-12)


@pytest.mark.parametrize("variant", CYCLE_RULES)
def test_cycle_length_law_support_and_eos(variant):
    p, q = toy_pair()
    law = cycle_length_law(p, q, (1,), 4, variant)
    assert law.shape == (6,) and law[0] == 0.0 and abs(law.sum() - 1) < 1e-12
    acc = cycle_accepted_law(p, q, (1,), 4, variant)
    assert acc.shape == (5,) and abs(acc.sum() - 1) < 1e-12
    # with EOS, an accepted EOS ends a cycle without a residual or bonus token: the mean
    # emitted count is then below mean accepted + 1
    assert law @ np.arange(6) < acc @ np.arange(5) + 1


def test_identical_models_emit_gamma_plus_one_without_eos():
    p, _ = toy_pair(3, seed=3, eos=None)
    law = cycle_length_law(p, perturbed_draft(p, 1.0), (), 3)
    assert np.allclose(law, [0, 0, 0, 0, 1], atol=1e-12)


# ------------------------------------------------------------------------ Monte Carlo


@pytest.mark.parametrize("variant", CYCLE_RULES)
def test_scalar_generate_follows_exact_variant_law(variant):
    """The reference sampler and the enumerator implement each variant independently."""
    p, q = toy_pair()
    law = block_sequence_law(p, q, (), 3, 4, variant)
    counts = _sample(variant, p, q, (), 3, 4, 4000, seed=100 + CYCLE_RULES.index(variant))
    _check_samples(counts, law)


@pytest.mark.parametrize("variant", CYCLE_FLAWS)
def test_monte_carlo_detects_each_flaw(variant):
    """Power: samples of a flawed variant fail the check against the target law."""
    p, q = toy_pair()
    counts = _sample(variant, p, q, (), 2, 3, 5_000, seed=7)
    with pytest.raises(AssertionError):
        _check_samples(counts, target_sequence_law(p, (), 3))


@pytest.mark.parametrize("name, p, q", PAIRS, ids=PAIR_IDS)
def test_vectorised_generation_follows_target_law(name, p, q):
    n = 5_000 if name == "law_fn" else 40_000  # law_fn models are evaluated row by row
    for gamma, length, prefix in ((1, 3, ()), (3, 5, (1,)), (4, 4, ())):
        rng = np.random.default_rng([PAIR_IDS.index(name), gamma])
        batch = simulate_generation(p, q, prefix, gamma, length, n, rng)
        _check_samples(batch.sequence_counts(), target_sequence_law(p, prefix, length))
        assert batch.n_cycles.sum() == batch.n_emitted.size
        assert (np.bincount(batch.sequence, minlength=n) == batch.n_cycles).all()
        # no cycle emits beyond EOS or more than gamma + 1 tokens
        assert ((batch.n_emitted >= 1) & (batch.n_emitted <= batch.n_accepted + 1)).all()
        assert (batch.n_emitted <= gamma + 1).all()


@pytest.mark.parametrize("gamma", [1, 2, 4])
def test_vectorised_cycles_follow_exact_cycle_laws(gamma):
    p, q = toy_pair()
    b = simulate_cycles(p, q, (0, 1), gamma, 100_000, np.random.default_rng(gamma))
    stats.assert_law(np.bincount(b.n_emitted, minlength=gamma + 2),
                     cycle_length_law(p, q, (0, 1), gamma), false_alarm=FALSE_ALARM)
    stats.assert_law(np.bincount(b.n_accepted, minlength=gamma + 1),
                     cycle_accepted_law(p, q, (0, 1), gamma), false_alarm=FALSE_ALARM)
    # emitted tokens of one cycle: law of the first min(n, ...) tokens is the target's
    first = np.bincount(b.emitted[:, 0], minlength=4)
    stats.assert_law(first, p.next_law((0, 1)), false_alarm=FALSE_ALARM)
    assert ((b.emitted >= 0).sum(axis=1) == b.n_emitted).all()


# ----------------------------------------------------------------- cycle invariants


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), gamma=st.integers(1, 6), closeness=st.floats(0, 1),
       prefix=st.lists(st.integers(0, 2), max_size=3))
def test_cycle_invariants(seed, gamma, closeness, prefix):
    p, q = toy_pair(closeness=closeness)
    res = speculative_cycle(p, q, prefix, gamma, np.random.default_rng(seed))
    assert 1 <= res.n_emitted <= gamma + 1
    assert 0 <= res.n_accepted <= res.n_proposed <= gamma
    assert res.n_proposed == len(res.drafted)
    assert res.emitted[: res.n_accepted] == res.drafted[: res.n_accepted]
    # drafting stops right after an EOS proposal
    assert p.eos not in res.drafted[:-1]
    assert res.n_proposed == gamma or res.drafted[-1] == p.eos
    # nothing is emitted after EOS
    assert p.eos not in res.emitted[:-1]
    assert res.hit_eos == (p.eos in res.emitted)
    eos_stop = not res.rejected and res.drafted[-1] == p.eos
    assert res.n_emitted == res.n_accepted + (0 if eos_stop else 1)
    assert res.bonus == (not res.rejected and not eos_stop)


def test_generate_is_reproducible_and_truncates():
    p, q = toy_pair()
    a = generate(p, q, (), 3, 6, np.random.default_rng(5))
    b = generate(p, q, (), 3, 6, np.random.default_rng(5))
    assert a == b
    total = sum(c.n_emitted for c in a.cycles)
    assert len(a.tokens) == 6 or a.tokens[-1] == p.eos
    assert total >= len(a.tokens)


@pytest.mark.parametrize("bad, error, match", [
    (dict(gamma=0), ValueError, "gamma"),
    (dict(variant="no_rollback"), TypeError, "variant: must be a cycle rule"),
    (dict(rng=np.random.RandomState(0)), TypeError, "rng"),
    (dict(rng=-1), ValueError, "rng"),
    (dict(prefix=(3,)), ValueError, "end-of-sequence"),
    (dict(prefix=(9,)), ValueError, "prefix"),
])
def test_cycle_validation(bad, error, match):
    p, q = toy_pair()
    kw = dict(prefix=(), gamma=2, rng=np.random.default_rng(0), variant=stateful.CORRECT_CYCLE) | bad
    with pytest.raises(error, match=match):
        speculative_cycle(p, q, kw["prefix"], kw["gamma"], kw["rng"], variant=kw["variant"])


def test_model_mismatch_raises():
    p, q = toy_pair()
    p3, _ = toy_pair(3)
    with pytest.raises(ValueError, match="vocabulary size"):
        block_sequence_law(p, p3, (), 2, 2)
    other_eos = ToyModel(4, 0, table=q.table, order=2)
    with pytest.raises(ValueError, match="end-of-sequence"):
        generate(p, other_eos, (), 2, 2, np.random.default_rng(0))
    with pytest.raises(TypeError, match="target"):
        simulate_cycles(p.table, q, (), 2, 10, np.random.default_rng(0))
    with pytest.raises(ValueError, match="length"):
        block_sequence_law(p, q, (), 2, 0)
    with pytest.raises(ValueError, match="n:"):
        simulate_generation(p, q, (), 2, 3, 0, np.random.default_rng(0))


# ------------------------------------------------------------------------- accounting


def test_accounting_exact_example():
    """Accepted [4, 0, 2] at gamma 4: 9 tokens in 3 cycles (3.0 each), 6 of 12 accepted."""
    a = account_counts([4, 0, 2], proposed=4)
    assert (a.n_cycles, a.emitted, a.accepted, a.proposed) == (3, 9, 6, 12)
    assert a.tokens_per_cycle == 3.0 and a.acceptance_rate == 0.5
    assert a.mean_accepted_length == 2.0
    assert a.drafted_per_cycle == 4.0 and a.inflation == pytest.approx(12 / 9)


def test_accepts_after_first_rejection_do_not_count():
    assert accepted_prefix_length([True, False, True, True]) == 1
    assert accepted_prefix_length([True, True, True]) == 3
    assert accepted_prefix_length([False, True]) == 0
    assert accepted_prefix_length(np.array([[1, 1, 0], [0, 1, 1], [1, 1, 1]])).tolist() == [2, 0, 3]
    with pytest.raises(ValueError, match="outcomes"):
        accepted_prefix_length([0, 2])
    with pytest.raises(ValueError, match="outcomes"):
        accepted_prefix_length(True)


def test_account_from_cycles_and_batches_agree_with_counts():
    p, q = toy_pair()
    gen = generate(p, q, (), 3, 40, np.random.default_rng(2))
    a = account(gen)
    assert a == account(gen.cycles)
    assert a.emitted == sum(c.n_emitted for c in gen.cycles)
    assert a.accepted == sum(c.n_accepted for c in gen.cycles)
    batch = simulate_generation(p, q, (), 3, 6, 2000, np.random.default_rng(3))
    b = account(batch)
    assert b.n_cycles == int(batch.n_cycles.sum()) and b.emitted == int(batch.n_emitted.sum())
    assert b.acceptance_rate == b.accepted / b.proposed
    # the drafted-as-output figure overstates the output when proposals get rejected
    assert b.drafted_per_cycle > b.tokens_per_cycle and b.inflation > 1
    cyc = simulate_cycles(p, q, (), 3, 5000, np.random.default_rng(4))
    assert account(cyc).n_cycles == 5000


def test_account_tokens_per_cycle_estimates_exact_mean():
    p, q = toy_pair()
    law = cycle_length_law(p, q, (), 4)
    mean = law @ np.arange(6)
    sd = np.sqrt(law @ (np.arange(6) - mean) ** 2)
    n = 50_000
    a = account(simulate_cycles(p, q, (), 4, n, np.random.default_rng(9)))
    assert abs(a.tokens_per_cycle - mean) < 6.1 * sd / np.sqrt(n)  # two-sided, ~1e-9


@pytest.mark.parametrize("kwargs, match", [
    (dict(accepted=[], proposed=4), "accepted"),
    (dict(accepted=[5], proposed=4), "accepted"),
    (dict(accepted=[-1], proposed=4), "accepted"),
    (dict(accepted=[1.5], proposed=4), "integers"),
    (dict(accepted=[1], proposed=0), "proposed"),
    (dict(accepted=[1, 2], proposed=4, emitted=[3, 3]), "emitted"),
    (dict(accepted=[0], proposed=4, emitted=[0]), "emitted"),
])
def test_account_counts_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        account_counts(kwargs.pop("accepted"), **kwargs)
    with pytest.raises(ValueError, match="cycles"):
        account([])


def test_account_refuses_counts_and_points_to_account_counts():
    with pytest.raises(TypeError, match=r"cycles: must be CycleResult objects .*use account_counts"):
        account([4, 0, 2])


def test_cycle_result_properties():
    c = CycleResult((1, 2), (1, 0, 3), 1, 3, False, False)
    assert c.n_emitted == 2 and c.rejected
    assert isinstance(account([c]), Accounting)


def test_chunked_engines_keep_records_aligned_and_law_exact():
    p, q = toy_pair()
    g = simulate_generation(p, q, (), 3, 5, 20_000, np.random.default_rng(11), chunk=777)
    assert g.tokens.shape == (20_000, 5)
    assert (np.bincount(g.sequence, minlength=20_000) == g.n_cycles).all()
    assert (np.diff(g.sequence) >= 0).all()
    # per sequence, the emitted counts of its cycles cover its tokens
    per_seq = np.bincount(g.sequence, weights=g.n_emitted, minlength=20_000)
    assert (per_seq >= g.n_tokens).all()
    _check_samples(g.sequence_counts(), target_sequence_law(p, (), 5))
    b = simulate_cycles(p, q, (), 2, 10_001, np.random.default_rng(12), chunk=1000)
    assert b.emitted.shape == (10_001, 3) and b.n_emitted.shape == (10_001,)
    stats.assert_law(np.bincount(b.n_emitted, minlength=4), cycle_length_law(p, q, (), 2),
                     false_alarm=FALSE_ALARM)
    with pytest.raises(ValueError, match="chunk"):
        simulate_cycles(p, q, (), 2, 10, np.random.default_rng(0), chunk=0)


def test_cycle_rules_are_named_frozen_objects_with_docstrings():
    names = [rule.name for rule in CYCLE_RULES]
    assert names == ["correct", "stale_proposals", "no_rollback", "bonus_wrong_position",
                     "emit_after_eos", "stale_original_q"]
    assert [r.name for r in CYCLE_RULES if r.exact] == ["correct", "stale_original_q"]
    assert set(CYCLE_FLAWS) == {r for r in CYCLE_RULES if not r.exact}
    for rule in CYCLE_RULES:
        assert type(rule).__doc__ and repr(rule) == rule.name
        with pytest.raises(AttributeError):
            rule.name = "other"
