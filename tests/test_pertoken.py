"""Tests of the per-token exactness check (specdec.stats.pertoken and its served use in
specdec.client.exactness): exact values of the randomised PIT, calibration over seeds,
power against biased samplers, the detectable-TV formula by simulation, pooled top-k
laws, and a flawed in-process decoder of the library fed through the same check."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats as sps

from specdec import decode as dec
from specdec import nn
from specdec.rules import token as tokenrule
from specdec.stats import pertoken as pt
from specdec.client import tokencheck as tc
from specdec.laws import tv_distance


# ------------------------------------------------------------------ the transform, exact
def test_pit_exact_values():
    law = [[0.5, 0.3, 0.2]]
    assert pt.randomized_pit(law, [1], [0.5]).tolist() == [0.65]
    assert pt.randomized_pit(law, [0], [0.0]).tolist() == [0.0]
    assert pt.randomized_pit(law, [2], [1.0]).tolist() == [1.0]
    # keys reverse the order: cells 2, 1, 0
    assert pt.randomized_pit(law, [1], [0.5], keys=[[0, 1, 2]]).tolist() == [0.35]
    # ties in the keys: by cell index
    assert pt.randomized_pit(law, [1], [0.0], keys=[[1, 1, 1]]).tolist() == [0.5]


def test_draft_over_target_order_exact():
    p = np.array([[0.5, 0.3, 0.2, 0.0]])
    q = np.array([[0.1, 0.6, 0.2, 0.1]])
    keys = pt.order_keys("draft_over_target", p, q)
    # ratios q/p: 0.2, 2, 1, and p = 0 last: order 1, 2, 0, 3
    assert np.argsort(-keys[0], kind="stable").tolist() == [1, 2, 0, 3]
    assert pt.randomized_pit(p, [0], [0.5], keys).tolist() == [0.75]
    assert pt.order_keys("target", p).tolist() == p.tolist()
    with pytest.raises(ValueError, match="ordering: must be one of"):
        pt.order_keys("draft", p, q)
    with pytest.raises(ValueError, match="q: the draft's laws"):
        pt.order_keys("draft_over_target", p)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 12), st.integers(0, 2**32 - 1))
def test_pit_intervals_tile_the_unit_interval(v, seed):
    """Under the law, U given token t is uniform on [F(t-), F(t)]: the intervals of all
    tokens tile [0, 1] with lengths p(t), whatever the order, so U is exactly uniform."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(v))
    keys = rng.integers(0, 3, size=v).astype(float)        # ties included
    tokens = np.arange(v)
    lo = pt.randomized_pit(np.tile(p, (v, 1)), tokens, np.zeros(v), np.tile(keys, (v, 1)))
    hi = pt.randomized_pit(np.tile(p, (v, 1)), tokens, np.ones(v), np.tile(keys, (v, 1)))
    order = np.argsort(lo, kind="stable")
    assert np.allclose(hi - lo, p)
    assert lo[order][0] == 0.0 and hi[order][-1] == pytest.approx(1.0)
    assert np.allclose(lo[order][1:], hi[order][:-1])


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 10), st.floats(0.01, 1.0), st.integers(0, 2**32 - 1))
def test_mixture_toward_the_draft_moves_the_mean_by_half_its_tv(v, eps, seed):
    """Ordered by q/p, an error p' = (1 - eps) p + eps q lowers E[U] by at least
    TV(p', p) / 2 (the module's concavity argument), exactly computed."""
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(v)), rng.dirichlet(np.ones(v))
    bad = (1 - eps) * p + eps * q
    keys = pt.order_keys("draft_over_target", p[None], q[None])
    mid = pt.randomized_pit(np.tile(p, (v, 1)), np.arange(v), np.full(v, 0.5),
                            np.tile(keys, (v, 1)))
    shift = 0.5 - float(bad @ mid)                      # exact E[U] under the error
    assert shift >= tv_distance(bad, p) / 2 - 1e-12


