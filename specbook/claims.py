"""Every numeric claim of the article, in one table, each with a way to recompute it.

A claim records where the article makes it (section), what it says (in English), the
value it states, the tolerance implied by how the article rounds it (half a unit of the
last printed digit, or 0 for exact integers), and a ``recompute`` callable that derives
the value from the library alone. Chapters call :func:`check` on the values they
compute; the tests and the book's ledger call :func:`ledger`, which recomputes them all.

Most claims are equalities up to rounding (``relation="approx"``); a claim phrased as
an inequality ("differs by less than 0.0016") uses ``relation="lt"``.

References
----------
.. [1] The article analysed by the book (24 Sep 2026), Sec. 1-8.
.. [2] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023, Sec. 2-3, App. A.1.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np

from specdec import simulate, stats, step as token
from specdec.rules import token as tokenrule
from specdec.laws import tv_distance

__all__ = ["Claim", "CLAIMS", "RELATIONS", "claim", "check", "ledger", "article_run_frequencies"]

#: Relations a claim can assert between the recomputed value and the stated one.
RELATIONS: tuple[str, ...] = ("approx", "lt")


@dataclass(frozen=True)
class Claim:
    """One numeric statement of the article.

    Attributes
    ----------
    key : str
        Unique identifier, ``s<section>_<what>`` (e.g. ``"s3_tv"``).
    section : int
        Section of the article (1-8).
    text : str
        The statement, in one English sentence.
    stated : float
        The value the article prints.
    tolerance : float
        Allowed ``|value - stated|`` for ``relation="approx"`` (half a unit of the
        article's last digit; 0 for exact integers). Unused for ``"lt"``.
    recompute : callable
        No-argument function returning the value computed with the library.
    relation : str
        ``"approx"``: ``|value - stated| <= tolerance``; ``"lt"``: ``value < stated``.
    """

    key: str
    section: int
    text: str
    stated: float
    tolerance: float
    recompute: Callable[[], float]
    relation: str = "approx"

    def holds(self, value: float) -> bool:
        """Whether ``value`` satisfies the claim."""
        value = float(value)
        if math.isnan(value):
            return False
        if self.relation == "lt":
            return value < self.stated
        return abs(value - self.stated) <= self.tolerance


# --------------------------------------------------------------------------------------
# Shared computations for sections 1-4 (the A, B, C example and the article's run).
# --------------------------------------------------------------------------------------

_P = np.array(token.ARTICLE_P)
_Q = np.array(token.ARTICLE_Q)
_A, _B, _C = 0, 1, 2


@lru_cache(maxsize=1)
def _article_counts() -> tuple[tuple[int, ...], tuple[int, ...]]:
    run = simulate.article_reference_run()
    return tuple(run["correct"]), tuple(run["fallback_p"])


def article_run_frequencies() -> dict[str, np.ndarray]:
    """Frequencies of the article's run (:func:`specdec.simulate.article_reference_run`).

    Computed once per process and cached (the pure-Python run takes about a second).

    Returns
    -------
    dict of str to numpy.ndarray
        ``{"correct": (3,), "fallback_p": (3,)}`` frequencies of A, B, C over 200 000
        trials with seed 20260923.

    Examples
    --------
    >>> article_run_frequencies()["correct"].round(5).tolist()
    [0.50009, 0.29844, 0.20147]
    """
    correct, wrong = _article_counts()
    n = sum(correct)
    return {"correct": np.array(correct) / n, "fallback_p": np.array(wrong) / n}


def _accept(i: int) -> float:
    return float(token.acceptance_probabilities(_P, _Q)[i])


def _mass(i: int) -> float:
    return float(token.accepted_mass(_P, _Q)[i])


def _fallback(i: int) -> float:
    return float(token.output_law(_P, _Q, tokenrule.FALLBACK_P)[i])


def _freq(rule: str, i: int) -> float:
    return float(article_run_frequencies()[rule][i])


def _deficit_outside_a() -> float:
    deficit = _P - token.accepted_mass(_P, _Q)
    return float(deficit[[_B, _C]].sum())


def _tv_attained_on_a() -> float:
    law = token.output_law(_P, _Q, tokenrule.FALLBACK_P)
    event = np.flatnonzero(_P > law)  # the set S attaining max_S |p(S) - law(S)|
    return 1.0 if event.tolist() == [_A] else 0.0


def _mass_identity_error() -> float:
    s = token.step_law(_P, _Q)
    return float(np.max(np.abs(s.m + s.z * s.residual - _P)))


def _max_dev_correct() -> float:
    return float(np.max(np.abs(article_run_frequencies()["correct"] - _P)))


def _per_symbol(key: str, section: int, text: str, stated, tolerance: float,
                value: Callable[[int], float]) -> tuple[Claim, ...]:
    """One claim per symbol A, B, C: ``key`` and ``text`` formatted with the symbol (and,
    in ``text``, its stated value), recomputed as ``value(index of the symbol)``."""
    return tuple(Claim(key.format(name), section, text.format(name, v), v, tolerance,
                       lambda i=i: value(i))
                 for name, i, v in zip("ABC", (_A, _B, _C), stated))


def _symbol_claims(name: str, i: int, proposed, accepted, contributed) -> tuple[Claim, ...]:
    """Section 2's three claims on one symbol: q(x), min(1, p(x)/q(x)) and the accepted
    mass q(x) min(1, p(x)/q(x)); each argument is (text, stated value[, tolerance])."""
    (tq, vq), (ta, va, tol), (tm, vm) = proposed, accepted, contributed
    return (Claim(f"s2_q_{name}", 2, tq, vq, 0.005, lambda: float(_Q[i])),
            Claim(f"s2_accept_{name}", 2, ta, va, tol, lambda: _accept(i)),
            Claim(f"s2_contrib_{name}", 2, tm, vm, 0.005, lambda: _mass(i)))


_SECTION_1_4: tuple[Claim, ...] = (
    # Section 2: account for the mass before coding
    *_symbol_claims("A", _A, ("A is proposed in 20% of the trials: q(A) = 0.20.", 0.20),
                    ("A is always accepted when proposed: min(1, p(A)/q(A)) = 1.", 1.0, 0.0),
                    ("A contributes accepted mass 0.20.", 0.20)),
    *_symbol_claims("B", _B, ("B is proposed with probability 0.50.", 0.50),
                    ("Only 60% of the proposals of B are accepted.", 0.60, 0.005),
                    ("B contributes accepted mass 0.30.", 0.30)),
    *_symbol_claims("C", _C, ("C is proposed with probability 0.30.", 0.30),
                    ("A proposal of C is accepted with probability 2/3.", 2 / 3, 1e-12),
                    ("C contributes 0.30 x 2/3 = 0.20.", 0.20)),
    Claim("s2_accepted_mass", 2, "The total accepted mass is 0.70.",
          0.70, 0.005, lambda: token.acceptance_rate(_P, _Q)),
    Claim("s2_missing_mass", 2, "0.30 is missing to complete the law (rejection probability Z).",
          0.30, 0.005, lambda: token.rejection_probability(_P, _Q)),
    Claim("s2_deficit_A", 2, "The deficit with respect to the target at A is 0.30.",
          0.30, 0.005, lambda: float(_P[_A] - _mass(_A))),
    Claim("s2_deficit_outside_A", 2, "All of the deficit is at A: none at B or C.",
          0.0, 1e-12, _deficit_outside_a),
    Claim("s2_residual_A", 2, "The residual law puts all its mass on A.",
          1.0, 1e-12, lambda: float(token.residual(_P, _Q)[_A])),
    Claim("s2_equal_laws_z", 2, "If p = q then Z = 0 (every proposal is accepted).",
          0.0, 0.0, lambda: token.rejection_probability(_P, _P)),
    # Section 3: counterexample "if rejected, fall back to p"
    *_per_symbol("s3_wrong_{}", 3, "Falling back to p gives {} probability {:.2f}.",
                 (0.35, 0.39, 0.26), 0.005, _fallback),
    Claim("s3_target_A", 3, "The target probability of A is 0.50.",
          0.50, 0.005, lambda: float(_P[_A])),
    Claim("s3_tv", 3, "The total variation distance between the flawed law and p is 0.15.",
          0.15, 0.005, lambda: tv_distance(token.output_law(_P, _Q, tokenrule.FALLBACK_P), _P)),
    Claim("s3_tv_gap_A", 3, "On the event {A}: 0.50 versus 0.35, a difference of 0.15.",
          0.15, 0.005, lambda: float(_P[_A] - _fallback(_A))),
    Claim("s3_tv_event_is_A", 3, "The event {A} alone attains the TV distance (1 = yes).",
          1.0, 0.0, _tv_attained_on_a),
    # Section 4: a reproducible experiment
    Claim("s4_trials", 4, "The experiment runs 200,000 trials.",
          200_000.0, 0.0, lambda: float(sum(_article_counts()[0]))),
    Claim("s4_seed", 4, "The run uses random.Random with seed 20260923.",
          20260923.0, 0.0, lambda: float(simulate.ARTICLE_SEED)),
    *_per_symbol("s4_target_{}", 4, "Table: target probability of {} is {:.1f}.",
                 (0.5, 0.3, 0.2), 0.05, lambda i: float(_P[i])),
    *_per_symbol("s4_correct_obs_{}", 4, "Table: correct variant, observed frequency of {} {:.5f}.",
                 (0.50009, 0.29844, 0.20147), 5e-6, lambda i: _freq("correct", i)),
    *_per_symbol("s4_wrong_limit_{}", 4, "Table: flawed variant, limit law at {} {:.2f}.",
                 (0.35, 0.39, 0.26), 0.005, _fallback),
    *_per_symbol("s4_wrong_obs_{}", 4, "Table: flawed variant, observed frequency of {} {:.5f}.",
                 (0.35005, 0.38831, 0.26164), 5e-6, lambda i: _freq("fallback_p", i)),
    Claim("s4_max_dev_correct", 4,
          "In this run the correct frequencies differ from the target by less than 0.0016.",
          0.0016, 0.0, _max_dev_correct, relation="lt"),
    Claim("s4_se_A", 4, "Marginal standard error for A: sqrt(0.5 x 0.5 / 200000) = 0.00112.",
          0.00112, 5e-6, lambda: stats.standard_error(float(_P[_A]), simulate.ARTICLE_TRIALS)),
    Claim("s4_mass_identity", 4,
          "The exact mass identity m + Z r = p holds within numerical tolerance (max error).",
          0.0, 1e-12, _mass_identity_error),
)

# ======================================================================================
# Sections 5-8 (token to block, cost model, limits of the model, measurements).
# Append Claim(...) entries to this tuple; keys start with "s5_" ... "s8_".
# ======================================================================================
# Recomputations import specdec.cost / specdec.simulate.cycle lazily, so that importing the claims
# table stays cheap and free of import cycles.


def _cost():
    from specdec import cost
    return cost


def _cycle_extremes() -> tuple[float, float]:
    """(fewest tokens, most tokens - gamma) emitted by one exact cycle, over gamma 1..4."""
    from specdec.rules.cycle import cycle_length_law
    from specdec.models import toy_pair
    lo, hi = np.inf, -np.inf
    for target, draft in (toy_pair(), toy_pair(3, seed=3, eos=None)):
        for gamma in (1, 2, 3, 4):
            law = cycle_length_law(target, draft, (), gamma)
            support = np.flatnonzero(law > 0)
            lo, hi = min(lo, support.min()), max(hi, support.max() - gamma)
    return float(lo), float(hi)


def _best(alpha: float, c: float):
    return _cost().best_gamma(alpha, c, _cost().ARTICLE_GAMMAS)


def _joint_identity_error() -> float:
    cost = _cost()
    return max(abs(cost.expected_tokens_joint([a ** i for i in range(1, g + 1)]) - cost.expected_tokens(a, g))
               for a in cost.ARTICLE_ALPHAS for g in cost.ARTICLE_GAMMAS)


_SECTION_5_8: tuple[Claim, ...] = (
    # Section 5: from token to block
    Claim("s5_cycle_min_tokens", 5, "A cycle emits at least one token (exact cycle laws, gamma 1-4).",
          1.0, 0.0, lambda: _cycle_extremes()[0]),
    Claim("s5_cycle_max_extra", 5,
          "A cycle emits at most gamma + 1 tokens (largest emitted count minus gamma, gamma 1-4).",
          1.0, 0.0, lambda: _cycle_extremes()[1]),
    # Section 6: when a longer draft pays
    Claim("s6_grid_gamma_min", 6, "The sweep starts at gamma = 1.", 1.0, 0.0,
          lambda: float(min(_cost().ARTICLE_GAMMAS))),
    Claim("s6_grid_gamma_max", 6, "The sweep ends at gamma = 16.", 16.0, 0.0,
          lambda: float(max(_cost().ARTICLE_GAMMAS))),
    Claim("s6_grid_alpha_low", 6, "The sweep's smallest alpha is 0.3.", 0.3, 0.0,
          lambda: float(_cost().ARTICLE_ALPHAS[0])),
    Claim("s6_grid_alpha_mid", 6, "The sweep's middle alpha is 0.7.", 0.7, 0.0,
          lambda: float(_cost().ARTICLE_ALPHAS[1])),
    Claim("s6_grid_alpha_high", 6, "The sweep's largest alpha is 0.9.", 0.9, 0.0,
          lambda: float(_cost().ARTICLE_ALPHAS[2])),
    Claim("s6_grid_c_low", 6, "The sweep's cheaper draft costs c = 0.05.", 0.05, 0.0,
          lambda: float(_cost().ARTICLE_CS[0])),
    Claim("s6_grid_c_high", 6, "The sweep's dearer draft costs c = 0.20.", 0.20, 0.0,
          lambda: float(_cost().ARTICLE_CS[1])),
    Claim("s6_c_ratio", 6, "The dearer draft costs four times more (0.20 / 0.05).", 4.0, 1e-12,
          lambda: float(_cost().ARTICLE_CS[1] / _cost().ARTICLE_CS[0])),
    Claim("s6_best_gamma_c005", 6, "At alpha = 0.7, c = 0.05 the grid maximum is at gamma = 6.",
          6.0, 0.0, lambda: float(_best(0.7, 0.05).gamma)),
    Claim("s6_expected_tokens", 6, "There E = 3.058819 tokens per cycle.",
          3.058819, 5e-7, lambda: _best(0.7, 0.05).expected_tokens),
    Claim("s6_speedup_c005", 6, "There S is about 2.353.",
          2.353, 5e-4, lambda: _best(0.7, 0.05).speedup),
    Claim("s6_best_gamma_c020", 6, "With c = 0.20 the grid maximum moves to gamma = 3.",
          3.0, 0.0, lambda: float(_best(0.7, 0.20).gamma)),
    Claim("s6_speedup_c020", 6, "There S is about 1.583.",
          1.583, 5e-4, lambda: _best(0.7, 0.20).speedup),
    Claim("s6_alpha0_tokens", 6, "At alpha = 0 the draft yields nothing: E = 1 for every gamma on the grid.",
          1.0, 0.0, lambda: float(max(_cost().expected_tokens(0.0, g) for g in _cost().ARTICLE_GAMMAS))),
    # Section 7: when the simple model stops being enough
    Claim("s7_numerator", 7, "With alpha = 0.7, gamma = 6 the numerator is still 3.058819.",
          3.058819, 5e-7, lambda: _cost().expected_tokens(0.7, 6)),
    Claim("s7_ratio_g3", 7, "If verification costs g = 3 target steps, the ratio falls to about 0.927.",
          0.927, 5e-4, lambda: _cost().speedup(0.7, 6, 0.05, g=3)),
    Claim("s7_slower_g3", 7, "With g = 3 the method is slower than plain decoding (ratio below 1).",
          1.0, 0.0, lambda: _cost().speedup(0.7, 6, 0.05, g=3), relation="lt"),
    Claim("s7_joint_identity", 7,
          "E = 1 + sum of P(first i accepted); with independent acceptances it equals the closed "
          "form (max error over the sweep).",
          0.0, 1e-12, _joint_identity_error),
)
# ======================================================================================

#: Every numeric claim of the article, sections in order.
CLAIMS: tuple[Claim, ...] = _SECTION_1_4 + _SECTION_5_8


def _index() -> dict[str, Claim]:
    seen: dict[str, Claim] = {}
    for c in CLAIMS:
        if c.key in seen:
            raise RuntimeError(f"claims: duplicate key {c.key!r}")
        if c.relation not in RELATIONS:
            raise RuntimeError(f"claims: {c.key} has unknown relation {c.relation!r}")
        seen[c.key] = c
    return seen


_BY_KEY = _index()


def claim(key: str) -> Claim:
    """The claim with this key.

    Parameters
    ----------
    key : str
        A key of :data:`CLAIMS`.

    Returns
    -------
    Claim

    Raises
    ------
    KeyError
        Unknown key (the message suggests close matches).

    Examples
    --------
    >>> claim("s3_tv").stated
    0.15
    """
    try:
        return _BY_KEY[key]
    except KeyError:
        close = difflib.get_close_matches(key, list(_BY_KEY), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"unknown claim {key!r}{hint}") from None


def check(key: str, value) -> float:
    """Assert that a value computed in a chapter agrees with the article's claim.

    Parameters
    ----------
    key : str
        Claim key.
    value : float
        The value the chapter computed.

    Returns
    -------
    float
        ``value``, so that ``glue("...", claims.check("s3_tv", tv))`` reads naturally.

    Raises
    ------
    AssertionError
        If the claim does not hold; the message names the claim, its section, the
        stated value with its tolerance, and the value obtained.
    KeyError
        Unknown key.

    Examples
    --------
    >>> check("s3_tv", 0.15000000000000002)
    0.15000000000000002
    >>> check("s3_tv", 0.2)
    Traceback (most recent call last):
    ...
    AssertionError: claim s3_tv (section 3: The total variation distance between the flawed law and p is 0.15.): stated 0.15 +/- 0.005, got 0.2
    """
    c = claim(key)
    v = float(value)
    if not c.holds(v):
        want = f"< {c.stated:g}" if c.relation == "lt" else f"{c.stated:g} +/- {c.tolerance:g}"
        raise AssertionError(f"claim {c.key} (section {c.section}: {c.text}): stated {want}, got {v:.12g}")
    return v


def ledger() -> list[dict]:
    """Recompute every claim with the library.

    Returns
    -------
    list of dict
        One row per claim, in table order, with keys ``key``, ``section``, ``text``,
        ``stated``, ``tolerance``, ``relation``, ``recomputed`` and ``ok`` (bool). A
        recompute that raises gives ``recomputed = nan`` and ``ok = False``, with the
        exception text under ``error``.

    Examples
    --------
    >>> rows = ledger()
    >>> all(r["ok"] for r in rows)
    True
    """
    rows = []
    for c in CLAIMS:
        row = {"key": c.key, "section": c.section, "text": c.text, "stated": c.stated,
               "tolerance": c.tolerance, "relation": c.relation}
        try:
            value = float(c.recompute())
            row.update(recomputed=value, ok=c.holds(value))
        except Exception as exc:  # a broken recompute must show up in the ledger
            row.update(recomputed=float("nan"), ok=False, error=f"{type(exc).__name__}: {exc}")
        rows.append(row)
    return rows
