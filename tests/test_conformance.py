"""Tests of the conformance kit (specdec.conformance) and of the gallery (specdec.conformance.gallery).

The kit must (1) pass correct samplers, at the stated family-wise false-alarm rate over
many seeds; (2) catch every bug of the gallery, on the cases built to show it; (3) check
the accounting samplers report; (4) be reproducible from a seed; (5) fail loudly on bad
input and report, not crash on, malformed sampler output. Seeds are fixed, so every
assertion is deterministic; the bounds quoted for the seed sweeps say why the fixed
outcome is the expected one.
"""

from __future__ import annotations

import math
import time
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from specdec.simulate import cycle as block
from specdec import conformance as C, laws, models, stats, step as token, verify
from specdec.conformance import gallery as G
from specdec.stats import gof as kitstats
from specdec.rules import cycle as stateful, token as tokenrule
from specdec.laws import LawError

SEED = 20260925


# --------------------------------------------------------------------------------------
# Calling conventions
# --------------------------------------------------------------------------------------


def test_describe_sampler_from_marks_and_signatures():
    assert C.describe_sampler(G.vectorised_correct) == C.SamplerSpec(
        "token", True, "laws", "specdec.conformance.gallery:vectorised_correct")
    assert C.describe_sampler(G.processed_correct).inputs == "logits"
    assert C.describe_sampler(G.StaleProposalsSampler()).kind == "block"
    assert C.describe_sampler(G.library_generation).vectorised
    assert C.describe_sampler(token.sample_step).kind == "token"          # 3 required args
    assert C.describe_sampler(block.speculative_cycle).kind == "block"    # 5 required args
    spec = C.describe_sampler(lambda p, q, rng, n: None)
    assert spec.kind == "token" and spec.vectorised
    spec = C.describe_sampler(lambda a, b, rng, *, temperature=1.0, top_k=None, top_p=None: 0)
    assert spec.inputs == "logits" and not spec.vectorised
    assert C.describe_sampler(lambda *a: 0, kind="token", vectorised=True).vectorised


def test_describe_sampler_errors():
    with pytest.raises(TypeError, match="sampler: must be callable"):
        C.describe_sampler(42)
    with pytest.raises(ValueError, match="cannot tell the calling convention"):
        C.describe_sampler(lambda *args: 0)
    with pytest.raises(ValueError, match="kind: must be one of"):
        C.describe_sampler(G.vectorised_correct, kind="step")
    with pytest.raises(ValueError, match="inputs: must be one of"):
        C.token_sampler(lambda p, q, rng: 0, inputs="probabilities")
    with pytest.raises(ValueError, match="inputs: block samplers receive toy models"):
        C.describe_sampler(block.speculative_cycle, inputs="logits")


# --------------------------------------------------------------------------------------
# The battery's cases
# --------------------------------------------------------------------------------------


def test_token_cases_cover_the_edge_cases():
    cases = {c.name: c for c in C.token_cases()}
    assert tuple(cases) == C.CASE_NAMES
    art = cases["article"]
    assert art.p.tolist() == [0.5, 0.3, 0.2] and art.q.tolist() == [0.2, 0.5, 0.3]
    assert token.rejection_probability(cases["equal"].p, cases["equal"].q) == 0.0
    assert token.acceptance_rate(cases["disjoint"].p, cases["disjoint"].q) == 0.0
    c = cases["draft_zero"]
    assert ((c.q == 0) & (c.p > 0)).any()
    c = cases["target_zero"]
    assert ((c.p == 0) & (c.q > 0)).any()
    assert cases["onehot_target"].p.max() == 1.0 and cases["onehot_draft"].q.max() == 1.0
    assert 0 < token.rejection_probability(cases["nearly_equal"].p, cases["nearly_equal"].q) < 0.01
    # the residual of spread_residual has several tokens, and reusing the accept uniform
    # shows there (it does not on the article's example, whose residual is one token)
    c = cases["spread_residual"]
    assert (token.residual(c.p, c.q) > 0).sum() >= 3
    assert laws.tv_distance(token.output_law(c.p, c.q, tokenrule.SHARED_UNIFORM), c.p) > 0.1
    assert laws.tv_distance(token.output_law(art.p, art.q, tokenrule.SHARED_UNIFORM), art.p) < 1e-12
    # large vocabulary: thousands of tokens, the same processing applied to both models
    big = cases["large_vocab"]
    assert big.vocab_size >= 4096 and 1000 < (big.p > 0).sum() <= 3000
    settings_ = dict(temperature=0.8, top_k=3000, top_p=0.98)
    assert big.settings == settings_
    np.testing.assert_array_equal(big.p, laws.sampling_law(big.target_logits, **settings_))
    np.testing.assert_array_equal(big.q, laws.sampling_law(big.draft_logits, **settings_))
    assert ((big.q == 0) & (big.p > 0)).any() and ((big.p == 0) & (big.q > 0)).any()


def test_cases_validate_their_laws():
    with pytest.raises(LawError, match="q: vocabulary size 2 does not match p"):
        C.TokenCase.from_laws("bad", "", [0.5, 0.5, 0.0], [0.5, 0.5])
    with pytest.raises(LawError, match="p: probabilities must sum to 1"):
        C.TokenCase.from_laws("bad", "", [0.5, 0.4], [0.5, 0.5])
    with pytest.raises(ValueError, match="top_k"):
        C.TokenCase.from_logits("bad", "", [0.0, 1.0], [1.0, 0.0], top_k=3)