def test_pit_refuses_bad_input_by_name():
    with pytest.raises(ValueError, match="laws: must have shape"):
        pt.randomized_pit([0.5, 0.5], [0], [0.5])
    with pytest.raises(ValueError, match="tokens: must lie in"):
        pt.randomized_pit([[0.5, 0.5]], [2], [0.5])
    with pytest.raises(ValueError, match="v: uniforms must lie"):
        pt.randomized_pit([[0.5, 0.5]], [1], [1.5])
    with pytest.raises(ValueError, match="keys: must have the laws' shape"):
        pt.randomized_pit([[0.5, 0.5]], [1], [0.5], keys=[[1.0]])
    with pytest.raises(ValueError, match="laws: every probability"):
        pt.randomized_pit([[-0.5, 1.5]], [1], [0.5])


# ------------------------------------------------------------------ pooled top-k laws
def test_pooled_top_cells_exact():
    laws, cells = pt.pooled_top_cells([["a", "b", "c"], ["x"]],
                                      [[0.2, 0.5, 0.1], [0.9]], ["b", "y"])
    assert laws.tolist() == [[0.5, 0.2, 0.1, pytest.approx(0.2)], [0.9, 0.0, 0.0,
                                                                   pytest.approx(0.1)]]
    assert cells.tolist() == [0, 3]
    # vLLM adds the sampled token to the top k: k keeps the k most probable only
    laws, cells = pt.pooled_top_cells([["a", "b", "z"]], [[0.5, 0.3, 0.01]], ["z"], k=2)
    assert laws.tolist() == [[0.5, 0.3, pytest.approx(0.2)]] and cells.tolist() == [2]
    # probabilities summing above 1 by rounding are renormalised, the rest is 0
    laws, _ = pt.pooled_top_cells([["a", "b"]], [[0.6, 0.400001]], ["a"])
    assert laws.sum() == pytest.approx(1.0) and laws[0, 2] == 0.0
    with pytest.raises(ValueError, match="no reported tokens at position 0"):
        pt.pooled_top_cells([[]], [[]], ["a"])
    with pytest.raises(ValueError, match="one entry per emitted token"):
        pt.pooled_top_cells([["a"]], [[1.0]], ["a", "b"])


def test_pooled_top_k_is_exactly_uniform():
    """Tokens drawn from a full law, transformed over its top 3 and one pooled cell:
    the pooled cell is randomised as one cell, and U is uniform (exact tiling)."""
    rng = np.random.default_rng(4)
    p = rng.dirichlet(np.ones(9))
    top = np.argsort(-p)[:3]
    cells = np.append(p[top], 1 - p[top].sum())
    tokens = np.arange(9)
    cell_of = np.array([list(top).index(t) if t in top else 3 for t in tokens])
    lo = pt.randomized_pit(np.tile(cells, (9, 1)), cell_of, np.zeros(9))
    hi = pt.randomized_pit(np.tile(cells, (9, 1)), cell_of, np.ones(9))
    # P(U <= u) = sum over tokens p(t) * fraction of its cell's interval below u
    for u in np.linspace(0, 1, 11):
        cdf = sum(p[t] * np.clip((u - lo[t]) / (hi[t] - lo[t]), 0, 1) for t in tokens)
        assert cdf == pytest.approx(u, abs=1e-12)


# ------------------------------------------------------------------ the test
def test_mean_pvalue_and_detectable_tv_exact():
    assert pt.mean_pvalue([0.4] * 100) == pytest.approx(2 * math.exp(-6.0))
    assert pt.mean_pvalue([0.4] * 100, tolerance=0.1) == 1.0
    assert pt.mean_pvalue([0.35] * 100, tolerance=0.02) == pytest.approx(
        2 * math.exp(-6 * 100 * 0.13 ** 2))
    z = sps.norm.ppf(0.9)
    want = (math.sqrt(2 * math.log(2 * 2 / 1e-6)) + z) / math.sqrt(3 * 40_000)
    assert pt.detectable_tv(40_000, false_alarm=1e-6, orderings=2) == pytest.approx(want)
    assert pt.detectable_tv(40_000, false_alarm=1e-6, orderings=2, tolerance=1e-3) == \
        pytest.approx(want + 2e-3)
    assert pt.detectable_tv(1, false_alarm=1e-6) == 1.0
    with pytest.raises(ValueError, match="false_alarm: must be in"):
        pt.detectable_tv(10, false_alarm=0.0)
    with pytest.raises(ValueError, match="u: values must lie"):
        pt.mean_pvalue([1.5])


