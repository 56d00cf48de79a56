"""What a battery found: checks, case results, the report and its Markdown rendering."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

from specdec.conformance.conventions import TOKEN, SamplerSpec

__all__ = ["Check", "CycleAccounting", "CaseResult", "Report", "format_pvalue"]


@dataclass(frozen=True)
class Check:
    """One goodness-of-fit check of observed counts against an exact law.

    Attributes
    ----------
    name : str
        ``"law"`` (what the sampler emits) or ``"accounting"`` (the joint law of what it
        emits and what it reports as accepted).
    method : str
        Human-readable test description.
    trials : int
        Observations.
    statistic : float
        Pearson chi-square on the bins (0 when there is nothing to test).
    dof : int
        Degrees of freedom; 0 means no chi-square (one bin).
    pvalue : float
        Unadjusted p-value (1.0 when ``dof == 0``).
    bins, pooled_cells : int
        Number of bins, and cells sharing a bin.
    impossible : int
        Observations of outcomes with exact probability 0 (each one is a failure).
    tv, tv_low, tv_high : float
        Plug-in TV distance on the bins (including impossible outcomes), and its
        confidence interval.
    tv_detectable : float
        Smallest TV detected with the report's power at the Bonferroni level.
    trials_needed : float
        Estimated trials at which this check would catch the observed deviation with the
        report's power (``inf`` when no deviation is seen).
    adjusted_pvalue : float
        Holm-adjusted p-value over the battery.
    failed : bool
        Impossible outcomes observed, or adjusted p-value <= false alarm.
    """

    name: str
    method: str
    trials: int
    statistic: float
    dof: int
    pvalue: float
    bins: int
    pooled_cells: int
    impossible: int
    tv: float
    tv_low: float
    tv_high: float
    tv_detectable: float = float("nan")
    trials_needed: float = float("inf")
    adjusted_pvalue: float = float("nan")
    failed: bool = False




@dataclass(frozen=True)
class CycleAccounting:
    """What the sampler reported about its cycles, beside the exact values.

    Token cases: one cycle is one step (one token emitted, one proposal). Block cases:
    the exact values are for the first cycle of a decode (it starts at the case's prefix,
    where the law of a cycle is known); the observed ``first_*`` values are over those
    cycles, the others over every cycle of every decode.

    Attributes
    ----------
    cycles : int
        Cycles observed.
    emitted_per_cycle : float
        Mean tokens emitted per cycle (all cycles).
    acceptance : float or None
        Total accepted / total proposed, as reported (None if not reported).
    first_emitted : float
        Mean tokens emitted per first cycle.
    first_accepted : float or None
        Mean accepted proposals reported per first cycle (None if not reported).
    exact_emitted, exact_accepted : float
        Their exact values for a correct sampler: ``E`` (tokens per cycle) and the
        expected number of accepted proposals (for a token step, 1 and ``beta``).
    """

    cycles: int
    emitted_per_cycle: float
    acceptance: float | None
    first_emitted: float
    first_accepted: float | None
    exact_emitted: float
    exact_accepted: float


def _trials_cell(c) -> str:
    """A case's trials as the report's table shows them (and the plan, if it stopped early)."""
    if c.planned_trials is None:
        return f"{c.trials:,}"
    return f"{c.trials:,} (stopped early: a violation; {c.planned_trials:,} planned)"


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one case, with three separate verdicts.

    * **Exactness** (the law): what the sampler emits follows the target law: the law
      check passes and no deterministic violation of the law was seen (an impossible
      outcome, a token after end-of-sequence, a malformed output, an exception).
    * **Accounting**: what the sampler reports about its cycles (accepted flags or
      counts) satisfies the identities every correct sampler satisfies, and, where the
      conventions fix it, follows its exact law.
    * **Efficiency**: acceptance below what the exact rule gives is a *warning*, never
      a failure: a slower sampler can be exact.

    A case passes when exactness and accounting pass.

    Attributes
    ----------
    name, kind, description : str
    trials : int
        Repetitions (token steps, or decodes for block cases).
    law : Check or None
        Law check (None if the sampler could not be run at all).
    accounting : Check or None
        Accounting law check (None if the sampler reports no acceptance information, or
        the conventions leave no exact accounting law).
    cycles : CycleAccounting or None
    violations : tuple of str
        Deterministic failures of exactness (each says what was seen and how often).
    accounting_violations : tuple of str
        Accounting identities that do not hold.
    warnings : tuple of str
        Efficiency warnings (not failures).
    conventions : tuple of str
        Accounting conventions applied, and whether declared or detected.
    causes : tuple of str
        For a failing case: each failing check and its likely cause, in words.
    violating_trials : int
        Trials (steps, decodes) showing a deterministic violation.
    violation_trials_needed : float
        Trials at which a deterministic violation shows with the report's power, from
        the fraction of trials that showed one (``inf`` when none did).
    planned_trials : int or None
        The trials planned, when the case stopped early after ``trials`` of them: its
        screen (the first tenth, at most :data:`specdec.conformance.runner.SCREEN_TRIALS`)
        showed a deterministic violation, which an exact sampler never produces, so
        stopping leaves the false-alarm probability unchanged. None otherwise.
    passed : bool
    seconds : float
        Wall time (not part of equality: reports from the same seed compare equal).
    sampler_seconds : float
        Of it, the time spent inside the sampler (the rest is the kit's own time).
    """

    name: str
    kind: str
    description: str
    trials: int
    law: Check | None
    accounting: Check | None
    cycles: CycleAccounting | None
    violations: tuple[str, ...]
    passed: bool = True
    seconds: float = field(default=0.0, compare=False)
    accounting_violations: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    conventions: tuple[str, ...] = ()
    causes: tuple[str, ...] = ()
    violating_trials: int = 0
    violation_trials_needed: float = float("inf")
    sampler_seconds: float = field(default=0.0, compare=False)
    planned_trials: int | None = None

    @property
    def checks(self) -> tuple[Check, ...]:
        return tuple(c for c in (self.law, self.accounting) if c is not None)

    @property
    def exact(self) -> bool:
        """Exactness verdict: the law check passed and no violation of the law was seen."""
        return self.law is not None and not self.law.failed and not self.violations

    @property
    def accounting_ok(self) -> bool:
        """Accounting verdict (True when nothing was reported to check)."""
        return not self.accounting_violations and not (self.accounting is not None
                                                       and self.accounting.failed)

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "FAIL"

    @property
    def trials_needed(self) -> float:
        """Fewest trials at which one of the case's checks would catch what was seen.

        Statistical checks (from the noncentrality seen) and deterministic ones (from the
        fraction of trials that showed a violation) both count.
        """
        return min([c.trials_needed for c in self.checks] + [self.violation_trials_needed])


