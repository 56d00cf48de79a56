"""Tests of the numpy transformer: cache, block scoring, rollback, committed weights."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from specdec import nn

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "specdec" / "data" / "models"
HAVE_MODELS = (MODELS / "manifest.json").exists()
needs_models = pytest.mark.skipif(not HAVE_MODELS, reason="models/ not built (make models)")

CFG = nn.TransformerConfig(n_layers=2, d_model=16, n_heads=4, context=40)


pytestmark = pytest.mark.usefixtures("one_blas_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def tiny():
    return nn.Transformer.random(CFG, np.random.default_rng(0))


@pytest.fixture(scope="module")
def real():
    if not HAVE_MODELS:
        pytest.skip("models/ not built (make models)")
    return {name: nn.load_model(name) for name in ("target", "draft", "target_wide")}


# ------------------------------------------------------------------- configuration
def test_config_validation():
    with pytest.raises(ValueError, match="n_heads: must divide d_model"):
        nn.TransformerConfig(n_layers=1, d_model=10, n_heads=4, context=8)
    with pytest.raises(ValueError, match="n_layers: must be an integer >= 1"):
        nn.TransformerConfig(n_layers=0, d_model=8, n_heads=2, context=8)


def test_weights_validation():
    w = nn.Transformer.random(CFG, np.random.default_rng(0)).weights
    bad = dict(w)
    bad["ln_f.bias"] = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="ln_f.bias has shape"):
        nn.Transformer(CFG, bad)
    missing = {k: v for k, v in w.items() if k != "pos_emb.weight"}
    with pytest.raises(ValueError, match="missing parameters"):
        nn.Transformer(CFG, missing)
    nan = dict(w)
    nan["tok_emb.weight"] = np.full_like(w["tok_emb.weight"], np.nan)
    with pytest.raises(ValueError, match="non-finite"):
        nn.Transformer(CFG, nan)


def test_forward_validation(tiny):
    with pytest.raises(ValueError, match="ids must lie in"):
        tiny.forward(np.array([[1, 256]]))
    with pytest.raises(ValueError, match="must be integers"):
        tiny.forward(np.array([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="exceeds the model context"):
        tiny.forward(np.zeros((1, CFG.context + 1), dtype=int))
    cache = tiny.new_cache(2)
    with pytest.raises(ValueError, match="does not match the cache"):
        tiny.forward(np.zeros((1, 3), dtype=int), cache)
    with pytest.raises(ValueError, match="lengths: must be 2 integers"):
        tiny.forward(np.zeros((2, 3), dtype=int), cache, lengths=[1, 4])


def test_truncate_validation(tiny):
    cache = tiny.new_cache(1)
    tiny.forward(np.array([[1, 2, 3]]), cache)
    with pytest.raises(ValueError, match="between 0 and the current lengths"):
        cache.truncate(4)
    cache.truncate(1)
    assert cache.lengths.tolist() == [1]


def test_encode_decode_roundtrip():
    text = "ciao, 世界 ¿qué?"
    assert nn.decode(nn.encode(text)) == text


# ---------------------------------------------------------------------- caching
@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=6), st.integers(0, 2**31 - 1))
def test_incremental_equals_full(chunks, seed):
    """Feeding a sequence in arbitrary chunks through the cache equals one full pass."""
    model = nn.Transformer.random(CFG, np.random.default_rng(1))
    total = min(sum(chunks), CFG.context)
    toks = np.random.default_rng(seed).integers(0, 256, size=(2, total))
    full = model.forward(toks)
    cache, parts, s = model.new_cache(2), [], 0
    for c in chunks:
        if s >= total:
            break
        parts.append(model.forward(toks[:, s:s + c], cache))
        s += c
    np.testing.assert_allclose(np.concatenate(parts, axis=1), full, atol=2e-5, rtol=1e-4)
    assert cache.lengths.tolist() == [total, total]


def test_ragged_block_equals_per_row(tiny):
    """Right-padded rows with their own lengths score like separate sequences."""
    rng = np.random.default_rng(3)
    seqs = [rng.integers(0, 256, size=n) for n in (9, 5, 12)]
    starts = [4, 2, 7]
    cache = tiny.new_cache(3)
    x, lengths = np.zeros((3, 8), dtype=int), np.zeros(3, dtype=int)
    # prefill rows to different lengths, then one ragged block
    pre = np.zeros((3, max(starts)), dtype=int)
    for i, (s, st_) in enumerate(zip(seqs, starts)):
        pre[i, :st_] = s[:st_]
        x[i, :s.size - st_] = s[st_:]
        lengths[i] = s.size - st_
    tiny.forward(pre, cache, lengths=starts)
    out = tiny.forward(x, cache, lengths=lengths)
    for i, s in enumerate(seqs):
        ref = tiny.forward(s[None])[0, starts[i]:]
        np.testing.assert_allclose(out[i, :lengths[i]], ref, atol=2e-5, rtol=1e-4)
    assert cache.lengths.tolist() == [s.size for s in seqs]


def test_rollback_then_new_tokens_equals_fresh(tiny):
    """Score a block, truncate the rejected tail, continue: same as a fresh pass."""
    rng = np.random.default_rng(4)
    prefix, block, other = (rng.integers(0, 256, size=n) for n in (10, 5, 4))
    cache = tiny.new_cache(1)
    tiny.forward(prefix[None], cache)
    tiny.forward(block[None], cache)            # gamma + 1 = 5 positions
    cache.truncate(prefix.size + 2)             # keep two accepted proposals
    got = tiny.forward(other[None], cache)
    seq = np.concatenate([prefix, block[:2], other])
    ref = tiny.forward(seq[None])[0, -other.size:]
    np.testing.assert_allclose(got[0], ref, atol=2e-5, rtol=1e-4)


def test_cache_select_repeat_copy(tiny):
    cache = tiny.new_cache(1)
    tiny.forward(np.array([[5, 6, 7]]), cache)
    many = cache.repeat(3)
    assert many.lengths.tolist() == [3, 3, 3]
    sub = many.select([2, 0])
    assert sub.batch == 2 and sub.nbytes == 2 * cache.nbytes
    dup = cache.copy()
    dup.truncate(1)
    assert cache.lengths.tolist() == [3]
    a = tiny.forward(np.array([[8], [8]]), sub)
    b = tiny.forward(np.array([[5, 6, 7, 8]]))[:, -1:]
    np.testing.assert_allclose(a, np.repeat(b, 2, axis=0), atol=2e-5, rtol=1e-4)


def test_bits_per_byte_validation(tiny):
    with pytest.raises(ValueError, match="at least 2 bytes"):
        nn.bits_per_byte(tiny, b"a")
    uniform = nn.Transformer.random(CFG, np.random.default_rng(0))
    for key in uniform.weights:
        uniform.weights[key][...] = 0.0     # zero logits: every byte has probability 1/256
    assert nn.bits_per_byte(uniform, b"hello world, " * 9) == pytest.approx(8.0, abs=1e-6)


# ------------------------------------------------------------------ committed models
@needs_models
def test_manifest_matches_weights(real):
    manifest = nn.load_manifest()
    for name, model in real.items():
        info = manifest["models"][name]
        assert model.n_parameters == info["parameters"]
        assert {k: list(v.shape) for k, v in model.weights.items()} == info["shapes"]
        assert nn.TransformerConfig(**info["architecture"]) == model.config
        import hashlib
        assert hashlib.sha256((MODELS / info["file"]).read_bytes()).hexdigest() == info["sha256"]
    assert manifest["models"]["target"]["architecture"]["n_layers"] == 8
    assert manifest["models"]["draft"]["architecture"]["n_layers"] == 1
    assert manifest["models"]["target_wide"]["architecture"]["d_model"] == 256


@needs_models
def test_manifest_bits_per_byte_recomputed(real):
    """Validation loss in the manifest = loss recomputed here on the committed sample."""
    manifest = nn.load_manifest()
    sample = nn.load_heldout()
    for name, model in real.items():
        for lang in nn.LANGUAGES:
            got = nn.bits_per_byte(model, sample[lang]["text"])
            assert got == pytest.approx(manifest["models"][name]["sample_bits_per_byte"][lang],
                                        abs=2e-3), (name, lang)


@needs_models
def test_models_learned_something(real):
    """Trained models beat a uniform byte model (8 bits) by far; target beats draft."""
    manifest = nn.load_manifest()
    bpb = {n: manifest["models"][n]["sample_bits_per_byte"] for n in real}
    for lang in nn.LANGUAGES:
        assert bpb["target"][lang] < bpb["draft"][lang] < 5.0


@needs_models
def test_heldout_sample_is_committed_and_disjoint():
    sample = json.loads((MODELS / "heldout.json").read_text())
    for lang in nn.LANGUAGES:
        part = sample["languages"][lang]
        assert 2000 <= len(part["text"].encode()) <= 8000
        assert len(part["prompts"]) >= 16
        assert all(len(p.encode()) <= sample["prompt_bytes"] for p in part["prompts"])


@needs_models
def test_real_rollback_equals_fresh(real):
    target = real["target"]
    prompt = nn.encode(nn.load_heldout()["it"]["prompts"][0])
    cache = target.new_cache(1)
    target.forward(prompt[None], cache)
    target.forward(nn.encode(" xyz")[None], cache)
    cache.truncate(prompt.size + 1)
    got = target.forward(nn.encode("abc")[None], cache)
    ref = target.forward(np.concatenate([prompt, nn.encode(" abc")])[None])[:, -3:]
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


# ----------------------------------------------------------------------- torch twin
def _train_module():
    spec = importlib.util.spec_from_file_location("train_models", ROOT / "tools" / "train_models.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod            # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@needs_models
def test_numpy_forward_matches_torch(real):
    torch = pytest.importorskip("torch")
    tm = _train_module()
    sample = nn.load_heldout()
    toks = np.stack([nn.encode(sample[lang]["text"])[:100] for lang in nn.LANGUAGES])
    for name, model in real.items():
        twin = tm.from_numpy_weights(tm.torch_model(tm.ARCHS[name]), model.weights).eval()
        with torch.no_grad():
            ref = twin(torch.from_numpy(toks)).numpy()
        got = model.forward(toks)
        np.testing.assert_allclose(got, ref, atol=2e-3, rtol=1e-3)
        assert np.abs(got - ref).max() < 2e-3


@needs_models
def test_torch_bits_per_byte_is_the_same_batched_or_not(real):
    torch = pytest.importorskip("torch")
    tm = _train_module()
    twin = tm.from_numpy_weights(tm.torch_model(tm.ARCHS["draft"]), real["draft"].weights).eval()
    text = nn.load_heldout()["en"]["text"].encode("utf-8")
    ctx = tm.ARCHS["draft"]["context"]
    with torch.no_grad():
        for n in (5 * ctx, 5 * ctx + 1, 5 * ctx + 2, 3 * ctx + 57, ctx - 10):
            data = text[:n]
            one = tm.torch_bits_per_byte(twin, data, ctx, batch=1)
            assert tm.torch_bits_per_byte(twin, data, ctx, batch=64) == pytest.approx(one, abs=1e-4)
            assert tm.torch_bits_per_byte(twin, data, ctx, batch=2) == pytest.approx(one, abs=1e-4)


def test_truncate_lengths_shape(tiny):
    cache = tiny.new_cache(2)
    tiny.forward(np.array([[1, 2, 3], [4, 5, 6]]), cache)
    with pytest.raises(ValueError, match="lengths: must be one integer or 2 integers"):
        cache.truncate([1, 1, 1])
    keep = np.array([2, 1])
    cache.truncate(keep)
    keep[0] = 0                                   # the cache owns a copy
    assert cache.lengths.tolist() == [2, 1]
    cache.truncate(0)
    assert cache.lengths.tolist() == [0, 0]


def test_load_model_errors_name_the_argument_and_the_way_out(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"name: no model 'nope' in .*\(it has draft, "):
        nn.load_model("nope")
    with pytest.raises(FileNotFoundError, match=r"package data of specdec.*make models"):
        nn.load_model("draft", models_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match=r"manifest.json not found: the models are"):
        nn.load_manifest(tmp_path)