def _markov_laws(rng, n, v=12):
    """Laws of n positions that change from position to position (a new Dirichlet
    draw each time), and a draft law beside each."""
    p = rng.dirichlet(np.full(v, 0.7), size=n)
    q = rng.dirichlet(np.full(v, 0.7), size=n)
    return p, q


def _draw(rng, laws):
    c = np.cumsum(laws, axis=1)
    return np.minimum((rng.random(len(laws))[:, None] > c).sum(axis=1), laws.shape[1] - 1)


def _check(rng, p, q, tokens, false_alarm):
    v = rng.random(len(tokens))
    pits = {k: pt.randomized_pit(p, tokens, v, pt.order_keys(k, p, q)) for k in pt.ORDERINGS}
    return pt.pertoken_test(pits, tokens=len(tokens), requests=1, false_alarm=false_alarm)


def test_calibration_over_seeds():
    """An exact sampler fails at most at the stated rate. 300 seeds at false alarm 0.02:
    the bound is conservative, so failures are Binomial(300, <= 0.02); 16 or more would
    happen with probability below 1e-4 (mean 6)."""
    failures = 0
    for seed in range(300):
        rng = np.random.default_rng([7, seed])
        p, q = _markov_laws(rng, 1000)
        failures += not _check(rng, p, q, _draw(rng, p), 0.02).passed
    assert failures < 16, failures


def test_biased_sampler_fails_along_the_draft_ordering():
    """Tokens from (1 - eps) p + eps q: ordered by q/p the mean drops; the check fails,
    and the ordering that catches it is draft_over_target."""
    rng = np.random.default_rng(11)
    p, q = _markov_laws(rng, 20_000)
    eps = 0.1
    bad = (1 - eps) * p + eps * q
    per_token_tv = 0.5 * np.abs(bad - p).sum(axis=1).mean()
    check = _check(rng, p, q, _draw(rng, bad), 1e-6)
    assert per_token_tv > check.detectable_tv
    assert not check.passed
    assert check.adjusted["draft_over_target"] < check.adjusted["target"]
    assert "draft_over_target" in check.message


def test_detectable_tv_formula_by_simulation():
    """At the formula's delta (mass delta moved proportionally from after a cut to before
    it, at every position, cuts at different places), the check fails with probability
    about 0.9; at half that delta, much less often."""
    n, false_alarm, reps, v = 3000, 1e-3, 200, 16
    delta = pt.detectable_tv(n, false_alarm=false_alarm, orderings=4)   # 2 means, 2 KS

    def power(d, seed):
        hits = 0
        for r in range(reps):
            rng = np.random.default_rng([seed, r])
            p = rng.dirichlet(np.full(v, 5.0), size=n)
            q = rng.dirichlet(np.full(v, 5.0), size=n)      # the other ordering: unrelated
            c = np.cumsum(p, axis=1)
            u = rng.uniform(0.3, 0.7, size=(n, 1))          # the cut nearest to u
            cut = np.abs(c[:, :-1] - u).argmin(axis=1)[:, None] + 1
            front = np.arange(v)[None, :] < cut
            mass = np.where(front, p, 0).sum(axis=1, keepdims=True)
            assert (mass > d).all() and (1 - mass > d).all()
            bad = np.where(front, p * (1 + d / mass), p * (1 - d / (1 - mass)))
            tokens = _draw(rng, bad)
            vv = rng.random(n)
            pits = {"natural": pt.randomized_pit(p, tokens, vv),
                    "other": pt.randomized_pit(p, tokens, vv, q)}
            hits += not pt.pertoken_test(pits, tokens=n, requests=1,
                                         false_alarm=false_alarm).passed
        return hits / reps

    at = power(delta, 1)
    assert 0.84 <= at, at            # 0.9 expected; below 0.84 has probability < 0.01
    assert power(delta / 2, 2) < 0.3