def format_pvalue(x: float) -> str:
    """A p-value: 2 significant digits, below 0.001 as ``3.2 × 10⁻⁵`` (:func:`_fmt_level`),
    ``< 10⁻³⁰⁰`` when it underflows to 0 (a p-value is never exactly 0; a Holm-adjusted
    p-value is capped at 1)."""
    if x != x:
        return "n/a"
    if x <= 0:
        return "< " + _fmt_level(1e-300)
    return f"{x:.2g}" if x >= 1e-3 else _fmt_level(x)


_SUPERSCRIPT = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")


def _fmt_level(x: float) -> str:
    """A probability such as a false-alarm level as the book writes it: ``10⁻⁶``,
    ``2.5 × 10⁻⁷``; from 0.001 on as a decimal (``0.001``, ``0.05``)."""
    if not 0 < x < 1e-3:
        return f"{x:g}"
    mantissa, exponent = f"{x:.1e}".split("e")
    power = "10" + str(int(exponent)).translate(_SUPERSCRIPT)
    return power if float(mantissa) == 1 else f"{float(mantissa):g} \u00d7 {power}"


def sci(x: float, digits: int = 1) -> str:
    """Scientific notation for the prose: ``10⁻⁹``, ``3.2 × 10⁻¹⁰``; zero stays ``0``.

    Parameters
    ----------
    x : float
        The number (typically a probability).
    digits : int, default 1
        Digits after the decimal point of the mantissa.

    Returns
    -------
    str
        ``"10ᵉ"`` when the mantissa rounds to 1, ``"m × 10ᵉ"`` otherwise.

    Raises
    ------
    ValueError
        If ``x`` is not a finite real number or ``digits`` is negative.

    Examples
    --------
    >>> sci(1e-9)
    '10⁻⁹'
    >>> sci(3.2e-10)
    '3.2 × 10⁻¹⁰'
    >>> sci(0.0)
    '0'
    """
    if not isinstance(x, numbers.Real) or not np.isfinite(x):
        raise ValueError(f"x: must be a finite real number (got {x!r})")
    if not isinstance(digits, numbers.Integral) or digits < 0:
        raise ValueError(f"digits: must be an integer >= 0 (got {digits!r})")
    if x == 0:
        return "0"
    mantissa, exponent = f"{float(x):.{digits}e}".split("e")
    power = "10" + str(int(exponent)).translate(_SUPERSCRIPT)
    if float(mantissa) == 1:
        return power
    if float(mantissa) == -1:
        return "−" + power
    return f"{mantissa} × {power}"


