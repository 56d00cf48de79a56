"""Chapter 8's comparative and causal sentences, chosen from the measurements.

Every sentence of chapter 8 that compares or explains a measured number comes from one
of these functions: each takes the numbers, decides which way they went (and whether
the difference is larger than the run's own spread), and returns the words. The
chapter glues the result; ``tests/test_ch8_text.py`` runs every function on synthetic
measurements in both directions. Used in Chapter 8.
"""

from __future__ import annotations

import math

from specdec import cost

from specbook.prose import pvalue_text, sci, signed_percent, spoken_list

__all__ = ["versus_one", "g_per_position", "wide_against_deep", "in_situ_passes",
           "draft_cost", "ttft_change", "itl_bursts", "gain_change", "g_beyond_batch",
           "server_against_numpy_g", "in_situ_prediction", "geometric_fit", "rule_comparison",
           "served_speedup", "served_vs_book", "disturbance_note", "goodput_trend",
           "g_against_lines", "pays_verdict", "model_agreement", "scale_trend",
           "tail_label", "interval_verdict", "pays_interval", "repetition_note",
           "model_errors", "bandwidth_share", "goodput_limits", "best_language",
           "pertoken_verdict", "pertoken_lines", "draft_ceiling", "cost_clock"]


def _finite(name: str, x) -> float:
    """``x`` as a float, or a ValueError naming ``name`` when it is not a finite number."""
    import math
    import numbers

    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x):
        raise ValueError(f"{name}: must be a finite number (got {x!r})")
    return float(x)


def _clear(diff: float, spread: float) -> bool:
    return abs(diff) > spread


def versus_one(ratio: float, spread: float) -> str:
    """A speedup against break-even, given its spread (IQR): 'a gain of 1.20', 'a
    slowdown (0.80)', or 'within the noise of this run (IQR 0.30)'."""
    if not _clear(ratio - 1.0, spread):
        return (f"within the noise of this run (its interquartile range, {spread:.2f}, "
                f"spans break-even)")
    return f"a gain ({ratio:.2f}×)" if ratio > 1 else f"a slowdown ({ratio:.2f}×)"


def g_per_position(g_wide: float, g_deep: float, gamma: int) -> str:
    """How the two targets' verification costs compare at draft length ``gamma``."""
    if g_wide > g_deep:
        return (f"the wide target's pass costs more of its own steps ({g_wide:.2f} against "
                f"{g_deep:.2f} at γ = {gamma}): its wider matrices make each extra position "
                f"dearer")
    return (f"the wide target's pass costs no more of its own steps ({g_wide:.2f} against "
            f"{g_deep:.2f} at γ = {gamma}): its wider matrices did not make extra positions "
            f"dearer here")


def wide_against_deep(e_wide: float, e_deep: float, g_wide: float, g_deep: float,
                      s_wide: float, s_deep: float, spread: float) -> str:
    """The wide target against the deep one: numerator, denominator, net (speedups with
    the larger of their spreads). Two sentences; the first starts in lower case."""
    more = "more" if e_wide > e_deep else "fewer"
    helps_num, hurts_den = e_wide > e_deep, g_wide > g_deep
    if helps_num == hurts_den:
        pull = "the two effects pull in opposite directions"
    else:
        pull = ("the two effects pull the same way, " +
                ("for the wide target" if helps_num else "against the wide target"))
    head = (f"its cycles emit {more} bytes ({e_wide:.2f} against {e_deep:.2f}) and its pass "
            f"costs {g_wide:.2f} of its own steps against {g_deep:.2f}: {pull}")
    if not _clear(s_wide - s_deep, spread):
        net = (f"The net speedups, {s_wide:.2f} and {s_deep:.2f}, differ by less than the "
               f"larger interquartile range ({spread:.2f}), so this run cannot rank them")
    else:
        net = (f"The net speedup is {s_wide:.2f} against {s_deep:.2f}, "
               f"{'above' if s_wide > s_deep else 'below'} the deep target by more than the "
               f"larger interquartile range ({spread:.2f})")
    return f"{head}. {net}"


def in_situ_passes(g_pct: float, c_pct: float) -> str:
    """Passes timed in the loop against their micro-benchmarks (percent differences)."""
    def word(x):
        return "dearer" if x > 0 else "cheaper" if x < 0 else "as dear"
    if g_pct > 0 or c_pct > 0:
        why = ("Causes that can make a pass dearer, not timed apart here: longer sequences "
               "than the benchmark's, the two models evicting each other's weights from the "
               "caches, and other processes.")
    else:
        why = ("Neither pass was dearer in the loop, so cache eviction and longer sequences "
               "did not show in this run.")
    return (f"a target block pass was {abs(g_pct):.0f}% {word(g_pct)} and a draft pass "
            f"{abs(c_pct):.0f}% {word(c_pct)} in the loop than in the micro-benchmark. {why}")


def draft_cost(c: float, article_c: float) -> str:
    """The measured draft cost against the article's example value."""
    if c > 2 * article_c:
        return (f"far above the c = {article_c:.2f} of the article's example: a model this "
                f"small spends much of each step in fixed per-call work")
    if c < article_c / 2:
        return f"well below the c = {article_c:.2f} of the article's example"
    return f"close to the c = {article_c:.2f} of the article's example"


