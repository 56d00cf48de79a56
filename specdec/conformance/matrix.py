"""The conformance matrix: one row per implementation, version, interface and setting.

Every engine adapter (:mod:`specdec.conformance.hf` and the modules of
:mod:`specdec.conformance.adapters`) prints a JSON summary in its own shape; the adapter
reads its own summary into :class:`MatrixRow`, the one shape of a row of Appendix C's
matrix (its ``ADAPTER.rows``, reached by name through :func:`engine_rows`), with the
helpers here (:func:`battery_row`, :func:`control_text`, ...). This module also runs the
adapters' command lines, each in its engine's interpreter, a few at a time
(:func:`run_jobs`), and writes Appendix C's first table (:func:`glance` over
:data:`SCOPES`: each adapter's scope and the two engines that are not adapters). It
imports no engine.

A row's verdict is one of :data:`VERDICTS`. Its TV is the worst case's (the largest lower
bound of the interval, so that a failing row shows the error it proved); its detectable TV
is the largest over its cases of the smallest TV that case's test catches with power 0.9
(for a pass, "no error larger than this was seen").
"""

from __future__ import annotations

import json
import numbers
import re
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from specdec.conformance.report import pvalue_text

__all__ = ["VERDICTS", "MatrixRow", "Job", "JobFailed", "run_jobs", "battery_row",
           "check_passed", "control_text", "rule_line", "pertoken_control_text",
           "engine_rows", "hf_rows", "unavailable_rows", "FAILURE_KINDS", "Scope", "SCOPES",
           "scopes", "exact_text", "glance"]   # SCOPES: read when asked (__getattr__)

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
    known = [k for k, c in enumerate(cases) if c[0] is not None]
    at = max(known, key=lambda k: (cases[k][1] or 0.0, cases[k][0])) if known else None
    worst = cases[at] if at is not None else (None,) * 4
    # the worst case's own causes first, so that the note's numbers are the row's TV
    order = ([battery["cases"][at]] if at is not None else []) + list(battery["cases"])
    causes = [x for c in order for x in c.get("causes", ())]
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


def check_passed(result: Mapping, where: str) -> bool:
    """``result["passed"]``, which must be a bool (a string such as ``"False"`` would read
    as a pass)."""
    if "passed" not in result:
        raise ValueError(f"{where}: no 'passed' field (not that adapter's summary?)")
    if not isinstance(result["passed"], bool):
        raise ValueError(f"{where}['passed']: must be a bool (got {result['passed']!r})")
    return result["passed"]


def control_text(controls: Mapping, failed_key: str = "passed") -> str:
    """'name: FAIL, as it must (TV up to x)' per control battery, '-' for none."""
    parts = []
    for name, rep in controls.items():
        failed = not rep["passed"]
        tvs = [_case_interval(c)[0] for c in rep["cases"] if _case_interval(c)[0] is not None]
        size = f" (TV up to {max(tvs):.2f})" if tvs else ""
        parts.append(f"{name}: {'FAIL, as it must' if failed else 'pass: the control missed'}"
                     f"{size}")
    return "; ".join(parts) or "-"


def rule_line(rule) -> str:
    """A one-line rule from an adapter's ``rule`` (a list of step dicts or a dict)."""
    if isinstance(rule, Mapping):
        return "; ".join(f"{k}: {v}" for k, v in rule.items() if k != "source")
    return "; ".join(f"{r['step']}: {r['rule']}" for r in rule)


def pertoken_control_text(controls: Mapping, labels: Mapping[str, str] | None = None) -> str:
    """'label: FAIL, as it must (p = 1 × 10⁻¹²)' per per-token control (``p < 10⁻³⁰⁰`` for
    a p-value that underflowed to 0), '-' for none."""
    parts = []
    for name, c in controls.items():
        verdict = "pass: the control missed" if check_passed(c, name) else "FAIL, as it must"
        p = c["pvalue"]
        parts.append(f"{(labels or {}).get(name, name)}: {verdict} "
                     f"(p {'' if p == 0 else '= '}{pvalue_text(p)})")
    return "; ".join(parts) or "-"


def engine_rows(name: str, summary: Mapping, **facts) -> list[MatrixRow]:
    """The rows of engine ``name``'s summary, read by its adapter
    (``ADAPTER.rows(summary, **facts)`` of :mod:`specdec.conformance.adapters`); ``facts``
    are what the page adds (``rule``: one line for the rule; ``report``: the report draft).

    Raises
    ------
    ValueError
        If no adapter is named ``name``, or the adapter refuses the summary.
    """
    from specdec.conformance.adapters import registry

    adapters = registry()
    if name not in adapters:
        raise ValueError(f"name: no adapter is named {name!r} (known: {', '.join(adapters)})")
    return list(adapters[name].rows(summary, **facts))


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
            rows.append(battery_row(r, control=control_text(controls), **common))
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


