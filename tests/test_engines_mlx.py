"""mlx-lm's speculative decoding (specdec.conformance.adapters.mlxlm) tested by the kit.

The first tests need nothing but this project (the environment entry, the adapter's errors
for a missing engine, a wrong version, bad settings and command-line arguments, and its
numpy translation of mlx-lm's sampler: top-p and temperature). The last one (marked slow)
runs the adapter in the engine's environment (``python tools/py_engines.py mlx``) and skips,
saying so, where it is absent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specdec.conformance.adapters import mlxlm as adapter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import py_engines  # noqa: E402


def test_the_entry_is_pinned_at_the_adapter_version():
    eng = py_engines.engine("mlx", adapter.PINNED)
    assert "mlx-lm==0.32.2" in eng.requirements
    assert f"mlx=={adapter.MLX_PINNED}" in eng.requirements
    assert f"mlx-cpu=={adapter.MLX_PINNED}" in eng.requirements
    assert py_engines.TORCH not in eng.requirements and eng.pip_args == ("--no-deps",)
    assert any(r.startswith("transformers==") for r in eng.requirements)
    with pytest.raises(ValueError, match=r"^version: engine 'mlx' is pinned at 0\.32\.2 "):
        py_engines.engine("mlx", "0.31.0")


def _mlx_missing():
    try:
        import mlx_lm  # noqa: F401
    except ImportError:
        return True
    return False


def test_a_missing_engine_is_named(capsys):
    if not _mlx_missing():
        pytest.skip("mlx_lm is importable in this interpreter")
    with pytest.raises(ImportError, match=r"^mlxlm: mlx-lm \(with mlx\) is not installed .*"
                                          r"py_engines\.py mlx"):
        adapter.version()
    assert adapter.main(["--requests", "2"]) == 2
    assert "py_engines.py mlx" in capsys.readouterr().err


def test_a_wrong_version_is_named(monkeypatch):
    monkeypatch.setattr(adapter, "version", lambda: "0.31.0")
    with pytest.raises(RuntimeError, match=r"written against mlx-lm 0\.32\.2 .* but 0\.31\.0"):
        adapter.check_version()


@pytest.mark.parametrize("argv, message", [
    (["--requests", "0"], "--requests: must be >= 1"),
    (["--max-tokens", "0"], "--max-tokens: must be >= 1"),
    (["--seed", "-1"], "--seed: must be >= 0"),
    (["--control-requests", "-1"], "--control-requests: must be >= 0"),
    (["--rows", "spec_t1_k3,bogus"], "--rows: must be a comma-separated subset"),
])
def test_bad_command_line_arguments_are_named(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        adapter.main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match=r"^temperature: must be > 0"):
        adapter.Setting(temperature=0)
    with pytest.raises(ValueError, match=r"^top_p: must be in \(0, 1\]"):
        adapter.Setting(top_p=1.5)
    with pytest.raises(ValueError, match=r"^num_draft: must be a non-negative integer"):
        adapter.Setting(num_draft=-1)
    with pytest.raises(ValueError, match=r"^hidden: must be a multiple of heads \(4; got 30\)"):
        adapter.ModelConfig(hidden=30)
    with pytest.raises(ValueError, match=r"^vocab: must be a positive integer"):
        adapter.ModelConfig(vocab=0)
    with pytest.raises(ValueError, match=r"^logit_scale: must be > 0"):
        adapter.ModelConfig(logit_scale=0)
    with pytest.raises(ValueError, match=r"^rows: must be a non-empty subset"):
        adapter.run_all(rows=("bogus",))
    with pytest.raises(ValueError, match=r"^requests: must be an integer >= 1"):
        adapter.run_all(requests=0)


def test_setting_labels():
    assert adapter.Setting(1.0, 1.0, 0).label() == "temperature 1, no draft"
    assert adapter.Setting(0.7, 0.9, 2).label() == "temperature 0.7, top-p 0.9, num_draft_tokens 2"


def test_request_seeds_are_reproducible_and_distinct_per_row():
    a, b = adapter.request_seeds(0, 1, 5), adapter.request_seeds(0, 1, 5)
    assert a == b and len(a) == 5 and all(0 <= s < 2**32 for s in a)
    # the shared function keeps the words SeedSequence gives at 32 bits (the seeds of the
    # stored summary)
    import numpy as np
    assert a == [int(w) for w in np.random.SeedSequence([0, 1]).generate_state(5)]
    assert not set(a) & set(adapter.request_seeds(0, 2, 5))
    with pytest.raises(ValueError, match=r"^seed, stream: must be >= 0"):
        adapter.request_seeds(0, -1, 5)
    with pytest.raises(ValueError, match=r"^requests: must be >= 1"):
        adapter.request_seeds(0, 0, 0)


P = np.array([[0.5, 0.3, 0.15, 0.05]])


def test_top_p_keeps_the_smallest_top_set_reaching_the_mass_and_ties():
    lp = np.log(P)
    assert adapter.top_p_mask(lp, 0.7).tolist() == [[True, True, False, False]]
    assert adapter.top_p_mask(lp, 0.5).tolist() == [[True, False, False, False]]
    assert adapter.top_p_mask(lp, 0.9).tolist() == [[True, True, True, False]]
    assert adapter.top_p_mask(lp, 1.0).all()
    ties = np.log(np.array([[0.2, 0.4, 0.4]]))
    assert adapter.top_p_mask(ties, 0.3).tolist() == [[False, True, True]]
    with pytest.raises(ValueError, match=r"^top_p: must be in \(0, 1\]"):
        adapter.top_p_mask(lp, 0.0)
    with pytest.raises(ValueError, match=r"^logprobs: must have shape \(n, V\)"):
        adapter.top_p_mask(lp[0], 0.5)


def test_the_law_is_top_p_at_temperature_1_then_the_temperature():
    logits = np.log(P) + 3.0                     # unnormalised: the law does not change
    np.testing.assert_allclose(adapter.law_from_logits(logits, 1.0), P, rtol=1e-12)
    np.testing.assert_allclose(adapter.law_from_logits(logits, 1.0, 0.7),
                               [[0.625, 0.375, 0, 0]], rtol=1e-12)
    sq = P ** 2 / (P ** 2).sum()
    np.testing.assert_allclose(adapter.law_from_logits(logits, 0.5), sq, rtol=1e-12)
    # the filter sees the temperature-1 law: at temperature 2 top-p 0.7 still keeps two
    flat = np.sqrt(P[0, :2]) / np.sqrt(P[0, :2]).sum()
    np.testing.assert_allclose(adapter.law_from_logits(logits, 2.0, 0.7)[0, :2], flat,
                               rtol=1e-12)
    with pytest.raises(ValueError, match=r"^temperature: must be > 0"):
        adapter.law_from_logits(logits, 0.0)
    with pytest.raises(ValueError, match=r"^logits: must be finite"):
        adapter.law_from_logits(np.array([[0.0, np.nan]]), 1.0)


def test_disagreement_is_the_largest_tv_and_difference():
    a = [np.array([[0.5, 0.5], [1.0, 0.0]]), np.array([[0.2, 0.8]])]
    b = [np.array([[0.4, 0.6], [1.0, 0.0]]), np.array([[0.2, 0.8]])]
    d = adapter.disagreement(a, b)
    assert d["positions"] == 3 and d["max_tv"] == pytest.approx(0.1)
    assert d["max_abs"] == pytest.approx(0.1) and d["median_tv"] == 0.0
    with pytest.raises(ValueError, match=r"^e_laws\[1\]: must have the shape of p_laws\[1\]"):
        adapter.disagreement(a, [b[0], np.ones((2, 2))])
    with pytest.raises(ValueError, match=r"^p_laws, e_laws: need one entry per response"):
        adapter.disagreement(a, b[:1])


def test_the_rule_cites_the_pinned_sources():
    where = " ".join(w for _, _, w in adapter.RULE)
    assert "generate.py:633-644 (test at 635)" in where and "sample_utils.py" in where


@pytest.fixture(scope="module")
def engine_python():
    if not py_engines.ready("mlx"):
        pytest.skip("no environment for mlx-lm: run `python tools/py_engines.py mlx` "
                    "(about 480 MB, under 2 minutes once per machine)")
    return py_engines.python_of("mlx")


@pytest.mark.slow
def test_the_adapter_on_small_inputs(engine_python):
    proc = subprocess.run([str(engine_python), "-m", "specdec.conformance.adapters.mlxlm",
                           "--requests", "12", "--max-tokens", "24",
                           "--rows", "plain_t1,spec_t1_k3,spec_t07_k2",
                           "--control-requests", "12"],
                          capture_output=True, text=True, env=py_engines.environ(),
                          timeout=300, cwd=ROOT)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["version"] == adapter.PINNED and out["mlx_cpu_version"] == adapter.MLX_PINNED
    assert set(out["rows"]) == {"plain_t1", "spec_t1_k3", "spec_t07_k2"}
    for r in out["rows"].values():
        assert r["tokens"] == 12 * 24 and r["passed"], r["message"]
        assert r["disagreement"]["max_tv"] < 1e-4
    assert out["rows"]["spec_t1_k3"]["from_draft_fraction"] > 0
    assert out["rows"]["plain_t1"]["from_draft_fraction"] == 0
    assert not out["controls"]["draft_law"]["passed"]
    assert 0.2 < out["models"]["target_draft_tv_median"] < 0.5