def pvalue_text(p: float) -> str:
    """A p-value for the prose and tables: 2 significant digits, small ones in powers of ten.

    A p-value is never exactly 0; one that underflows to 0 in floating point is written
    as a bound, ``< 10⁻³⁰⁰``.

    Parameters
    ----------
    p : float
        The p-value, ``0 <= p <= 1``.

    Returns
    -------
    str
        ``"0.57"``, ``"0.031"``, ``"2.6 × 10⁻⁹"``, ``"< 10⁻³⁰⁰"``.

    Raises
    ------
    ValueError
        If ``p`` is not a real number in [0, 1].

    Examples
    --------
    >>> pvalue_text(0.5712)
    '0.57'
    >>> pvalue_text(2.63e-9)
    '2.6 × 10⁻⁹'
    >>> pvalue_text(0.0)
    '< 10⁻³⁰⁰'
    """
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= p <= 1:
        raise ValueError(f"p: must be a real number in [0, 1] (got {p!r})")
    if p == 0:
        return "< " + sci(1e-300)
    return f"{float(p):.2g}" if p >= 1e-3 else sci(float(p))


def _fmt_tv(x: float) -> str:
    return f"{x:.4f}" if x >= 1e-3 or x == 0 else _fmt_level(x)


def _fmt_n(x: float) -> str:
    if not np.isfinite(x):
        return "-"
    return f"{int(math.ceil(x)):,}"