def test_block_cases_span_several_gammas_and_cycles():
    cases = C.block_cases()
    assert tuple(c.name for c in cases) == C.BLOCK_CASE_NAMES
    assert {c.gamma for c in cases} >= {1, 2, 4}
    assert any(c.target.eos is not None for c in cases)
    for c in cases:  # a decode needs a second cycle unless its first accepts everything
        assert c.length >= c.gamma


# --------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 400), st.integers(1, 10**6), st.integers(0, 2**32 - 1),
       st.sampled_from([5.0, 10.0, 40.0]), st.integers(1, 150))
def test_pool_cells_rule(v, trials, seed, min_expected, max_bins):
    g = np.random.default_rng(seed)
    law = g.dirichlet(np.full(v, 0.3))
    law[g.random(v) < 0.2] = 0.0
    if law.sum() == 0:
        law[0] = 1.0
    law /= law.sum()
    b = C.pool_cells(law, trials, min_expected=min_expected, max_bins=max_bins)
    assert np.array_equal(b.bin_of < 0, law == 0)               # impossible cells apart
    assert math.isclose(b.law.sum(), 1.0)
    assert set(b.bin_of[law > 0].tolist()) == set(range(b.n_bins))
    expected = trials * b.law
    floor = max(min_expected, trials / max_bins)
    assert b.floor == floor
    if trials * law.sum() >= floor:                             # enough mass for one full bin
        assert (expected >= floor * (1 - 1e-12)).all()
    assert b.n_bins <= max(1, max_bins)
    again = C.pool_cells(law, trials, min_expected=min_expected, max_bins=max_bins)
    assert np.array_equal(b.bin_of, again.bin_of)               # data-independent, deterministic


def test_pool_cells_keeps_large_cells_and_pools_the_tail_in_order():
    b = C.pool_cells([0.5, 0.3, 0.1996, 0.0002, 0.0002, 0.0], 1000)
    assert b.bin_of.tolist() == [0, 1, 2, 2, 2, -1] and b.pooled_cells == 3
    with pytest.raises(ValueError, match="trials: must be an integer >= 1"):
        C.pool_cells([1.0], 0)
    with pytest.raises(ValueError, match="min_expected"):
        C.pool_cells([1.0], 10, min_expected=0)


def test_large_vocab_is_pooled_into_adequate_bins():
    big = C.token_cases()[-1]
    r = C.run_battery(G.vectorised_correct, cases=["large_vocab"], trials=200_000, seed=SEED)
    law = r.cases[0].law
    assert law.pooled_cells > 0 and 100 < law.bins <= kitstats.bins_for_trials(200_000)
    # at 20,000 trials, most cells expect fewer than 5 counts: a chi-square over them
    # would be invalid; the bins all expect at least 20,000 / bins_for_trials(20,000)
    assert (20_000 * big.p[big.p > 0] < 5).mean() > 0.5
    b = C.pool_cells(big.p, 20_000, max_bins=kitstats.bins_for_trials(20_000))
    assert (20_000 * b.law >= 20_000 / kitstats.bins_for_trials(20_000)).all()
    r = C.run_battery(G.vectorised_correct, cases=["large_vocab"], trials=20_000, seed=SEED)
    assert r.passed and r.cases[0].law.bins == b.n_bins


def test_chi_square_pooling_is_calibrated_on_the_large_vocabulary():
    """Under the null, the pooled chi-square's p-values are uniform (simulated counts)."""
    big = C.token_cases()[-1]
    g = np.random.default_rng(SEED)
    pvals = []
    for _ in range(400):
        counts = g.multinomial(20_000, big.p)
        chk = kitstats.pooled_chisquare(counts, big.p, max_bins=kitstats.bins_for_trials(20_000))
        pvals.append(chk.pvalue)
    pvals = np.array(pvals)
    assert sps.kstest(pvals, "uniform").pvalue > 1e-3
    assert 0.02 <= (pvals < 0.1).mean() / 2 <= 0.08


