"""The two errata of Appendix A4: the optimal verifier (a linear program) and SGLang's rule.

Every tolerance is stated: exact fractions where the laws are fractions, ``1e-9`` between
two floating-point computations of the same exact number, and a frequency test that
fails a correct sampler with probability at most ``FALSE_ALARM``.
"""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from specdec.rules import block as bv
from specdec.rules import base as cycles, lossy, matching, optimality
from specdec import rules, stats
from specdec.laws import law_tv
from specdec.models import sequence_law, toy_pair

FALSE_ALARM = 1e-9
FLOAT_TOL = 1e-9


# --------------------------------------------------------------------------------------
# The linear program over every exact verifier
# --------------------------------------------------------------------------------------


def test_paper_example_optimum_is_eleven_ninths_exactly():
    ex = bv.paper_example()
    res = optimality.optimal_accepted(cycles.fixed_oracle(ex.p, ex.q), None, (), 2)
    assert res.certified
    assert isinstance(res.value, F) and res.value == F(11, 9) == ex.block
    assert res.coupling_bound == ex.bound == F(12, 9)       # the bound is not attained
    assert sum(res.accepted_law) == pytest.approx(1.0, abs=FLOAT_TOL)
    assert sum(i * w for i, w in enumerate(res.accepted_law)) == pytest.approx(11 / 9, abs=FLOAT_TOL)


def test_certificate_is_a_primal_and_a_dual_solution():
    """The exact check refuses a primal point that is not feasible or not optimal."""
    ex = bv.paper_example()
    oracle = cycles.fixed_oracle(ex.p, ex.q)
    lp = optimality.verifier_lp(oracle, (), 2)
    assert lp.shape == (12, 20) and lp.n_blocks == 4
    # the block rule's cycle law is a feasible point of the program, with objective 11/9
    a = lp.dense()
    point = np.zeros(lp.shape[1])
    index = {lab: j for j, lab in enumerate(lp.labels)}
    for path in cycles.draft_paths(oracle, (), 2):
        for w, emitted, tau in bv.BLOCK.path_outcomes(path):
            key = (path.tokens, tau, () if tau == len(path.tokens) else (emitted[-1],))
            point[index[key]] += float(path.prob * w)
    assert np.allclose(a @ point, np.array(lp.b, dtype=float), atol=FLOAT_TOL)
    assert float(np.dot(lp.c, point)) == pytest.approx(11 / 9, abs=FLOAT_TOL)


def test_free_tokens_reach_the_bound_on_the_paper_example():
    """Emitting a second token of its own after a rejection is what 12/9 needs."""
    ex = bv.paper_example()
    res = optimality.optimal_accepted(cycles.fixed_oracle(ex.p, ex.q), None, (), 2, free_tokens=True)
    assert res.certified and res.value == ex.bound == F(4, 3)
    p, q = toy_pair()
    free = optimality.optimal_accepted(p, q, (), 2, free_tokens=True)
    assert bv.BLOCK.mean_accepted(p, q, (), 2) < free.value <= free.coupling_bound + FLOAT_TOL


def test_toy_pair_optimum_is_block_verification():
    p, q = toy_pair()
    res = optimality.optimal_accepted(p, q, (), 2)
    assert not res.certified                                 # float laws: not certified
    assert res.value == pytest.approx(float(bv.BLOCK.mean_accepted(p, q, (), 2)), abs=FLOAT_TOL)
    assert res.value == pytest.approx(1.077578, abs=5e-7)
    assert res.coupling_bound == pytest.approx(1.148386, abs=5e-7)
    assert res.value < res.coupling_bound - 0.07


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), vocab=st.integers(2, 3), gamma=st.integers(1, 3))
@example(seed=162, vocab=3, gamma=3)      # a draft probability of 0.001: HiGHS's presolve
def test_optimum_equals_block_verification_on_random_laws(seed, vocab, gamma):
    rng = np.random.default_rng(seed)
    oracle = cycles.fixed_oracle(rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab)))
    res = optimality.optimal_accepted(oracle, None, (), gamma)
    block = float(bv.BLOCK.mean_accepted(oracle, None, (), gamma))
    assert res.value == pytest.approx(block, abs=FLOAT_TOL)
    assert res.value <= float(res.coupling_bound) + FLOAT_TOL


