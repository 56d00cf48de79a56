"""Tests for specdec.simulate: the article's run, and Monte Carlo against exact laws.

Every statistical assertion uses ``assert_law`` at false alarm 1e-9 (valid for every
number of trials), with fixed seeds.
"""

from __future__ import annotations

import numpy as np
import pytest

from specdec.laws import LawError
from specdec.simulate import (
    ARTICLE_SEED,
    ARTICLE_TRIALS,
    article_reference_run,
    running_frequencies,
    simulate_step,
    simulate_tokens,
)
from specdec.stats import assert_law
from specdec import simulate
from specdec.rules import token as tokenrule
from specdec.rules.token import STEP_RULES
from specdec.step import ARTICLE_P, ARTICLE_Q, output_law

P, Q = np.array(ARTICLE_P), np.array(ARTICLE_Q)

CASES = {
    "article": (P, Q),
    "four": (np.array([0.3, 0.1, 0.35, 0.25]), np.array([0.4, 0.3, 0.1, 0.2])),
    "zeros": (np.array([0.5, 0.0, 0.25, 0.25, 0.0]), np.array([0.2, 0.3, 0.0, 0.4, 0.1])),
    "equal": (np.array([0.6, 0.4]), np.array([0.6, 0.4])),
    "one_hot_q": (np.array([0.2, 0.5, 0.3]), np.array([0.0, 1.0, 0.0])),
    "single": (np.array([1.0]), np.array([1.0])),
}


# ------------------------------------------------------------------ the article's run


def test_article_reference_run_reproduces_published_counts():
    run = article_reference_run()
    assert run == {"correct": [100018, 59688, 40294], "fallback_p": [70010, 77662, 52328]}
    assert (ARTICLE_TRIALS, ARTICLE_SEED) == (200_000, 20260923)


def test_article_reference_run_is_deterministic_and_validated():
    assert article_reference_run(1000, 5) == article_reference_run(1000, 5)
    assert sum(article_reference_run(123, 1)["fallback_p"]) == 123
    with pytest.raises(ValueError, match="trials: must be an integer >= 1"):
        article_reference_run(0)
    with pytest.raises(LawError, match="q: vocabulary size"):
        article_reference_run(10, p=[0.5, 0.5], q=[1.0])


def test_article_reference_run_other_laws_follow_exact_laws():
    p, q = CASES["four"]
    run = article_reference_run(20_000, 3, p=p, q=q)
    assert_law(run["correct"], output_law(p, q))
    assert_law(run["fallback_p"], output_law(p, q, tokenrule.FALLBACK_P))


# ------------------------------------------------------------------ simulate_step


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_simulate_step_matches_exact_laws(case, dtype):
    p, q = CASES[case]
    rng = np.random.default_rng(sorted(CASES).index(case) * 2 + (dtype is np.float64))
    n = 300_007
    counts = simulate_step(p, q, n, rng, STEP_RULES, chunk=65_536, dtype=dtype)
    assert list(counts) == [rule.name for rule in STEP_RULES]
    for rule in STEP_RULES:
        c = counts[rule.name]
        assert c.dtype == np.int64 and c.shape == p.shape and int(c.sum()) == n
        assert_law(c, output_law(p, q, rule), false_alarm=1e-9)


def test_simulate_step_detects_every_flawed_rule():
    p, q = CASES["four"]
    counts = simulate_step(p, q, 1_000_000, np.random.default_rng(11), STEP_RULES)
    for rule in STEP_RULES:
        if rule.exact:
            assert_law(counts[rule.name], p)
        else:
            with pytest.raises(AssertionError, match="inconsistent with the law"):
                assert_law(counts[rule.name], p)


def test_shared_uniform_reuses_the_accept_uniform():
    """The bug must survive the engine: its counts follow the flawed law, not p."""
    p, q = CASES["four"]
    counts = simulate_step(p, q, 2_000_000, np.random.default_rng(12), (tokenrule.SHARED_UNIFORM,))
    assert_law(counts["shared_uniform"], output_law(p, q, tokenrule.SHARED_UNIFORM))
    with pytest.raises(AssertionError):
        assert_law(counts["shared_uniform"], p)


def test_rules_share_proposals_and_accept_decisions():
    rng = np.random.default_rng(5)
    counts = simulate_step(P, Q, 100_000, rng, (tokenrule.TOKEN, tokenrule.FALLBACK_P, tokenrule.SHARED_UNIFORM))
    # the residual is all on A: correct's B and C are exactly the accepted B and C,
    # which the fallback variant also emits, plus its recoveries
    assert np.all(counts["fallback_p"][1:] >= counts["correct"][1:])
    # shared_uniform recovers deterministically to A here, like the correct rule
    np.testing.assert_array_equal(counts["shared_uniform"], counts["correct"])