def test_holm_adjust():
    np.testing.assert_allclose(C.holm_adjust([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
    np.testing.assert_allclose(C.holm_adjust([0.5]), [0.5])
    assert C.holm_adjust([]).size == 0
    p = np.random.default_rng(0).random(30)
    adj = C.holm_adjust(p)
    assert (adj >= p).all() and (adj <= 1).all()
    order = np.argsort(p)
    assert (np.diff(adj[order]) >= 0).all()
    with pytest.raises(ValueError, match="pvalues: must all be in"):
        C.holm_adjust([0.1, 1.5])


def test_detectable_tv_has_the_stated_power_in_the_worst_direction():
    """Shift mass by TV = detectable along the least favourable direction: power ~ 0.9."""
    p = np.array([0.5, 0.3, 0.2])
    n, level, power = 20_000, 1e-3 / 20, 0.9
    tv = C.detectable_tv(n, 2, level, power)
    s = p + tv * np.array([1.0, -0.6, -0.4])      # d = 2 tv p on {A}, -2 tv p on {B, C}
    assert math.isclose(laws.tv_distance(s, p), tv)
    assert math.isclose(float(((s - p) ** 2 / p).sum()), 4 * tv**2)
    g = np.random.default_rng(SEED)
    counts = g.multinomial(n, s, size=4000)
    stat = ((counts - n * p) ** 2 / (n * p)).sum(axis=1)
    rate = (sps.chi2.sf(stat, 2) <= level).mean()
    assert 0.87 <= rate <= 0.93
    # 1/sqrt(n) scaling, and the one-bin case (only impossible outcomes can show)
    assert math.isclose(C.detectable_tv(4 * n, 2, level, power), tv / 2, rel_tol=1e-6)
    assert math.isclose(C.detectable_tv(1000, 0, level, power), 1 - 0.1 ** (1 / 1000))
    with pytest.raises(ValueError, match="power: must be in"):
        C.detectable_tv(n, 2, level, 1.0)


# --------------------------------------------------------------------------------------
# Correct samplers pass
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("sampler", [G.vectorised_correct, G.library_vectorised, G.processed_correct])
def test_vectorised_correct_samplers_pass(sampler):
    report = C.assert_conforms(sampler, seed=SEED, trials=200_000)
    assert report.passed and len(report.cases) == len(C.CASE_NAMES)
    assert report.cases[0].trials == 200_000
    if sampler is not G.library_vectorised:        # these report accepted flags
        assert all(c.accounting is not None for c in report.cases)


def test_library_scalar_step_passes():
    report = C.run_battery(token.sample_step, seed=SEED, trials=2_000)
    assert report.passed, report.to_markdown()


def test_library_block_samplers_pass():
    report = C.run_battery(block.speculative_cycle, seed=SEED, trials=800)
    assert report.passed, report.to_markdown()
    assert all(c.accounting is not None for c in report.cases)
    report = C.run_battery(G.library_generation, seed=SEED, trials=40_000)
    assert report.passed, report.to_markdown()
    c = report.case("block_g4")
    assert abs(c.cycles.first_emitted - c.cycles.exact_emitted) < 0.05


def test_false_alarm_rate_over_many_seeds():
    """40 seeds of a correct vectorised sampler at a family-wise rate of 0.05.

    Expected false alarms: at most 0.05 * 40 = 2; observing 8 or more has probability
    below 1e-3 under that rate. The individual checks' p-values must be uniform: their
    fraction below 0.05 is 0.05 within 3.5 standard errors.
    """
    fails, pvals = 0, []
    for seed in range(40):
        r = C.run_battery(G.vectorised_correct, seed=seed, trials=20_000, false_alarm=0.05)
        fails += not r.passed
        pvals += [k.pvalue for c in r.cases for k in c.checks if k.dof > 0]
    assert sps.binom.sf(7, 40, 0.05) < 1e-3
    assert fails <= 7
    pvals = np.array(pvals)
    se = math.sqrt(0.05 * 0.95 / pvals.size)
    assert abs((pvals < 0.05).mean() - 0.05) < 3.5 * se
    assert sps.kstest(pvals, "uniform").pvalue > 1e-4


# --------------------------------------------------------------------------------------
# Every bug of the gallery is caught, on the cases that show it
# --------------------------------------------------------------------------------------


SHOWN_ON = {  # cases where the bug changes the law, and cases where it provably does not
    "always_accept": ({"article", "disjoint", "large_vocab"}, {"equal"}),
    "greedy_draft": ({"article", "processed", "large_vocab"}, set()),
    "truncated_draft": ({"processed", "large_vocab"}, {"article", "equal", "spread_residual"}),
    "untempered_target": ({"processed", "large_vocab"}, {"article", "disjoint", "equal"}),
    "drop_rejected": ({"article", "spread_residual"}, {"equal"}),
    "shared_uniform": ({"spread_residual"}, {"article", "equal", "disjoint"}),
}


_REPORTS: dict = {}


def token_bug_report(entry):
    """The battery's report on a token bug (computed once per module run)."""
    if entry.key not in _REPORTS:
        sampler = entry.make()
        trials = 200_000 if C.describe_sampler(sampler).vectorised else 4_000
        _REPORTS[entry.key] = (C.run_battery(sampler, seed=SEED, trials=trials), trials)
    return _REPORTS[entry.key]


@pytest.mark.parametrize("entry", [e for e in G.BUGS if e.kind == "token"], ids=lambda e: e.key)
def test_token_bugs_are_caught(entry):
    report, _ = token_bug_report(entry)
    assert not report.passed
    failed = {c.name for c in report.failures}
    shown, hidden = SHOWN_ON[entry.key]
    assert shown <= failed, report.to_markdown()
    assert not (hidden & failed), report.to_markdown()
    assert np.isfinite(report.trials_needed)


def test_tv_found_brackets_the_exact_tv():
    """Unpooled cases: the TV interval covers the exact TV of the bug's output law."""
    case = C.token_cases()[0]
    for sampler, rule in ((G.drop_rejected, tokenrule.DROP_REJECTED), (G.always_accept, None)):
        exact = token.output_law(case.p, case.q, rule) if rule else case.q
        r = C.run_battery(sampler, cases=["article"], trials=10_000, seed=SEED)
        law = r.cases[0].law
        assert law.tv_low <= laws.tv_distance(exact, case.p) <= law.tv_high
        assert law.tv_detectable < law.tv_low


@pytest.mark.parametrize("entry", [e for e in G.BUGS if e.kind == "block"], ids=lambda e: e.key)
def test_block_bugs_are_caught(entry):
    report = C.run_battery(entry.make(), seed=SEED, trials=1_500)
    assert not report.passed
    failed = {c.name for c in report.failures}
    assert {"block_g2", "block_g4"} <= failed, report.to_markdown()
    if entry.key in ("stale_proposals", "overcounting"):   # gamma = 1 leaves nothing stale
        assert "block_g1" not in failed


def test_stale_proposals_matches_the_library_exact_law():
    """The gallery's bug 7 is specdec.simulate.cycle's "stale_proposals": same exact law."""
    case = {c.name: c for c in C.block_cases()}["block_g4"]
    wrong = stateful.block_sequence_law(case.target, case.draft, (), 4, 4, stateful.STALE_PROPOSALS)
    exact_tv = laws.law_tv(wrong, models.sequence_law(case.target, (), 4))
    r = C.run_battery(G.StaleProposalsSampler(), cases=["block_g4"], trials=4_000, seed=SEED)
    law = r.cases[0].law
    assert law.tv_low <= exact_tv and law.tv <= exact_tv + 0.05
    assert not r.passed


def test_accounting_bug_is_caught_deterministically():
    """[accept, reject, accept, accept] must count 1 accepted proposal, not 3."""

    @C.block_sampler
    def reports_three(target, draft, prefix, gamma, rng):
        x = int(np.argmax(target.next_law(prefix)))
        return [x, x], 3, 4              # 2 emitted = 1 accepted + 1 corrected

    r = C.run_battery(reports_three, cases=["block_g4"], trials=50, seed=SEED)
    assert not r.passed and not r.accounting_ok
    assert any("accepted = emitted - 1" in v for v in r.cases[0].accounting_violations)
    r = C.run_battery(G.overcounting_cycle, cases=["block_g4"], trials=300, seed=SEED)
    c = r.cases[0]
    assert not c.passed and c.cycles.acceptance > c.cycles.exact_accepted / 4 + 0.1
    assert any("accepted = emitted - 1" in v for v in c.accounting_violations)
    # the law is exact: the exactness verdict passes, the accounting verdict names the cause
    assert c.exact and not c.accounting_ok and r.exact
    assert any("accepts after the first rejection" in x for x in c.causes)
    # a deterministic violation seen in most decodes: caught in a handful of trials
    assert c.trials_needed < 20


def test_token_accounting_is_checked():
    @C.token_sampler(vectorised=True)
    def claims_all_accepted(p, q, rng, n):
        tokens, _ = G.vectorised_correct(p, q, rng, n)
        return tokens, np.ones(n, dtype=bool)          # the law is right, the flags are not

    r = C.run_battery(claims_all_accepted, cases=["article", "spread_residual"], seed=SEED,
                      trials=50_000)
    assert not r.passed
    for c in r.cases:
        assert c.law is not None and not c.law.failed        # the law passes...
        assert c.accounting.failed                           # ...the accounting does not
        assert c.exact and not c.accounting_ok
        assert c.cycles.acceptance == 1.0 and c.cycles.exact_accepted < 1.0
    assert "Verdicts: exactness (the law) pass; accounting FAIL" in r.to_markdown()


# --------------------------------------------------------------------------------------
# Malformed output, crashes, bad input
# --------------------------------------------------------------------------------------


def test_malformed_outputs_and_crashes_are_failures_not_crashes():
    samplers = {
        "float": C.token_sampler(lambda p, q, rng: 0.0),
        "out of range": C.token_sampler(lambda p, q, rng: len(p)),
        "raises": C.token_sampler(lambda p, q, rng: 1 // 0),
        "short": C.token_sampler(lambda p, q, rng, n: np.zeros(n - 1, dtype=int), vectorised=True),
    }
    for name, s in samplers.items():
        r = C.run_battery(s, cases=["article"], trials=100, seed=SEED)
        assert not r.passed, name
        assert r.cases[0].violations, name
    assert "ZeroDivisionError" in C.run_battery(samplers["raises"], cases=["article"],
                                                trials=10).cases[0].violations[0]
    r = C.run_battery(C.block_sampler(lambda t, d, prefix, gamma, rng: []), cases=["block_g1"],
                      trials=5)
    assert not r.passed and "emitted no token" in r.cases[0].violations[0]


def test_impossible_tokens_fail_without_spending_false_alarm():
    # a sampler that puts 1% of its mass on a token the target never emits
    @C.token_sampler(vectorised=True)
    def leaky(p, q, rng, n):
        tokens, _ = G.vectorised_correct(p, q, rng, n)
        tokens[rng.random(n) < 0.01] = int(np.flatnonzero(p == 0)[0])
        return tokens

    r = C.run_battery(leaky, cases=["target_zero", "onehot_target"], trials=2_000, seed=SEED)
    for c in r.cases:
        assert not c.passed and c.law.impossible > 0
        assert any("probability 0 under the target" in v for v in c.violations)
    assert r.n_tests == 1          # the one-hot case has no chi-square: one bin


@pytest.mark.parametrize("kwargs, message", [
    (dict(trials=0), "trials: must be an integer >= 1"),
    (dict(seed=-1), "seed: must be an integer >= 0"),
    (dict(false_alarm=0.0), "false_alarm: must be a number in"),
    (dict(false_alarm=float("nan")), "false_alarm: must be a number in"),
    (dict(power=1.0), "power: must be a number in"),
    (dict(confidence=0), "confidence: must be a number in"),
    (dict(cases=["nope"]), "cases: unknown token case 'nope'"),
    (dict(cases=["block_g1"]), "cases: unknown token case 'block_g1'"),
    (dict(cases=[]), "cases: must not be empty"),
    (dict(cases=["article", "article"]), "cases: names must be unique"),
])
def test_run_battery_validates_its_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        C.run_battery(G.vectorised_correct, **kwargs)


def test_run_battery_rejects_non_callables():
    with pytest.raises(TypeError, match="sampler: must be callable"):
        C.run_battery("specdec.conformance.gallery:vectorised_correct")


# --------------------------------------------------------------------------------------
# Reproducibility and the report
# --------------------------------------------------------------------------------------


def test_report_is_reproducible_from_the_seed():
    a = C.run_battery(G.vectorised_correct, seed=7, trials=20_000)
    b = C.run_battery(G.vectorised_correct, seed=7, trials=20_000)
    assert a == b and a.to_markdown() == b.to_markdown()
    c = C.run_battery(G.vectorised_correct, seed=8, trials=20_000)
    assert [x.law.statistic for x in a.cases] != [x.law.statistic for x in c.cases]
    # a case's stream does not depend on the other cases of the run
    alone = C.run_battery(G.vectorised_correct, seed=7, trials=20_000, cases=["processed"])
    assert alone.cases[0].law.statistic == a.case("processed").law.statistic
    # block samplers too (stateful ones are reset before every decode)
    x = C.run_battery(G.NoRollbackSampler(), seed=3, trials=300, cases=["block_g2"])
    y = C.run_battery(G.NoRollbackSampler(), seed=3, trials=300, cases=["block_g2"])
    assert x == y


def test_report_markdown_names_the_method_and_the_failures():
    r = C.run_battery(G.shared_uniform, seed=SEED, trials=3_000, false_alarm=1e-3,
                      cases=["article", "spread_residual"])
    md = r.to_markdown()
    assert md.startswith("## Conformance report: FAIL")
    assert "Holm over 2 statistical checks" in md and "<= 0.001" in md
    assert "**spread_residual**" in md and "trials needed" in md
    assert "| article | 3,000 |" in md
    assert r.case("article").passed and not r.case("spread_residual").passed
    with pytest.raises(KeyError):
        r.case("nope")
    assert r.max_tv.name == "spread_residual"


def test_assert_conforms_raises_with_the_report():
    with pytest.raises(AssertionError, match="does not conform") as info:
        C.assert_conforms(G.greedy_draft, cases=["article"], trials=2_000, seed=SEED)
    assert "| article |" in str(info.value)


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------


def test_cli_exit_codes(capsys):
    assert C.main(["specdec.conformance.gallery:vectorised_correct", "--trials", "5000", "--seed", "1"]) == 0
    assert "Conformance report: PASS" in capsys.readouterr().out
    assert C.main(["specdec.conformance.gallery:greedy_draft", "--trials", "5000", "--cases", "article"]) == 1
    assert "Conformance report: FAIL" in capsys.readouterr().out
    assert C.main(["specdec.conformance.gallery:no_such_sampler"]) == 2
    assert "has no attribute" in capsys.readouterr().err
    assert C.main(["no_such_module_xyz:f"]) == 2
    assert C.main(["specdec.conformance.gallery"]) == 2          # a module, without ':function'
    assert "write 'specdec.conformance.gallery:function'" in capsys.readouterr().err
    assert C.main(["specdec.conformance.gallery:vectorised_correct", "--trials", "0"]) == 2
    assert C.main(["specdec.conformance.gallery:vectorised_correct", "--cases", "block_g1"]) == 2
    assert C.main([]) == 2
    assert C.main(["--list-cases"]) == 0
    assert "large_vocab" in capsys.readouterr().out
    assert C.main(["specdec.conformance.gallery:NoRollbackSampler", "--trials", "200", "--cases", "block_g1"]) == 1
    assert "block sampler" in capsys.readouterr().out
    # --rule names the rule whose accepted-count law the counts follow (the old spelling too)
    for flag, name in (("--rule", "block"), ("--accepted-law", "block"), ("--rule", "token")):
        assert C.main(["specdec.conformance.gallery:NoRollbackSampler", "--trials", "200", "--cases", "block_g1",
                       flag, name]) == 1
        out = capsys.readouterr().out
        words = "block verification" if name == "block" else "token-by-token verification"
        assert f"accepted counts checked against the accepted-count law of {words} (declared)" in out


def test_cli_usage_errors_name_the_flag(tmp_path, monkeypatch, capsys):
    """Every usage error exits 2 before anything runs, naming the argument at fault."""
    (tmp_path / "broken_syntax.py").write_text("def f(:\n")
    (tmp_path / "raises_at_import.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ok = "specdec.conformance.gallery:vectorised_correct"
    for argv, words in (
            (["broken_syntax:f"], ["sampler:", "SyntaxError"]),
            (["raises_at_import:f"], ["sampler:", "RuntimeError", "boom"]),
            (["no_such_module_xyz:f"], ["sampler:", "cannot import"]),
            (["specdec.conformance.gallery:"], ["'specdec.conformance.gallery:function'"]),
            ([ok, "--seed", "-1"], ["--seed"]),
            ([ok, "--false-alarm", "1.5"], ["--false-alarm"]),
            ([ok, "--trials", "10", "--resolution", "0.02"], ["--trials and --resolution"]),
            ([ok, "--trials", "10", "--budget", "5"], ["--trials and --budget"]),
            ([ok, "--resolution", "0.02", "--budget", "5"], ["--resolution and --budget"]),
            ([ok, "--trials", "1000", "--plan"], ["--plan"]),
            ([ok, "--measure", "--plan"], ["--measure"]),
            (["specdec.conformance.gallery:NoRollbackSampler", "--accepted-law", "bogus"], ["--accepted-law", "token"]),
            (["specdec.conformance.gallery:NoRollbackSampler", "--rule", "bogus"], ["--rule", "block", "token_residual"]),
            (["specdec.conformance.gallery:NoRollbackSampler", "--rule", "block", "--accepted-law", "block"],
             ["--rule: give the rule or --accepted-law, not both"]),
            (["specdec.conformance.gallery:NoRollbackSampler", "--accepted-law", "specdec.conformance.gallery:nosuch"],
             ["--accepted-law:", "has no attribute"]),
            (["specdec.conformance.gallery:NoRollbackSampler", "--accepted-law", "json:dumps"],
             ["--accepted-law: must be callable as law(target, draft, prefix, gamma)", "dumps"])):
        assert C.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert all(w in err for w in words), (argv, err)
        assert "Traceback" not in err


def test_cli_plans_from_a_pilot_and_honours_a_budget(capsys):
    assert C.main(["specdec.conformance.gallery:vectorised_correct", "--cases", "article,equal",
                   "--budget", "1", "--plan"]) == 0
    out = capsys.readouterr()
    assert out.err.startswith("plan: budget 1 s:") and "detectable TV <=" in out.err
    assert "| article |" in out.out and "seconds (estimated)" in out.out
    assert C.main(["specdec.conformance.gallery:vectorised_correct", "--cases", "article",
                   "--resolution", "0.02", "--timings"]) == 0
    out = capsys.readouterr()
    assert "plan: " in out.err and "Conformance report: PASS" in out.out
    assert "in the sampler" in out.out
    assert C.main(["specdec.conformance.gallery:argmax_draft", "--cases", "article", "--trials", "20000",
                   "--proposals", "own"]) == 0
    assert "(declared)" in capsys.readouterr().out


def test_cli_as_a_module():
    cmd = [sys.executable, "-m", "specdec.conformance", "specdec.conformance.gallery:always_accept",
           "--trials", "500", "--cases", "article,equal"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "| article | 500 |" in proc.stdout and "| equal | 500 |" in proc.stdout


def _binned_tv(exact, case, trials) -> float:
    """Exact TV between a law and the target, on the bins the kit uses for ``trials``."""
    b = C.pool_cells(case.p, trials, max_bins=kitstats.bins_for_trials(trials))
    ok = b.bin_of >= 0
    s = np.bincount(b.bin_of[ok], weights=exact[ok], minlength=b.n_bins)
    return 0.5 * (np.abs(s - b.law).sum() + exact[~ok].sum())


@pytest.mark.parametrize("entry", [e for e in G.BUGS if e.kind == "token"], ids=lambda e: e.key)
def test_verdicts_agree_with_the_exact_laws(entry):
    """Where the bug's exact law (on the bins) is far beyond the detectable TV, the law
    check fails; where it equals the target's, the law check passes."""
    report, trials = token_bug_report(entry)
    for case in C.token_cases():
        if case.vocab_size > 1000 and entry.key in ("drop_rejected", "shared_uniform"):
            continue  # their exact laws build a (V, V) recovery table: slow for 4096 tokens
        res = report.case(case.name)
        exact = entry.exact(case)
        tv = _binned_tv(exact, case, trials)
        if tv > 2 * res.law.tv_detectable:
            assert res.law.failed, (case.name, tv)
        if entry.exact_tv(case) < 1e-12:
            assert not res.law.failed, case.name


# --------------------------------------------------------------------------------------
# Accounting conventions: no false alarm on correct samplers, and the misses fixed
# --------------------------------------------------------------------------------------


def test_argmax_draft_reporting_its_flags_passes():
    """Proposals from another law (a point mass on the draft's arg-max) are detected, not failed."""
    r = C.run_battery(G.argmax_draft, seed=SEED, trials=100_000)
    assert r.passed and r.exact and r.accounting_ok, r.to_markdown()
    assert any("proposals not drawn from q (detected" in c for c in r.conventions)
    # its acceptance is lower than the exact rule's with q: a warning, never a failure
    assert r.warnings and "article" in " ".join(r.warnings)
    # declared rather than detected: the same verdict, said so
    r = C.run_battery(G.argmax_draft, seed=SEED, trials=20_000, proposals="own",
                      cases=["article", "equal"])
    assert r.passed and any("(declared)" in c for c in r.conventions)
    # with proposals="q" declared, the kit holds it to the joint law of proposals from q
    r = C.run_battery(G.argmax_draft, seed=SEED, trials=20_000, proposals="q", cases=["article"])
    assert r.exact and not r.accounting_ok and not r.passed


def test_bug_two_still_fails_although_proposals_are_detected():
    """greedy_draft makes the arg-max proposal too, but with q in the ratio: its law is wrong."""
    r = C.run_battery(G.greedy_draft, seed=SEED, trials=200_000)
    assert not r.exact and not r.passed


class _NotCountingEos:
    """The library cycle, reporting an accepted end-of-sequence as not accepted (as HF does)."""

    def __call__(self, target, draft, prefix, gamma, rng):
        res = block.speculative_cycle(target, draft, prefix, gamma, rng)
        acc = res.n_accepted
        if target.eos is not None and acc == len(res.emitted) and res.emitted[-1] == target.eos:
            acc -= 1
        return list(res.emitted), acc, res.n_proposed


C.block_sampler(_NotCountingEos)


def test_accepted_eos_counted_or_not_both_pass():
    for convention in (None, "not_counted"):
        r = C.run_battery(_NotCountingEos(), seed=SEED, trials=3_000, cases=["block_eos_g3"],
                          accepted_eos=convention)
        assert r.passed, r.to_markdown()
        how = "detected" if convention is None else "declared"
        assert f"an accepted end-of-sequence is not counted as accepted ({how})" in r.conventions
    r = C.run_battery(block.speculative_cycle, seed=SEED, trials=3_000, cases=["block_eos_g3"])
    assert r.passed and "an accepted end-of-sequence is counted as accepted (detected)" in r.conventions
    # declared wrongly, the accounting law check fails (and says what to declare)
    r = C.run_battery(block.speculative_cycle, seed=SEED, trials=3_000, cases=["block_eos_g3"],
                      accepted_eos="not_counted")
    assert r.exact and not r.accounting_ok
    assert any("accepted_eos" in x for x in r.cases[0].causes)


def test_first_cycle_joint_law_sums_to_the_library_count_law():
    for case in C.block_cases():
        joint = tokenrule.TOKEN.first_cycle_accepted_law(case.target, case.draft, case.prefix, case.gamma)
        np.testing.assert_allclose(joint.sum(axis=1), stateful.cycle_accepted_law(
            case.target, case.draft, case.prefix, case.gamma), atol=1e-12)
        e_law = stateful.cycle_length_law(case.target, case.draft, case.prefix, case.gamma)
        exact_e = float(np.arange(case.gamma + 1) @ joint.sum(axis=1)) + 1 - joint[:, 1].sum()
        assert math.isclose(exact_e, float(np.arange(e_law.size) @ e_law), rel_tol=1e-12)
        assert (joint[:, 1].sum() > 0) == (case.target.eos is not None)


def test_vectorised_block_sampler_emitting_past_eos_fails():
    r = C.run_battery(G.past_eos_generation, seed=SEED, trials=2_000, cases=["block_eos_g3"])
    c = r.cases[0]
    assert not r.passed and not c.exact
    assert any("after end-of-sequence" in v for v in c.violations)
    # caught in every run of a few dozen decodes, and "trials needed" says so
    assert c.trials_needed < 50
    # the same engine stopping at end-of-sequence passes
    assert C.run_battery(G.library_generation, seed=SEED, trials=2_000,
                         cases=["block_eos_g3"]).passed


def test_a_deterministic_violation_ends_the_case_at_its_screen():
    # the default plan for this sampler is millions of decodes; the violation shows in the
    # first few dozen, so the case stops after its screen and says what was planned
    t0 = time.perf_counter()
    r = C.run_battery(G.past_eos_generation, seed=SEED, cases=["block_eos_g3"])
    c = r.cases[0]
    assert not r.passed and c.planned_trials is not None and c.planned_trials > 100_000
    assert c.trials == C.runner.SCREEN_TRIALS and time.perf_counter() - t0 < 60
    assert "stopped early: a violation" in r.to_markdown()
    assert r.to_dict()["cases"][0]["planned_trials"] == c.planned_trials
    # an exact sampler runs its planned trials, with the result it has without the screen
    from specdec.conformance.checks import run_case
    from specdec.conformance.conventions import describe_sampler

    ok = C.run_battery(G.library_generation, seed=SEED, trials=2_000, cases=["block_eos_g3"])
    assert ok.passed and ok.cases[0].planned_trials is None and ok.cases[0].trials == 2_000
    case = next(x for x in C.block_cases() if x.name == "block_eos_g3")
    alone = run_case(G.library_generation, case, spec=describe_sampler(G.library_generation),
                     seed=SEED, trials=2_000)[0]
    import dataclasses

    # the battery fills in the family's adjusted p-value and the detectable TV afterwards
    filled = {k: getattr(ok.cases[0].law, k) for k in ("tv_detectable", "adjusted_pvalue")}
    assert dataclasses.replace(alone.law, **filled) == ok.cases[0].law and alone.violations == ()


def test_trials_needed_accounts_for_deterministic_violations():
    r = C.run_battery(G.StaleProposalsSampler(), seed=SEED, trials=1_500, cases=["block_g4"])
    assert not r.passed and np.isfinite(r.trials_needed)

    @C.token_sampler(vectorised=True)
    def leaky(p, q, rng, n):                 # 10% of the steps emit a token of probability 0
        tokens, _ = G.vectorised_correct(p, q, rng, n)
        tokens[rng.random(n) < 0.1] = int(np.flatnonzero(p == 0)[0])
        return tokens

    r = C.run_battery(leaky, seed=SEED, trials=5_000, cases=["target_zero"])
    # P(no bad step in n) = 0.9^n <= 0.1 at n = 22
    assert 15 <= r.trials_needed <= 30


def test_report_names_the_failing_check_and_its_cause():
    r = C.run_battery(G.shared_uniform, seed=SEED, trials=4_000, cases=["spread_residual"])
    c = r.cases[0]
    assert not c.exact and c.causes
    assert "law check failed" in c.causes[0] and "reused uniform" in c.causes[0]
    assert "reused uniform" in r.to_markdown()


# --------------------------------------------------------------------------------------
# Resolution that grows with the trials; plans and budgets
# --------------------------------------------------------------------------------------


def test_bins_and_resolution_grow_with_the_trials():
    big = {c.name: c for c in C.token_cases()}["large_vocab"]
    bins = [C.pool_cells(big.p, n, max_bins=kitstats.bins_for_trials(n)).n_bins
            for n in (20_000, 200_000, 2_000_000)]
    assert bins[0] < bins[1] < bins[2]
    small = C.run_battery(G.vectorised_correct, cases=["large_vocab"], trials=50_000, seed=SEED)
    large = C.run_battery(G.vectorised_correct, cases=["large_vocab"], trials=800_000, seed=SEED)
    # 16 times the trials: the detectable TV shrinks by more than 2 (at most 4, as 1/sqrt(n)),
    # although the bins are finer
    a, b = small.cases[0].law, large.cases[0].law
    assert b.bins > a.bins and 2 < a.tv_detectable / b.tv_detectable < 4
    assert small.passed and large.passed


def test_a_bug_confined_to_the_tail_is_resolved_by_more_trials():
    """A sampler that moves mass between tail tokens only: pooled away at 100 bins, seen with
    bins that grow with the trials."""
    big = {c.name: c for c in C.token_cases()}["large_vocab"]
    order = np.argsort(-big.p, kind="stable")
    tail = order[(big.p[order] > 0)][100:]           # beyond the 100 most likely tokens
    hi, lo = tail[0:-1:2], tail[1::2][: tail[0:-1:2].size]
    move = 0.5 * np.minimum(big.p[hi], big.p[lo])     # from each odd rank to the rank above
    wrong = big.p.copy()
    wrong[hi] += move
    wrong[lo] -= move

    @C.token_sampler(vectorised=True)
    def tail_bug(p, q, rng, n):
        return verify.draw(wrong if p.size == big.p.size else p, rng.random(n))

    tv = laws.tv_distance(wrong, big.p)
    assert 0.05 < tv < 0.2
    n = 500_000
    coarse = C.run_battery(tail_bug, cases=["large_vocab"], trials=n, seed=SEED, max_bins=100)
    fine = C.run_battery(tail_bug, cases=["large_vocab"], trials=n, seed=SEED)
    assert coarse.passed                         # 100 bins pool the tail: the bug is invisible
    assert not fine.passed and not fine.exact    # the growing bins see it


def test_default_plans_reach_the_stated_resolution():
    for sampler, tv in ((G.vectorised_correct, 0.001), (token.sample_step, 0.01)):
        spec = C.describe_sampler(sampler)
        p = C.plan_battery(spec, sampler, C.token_cases())
        assert p.resolution == tv and max(p.tv_detectable) <= tv * 1.001
        assert p.seconds_per_trial is None and math.isnan(p.estimated_seconds)
    # more resolution costs trials as 1 / tv^2 (and a little more for the finer bins)
    spec = C.describe_sampler(G.vectorised_correct)
    a = C.plan_battery(spec, G.vectorised_correct, C.token_cases()[:1], resolution=0.01)
    b = C.plan_battery(spec, G.vectorised_correct, C.token_cases()[:1], resolution=0.005)
    assert 4 <= b.trials[0] / a.trials[0] < 5
    with pytest.raises(ValueError, match="resolution: must be a TV distance"):
        C.plan_battery(spec, G.vectorised_correct, C.token_cases()[:1], resolution=2.0)


def test_a_budget_buys_a_resolution_and_the_report_states_it():
    spec = C.describe_sampler(G.vectorised_correct)
    cases = [c for c in C.token_cases() if c.name in ("article", "equal")]
    p = C.plan_battery(spec, G.vectorised_correct, cases, budget=2.0)
    assert p.seconds_per_trial is not None and 0 < p.resolution < 0.05
    assert p.estimated_seconds <= 2.0 * 1.05 and "budget 2 s" in p.summary()
    r = C.run_battery(G.vectorised_correct, cases=["article", "equal"], budget=2.0, seed=SEED)
    assert r.passed and r.resolution is not None
    assert r.max_detectable_tv <= 1.5 * r.resolution
    with pytest.raises(ValueError, match="budget: must be a number of seconds"):
        C.plan_battery(spec, G.vectorised_correct, cases, budget=0)
    with pytest.raises(ValueError, match="trials: no case called nope"):
        C.run_battery(G.vectorised_correct, cases=["article"], trials={"nope": 10})
    r = C.run_battery(G.vectorised_correct, cases=["article", "equal"], seed=SEED,
                      trials={"article": 1_000, "equal": 3_000})
    assert [c.trials for c in r.cases] == [1_000, 3_000]


# --------------------------------------------------------------------------------------
# Batched samplers: one call, many requests, each with its own settings
# --------------------------------------------------------------------------------------


def test_batch_cases_mix_settings_greedy_rows_and_ragged_drafts():
    cases = {c.name: c for c in C.batch_cases()}
    assert tuple(cases) == C.BATCH_CASE_NAMES
    assert len(set(cases["batch_temperatures"].temperature)) == 6
    assert cases["batch_greedy_mixed"].greedy.any() and not cases["batch_greedy_mixed"].greedy.all()
    assert 0 in cases["batch_ragged"].n_draft and len(set(cases["batch_ragged"].n_draft)) >= 4
    assert C.describe_sampler(G.batch_correct).kind == "batch"


def test_correct_batch_sampler_passes_and_row0_temperature_bug_fails():
    r = C.run_battery(G.batch_correct, seed=SEED, trials=20_000)
    assert r.passed, r.to_markdown()
    bug = C.run_battery(G.batch_row0_temperature, seed=SEED, trials=20_000)
    assert not bug.passed and not bug.exact
    assert not bug.case("batch_temperatures").passed
    assert any("one request's settings" in x for x in bug.case("batch_temperatures").causes)


def test_batch_greedy_rows_are_checked_exactly():
    @C.batch_sampler
    def greedy_ignored(target_logits, draft_probs, draft_tokens, n_draft, settings, rng):
        s = dict(settings, greedy=np.zeros_like(settings["greedy"]))   # greedy rows sampled
        return G.batch_correct(target_logits, draft_probs, draft_tokens, n_draft, s, rng)

    r = C.run_battery(greedy_ignored, seed=SEED, trials=2_000, cases=["batch_greedy_mixed"])
    c = r.cases[0]
    assert not c.exact and any("greedy requests must emit" in v for v in c.violations)
    assert c.trials_needed < 20


def test_the_battery_reports_progress_over_its_trials(capsys):
    """run_battery calls progress once before the first case and after each case; the
    command line turns that into a bar on standard error (--no-progress silences it)."""
    from specdec.conformance import gallery

    calls = []
    C.run_battery(gallery.vectorised_correct, cases=["article", "spread_residual"],
                  trials={"article": 300, "spread_residual": 500}, seed=1,
                  progress=lambda *a: calls.append(a))
    assert calls == [(None, 0, 800), ("article", 300, 800), ("spread_residual", 500, 800)]
    argv = ["specdec.conformance.gallery:vectorised_correct", "--trials", "2000", "--cases",
            "article"]
    assert C.main(argv) == 0
    err = capsys.readouterr().err
    assert "battery" in err and "2.00k/2.00k" in err and "article done" in err
    assert C.main(argv + ["--no-progress"]) == 0
    assert "battery" not in capsys.readouterr().err