@pytest.mark.parametrize("seed", [3, 11, 2026])
def test_optimum_equals_block_verification_on_random_toy_pairs(seed):
    """Context-dependent laws with end-of-sequence: still block verification."""
    p, q = toy_pair(3, seed=seed, closeness=0.4)
    for gamma in (1, 2):
        res = optimality.optimal_accepted(p, q, (1,), gamma)
        assert res.value == pytest.approx(float(bv.BLOCK.mean_accepted(p, q, (1,), gamma)), abs=FLOAT_TOL)
        assert res.value <= res.coupling_bound + FLOAT_TOL
        assert res.value >= float(bv.TOKEN.mean_accepted(p, q, (1,), gamma)) - FLOAT_TOL


def test_rational_case_certified_equal_to_block_rule():
    oracle = cycles.fixed_oracle([F(1, 2), F(1, 4), F(1, 4)], [F(1, 4), F(1, 4), F(1, 2)])
    res = optimality.optimal_accepted(oracle, None, (), 2)
    block = bv.BLOCK.mean_accepted(oracle, None, (), 2)
    assert isinstance(block, F) and block == F(11, 8)
    assert res.certified and res.value == block


def test_optimality_errors():
    p, q = toy_pair()
    with pytest.raises(ValueError, match="gamma"):
        optimality.optimal_accepted(p, q, (), 0)
    with pytest.raises(ValueError, match="gamma"):
        optimality.verifier_lp(cycles.model_oracle(*toy_pair(8)), (), 7)
    with pytest.raises(TypeError, match="target"):
        optimality.optimal_accepted("p", q, (), 2)


# --------------------------------------------------------------------------------------
# SGLang's target-only rule
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("greedy", [False, True])
def test_sglang_at_unit_thresholds_is_the_matching_rule(greedy):
    p, q = toy_pair()
    rule = lossy.Lossy("sglang")
    for gamma in (1, 3):
        a = rule.sequence_law(p, q, (), gamma, 4, greedy=greedy)
        b = matching.MATCHING.sequence_law(p, q, (), gamma, 4, greedy=greedy)
        assert law_tv(a, b) < 1e-12
        assert np.allclose(rule.accepted_count_law(p, q, (), gamma, greedy=greedy),
                           matching.MATCHING.accepted_count_law(p, q, (), gamma, greedy=greedy), atol=1e-12)
    assert law_tv(rule.sequence_law(p, q, (), 3, 4), sequence_law(p, (), 4)) < 1e-12


def test_sglang_tv_and_accepted_on_the_toy_pair():
    p, q = toy_pair()
    tv = {t: lossy.measure(p, q, (), 3, 4, "sglang", {"t_acc": t}) for t in (1.0, 0.8, 0.2)}
    assert round(tv[0.8].tv, 3) == 0.061 and round(tv[0.2].tv, 3) == 0.300
    old = {t: lossy.measure(p, q, (), 3, 4, "scaled_ratio", {"t_acc": t}).tv for t in (0.8, 0.2)}
    assert round(old[0.8], 3) == 0.125 and round(old[0.2], 3) == 0.442
    # at thresholds 1 it accepts what the matching rule accepts, less than speculative sampling
    assert tv[1.0].mean_accepted == pytest.approx(matching.MATCHING.mean_accepted(p, q, (), 3), abs=1e-12)
    assert tv[1.0].mean_accepted < tv[1.0].exact_mean_accepted
    assert tv[1.0].mean_accepted < tv[0.8].mean_accepted < tv[0.2].mean_accepted
    assert 0 < tv[0.8].kl < tv[0.2].kl < float("inf")


def test_sglang_single_threshold_accepts_likely_tokens():
    p, q = toy_pair(eos=None)
    always = lossy.Lossy("sglang", {"t_single": 1e-12}).accepted_count_law(p, q, (), 3)
    assert always[3] == pytest.approx(1.0, abs=1e-12)