def ttft_change(base_ms: float, spec_ms: float, spread_ms: float) -> str:
    """Time to first token without and with speculation."""
    if not _clear(spec_ms - base_ms, spread_ms):
        return (f"Time to first token is about the same with speculation ({base_ms:.2f} ms "
                f"against {spec_ms:.2f} ms, within the spread)")
    if spec_ms > base_ms:
        return (f"Time to first token grows with speculation, from {base_ms:.2f} ms to "
                f"{spec_ms:.2f} ms: both models read the prompt, and the first byte waits "
                f"for a whole cycle")
    return (f"Time to first token falls with speculation, from {base_ms:.2f} ms to "
            f"{spec_ms:.2f} ms: the first cycle can deliver several bytes at once")


def itl_bursts(p50_base: float, p50_spec: float, p99_base: float, p99_spec: float) -> str:
    """Whether the inter-token latency shows bursts (median falls, tail grows)."""
    if p50_spec < p50_base and p99_spec > p99_base:
        return (f"The inter-token latency shows the bursts the simulation predicted: its "
                f"median falls to {p50_spec:.3f} ms while its 99th percentile, the gap "
                f"between cycles, is {p99_spec:.2f} ms against {p99_base:.2f} ms without a "
                f"draft")
    return (f"The inter-token latency does not show the predicted bursts in this run: "
            f"median {p50_spec:.3f} ms against {p50_base:.3f} ms, 99th percentile "
            f"{p99_spec:.2f} ms against {p99_base:.2f} ms without a draft")


def gain_change(rows, repeats: int, *, min_repeats: int = 5) -> str:
    """The gain at the smallest and at the largest load, judged by their quartile ranges.

    Parameters
    ----------
    rows : sequence of mappings
        In the order of the load (batch size or requests in flight), each with
        ``speedup`` (median of the paired ratios) and ``speedup_q1``, ``speedup_q3``.
    repeats : int
        Paired repeats behind each row's quartiles.
    min_repeats : int
        Fewest repeats for which the sentence compares quartile ranges at all (with 3
        values the quartiles are the middle values' neighbours, not a spread).

    Returns
    -------
    str
        A change is called only when the first and the last rows' ranges from the first
        to the third quartile do not overlap; the clause on the rows in between says
        whether the medians move the same way at every step.
    """
    rows = list(rows)
    if len(rows) < 2:
        raise ValueError(f"rows: need at least two loads (got {len(rows)})")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats: must be an integer >= 1 (got {repeats!r})")
    for k, r in enumerate(rows):
        q1, med, q3 = (_finite(f"rows[{k}]['{n}']", r[n])
                       for n in ("speedup_q1", "speedup", "speedup_q3"))
        if not q1 <= med <= q3:
            raise ValueError(f"rows[{k}]: the quartiles must satisfy speedup_q1 <= speedup "
                             f"<= speedup_q3 (got {q1!r}, {med!r}, {q3!r})")
    first, last = rows[0], rows[-1]
    meds = [float(r["speedup"]) for r in rows]
    steps = [b - a for a, b in zip(meds, meds[1:])]
    if repeats < min_repeats:
        return (f"{repeats} paired repeats per load are too few for quartiles to be a spread "
                f"(at least {min_repeats} are needed), so this run does not say whether the "
                f"gain changed")
    overlap = first["speedup_q1"] <= last["speedup_q3"] and last["speedup_q1"] <= first["speedup_q3"]
    if overlap:
        return "the two quartile ranges overlap, so this run cannot tell the two apart"
    fall = meds[-1] < meds[0]
    text = (f"a {'fall' if fall else 'rise'}: the two quartile ranges do not overlap "
            f"({repeats} paired repeats each)")
    if len(rows) > 2:
        same_way = all(d < 0 for d in steps) if fall else all(d > 0 for d in steps)
        text += ("; the median moves that way at every step in between" if same_way else
                 "; the medians do not move the same way at every step ("
                 + ", ".join(f"{m:.2f}" for m in meds) + ")")
    return text


def g_beyond_batch(g_first: float, g_last: float, gamma: int, batch: int) -> str:
    """The batched verification cost against the fully compute-bound ``gamma + 1``.

    ``g_first`` and ``g_last`` are ``g(gamma)`` at batch one and at ``batch``, each in
    steps of the same target at the same batch.
    """
    g_first, g_last = _finite("g_first", g_first), _finite("g_last", g_last)
    verb = "rises" if g_last > g_first else "falls" if g_last < g_first else "stays"
    text = (f"{verb} from {g_first:.2f} target steps at batch one to {g_last:.2f} at batch "
            f"{batch}")
    if g_last > gamma + 1:
        return (text + f", above the γ + 1 = {gamma + 1} steps of a fully compute-bound "
                f"pass: more than arithmetic explains, and this run does not measure why")
    if g_last > g_first:
        return (text + ": the pass grows dearer relative to a step, and this run does not "
                "say which of arithmetic and weight reads grew")
    return text + ", so the pass did not become dearer with the batch in this run"


