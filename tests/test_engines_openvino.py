"""OpenVINO GenAI's speculative decoding (openvino-genai) tested by the kit, every token.

The first tests need nothing but this project (the environment entry, the adapter's
settings, its reading of the pipeline's outputs, its laws, and its errors for a missing
engine, a wrong version, malformed output and bad command-line arguments). The last one
(marked slow) runs the adapter in the engine's environment (``python tools/py_engines.py
openvino``) and skips, saying so, where it is absent.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from specdec.conformance.adapters import openvino as adapter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import py_engines  # noqa: E402


def test_the_entry_is_pinned_at_the_adapter_version():
    eng = py_engines.engine("openvino", adapter.PINNED)
    for req in ("openvino-genai==2026.4.1.0", "openvino==2026.4.1",
                "openvino-tokenizers==2026.4.1.0", py_engines.TORCH):
        assert req in eng.requirements
    assert eng.pip_args == ("--no-deps",)
    with pytest.raises(ValueError, match=r"^version: engine 'openvino' is pinned at 2026\.4\.1\.0 "):
        py_engines.engine("openvino", "2025.4.0.0")


def test_a_missing_engine_is_named():
    try:
        import openvino_genai  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("openvino_genai is importable in this interpreter")
    with pytest.raises(ImportError, match=r"^openvino: openvino-genai is not installed .*"
                                          r"py_engines\.py openvino"):
        adapter.version()
    assert adapter.main(["--requests", "2"]) == 2


def test_a_wrong_version_is_named(monkeypatch):
    monkeypatch.setattr(adapter, "version", lambda: "2025.4.0.0")
    with pytest.raises(RuntimeError, match=r"written against openvino-genai 2026\.4\.1\.0 .* "
                                           r"but 2025\.4\.0\.0"):
        adapter.check_version()


def test_read_tokens_takes_the_one_response():
    res = SimpleNamespace(tokens=[[3, 1, 2]])
    assert adapter.read_tokens(res, max_new_tokens=3, vocab=4).tolist() == [3, 1, 2]


@pytest.mark.parametrize("tokens, message", [
    (None, r"expected one response \(got no tokens\)"),
    ([[1], [2]], r"expected one response \(got 2\)"),
    ([[1, 2, 3, 0]], r"4 tokens, more than max_new_tokens \(3\)"),
    ([[1, 9]], r"a token outside 0\.\.3"),
])
def test_malformed_output_is_named(tokens, message):
    with pytest.raises(ValueError, match="^output: " + message):
        adapter.read_tokens(SimpleNamespace(tokens=tokens), max_new_tokens=3, vocab=4)


def test_settings_and_their_controls():
    by_name = {s.name: s for s in adapter.SETTINGS}
    assert by_name["reference"].gamma is None and not by_name["reference"].control
    assert {by_name[n].gamma for n in ("t1_g2", "t1_g4")} == {2, 4}
    c = by_name["control_t07_law_t1"]
    assert c.control and c.law() == (1.0, 0) and c.temperature == 0.7
    assert [s.name for s in adapter.SETTINGS if s.control] == ["control_t07_law_t1"]
    with pytest.raises(ValueError, match=r"^temperature: must be > 0"):
        adapter.Setting("x", temperature=0)
    with pytest.raises(ValueError, match=r"^gamma: must be >= 1 or None"):
        adapter.Setting("x", gamma=0)
    with pytest.raises(ValueError, match=r"^top_k: must be >= 0"):
        adapter.Setting("x", top_k=-1)


def test_tiny_config_checks_and_names_its_models():
    cfg = adapter.TinyConfig()
    assert cfg.head_dim == 16 and len(cfg.key) == 12
    assert adapter.TinyConfig(draft_seed=3).key != cfg.key
    with pytest.raises(ValueError, match=r"^vocab: must be 256"):
        adapter.TinyConfig(vocab=128)
    with pytest.raises(ValueError, match=r"^hidden, heads: hidden / heads must be an even"):
        adapter.TinyConfig(hidden=60, heads=4)
    with pytest.raises(ValueError, match=r"^layers: must be a positive integer"):
        adapter.TinyConfig(layers=0)


def test_weights_are_deterministic_float32_and_the_draft_differs():
    cfg = adapter.TinyConfig()
    t1, d1 = adapter.make_weights(cfg)
    t2, d2 = adapter.make_weights(cfg)
    assert all(np.array_equal(t1[k], t2[k]) and np.array_equal(d1[k], d2[k]) for k in t1)
    assert t1["head"].dtype == np.float32 and t1["head"].shape == (256, 64)
    assert not np.array_equal(t1["0.q"], d1["0.q"])


def test_filtered_softmax_top_k_and_temperature():
    z = np.log(np.array([[0.5, 0.3, 0.2]]))
    assert np.allclose(adapter._filtered_softmax(z, 1.0, 0), [[0.5, 0.3, 0.2]])
    assert np.allclose(adapter._filtered_softmax(z, 1.0, 2), [[0.625, 0.375, 0.0]])
    p = adapter._filtered_softmax(z, 0.5, 0)
    assert np.allclose(p, np.array([[0.25, 0.09, 0.04]]) / 0.38)


def test_target_laws_are_laws_of_each_position_and_check_their_input():
    pytest.importorskip("torch")
    cfg = adapter.TinyConfig()
    w, _ = adapter.make_weights(cfg)
    p = adapter.target_laws(w, cfg, [5, 6, 7], [8, 9])
    assert p.shape == (2, 256) and np.allclose(p.sum(1), 1)
    # the law of a token does not depend on the tokens after it (causal)
    assert np.allclose(adapter.target_laws(w, cfg, [5, 6, 7], [8])[0], p[0])
    assert (adapter.target_laws(w, cfg, [5], [8], top_k=5) > 0).sum() == 5
    with pytest.raises(ValueError, match=r"^prompt: needs at least one token"):
        adapter.target_laws(w, cfg, [], [1])
    with pytest.raises(ValueError, match=r"^prompt, tokens: every token must lie in \[0, 256\)"):
        adapter.target_laws(w, cfg, [1], [256])


@pytest.mark.parametrize("args, message", [
    (["--seed", "-1"], "--seed: must be >= 0"),
    (["--requests", "0"], "--requests: must be >= 1"),
    (["--tokens", "0"], "--tokens: must be >= 1"),
    (["--tolerance", "2"], r"--tolerance: must be in \[0, 1\]"),
    (["--settings", "nope"], "--settings: must be names among"),
    (["--probe-requests", "-1"], "--probe-requests: must be >= 0"),
    (["--draft-noise", "-0.1"], "--draft-noise: must be a finite number >= 0"),
    (["--draft-noise", "inf"], "--draft-noise: must be a finite number >= 0"),
])
def test_bad_options_are_named(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        adapter.main(args)
    assert exc.value.code == 2
    assert re.search(message, capsys.readouterr().err)


@pytest.fixture(scope="module")
def engine_python():
    if not py_engines.ready("openvino"):
        pytest.skip("no environment for openvino-genai: run `python tools/py_engines.py "
                    "openvino` (about 1.5 GB, 2-3 minutes once per machine)")
    return py_engines.python_of("openvino")


@pytest.mark.slow
def test_the_pipeline_on_small_inputs(engine_python):
    proc = subprocess.run([str(engine_python), "-m", "specdec.conformance.adapters.openvino",
                           "--requests", "12", "--tokens", "40", "--probe-requests", "0",
                           "--settings", "reference,t1_g2,control_t07_law_t1"],
                          capture_output=True, text=True, env=py_engines.environ(),
                          timeout=300, cwd=ROOT)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    s = out["settings"]
    assert s["reference"]["passed"] and not s["control_t07_law_t1"]["passed"]
    assert s["t1_g2"]["drafted"] > 0 and s["t1_g2"]["undrafted_responses"] == 0
    assert out["tolerance"]["max_tv"] < 1e-4
    assert out["models"]["paged_attention"] == {"paged_attention": 2, "sdpa_left": 0}


def test_the_stored_summary_reads_as_matrix_rows():
    from specdec.conformance import matrix as mx

    summary = json.loads((ROOT / "reports" / "openvino-genai-summary-seed2026.json").read_text())
    rows = mx.engine_rows("openvino", summary, rule="black box")
    assert [r.verdict for r in rows] == ["PASS", "FAIL", "FAIL", "FAIL", "FAIL", "ABORTS"]
    assert rows[0].detectable_tv < 0.03 and rows[0].trials == 20000
    assert all(r.control.endswith("FAIL, as it must") for r in rows[1:5])
    assert summary["tolerance"]["max_tv"] < 1e-5