def test_tolerance_widens_the_null():
    rng = np.random.default_rng(3)
    u = rng.random(40_000) * 0.96                       # mean 0.48
    plain = pt.pertoken_test({"a": u}, tokens=40_000, requests=1)
    wide = pt.pertoken_test({"a": u}, tokens=40_000, requests=1, tolerance=0.03)
    assert not plain.passed and wide.passed
    assert wide.detectable_tv == pytest.approx(plain.detectable_tv + 0.06)


def test_pertoken_test_result_and_errors():
    u = np.full(10, 0.5)
    r = pt.pertoken_test({"a": u, "b": u}, tokens=5, requests=2)
    assert r.passed and r.positions == 10 and r.tokens == 5
    assert r.detectable_tv == pytest.approx(min(1.0, 2 * pt.detectable_tv(
        10, false_alarm=1e-6, orderings=4)))      # two orderings, a mean and a KS test each
    assert set(r.to_dict()) >= {"passed", "pvalue", "pvalues", "adjusted", "tokens",
                                "detectable_tv", "tolerance"}
    bad = pt.pertoken_test({"a": u}, tokens=5, requests=1, impossible=1)
    assert not bad.passed and bad.pvalue == 0 and "no mass" in bad.message
    with pytest.raises(ValueError, match="same number of values"):
        pt.pertoken_test({"a": u, "b": u[:3]}, tokens=3, requests=1)
    with pytest.raises(ValueError, match="pits: need at least one"):
        pt.pertoken_test({}, tokens=1, requests=1)
    with pytest.raises(ValueError, match="impossible"):
        pt.pertoken_test({"a": u}, tokens=5, requests=1, impossible=6)
    with pytest.raises(ValueError, match="may not start with 'ks:'"):
        pt.pertoken_test({"a": u, "ks:a": u}, tokens=5, requests=1)


# ------------------------------------------------------------------ in-process decoders
@pytest.fixture(scope="module")
def toy_models():
    cfg = nn.TransformerConfig(2, 16, 4, 64)
    target = nn.Transformer.random(cfg, np.random.default_rng(0), "t")
    draft = nn.Transformer.random(nn.TransformerConfig(1, 8, 2, 64),
                                  np.random.default_rng(1), "d")
    return target, draft


@pytest.mark.parametrize("rule,exact", [(tokenrule.TOKEN, True), (tokenrule.RESAMPLE_Q, False)],
                         ids=["correct", "resample_q"])