def server_against_numpy_g(g_numpy: float, g_server: float, positions: int,
                           step_ms_numpy: float, step_ms_server: float) -> str:
    """The same target's verification cost in the book's decoder and on the server.

    Both ``g`` are the cost of verifying ``positions`` positions in steps of the same
    target, each in its own engine (on the server a step inside a generation plus what the
    further positions add to a pass); ``step_ms_*`` are those steps' times in milliseconds.
    Returns whole sentences (capitalised, with the final full stop).
    """
    g_numpy, g_server = _finite("g_numpy", g_numpy), _finite("g_server", g_server)
    step_ms_numpy = _finite("step_ms_numpy", step_ms_numpy)
    step_ms_server = _finite("step_ms_server", step_ms_server)
    text = (f"For the deep target a verification of {positions} positions costs {g_server:.2f} of "
            f"the server's steps and {g_numpy:.2f} of the book's decoder's")
    steps = f"({step_ms_server:.3f} ms against {step_ms_numpy:.3f} ms)"
    if round(g_server, 2) == round(g_numpy, 2):
        return (text + f": the same ratio to the two digits shown. A step takes "
                f"{step_ms_server:.3f} ms on the server and {step_ms_numpy:.3f} ms in the "
                f"book's decoder.")
    if g_server > g_numpy:
        if step_ms_server < step_ms_numpy:
            why = (f"The server's own step is the faster one {steps}, so each added position "
                   f"weighs more against it: its advantage is the step, not the ratio.")
        else:
            why = (f"The server's step is not the faster one {steps}, and this run does not "
                   f"say why its added positions weigh more.")
        return text + ": the server's ratio is the higher. " + why
    return (text + f". The server's kernels make an added position cheaper relative to a "
            f"step {steps}.")


def in_situ_prediction(isolated, in_situ, g_pcts, c_pcts) -> str:
    """How the cost model's predicted range moves when fed the passes timed in the loop.

    Parameters
    ----------
    isolated, in_situ : (float, float)
        The predicted range (lowest, highest) with the micro-benchmarked and with the
        in-loop costs.
    g_pcts, c_pcts : sequence of float
        Per row, the in-loop target pass and draft pass against their micro-benchmarks,
        in percent (positive: dearer in the loop).

    Returns
    -------
    str
        Two or three sentences, each with its full stop.
    """
    import numpy as np

    (a, b), (lo, hi) = ((_finite(f"{n}[0]", r[0]), _finite(f"{n}[1]", r[1]))
                        for n, r in (("isolated", isolated), ("in_situ", in_situ)))
    for n, (x, y) in (("isolated", (a, b)), ("in_situ", (lo, hi))):
        if x > y:
            raise ValueError(f"{n}: must be (lowest, highest) (got ({x!r}, {y!r}))")
    g_pcts = [_finite("g_pcts", x) for x in g_pcts]
    c_pcts = [_finite("c_pcts", x) for x in c_pcts]
    if not g_pcts or len(g_pcts) != len(c_pcts):
        raise ValueError(f"g_pcts, c_pcts: need one value per row in each, at least one "
                         f"row (got {len(g_pcts)} and {len(c_pcts)})")
    gm, cm = float(np.median(g_pcts)), float(np.median(c_pcts))
    if lo > a and hi > b:
        moved = "up"
    elif lo < a and hi < b:
        moved = "down"
    elif (hi - lo) > (b - a):
        moved = "wider"
    elif (hi - lo) < (b - a):
        moved = "narrower"
    else:
        moved = "same"
    moved_text = {"up": "higher than", "down": "lower than", "wider": "a wider range than",
                  "narrower": "a narrower range than",
                  "same": "the same range as"}[moved]
    text = (f"Fed with these in-situ costs, the model predicts {lo:.2f} to {hi:.2f}, "
            f"{moved_text} the {a:.2f} to {b:.2f} of the isolated costs")
    expected = "down" if gm > 0 and cm > 0 else "up" if gm < 0 and cm < 0 else None
    spread = (f"Per row, the in-loop target pass ranged from {min(g_pcts):+.0f}% to "
              f"{max(g_pcts):+.0f}% of its micro-benchmark and the draft pass from "
              f"{min(c_pcts):+.0f}% to {max(c_pcts):+.0f}%.")
    if expected is not None and moved != expected:
        return (text + f", although the median passes were "
                f"{'dearer' if expected == 'down' else 'cheaper'}. {spread} The rows at the "
                f"ends of the range are not the median row.")
    return f"{text}. {spread}"


