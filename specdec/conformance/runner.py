"""The battery: every case of a sampler, Holm-adjusted verdicts, and the report.

:func:`run_battery` plans the trials (:mod:`specdec.conformance.pilot`), runs each case
(:func:`specdec.conformance.checks.run_case`), adjusts the p-values of every check for
multiple testing (Holm), attaches the diagnosis (:mod:`specdec.conformance.diagnosis`)
and returns the :class:`~specdec.conformance.report.Report`; :func:`assert_conforms`
raises with it.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from specdec.stats import gof as kitstats
from specdec import laws

from specdec.conformance.checks import resolve_cases, run_case, token_accounting
from specdec.conformance.conventions import AUTO, FROM_Q, OWN, TOKEN, describe_sampler
from specdec.conformance.diagnosis import diagnose
from specdec.conformance.pilot import plan_battery
from specdec.conformance.report import Report

__all__ = ["run_battery", "assert_conforms"]


def _check_probability(x, name: str, *, upper: float = 1.0, closed: bool = False) -> float:
    ok = isinstance(x, (int, float, np.floating)) and not isinstance(x, bool) and np.isfinite(x)
    if not ok or not (0.0 < x < upper or (closed and x == upper)):
        bracket = "]" if closed else ")"
        raise ValueError(f"{name}: must be a number in (0, {upper:g}{bracket} (got {x!r})")
    return float(x)


#: Most trials of a case's screen: the first tenth of its planned trials, at most this many,
#: run before the rest (see :func:`_screened`).
SCREEN_TRIALS = 200


def _screened(sampler, case, spec, seed: int, trials: int, opts):
    """Run one case, stopping early on a deterministic violation.

    The first tenth of the planned trials (at most :data:`SCREEN_TRIALS`) run first, with
    the case's own seed; if they show a deterministic violation (an outcome impossible
    under the exact law, a token after end-of-sequence, a malformed output, an
    exception), the case ends there and fails. An exact sampler never shows one, so the
    early stop changes no false-alarm probability; otherwise the planned run follows,
    from the same seed, and the case's result is the one it would have had without the
    screen.
    """
    k = min(SCREEN_TRIALS, trials // 10)
    if k >= 1:
        first = run_case(sampler, case, spec=spec, seed=seed, trials=k, **opts)
        if first[0].violations:
            return (dataclasses.replace(first[0], planned_trials=int(trials)),) + tuple(first[1:])
    return run_case(sampler, case, spec=spec, seed=seed, trials=trials, **opts)


def run_battery(sampler, *, kind: str | None = None, vectorised: bool | None = None,
                inputs: str | None = None, proposals: str | None = None,
                accepted_eos: str | None = None, accepted_law=None, cases=None, seed: int = 0,
                trials=None, resolution: float | None = None, budget: float | None = None,
                false_alarm: float = 1e-3, power: float = 0.9,
                confidence: float = 0.95, min_expected: float = 10.0,
                max_bins: int | None = None, progress=None) -> Report:
    """Run the conformance battery on a sampler.

    Parameters
    ----------
    sampler : callable
        Token or block sampler (see the module docstring and :func:`describe_sampler`).
    kind, vectorised, inputs : optional
        Calling convention, when neither a mark nor the signature says it.
    proposals, accepted_eos : optional
        Accounting conventions (see :class:`specdec.conformance.SamplerSpec`), when the
        mark does not say them; by default they are detected from the data.
    accepted_law : str or callable, optional
        Block samplers: the accepted-count law of the sampler's verification rule, which
        its reported counts must follow (``"token"``, ``"block"``, ``"matching"``, or a
        callable ``law(target, draft, prefix, gamma)``; see
        :class:`specdec.conformance.SamplerSpec`). Default: the sampler's own
        ``first_cycle_accepted_law`` method if it has one, else token by token.
    cases : sequence of str or case objects, optional
        Subset (by name) or custom cases; default: the standard battery of the kind
        (:func:`token_cases` or :func:`block_cases`).
    seed : int
        Master seed, >= 0. Case ``c`` draws from ``SeedSequence(seed, spawn_key=(crc32(c),))``,
        so a report is reproducible and a case's draws do not depend on the others.
    trials : int or dict, optional
        Repetitions per case (token steps, or decodes of ``length`` tokens), for every
        case or by case name. Default: as many as the resolution asks for
        (:mod:`specdec.conformance.plan`).
    resolution : float, optional
        Detectable TV wanted on every case (default 0.001 for a vectorised token sampler,
        0.01 for one called per step, 0.005 and 0.02 for block samplers).
    budget : float, optional
        Seconds for the whole battery instead: a short pilot measures each case's speed
        and the trials are chosen so that every case reaches the smallest detectable TV
        the budget allows (the trial counts then depend on the machine's speed; the
        report states them).
    false_alarm : float
        Family-wise false-alarm probability: a correct sampler fails the battery with
        probability at most this (Holm over all statistical checks; impossible outcomes
        never happen to a correct sampler). In (0, 0.5].
    power : float
        Power at which the detectable TV is reported, in (0, 1).
    confidence : float
        Level of the TV intervals, in (0, 1).
    min_expected, max_bins :
        Binning rule, see :func:`specdec.stats.gof.pool_cells`; ``max_bins=None`` (default)
        lets the number of bins grow with the trials (:func:`specdec.stats.gof.bins_for_trials`).
    progress : callable, optional
        ``progress(case, trials, total)``: called once with ``(None, 0, total)`` before
        the first case, then after each case with its name and planned trials (the command
        line's progress bar over the battery's trials).

    Returns
    -------
    Report

    Raises
    ------
    TypeError
        If ``sampler`` is not callable.
    ValueError
        Invalid ``seed``, ``trials``, ``false_alarm``, ``power``, ``confidence``, unknown
        case names, cases of the wrong kind, or an undecidable calling convention.

    Examples
    --------
    >>> from specdec.conformance import gallery
    >>> r = run_battery(gallery.vectorised_correct, cases=["article"], trials=10_000, seed=3)
    >>> r.passed, r.n_tests
    (True, 2)
    """
    t0 = time.perf_counter()
    spec = describe_sampler(sampler, kind=kind, vectorised=vectorised, inputs=inputs,
                            proposals=proposals, accepted_eos=accepted_eos,
                            accepted_law=accepted_law)
    seed = laws.check_int(seed, "seed", minimum=0)
    _check_probability(false_alarm, "false_alarm", upper=0.5, closed=True)
    _check_probability(power, "power")
    _check_probability(confidence, "confidence")
    case_list = resolve_cases(spec.kind, cases)
    if isinstance(trials, dict):
        unknown = set(trials) - {c.name for c in case_list}
        if unknown:
            raise ValueError(f"trials: no case called {', '.join(sorted(unknown))} in this battery")
        per_case = {k: laws.check_int(v, f"trials[{k!r}]") for k, v in trials.items()}
    elif trials is not None:
        per_case = {c.name: laws.check_int(trials, "trials") for c in case_list}
    else:
        per_case = {}
    missing = [c for c in case_list if c.name not in per_case]
    the_plan = None
    if missing:
        the_plan = plan_battery(spec, sampler, case_list, resolution=resolution, budget=budget,
                                     false_alarm=false_alarm, power=power,
                                     min_expected=min_expected, seed=seed)
        for c in missing:
            per_case[c.name] = the_plan.trials_by_case[c.name]
    opts = dict(min_expected=min_expected, max_bins=max_bins, confidence=confidence)
    total = int(sum(per_case[c.name] for c in case_list))
    if progress is not None:
        progress(None, 0, total)
    raw = []
    for c in case_list:
        raw.append(_screened(sampler, c, spec, seed, per_case[c.name], opts))
        if progress is not None:
            progress(c.name, int(per_case[c.name]), total)
    conventions = []
    if spec.kind == TOKEN and any(r[2] is not None for r in raw):
        if spec.proposals == AUTO:
            detected = [c.name for c, r in zip(case_list, raw) if r[2] is not None and r[2][1] > 0]
            if detected:
                conventions.append("proposals not drawn from q (detected in "
                                   + ", ".join(detected) + "): the accepted flags are checked by "
                                   "the identities that hold for every proposal law")
                raw = [_with_own_proposals(c, r, opts) for c, r in zip(case_list, raw)]
            else:
                conventions.append("proposals drawn from q (no outcome says otherwise)")
        else:
            conventions.append("proposals drawn from q (declared)" if spec.proposals == FROM_Q else
                               "proposals from the sampler's own law (declared): the accepted "
                               "flags are checked by the identities that hold for every "
                               "proposal law")
    for res, _, _ in raw:
        for text in res.conventions:
            if text not in conventions:
                conventions.append(text)
    # the family: every check with at least one degree of freedom
    family = [(i, j) for i, (res, _, _) in enumerate(raw)
              for j, chk in enumerate(res.checks) if chk.dof >= 1]
    m = len(family)
    adjusted = kitstats.holm_adjust([raw[i][0].checks[j].pvalue for i, j in family])
    adj_of = {key: a for key, a in zip(family, adjusted)}
    level = false_alarm / max(m, 1)
    results = []
    for i, (res, lams, _) in enumerate(raw):
        new_checks = []
        for j, chk in enumerate(res.checks):
            adj = adj_of.get((i, j), 1.0)
            tv_det = kitstats.detectable_tv(max(chk.trials, 1), chk.dof, level, power)
            failed = bool(chk.impossible > 0 or adj <= false_alarm)
            need = float("inf")                    # estimated only for what was caught
            if failed and chk.dof >= 1 and lams[j] > 0:
                need = kitstats.noncentrality(chk.dof, level, power) / lams[j]
            if failed and chk.impossible:
                frac = chk.impossible / chk.trials
                need = min(need, 1.0 if frac >= 1 else math.log1p(-power) / math.log1p(-frac))
            new_checks.append(dataclasses.replace(chk, adjusted_pvalue=float(adj),
                                                  tv_detectable=tv_det, trials_needed=need,
                                                  failed=failed))
        law_chk = new_checks[0] if res.law is not None else None
        acc_chk = new_checks[-1] if res.accounting is not None else None
        det_need = float("inf")
        if res.violating_trials:
            frac = res.violating_trials / res.trials
            det_need = 1.0 if frac >= 1 else math.log1p(-power) / math.log1p(-frac)
        res = dataclasses.replace(res, law=law_chk, accounting=acc_chk,
                                  violation_trials_needed=max(1.0, det_need))
        passed = res.exact and res.accounting_ok
        results.append(dataclasses.replace(res, passed=passed,
                                           causes=res.causes or diagnose(res, spec.kind)))
    return Report(spec, seed, float(false_alarm), float(power), float(confidence), "holm", m,
                  tuple(results), all(r.passed for r in results), time.perf_counter() - t0,
                  tuple(conventions), None if the_plan is None else the_plan.resolution)


def _with_own_proposals(case, r, opts):
    """A token case's result redone with the accounting for proposals not from q."""
    res, lams, obs = r
    if obs is None:
        return r
    _, _, acc_viol, _ = token_accounting(case, obs[0], OWN, opts)
    return (dataclasses.replace(res, accounting=None, accounting_violations=tuple(acc_viol)),
            lams[:1], obs)


def assert_conforms(sampler, **kwargs) -> Report:
    """pytest-friendly: run the battery and raise ``AssertionError`` with the report if it fails.

    Parameters
    ----------
    sampler : callable
    **kwargs
        As for :func:`run_battery`.

    Returns
    -------
    Report
        When the sampler passes.

    Raises
    ------
    AssertionError
        If the battery fails; the message is the Markdown report. With a fixed ``seed``
        the outcome is deterministic; a correct sampler fails for at most a fraction
        ``false_alarm`` of seeds.

    Examples
    --------
    >>> from specdec.conformance import gallery
    >>> _ = assert_conforms(gallery.vectorised_correct, cases=["equal"], trials=5_000)
    """
    report = run_battery(sampler, **kwargs)
    if not report.passed:
        raise AssertionError("sampler does not conform to the target law\n\n" + report.to_markdown())
    return report
