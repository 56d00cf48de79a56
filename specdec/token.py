"""One speculative step at the token level: exact output laws, correct and flawed.

Fix a confirmed prefix. The target model would sample the next token from ``p``; the
draft model proposes ``x ~ q``. Speculative sampling (Leviathan et al. 2023, Sec. 2-3;
Chen et al. 2023, Algorithm 2) accepts ``x`` with probability ``min(1, p(x)/q(x))`` and,
after a rejection, draws from the residual ``r = (p - q)^+ / Z``. The output then has law
exactly ``p``:

* a proposal of ``x`` that is accepted contributes the **accepted mass**
  ``m(x) = q(x) min(1, p(x)/q(x)) = min(p(x), q(x))``;
* a rejection happens with probability ``Z = 1 - beta``, where ``beta = sum_x m(x)``
  is the **acceptance rate**, equal to ``1 - TV(p, q)``;
* ``p - m = (p - q)^+`` and ``sum_x (p - q)^+(x) = Z``, so ``m + Z r = p``.

The law of one step is always a *mixture*: accepted mass plus rejection mass times a
recovery law (:func:`mixture_law`). The plausible-but-wrong rules listed in :data:`RULES`
change either the acceptance probability or the recovery law, and :func:`output_law`
gives the exact law each one produces, so the damage can be measured in total variation
rather than guessed from samples.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023 (PMLR 202, 19274-19286), Sec. 2-3, App. A.1.
.. [2] C. Chen et al., "Accelerating Large Language Model Decoding with Speculative
   Sampling", arXiv:2302.01318, 2023, Algorithm 2 and Theorem 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .laws import LawError, check_law, check_pair, sampling_law, softmax
from .verify import cdf, check_rng, draw, speculative_accept, verify

__all__ = [
    "ARTICLE_P",
    "ARTICLE_Q",
    "RULES",
    "StepLaw",
    "acceptance_probabilities",
    "accepted_mass",
    "acceptance_rate",
    "rejection_probability",
    "residual",
    "step_law",
    "mixture_law",
    "rule_parts",
    "output_law",
    "m_plus_r_raw",
    "logits_ratio_law",
    "sample_step",
]

#: The article's worked example (symbols A, B, C): target law p.
ARTICLE_P: tuple[float, float, float] = (0.5, 0.3, 0.2)
#: The article's worked example (symbols A, B, C): draft law q.
ARTICLE_Q: tuple[float, float, float] = (0.2, 0.5, 0.3)

#: Names of the step rules :func:`output_law` knows. ``"correct"`` is speculative
#: sampling; every other rule is a plausible mistake (see :func:`output_law`).
RULES: tuple[str, ...] = (
    "correct",
    "fallback_p",
    "resample_q",
    "drop_rejected",
    "unclipped_ratio",
    "m_plus_r",
    "shared_uniform",
    "inverted_ratio",
)


def _check_rule(rule: str) -> str:
    if rule not in RULES:
        raise LawError(f"rule: must be one of {', '.join(RULES)} (got {rule!r})")
    return rule


def acceptance_probabilities(p, q) -> np.ndarray:
    """Probability ``a(x) = min(1, p(x)/q(x))`` of accepting a proposed token x.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws (the processed laws actually sampled from).

    Returns
    -------
    numpy.ndarray, shape (V,)
        Acceptance probabilities in [0, 1]. Where ``q(x) == 0`` the token is never
        proposed; the value is set to 1 by convention (no division by zero happens).

    Raises
    ------
    LawError
        If ``p`` or ``q`` is not a valid law or the sizes differ.

    References
    ----------
    Leviathan et al. (2023), Sec. 2.3, Algorithm 1; Chen et al. (2023), Algorithm 2.

    Examples
    --------
    >>> acceptance_probabilities([0.5, 0.3, 0.2], [0.2, 0.5, 0.3]).round(6).tolist()
    [1.0, 0.6, 0.666667]
    """
    p, q = check_pair(p, q)
    out = np.ones_like(p)
    np.divide(p, q, out=out, where=q > 0)
    return np.minimum(out, 1.0)


def accepted_mass(p, q) -> np.ndarray:
    """Accepted mass ``m(x) = q(x) a(x) = min(p(x), q(x))``.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws.

    Returns
    -------
    numpy.ndarray, shape (V,)
        Probability that a step proposes x *and* accepts it. Not a law: it sums to the
        acceptance rate ``beta``.

    Raises
    ------
    LawError
        Invalid laws or mismatched sizes.

    References
    ----------
    Leviathan et al. (2023), Sec. 3.1 (``beta = sum_x min(p(x), q(x))``).

    Examples
    --------
    >>> accepted_mass([0.5, 0.3, 0.2], [0.2, 0.5, 0.3]).tolist()
    [0.2, 0.3, 0.2]
    """
    p, q = check_pair(p, q)
    return np.minimum(p, q)


def acceptance_rate(p, q) -> float:
    """Acceptance rate ``beta = sum_x min(p(x), q(x)) = 1 - TV(p, q)``.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws.

    Returns
    -------
    float
        Probability that the proposal of one step is accepted.

    Raises
    ------
    LawError
        Invalid laws or mismatched sizes.

    References
    ----------
    Leviathan et al. (2023), Sec. 3.1, Definition 3.1 and Corollary 3.6.

    Examples
    --------
    >>> round(acceptance_rate([0.5, 0.3, 0.2], [0.2, 0.5, 0.3]), 12)
    0.7
    """
    return float(accepted_mass(p, q).sum())


def rejection_probability(p, q) -> float:
    """Rejection probability ``Z = 1 - beta``, computed as ``sum_x (p(x) - q(x))^+``.

    The two expressions are equal for laws that sum to one; the positive-part sum is
    used because it is exactly 0 when ``p == q`` (``1 - beta`` may then be a rounding
    residue such as 1e-16) and it is the very sum that normalises :func:`residual`.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws.

    Returns
    -------
    float
        Probability in [0, 1] that one step rejects its proposal.

    Raises
    ------
    LawError
        Invalid laws or mismatched sizes.

    References
    ----------
    Leviathan et al. (2023), Sec. 3.1 and App. A.1.

    Examples
    --------
    >>> round(rejection_probability([0.5, 0.3, 0.2], [0.2, 0.5, 0.3]), 12)
    0.3
    >>> rejection_probability([0.5, 0.5], [0.5, 0.5])
    0.0
    """
    p, q = check_pair(p, q)
    return float(np.maximum(p - q, 0.0).sum())


def residual(p, q) -> np.ndarray:
    """Residual law ``r = (p - q)^+ / Z``: where the output goes after a rejection.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws.

    Returns
    -------
    numpy.ndarray, shape (V,)
        A probability vector supported on ``{x : p(x) > q(x)}``. When ``Z == 0``
        (``p == q``) rejections never happen and the residual is undefined (0/0); by
        convention a copy of ``p`` is returned, so callers never divide by zero and
        every downstream formula (``m + Z r``) still holds. Tokens with ``q(x) == 0 <
        p(x)`` are never proposed and reach the output only through this residual.

    Raises
    ------
    LawError
        Invalid laws or mismatched sizes.

    References
    ----------
    Leviathan et al. (2023), Sec. 2.3 (``p'(x) = norm(max(0, p(x) - q(x)))``), App. A.1.

    Examples
    --------
    >>> residual([0.5, 0.3, 0.2], [0.2, 0.5, 0.3]).tolist()
    [1.0, 0.0, 0.0]
    >>> residual([0.5, 0.5], [0.5, 0.5]).tolist()
    [0.5, 0.5]
    """
    p, q = check_pair(p, q)
    plus = np.maximum(p - q, 0.0)
    z = plus.sum()
    if z == 0.0:
        return p
    return plus / z


@dataclass(frozen=True)
class StepLaw:
    """Everything about one speculative step, computed once.

    Attributes
    ----------
    p, q : numpy.ndarray, shape (V,)
        Target and draft laws (validated copies).
    accept : numpy.ndarray, shape (V,)
        ``min(1, p/q)``, 1 where ``q == 0``.
    m : numpy.ndarray, shape (V,)
        Accepted mass ``min(p, q)``.
    beta : float
        Acceptance rate ``sum m``.
    z : float
        Rejection probability ``sum (p - q)^+``.
    residual : numpy.ndarray, shape (V,)
        ``(p - q)^+ / z`` (``p`` when ``z == 0``).
    law : numpy.ndarray, shape (V,)
        ``m + z * residual``, the output law of the correct rule; equal to ``p`` up to
        floating-point rounding.
    """

    p: np.ndarray
    q: np.ndarray
    accept: np.ndarray
    m: np.ndarray
    beta: float
    z: float
    residual: np.ndarray
    law: np.ndarray


def step_law(p, q) -> StepLaw:
    """Decompose one speculative step: accepted mass, rejection, residual, law.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws.

    Returns
    -------
    StepLaw
        Frozen record; its arrays are read-only.

    Raises
    ------
    LawError
        Invalid laws or mismatched sizes.

    References
    ----------
    Leviathan et al. (2023), App. A.1 (the proof that ``m + Z r = p``).

    Examples
    --------
    >>> s = step_law([0.5, 0.3, 0.2], [0.2, 0.5, 0.3])
    >>> s.m.tolist(), round(s.z, 12), s.residual.tolist()
    ([0.2, 0.3, 0.2], 0.3, [1.0, 0.0, 0.0])
    >>> bool(np.allclose(s.law, s.p))
    True
    """
    p, q = check_pair(p, q)
    a = acceptance_probabilities(p, q)
    m = np.minimum(p, q)
    z = rejection_probability(p, q)
    r = residual(p, q)
    law = m + z * r
    arrays = [p, q, a, m, r, law]
    for arr in arrays:
        arr.setflags(write=False)
    return StepLaw(p=p, q=q, accept=a, m=m, beta=float(m.sum()), z=z, residual=r, law=law)


def mixture_law(q_propose, accept, recovery) -> np.ndarray:
    """Exact law of "propose from q, accept with a(x), otherwise recover".

    ``law(y) = q(y) a(y) + sum_x q(x) (1 - a(x)) R[x, y]``: the general primitive
    behind every rule of this module.

    Parameters
    ----------
    q_propose : array_like, shape (V,)
        Law the proposal is drawn from.
    accept : array_like, shape (V,)
        Acceptance probability of each proposed token, in [0, 1].
    recovery : array_like, shape (V,) or (V, V)
        Law drawn from after a rejection: one law for every rejection (shape (V,)), or
        row ``x`` = law used after rejecting proposal ``x`` (shape (V, V)). Rows whose
        rejection weight ``q(x) (1 - a(x))`` is 0 are never used and not validated.

    Returns
    -------
    numpy.ndarray, shape (V,)
        A probability vector.

    Raises
    ------
    LawError
        Invalid ``q_propose``, ``accept`` not in [0, 1] or of the wrong shape,
        ``recovery`` of the wrong shape or with an invalid (used) row.

    References
    ----------
    Leviathan et al. (2023), App. A.1.

    Examples
    --------
    >>> mixture_law([0.2, 0.5, 0.3], [1.0, 0.6, 2 / 3], [0.5, 0.3, 0.2]).round(12).tolist()
    [0.35, 0.39, 0.26]
    """
    q = check_law(q_propose, "q_propose")
    v = q.size
    a = np.array(accept, dtype=np.float64)
    if a.shape != (v,):
        raise LawError(f"accept: must have shape ({v},) like q_propose (got {a.shape})")
    if not np.all(np.isfinite(a)) or (a < 0).any() or (a > 1).any():
        raise LawError("accept: acceptance probabilities must be finite and in [0, 1]")
    weight = q * (1.0 - a)
    rec = np.array(recovery, dtype=np.float64)
    if rec.ndim == 1:
        if rec.shape != (v,):
            raise LawError(f"recovery: vocabulary size {rec.size} does not match q_propose ({v})")
        rec = check_law(rec, "recovery")
        return q * a + weight.sum() * rec
    if rec.shape != (v, v):
        raise LawError(f"recovery: must have shape ({v},) or ({v}, {v}) (got {rec.shape})")
    used = np.flatnonzero(weight > 0)
    for x in used:
        check_law(rec[x], f"recovery[{x}]")
    return q * a + weight[used] @ rec[used]


def _shared_uniform_recovery(a: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Row x: law of ``inverse_cdf_r(u)`` for ``u`` uniform on ``[a(x), 1)``.

    Token y owns the CDF bin ``[c(y-1), c(y))``; its conditional probability is the length
    of ``[a(x), 1) ∩ [c(y-1), c(y))`` divided by ``1 - a(x)``.
    """
    v = a.size
    hi = cdf(r)
    lo = np.concatenate(([0.0], hi[:-1]))
    out = np.tile(r, (v, 1))  # rows with a(x) == 1 are never used
    for x in range(v):
        if a[x] < 1.0:
            overlap = np.clip(hi - np.maximum(lo, a[x]), 0.0, None)
            out[x] = overlap / overlap.sum()
    return out


def rule_parts(p, q, rule: str = "correct") -> tuple[np.ndarray, np.ndarray]:
    """Acceptance probabilities and recovery law(s) that define a rule.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws.
    rule : str
        One of :data:`RULES` except ``"m_plus_r"``, which is an arithmetic error in the
        law, not a sampling procedure.

    Returns
    -------
    accept : numpy.ndarray, shape (V,)
        Probability of accepting a proposed token.
    recovery : numpy.ndarray, shape (V,) or (V, V)
        Recovery law (see :func:`mixture_law`).

    Raises
    ------
    LawError
        Invalid laws, unknown rule, or ``rule == "m_plus_r"``.

    Examples
    --------
    >>> a, rec = rule_parts([0.5, 0.3, 0.2], [0.2, 0.5, 0.3], "fallback_p")
    >>> rec.tolist()
    [0.5, 0.3, 0.2]
    """
    p, q = check_pair(p, q)
    _check_rule(rule)
    a = acceptance_probabilities(p, q)
    if rule in ("correct", "unclipped_ratio"):
        return a, residual(p, q)
    if rule == "fallback_p":
        return a, p
    if rule == "resample_q":
        return a, q
    if rule == "drop_rejected":
        rows = np.tile(p, (p.size, 1))
        for x in range(p.size):
            rest = 1.0 - p[x]
            if rest > 0:
                rows[x, x] = 0.0
                rows[x] /= rows[x].sum()
        return a, rows
    if rule == "shared_uniform":
        return a, _shared_uniform_recovery(a, residual(p, q))
    if rule == "inverted_ratio":
        inv = np.ones_like(p)
        np.divide(q, p, out=inv, where=p > 0)
        return np.minimum(inv, 1.0), residual(p, q)
    raise LawError("rule: 'm_plus_r' is an error in the formula of the law, not a sampling "
                   "procedure; use output_law(p, q, 'm_plus_r')")


def m_plus_r_raw(p, q) -> np.ndarray:
    """The unweighted sum ``m + r``: what the notation trap computes.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws.

    Returns
    -------
    numpy.ndarray, shape (V,)
        ``min(p, q) + residual(p, q)``. **Not a law**: it sums to ``1 + beta`` because
        ``m`` is unnormalised mass (sum ``beta``) and ``r`` is already a conditional law
        (sum 1). The correct combination weights ``r`` by ``Z``.

    Raises
    ------
    LawError
        Invalid laws or mismatched sizes.

    Examples
    --------
    >>> m_plus_r_raw([0.5, 0.3, 0.2], [0.2, 0.5, 0.3]).round(12).tolist()
    [1.2, 0.3, 0.2]
    """
    p, q = check_pair(p, q)
    return np.minimum(p, q) + residual(p, q)


def output_law(p, q, rule: str = "correct") -> np.ndarray:
    """Exact law of the token emitted by one step under a given rule.

    Every rule proposes ``x ~ q``. They differ as follows (``a = min(1, p/q)``,
    ``m = min(p, q)``, ``Z = 1 - beta``, ``r`` the residual):

    ``"correct"``
        Accept with ``a(x)``; on rejection draw from ``r``. Law ``m + Z r = p``.
    ``"fallback_p"``
        Accept with ``a(x)``; on rejection draw from ``p``. Law ``m + Z p``, so
        ``law - p = Z (p - r)`` and ``TV(law, p) = Z TV(p, r)``. The accepted branch has
        already delivered all the mass of tokens with ``p <= q``; the fallback adds more
        to them and starves the tokens where ``p > q``.
    ``"resample_q"``
        On rejection draw again from ``q``. Law ``m + Z q``; ``law - p = Z (q - r)``.
    ``"drop_rejected"``
        On rejection of ``x``, draw from ``p`` with ``x`` removed and renormalised,
        ``p(y) 1[y != x] / (1 - p(x))``. Still wrong: rejected tokens have
        ``p(x) < q(x)``, and removing one of them does not turn ``p`` into ``r``.
    ``"unclipped_ratio"``
        Accept if ``u < p(x)/q(x)`` without the ``min(1, .)``; recover from ``r``. For
        ``u`` uniform on [0, 1), ``P(u < t) = min(1, t)`` for every ``t >= 0``, so the
        test is the same event as the clipped one: law ``p``, TV 0. The clip matters
        only where the ratio is used as a number (a weight, an expected acceptance,
        logging), never inside the comparison with a uniform. A suspicion that turns
        out harmless.
    ``"m_plus_r"``
        The notation trap: adding the accepted mass and the residual without weighting
        ``r`` by ``Z``. The raw vector sums to ``1 + beta`` (see :func:`m_plus_r_raw`);
        this function returns it normalised, ``(m + r) / (1 + beta)``, the law one
        gets by sampling in proportion to it.
    ``"shared_uniform"``
        One uniform ``u`` for the accept test *and* the recovery: accept if
        ``u < a(x)``; otherwise return the residual's inverse CDF at the same ``u``.
        Given a rejection, ``u`` is uniform on ``[a(x), 1)``, not on [0, 1), so the
        recovery favours tokens whose CDF bins lie high in [0, 1). The exact law is
        obtained by intersecting ``[a(x), 1)`` with the residual's CDF bins (tokens
        ordered by id). Harmless when the residual has one support point (as in the
        article's example), wrong otherwise.
    ``"inverted_ratio"``
        Accept with ``min(1, q(x)/p(x))`` (ratio upside down; 1 where ``p(x) == 0``,
        so tokens the target forbids are emitted whenever proposed); recover from ``r``.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws (processed laws actually sampled from).
    rule : str
        One of :data:`RULES`.

    Returns
    -------
    numpy.ndarray, shape (V,)
        The output law (probabilities summing to 1).

    Raises
    ------
    LawError
        Invalid laws, mismatched sizes, or unknown rule.

    References
    ----------
    Leviathan et al. (2023), Sec. 2.3 and App. A.1 (correct rule and proof);
    Chen et al. (2023), Theorem 1.

    Examples
    --------
    >>> p, q = [0.5, 0.3, 0.2], [0.2, 0.5, 0.3]
    >>> output_law(p, q).round(12).tolist()
    [0.5, 0.3, 0.2]
    >>> output_law(p, q, "fallback_p").round(12).tolist()
    [0.35, 0.39, 0.26]
    """
    p, q = check_pair(p, q)
    _check_rule(rule)
    if rule == "m_plus_r":
        raw = m_plus_r_raw(p, q)
        return raw / raw.sum()
    a, rec = rule_parts(p, q, rule)
    return mixture_law(q, a, rec)


_RATIO_ON = ("processed", "raw_softmax", "exp_logits")


def logits_ratio_law(target_logits, draft_logits, *, ratio_on: str = "processed",
                     temperature: float = 1.0, top_k: int | None = None,
                     top_p: float | None = None, mask=None) -> np.ndarray:
    """Exact output law when the acceptance ratio is computed on the wrong quantities.

    Both models' logits go through the same sampling settings (:func:`sampling_law`),
    giving the intended target law ``p`` and the draft law ``q``. Proposals are always
    drawn from the processed ``q`` (that is what the draft model samples). The
    acceptance test and the residual are then built from a pair ``(P, Q)``:

    ``"processed"``
        ``P = p``, ``Q = q``: speculative sampling, output law ``p``.
    ``"raw_softmax"``
        ``P = softmax(target_logits)``, ``Q = softmax(draft_logits)``: temperature 1, no
        mask, no truncation (probabilities before processing).
    ``"exp_logits"``
        ``P = exp(target_logits)``, ``Q = exp(draft_logits)``: unnormalised weights.
        The ratio ``exp(t - d)`` picks up the factor ``Z_t / Z_d`` of the two partition
        functions, and the residual is formed from unnormalised weights.

    A proposed ``x`` is accepted with probability ``min(1, P(x)/Q(x))`` (1 if
    ``Q(x) == 0``); after a rejection the next token is drawn from
    ``(P - Q)^+`` normalised -- clipped and normalised, built from the same quantities
    the ratio used. If ``(P - Q)^+`` is zero everywhere while rejections still happen
    (possible because proposals come from ``q``, not ``Q``), the recovery is ``P``
    normalised, the same convention as :func:`residual`. The result is
    ``mixture_law(q, min(1, P/Q), norm((P - Q)^+))``; compare it with ``p`` using
    :func:`specdec.laws.tv_distance`.

    Parameters
    ----------
    target_logits, draft_logits : array_like, shape (V,)
        Raw logits of the two models for the same prefix (``-inf`` allowed).
    ratio_on : {"processed", "raw_softmax", "exp_logits"}
        Which quantities the ratio (and the residual) uses.
    temperature, top_k, top_p, mask
        Sampling settings applied to both models, see :func:`sampling_law`.

    Returns
    -------
    numpy.ndarray, shape (V,)
        The exact law of the emitted token.

    Raises
    ------
    LawError
        Invalid logits or settings, mismatched sizes, unknown ``ratio_on``.

    References
    ----------
    Leviathan et al. (2023), Sec. 2.3 (the method applies to the distributions actually
    sampled from, after any sampling transformation).

    Examples
    --------
    >>> t, d = [2.0, 1.0, 0.0], [0.0, 1.0, 2.0]
    >>> p = sampling_law(t, temperature=0.5)
    >>> bool(np.allclose(logits_ratio_law(t, d, temperature=0.5), p))
    True
    >>> law = logits_ratio_law(t, d, ratio_on="raw_softmax", temperature=0.5)
    >>> bool(np.allclose(law, p))
    False
    """
    if ratio_on not in _RATIO_ON:
        raise LawError(f"ratio_on: must be one of {', '.join(_RATIO_ON)} (got {ratio_on!r})")
    settings = dict(temperature=temperature, top_k=top_k, top_p=top_p, mask=mask)
    p = sampling_law(target_logits, **settings)
    q = sampling_law(draft_logits, **settings)
    if p.size != q.size:
        raise LawError(f"draft_logits: vocabulary size {q.size} does not match target_logits ({p.size})")
    if ratio_on == "processed":
        return output_law(p, q, "correct")
    t = np.asarray(target_logits, dtype=np.float64)
    d = np.asarray(draft_logits, dtype=np.float64)
    if ratio_on == "raw_softmax":
        big_p, big_q = softmax(t), softmax(d)
        ratio = np.ones_like(big_p)
        np.divide(big_p, big_q, out=ratio, where=big_q > 0)
    else:
        # exp(t) and exp(d) scaled by the same factor exp(-s): ratios and the normalised
        # residual are unchanged, and nothing overflows.
        s = max(t[np.isfinite(t)].max(), d[np.isfinite(d)].max())
        big_p, big_q = np.exp(t - s), np.exp(d - s)
        ratio = np.ones_like(big_p)
        finite = np.isfinite(t) & np.isfinite(d)
        ratio[finite] = np.exp(t[finite] - d[finite])
        ratio[np.isfinite(d) & ~np.isfinite(t)] = 0.0
    accept = np.minimum(ratio, 1.0)
    plus = np.maximum(big_p - big_q, 0.0)
    rec = plus / plus.sum() if plus.sum() > 0 else softmax(t)
    return mixture_law(q, accept, rec)


def sample_step(p, q, rng: np.random.Generator, rule: str = "correct") -> int:
    """Reference sampler: one step under one rule, written for reading, not speed.

    Draw order: ``x`` from ``q`` by inverse CDF of one ``rng.random()``; the accept
    uniform ``u = rng.random()``; after a rejection, one more ``rng.random()`` for the
    recovery (none for ``"shared_uniform"``, which reuses ``u``). ``"m_plus_r"`` is not
    a procedure: it draws once from ``(m + r) / (1 + beta)`` by inverse CDF.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws.
    rng : numpy.random.Generator
        Source of randomness.
    rule : str
        One of :data:`RULES`; see :func:`output_law` for their meaning.

    Returns
    -------
    int
        The emitted token id; its law is ``output_law(p, q, rule)``.

    Raises
    ------
    LawError
        Invalid laws, unknown rule, ``rng`` not a Generator.

    References
    ----------
    Leviathan et al. (2023), Algorithm 1 (with gamma = 1); Chen et al. (2023),
    Algorithm 2.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> sorted({sample_step([0.5, 0.5], [1.0, 0.0], rng) for _ in range(50)})
    [0, 1]
    """
    p, q = check_pair(p, q)
    _check_rule(rule)
    rng = check_rng(rng)
    if rule == "m_plus_r":
        return draw(output_law(p, q, "m_plus_r"), rng.random())
    x = draw(q, rng.random())
    if rule == "correct":
        return int(verify(p[None, None], q[None, None], [[x]], rng=rng).tokens[0, 0])
    u = rng.random()
    if rule == "unclipped_ratio":
        accepted = u < p[x] / q[x]
    elif rule == "inverted_ratio":
        accepted = speculative_accept(q[x], p[x], u)
    else:
        accepted = speculative_accept(p[x], q[x], u)
    if accepted:
        return x
    if rule in ("unclipped_ratio", "inverted_ratio"):
        return draw(residual(p, q), rng.random())
    if rule == "fallback_p":
        return draw(p, rng.random())
    if rule == "resample_q":
        return draw(q, rng.random())
    if rule == "drop_rejected":
        _, rows = rule_parts(p, q, "drop_rejected")
        return draw(rows[x], rng.random())
    # shared_uniform: the same u, now known to lie in [a(x), 1)
    return draw(residual(p, q), u)
