"""EAGLE's tree verification (eagle-llm) under the kit.

The first tests need nothing but this project: the environment entry, the adapter's
reading of EAGLE's outputs with its errors for a missing engine, a wrong version and
malformed output. The last ones (marked slow) run the adapter in the engine's environment
(``python tools/py_engines.py eagle`` builds it, once per machine) and skip, saying so,
where it is absent; each samples for a few seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specdec.conformance.adapters import eagle as adapter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import py_engines  # noqa: E402


def test_the_entry_is_pinned_at_the_adapter_version():
    eng = py_engines.engine("eagle", adapter.PINNED)
    assert "eagle-llm==1.2.1" in eng.requirements and py_engines.TORCH in eng.requirements
    assert eng.pip_args == ("--no-deps",)
    with pytest.raises(ValueError, match=r"^version: engine 'eagle' is pinned at 1\.2\.1"):
        py_engines.engine("eagle", "1.1.0")


def test_a_missing_engine_is_named():
    try:
        import eagle  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("eagle is importable in this interpreter")
    with pytest.raises(ImportError, match=r"^eagle: eagle-llm is not installed .*py_engines\.py eagle"):
        adapter.version()


def test_a_wrong_version_is_named(monkeypatch):
    monkeypatch.setattr(adapter, "version", lambda: "1.1.0")
    with pytest.raises(RuntimeError, match=r"written against eagle-llm 1\.2\.1 .* but 1\.1\.0"):
        adapter.check_version()


CAND = np.array([[0, 2, 1], [0, 2, 3], [0, 1, -1]])


def test_read_cycle_emits_the_accepted_path_then_the_drawn_token():
    assert adapter.read_cycle(1, 2, CAND, 0, 4, None) == ((2, 3, 0), 2)
    assert adapter.read_cycle(2, 1, CAND, 3, 4, None) == ((1, 3), 1)
    assert adapter.read_cycle(0, 0, CAND, 1, 4, None) == ((1,), 0)
    # an accepted end-of-sequence ends the cycle; it counts as accepted
    assert adapter.read_cycle(1, 2, CAND, 0, 4, 2) == ((2,), 1)


@pytest.mark.parametrize("args, message", [
    ((3, 1, CAND, 0, 4, None), r"best_candidate 3 outside the 3 tree paths"),
    ((0, 3, CAND, 0, 4, None), r"accept_length 3 outside 0\.\.2"),
    ((2, 2, CAND, 0, 4, None), r"accepted path \[1, -1\] has a token outside 0\.\.3"),
    ((0, 1, CAND, 7, 4, None), r"drawn token 7 outside 0\.\.3"),
])
def test_malformed_output_is_named(args, message):
    with pytest.raises(ValueError, match="^output: " + message):
        adapter.read_cycle(*args)


def test_bad_options_are_named():
    with pytest.raises(ValueError, match=r"^temperature: must be > 0"):
        adapter.EagleTreeSampler(temperature=0)
    with pytest.raises(ValueError, match=r"^control: must be one of original_q"):
        adapter.EagleTreeSampler(control="nope")
    with pytest.raises(ValueError, match=r"^top_widths: EAGLE's buffers hold at most 10"):
        adapter.EagleTreeSampler(top_widths=(11,))


def test_the_full_tree_is_every_path_of_the_widths():
    assert adapter._full_tree((2, 1)) == [[0], [1], [0, 0], [1, 0]]


# --------------------------------------------------------------------------------------
# In the engine's environment
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine_python():
    if not py_engines.ready("eagle"):
        pytest.skip("no environment for eagle-llm: run `python tools/py_engines.py eagle` "
                    "(about 1 GB, minutes once per machine)")
    return py_engines.python_of("eagle")


def _adapter(python, *args, timeout=300):
    proc = subprocess.run([str(python), "-m", "specdec.conformance.adapters.eagle", *args],
                          capture_output=True, text=True, env=py_engines.environ(),
                          timeout=timeout, cwd=ROOT)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.slow
def test_temperature_1_passes_and_its_control_fails(engine_python):
    rc, out = _adapter(engine_python, "--seed", "0", "--trials", "3000", "--control-trials",
                       "3000", "--cases", "rules_far_g3", "--settings", "temperature_1")
    t1 = out["settings"]["temperature_1"]
    assert out["version"] == "1.2.1"
    assert t1["as_shipped"]["passed"], t1["as_shipped"]
    assert t1["controls"]["original_q"]["failed"], t1["controls"]["original_q"]


@pytest.mark.slow
def test_the_tempered_reproduction_fails(engine_python):
    # reports/eagle-bonus-temperature.md: the bonus token from the untempered target
    rc, out = _adapter(engine_python, "--setting", "tempered_0.6", "--trials", "1500",
                       "--cases", "block_g1")
    rep = out["as_shipped"]
    assert rc == 1 and not rep["passed"] and rep["accounting_ok"], rep
    (case,) = rep["cases"]
    lo, hi = case["tv_interval"]
    assert lo <= case["predicted_tv"] <= hi and lo > 0

def test_the_engines_not_run_say_why_with_evidence():
    data = json.loads((ROOT / "specdec" / "conformance" / "adapters" / "unavailable.json").read_text())
    names = {row["engine"] for row in data["engines"]}
    # every engine has an adapter now (adapters/openvino.py, ortgenai.py, mlxlm.py); an
    # engine added here later must say why it is not run, with evidence
    assert names == set()
    for row in data["engines"]:
        assert row["status"] == "not run" and row["version"]
        assert row["reason"] and ".whl" in row["evidence"]


def test_the_rule_as_read_is_exact_at_temperature_1_only():
    from specdec.conformance import block_cases

    by_name = {c.name: c for c in block_cases()}
    assert adapter.predicted_tv(by_name["block_g2"], 1.0) == pytest.approx(0.0, abs=1e-12)
    assert adapter.predicted_tv(by_name["block_g1"], 0.6) == pytest.approx(0.13704, abs=1e-5)
    with pytest.raises(ValueError, match=r"^case: 'block_eos_g3' has an end-of-sequence"):
        adapter.predicted_tv(by_name["block_eos_g3"], 0.6)
    with pytest.raises(ValueError, match=r"^temperature: must be > 0"):
        adapter.predicted_tv(by_name["block_g1"], 0.0)
