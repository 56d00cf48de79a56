"""The conformance matrix's rows (specdec.conformance.matrix) from each adapter's summary
shape, and its job runner on real subprocesses (no engine needed)."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

from specdec.conformance import matrix as mx

ROOT = Path(__file__).resolve().parents[1]


def _case(name, trials, tv, low, high, det, passed=True, shape="interval"):
    c = {"trials": trials, "passed": passed, "tv": tv, "tv_detectable": det,
         "causes": [] if passed else [f"Exactness: {name} fails"]}
    if shape == "interval":
        c.update(case=name, tv_interval=[low, high])
    else:
        c.update(name=name, tv_low=low, tv_high=high)
    return c


def _battery(passed, cases, seconds=3.0):
    return {"passed": passed, "cases": cases, "seconds": seconds,
            "max_detectable_tv": max(c["tv_detectable"] for c in cases)}


def test_battery_row_takes_the_worst_case_and_the_largest_detectable_tv():
    b = _battery(False, [_case("a", 100, 0.05, 0.0, 0.09, 0.08),
                         _case("b", 300, 0.40, 0.31, 0.49, 0.05, passed=False)])
    row = mx.battery_row(b, implementation="x", version="1", interface="f", setting="s",
                         rule="r")
    assert (row.verdict, row.tv, row.tv_low, row.tv_high) == ("FAIL", 0.40, 0.31, 0.49)
    assert row.detectable_tv == 0.08 and row.trials == 400 and row.seconds == 3.0
    assert row.note == "Exactness: b fails"
    ok = mx.battery_row(_battery(True, [_case("a", 10, 0.01, 0.0, 0.02, 0.03, shape="hf")]),
                        implementation="x", version="1", interface="f", setting="s", rule="r")
    assert ok.verdict == "PASS" and ok.tv_high == 0.02 and ok.note == ""
    with pytest.raises(ValueError, match=r"battery\['passed'\]: must be a bool"):
        mx.battery_row(dict(b, passed="false"), implementation="x", version="1", interface="f",
                       setting="s", rule="r")
    with pytest.raises(ValueError, match="battery: not a kit battery"):
        mx.battery_row({"passed": True}, implementation="x", version="1", interface="f",
                       setting="s", rule="r")
    assert not row.end_to_end and row.resolution_wanted == 0.01
    assert row.trials_for() == 400 * 64 and ok.trials_for() == 10 * 9
    e2e = mx.MatrixRow("x", "1", "generate, assistant", "s", "r", "PASS", detectable_tv=0.02,
                       trials=50)
    assert e2e.end_to_end and e2e.trials_for() == 50 and e2e.trials_for(0.01) == 200
    with pytest.raises(ValueError, match="verdict: must be one of"):
        mx.MatrixRow("x", "1", "f", "s", "r", "OK")


def test_a_failing_row_names_the_cause_of_its_worst_case():
    """The note is the worst case's cause, so that its numbers are the row's TV (Table C.3
    read "0.776" in its TV column beside a note quoting another case's 0.533)."""
    b = _battery(False, [_case("mild", 100, 0.50, 0.35, 0.71, 0.08, passed=False),
                         _case("worst", 300, 0.77, 0.59, 0.96, 0.05, passed=False)])
    row = mx.battery_row(b, implementation="x", version="1", interface="f", setting="s",
                         rule="r")
    assert row.tv == 0.77 and row.note == "Exactness: worst fails"


def test_rows_of_every_summary_shape():
    shipped = _battery(False, [_case("batch_temperatures", 2000, 0.98, 0.93, 1.0, 0.08, False)])
    fixed = _battery(True, [_case("batch_temperatures", 20000, 0.004, 0.0, 0.02, 0.03)])
    fixed["controls"] = {"recovered_from_target": _battery(
        False, [_case("batch_temperatures", 5000, 0.3, 0.25, 0.35, 0.06, False)])}
    vllm = {"version": "0.32.0", "settings": {"draft_probs": {
        "draft_probs": True, "as_shipped": shipped, "fixed": fixed}}}
    rows = mx.engine_rows("vllm", vllm, rule="accept while p/q >= u", report="reports/v.md")
    assert [r.verdict for r in rows] == ["FAIL", "PASS"]
    assert "reports/v.md" in rows[0].note and "as shipped" in rows[0].setting
    assert rows[1].control == "recovered_from_target: FAIL, as it must (TV up to 0.30)"

    eagle = {"version": "1.2.1", "top_widths": [2], "settings": {
        "temperature_1": {"temperature": 1.0, "as_shipped": fixed,
                          "controls": fixed["controls"]},
        "tempered_0.6": {"temperature": 0.6, "as_shipped": shipped}}}
    rows = mx.engine_rows("eagle", eagle, rule="tree", report="reports/e.md")
    assert [r.verdict for r in rows] == ["PASS", "FAIL"]
    assert "FAIL, as it must" in rows[0].control and "reports/e.md" in rows[1].note
    assert rows[1].setting == "temperature 0.6, tree widths 2"

    medusa = {"version": "0.1", "temperature": 1.0, "seconds": 4.0, "cases": [
        {"case": "block_g1", "trials": 900, "tv": 0.9, "tv_interval": [0.7, 1.0],
         "exact_typical": 0.93}]}
    (row,) = mx.engine_rows("medusa", medusa, rule="typical")
    assert row.verdict == "LOSSY" and row.tv_low == 0.7 and "0.930" in row.note

    spec = {"setting": {"temperature": 1.0, "gamma": 3, "parallel": 1}, "verdict": "FAIL",
            "rule": {"source": "x", "draft": "arg-max"}, "versions": {"llama_cpp_python": "0.3.36"},
            "seconds": {"total": 12.5},
            "checks": {"exactness": {"passed": False, "tokens": 800, "detectable_tv": 0.05,
                                     "extra": {"rule_vs_target_tv": 0.45}},
                       "control_temperature": {"passed": False}}}
    (row,) = mx.engine_rows("llama_speculative", spec, report="reports/l.md")
    assert (row.verdict, row.tv, row.trials, row.seconds) == ("FAIL", 0.45, 800, 12.5)
    assert "0.45 (reports/l.md)" in row.note and "FAIL, as it must" in row.control

    hf = {"5.24.0": {"token": dict(fixed, available=True, wall_seconds=9.0),
                     "token:patched": dict(fixed["controls"]["recovered_from_target"],
                                           available=True),
                     "lookup": {"available": False}}}
    rows = mx.hf_rows(hf, {"token": "token step", "lookup": "prompt lookup"}, rule="Alg. 1")
    assert [r.verdict for r in rows] == ["PASS", "NOT RUN"] and rows[0].seconds == 9.0
    assert rows[0].control.startswith("patched: FAIL")

    data = json.loads((ROOT / "specdec/conformance/adapters/unavailable.json").read_text())
    rows = mx.unavailable_rows(data)
    assert len(rows) == len(data["engines"]) and all(r.verdict == "NOT RUN" for r in rows)
    assert all("evidence" in r.note for r in rows)


def _ortgenai_summary(spec_passed=True, with_control=True):
    def row(kind, passed, tokens, **kw):
        return {"row": kind, "passed": passed, "pvalue": 0.5 if passed else 0.0,
                "detectable_tv": 0.0204, "tokens": tokens, "seconds": 12.5, **kw}

    rows = [row("speculative", spec_passed, 43_000, acceptance_rate=0.68),
            row("reference", True, 42_900)]
    if with_control:
        rows[1:1] = [row("control", False, 43_000), row("control_draft_law", False, 43_000)]
    return {"engine": "onnxruntime-genai", "version": "0.18.0",
            "settings": [{"name": "close_T1_K4", "tolerance": 1.7e-6, "rows": rows,
                          "setting": {"draft": "close", "temperature": 1.0, "top_k": 96,
                                      "top_p": 1.0, "k": 4}}]}


def test_ortgenai_rows_give_the_speculative_and_the_reference_row_per_setting():
    rows = mx.engine_rows("ortgenai", _ortgenai_summary(), rule="min(1, p/q), residual, bonus")
    spec, ref = rows
    assert (spec.verdict, ref.verdict) == ("PASS", "PASS")
    assert spec.setting == ("close draft, temperature 1, top-k 96, top-p 1, γ = 4; draft "
                            "model (model.draft)")
    assert ref.setting.endswith("; no draft (reference)") and ref.rule.startswith("plain")
    assert (spec.trials, spec.detectable_tv, spec.seconds) == (43_000, 0.0204, 12.5)
    assert spec.control == ("temperature 1, no truncation: FAIL, as it must; the draft's law: "
                            "FAIL, as it must") and ref.control == spec.control
    assert spec.note == "acceptance 0.68; tolerance 1.7 × 10⁻⁶ (engine logits vs torch)"
    assert spec.end_to_end and spec.resolution_wanted == 0.03
    bad = mx.engine_rows("ortgenai", _ortgenai_summary(spec_passed=False, with_control=False),
                           rule="r", report="reports/onnxruntime-genai-x.md")
    assert bad[0].verdict == "FAIL" and bad[0].note.startswith("reports/onnxruntime-genai-x.md; ")
    assert bad[0].control == "-"
    for key in ("passed",):
        broken = _ortgenai_summary()
        broken["settings"][0]["rows"][0][key] = "no"
        with pytest.raises(ValueError, match=r"\['passed'\]: must be a bool"):
            mx.engine_rows("ortgenai", broken, rule="r")
    idle = _ortgenai_summary()
    idle["settings"][0]["rows"][0]["draft_tokens_proposed"] = 0
    assert mx.engine_rows("ortgenai", idle, rule="r")[0].verdict == "NOT RUN"
    twice = _ortgenai_summary()
    twice["settings"][0]["rows"].append(dict(twice["settings"][0]["rows"][0]))
    with pytest.raises(ValueError, match="has two 'speculative' rows"):
        mx.engine_rows("ortgenai", twice, rule="r")
    with pytest.raises(ValueError, match="empty"):
        mx.engine_rows("ortgenai", {"version": "0", "settings": []}, rule="r")
    from specdec.conformance.adapters import ortgenai

    with_caller = _ortgenai_summary()
    with_caller["caller_drafts"] = {**ortgenai.CALLER_DRAFTS,
                                    "probe": {"set_draft_tokens": "This engine does not "
                                              "support speculative draft verification."}}
    *_, nr = mx.engine_rows("ortgenai", with_caller, rule="r")
    assert nr.verdict == "NOT RUN" and nr.interface.startswith("og.Engine + Request.set_draft")
    # the reason in one sentence; the four errors stay in the adapter, named (a table cell
    # once pasted all of them, 116 words)
    assert "(4 attempts and their errors: CALLER_DRAFTS in specdec/conformance/adapters/" \
           "ortgenai.py)" in nr.note and "CUDA or WebGPU" in nr.note
    assert len(nr.note.split()) < 60
    assert nr.note.endswith("this run's probe: This engine does not support speculative draft "
                            "verification.")
    broken = _ortgenai_summary()
    broken["settings"][0]["rows"] = broken["settings"][0]["rows"][:1]
    with pytest.raises(ValueError, match=r"^summary: setting 'close_T1_K4' has no reference row"):
        mx.engine_rows("ortgenai", broken, rule="r")


def _job(name, code, timeout=30.0, ok=(0, 1)):
    return mx.Job(name, Path(sys.executable), ("-c", code), {"PATH": "/usr/bin:/bin"},
                  ROOT, timeout, ok)


def test_run_jobs_in_order_with_verdict_exit_codes_and_failures():
    out = mx.run_jobs([_job("a", "import json; print(json.dumps({'x': 1}))"),
                       _job("b", "import json, sys; print(json.dumps({'x': 2})); sys.exit(1)"),
                       _job("c", "print('{\"x\": 3}')")], parallel=2,
                      progress=(lines := []).append)
    assert list(out) == ["a", "b", "c"] and [o["summary"]["x"] for o in out.values()] == [1, 2, 3]
    assert [re.sub(r"\d+ s", "N s", x).split(" done")[1] for x in lines] == \
        [" in N s (1 of 3 jobs)", " in N s (2 of 3 jobs)", " in N s (3 of 3 jobs)"]
    assert sorted(x.split(" done")[0] for x in lines) == ["a", "b", "c"]
    assert out["b"]["returncode"] == 1 and all(o["seconds"] > 0 for o in out.values())
    with pytest.raises(mx.JobFailed, match="bad: exit status 2: boom"):
        mx.run_jobs([_job("bad", "import sys; sys.stderr.write('boom'); sys.exit(2)")])
    with pytest.raises(mx.JobFailed, match="text: exit status 0, the output is not JSON"):
        mx.run_jobs([_job("text", "print('hello')")])
    with pytest.raises(mx.JobFailed, match="slow: no result within 1 s .killed.; the end "
                                           "of its stderr: started"):
        mx.run_jobs([_job("slow", "import sys, time; sys.stderr.write('started'); "
                                  "sys.stderr.flush(); time.sleep(30)", timeout=1.0)])
    missing = mx.Job("gone", ROOT / "no-such-env/bin/python", ("-c", "1"), {}, ROOT)
    with pytest.raises(mx.JobFailed, match="gone: cannot start .*no-such-env/bin/python"):
        mx.run_jobs([missing])
    with pytest.raises(ValueError, match="parallel: must be an integer >= 1"):
        mx.run_jobs([], parallel=0)
    with pytest.raises(ValueError, match="jobs: names must be unique"):
        mx.run_jobs([_job("a", "print(1)"), _job("a", "print(2)")])


def test_run_jobs_starts_the_next_when_any_ends_and_takes_large_output():
    import time

    big = "import json; print(json.dumps({'x': 'y' * 300_000}))"     # beyond a pipe's buffer
    t0 = time.perf_counter()
    out = mx.run_jobs([_job("slow", "import time, json; time.sleep(2); print(json.dumps(1))"),
                       _job("big", big), _job("fast", "print(2)"), _job("last", "print(3)")],
                      parallel=2)
    assert list(out) == ["slow", "big", "fast", "last"] and out["fast"]["summary"] == 2
    assert len(out["big"]["summary"]["x"]) == 300_000
    assert out["last"]["seconds"] < 1.5 and time.perf_counter() - t0 < 4


def test_matrix_row_refuses_impossible_values():
    base = dict(implementation="x", version="1", interface="function", setting="s",
                rule="r", verdict="PASS")
    for field, value, rule in [("tv", 1.5, "tv: must be a TV in .0, 1."),
                               ("detectable_tv", float("nan"), "detectable_tv: must be a TV"),
                               ("trials", -3, "trials: must be a non-negative integer"),
                               ("trials", 2.5, "trials: must be a non-negative integer"),
                               ("seconds", -1.0, "seconds: must be a non-negative number")]:
        with pytest.raises(ValueError, match=rule):
            mx.MatrixRow(**base, **{field: value})
    with pytest.raises(ValueError, match="tv_low, tv_high: the interval is reversed"):
        mx.MatrixRow(**base, tv=0.1, tv_low=0.2, tv_high=0.1)
    row = mx.MatrixRow(**base, detectable_tv=0.02, trials=1000)
    assert row.trials_for(0.01) == 4000 and row.trials_for() == 4000
    for bad in (0.0, -0.01, 2.0, True, "0.01"):
        with pytest.raises(ValueError, match="resolution: must be a TV in .0, 1."):
            row.trials_for(bad)


def test_battery_row_refuses_a_nan_tv():
    battery = {"passed": True, "cases": [
        {"tv": 0.01, "tv_interval": [0.0, 0.02], "tv_detectable": 0.02, "trials": 10},
        {"tv": float("nan"), "tv_interval": [0.0, 0.5], "tv_detectable": 0.02, "trials": 10}]}
    with pytest.raises(ValueError, match=r"battery\['cases'\]\[1\]: a TV or its interval is NaN"):
        mx.battery_row(battery, implementation="x", version="1", interface="f", setting="s",
                       rule="r")


def _ov_setting(name, gamma, passed, control=False, means=None):
    return {"setting": {"name": name, "temperature": 1.0, "top_k": 0, "gamma": gamma},
            "control": control, "passed": passed, "seconds": 4.0,
            "check": {"tokens": 2000, "detectable_tv": 0.05,
                      "means": means or {"target": 0.5}}}


def test_openvino_rows_one_per_setting_the_controls_in_the_column_and_the_aborts():
    summary = {"version": "2026.4.1.0", "settings": {
        "reference": _ov_setting("reference", None, True),
        "t1_g2": _ov_setting("t1_g2", 2, False, means={"target": 0.672}),
        "control": _ov_setting("control", 3, False, control=True)},
        "prefix_caching": {"requests": 20, "errors": 14, "first_error": "Check 'x' failed",
                           "prefix_caching": "pipeline default", "seconds": 9.0}}
    rows = mx.engine_rows("openvino", summary, rule="black box", report="reports/o.md")
    assert [r.verdict for r in rows] == ["PASS", "FAIL", "ABORTS"]
    ref, spec, aborts = rows
    assert ref.control == "control: FAIL, as it must" and "no draft" in ref.setting
    assert ref.trials == 2000
    assert spec.control == "control: FAIL, as it must" and "0.672" in spec.note
    assert "num_assistant_tokens 2" in spec.setting and "reports/o.md" in spec.note
    assert aborts.trials == 20 and aborts.note.startswith("14 of 20 requests raised")
    assert aborts.note.endswith("(reports/openvino-genai-prefix-caching-abort.md)")  # its own draft
    summary["prefix_caching"] = {"requests": 20, "errors": 0, "first_error": None,
                                 "prefix_caching": False, "seconds": 1.0}
    assert len(mx.engine_rows("openvino", summary, rule="r")) == 2


def _mlx_row(label, k, passed=True, pvalue=0.8):
    return {"setting": {"temperature": 1.0, "top_p": 1.0, "num_draft_tokens": k},
            "label": label, "passed": passed, "pvalue": pvalue, "detectable_tv": 0.0288,
            "tokens": 19200, "seconds": 190.5, "tokens_per_second": 101.0,
            "from_draft_fraction": 0.4, "disagreement": {"max_tv": 3e-7}}


def test_mlx_rows_one_per_setting_with_the_controls_on_every_row():
    summary = {"version": "0.32.2", "mlx_cpu_version": "0.32.4",
               "rows": {"plain_t1": _mlx_row("temperature 1, no draft", 0),
                        "spec_t1_k3": _mlx_row("temperature 1, num_draft_tokens 3", 3,
                                               passed=False, pvalue=1e-9)},
               "controls": {"temperature_mismatch": {"passed": False, "pvalue": 2.5e-12},
                            "draft_law": {"passed": True, "pvalue": 0.5}}}
    plain, spec = mx.engine_rows("mlx", summary, rule="matching")
    assert (plain.implementation, plain.version) == ("mlx-lm", "0.32.2 (mlx-cpu 0.32.4)")
    assert (plain.verdict, plain.rule) == ("PASS", "plain sampling")
    assert plain.control == spec.control        # the reference row's pass needs them too
    assert plain.interface == ("stream_generate (no draft), end to end; every emitted token "
                               "tested")
    assert plain.note == ("101 tokens/s; numerical disagreement (per-token TV) up to 3.0 × 10⁻⁷, "
                          "the tolerance")
    assert (spec.verdict, spec.rule, spec.trials, spec.seconds, spec.detectable_tv) == (
        "FAIL", "matching", 19200, 190.5, 0.0288)
    assert spec.setting == "temperature 1, num_draft_tokens 3" and spec.end_to_end
    assert spec.interface.startswith("stream_generate(draft_model=...), end to end")
    assert spec.control == ("temperature-0.7 tokens against the law at 1: FAIL, as it must "
                            "(p = 2.5 × 10⁻¹²); the draft model's own decoding against the "
                            "target's law: pass: the control missed (p = 0.5)")
    assert "40% of tokens from accepted drafts" in spec.note
    assert spec.resolution_wanted == 0.03 and spec.trials_for() == 19200
    summary["controls"]["draft_law"] = {"passed": False, "pvalue": 0.0}
    assert mx.engine_rows("mlx", summary, rule="matching")[1].control.endswith(
        "target's law: FAIL, as it must (p < 10⁻³⁰⁰)")
    with pytest.raises(KeyError):
        mx.engine_rows("mlx", {"version": "0.32.2"}, rule="matching")


def test_openvino_rows_refuse_a_string_verdict_and_mark_undrafted_rows():
    summary = {"version": "2026.4.1.0", "settings": {
        "reference": _ov_setting("reference", None, "False")}}
    with pytest.raises(ValueError, match=r"reference\['passed'\]: must be a bool"):
        mx.engine_rows("openvino", summary, rule="r")
    with pytest.raises(ValueError, match="settings'\\]: empty"):
        mx.engine_rows("openvino", {"version": "x", "settings": {}}, rule="r")
    never = _ov_setting("t1_g2", 2, True)
    never["undrafted_responses"] = 12
    never["check"]["requests"] = 12
    some = _ov_setting("t1_g4", 4, True)
    some["undrafted_responses"] = 3
    some["check"]["requests"] = 12
    rows = mx.engine_rows("openvino", {"version": "x", "settings": {"t1_g2": never, "t1_g4": some}},
                            rule="r")
    assert [r.verdict for r in rows] == ["NOT RUN", "PASS"]
    assert rows[0].note.startswith("12 of 12 responses were decoded without a draft token")
    assert rows[1].note.startswith("3 of 12 responses")


def _row(impl, verdict, version="1", interface="f", setting="s", tv=None, low=None, high=None,
         det=None):
    return mx.MatrixRow(implementation=impl, version=version, interface=interface,
                        setting=setting, rule="r", verdict=verdict, tv=tv, tv_low=low,
                        tv_high=high, detectable_tv=det, trials=None if det is None else 100)


def test_the_first_table_keeps_the_kinds_of_failure_apart():
    """A rule that is not exact, a build defect with its fixed copy, a length bug and a
    lossy rule each read differently; passes give their detectable TV."""
    sc = {s.engine: s for s in mx.SCOPES}
    hf = [_row("transformers", "PASS", "4.40.2", "token step", det=0.15),
          _row("transformers", "FAIL", "4.44.2", "generate, assistant", tv=0.5, low=0.35,
               high=0.7, det=0.28),
          _row("transformers", "FAIL", "5.0.0", "generate, prompt lookup", tv=0.3, low=0.1,
               high=0.5, det=0.58)]
    assert mx.exact_text(hf, sc["transformers"]) == (
        "not exact at 4.44.2 (the assistant drafts greedily, its law taken as sampled): TV at "
        "least 0.35; length bug, not a law bug at 5.0.0 (prompt lookup returns more than "
        "`max_new_tokens`): TV at least 0.10; elsewhere exact within TV 0.15")
    # passes resolved very unequally name both ends, so the weakest does not stand alone
    weak = [_row("transformers", "PASS", "5.18.0", "token step", det=0.15),
            _row("transformers", "PASS", "5.18.0", "generate, other tokenizer", det=0.56),
            _row("transformers", "PASS", "5.18.0", "generate, prompt lookup", det=0.58)]
    assert mx.exact_text(weak, sc["transformers"]) == (
        "no error seen: within TV 0.15 for token step, only within 0.58 for generate, "
        "prompt lookup (100 trials)")
    assert mx.exact_text(weak[1:], sc["transformers"]) == (
        "exact within TV 0.58 (0.56 in its best-tested setting)")
    vllm = [_row("vLLM V1 rejection sampler", "FAIL", setting="x; as shipped", tv=0.98, low=0.93,
                 high=1.0, det=0.2),
            _row("vLLM V1 rejection sampler", "PASS", setting="x; one function fixed", tv=0.0,
                 low=0.0, high=0.01, det=0.01)]
    assert mx.exact_text(vllm, sc["vLLM rejection sampler"]) == (
        "build defect (uninitialised per-token settings on CPU): TV at least 0.93; exact "
        "within TV 0.010 once one function is fixed")
    # settings that abort under the same defect say so, with the server's status
    refused = "requests refused, no token tested: HTTP 400: Out of range float values"
    served = [_row("vLLM OpenAI server", "FAIL", tv=0.6, low=0.5, high=0.7, det=0.05),
              *(dataclasses.replace(_row(f"vLLM OpenAI server + {d}", "ABORTS"), note=refused)
                for d in ("n-gram", "draft model"))]
    assert mx.exact_text(served, sc["vLLM OpenAI server"]) == (
        "build defect (the CPU shim of the in-process row): TV at least 0.50; 2 of these 3 "
        "settings abort (HTTP 400, no token tested)")
    medusa = [_row("Medusa typical acceptance", "LOSSY", tv=t, low=t - 0.1, high=1.0)
              for t in (0.94, 0.99)]
    assert mx.exact_text(medusa, sc["Medusa"]) == \
        "lossy by design (not meant to be exact): TV 0.94-0.99"
    server = [_row("llama.cpp llama-server", "PASS", interface="HTTP; every emitted token "
                   "tested", det=d) for d in (0.06, 0.061)]
    assert mx.exact_text(server, sc["llama.cpp llama-server"]) == \
        "exact within TV 0.061 per token (0.060 in its best-tested setting)"
    openvino = [_row("OpenVINO GenAI LLMPipeline", "PASS", interface="every emitted token tested",
                     setting="temperature 1, no draft (reference)", det=0.028),
                _row("OpenVINO GenAI LLMPipeline + draft_model", "FAIL",
                     interface="every emitted token tested", setting="temperature 1", det=0.028)]
    assert mx.exact_text(openvino, sc["OpenVINO GenAI"]) == (
        "not exact (every sampled setting); without a draft, exact within TV 0.028 per token")
    assert mx.exact_text([_row("mlx-lm", "NOT RUN")], sc["mlx-lm"]).startswith("not run")
    with pytest.raises(ValueError, match="rows: none"):
        mx.exact_text([], sc["mlx-lm"])
    table = mx.glance(hf + vllm + medusa, mx.SCOPES)
    assert [r[0] for r in table] == ["**transformers** 4.40.2 to 5.0.0 (3 releases)",
                                     "**vLLM rejection sampler** 1", "**Medusa** 1"]
    assert all(len(r) == 6 for r in table)
    assert "`" not in "".join(r[5] for r in table)       # report names wrap in the column