def geometric_fit(fits, names, level: float = 0.01) -> str:
    """The constant-α (truncated geometric) law against the accepted-length histograms.

    Parameters
    ----------
    fits : mapping language -> mapping
        Per language ``tv`` (histogram against the fitted law), ``p`` (Holm-adjusted
        p-value of a goodness-of-fit test with the fitted parameter counted) and
        ``cycles``.
    names : mapping language -> str
    level : float
        Family-wise level at which a fit counts as rejected.
    """
    level = _finite("level", level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: must be in (0, 1) (got {level!r})")
    if not fits:
        raise ValueError("fits: need at least one language")
    for k, f in fits.items():
        p, tv = _finite(f"fits[{k!r}]['p']", f["p"]), _finite(f"fits[{k!r}]['tv']", f["tv"])
        if not (0.0 <= p <= 1.0 and 0.0 <= tv <= 1.0):
            raise ValueError(f"fits[{k!r}]: p and tv must be in [0, 1] (got {p!r}, {tv!r})")
        if k not in names:
            raise ValueError(f"names: no name for the language {k!r}")
    rejected = [k for k, f in fits.items() if f["p"] <= level]
    worst = max(fits, key=lambda k: fits[k]["tv"])
    tv = (f"its largest total variation to a measured histogram is "
          f"{fits[worst]['tv']:.3f}, in {names[worst]}")
    if not rejected:
        return (f"not rejected in any language (Holm-adjusted goodness-of-fit test, level "
                f"{level:g}); {tv}")
    which = ", ".join(f"{names[k]} (p = {pvalue_text(fits[k]['p'])})" for k in rejected)
    kept = len(fits) - len(rejected)
    return (f"rejected in {len(rejected)} of {len(fits)} languages, {which}"
            + ("" if not kept else " and not in the other" if kept == 1
               else f" and not in the other {kept}")
            + f" (Holm-adjusted, level {level:g}). With "
              f"{min(int(f['cycles']) for f in fits.values()):,} cycles or more per language "
              f"the test sees departures too small to matter: {tv}")


def rule_comparison(match: float, rejection: float, temperature: float) -> str:
    """The two verification rules' per-position acceptance on the same models."""
    if temperature == 0 or abs(match - rejection) < 1e-12:
        return (f"at temperature {temperature:g} the two rules accept the same ({match:.3f} "
                f"per position): both accept exactly when the draft's top byte is the "
                f"target's")
    who = "the rejection rule" if rejection > match else "llama.cpp's matching rule"
    return (f"at temperature {temperature:g} {who} accepts more per position "
            f"({rejection:.3f} for the rejection rule, {match:.3f} for the matching rule)"
            + (": it keeps a draft token the target gives mass, not only one the target "
               "draws" if rejection > match else ""))


def served_speedup(speedup: float, spread: float, temperature: float) -> str:
    """The server's paired speedup at one temperature, median over languages."""
    return (f"at temperature {temperature:g} the draft gives the server "
            f"{versus_one(speedup, spread)}")


def served_vs_book(server: float, book: float, spread: float) -> str:
    """The server's speedup against the book's decoder's at comparable settings."""
    if not _clear(server - book, spread):
        return (f"about the same as the book's decoder ({server:.2f} against {book:.2f}, "
                f"within the spread)")
    return (f"{'better' if server > book else 'worse'} than the book's decoder "
            f"({server:.2f} against {book:.2f})")


def disturbance_note(spread: float, threshold: float, load: float, cores: int) -> str:
    """A visible note when the micro-benchmarks were disturbed, else an empty string.

    ``spread`` is the disturbance indicator: the largest ``median / minimum - 1`` of the
    timed target step over the micro-benchmarks (0 on a quiet machine); ``load`` the
    largest 1-minute load average seen during the run.
    """
    if spread <= threshold and load <= cores:
        return ""
    return (f"**This run was disturbed.** The median target step exceeded its fastest "
            f"repeat by {spread:.0%} (the threshold is {threshold:.0%}) and the machine's "
            f"load average reached {load:.1f} on {cores} cores: other processes took the "
            f"processor while it was timed. Medians over interleaved repeats still compare "
            f"settings fairly, but absolute times and small ratios are less reliable.")


def goodput_trend(rates, base, spec) -> str:
    """Goodput of the two servers across the request-rate sweep."""
    wins = sum(s > b for b, s in zip(base, spec))
    losses = sum(s < b for b, s in zip(base, spec))
    if wins == losses == 0:
        return "the two servers reach the same goodput at every rate"
    if losses == 0:
        return f"the draft raises goodput at {wins} of {len(rates)} rates and lowers it at none"
    if wins == 0:
        return f"the draft lowers goodput at {losses} of {len(rates)} rates and raises it at none"
    return (f"the draft raises goodput at {wins} and lowers it at {losses} of "
            f"{len(rates)} rates")


def g_against_lines(curves) -> str:
    """Where measured verification costs lie against the lines g = 1 and g = γ + 1.

    Parameters
    ----------
    curves : mapping name -> mapping gamma -> g
        E.g. ``{"deep target": {1: 1.4, 2: 1.9}, "wide target": {1: 2.3, 2: 2.6}}``.

    Returns
    -------
    str
        Sentences for Fig. 8.3's caption naming every curve and draft length whose
        ``g`` lies above ``gamma + 1`` or below 1, or saying that none does.
    """
    groups: dict[tuple, list[str]] = {}
    outside = total = 0
    for name, g in curves.items():
        above = tuple(k for k in sorted(g) if g[k] > k + 1)
        below = tuple(k for k in sorted(g) if g[k] < 1)
        outside += len(above) + len(below)
        total += len(g)
        for side, ks in (("above", above), ("below", below)):
            if ks:
                groups.setdefault((side, ks), []).append(name)
    if not groups:
        return "Every measured g lies between the two grey lines."
    parts = []
    for (side, ks), names in groups.items():
        who = ("the " + spoken_list(names)) if len(names) == 1 else \
            "the " + spoken_list([n.removesuffix(" target") for n in names]) + " targets"
        verb = "is" if len(names) == 1 else "are"
        line, cost = (("g = γ + 1", "more than γ + 1 single steps") if side == "above"
                      else ("g = 1", "less than one single step"))
        parts.append(f"{who} {verb} {side} {line} at γ = {spoken_list(ks)} (a pass costs {cost} "
                     f"of the same target)")
    parts.append("every other measured g lies between the two grey lines" if outside < total
                 else "no measured g lies between the two grey lines")
    return " ".join(p[0].upper() + p[1:] + "." for p in parts)
def pays_verdict(speedup: float, spread: float, mark: float, setting: str) -> str:
    """The best measured setting against break-even (1.0), given its spread (IQR).

    ``mark`` is kept for callers and not used: a speedup is judged against break-even,
    the one mark the prose needs no reason for.
    """
    head = f"{setting} the draft gives {speedup:.2f}× (interquartile range {spread:.2f})"
    if speedup - spread / 2 > 1:
        return f"{head}: faster than plain decoding by more than half its spread"
    if speedup + spread / 2 < 1:
        return f"{head}: slower than plain decoding by more than half its spread"
    return f"{head}: within half its spread of break-even"


def model_agreement(predicted: float, measured: float, tolerance: float) -> str:
    """The cost model's prediction against the measured speedup (relative error)."""
    err = predicted / measured - 1.0
    side = "above" if err > 0 else "below"
    if abs(err) < 0.005:
        return (f"the cost model predicts {predicted:.2f}×, the measurement to within 1%")
    if round(abs(err), 2) <= tolerance:      # judged on the percentage the sentence prints
        return (f"the cost model predicts {predicted:.2f}×, {abs(err):.0%} {side} the "
                f"measurement, within {tolerance:.0%}")
    if err > 0:        # optimistic: the cycles cost more than the passes the model adds up
        why = ("work it does not see (bookkeeping, sampling, per-cycle steps) costs a "
               "visible share of a cycle")
    else:              # pessimistic: the timings cost more than the same work in the cycles
        why = ("its timings, taken between requests, may run colder in the processor's "
               "caches than a stream; this run does not time that")
    return (f"the cost model predicts {predicted:.2f}×, {abs(err):.0%} {side} the "
            f"measurement: more than {tolerance:.0%} off, as {why}")


def scale_trend(sizes, speedups) -> str:
    """How the median speedup moves from the smallest to the largest target."""
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    lo, hi = speedups[order[0]], speedups[order[-1]]
    rising = all(speedups[a] <= speedups[b] for a, b in zip(order, order[1:]))
    if hi > lo:
        return (f"the speedup grows with the weights, from {lo:.2f}× for the smallest target "
                f"to {hi:.2f}× for the largest" + ("" if rising else
                                                   ", though not at every step"))
    return (f"the speedup does not grow with the weights here ({lo:.2f}× for the smallest "
            f"target, {hi:.2f}× for the largest)")


def grown_against_base(base: dict, grown: dict, names: dict) -> str:
    """The grown target's held-out bits per byte against its base model's, per language.

    ``base`` and ``grown`` map a language code to bits per byte; ``names`` maps it to the
    language's name. A difference under 0.005 bits per byte counts as equal.
    """
    diff = {lang: grown[lang] - base[lang] for lang in base}
    worse = [lang for lang, d in diff.items() if d >= 0.005]
    better = [lang for lang, d in diff.items() if d <= -0.005]
    lo, hi = min(diff.values()), max(diff.values())
    if len(worse) == len(diff):
        return (f"slightly worse than its base in every language, by {lo:.3f} to {hi:.3f} "
                f"bits per byte")
    if len(better) == len(diff):
        return (f"better than its base in every language, by {-hi:.3f} to {-lo:.3f} bits "
                f"per byte")
    parts = []
    if better:
        parts.append("better in " + ", ".join(names[l] for l in better))
    if worse:
        parts.append("worse in " + ", ".join(names[l] for l in worse))
    same = [lang for lang in diff if lang not in worse and lang not in better]
    if same:
        parts.append("level in " + ", ".join(names[l] for l in same))
    return (f"within {max(abs(lo), abs(hi)):.3f} bits per byte of its base: "
            + "; ".join(parts))


def g_curve(g_by_gamma) -> str:
    """The verification cost for every draft length, and what each added position costs.

    ``g_by_gamma[k - 1]`` is ``g(k)``, the cost of verifying ``k + 1`` positions in
    steps of one position; the added cost per position is ``(g(gamma) - 1) / gamma``.
    """
    gs = [float(g) for g in g_by_gamma]
    gam = f"1 to {len(gs)}" if len(gs) > 1 else "1"
    pos = f"2 to {len(gs) + 1}" if len(gs) > 1 else "2"
    added = (gs[-1] - 1.0) / len(gs)
    text = (f"a verification of {pos} positions (γ = {gam}) costs "
            f"g = {', '.join(f'{g:.2f}' for g in gs)} steps: each added position costs "
            f"{added:.2f} of a step on average")
    if added <= 0.5:
        return text + ", far less than a step of its own"
    if added < 0.8:
        return text + ", less than a step of its own but not by much"
    return text + ", about as much as a step of its own"


def batching_growth(plain_growth: float, spec_growth: float, gamma: int) -> str:
    """How each server's throughput grows from the fewest to the most requests in flight.
    One or two sentences, the first in lower case."""
    text = (f"the plain server's throughput grows {plain_growth:.2f}× and the speculative "
            f"server's {spec_growth:.2f}×")
    if plain_growth > spec_growth:
        return (text + f": the plain server's batched passes still read the weights once, "
                f"while the speculative server's passes already carry up to {gamma + 1} "
                f"positions per request. Batching uses up the memory-bound regime that "
                f"speculation relies on at batch size one")
    return (text + ": batching helped the speculative server at least as much, so its "
            "throughput relative to the plain server's did not fall with the load")


def cycle_cost_change(small: dict, large: dict, gamma: int) -> str:
    """Which input of the cycle cost ``gamma c + g`` moved from the small to the large target.

    ``small`` and ``large`` map ``"c"`` and ``"g"`` to the measured values of the smallest
    and of the largest target. One or two sentences, the first in lower case.
    """
    from_c = gamma * (small["c"] - large["c"])        # steps saved by a cheaper draft share
    from_g = small["g"] - large["g"]                  # steps saved by a cheaper verification
    before, after = gamma * small["c"] + small["g"], gamma * large["c"] + large["g"]
    text = (f"a cycle costs γc + g = {before:.2f} steps of the smallest target and "
            f"{after:.2f} of the largest")
    grew = ": the draft is the same, and the target's step grew around it"
    if after >= before:
        return text + ": the larger target did not make a cycle cheaper in its own steps"
    if from_g < 0:
        return (text + f". The draft's share fell by {from_c:.2f} steps while the verification "
                f"pass cost {-from_g:.2f} more" + grew)
    if from_c < 0:
        return (text + f". The verification pass fell by {from_g:.2f} steps while the draft's "
                f"share cost {-from_c:.2f} more")
    if from_c >= 2 * from_g:
        return (text + f". Most of the difference is the draft's share ({from_c:.2f} of "
                f"the {before - after:.2f} steps)" + grew)
    if from_g >= 2 * from_c:
        return (text + f". Most of the difference is the verification pass ({from_g:.2f} "
                f"of the {before - after:.2f} steps)")
    return (text + f". The draft's share and the verification pass each account for part of "
            f"the difference ({from_c:.2f} and {from_g:.2f} steps)")


def pass_disturbance(disturbance: float, threshold: float, waiting: float | None = None,
                     quiet: float = 0.05) -> str:
    """Whether the timed steps and passes of a run were disturbed.

    ``disturbance`` is the largest ``median / fastest - 1`` of a timing's wall time (a
    step's or a pass's) over a window. Where the servers' CPU times were read,
    ``waiting`` (the largest share of a window's timed wall time that the decoding
    threads spent waiting for a processor) says
    directly whether other processes held the processor; a spread of wall times without
    waiting is the timings' own variation (caches, the memory system), not another
    process. Without ``waiting`` the spread alone decides, against ``threshold``.
    """
    _finite("disturbance", disturbance)
    _finite("threshold", threshold)
    if waiting is None or not math.isfinite(waiting):
        if disturbance > threshold:
            return (f"the largest disturbance of a timing's wall time (median over fastest "
                    f"repeat, minus one) was {disturbance:.0%}, above the {threshold:.0%} "
                    f"that marks a disturbed run: other processes probably held the "
                    f"processor, and absolute times are less reliable")
        return (f"the largest disturbance of a timing's wall time (median over fastest "
                f"repeat, minus one) was {disturbance:.0%}, within the {threshold:.0%} of an "
                f"undisturbed run")
    spread = (f"A target's timing varied in wall time by up to {disturbance:.0%} (median "
              f"over fastest, minus one)")
    if waiting > quiet:
        return (f"the decoding threads waited for a processor during up to {waiting:.0%} of "
                f"one window's timed wall time, above the {quiet:.0%} of a quiet machine. "
                f"{spread}. The model's c and g come from CPU time, which waiting does not "
                f"inflate, but absolute times are less reliable")
    return (f"the decoding threads waited for a processor during at most "
            f"{max(waiting, 0.0):.0%} of any target's window's timed wall time, so other "
            f"processes took little processor time from them. {spread}, from the timings "
            f"themselves or other processes' use of memory, not from waiting")


def cost_clock(predicted_cpu: float, predicted_wall: float, measured: float,
               waiting: float, quiet: float = 0.05, agree: float = 0.02) -> str:
    """The cost model fed CPU time against the same model fed wall time, and why they
    differ: the share of the timings' wall time the decoding threads spent waiting.

    ``waiting`` is ``1 - cpu / wall`` of the window's median steps and pass (it can be
    slightly negative on an idle machine: the CPU time includes a few microseconds of
    bookkeeping that the engine's own timer leaves out; NaN where the system reports no
    thread times, and then the model was fed wall time only); below ``quiet`` the machine
    counts as quiet, and the two predictions agree when their relative errors differ by at
    most ``agree``. Returns two sentences, the first in lower case.
    """
    for name, x in (("predicted_cpu", predicted_cpu), ("predicted_wall", predicted_wall),
                    ("measured", measured), ("quiet", quiet), ("agree", agree)):
        _finite(name, x)
    if measured <= 0 or predicted_cpu <= 0 or predicted_wall <= 0:
        raise ValueError("predicted_cpu, predicted_wall, measured: must be positive")
    if not isinstance(waiting, (int, float)) or math.isinf(waiting):
        raise ValueError(f"waiting: must be a finite number or NaN (got {waiting!r})")
    if math.isnan(waiting):
        return ("this system does not report its threads' CPU time, so the model's c and g "
                "come from wall time, which grows while a thread waits for a processor")
    e_cpu, e_wall = predicted_cpu / measured - 1.0, predicted_wall / measured - 1.0
    fed = (f"fed the wall-time medians instead, the model would have predicted "
           f"{predicted_wall:.2f}× ({signed_percent(e_wall)}, against "
           f"{signed_percent(e_cpu)} from CPU time)")
    waited = (f"The decoding threads waited for a processor during {max(waiting, 0.0):.0%} "
              f"of the pooled timings' wall time")
    if waiting < quiet:
        if abs(e_cpu - e_wall) <= agree:
            return f"{fed}. {waited}, a quiet machine, on which the two clocks agree"
        return (f"{fed}. {waited}, a quiet machine, so the clocks differ by what the CPU "
                f"time counts beyond the engine's own timer, not by waiting")
    closer = "closer to" if abs(e_cpu) < abs(e_wall) else "no closer to"
    return f"{fed}. {waited}, and the CPU-time model is {closer} the measurement"


def tail_label(n: int) -> str:
    """An honest name for the tail of ``n`` values: ``"p99"`` when at least 100 values put
    one percent of them beyond it, else ``"max"`` (the largest of fewer than 100 values is
    what a 99th percentile of them would report)."""
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"n: must be an integer >= 1 (got {n!r})")
    return "p99" if n >= 100 else "max"


