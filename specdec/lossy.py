"""Lossy acceptance: rules engines ship that trade the target's law for accepted tokens.

Three rules, each a chain verifier (:mod:`specdec.cycles`) whose exact sequence law is
computed by enumeration, so its distance to the target is a number, not an impression:

``"typical"`` (Medusa's typical acceptance; vLLM's ``TypicalAcceptanceSampler``)
    Accept the draft token ``x`` at a position with target law ``p`` when
    ``p(x) > min(epsilon, delta * exp(-H(p)))``, ``H`` the entropy of ``p`` in nats
    (``posterior_threshold = epsilon``, ``posterior_alpha = delta``). At the first
    failure the target's most likely token is emitted; after a full acceptance the bonus
    is a sample from the target.
``"lenient"`` (SGLang's ``speculative_accept_threshold_single`` / ``_acc``)
    Accept ``x`` with probability ``min(1, p(x) / (t_acc q(x)))``, or always when
    ``p(x) >= t_single``; at a rejection draw from the residual ``(p - q)^+``. With
    ``t_acc = t_single = 1`` this is speculative sampling, exact; smaller thresholds
    accept more.
``"relaxed"`` (TensorRT-LLM's relaxed acceptance for DeepSeek MTP, ``relaxed_topk`` /
``relaxed_delta``)
    Accept ``x`` when it is among the target's ``top_k`` most likely tokens and
    ``p(x) >= max(p) - delta``; at the first failure emit the target's most likely token.

Parameters are passed as a dict (:func:`check_params`). :func:`sweep` gives, for a grid
of thresholds and temperatures, the exact TV and KL distance between the rule's law of
the first ``length`` tokens and the target's (both at the same temperature) beside the
expected accepted tokens per cycle.

References
----------
.. [1] T. Cai et al., "Medusa: Simple LLM Inference Acceleration Framework with Multiple
   Decoding Heads", ICML 2024, arXiv:2401.10774, Sec. 3.3.1 (typical acceptance).
.. [2] vLLM ``TypicalAcceptanceSampler`` (``posterior_threshold``, ``posterior_alpha``);
   SGLang server arguments ``--speculative-accept-threshold-single`` and
   ``--speculative-accept-threshold-acc``; TensorRT-LLM ``MTPDecodingConfig``
   (``use_relaxed_acceptance_for_thinking``, ``relaxed_topk``, ``relaxed_delta``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import cycles
from .verify import check_rng
from .block import align_laws, law_tv
from .cycles import DraftPath
from .laws import LawError, check_int
from .models import ToyModel, sequence_law as target_sequence_law

__all__ = [
    "RULES",
    "DEFAULTS",
    "check_params",
    "typical_threshold",
    "lossy_verify",
    "cycle_outcomes",
    "sequence_law",
    "accepted_count_law",
    "kl_divergence",
    "LossyPoint",
    "measure",
    "sweep",
    "sample_cycle",
    "LossEstimate",
    "estimate_loss",
    "decode_counts",
]

RULES: tuple[str, ...] = ("typical", "lenient", "relaxed")
#: Parameters of each rule and their defaults (vLLM's 0.09 / 0.3 for typical acceptance;
#: the exact setting for lenient acceptance; TensorRT-LLM's defaults for relaxed).
DEFAULTS: dict[str, dict] = {
    "typical": {"epsilon": 0.09, "delta": 0.3},
    "lenient": {"t_single": 1.0, "t_acc": 1.0},
    "relaxed": {"top_k": 1, "delta": 0.0},
}


def check_params(rule: str, params: dict | None = None) -> dict:
    """The rule's parameters, defaults filled in, validated.

    Raises
    ------
    LawError
        Unknown rule or parameter, or a value outside its range (``epsilon, delta >= 0``;
        ``0 < t_acc <= 1``, ``0 < t_single <= 1``; ``top_k >= 1``).

    Examples
    --------
    >>> check_params("typical", {"epsilon": 0.2})
    {'epsilon': 0.2, 'delta': 0.3}
    """
    if rule not in RULES:
        raise ValueError(f"rule: must be one of {RULES} (got {rule!r})")
    out = dict(DEFAULTS[rule])
    for k, v in (params or {}).items():
        if k not in out:
            raise ValueError(f"params: {rule!r} takes {sorted(out)} (got {k!r})")
        out[k] = v
    if rule == "relaxed":
        out["top_k"] = check_int(out["top_k"], "top_k", minimum=1)
    for k, v in out.items():
        if k == "top_k":
            continue
        try:
            v = float(v)
        except (TypeError, ValueError):
            raise LawError(f"{k}: must be a real number (got {v!r})") from None
        hi = 1.0 if k.startswith("t_") else math.inf
        lo_ok = v > 0 if k.startswith("t_") else v >= 0
        if not (lo_ok and v <= hi and math.isfinite(v)):
            raise LawError(f"{k}: must be in {'(0, 1]' if k.startswith('t_') else '[0, inf)'} (got {v!r})")
        out[k] = v
    return out


def typical_threshold(p, epsilon: float, delta: float) -> float:
    """Medusa's acceptance threshold ``min(epsilon, delta * exp(-H(p)))``.

    Examples
    --------
    >>> round(typical_threshold([0.5, 0.5], 0.09, 0.3), 6)   # H = ln 2
    0.09
    >>> round(typical_threshold([0.25] * 4, 1.0, 0.3), 6)    # 0.3 / 4
    0.075
    """
    arr = np.asarray(p, dtype=float)
    nz = arr[arr > 0]
    h = float(-(nz * np.log(nz)).sum())
    return min(epsilon, delta * math.exp(-h))


def _argmax(law) -> int:
    return int(np.argmax(np.asarray(law, dtype=float)))


def _accept_prob(rule: str, params: dict, p: list, q: list, x: int) -> float:
    if rule == "typical":
        return 1.0 if p[x] > typical_threshold(p, params["epsilon"], params["delta"]) else 0.0
    if rule == "relaxed":
        order = sorted(range(len(p)), key=lambda y: (-p[y], y))[: params["top_k"]]
        return 1.0 if (x in order and p[x] >= max(p) - params["delta"]) else 0.0
    if p[x] >= params["t_single"]:
        return 1.0
    return min(1.0, p[x] / (params["t_acc"] * q[x]))


def _recovery(rule: str, p: list, q: list) -> list:
    if rule == "lenient":
        plus = [max(a - b, 0.0) for a, b in zip(p, q)]
        z = sum(plus)
        return [v / z for v in plus] if z > 0 else list(p)
    law = [0.0] * len(p)
    law[_argmax(p)] = 1.0
    return law


def lossy_verify(path: DraftPath, rule: str, params: dict) -> list:
    """Outcomes of a lossy rule given a draft path (``params`` already checked).

    Returns
    -------
    list of (probability given the path, emitted, n_accepted)
    """
    out = []
    run = 1.0
    for i, x in enumerate(path.tokens):
        p, q = path.p[i], path.q[i]
        a = _accept_prob(rule, params, p, q, x)
        if a < 1:
            for y, w in enumerate(_recovery(rule, p, q)):
                if w > 0:
                    out.append((run * (1 - a) * w, path.tokens[:i] + (y,), i))
        run *= a
        if run == 0:
            return out
    k = len(path.tokens)
    if path.ends:
        out.append((run, path.tokens, k))
    else:
        out.extend((run * w, path.tokens + (y,), k) for y, w in enumerate(path.p[k]) if w > 0)
    return out


def cycle_outcomes(oracle, ctx: tuple, gamma: int, rule: str, params: dict | None = None, *,
                   greedy: bool = False) -> list:
    """Outcomes ``(probability, emitted, n_accepted)`` of one cycle of a lossy rule."""
    params = check_params(rule, params)
    return cycles.chain_outcomes(lambda path: lossy_verify(path, rule, params), oracle, ctx, gamma,
                                 greedy=greedy)


def sequence_law(target: ToyModel, draft: ToyModel, prefix, gamma: int, length: int, rule: str,
                 params: dict | None = None, *, greedy: bool = False) -> dict:
    """Exact law of the first ``length`` tokens emitted under a lossy rule.

    Examples
    --------
    >>> from specdec.models import toy_pair
    >>> p, q = toy_pair()
    >>> exact = sequence_law(p, q, (), 2, 3, "lenient")        # thresholds 1: exact
    >>> round(law_tv(exact, target_sequence_law(p, (), 3)), 12)
    0.0
    >>> law = sequence_law(p, q, (), 2, 3, "typical")
    >>> law_tv(law, target_sequence_law(p, (), 3)) > 0.01
    True
    """
    oracle = cycles.model_oracle(target, draft)
    gamma = check_int(gamma, "gamma", minimum=1)
    params = check_params(rule, params)
    return cycles.rule_sequence_law(
        lambda ctx: cycle_outcomes(oracle, ctx, gamma, rule, params, greedy=greedy),
        oracle, prefix, length)


def accepted_count_law(target: ToyModel, draft: ToyModel, prefix, gamma: int, rule: str,
                       params: dict | None = None, *, greedy: bool = False) -> list:
    """Exact law of the number of accepted drafted tokens in one cycle."""
    oracle = cycles.model_oracle(target, draft)
    gamma = check_int(gamma, "gamma", minimum=1)
    outs = cycle_outcomes(oracle, tuple(prefix), gamma, rule, params, greedy=greedy)
    return cycles.accepted_count_law(outs, gamma)


def kl_divergence(law: dict, reference: dict) -> float:
    """``KL(law || reference) = sum law log(law / reference)`` in nats, over sequences.

    Returns ``inf`` when ``law`` puts mass on a sequence ``reference`` never produces.

    Examples
    --------
    >>> round(kl_divergence({(0,): 0.5, (1,): 0.5}, {(0,): 0.25, (1,): 0.75}), 6)
    0.143841
    """
    _, (a, b) = align_laws(law, reference)
    mask = a > 0
    if (b[mask] <= 0).any():
        return math.inf
    return float(np.sum(a[mask] * np.log(a[mask] / b[mask])))


@dataclass(frozen=True)
class LossyPoint:
    """One setting of a lossy rule: its distance to the target and what it buys.

    Attributes
    ----------
    rule : str
    params : dict
    temperature : float
        Temperature applied to both models.
    tv, kl : float
        Exact TV and KL (nats) between the rule's law of the first ``length`` tokens and
        the target's at the same temperature.
    mean_accepted : float
        Expected accepted drafted tokens per cycle from the prompt.
    exact_mean_accepted : float
        The same for speculative sampling (the exact rule) with the same models.
    """

    rule: str
    params: dict
    temperature: float
    tv: float
    kl: float
    mean_accepted: float
    exact_mean_accepted: float


def measure(target: ToyModel, draft: ToyModel, prefix, gamma: int, length: int, rule: str,
            params: dict | None = None, *, temperature: float = 1.0, greedy: bool = False) -> LossyPoint:
    """TV, KL and accepted tokens per cycle of one lossy setting (exact, by enumeration).

    Raises
    ------
    LawError
        Invalid models, rule, parameters or temperature.
    """
    params = check_params(rule, params)
    t_model = cycles.tempered(target, temperature) if temperature != 1.0 else target
    d_model = cycles.tempered(draft, temperature) if temperature != 1.0 else draft
    law = sequence_law(t_model, d_model, prefix, gamma, length, rule, params, greedy=greedy)
    ref = target_sequence_law(t_model, prefix, length)
    acc = accepted_count_law(t_model, d_model, prefix, gamma, rule, params, greedy=greedy)
    exact = accepted_count_law(t_model, d_model, prefix, gamma, "lenient", None, greedy=greedy)
    return LossyPoint(rule=rule, params=params, temperature=float(temperature),
                      tv=law_tv(law, ref), kl=kl_divergence(law, ref),
                      mean_accepted=float(sum(i * w for i, w in enumerate(acc))),
                      exact_mean_accepted=float(sum(i * w for i, w in enumerate(exact))))


def sweep(target: ToyModel, draft: ToyModel, prefix, gamma: int, length: int, rule: str,
          grid, temperatures=(1.0,), *, greedy: bool = False) -> list[LossyPoint]:
    """:func:`measure` over a grid of parameter dicts and temperatures.

    Parameters
    ----------
    grid : iterable of dict
        Parameter settings of ``rule``.
    temperatures : iterable of float

    Returns
    -------
    list of LossyPoint
        Temperature-major order.
    """
    return [measure(target, draft, prefix, gamma, length, rule, params, temperature=t, greedy=greedy)
            for t in temperatures for params in grid]


# --------------------------------------------------------------------------------------
# Measuring a sampler's loss
# --------------------------------------------------------------------------------------



def sample_cycle(target: ToyModel, draft: ToyModel, prefix, gamma: int, rng, rule: str,
                 params: dict | None = None) -> tuple[tuple[int, ...], int, int]:
    """One cycle of a lossy rule, sampled (the block-sampler convention of the kit).

    Returns
    -------
    (emitted, n_accepted, n_proposed)

    Examples
    --------
    >>> from specdec.models import toy_pair
    >>> p, q = toy_pair()
    >>> emitted, n, k = sample_cycle(p, q, (), 3, np.random.default_rng(0), "typical")
    >>> 1 <= len(emitted) <= 4 and n <= k <= 3
    True
    """
    cycles.check_models(target, draft)
    params = check_params(rule, params)
    rng = check_rng(rng)
    ctx = tuple(prefix)
    props: list[int] = []
    while len(props) < gamma and not (props and props[-1] == target.eos):
        props.append(cycles.draw_weights(draft.next_law(ctx + tuple(props)), rng.random()))
    for i, x in enumerate(props):
        here = ctx + tuple(props[:i])
        p, q = target.next_law(here).tolist(), draft.next_law(here).tolist()
        if rng.random() >= _accept_prob(rule, params, p, q, x):
            return tuple(props[:i]) + (cycles.draw_weights(_recovery(rule, p, q), rng.random()),), i, len(props)
    if props[-1] == target.eos:
        return tuple(props), len(props), len(props)
    bonus = cycles.draw_weights(target.next_law(ctx + tuple(props)), rng.random())
    return tuple(props) + (bonus,), len(props), len(props)


@dataclass(frozen=True)
class LossEstimate:
    """How far a sampler's law is from the target's, estimated from its output.

    Attributes
    ----------
    trials : int
        Decodes counted.
    tv : specdec.stats.TvInterval
        Plug-in TV over the sequences and an interval valid for every number of trials
        (Weissman et al.'s bound).
    kl : float
        Plug-in ``KL(frequencies || target)`` in nats (biased upwards by noise).
    kl_low, kl_high : float
        Multinomial bootstrap percentile interval of the plug-in KL (approximate).
    exact_tv, exact_kl : float or None
        The exact values when the rule's law is known (to check the interval).
    """

    trials: int
    tv: object
    kl: float
    kl_low: float
    kl_high: float
    exact_tv: float | None = None
    exact_kl: float | None = None


def estimate_loss(counts: dict, reference: dict, *, rng, confidence: float = 0.95,
                  resamples: int = 2000, exact: dict | None = None) -> LossEstimate:
    """TV and KL between observed sequence counts and the target's exact law, with intervals.

    Parameters
    ----------
    counts : dict[tuple, int]
        How often each sequence was emitted.
    reference : dict[tuple, float]
        The target's exact sequence law (:func:`specdec.models.sequence_law`).
    rng : numpy.random.Generator or int
        For the KL bootstrap.
    confidence : float
        Coverage of both intervals.
    resamples : int
        Bootstrap resamples.
    exact : dict, optional
        The rule's exact law, if known: its TV and KL are reported beside the estimates.

    Returns
    -------
    LossEstimate

    Raises
    ------
    LawError
        Empty counts, or a counted sequence outside the reference's keys and lengths.
    """
    from .stats import tv_ci

    rng = check_rng(rng)
    if not counts or sum(counts.values()) <= 0:
        raise LawError("counts: must count at least one sequence")
    keys, (f, ref) = align_laws({k: float(v) for k, v in counts.items()}, reference)
    n = int(round(f.sum()))
    ci = tv_ci(np.rint(f).astype(np.int64), ref / ref.sum(), confidence, method="bound")

    def kl_of(freq):
        m = freq > 0
        with np.errstate(divide="ignore"):
            return float(np.sum(freq[m] * np.log(freq[m] / ref[m])))

    freq = f / n
    boots = rng.multinomial(n, freq, size=check_int(resamples, "resamples", minimum=100)) / n
    kls = np.array([kl_of(b) for b in boots])
    lo, hi = np.quantile(kls, [(1 - confidence) / 2, (1 + confidence) / 2])
    return LossEstimate(trials=n, tv=ci, kl=kl_of(freq), kl_low=float(lo), kl_high=float(hi),
                        exact_tv=None if exact is None else law_tv(exact, reference),
                        exact_kl=None if exact is None else kl_divergence(exact, reference))


def decode_counts(sampler, target: ToyModel, draft: ToyModel, prefix, gamma, length: int,
                  trials: int, rng) -> dict:
    """Decode ``trials`` times with a cycle sampler and count the first ``length`` tokens.

    ``sampler(target, draft, prefix, gamma, rng)`` returns the emitted tokens (or a tuple
    whose first item they are), as the kit's block samplers do; decoding stops at
    ``length`` tokens or end-of-sequence.
    """
    rng = check_rng(rng)
    length = check_int(length, "length", minimum=1)
    eos = target.eos
    out: dict = {}
    for _ in range(check_int(trials, "trials", minimum=1)):
        text: tuple = ()
        while len(text) < length and (eos is None or eos not in text):
            res = sampler(target, draft, tuple(prefix) + text, gamma, rng)
            emitted = res[0] if isinstance(res, tuple) and res and isinstance(res[0], tuple) else res
            text += tuple(int(t) for t in emitted)
        if eos is not None and eos in text:
            text = text[: text.index(eos) + 1]
        key = text[:length]
        out[key] = out.get(key, 0) + 1
    return out
