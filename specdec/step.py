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
recovery law (:func:`mixture_law`). The plausible-but-wrong rules of :mod:`specdec.rules.token`
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

from specdec.laws import LawError, check_law, check_pair, sampling_law, softmax
from specdec.rules import token as tokenrule
from specdec.verify import check_rng, residual_laws

__all__ = [
    "ARTICLE_P",
    "ARTICLE_Q",
    "StepLaw",
    "acceptance_probabilities",
    "accepted_mass",
    "acceptance_rate",
    "rejection_probability",
    "residual",
    "step_law",
    "mixture_law",
    "output_law",
    "m_plus_r_raw",
    "logits_ratio_law",
    "sample_step",
]

#: The article's worked example (symbols A, B, C): target law p.
ARTICLE_P: tuple[float, float, float] = (0.5, 0.3, 0.2)
#: The article's worked example (symbols A, B, C): draft law q.
ARTICLE_Q: tuple[float, float, float] = (0.2, 0.5, 0.3)

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
    return tokenrule.TOKEN.acceptance(*check_pair(p, q))


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
    return residual_laws(*check_pair(p, q))


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


def output_law(p, q, rule: tokenrule.TokenByToken = tokenrule.TOKEN) -> np.ndarray:
    """Exact law of the token emitted by one step under a given rule.

    Every rule proposes ``x ~ q``; the rules of :mod:`specdec.rules.token` differ in the
    acceptance probability or in the law drawn from after a rejection (their docstrings
    give each law; ``a = min(1, p/q)``, ``m = min(p, q)``, ``Z = 1 - beta``, ``r`` the
    residual):

    ``CORRECT``
        Law ``m + Z r = p``.
    ``FALLBACK_P``, ``RESAMPLE_Q``
        Recover from ``p``, or from ``q``: laws ``m + Z p`` and ``m + Z q``.
    ``DROP_REJECTED``
        Recover from ``p`` without the rejected token, renormalised.
    ``UNCLIPPED_RATIO``
        ``u < p/q`` without the clip: the same event, law ``p``.
    ``M_PLUS_R``
        The notation trap ``(m + r) / (1 + beta)``.
    ``SHARED_UNIFORM``
        The accept uniform reused for the residual's inverse CDF.
    ``INVERTED_RATIO``
        Accept with ``min(1, q/p)``.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws (processed laws actually sampled from).
    rule : specdec.rules.token.TokenByToken
        :data:`specdec.rules.token.TOKEN` (default) or one of :data:`specdec.rules.token.STEP_FLAWS`.

    Returns
    -------
    numpy.ndarray, shape (V,)
        The output law (probabilities summing to 1). Memory O(V) for every rule (time
        O(V log V) for ``SHARED_UNIFORM``): it works at V = 10**6.

    Raises
    ------
    LawError
        Invalid laws or mismatched sizes.
    TypeError
        ``rule`` is not a :class:`specdec.rules.token.TokenByToken`.

    References
    ----------
    Leviathan et al. (2023), Sec. 2.3 and App. A.1 (correct rule and proof);
    Chen et al. (2023), Theorem 1. Used in chapters 2-4 and appendix A2.

    Examples
    --------
    >>> p, q = [0.5, 0.3, 0.2], [0.2, 0.5, 0.3]
    >>> output_law(p, q).round(12).tolist()
    [0.5, 0.3, 0.2]
    >>> output_law(p, q, tokenrule.FALLBACK_P).round(12).tolist()
    [0.35, 0.39, 0.26]
    """
    p, q = check_pair(p, q)
    return tokenrule.check_token_rule(rule).output_law(p, q)


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
        Invalid logits or settings, mismatched sizes.
    ValueError
        Unknown ``ratio_on``.

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
        raise ValueError(f"ratio_on: must be one of {', '.join(_RATIO_ON)} (got {ratio_on!r})")
    settings = dict(temperature=temperature, top_k=top_k, top_p=top_p, mask=mask)
    p = sampling_law(target_logits, **settings)
    q = sampling_law(draft_logits, **settings)
    if p.size != q.size:
        raise LawError(f"draft_logits: vocabulary size {q.size} does not match target_logits ({p.size})")
    if ratio_on == "processed":
        return output_law(p, q)
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


def sample_step(p, q, rng, rule: tokenrule.TokenByToken = tokenrule.TOKEN) -> int:
    """Reference sampler: one step under one rule, written for reading, not speed.

    Draw order: ``x`` from ``q`` by inverse CDF of one ``rng.random()``; then, for the
    correct rule, the kernel :func:`specdec.verify.verify` on one row (one accept uniform,
    one more after a rejection); for a flaw, its own procedure
    (:meth:`specdec.rules.token.TokenByToken.sample_step`: the accept uniform, then one more after a
    rejection, none for ``SHARED_UNIFORM``, which reuses it). ``M_PLUS_R`` is not a
    procedure: it draws once from its law.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft laws.
    rng : numpy.random.Generator or int
        Source of randomness (see :func:`specdec.verify.check_rng`).
    rule : specdec.rules.token.TokenByToken
        :data:`specdec.rules.token.TOKEN` (default) or a flaw.

    Returns
    -------
    int
        The emitted token id; its law is ``output_law(p, q, rule)``.

    Raises
    ------
    LawError
        Invalid laws.
    TypeError
        ``rule`` not a step rule, ``rng`` neither a Generator nor a seed.

    References
    ----------
    Leviathan et al. (2023), Algorithm 1 (with gamma = 1); Chen et al. (2023),
    Algorithm 2. Used in chapter 1 and appendix A2.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> sorted({sample_step([0.5, 0.5], [1.0, 0.0], rng) for _ in range(50)})
    [0, 1]
    """
    p, q = check_pair(p, q)
    rule = tokenrule.check_token_rule(rule)
    return int(rule.sample_step(p, q, check_rng(rng)))