def _interval(low: float, high: float, confidence: float) -> str:
    return f"{confidence:.0%} interval over prompts {low:.2f} to {high:.2f}"


def interval_verdict(speedup: float, low: float, high: float,
                     confidence: float = 0.95) -> str:
    """A speedup against break-even, judged by its interval over prompts."""
    where = f"{speedup:.2f}× ({_interval(low, high, confidence)})"
    if low > 1:
        return f"a gain, {where}"
    if high < 1:
        return f"a slowdown, {where}"
    return f"no difference this run can tell from break-even, {where}"


def pays_interval(speedup: float, low: float, high: float, mark: float, setting: str,
                  confidence: float = 0.95) -> str:
    """A speedup against break-even (1.0), judged by its interval over prompts.

    ``mark`` is kept for callers and not used: the comparison a reader needs is with
    plain decoding, faster or slower, and any other mark would need a reason the prose
    gives.
    """
    head = f"{setting} the draft gives {speedup:.2f}× ({_interval(low, high, confidence)})"
    if low > 1:
        return f"{head}: faster than plain decoding, the whole interval above 1"
    if high < 1:
        return f"{head}: slower than plain decoding, the whole interval below 1"
    return f"{head}: the interval spans 1, so this run cannot tell it from plain decoding"


def repetition_note(greedy: float, sampled: float) -> str:
    """Repetition of the greedy texts against the sampled ones (median share of distinct
    byte 4-grams per text; a loop of period L gives about 1/L)."""
    text = (f"only {greedy:.0%} of a greedy text's byte 4-grams are distinct (median), "
            f"against {sampled:.0%} of a sampled text's")
    if greedy < 0.5 and greedy < sampled:
        return (text + ": the book's models fall into loops at temperature 0, so greedy "
                "speedups measure the loop more than the language")
    if greedy < sampled:
        return text + ": the greedy texts repeat more, but most of their 4-grams are new"
    return text + ": the greedy texts repeat no more than the sampled ones"


