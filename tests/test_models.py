"""Toy autoregressive models: validation, constructors and the target-only sequence law."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.laws import LawError
from specdec.models import (
    TOY_SEED,
    ToyModel,
    check_prefix,
    model_from_function,
    perturbed_draft,
    random_model,
    sequence_law,
    toy_pair,
)

TINY = [[[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]]  # V = 2, EOS = 1, order 1, one position slot


def test_table_lookup_by_last_token_and_begin_marker():
    m = ToyModel(2, eos=1, table=TINY)
    assert m.next_law(()).tolist() == [0.2, 0.8]
    assert m.next_law((0,)).tolist() == [0.5, 0.5]
    assert m.next_law((0, 1)).tolist() == [0.9, 0.1]


def test_order_two_and_position_clipping():
    v, order, positions = 3, 2, 3
    table = np.random.default_rng(0).dirichlet(np.ones(v), size=(positions, (v + 1) ** order))
    m = ToyModel(v, eos=None, table=table, order=order)
    # context index: last token + (V + 1) * second-to-last, begin marker = V
    assert np.array_equal(m.next_law(()), table[0, v + (v + 1) * v])
    assert np.array_equal(m.next_law((1,)), table[1, 1 + (v + 1) * v])
    assert np.array_equal(m.next_law((2, 1)), table[2, 1 + (v + 1) * 2])
    # positions beyond P - 1 share the last slot
    assert np.array_equal(m.next_law((0, 0, 2, 1)), table[2, 1 + (v + 1) * 2])
    assert m.memory == 2


def test_next_law_batch_matches_scalar_lookup():
    p, _ = toy_pair()
    rng = np.random.default_rng(1)
    buf = rng.integers(0, p.vocab_size, size=(200, 9))
    lens = rng.integers(0, 10, size=200)
    batch = p.next_law_batch(buf, lens)
    for i in range(200):
        assert np.array_equal(batch[i], p.next_law(tuple(buf[i, : lens[i]].tolist())))
    f = model_from_function(p.vocab_size, p.eos, lambda pre: p.next_law(pre))
    assert np.array_equal(f.next_law_batch(buf, lens), batch)


def test_memory_suffix_gives_the_same_future_laws():
    p, _ = toy_pair()
    rng = np.random.default_rng(2)
    for _ in range(100):
        ctx = tuple(rng.integers(0, 3, size=rng.integers(p.memory, 9)).tolist())
        tail = tuple(rng.integers(0, 4, size=3).tolist())
        short = ctx[-p.memory:]
        for j in range(4):
            assert np.array_equal(p.next_law(ctx + tail[:j]), p.next_law(short + tail[:j]))


@pytest.mark.parametrize("kwargs, match", [
    (dict(vocab_size=1, eos=None, table=[[[1.0]]]), "vocab_size"),
    (dict(vocab_size=2, eos=2, table=TINY), "eos"),
    (dict(vocab_size=2, eos=1), "exactly one"),
    (dict(vocab_size=2, eos=1, table=TINY, law_fn=lambda p: [1, 0]), "exactly one"),
    (dict(vocab_size=2, eos=1, table=[[[0.5, 0.5], [0.9, 0.1]]]), "shape"),
    (dict(vocab_size=2, eos=1, table=[[[0.5, 0.4], [0.9, 0.1], [0.2, 0.8]]]), "sum to 1"),
    (dict(vocab_size=2, eos=1, table=[[[1.5, -0.5], [0.9, 0.1], [0.2, 0.8]]]), "non-negative"),
    (dict(vocab_size=2, eos=1, table=[[[np.nan, 1], [0.9, 0.1], [0.2, 0.8]]]), "finite"),
    (dict(vocab_size=2, eos=1, law_fn="not callable"), "callable"),
    (dict(vocab_size=2, eos=1, table=TINY, order=0), "order"),
])
def test_invalid_models_raise(kwargs, match):
    # the table's laws raise LawError (a ValueError); "exactly one" is a ValueError and
    # "callable" a TypeError, each naming the argument
    with pytest.raises((ValueError, TypeError), match=match):
        ToyModel(**kwargs)


def test_table_is_read_only_copy():
    src = np.array(TINY)
    m = ToyModel(2, eos=1, table=src)
    src[0, 0] = [1.0, 0.0]
    assert m.next_law((0,)).tolist() == [0.5, 0.5]
    with pytest.raises(ValueError):
        m.table[0, 0, 0] = 1.0


def test_law_fn_output_is_validated():
    bad = model_from_function(2, None, lambda prefix: [0.7, 0.7])
    with pytest.raises(LawError, match="sum to 1"):
        bad.next_law(())
    wrong_size = model_from_function(2, None, lambda prefix: [0.5, 0.25, 0.25])
    with pytest.raises(LawError, match="vocabulary size 3"):
        wrong_size.next_law(())


def test_prefix_validation():
    assert check_prefix([0, 1], 2) == (0, 1)
    with pytest.raises(ValueError, match=r"prefix: token ids must be integers in \[0, 2\)"):
        check_prefix([0, 2], 2)
    with pytest.raises(ValueError, match="prefix"):
        check_prefix([0.5], 2)
    with pytest.raises(ValueError, match="end-of-sequence"):
        check_prefix([0, 1], 2, eos=1)
    with pytest.raises(ValueError, match="prefix"):
        ToyModel(2, eos=1, table=TINY).next_law((3,))


def test_constructors_are_seeded_and_reproducible():
    a, b = toy_pair(), toy_pair()
    assert np.array_equal(a[0].table, b[0].table) and np.array_equal(a[1].table, b[1].table)
    c, _ = toy_pair(seed=TOY_SEED + 7)
    assert not np.array_equal(a[0].table, c.table)
    p, q = a
    assert (p.vocab_size, p.eos, p.order, p.positions) == (4, 3, 2, 4)
    assert (q.table > 0).all()  # a perturbed draft proposes every token


def test_perturbed_draft_closeness_interpolates():
    p = random_model(3, rng=5, order=1, positions=2)
    assert np.allclose(perturbed_draft(p, 1.0).table, p.table)
    d0 = perturbed_draft(p, 0.0, rng=9)
    half = perturbed_draft(p, 0.5, rng=9)
    assert np.allclose(half.table, 0.5 * p.table + 0.5 * d0.table)
    tv = lambda a, b: 0.5 * np.abs(a.table - b.table).sum(-1).mean()
    assert tv(p, perturbed_draft(p, 0.9, rng=9)) < tv(p, half) < tv(p, d0)
    with pytest.raises(ValueError, match="closeness"):
        perturbed_draft(p, 1.5)
    with pytest.raises(TypeError, match="table"):
        perturbed_draft(model_from_function(2, None, lambda x: [0.5, 0.5]), 0.5)


def test_random_model_validation():
    with pytest.raises(ValueError, match="concentration"):
        random_model(3, concentration=0.0)
    with pytest.raises(ValueError, match="eos_weight"):
        random_model(3, eos_weight=-1.0)
    assert random_model(3, eos=None).eos is None


def test_sequence_law_hand_computed():
    m = ToyModel(2, eos=1, table=TINY)
    law = sequence_law(m, (), 3)
    expected = {(1,): 0.8, (0, 1): 0.2 * 0.5, (0, 0, 0): 0.2 * 0.5 * 0.5, (0, 0, 1): 0.2 * 0.5 * 0.5}
    assert set(law) == set(expected)
    for k, v in expected.items():
        assert math.isclose(law[k], v, abs_tol=1e-15)


def test_sequence_law_conventions():
    p, _ = toy_pair()
    for length in (1, 3, 5):
        law = sequence_law(p, (0, 2), length)
        assert abs(sum(law.values()) - 1.0) < 1e-12
        for k, v in law.items():
            assert v > 0
            assert len(k) == length or (k[-1] == p.eos and len(k) < length)
            assert p.eos not in k[:-1]
        # prefix-free keys: no key is a proper prefix of another
        keys = set(law)
        assert not any(k[:i] in keys for k in keys for i in range(1, len(k)))
    with pytest.raises(ValueError, match="length"):
        sequence_law(p, (), 0)
    with pytest.raises(ValueError, match="end-of-sequence"):
        sequence_law(p, (p.eos,), 2)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), v=st.integers(2, 4), length=st.integers(1, 4),
       order=st.integers(1, 2))
def test_sequence_law_marginal_is_one_step_law(seed, v, length, order):
    """Summing the law of L tokens over the last token gives the law of L - 1 tokens."""
    m = random_model(v, rng=seed, order=order, positions=3)
    law = sequence_law(m, (), length)
    assert abs(sum(law.values()) - 1.0) < 1e-12
    first = np.zeros(v)
    for k, pr in law.items():
        first[k[0]] += pr
    assert np.allclose(first, m.next_law(()), atol=1e-12)
    if length > 1:
        shorter = sequence_law(m, (), length - 1)
        merged: dict = {}
        for k, pr in law.items():
            key = k if len(k) < length else k[:-1]
            merged[key] = merged.get(key, 0.0) + pr
        assert set(merged) == set(shorter)
        assert all(abs(merged[k] - shorter[k]) < 1e-12 for k in shorter)
