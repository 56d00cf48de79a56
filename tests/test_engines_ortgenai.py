"""ONNX Runtime GenAI's draft-model speculative decoding (onnxruntime-genai) checked per token.

The first tests need nothing but this project (the environment entry, the adapter's
truncated laws, its reading of the engine's output, the speculative configuration it
writes, its errors for a missing engine and a wrong version). The last one (marked slow)
runs the adapter in the engine's environment (``python tools/py_engines.py ortgenai``) on
a few requests and skips, saying so, where it is absent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specdec.conformance.adapters import ortgenai as adapter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import py_engines  # noqa: E402


def test_the_entry_is_pinned_at_the_adapter_version():
    eng = py_engines.engine("ortgenai", adapter.PINNED)
    reqs = set(eng.requirements)
    assert {"onnxruntime-genai==0.18.0", "onnxruntime==1.32.0", py_engines.TORCH} <= reqs
    assert any(r.startswith("onnx-ir==") for r in reqs)      # the model builder imports it
    assert eng.pip_args == ("--no-deps",)
    with pytest.raises(ValueError, match=r"^version: engine 'ortgenai' is pinned at 0\.18\.0 "):
        py_engines.engine("ortgenai", "0.17.1")


def test_a_missing_engine_is_named():
    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("onnxruntime_genai is importable in this interpreter")
    with pytest.raises(ImportError, match=r"^ortgenai: onnxruntime-genai is not installed "
                                          r".*py_engines\.py ortgenai"):
        adapter.version()


def test_a_wrong_version_is_named(monkeypatch):
    monkeypatch.setattr(adapter, "version", lambda: "0.17.1")
    with pytest.raises(RuntimeError, match=r"written against onnxruntime-genai 0\.18\.0 .* "
                                           r"but 0\.17\.1"):
        adapter.check_version()


LOGITS = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))


def test_truncated_law_without_truncation_is_the_tempered_softmax():
    law = adapter.truncated_law(LOGITS, 1.0, 4)
    np.testing.assert_allclose(law, [[0.5, 0.3, 0.15, 0.05]], rtol=1e-12)
    hot = adapter.truncated_law(LOGITS[0], 0.5, 4)
    w = np.array([0.5, 0.3, 0.15, 0.05]) ** 2
    np.testing.assert_allclose(hot, w / w.sum(), rtol=1e-12)


def test_truncated_law_keeps_the_top_k_then_the_top_p_prefix():
    np.testing.assert_allclose(adapter.truncated_law(LOGITS, 1.0, 2), [[0.625, 0.375, 0, 0]],
                               rtol=1e-12)
    # cumulative 0.5, 0.8, 0.95: the first index whose mass reaches top_p is kept
    np.testing.assert_allclose(adapter.truncated_law(LOGITS, 1.0, 4, 0.79),
                               [[0.625, 0.375, 0, 0]], rtol=1e-12)
    np.testing.assert_allclose(adapter.truncated_law(LOGITS, 1.0, 4, 0.81),
                               [[0.5, 0.3, 0.15, 0]] / np.float64(0.95), rtol=1e-12)
    # the order does not depend on where the tokens are
    perm = adapter.truncated_law(LOGITS[:, ::-1], 1.0, 3)
    np.testing.assert_allclose(perm, [[0, 0.15, 0.3, 0.5]] / np.float64(0.95), rtol=1e-12)


@pytest.mark.parametrize("args, message", [
    ((np.array([[0.0, np.inf]]), 1.0, 2), r"^logits: must be finite"),
    ((LOGITS, 0.0, 4), r"^temperature: must be finite and > 0"),
    ((LOGITS, 1.0, 5), r"^top_k: must be an integer in 1\.\.4"),
    ((LOGITS, 1.0, 4, 0.0), r"^top_p: must be in \(0, 1\]"),
])
def test_truncated_law_names_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        adapter.truncated_law(*args)


def test_read_response_takes_the_generated_tokens():
    got = adapter.read_response([7, 8, 9, 10, 11], [7, 8], 3)
    assert got.tolist() == [9, 10, 11] and got.dtype == np.int64
    assert adapter.read_response([7, 8, 9, adapter.EOS], [7, 8], 3).tolist() == [9, adapter.EOS]
    assert adapter.read_response([7, 8], [7, 8], 3).tolist() == []


@pytest.mark.parametrize("seq, message", [
    ([7, 9, 9], r"the sequence \[7, 9\]\.\.\. does not start with the prompt \[7, 8\]"),
    ([7, 8, 1, 1, 1, 1], r"4 generated tokens, more than max_new \(3\)"),
    ([7, 8, 96], r"a generated token is outside 0\.\.95"),
    ([7, 8, 2, 5], r"1 tokens after the end-of-sequence token 2"),
])
def test_read_response_names_malformed_output(seq, message):
    with pytest.raises(ValueError, match="^output: " + message):
        adapter.read_response(seq, [7, 8], 3)


def _cfg(vocab=96, filename="model.onnx"):
    return {"model": {"vocab_size": vocab, "type": "llama",
                      "decoder": {"filename": filename, "num_hidden_layers": 2}},
            "search": {"max_length": 256}}


def test_spec_config_adds_the_draft_decoder_and_k():
    target, draft = _cfg(), _cfg()
    draft["model"]["decoder"]["num_hidden_layers"] = 1
    cfg = adapter.spec_config(target, draft, 3)
    assert cfg["model"]["draft"] == {"filename": "draft/model.onnx", "num_hidden_layers": 1}
    assert cfg["speculative"] == {"max_draft_tokens": 3}
    assert cfg["model"]["decoder"] == target["model"]["decoder"] and "draft" not in target["model"]


@pytest.mark.parametrize("target, draft, k, message", [
    (_cfg(), _cfg(), 17, r"^k: must be an integer in 1\.\.16"),
    ({"model": {}}, _cfg(), 2, r"^target_config: has no model\.decoder"),
    (_cfg(), _cfg(vocab=64), 2, r"^draft_config: vocab_size 64 differs from the target's 96"),
])
def test_spec_config_names_bad_arguments(target, draft, k, message):
    with pytest.raises(ValueError, match=message):
        adapter.spec_config(target, draft, k)


@pytest.mark.parametrize("kwargs, message", [
    (dict(draft="tiny"), r"^draft: must be 'close' or 'small'"),
    (dict(temperature=0.0), r"^temperature: must be finite and > 0"),
    (dict(top_k=1), r"^top_k: must be an integer in 2\.\.96"),
    (dict(top_p=1.5), r"^top_p: must be in \(0, 1\]"),
    (dict(k=0), r"^k: must be an integer in 1\.\.16"),
])
def test_bad_settings_are_named(kwargs, message):
    base = dict(draft="close", temperature=1.0, top_k=96, top_p=1.0, k=4)
    with pytest.raises(ValueError, match=message):
        adapter.Setting(**{**base, **kwargs})


def test_the_settings_and_the_control_are_the_documented_ones():
    assert len(adapter.SETTINGS) >= 2 and adapter.CONTROL in adapter.SETTINGS
    ctl = adapter.SETTINGS[adapter.CONTROL]
    assert ctl.temperature != 1.0 or ctl.top_k < adapter.VOCAB    # the control can fail
    steps = {s for s, _, _ in adapter.RULE}
    assert {"accept test", "rejection", "bonus", "caller-proposed drafts"} <= steps


def test_the_rule_as_read_is_exact_on_truncated_laws():
    """The rule of RULE (min(1, p/q), residual max(0, p - q) on the target's kept tokens,
    bonus from p) on truncated laws gives the target's truncated law: one position."""
    rng = np.random.default_rng(0)
    p = adapter.truncated_law(rng.normal(size=(1, 12)) * 2, 0.7, 5)[0]
    q = adapter.truncated_law(rng.normal(size=(1, 12)) * 2, 0.7, 5)[0]
    accept = np.minimum(1.0, np.divide(p, q, out=np.ones_like(p), where=q > 0))
    residual = np.maximum(0.0, p - q)
    emitted = q * accept + (1 - (q * accept).sum()) * residual / residual.sum()
    np.testing.assert_allclose(emitted, p, atol=1e-12)