def run_jobs(jobs: Sequence[Job], *, parallel: int = 2, poll: float = 0.1,
             progress: Callable[[str], None] | None = None) -> dict[str, dict]:
    """Run the jobs, ``parallel`` at a time in the order given; each one's JSON and seconds.

    A job starts as soon as one of the running ones ends, whichever it is. Output goes to
    temporary files, not pipes, so a job with a large summary never waits for the others.
    ``progress``, if given, is called with a line as each job ends (its name, its seconds,
    how many of the jobs are done).

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
        if progress is not None:
            progress(f"{job.name} done in {out[job.name]['seconds']:.0f} s "
                     f"({len(out)} of {len(jobs)} jobs)")

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
    position : int
        Where the engine comes in the table (:data:`SCOPES` is sorted by it).
    """

    engine: str
    implementations: tuple
    build: str
    rule: str
    not_tested: str
    report: str = "-"
    kinds: tuple = ()
    where: dict = None
    position: int = 0

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

    Passes say "exact within TV X" with X the largest detectable TV of the passing rows
    (per token for the rows that test every emitted token): an error larger than X would
    have failed the weakest of them with high probability (each row's power). A failure names
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
        aborted = [r for r in these if r.verdict == "ABORTS"]
        if aborted and kind != "crash":     # the same defect, but nothing was tested there
            codes = sorted({m.group(0) for r in aborted
                            for m in [re.search(r"HTTP \d{3}", r.note or "")] if m})
            text += ((f"; {len(aborted)} of these {len(these)} settings abort"
                      if len(these) > 1 else "; it aborts")
                     + (f" ({', '.join(codes)}, no token tested)" if codes else
                        " (no token tested)"))
        if kind == "build":
            fixed = [r for r in ran if r.verdict == "PASS" and _fixed(r)]
            if fixed:
                text += (f"; exact within TV {max(r.detectable_tv for r in fixed):.3f} once "
                         f"one function is fixed")
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
    """'exact within TV x' over passing rows, x the largest detectable TV (the weakest
    row's: an error up to x could have passed it), per token when each row tests every
    emitted token; the best-tested row's value in brackets when it differs.

    When the weakest row resolves more than twice the best one's TV (e.g. a slow interface
    run on few trials), one bound would let the weakest test stand for the engine: both
    ends are named instead, "no error seen: within TV 0.15 for token step, only within
    0.58 for generate, prompt lookup (60 trials)".
    """
    ranked = sorted(rows, key=lambda r: r.detectable_tv)
    best, worst = ranked[0], ranked[-1]
    per_token = all("every emitted token tested" in r.interface for r in rows)
    fmt = "{:.3f}" if per_token else "{:.2f}"
    unit = " per token" if per_token else ""
    hi, lo = fmt.format(worst.detectable_tv), fmt.format(best.detectable_tv)
    if worst.detectable_tv <= 2 * best.detectable_tv:
        return (f"exact within TV {hi}{unit}"
                + (f" ({lo} in its best-tested setting)" if lo != hi else ""))

    def label(row):
        return row.interface.split(";")[0].split(" (")[0].strip()

    return (f"no error seen: within TV {lo}{unit} for {label(best)}, only within {hi} for "
            f"{label(worst)}" + (f" ({worst.trials:,} trials)" if worst.trials else ""))


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
        # report file names as plain text: a code span does not wrap, and the longest
        # names alone made the table wider than the page's column
        out.append([f"**{sc.engine}** {version}", sc.build, sc.rule, exact_text(mine, sc),
                    sc.not_tested, sc.report.replace("`", "")])
    return out


#: The engines of Appendix C's first table that are not adapters: transformers
#: (:mod:`specdec.conformance.hf`, its releases' environments in tools/hf_envs.py) and
#: llama-server (chapter 8's per-token study); every other engine's scope is its adapter's.
OWN_SCOPES = (
    Scope("transformers", ("transformers",),
          "the wheel; `_speculative_sampling` called directly, `generate` end to end with an "
          "assistant, prompt lookup, an assistant with another tokenizer; toy models, CPU",
          "Algorithm 1: accept with min(1, p/q), else draw from (p − q)+",
          "GPU; batches; temperatures other than 1; early exit, MTP and DFlash drafters",
          "`transformers-lookup-length.md`: a note, fixed in 5.14; the greedy assistant of "
          "4.41-4.44 is known upstream (#32867) and fixed in 4.45",
          kinds=(("prompt lookup", "length"),),
          where={"rule": "the assistant drafts greedily, its law taken as sampled",
                 "length": "prompt lookup returns more than `max_new_tokens`"}, position=0),
    Scope("llama.cpp llama-server", ("llama.cpp llama-server",),
          "llama.cpp's server, same build, over HTTP; book's models",
          "greedy draft; kept while the target's own sample equals it",
          "GPU builds; temperatures other than 1", "-", position=60),
)


def scopes() -> tuple:
    """The static facts of Appendix C's first table, one :class:`Scope` per engine in its
    order: :data:`OWN_SCOPES` and every adapter's (:data:`SCOPES` is this, read when asked)."""
    from specdec.conformance.adapters import registry

    found = [*OWN_SCOPES, *(a.scope for a in registry().values())]
    return tuple(sorted(found, key=lambda sc: sc.position))


def __getattr__(name: str):
    if name == "SCOPES":              # the adapters import this module: read them when asked
        return scopes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
