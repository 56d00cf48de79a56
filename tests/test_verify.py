"""The verification kernel (specdec.verify): draw, the accept test, residuals, verify.

The kernel is checked against a scalar transcription of Leviathan et al. (2023),
Algorithm 1 written in the test (one row, one position at a time), on hypothesis rows
with ragged drafts; its output law is checked by Monte Carlo against the exact laws; its
use of the random stream and its errors are pinned.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec import step as token
from specdec.stats import assert_law
from specdec.step import ARTICLE_P, ARTICLE_Q
from specdec.verify import cdf, check_rng, draw, residual_laws, speculative_accept, verify

from strategies import laws, pairs, verify_rows  # noqa: E402

P, Q = np.array(ARTICLE_P), np.array(ARTICLE_Q)
FALSE_ALARM = 1e-9  # probability that a correct kernel fails one Monte Carlo check


# ------------------------------------------------------------------ draw and cdf


@settings(max_examples=200, deadline=None)
@given(law=laws(), u=st.floats(0, 1, exclude_max=True))
def test_draw_is_the_smallest_token_whose_cdf_exceeds_u(law, u):
    y = draw(law, u)
    assert law[y] > 0
    c = cdf(law)
    assert c[y] > u and (y == 0 or c[y - 1] <= u)


def test_draw_never_returns_a_token_of_probability_zero_at_the_top():
    law = np.array([0.1] * 9 + [0.0])  # cumsum ends at 0.9999999999999999
    assert np.cumsum(law)[-1] < 1.0
    assert draw(law, np.nextafter(1.0, 0.0)) == 8
    assert cdf(law).tolist()[-2:] == [1.0, 1.0]


@settings(max_examples=50, deadline=None)
@given(st.lists(laws(size=4), min_size=1, max_size=6), st.data())
def test_draw_rows_equals_draw_of_each_row(rows, data):
    u = np.array([data.draw(st.floats(0, 1, exclude_max=True)) for _ in rows])
    got = draw(np.array(rows), u)
    assert got.dtype == np.int64
    assert got.tolist() == [draw(r, float(x)) for r, x in zip(rows, u)]
    assert draw(rows[0], u).tolist() == [draw(rows[0], float(x)) for x in u]


def test_draw_on_a_uniform_grid_realises_the_law():
    grid = (np.arange(10_000) + 0.5) / 10_000
    counts = np.bincount(draw(P, grid), minlength=3)
    assert counts.tolist() == [5000, 3000, 2000]


# ------------------------------------------------------------------ accept test, residual


def test_speculative_accept_scalar_and_vector():
    assert speculative_accept(0.3, 0.5, 0.59) is True
    assert speculative_accept(0.3, 0.5, 0.61) is False
    assert speculative_accept(np.float64(0.3), np.float64(0.5), 0.1) is True
    out = speculative_accept(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.5, 0.3]), np.array([0.99, 0.6, 0.66]))
    assert out.dtype == bool and out.tolist() == [True, False, True]
    # broadcast (n, gamma) uniforms against per-position probabilities
    assert speculative_accept(np.array([0.3, 0.6]), np.array([0.5, 0.5]), np.full((4, 2), 0.7)).shape == (4, 2)


def test_speculative_accept_never_divides_by_zero():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            assert speculative_accept(0.2, 0.0, 0.5) is True
            assert speculative_accept(0.0, 0.0, 0.5) is True
            assert speculative_accept(np.array([0.0, 0.2]), np.array([0.0, 0.0]), 0.3).tolist() == [True, True]


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 1), st.floats(1e-6, 1), st.floats(0, 1, exclude_max=True))
def test_speculative_accept_matches_ratio(p_x, q_x, u):
    ratio = p_x / q_x
    if abs(u - ratio) > 1e-12:
        assert speculative_accept(p_x, q_x, u) == (u < min(1.0, ratio))


def test_residual_laws_match_token_residual_row_by_row():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(5), size=50)
    q = rng.dirichlet(np.ones(5), size=50)
    q[:5] = p[:5]  # Z = 0 rows: the convention returns p
    got = residual_laws(p, q)
    for i in range(50):
        np.testing.assert_array_equal(got[i], token.residual(p[i], q[i]))


# ------------------------------------------------------------------ the kernel


def _reference_row(p, q, props, k, u_accept, u_final, bonus_position):
    """Algorithm 1 of Leviathan et al. for one row, one position at a time."""
    out = []
    for j in range(k):
        x = int(props[j])
        if u_accept[j] * q[j][x] < p[j][x] or q[j][x] == 0:
            out.append(x)
            continue
        return out + [draw(token.residual(p[j], q[j]), u_final)], j, True, False
    if not bonus_position:
        return out, k, False, False
    return out + [draw(p[k], u_final)], k, False, True


@settings(max_examples=150, deadline=None)
@given(rows=verify_rows(), bonus_position=st.booleans())
def test_kernel_equals_algorithm_1_row_by_row(rows, bonus_position):
    p, q, props, k, u_accept, u_final = rows
    if not bonus_position:
        p = p[:, :-1]
    out = verify(p, q, props, k, u_accept=u_accept, u_final=u_final)
    gamma = q.shape[1]
    assert out.tokens.shape == (len(k), gamma + 1)
    for r in range(len(k)):
        want, n_acc, corrected, bonus = _reference_row(p[r], q[r], props[r], k[r], u_accept[r],
                                                       u_final[r], bonus_position)
        assert out.tokens[r, :out.n_emitted[r]].tolist() == want
        assert (out.tokens[r, out.n_emitted[r]:] == -1).all()
        assert (out.n_accepted[r], out.corrected[r], out.bonus[r]) == (n_acc, corrected, bonus)


@settings(max_examples=60, deadline=None)
@given(rows=verify_rows(), bonus_position=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_one_row_equals_its_row_of_the_batch(rows, bonus_position, seed):
    """The one-row path (Python scalars) decides, draws and consumes the stream as the rows
    path does: each row verified alone, with laws per row or shared, equals its batch row."""
    p, q, props, k, u_accept, u_final = rows
    if not bonus_position:
        p = p[:, :-1]
    batch = verify(p, q, props, k, u_accept=u_accept, u_final=u_final)
    fields = ("tokens", "n_accepted", "n_emitted", "corrected", "bonus")
    for r in range(len(k)):
        one = slice(r, r + 1)
        for pr, qr in ((p[one], q[one]), (p[r], q[r])):
            alone = verify(pr, qr, props[one], k[one], u_accept=u_accept[one], u_final=u_final[one])
            for f in fields:
                got, want = getattr(alone, f), getattr(batch, f)[one]
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)
        # with a Generator: the gamma accept uniforms first, then one for the final token
        rng = np.random.default_rng(seed)
        drawn = verify(p[one], q[one], props[one], k[one], rng)
        ref = np.random.default_rng(seed)
        ua = ref.random((1, q.shape[1]))
        first = verify(p[one], q[one], props[one], k[one], u_accept=ua, u_final=np.zeros(1))
        uf = ref.random(1) if first.corrected[0] or first.bonus[0] else np.zeros(1)
        again = verify(p[one], q[one], props[one], k[one], u_accept=ua, u_final=uf)
        np.testing.assert_array_equal(drawn.tokens, again.tokens)
        assert rng.random() == ref.random()


def test_a_seed_rng_is_one_generator_for_both_draws():
    """An int rng seeds one Generator: the final draws follow the accept uniforms in its
    stream (they do not restart it)."""
    p = np.array([[0.0, 0.5, 0.5], [0.2, 0.4, 0.4]])     # p(0) = 0: the proposal 0 is rejected
    q = np.array([[0.5, 0.25, 0.25]])                    # residual (0, 1/2, 1/2): u decides
    for seed in range(20):
        for rows in (1, 3):
            props = np.zeros((rows, 1), dtype=np.int64)
            out = verify(p, q, props, rng=seed)
            ref = np.random.default_rng(seed)
            want = verify(p, q, props, u_accept=ref.random((rows, 1)), u_final=ref.random(rows))
            np.testing.assert_array_equal(out.tokens, want.tokens)


@settings(max_examples=40, deadline=None)
@given(rows=verify_rows(), seed=st.integers(0, 2**32 - 1))
def test_rng_draws_accept_uniforms_then_one_per_final_token(rows, seed):
    p, q, props, k, _, _ = rows
    out = verify(p[:, :-1], q, props, k, np.random.default_rng(seed))
    rng = np.random.default_rng(seed)
    u_accept = rng.random(q.shape[:2])
    first = verify(p[:, :-1], q, props, k, u_accept=u_accept, u_final=np.zeros(len(k)))
    u_final = np.zeros(len(k))
    u_final[first.corrected] = rng.random(int(first.corrected.sum()))
    again = verify(p[:, :-1], q, props, k, u_accept=u_accept, u_final=u_final)
    np.testing.assert_array_equal(out.tokens, again.tokens)
    assert float(rng.random()) == float(np.random.default_rng(seed).random(
        q.shape[0] * q.shape[1] + int(first.corrected.sum()) + 1)[-1])


@pytest.mark.parametrize("gamma", [1, 3])
def test_emitted_tokens_follow_the_target_and_accepted_counts_beta_powers(gamma):
    """Laws that do not depend on the position: the first emitted token has law p, and
    ``P(n_accepted >= j) = beta ** j`` (Leviathan et al. 2023, Sec. 3.1)."""
    p = np.array([0.3, 0.1, 0.35, 0.25])
    q = np.array([0.4, 0.3, 0.1, 0.2])
    n = 60_000
    rng = np.random.default_rng(11)
    props = draw(q, rng.random(n * gamma)).reshape(n, gamma)
    out = verify(np.broadcast_to(p, (n, gamma + 1, 4)), np.broadcast_to(q, (n, gamma, 4)), props,
                 rng=rng)
    assert_law(np.bincount(out.tokens[:, 0], minlength=4), p, false_alarm=FALSE_ALARM)
    beta = token.acceptance_rate(p, q)
    law = np.array([beta ** j - beta ** (j + 1) for j in range(gamma)] + [beta ** gamma])
    assert_law(np.bincount(out.n_accepted, minlength=gamma + 1), law, false_alarm=FALSE_ALARM)
    assert (out.n_emitted == out.n_accepted + 1).all()
    assert (out.bonus == (out.n_accepted == gamma)).all() and (out.corrected == ~out.bonus).all()


def test_ragged_rows_and_zero_proposals():
    p = np.array([[[0.0, 1.0], [1.0, 0.0]], [[0.5, 0.5], [0.0, 1.0]]])
    q = np.array([[[0.0, 1.0]], [[1.0, 0.0]]])
    out = verify(p, q, [[1], [0]], [1, 0], u_accept=[[0.9], [0.9]], u_final=[0.2, 0.7])
    assert out.tokens.tolist() == [[1, 0], [1, -1]]    # row 1: no proposal, bonus from p[1, 0]
    assert out.n_accepted.tolist() == [1, 0] and out.bonus.tolist() == [True, True]
    empty = verify(p[:, :1], q[:, :0], np.zeros((2, 0), dtype=int), rng=0)
    assert empty.n_emitted.tolist() == [1, 1] and empty.tokens.shape == (2, 1)


def test_article_example_rejection_goes_to_the_residual():
    out = verify(P[None, None], Q[None, None], [[1]], u_accept=[[0.61]], u_final=[0.99])
    assert out.tokens.tolist() == [[0, -1]] and out.corrected.tolist() == [True]
    ok = verify(P[None, None], Q[None, None], [[1]], u_accept=[[0.59]], u_final=[0.99])
    assert ok.tokens.tolist() == [[1, -1]] and ok.n_emitted.tolist() == [1]


@pytest.mark.parametrize("kwargs, match", [
    (dict(q=np.ones((2, 3))), r"^q: must have shape \(2, 1, V\), or \(1, V\) for laws shared"),
    (dict(p=np.ones((2, 3, 3))), r"^p: must have shape \(2, 2, 3\)"),
    (dict(proposals=[0, 0]), r"^proposals: must be integer token ids of shape \(rows, gamma\)"),
    (dict(proposals=np.array([[0.0], [1.0]])), r"^proposals: must be integer"),
    (dict(proposals=[[3], [0]]), r"^proposals: token ids must lie in \[0, 3\)"),
    (dict(n_proposed=[2, 0]), r"^n_proposed: must be 2 integers in \[0, 1\]"),
    (dict(u_accept=np.zeros(2)), r"^u_accept: must have shape \(2, 1\)"),
    (dict(u_final=np.zeros(3)), r"^u_final: must have shape \(2,\)"),
    (dict(rng=None, u_final=None), r"^rng: needed"),
])
def test_kernel_errors_name_the_argument(kwargs, match):
    args = dict(p=np.full((2, 2, 3), 1 / 3), q=np.full((2, 1, 3), 1 / 3), proposals=[[0], [2]],
                n_proposed=None, rng=0, u_accept=np.zeros((2, 1)), u_final=np.zeros(2)) | kwargs
    with pytest.raises(ValueError, match=match):
        verify(args.pop("p"), args.pop("q"), args.pop("proposals"), **args)


@settings(max_examples=60, deadline=None)
@given(rows=verify_rows(max_rows=1), copies=st.integers(1, 6), bonus_position=st.booleans(),
       data=st.data())
def test_shared_laws_equal_the_same_laws_repeated_per_row(rows, copies, bonus_position, data):
    p, q, props, k, _, _ = rows
    p, q = (p[0], q[0]) if bonus_position else (p[0, :-1], q[0])
    gamma = q.shape[0]
    props = np.repeat(props, copies, axis=0)
    k = np.array([data.draw(st.integers(0, gamma)) for _ in range(copies)])
    unit = st.floats(0, 1, exclude_max=True)
    u_acc = np.array([[data.draw(unit) for _ in range(gamma)] for _ in range(copies)]).reshape(copies, gamma)
    u_fin = np.array([data.draw(unit) for _ in range(copies)])
    shared = verify(p, q, props, k, u_accept=u_acc, u_final=u_fin)
    per_row = verify(np.repeat(p[None], copies, 0), np.repeat(q[None], copies, 0), props, k,
                     u_accept=u_acc, u_final=u_fin)
    for field in ("tokens", "n_accepted", "n_emitted", "corrected", "bonus"):
        np.testing.assert_array_equal(getattr(shared, field), getattr(per_row, field))


def test_unproposed_positions_are_ignored():
    p, q = np.full((1, 3, 2), 0.5), np.full((1, 2, 2), 0.5)
    out = verify(p, q, [[1, 99]], [1], u_accept=[[0.1, 0.1]], u_final=[0.9])
    assert out.tokens.tolist() == [[1, 1, -1]] and out.bonus.tolist() == [True]


# ------------------------------------------------------------------ check_rng


def test_check_rng_accepts_a_generator_or_a_seed():
    g = np.random.default_rng(3)
    assert check_rng(g) is g
    assert check_rng(np.int64(5)).random() == np.random.default_rng(5).random()
    with pytest.raises(TypeError, match=r"^rng: must be a numpy.random.Generator or a non-negative"):
        check_rng(None)
    with pytest.raises(TypeError, match="RandomState"):
        check_rng(np.random.RandomState(0))
    with pytest.raises(TypeError, match="bool"):
        check_rng(True)
    with pytest.raises(ValueError, match=r"^rng: a seed must be a non-negative integer \(got -1\)"):
        check_rng(-1)


@given(pairs())
@settings(max_examples=50, deadline=None)
def test_sample_step_correct_is_the_kernel_with_one_row(pq):
    p, q = pq
    a = token.sample_step(p, q, np.random.default_rng(7))
    rng = np.random.default_rng(7)
    x = draw(q, rng.random())
    assert a == int(verify(p[None, None], q[None, None], [[x]], rng=rng).tokens[0, 0])


def test_verify_names_the_argument_for_empty_and_non_numeric_input():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="proposals: must have at least one row"):
        verify(np.zeros((0, 1, 3)), np.zeros((0, 1, 3)), np.zeros((0, 1), int), rng=rng)
    with pytest.raises(ValueError, match="p, q: must be arrays of probabilities"):
        verify([["a"]], [[1.0]], [[0]], rng=rng)
