"""Medusa's typical acceptance (medusa-llm) measured by the kit.

The first tests need nothing but this project (the environment entry, the adapter's
reading of Medusa's outputs and its errors for a missing engine, a wrong version and
malformed output). The last one (marked slow) runs the adapter in the engine's
environment (``python tools/py_engines.py medusa``) and skips, saying so, where it is
absent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specdec.conformance.adapters import medusa as adapter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import py_engines  # noqa: E402


def test_the_entry_is_pinned_at_the_adapter_version():
    eng = py_engines.engine("medusa", adapter.PINNED)
    assert "medusa-llm==0.1" in eng.requirements and py_engines.TORCH in eng.requirements
    with pytest.raises(ValueError, match=r"^version: engine 'medusa' is pinned at 0\.1 "):
        py_engines.engine("medusa", "1.0")


def test_a_missing_engine_is_named():
    try:
        import medusa  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("medusa is importable in this interpreter")
    with pytest.raises(ImportError, match=r"^medusa: medusa-llm is not installed .*py_engines\.py medusa"):
        adapter.version()


def test_a_wrong_version_is_named(monkeypatch):
    monkeypatch.setattr(adapter, "version", lambda: "1.0")
    with pytest.raises(RuntimeError, match=r"written against medusa-llm 0\.1 .* but 1\.0"):
        adapter.check_version()


CAND = np.array([[3, 1, 2]])


def test_read_cycle_emits_the_root_and_the_accepted_tokens():
    assert adapter.read_cycle(0, 0, CAND, 4, None) == ((3,), 0)
    assert adapter.read_cycle(0, 2, CAND, 4, None) == ((3, 1, 2), 2)
    assert adapter.read_cycle(0, 2, CAND, 4, 1) == ((3, 1), 1)


@pytest.mark.parametrize("args, message", [
    ((1, 0, CAND, 4, None), r"best_candidate 1 outside the 1 candidates"),
    ((0, 3, CAND, 4, None), r"accept_length 3 outside 0\.\.2"),
    ((0, 2, CAND, 3, None), r"emitted \[3, 1, 2\] has a token outside 0\.\.2"),
])
def test_malformed_output_is_named(args, message):
    with pytest.raises(ValueError, match="^output: " + message):
        adapter.read_cycle(*args)


def test_bad_options_are_named():
    with pytest.raises(ValueError, match=r"^temperature: must be > 0"):
        adapter.MedusaSampler(temperature=0)
    with pytest.raises(ValueError, match=r"^posterior_alpha: must be in \(0, 1\]"):
        adapter.MedusaSampler(posterior_alpha=2)


def test_the_library_typical_rule_is_lossy_on_the_cases():
    from specdec.conformance import block_cases

    by_name = {c.name: c for c in block_cases()}
    tvs = [adapter.exact_tv(by_name[n]) for n in adapter.CASES]
    assert all(0 < t < 1 for t in tvs)


@pytest.fixture(scope="module")
def engine_python():
    if not py_engines.ready("medusa"):
        pytest.skip("no environment for medusa-llm: run `python tools/py_engines.py medusa` "
                    "(about 1 GB, minutes once per machine)")
    return py_engines.python_of("medusa")


@pytest.mark.slow
def test_the_measurement_on_small_inputs(engine_python):
    proc = subprocess.run([str(engine_python), "-m", "specdec.conformance.adapters.medusa",
                           "--trials", "200", "--cases", "block_g2"], capture_output=True,
                          text=True, env=py_engines.environ(), timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    (row,) = out["cases"]
    lo, hi = row["tv_interval"]
    assert lo <= row["tv"] <= hi and row["tv"] > 0
    assert row["verdict"].startswith("lossy by design, TV measured ")