def model_errors(errors, tolerance: float) -> str:
    """The cost model's relative error over the repeats of one run (each repeat's
    prediction against the same repeat's measurement)."""
    errs = [float(e) for e in errors]
    within = sum(round(abs(e), 2) <= tolerance for e in errs)
    text = ("per repeat the cost model erred by "
            + ", ".join(signed_percent(e) for e in errs))
    if within == len(errs):
        return text + f", within {tolerance:.0%} every time"
    if within == 0:
        return text + f", never within {tolerance:.0%}"
    return text + f", within {tolerance:.0%} in {within} of {len(errs)}"


def bandwidth_share(achieved: float, measured: float) -> str:
    """Weights read per second by a target step against the measured read bandwidth."""
    share = achieved / measured
    text = (f"{achieved:.1f} GB/s of weights, {share:.0%} of the {measured:.1f} GB/s one "
            f"thread reads here")
    if share >= 0.6:
        return text + ": the step is bound by memory bandwidth"
    if share >= 0.3:
        return text + ": memory traffic is a large share of the step, not all of it"
    return text + ": far from the memory bound, so most of the step is other work"


def goodput_limits(factors, base, spec) -> str:
    """The draft's effect on goodput as the limits vary (one value per limit factor, each
    summed over the sweep's rates); limits under which the two servers tie are named."""
    wins = [f for f, b, x in zip(factors, base, spec) if x > b]
    losses = [f for f, b, x in zip(factors, base, spec) if x < b]
    ties = [f for f, b, x in zip(factors, base, spec) if x == b]

    def limits(fs):
        return (f"the limit of factor {fs[0]:g}" if len(fs) == 1 else
                "the limits of factors " + ", ".join(f"{f:g}" for f in fs))

    if not wins and not losses:
        return "the two servers reach the same goodput under every limit"
    tied = f"; the two tie under {limits(ties)}" if ties else ""
    if not losses or not wins:
        verb, some = ("raises", wins) if wins else ("lowers", losses)
        if not ties:
            return (f"the draft {verb} goodput under every limit "
                    f"(factors {', '.join(f'{f:g}' for f in some)})")
        return f"the draft {verb} goodput under {limits(some)}{tied}"
    return (f"the draft raises goodput under {limits(wins)} and lowers it under "
            f"{', '.join(f'{f:g}' for f in losses)}{tied}: which server wins depends on "
            f"the limit")


