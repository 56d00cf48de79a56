"""The diagnostic benchmark of chapter 8's cost model under load
(benchmarks/cost_model_load.py): its arguments are refused by name, and a small real run
on the small target prints one line per condition with both models' errors."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
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
    (["--windows", "1.5"], "must be an integer >= 1 (got '1.5')"),
    (["--gamma", "60"], "--gamma: must be at most 59"),
    (["--prompts", "1000"], "--prompts: must be at most"),
])
def test_bad_arguments_are_refused_by_name(argv, message, capsys):
    with pytest.raises(SystemExit):
        _module().parse(argv)
    assert message in capsys.readouterr().err


def test_defaults_are_the_memory_bound_run():
    args = _module().parse([])
    assert (args.target, args.gamma, args.tokens) == ("target_large", 4, 32)
    assert args.conditions == ["idle", "cpu", "memory"]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


SMALL = ["--target", "target", "--gamma", "2", "--prompts", "1", "--tokens", "16",
         "--windows", "2"]


@pytest.mark.slow
def test_a_small_real_run_prints_both_models_per_condition():
    proc = subprocess.run([sys.executable, str(SCRIPT), *SMALL, "--conditions", "idle,cpu"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [l for l in proc.stdout.splitlines() if "measured" in l]
    assert [l.split()[0] for l in lines] == ["idle", "cpu"]
    assert "(0 neighbours," in lines[0] and "(2 neighbours," in lines[1]
    for line in lines:
        measured = float(re.search(r"measured ([\d.]+)x", line).group(1))
        model = float(re.search(r"model from CPU time ([\d.]+)x", line).group(1))
        error = float(re.search(r"model from CPU time [\d.]+x \(([-+][\d.]+)%", line).group(1))
        assert measured > 0 and model > 0
        # the printed values are rounded (speedups to 0.001, the error to 0.1 point): the
        # error recomputed from them is off by at most what that rounding allows, which
        # grows as the measured speedup shrinks (0.64 points at a loaded run's 0.15x)
        bound = 100 * 0.0005 * (1 / measured + model / measured ** 2) + 0.05
        assert abs(error - 100 * (model / measured - 1)) <= bound + 1e-9
    pids = [int(p) for p in re.search(r"cpu: neighbour PIDs ([\d, ]+)", proc.stdout)
            .group(1).split(", ")]
    assert len(pids) == 2 and all(_gone(p) for p in pids)    # stopped by PID


@pytest.mark.slow
def test_sigterm_mid_run_leaves_no_neighbour_and_no_server():
    proc = subprocess.Popen([sys.executable, str(SCRIPT), *SMALL, "--prompts", "10",
                             "--tokens", "64", "--conditions", "cpu"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        line = ""
        deadline = time.monotonic() + 300
        while "neighbour PIDs" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, proc.stderr.read()
        pids = [int(p) for p in line.split("PIDs ")[1].split(", ")]
        servers = subprocess.run(["pgrep", "-P", str(proc.pid), "llama-server"],
                                 capture_output=True, text=True).stdout.split()
        assert len(servers) == 3, servers
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        proc.kill()
    time.sleep(0.5)
    assert all(_gone(p) for p in pids + [int(s) for s in servers])


# ------------------------------------------------------------ benchmarks/bench_rule.py
def _bench_rule():
    spec = importlib.util.spec_from_file_location("bench_rule_for_test",
                                                  REPO / "benchmarks" / "bench_rule.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_rule_says_where_the_speedup_stands_against_break_even():
    br = _bench_rule()
    assert br.verdict({"speedup": 1.31, "low": 1.22, "high": 1.4}) == \
        "1.31x (95% interval 1.22-1.40): faster than plain decoding"
    assert br.verdict({"speedup": 0.64, "low": 0.62, "high": 0.66}).endswith(
        "slower than plain decoding")
    assert br.verdict({"speedup": 1.02, "low": 0.97, "high": 1.08}).endswith(
        "not distinguishable from break-even")
    for kwargs, name in (({"gamma": 0}, "gamma"), ({"repeats": 0}, "repeats"),
                         ({"temperature": 0}, "temperature"),
                         ({"max_new_tokens": 1.5}, "max_new_tokens")):
        with pytest.raises(ValueError, match=f"^{name}: must be"):
            br.run("target", **kwargs)
    streamed = br.stream(2)
    assert [lang for lang, _ in streamed] == ["it", "en", "zh", "es"] * 2   # languages take turns


def test_bench_rule_small_real_run_pairs_every_prompt():
    br = _bench_rule()
    out = br.run("target", gamma=2, prompts_per_language=1, repeats=1, max_new_tokens=6,
                 log=lambda *_: None)
    assert out["prompts"] == 4 and out["gamma"] == 2
    s = out["speedup"]
    assert s["prompts"] == 4 and s["low"] <= s["speedup"] <= s["high"]
    assert 0 <= out["acceptance"] <= 1 and 1 <= out["tokens_per_pass"] <= 3   # E <= gamma + 1
    assert set(out["seconds"]) == {"plain", "spec"}


def test_bench_rule_runs_as_make_bench_runs_it():
    """As a script from another folder (make bench runs it so): a bad argument exits 2."""
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_rule.py"),
                           "--gamma", "0"], capture_output=True, text=True, cwd="/",
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 2, done.stderr
    assert "gamma: must be an integer >= 1 (got 0)" in done.stderr


def test_bench_rule_reports_every_draft_after_its_exactness_check(capsys, tmp_path):
    br = _bench_rule()
    out_json = tmp_path / "rule.json"
    code = br.main(["--target", "target", "--drafts", "draft,draft_distilled", "--gamma", "2",
                    "--prompts-per-language", "1", "--repeats", "1", "--max-new-tokens", "6",
                    "--resolution", "0.5", "--json", str(out_json)])
    assert code == 0
    text = capsys.readouterr().out
    heads = [l for l in text.splitlines() if l.startswith("exact rule,")]
    assert [h.split(" with ")[1].split(",")[0] for h in heads] == ["draft", "draft_distilled"]
    assert text.count("  exactness: pass") == 2 and text.count("mixed-language stream:") == 2
    import json
    saved = json.loads(out_json.read_text())
    assert [r["draft"] for r in saved] == ["draft", "draft_distilled"]
    assert all(r["exactness"]["passed"] for r in saved)
