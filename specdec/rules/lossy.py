"""Lossy acceptance: rules that trade the target's law for accepted tokens, measured exactly.

Four rules, each a chain verifier (:mod:`specdec.rules.base`) whose exact sequence law is
computed by enumeration, so its distance to the target is a number, not an impression:

``"typical"`` (Medusa's typical acceptance; vLLM's ``TypicalAcceptanceSampler``)
    Accept the draft token ``x`` at a position with target law ``p`` when
    ``p(x) > min(epsilon, delta * exp(-H(p)))``, ``H`` the entropy of ``p`` in nats
    (``posterior_threshold = epsilon``, ``posterior_alpha = delta``). At the first
    failure the target's most likely token is emitted; after a full acceptance the bonus
    is a sample from the target.
``"sglang"`` (SGLang's target-only verification, ``--speculative-accept-threshold-single``
/ ``--speculative-accept-threshold-acc``)
    The draft's probabilities are not used. Accept ``x`` when a uniform coin satisfies
    ``coin <= p(x) / t_acc`` or when ``p(x) >= t_single``, so with probability
    ``min(1, p(x) / t_acc)``, or 1 when ``p(x) >= t_single``. At the first rejection emit a
    draw from the target's law with the rejected token removed, ``p(y) / (1 - p(x))`` for
    ``y != x`` (the kernel sets the rejected token's "draft probability" to its target
    probability and samples from ``(p - draft)^+``, the draft buffer being zeros); after a
    full acceptance the bonus is a sample from the target. With thresholds 1 the token
    emitted at each position is the target's own sample: this is the matching rule
    (:data:`specdec.rules.matching.MATCHING`), exact, and accepting ``p(x)`` rather than
    speculative sampling's ``min(1, p(x) / q(x))``; smaller thresholds accept more.
    SGLang's EAGLE drafter proposes the draft's top-k tokens (a greedy chain at top-k 1):
    ``greedy=True`` models that draft. (In a tree the kernel draws one coin per accepted
    node and tries its children in turn with the *accumulated* target probability of the
    siblings tried so far, accepting the ``j``-th when
    ``coin <= (p(x_1) + ... + p(x_j)) / t_acc`` or ``p(x_j) >= t_single``; after the last
    rejected sibling it draws from ``p`` with every rejected sibling removed. The chain
    here is the one-child case.)
``"scaled_ratio"`` (no engine's rule; kept for comparison)
    Accept ``x`` with probability ``min(1, p(x) / (t_acc q(x)))``, or always when
    ``p(x) >= t_single``; at a rejection draw from the residual ``(p - q)^+``. With
    ``t_acc = t_single = 1`` this is speculative sampling, exact. Earlier versions of this
    module called it ``"lenient"`` and attributed it to SGLang, wrongly.
``"relaxed"`` (TensorRT-LLM's relaxed acceptance for DeepSeek MTP, ``relaxed_topk`` /
``relaxed_delta``)
    Accept ``x`` when it is among the target's ``top_k`` most likely tokens and
    ``p(x) >= max(p) - delta``; at the first failure emit the target's most likely token.

Each setting is an object, :class:`Lossy` (a :class:`specdec.rules.base.ChainRule`), with
its parameters as a dict (:func:`check_params`). :func:`sweep` gives, for a grid of
thresholds and temperatures, the exact TV and KL distance between the rule's law of the
first ``length`` tokens and the target's (both at the same temperature) beside the
expected accepted tokens per cycle. How lossy a sampler is, measured from its output
with intervals, is the conformance kit's measurement mode
(:func:`specdec.conformance.measure_loss`). Used in Chapter 5 and Appendix A4.

References
----------
.. [1] T. Cai et al., "Medusa: Simple LLM Inference Acceleration Framework with Multiple
   Decoding Heads", ICML 2024, arXiv:2401.10774, Sec. 3.3.1 (typical acceptance).
.. [2] vLLM ``TypicalAcceptanceSampler`` (``posterior_threshold``, ``posterior_alpha``);
   TensorRT-LLM ``MTPDecodingConfig`` (``use_relaxed_acceptance_for_thinking``,
   ``relaxed_topk``, ``relaxed_delta``).
.. [3] SGLang (github.com/sgl-project/sglang): the kernel
   ``TreeSpeculativeSamplingTargetOnly`` in
   ``sgl-kernel/csrc/speculative/speculative_sampling.cuh`` (commit 120affb9, lines
   72-97: the accept test over siblings with the accumulated target probability
   ``prob_acc``, ``coin <= prob_acc / threshold_acc || p >= threshold_single``; lines
   100-172: the final token from ``(target - draft)^+``, no draft term at the bonus); its
   caller ``EagleVerifyInput.verify`` in ``python/sglang/srt/speculative/eagle_info.py``
   (commit f1f60ea0: ``draft_probs = torch.zeros(...)``, one coin per tree node, one for
   the final token); the help texts of both options in
   ``python/sglang/srt/server_args.py`` and ``docs/advanced_features/server_arguments.md``
   ("The accept probability of a draft token is raised from its target probability p to
   min(1, p / threshold_acc)"); the drafts, ``fast_topk(probs, self.topk)`` of the draft's
   probabilities in ``python/sglang/srt/speculative/eagle_worker.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from specdec.rules import base as cycles

from specdec.laws import align_laws, law_tv
from specdec.rules.token import TOKEN
from specdec.laws import LawError, check_int
from specdec.models import ToyModel, sequence_law as target_sequence_law

__all__ = [
    "RULES",
    "DEFAULTS",
    "check_params",
    "typical_threshold",
    "Lossy",
    "kl_divergence",
    "LossyPoint",
    "measure",
    "sweep",
]

RULES: tuple[str, ...] = ("typical", "sglang", "scaled_ratio", "relaxed")
#: Parameters of each rule and their defaults (vLLM's 0.09 / 0.3 for typical acceptance;
#: SGLang's defaults, 1 and 1, the exact setting, for its thresholds and for the scaled
#: ratio; TensorRT-LLM's defaults for relaxed).
DEFAULTS: dict[str, dict] = {
    "typical": {"epsilon": 0.09, "delta": 0.3},
    "sglang": {"t_single": 1.0, "t_acc": 1.0},
    "scaled_ratio": {"t_single": 1.0, "t_acc": 1.0},
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
    if rule == "sglang":
        return min(1.0, p[x] / params["t_acc"])
    return min(1.0, p[x] / (params["t_acc"] * q[x]))


def _recovery(rule: str, p: list, q: list, x: int) -> list:
    """Law of the token emitted when the drafted ``x`` is rejected."""
    if rule == "scaled_ratio":
        plus = [max(a - b, 0.0) for a, b in zip(p, q)]
        z = sum(plus)
        return [v / z for v in plus] if z > 0 else list(p)
    if rule == "sglang":                 # (p - draft)^+ with draft = p at x, 0 elsewhere
        rest = [0.0 if y == x else v for y, v in enumerate(p)]
        z = sum(rest)
        return [v / z for v in rest] if z > 0 else list(p)
    law = [0.0] * len(p)
    law[_argmax(p)] = 1.0
    return law


@dataclass(frozen=True, repr=False)
class Lossy(cycles.ChainRule):
    """One setting of a lossy acceptance rule, as a chain rule.

    Attributes
    ----------
    rule : {"typical", "sglang", "scaled_ratio", "relaxed"}
        The rule (see the module docstring).
    params : dict, optional
        Its parameters; missing ones take :data:`DEFAULTS`, all are validated
        (:func:`check_params`).

    Raises
    ------
    ValueError, LawError
        Unknown rule or parameter, or a value out of range.

    Examples
    --------
    >>> from specdec.models import toy_pair, sequence_law as target_law
    >>> p, q = toy_pair()
    >>> exact = Lossy("sglang").sequence_law(p, q, (), 2, 3)         # thresholds 1: exact
    >>> round(law_tv(exact, target_law(p, (), 3)), 12)
    0.0
    >>> round(law_tv(Lossy("sglang", {"t_acc": 0.8}).sequence_law(p, q, (), 3, 4), target_law(p, (), 4)), 3)
    0.061
    >>> law_tv(Lossy("typical").sequence_law(p, q, (), 2, 3), target_law(p, (), 3)) > 0.01
    True
    """

    rule: str
    params: dict | None = None
    name: ClassVar[str] = "lossy"
    exact: ClassVar[bool] = False

    def __post_init__(self):
        object.__setattr__(self, "params", check_params(self.rule, self.params))

    def path_outcomes(self, path):
        out = []
        run = 1.0
        for i, x in enumerate(path.tokens):
            p, q = path.p[i], path.q[i]
            a = _accept_prob(self.rule, self.params, p, q, x)
            if a < 1:
                out.extend((run * (1 - a) * w, path.tokens[:i] + (y,), i)
                           for y, w in enumerate(_recovery(self.rule, p, q, x)) if w > 0)
            run *= a
            if run == 0:
                return out
        return out + cycles.full_acceptance(path, run)

    def sample_path(self, path, rng):
        for i, x in enumerate(path.tokens):
            p, q = path.p[i], path.q[i]
            if rng.random() >= _accept_prob(self.rule, self.params, p, q, x):
                return path.tokens[:i] + (cycles.draw_weights(_recovery(self.rule, p, q, x), rng.random()),), i
        return cycles.sample_full_acceptance(path, rng)

    def __repr__(self) -> str:
        return f"{self.rule}({', '.join(f'{k}={v:g}' for k, v in self.params.items())})"


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
        The same for speculative sampling (token-by-token verification,
        :data:`specdec.rules.block.TOKEN`) with the same models.
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
    setting = Lossy(rule, params)
    t_model = cycles.tempered(target, temperature) if temperature != 1.0 else target
    d_model = cycles.tempered(draft, temperature) if temperature != 1.0 else draft
    law = setting.sequence_law(t_model, d_model, prefix, gamma, length, greedy=greedy)
    ref = target_sequence_law(t_model, prefix, length)
    return LossyPoint(rule=rule, params=setting.params, temperature=float(temperature),
                      tv=law_tv(law, ref), kl=kl_divergence(law, ref),
                      mean_accepted=float(setting.mean_accepted(t_model, d_model, prefix, gamma,
                                                                greedy=greedy)),
                      exact_mean_accepted=float(TOKEN.mean_accepted(
                          t_model, d_model, prefix, gamma, greedy=greedy)))


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