def best_language(rows, names) -> str:
    """The languages' speedups beside the headline, the best named without promoting it."""
    parts = [f"{names[r['language']]} {r['speedup']:.2f}× ({r['low']:.2f} to {r['high']:.2f})"
             for r in rows]
    best = max(rows, key=lambda r: r["speedup"])
    worst = min(rows, key=lambda r: r["speedup"])
    overlap = best["low"] <= worst["high"]
    return ("per language, " + ", ".join(parts) + ("; the best and the worst intervals "
            "overlap, so this run does not rank the languages" if overlap
            else f"; {names[best['language']]} is ahead of {names[worst['language']]} by "
            f"more than their intervals"))


def _check_fields(name: str, check) -> dict:
    if not isinstance(check, dict) or not isinstance(check.get("passed"), bool):
        raise ValueError(f"{name}: must be a per-token check's dict with a bool 'passed' "
                         f"(got {check!r:.80})")
    for key in ("detectable_tv", "tolerance", "pvalue"):
        _finite(f"{name}[{key!r}]", check.get(key))
    return check


def _up(x: float, digits: int = 3) -> str:
    """``x`` rounded up at ``digits`` decimals: a resolution is never stated finer than it is."""
    import math

    return f"{math.ceil(x * 10 ** digits - 1e-9) / 10 ** digits:.{digits}f}"


#: How :func:`pertoken_verdict` names each checked configuration by default.
PERTOKEN_SUBJECTS = {"plain": "without the draft the server", "speculative": "with the draft it"}