def test_in_process_step_decoders(toy_models, rule, exact):
    target, draft = toy_models
    settings_ = dec.SamplingSettings(temperature=1.0)
    rng = np.random.default_rng(5)
    prompts = ["hello", "ciao", "hola mundo"]
    n, length = 120, 24
    responses = [tc.Response(prompt, k, toks, False) for prompt in prompts
                 for k, toks in enumerate(dec.stepwise(
                     target, draft, [prompt] * (n // 3), length, rule, rng, settings_))]
    check = tc.model_pertoken_check(responses, target, draft, settings=settings_,
                                    max_tokens=length, rng=np.random.default_rng(9),
                                    false_alarm=1e-6)
    assert check.tokens == n * length and check.positions == n * length
    assert check.passed == exact, check.message
    if not exact:
        assert check.adjusted["draft_over_target"] < 1e-6


def test_library_speculative_decoder_passes_and_a_temperature_mismatch_fails(toy_models):
    target, draft = toy_models
    rng = np.random.default_rng(6)
    prompts = ["hello there", "buongiorno"]
    hot = dec.SamplingSettings(temperature=1.0)
    out = dec.speculative(target, draft, prompts * 60, 30, 3, rng, hot)
    responses = [tc.Response(prompts[k % 2], k, out.tokens[k], False)
                 for k in range(len(out.tokens))]
    good = tc.model_pertoken_check(responses, target, draft, settings=hot, max_tokens=30,
                                   rng=np.random.default_rng(1))
    assert good.passed, good.message
    cold = dec.SamplingSettings(temperature=0.8)     # the client's law, not the server's
    bad = tc.model_pertoken_check(responses, target, draft, settings=cold, max_tokens=30,
                                  rng=np.random.default_rng(1))
    assert not bad.passed and bad.adjusted["target"] < 1e-6


def test_top_k_mismatch_is_impossible_tokens(toy_models):
    target, draft = toy_models
    out = dec.autoregressive(target, ["abc"] * 20, 10, np.random.default_rng(2))
    responses = [tc.Response("abc", k, t, False) for k, t in enumerate(out.tokens)]
    check = tc.model_pertoken_check(responses, target, None,
                                    settings=dec.SamplingSettings(top_k=3), max_tokens=10,
                                    rng=np.random.default_rng(0))
    assert not check.passed and check.impossible > 0 and check.pvalue == 0.0


def test_stopped_responses_are_padded(toy_models):
    target, _ = toy_models
    out = dec.autoregressive(target, ["abc"] * 30, 12, np.random.default_rng(3))
    responses = [tc.Response("abc", k, t[:5 + k % 7], True) for k, t in enumerate(out.tokens)]
    check = tc.model_pertoken_check(responses, target, None, settings=dec.SamplingSettings(),
                                    max_tokens=12, rng=np.random.default_rng(0))
    assert check.positions == 30 * 12 and check.tokens == sum(5 + k % 7 for k in range(30))
    assert check.passed
    assert check.detectable_tv == pytest.approx(min(1.0, pt.detectable_tv(
        360, false_alarm=1e-6, orderings=2) * 360 / check.tokens))   # mean and KS: 2 tests
    with pytest.raises(ValueError, match="more than max_tokens"):
        tc.model_pertoken_check(responses, target, None, settings=dec.SamplingSettings(),
                                max_tokens=4, rng=np.random.default_rng(0))


def test_ks_catches_a_departure_the_mean_cannot_see():
    """Values symmetric about 1/2 but not uniform (U-shaped: mass moved from the middle
    of the order to both ends, as an error that is monotone along no ordering does):
    the mean stays at 1/2, the Kolmogorov-Smirnov test of the same family fails."""
    rng = np.random.default_rng(12)
    u = rng.beta(0.8, 0.8, size=20_000)
    check = pt.pertoken_test({"target": u}, tokens=u.size, requests=1)
    assert not check.passed and set(check.adjusted) == {"target", "ks:target"}
    assert check.adjusted["target"] > 1e-3 and check.adjusted["ks:target"] < 1e-6
    assert "Kolmogorov-Smirnov distance" in check.message
    # the KS bound holds for every n: uniform values pass at any size
    for n in (1, 7, 500):
        assert pt.ks_pvalue(rng.random(n)) <= 1.0
    assert pt.ks_pvalue(u, tolerance=0.5) == 1.0
    with pytest.raises(ValueError, match="u: values must lie in"):
        pt.ks_pvalue([1.5])


def _random_laws(rng, n, v):
    x = rng.gamma(0.5, size=(n, v))
    return x / x.sum(axis=1, keepdims=True)


def test_laws_check_passes_exact_draws_and_fails_the_drafts_law():
    rng = np.random.default_rng(11)
    p_laws = [_random_laws(rng, 40, 6) for _ in range(60)]
    q_laws = [_random_laws(rng, 40, 6) for _ in range(60)]
    draw = lambda laws: [np.array([rng.choice(6, p=row) for row in law]) for law in laws]
    exact = pt.laws_check(p_laws, draw(p_laws), max_tokens=40, rng=np.random.default_rng(1),
                          q_laws=q_laws)
    assert exact.passed and exact.tokens == 2400 and exact.requests == 60
    # a decoder that emits the draft's law at every position (TV about 0.4 here)
    wrong = pt.laws_check(p_laws, draw(q_laws), max_tokens=40, rng=np.random.default_rng(1),
                          q_laws=q_laws)
    assert not wrong.passed and wrong.pvalue < 1e-6
    # short responses are padded: the same number of values, fewer tokens
    short = pt.laws_check([p[:10] for p in p_laws], [t[:10] for t in draw(p_laws)],
                          max_tokens=40, rng=np.random.default_rng(2))
    assert short.tokens == 600 and short.positions == 2400
    assert short.detectable_tv > exact.detectable_tv


def test_laws_check_errors_name_the_argument():
    law = np.full((3, 4), 0.25)
    with pytest.raises(ValueError, match="p_laws: need at least one response"):
        pt.laws_check([], [], max_tokens=3, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="one entry per response"):
        pt.laws_check([law], [], max_tokens=3, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"tokens\[0\]: 3 tokens, more than max_tokens \(2\)"):
        pt.laws_check([law], [[0, 1, 2]], max_tokens=2, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"p_laws\[0\]: must have shape \(tokens, V\) = \(2, V\)"):
        pt.laws_check([law], [[0, 1]], max_tokens=3, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"q_laws\[0\]: must have the shape"):
        pt.laws_check([law], [[0, 1, 2]], max_tokens=3, rng=np.random.default_rng(0),
                      q_laws=[law[:2]])
    with pytest.raises(ValueError, match="tokens: no tokens were emitted"):
        pt.laws_check([law[:0]], [[]], max_tokens=3, rng=np.random.default_rng(0))
    for bad, rule in ((np.full((3, 4), np.nan), "finite and >= 0"), (-law, "finite and >= 0"),
                      (5 * law, "every row must be a law")):
        with pytest.raises(ValueError, match=rf"q_laws\[0\]: .*{rule}"):
            pt.laws_check([law], [[0, 1, 2]], max_tokens=3, rng=np.random.default_rng(0),
                          q_laws=[bad])
    with pytest.raises(ValueError, match=r"p_laws\[0\], tokens\[0\]: every row must be a law"):
        pt.laws_check([law / 2], [[0, 1, 2]], max_tokens=3, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"tokens\[0\]: tokens: must lie in \[0, 4\)"):
        pt.laws_check([law], [[0, 1, 4]], max_tokens=3, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"tokens\[0\]: tokens: must be integers"):
        pt.laws_check([law], [[0, 1, 2.7]], max_tokens=3, rng=np.random.default_rng(0))


# ------------------------------------------------------------------ tokens for a resolution
@settings(max_examples=60, deadline=None)
@given(st.floats(0.005, 1.0), st.floats(1e-9, 0.5), st.floats(0.5, 0.999),
       st.integers(1, 8), st.floats(0.0, 0.002))
def test_tokens_for_is_the_fewest_that_reach_the_resolution(r, a, b, m, eta):
    n = pt.tokens_for(r, false_alarm=a, power=b, orderings=m, tolerance=eta)
    kw = dict(false_alarm=a, power=b, orderings=m, tolerance=eta)
    assert pt.detectable_tv(n, **kw) <= r
    assert n == 1 or pt.detectable_tv(n - 1, **kw) > r


def test_tokens_for_exact_values_and_refusals():
    assert pt.tokens_for(0.02, false_alarm=1e-6, orderings=4) == 39904
    assert pt.tokens_for(0.02, false_alarm=1e-6, orderings=4, tolerance=5e-4) == 44214
    assert pt.tokens_for(1.0, false_alarm=0.5) == 1
    with pytest.raises(ValueError, match="resolution: must exceed twice the tolerance"):
        pt.tokens_for(0.02, false_alarm=1e-6, tolerance=0.01)
    for bad in (0.0, -0.1, 1.5, float("nan"), True, "0.02"):
        with pytest.raises(ValueError, match="resolution"):
            pt.tokens_for(bad, false_alarm=1e-6)
    with pytest.raises(ValueError, match="orderings"):
        pt.tokens_for(0.02, false_alarm=1e-6, orderings=0)
    with pytest.raises(ValueError, match="false_alarm"):
        pt.tokens_for(0.02, false_alarm=1.0)


# ------------------------------------------------------------------ shared law tables
def test_response_law_table_shares_identical_texts_and_matches_response_laws(toy_models):
    target, draft = toy_models
    hot = dec.SamplingSettings(temperature=1.0)
    out = dec.autoregressive(target, ["abc", "de"] * 6, 8, np.random.default_rng(4))
    responses = [tc.Response(["abc", "de"][k % 2], k, t, False)
                 for k, t in enumerate(out.tokens)]
    twice = responses + [tc.Response(r.prompt, 100 + r.seed, r.tokens, False)
                         for r in responses]                    # a second server, same texts
    one = tc.response_law_table(twice, target, draft, settings=hot, max_tokens=8)
    two = tc.response_law_table(twice, target, draft, settings=hot, max_tokens=8, workers=2)
    assert len(one) == len({(r.prompt, tuple(r.tokens)) for r in responses})
    for key, (p, q) in one.items():
        toks = np.asarray(key[1])
        np.testing.assert_array_equal(p, pt.response_laws(target, nn.encode(key[0]), toks, hot))
        np.testing.assert_array_equal(q, pt.response_laws(draft, nn.encode(key[0]), toks, hot))
        np.testing.assert_array_equal(p, two[key][0])
    # a check with the table gives exactly the check without it (same uniforms)
    plain = tc.model_pertoken_check(twice, target, draft, settings=hot, max_tokens=8,
                                    rng=np.random.default_rng(3))
    shared = tc.model_pertoken_check(twice, target, draft, settings=hot, max_tokens=8,
                                     rng=np.random.default_rng(3), table=one)
    assert plain.means == shared.means and plain.pvalue == shared.pvalue
    assert shared.extra["distinct_texts"] == len(one)
    no_draft = tc.response_law_table(responses[:2], target, None, settings=hot)
    assert all(q is None for _, q in no_draft.values())
    with pytest.raises(ValueError, match="more than max_tokens"):
        tc.response_law_table(responses, target, draft, settings=hot, max_tokens=3)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="workers"):
            tc.response_law_table(responses, target, draft, settings=hot, workers=bad)


def test_model_pertoken_check_refuses_a_table_of_other_shapes(toy_models):
    target, draft = toy_models
    hot = dec.SamplingSettings(temperature=1.0)
    responses = [tc.Response("abc", 0, (1, 2, 3), False)]
    no_draft = tc.response_law_table(responses, target, None, settings=hot)
    with pytest.raises(ValueError, match=r"table: .*\(a table built with the draft\)"):
        tc.model_pertoken_check(responses, target, draft, settings=hot, max_tokens=3,
                                rng=np.random.default_rng(0), table=no_draft)
    key = ("abc", (1, 2, 3))
    with pytest.raises(ValueError, match=r"table: .*shape \(3, 256\)"):
        tc.model_pertoken_check(responses, target, None, settings=hot, max_tokens=3,
                                rng=np.random.default_rng(0), table={key: (np.ones((2, 5)), None)})


def test_tokens_for_refuses_endless_runs_quickly():
    import time as _time

    t0 = _time.perf_counter()
    for kw in (dict(tolerance=0.00999999), dict(tolerance=0.0)):
        with pytest.raises(ValueError, match="resolution: .*10\\^15 tokens"):
            pt.tokens_for(0.02 if kw["tolerance"] else 1e-9, false_alarm=1e-6, **kw)
    assert _time.perf_counter() - t0 < 1.0
    assert pt.detectable_tv(100, false_alarm=0.5, power=0.01) >= 0.0   # never negative