def test_simulate_step_reproducible_and_chunk_invariant_in_total():
    a = simulate_step(P, Q, 50_000, np.random.default_rng(1), chunk=4096)
    b = simulate_step(P, Q, 50_000, np.random.default_rng(1), chunk=4096)
    for rule in a:
        np.testing.assert_array_equal(a[rule], b[rule])
    tiny = simulate_step(P, Q, 7, np.random.default_rng(2), chunk=1)
    assert all(int(c.sum()) == 7 for c in tiny.values())


def test_simulate_step_many_tokens_uses_binary_search_path():
    rng = np.random.default_rng(8)
    p = rng.dirichlet(np.ones(40))
    q = rng.dirichlet(np.ones(40))
    counts = simulate_step(p, q, 400_000, rng, STEP_RULES)
    for rule in STEP_RULES:
        assert_law(counts[rule.name], output_law(p, q, rule))


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"trials": 0}, "trials: must be an integer >= 1 (got 0)"),
        ({"chunk": 0}, "chunk: must be an integer >= 1 (got 0)"),
        ({"rules": (tokenrule.TOKEN, "fallback_p")}, "rules: must be a token-by-token rule of specdec.rules.token"),
        ({"rules": ()}, "rules: must name at least one rule"),
        ({"dtype": np.int32}, "dtype: must be float32 or float64"),
        ({"rng": np.random.RandomState(0)}, "rng: must be a numpy.random.Generator"),
    ],
)
def test_simulate_step_errors(kwargs, fragment):
    args = {"trials": 10, "rng": np.random.default_rng(0)}
    args.update(kwargs)
    trials, rng = args.pop("trials"), args.pop("rng")
    with pytest.raises((LawError, TypeError, ValueError)) as err:
        simulate_step(P, Q, trials, rng, **args)
    assert fragment in str(err.value)


def test_simulate_step_accepts_a_single_rule():
    counts = simulate_step(P, Q, 10, np.random.default_rng(0), tokenrule.FALLBACK_P)
    assert list(counts) == ["fallback_p"]


@pytest.mark.parametrize("rule", [tokenrule.DROP_REJECTED, tokenrule.SHARED_UNIFORM])
def test_engines_refuse_proposal_dependent_rules_on_large_vocabularies(rule):
    v = simulate.MAX_VOCAB_PER_PROPOSAL_RECOVERY + 1
    p = np.full(v, 1.0 / v)
    for engine in (simulate_step, simulate_tokens):
        with pytest.raises(ValueError, match=rf"^rules: {rule.name} needs up to V x V numbers .* V = {v}"):
            engine(p, p, 10, np.random.default_rng(0), (tokenrule.TOKEN, rule))


# ------------------------------------------------------------------ per-trial engines


@pytest.mark.parametrize("case", ["four", "zeros", "article"])
def test_simulate_tokens_matches_exact_laws(case):
    p, q = CASES[case]
    tokens = simulate_tokens(p, q, 100_000, np.random.default_rng(3), STEP_RULES)
    for rule in STEP_RULES:
        t = tokens[rule.name]
        assert t.shape == (100_000,) and t.min() >= 0 and t.max() < p.size
        assert_law(np.bincount(t, minlength=p.size), output_law(p, q, rule))


def test_simulate_tokens_coupling():
    tokens = simulate_tokens(P, Q, 20_000, np.random.default_rng(9), (tokenrule.TOKEN, tokenrule.FALLBACK_P))
    differ = tokens["correct"] != tokens["fallback_p"]
    # variants can differ only on rejected trials, where correct emits A
    assert np.all(tokens["correct"][differ] == 0)
    # they differ when a rejection (Z = 0.3) is followed by a fallback draw other than A (0.5)
    assert abs(differ.mean() - 0.15) < 0.02


def test_running_frequencies():
    freq = running_frequencies(P, Q, 50_000, np.random.default_rng(4))
    assert set(freq) == {"correct", "fallback_p"}
    for rule, f in freq.items():
        assert f.shape == (50_000,) and np.all((f >= 0) & (f <= 1))
        assert f[0] in (0.0, 1.0)
    assert abs(freq["correct"][-1] - 0.5) < 0.02
    assert abs(freq["fallback_p"][-1] - 0.35) < 0.02
    other = running_frequencies(P, Q, 1000, np.random.default_rng(4), rules=(tokenrule.RESAMPLE_Q,), symbol=2)
    assert list(other) == ["resample_q"]
    with pytest.raises(ValueError, match=r"symbol: must be an integer in \[0, 2\] \(got 3\)"):
        running_frequencies(P, Q, 10, np.random.default_rng(0), symbol=3)
    with pytest.raises(ValueError, match="trials: must be an integer in"):
        running_frequencies(P, Q, 10**9, np.random.default_rng(0))
