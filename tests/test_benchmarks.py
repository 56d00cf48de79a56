"""The diagnostic benchmark of chapter 8's cost model under load
(benchmarks/cost_model_load.py): its arguments are refused by name, and a small real run
on the small target prints one line per condition with both models' errors."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "cost_model_load.py"


def _module():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("cost_model_load_for_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("argv, message", [
    (["--conditions", "idle,busy"], "must be a comma list of idle, cpu, memory"),
    (["--conditions", ""], "must be a comma list"),
    (["--windows", "0"], "must be an integer >= 1"),
    (["--gamma", "-1"], "must be an integer >= 1"),
    (["--target", "draft"], "invalid choice: 'draft'"),
])
def test_bad_arguments_are_refused_by_name(argv, message, capsys):
    with pytest.raises(SystemExit):
        _module().parse(argv)
    assert message in capsys.readouterr().err


def test_defaults_are_the_memory_bound_run():
    args = _module().parse([])
    assert (args.target, args.gamma, args.tokens) == ("target_large", 4, 32)
    assert args.conditions == ["idle", "cpu", "memory"]


@pytest.mark.slow
def test_a_small_real_run_prints_both_models_per_condition():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--target", "target", "--gamma", "2",
                           "--prompts", "1", "--tokens", "16", "--windows", "2",
                           "--conditions", "idle,cpu"], capture_output=True, text=True,
                          cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [l for l in proc.stdout.splitlines() if "measured" in l]
    assert [l.split()[0] for l in lines] == ["idle", "cpu"]
    for line in lines:
        measured = float(re.search(r"measured ([\d.]+)x", line).group(1))
        model = float(re.search(r"model from CPU time ([\d.]+)x \(([-+][\d.]+)%", line).group(1))
        error = float(re.search(r"model from CPU time [\d.]+x \(([-+][\d.]+)%", line).group(1))
        assert measured > 0 and model > 0
        assert abs(error - 100 * (model / measured - 1)) < 0.5   # printed values rounded
    leftover = subprocess.run(["pgrep", "-f", "while True: pass"], capture_output=True)
    assert leftover.returncode == 1, leftover.stdout      # the neighbours were stopped