def test_sglang_sampler_matches_its_exact_law():
    """One sampled cycle follows the exact cycle law (fails a correct sampler w.p. <= 1e-9)."""
    p, q = toy_pair()
    rule = lossy.Lossy("sglang", {"t_acc": 0.5, "t_single": 0.6})
    rng = np.random.default_rng(18)
    n, gamma = 6_000, 3
    f = rules.RuleSampler(rule)
    counts: dict = {}
    for _ in range(n):
        emitted, k, k_prop = f(p, q, (), gamma, rng)
        counts[emitted, k] = counts.get((emitted, k), 0) + 1
    law: dict = {}
    for w, em, k in rule.outcomes(cycles.model_oracle(p, q), (), gamma):
        law[em, k] = law.get((em, k), 0.0) + w
    assert set(counts) <= set(law)
    keys = sorted(law)
    stats.assert_law(np.array([counts.get(k, 0) for k in keys]), np.array([law[k] for k in keys]),
                     false_alarm=FALSE_ALARM)


def test_sglang_rejected_token_is_never_emitted_at_its_position():
    p, q = toy_pair()
    path = cycles.draft_paths(cycles.model_oracle(p, q), (), 2)[0]
    for w, emitted, k in lossy.Lossy("sglang", {"t_acc": 0.7}).path_outcomes(path):
        if k < len(path.tokens):
            assert emitted[k] != path.tokens[k] and w > 0


# --------------------------------------------------------------------------------------
# The errata page agrees with the pages it corrects (book/errata.md)
# --------------------------------------------------------------------------------------

import re  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _errata_field(label: str, field: str) -> str:
    """One field of one erratum, its lines joined ("New statement" of "errata-rules-sglang")."""
    text = (REPO / "book" / "errata.md").read_text(encoding="utf-8")
    entry = text.split(f"({label})=", 1)[1].split("\n(", 1)[0]
    m = re.search(rf"^- \*\*{re.escape(field)}:\*\* (.*?)(?=^- \*\*|\Z)", entry, re.S | re.M)
    assert m, f"{label}: no field {field!r}"
    return " ".join(m.group(1).split())


def _pertoken_knobs() -> dict[str, str]:
    """The served per-token checks' settings, as the notebook that runs them writes them
    (``pertoken_knobs = dict(...)``, wherever chapter 8's campaigns live)."""
    for source in sorted((REPO / "notebooks").glob("*.md")):
        m = re.search(r"^pertoken_knobs = dict\((.*?)\)\n", source.read_text(encoding="utf-8"),
                      re.S | re.M)
        if m:
            return dict(re.findall(r"(\w+)=([\w.]+)", m.group(1)))
    raise AssertionError("no notebook sets pertoken_knobs: where do the per-token checks run?")


def test_errata_pertoken_slots_and_resolution_are_the_notebooks():
    """The served checks' slots and resolution, as the erratum states them, are the ones the
    notebook runs with (an earlier erratum said 16 slots while the chapter ran 32)."""
    new = _errata_field("errata-measurement-pertoken", "New statement")
    knobs = _pertoken_knobs()
    assert re.findall(r"(\d+) slots", new) == [knobs["slots"]]
    assert re.findall(r"per-token TV of (\d+(?:\.\d+)?)", new) == [knobs["resolution"]]


def test_errata_sglang_numbers_are_computed():
    """The SGLang erratum's TVs (old and new rule) are what the library computes."""
    p, q = toy_pair()
    new = _errata_field("errata-rules-sglang", "New statement")
    old = _errata_field("errata-rules-sglang", "Old statement")
    for text, rule in ((new, "sglang"), (old, "scaled_ratio")):
        tvs = [lossy.measure(p, q, (), 3, 4, rule, {"t_acc": t}).tv for t in (0.8, 0.2)]
        stated = re.search(r"TV of ([\d.]+) at t_acc = 0\.8 and ([\d.]+) at 0\.2", text)
        assert stated, text
        assert [float(x) for x in stated.groups()] == [round(tv, 3) for tv in tvs], rule


def test_errata_state_no_timings_of_a_machine():
    """A new statement gives no minutes or seconds: a timing belongs to the run that
    measured it, and the page it corrects gives its own (an erratum said "6 to 16 minutes"
    while the page said 5)."""
    text = (REPO / "book" / "errata.md").read_text(encoding="utf-8")
    labels = re.findall(r"^\((errata-[\w-]+)\)=$", text, re.M)
    assert len(labels) >= 9
    timed = {label: new for label in labels
             if re.search(r"\d\s*(?:minutes?|seconds?|ms|s)\b",
                          new := _errata_field(label, "New statement"))}
    assert timed == {}