def test_the_models_cache_is_keyed_by_their_configurations(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_ORTGENAI_MODELS", str(tmp_path))
    first = adapter.models_dir()
    assert first.parent == tmp_path
    monkeypatch.setattr(adapter, "_LM_SCALE", 10.0)
    assert adapter.models_dir() != first
    with pytest.raises(ValueError, match=r"^names: 'huge' is not one of target, close, small"):
        adapter.build_models(tmp_path, ["huge"])


def test_the_caller_proposed_path_says_why_it_is_not_run_with_the_errors():
    cd = adapter.CALLER_DRAFTS
    assert cd["status"] == "not run" and "set_draft_tokens" in cd["interface"]
    assert cd["rule"].startswith("matching") and "speculative_sampling.h:96-127" in cd["rule"]
    errors = " | ".join(t["error"] for t in cd["tried"])
    for text in ("This engine does not support speculative draft verification.",
                 "Paged cache input must have rank four",
                 "PagedAttention (use_paged_attention=true) requires CUDA with FP16/BF16 or "
                 "WebGPU with FP16, not (cpu, FLOAT).",
                 "A per-turn seed requires an Engine configured for dynamic batching."):
        assert text in errors
    assert all(t["what"] and t["error"] for t in cd["tried"]) and "CUDA" in cd["reason"]


@pytest.fixture(scope="module")
def engine_python():
    if not py_engines.ready("ortgenai"):
        pytest.skip("no environment for onnxruntime-genai: run `python tools/py_engines.py "
                    "ortgenai` (about 1.5 GB, minutes once per machine)")
    return py_engines.python_of("ortgenai")


@pytest.mark.slow
def test_a_short_run_passes_with_a_tiny_numerical_tolerance(engine_python):
    proc = subprocess.run([str(engine_python), "-m", "specdec.conformance.adapters.ortgenai",
                           "--requests", "60", "--tokens", "16", "--settings", "close_T1_K4"],
                          capture_output=True, text=True, env=py_engines.environ(), timeout=600,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["version"] == adapter.PINNED
    (s,) = out["settings"]
    rows = {r["row"]: r for r in s["rows"]}
    assert set(rows) == {"speculative", "reference", "control_draft_law"}
    assert rows["speculative"]["passed"] and rows["reference"]["passed"]
    assert 0 < rows["speculative"]["tokens"] <= 60 * 16
    assert rows["speculative"]["engine_stats"]["draft_tokens_accepted"] > 0
    assert 0 <= s["tolerance"] < 1e-4
    # the Engine API's caller-proposed drafts are still refused on this CPU (CALLER_DRAFTS)
    probe = out["caller_drafts"]["probe"]
    assert probe == {"max_draft_tokens_per_proposal": 0, "set_draft_tokens":
                     "This engine does not support speculative draft verification."}


def test_the_engine_has_left_the_not_run_list():
    data = json.loads((ROOT / "specdec" / "conformance" / "adapters" / "unavailable.json")
                      .read_text())
    assert "onnxruntime-genai" not in {row["engine"] for row in data["engines"]}


def test_request_seeds_fit_the_engines_32_bit_seed_for_any_project_seed():
    for seed in (0, 2026, 123_456, 2**40):
        seeds = adapter.request_seeds(seed, 1_000_000, 500, bits=31)   # as the adapter asks
        assert len(seeds) == len(set(seeds)) == 500
        assert all(0 <= s < 2**31 for s in seeds)
    import inspect
    assert "bits=31" in inspect.getsource(adapter.run_setting if hasattr(adapter, "run_setting")
                                          else adapter)
    assert adapter.request_seeds(7, 0, 5) == adapter.request_seeds(7, 0, 5)
    assert adapter.request_seeds(7, 0, 5) != adapter.request_seeds(7, 1, 5)
    with pytest.raises(ValueError, match="requests: must be >= 1"):
        adapter.request_seeds(7, 0, 0)
    with pytest.raises(ValueError, match="seed, stream: must be >= 0"):
        adapter.request_seeds(-1, 0, 3)


def test_overall_verdict_needs_every_row_to_pass_and_every_control_to_fail():
    rows = lambda **p: {"settings": [{"rows": [{"row": k, "passed": v} for k, v in p.items()]}]}
    assert adapter.overall_verdict(rows(speculative=True, reference=True, control=False,
                                        control_draft_law=False)) == "PASS"
    assert adapter.overall_verdict(rows(speculative=False, reference=True)) == "FAIL"
    assert adapter.overall_verdict(rows(speculative=True, reference=True,
                                        control_draft_law=True)) == "FAIL"   # control missed