@dataclass(frozen=True)
class Report:
    """The outcome of a battery.

    Attributes
    ----------
    sampler : SamplerSpec
    seed : int
    false_alarm : float
        Family-wise false-alarm probability of the battery.
    power : float
        Power at which ``tv_detectable`` is stated.
    confidence : float
        Level of the TV intervals.
    correction : str
        ``"holm"``.
    n_tests : int
        Statistical checks in the family (``m``).
    cases : tuple of CaseResult
    passed : bool
        Every case passed (exactness and accounting).
    seconds : float
        Total wall time (not part of equality).
    conventions : tuple of str
        Accounting conventions applied to the whole battery (declared or detected).
    resolution : float or None
        The detectable TV the trials were planned for (None when trials were given).
    """

    sampler: SamplerSpec
    seed: int
    false_alarm: float
    power: float
    confidence: float
    correction: str
    n_tests: int
    cases: tuple[CaseResult, ...]
    passed: bool
    seconds: float = field(default=0.0, compare=False)
    conventions: tuple[str, ...] = ()
    resolution: float | None = None

    @property
    def sampler_seconds(self) -> float:
        """Time spent inside the sampler (the rest of ``seconds`` is the kit's own)."""
        return float(sum(c.sampler_seconds for c in self.cases))

    @property
    def failures(self) -> tuple[CaseResult, ...]:
        return tuple(c for c in self.cases if not c.passed)

    @property
    def exact(self) -> bool:
        """Exactness verdict of the battery: every case's law holds."""
        return all(c.exact for c in self.cases)

    @property
    def accounting_ok(self) -> bool:
        """Accounting verdict of the battery."""
        return all(c.accounting_ok for c in self.cases)

    @property
    def warnings(self) -> tuple[str, ...]:
        """Efficiency warnings, one per case that has one (``case: text``)."""
        return tuple(f"{c.name}: {w}" for c in self.cases for w in c.warnings)

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "FAIL"

    def case(self, name: str) -> CaseResult:
        """The result of the case called ``name`` (KeyError if absent)."""
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def trials_needed(self) -> float:
        """Fewest trials per case at which some check would have caught the sampler."""
        return min((c.trials_needed for c in self.failures), default=float("inf"))

    @property
    def max_tv(self) -> CaseResult | None:
        """The case with the largest TV found (lower confidence bound first)."""
        with_law = [c for c in self.cases if c.law is not None]
        if not with_law:
            return None
        return max(with_law, key=lambda c: (c.law.tv_low, c.law.tv))

    @property
    def max_detectable_tv(self) -> float:
        """The largest detectable TV over the cases: the battery's resolution."""
        return max((c.law.tv_detectable for c in self.cases if c.law is not None),
                   default=float("nan"))

    def to_markdown(self, *, timings: bool = False, heading: bool = True) -> str:
        """A readable report: verdicts, settings, one table row per case, and failures.

        Parameters
        ----------
        timings : bool
            Include wall times (off by default, so the text is reproducible).
        heading : bool
            Start with a ``##`` heading (else a bold line, for embedding in a page).

        Returns
        -------
        str
            Markdown (GitHub tables).
        """
        spec = self.sampler
        conv = f"{spec.kind} sampler" + (", vectorised" if spec.vectorised else "") + (
            f", {spec.inputs} inputs" if spec.kind == TOKEN else "")
        title = f"Conformance report: {self.verdict}"
        yes = {True: "pass", False: "FAIL"}
        lines = [
            f"## {title}" if heading else f"**{title}**",
            "",
            f"Sampler `{spec.name}` ({conv}); seed {self.seed}; {len(self.cases)} cases, "
            f"{len(self.failures)} failed.",
            f"Verdicts: exactness (the law) {yes[self.exact]}; accounting "
            f"{yes[self.accounting_ok]}; efficiency "
            f"{'warning' if self.warnings else 'no warning'}.",
            f"False-alarm probability of the whole battery <= {_fmt_level(self.false_alarm)} "
            f"({self.correction.capitalize()} over {self.n_tests} statistical checks); "
            f"detectable TV at power {self.power:g}; TV intervals at {self.confidence:.0%}.",
        ]
        if self.conventions:
            lines.append("Accounting conventions: " + "; ".join(self.conventions) + ".")
        lines += [
            "",
            "| case | trials | test | p (Holm) | TV found [CI] | detectable TV | law | accounting | verdict |",
            "|:--|--:|:--|--:|:--|--:|:--|:--|:--|",
        ]
        for c in self.cases:
            if c.law is None:
                lines.append(f"| {c.name} | {_trials_cell(c)} | not run | - | - | - | FAIL | - | {c.verdict} |")
                continue
            padj = min((k.adjusted_pvalue for k in c.checks if k.dof > 0), default=float("nan"))
            reported = c.accounting is not None or c.accounting_violations or (
                c.cycles is not None and c.cycles.acceptance is not None)
            lines.append(
                f"| {c.name} | {_trials_cell(c)} | {c.law.bins} bin{'s' if c.law.bins > 1 else ''}"
                f"{' (pooled)' if c.law.pooled_cells else ''}"
                f"{' + accounting' if c.accounting is not None else ''} | {format_pvalue(padj)} | "
                f"{c.law.tv:.4f} [{c.law.tv_low:.4f}, {c.law.tv_high:.4f}] | "
                f"{_fmt_tv(c.law.tv_detectable)} | {yes[c.exact]} | "
                f"{yes[c.accounting_ok] if reported else '-'}"
                f"{' (warning)' if c.warnings else ''} | {c.verdict} |")
        acc = [c for c in self.cases if c.cycles is not None and c.cycles.acceptance is not None]
        if acc:
            lines += ["", "Accounting reported by the sampler (exact values for a correct sampler):",
                      "", "| case | cycles | emitted/cycle | acceptance | first cycle: emitted "
                      "(exact) | first cycle: accepted (exact) |",
                      "|:--|--:|--:|--:|--:|--:|"]
            for c in acc:
                y = c.cycles
                lines.append(f"| {c.name} | {y.cycles:,} | {y.emitted_per_cycle:.4f} | "
                             f"{y.acceptance:.4f} | {y.first_emitted:.4f} ({y.exact_emitted:.4f}) | "
                             f"{y.first_accepted:.4f} ({y.exact_accepted:.4f}) |")
        if self.failures:
            lines += ["", "Failures (the failing check, what was seen, the likely cause):", ""]
            for c in self.failures:
                need = _fmt_n(c.trials_needed)
                lines.append(f"- **{c.name}** ({c.description}); trials needed ~ {need}: "
                             + " ".join(c.causes))
        if self.warnings:
            lines += ["", "Efficiency warnings (not failures):", ""]
            lines += [f"- {w}" for w in self.warnings]
        if timings:
            lines += ["", f"Wall time {self.seconds:.2f} s ({self.sampler_seconds:.2f} s in the "
                      f"sampler, {self.seconds - self.sampler_seconds:.2f} s in the kit): "
                      + ", ".join(f"{c.name} {c.seconds:.2f} s" for c in self.cases) + "."]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """A JSON-ready summary: verdicts and, per case, trials, TV [CI], detectable TV."""
        def num(x):
            return None if x is None or not np.isfinite(x) else float(x)

        return {
            "sampler": self.sampler.name, "seed": self.seed, "passed": self.passed,
            "exact": self.exact, "accounting_ok": self.accounting_ok,
            "warnings": list(self.warnings), "conventions": list(self.conventions),
            "false_alarm": self.false_alarm, "n_tests": self.n_tests,
            "seconds": self.seconds,
            "cases": [{
                "name": c.name, "trials": c.trials, "planned_trials": c.planned_trials,
                "passed": c.passed, "exact": c.exact,
                "accounting_ok": c.accounting_ok,
                "tv": num(c.law.tv) if c.law else None,
                "tv_low": num(c.law.tv_low) if c.law else None,
                "tv_high": num(c.law.tv_high) if c.law else None,
                "tv_detectable": num(c.law.tv_detectable) if c.law else None,
                "bins": c.law.bins if c.law else None,
                "seconds": c.seconds, "causes": list(c.causes), "warnings": list(c.warnings),
            } for c in self.cases],
        }

    def __str__(self) -> str:  # pragma: no cover - convenience
        return self.to_markdown()