def pertoken_verdict(result, names=None, subjects=None) -> str:
    """What one target's per-token checks found (:func:`specbook.served.pertoken_exactness`,
    or any dict with a ``plain`` and/or a ``speculative`` check and ``controls``): each
    configuration's verdict with the error it would have detected, and whether the
    controls failed as they must. ``subjects`` renames configurations (default
    :data:`PERTOKEN_SUBJECTS`), ``names`` the controls. Returns the configurations'
    verdicts (in lower case), then a sentence on the controls."""
    subjects = {**PERTOKEN_SUBJECTS, **dict(subjects or {})}
    configs = [(k, _check_fields(k, result[k])) for k in ("plain", "speculative") if k in result]
    if not configs:
        raise ValueError("result: needs a 'plain' or a 'speculative' check")
    controls = {k: _check_fields(f"controls[{k!r}]", c) for k, c in result["controls"].items()}
    def one(name, c):
        if c["passed"]:
            return (f"{name} passes (no per-token error above {_up(c['detectable_tv'])} in "
                    f"{c['tokens']:,} tokens)")
        return (f"{name} **fails** (Holm-adjusted p-value {pvalue_text(c['pvalue'])}, "
                f"{c['tokens']:,} tokens)")
    text = "; ".join(one(subjects[k], c) for k, c in configs)
    names = dict(names or {})
    missed = [names.get(k, k) for k, c in controls.items() if c["passed"]]
    if not missed:
        if controls:
            text += (". Every positive control fails (largest Holm-adjusted p-value "
                     f"{pvalue_text(max(c['pvalue'] for c in controls.values()))}), so the "
                     "check sees errors of these kinds")
    else:
        text += (". The control" + ("s " if len(missed) > 1 else " ") + " and ".join(missed)
                 + (" pass" if len(missed) > 1 else " passes")
                 + ", so at these requests the check cannot see an error of that kind")
    return text


def _mean_cell(means, key) -> str:
    return f"{means[key]:.3f}" if key in means else "–"


def pertoken_lines(result, names) -> list:
    """Markdown rows of a per-token table: one row per configuration and control."""
    lines = ["| server | verdict | requests | tokens | detectable TV | tolerance | "
             "Holm p-value | mean PIT, target order | mean PIT, draft/target order |",
             "|:--|:--|--:|--:|--:|--:|--:|--:|--:|"]
    rows = [*((k, result[k]) for k in ("plain", "speculative") if k in result),
            *((k, c) for k, c in result["controls"].items())]
    for key, c in rows:
        c = _check_fields(key, c)
        means = c.get("means", {})
        lines.append(f"| {names.get(key, key)} | {'passes' if c['passed'] else '**fails**'} | "
                     f"{c['requests']:,} | {c['tokens']:,} | {_up(c['detectable_tv'])} | "
                     f"{sci(c['tolerance'])} | {pvalue_text(c['pvalue'])} | "
                     f"{_mean_cell(means, 'target')} | {_mean_cell(means, 'draft_over_target')} |")
    return lines


def draft_ceiling(match_draft: float, match_ideal: float, served: float, model_ideal: float,
                  mark: float, gamma: int) -> str:
    """What a better greedy draft could give under llama.cpp's rule (accept while the
    target's sample equals the draft's arg-max) at draft length ``gamma``: this draft's
    match probability and the ideal one (the target's own arg-max) per position of the
    served texts, and the cost model fed with the ideal at the same ``gamma``, ``c`` and
    ``g`` (``model_ideal``: every position kept with probability ``match_ideal``, so
    ``E = (1 - match_ideal ** (gamma + 1)) / (1 - match_ideal)``), judged against
    break-even. ``mark`` is kept for callers and not used (see
    :func:`pays_interval`). Returns short sentences, the first in lower case."""
    for name, x in (("match_draft", match_draft), ("match_ideal", match_ideal),
                    ("served", served)):
        if not 0.0 <= _finite(name, x) <= 1.0:
            raise ValueError(f"{name}: must be a probability in [0, 1] (got {x!r})")
    if match_draft > match_ideal + 1e-12:
        raise ValueError(f"match_draft: cannot exceed match_ideal, the largest probability "
                         f"at each position ({match_draft!r} > {match_ideal!r})")
    if not _finite("model_ideal", model_ideal) > 0:
        raise ValueError(f"model_ideal: must be a speedup > 0 (got {model_ideal!r})")
    if not _finite("mark", mark) > 0:
        raise ValueError(f"mark: must be a speedup > 0 (got {mark!r})")
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma: must be an integer >= 1 (got {gamma!r})")
    verdict = ("slower than plain decoding" if model_ideal < 1 else
               "no faster than plain decoding" if model_ideal == 1 else
               "faster than plain decoding")
    text = (f"the target's sample equals this draft's arg-max at {match_draft:.0%} of "
            f"positions and its own arg-max at {match_ideal:.0%}, the cap for any greedy "
            f"draft. The speculative server reported {served:.0%} of drafted tokens "
            f"accepted, fewer, since a token counts only if every earlier one in its cycle "
            f"was. A draft at the cap, every position kept with probability "
            f"{match_ideal:.2f} (E = {float(cost.expected_tokens(match_ideal, gamma)):.2f} "
            f"tokens per pass), would give {model_ideal:.2f}× in the cost model: {verdict}")
    if model_ideal < 1:
        return (text + ". A rule that samples the draft and accepts with min(1, p/q) is "
                "not capped this way")
    return text
