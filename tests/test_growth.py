"""Net2Net growth of the book's transformer (tools/train_models.py: grow) and the grown
large target: function preservation, forward pass, cache and rollback."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from specdec import nn

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "specdec" / "data" / "models"
ARCH = dict(n_layers=2, d_model=16, n_heads=4, context=40, vocab_size=256)

pytestmark = pytest.mark.usefixtures("one_blas_thread")  # tests/conftest.py


def _train_module():
    name = "train_models_for_growth_tests"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "train_models.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod                 # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _base(seed: int) -> nn.Transformer:
    model = nn.Transformer.random(nn.TransformerConfig(**ARCH), np.random.default_rng(seed))
    rng = np.random.default_rng(seed + 1)     # LayerNorms that are not the identity
    for key, value in model.weights.items():
        if "ln" in key:
            value[...] = (1.0 if key.endswith("weight") else 0.0) + \
                0.3 * rng.standard_normal(value.shape)
    return nn.Transformer(model.config, model.weights)


@settings(max_examples=12, deadline=None)
@given(widen=st.integers(1, 3), new_layers=st.integers(0, 2), seed=st.integers(0, 2**16))
def test_growth_preserves_the_function(widen, new_layers, seed):
    tm = _train_module()
    base = _base(seed)
    weights, arch = tm.grow(base.weights, ARCH, widen, new_layers, 0.0,
                            np.random.default_rng(seed))
    grown = nn.Transformer(nn.TransformerConfig(**arch), weights)
    assert arch["d_model"] == widen * ARCH["d_model"]
    assert arch["n_layers"] == ARCH["n_layers"] + new_layers
    tokens = np.random.default_rng(seed).integers(0, 256, size=(2, 30))
    np.testing.assert_allclose(grown.forward(tokens), base.forward(tokens), atol=2e-4,
                               rtol=1e-4)


def test_growth_noise_breaks_symmetry_and_keeps_zero_projections():
    tm = _train_module()
    base = _base(0)
    exact, _ = tm.grow(base.weights, ARCH, 2, 1, 0.0, np.random.default_rng(1))
    noisy, arch = tm.grow(base.weights, ARCH, 2, 1, 0.01, np.random.default_rng(1))
    w = noisy["blocks.0.fc.weight"]
    assert not np.array_equal(w[0], w[1])                     # the two copies of unit 0
    assert np.array_equal(exact["blocks.0.fc.weight"][0], exact["blocks.0.fc.weight"][1])
    assert not np.any(noisy["blocks.2.proj.weight"]) and not np.any(noisy["blocks.2.out.weight"])
    grown = nn.Transformer(nn.TransformerConfig(**arch), noisy)
    tokens = np.arange(20)[None]
    gap = np.abs(grown.forward(tokens) - base.forward(tokens)).max()
    assert 0 < gap < 1.0                                      # close, not equal


def test_growth_validation():
    tm = _train_module()
    w = _base(0).weights
    with pytest.raises(ValueError, match="widen: must be an integer >= 1"):
        tm.grow(w, ARCH, 0)
    with pytest.raises(ValueError, match="new_layers: must be an integer >= 0"):
        tm.grow(w, ARCH, 2, -1)
    with pytest.raises(ValueError, match="noise: must be >= 0"):
        tm.grow(w, ARCH, 2, 0, -0.1)
    with pytest.raises(ValueError, match="rng: needed"):
        tm.grow(w, ARCH, 2, 1)


def test_training_recipe_grows_the_committed_base():
    """ARCHS and GROWTH agree: growing the base's architecture gives the large one's."""
    tm = _train_module()
    for name, growth in tm.GROWTH.items():
        k, new = growth["widen"], growth["new_layers"]
        base = tm.ARCHS[growth["base"]]
        assert tm.ARCHS[name] == dict(base, d_model=k * base["d_model"],
                                      n_layers=base["n_layers"] + new)
        assert list(tm.ARCHS).index(growth["base"]) < list(tm.ARCHS).index(name)


# ------------------------------------------------------------------- the large target
@pytest.fixture(scope="module")
def large():
    if not (MODELS / "target_large.npz").exists():
        pytest.skip("target_large not built (make models)")
    return nn.load_model("target_large")


def test_large_target_is_memory_sized_and_stored_as_float16(large):
    manifest = nn.load_manifest()
    info = manifest["models"]["target_large"]
    assert info["storage"] == "float16"
    with np.load(MODELS / "target_large.npz") as data:
        assert {data[k].dtype for k in data.files} == {np.dtype(np.float16)}
    assert all(v.dtype == np.float32 for v in large.weights.values())   # computed in float32
    assert 4 * large.n_parameters > 2 * 32 * 2**20         # float32 weights: twice a 32 MiB L3
    total = sum(p.stat().st_size for p in MODELS.glob("*.npz"))
    assert total <= 64 * 2**20                              # the repository's weight budget


def test_large_target_incremental_rollback_and_block_scoring(large):
    held = nn.load_heldout()
    prompt = nn.encode(held["en"]["prompts"][0])
    full = large.forward(np.concatenate([prompt, nn.encode(" abcd")])[None])
    cache = large.new_cache(1)
    large.forward(prompt[None], cache)
    step = large.forward(nn.encode(" ")[None], cache)               # one position
    np.testing.assert_allclose(step[0, -1], full[0, prompt.size], atol=2e-4, rtol=1e-4)
    large.forward(nn.encode("xyz")[None], cache)                      # a rejected block
    cache.truncate(prompt.size + 1)                                   # roll back
    block = large.forward(nn.encode("abcd")[None], cache)             # gamma + 1 = 4 positions
    np.testing.assert_allclose(block[0], full[0, -4:], atol=2e-4, rtol=1e-4)
    assert cache.lengths.tolist() == [prompt.size + 5]


def test_large_target_beats_the_draft(large):
    manifest = nn.load_manifest()
    bpb = {n: manifest["models"][n]["sample_bits_per_byte"] for n in ("target_large", "draft")}
    for lang in nn.LANGUAGES:
        assert bpb["target_large"][lang] < bpb["draft"][lang]


def test_large_target_matches_its_manifest_entry(large):
    import hashlib
    info = nn.load_manifest()["models"]["target_large"]
    assert large.n_parameters == info["parameters"]
    assert {k: list(v.shape) for k, v in large.weights.items()} == info["shapes"]
    assert nn.TransformerConfig(**info["architecture"]) == large.config
    digest = hashlib.sha256((MODELS / info["file"]).read_bytes()).hexdigest()
    assert digest == info["sha256"]
    assert info["training"]["growth"]["base"] == "target"


@pytest.mark.slow
def test_large_target_bits_per_byte_recomputed(large):
    """The manifest's sample bits per byte of the large target, recomputed in numpy."""
    manifest = nn.load_manifest()
    sample = nn.load_heldout()
    for lang in nn.LANGUAGES:
        got = nn.bits_per_byte(large, sample[lang]["text"])
        want = manifest["models"]["target_large"]["sample_bits_per_byte"][lang]
        assert got == pytest.approx(want, abs=2e-3), lang
