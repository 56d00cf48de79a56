"""Block verification (Sun et al., ICLR 2025): verify the drafted block jointly, exactly.

Token-by-token verification (Leviathan et al.; :mod:`specdec.block`) stops at the first
rejected draft token. Sun et al. show that this is not the best a verifier can do with the
same draft and the same target pass: **block verification** looks at the whole block and
can keep a longer prefix, while the emitted text still has exactly the target's law.

The algorithm, for a draft block ``x_1..x_k`` with draft laws ``q_i`` and target laws
``p_i = p(. | ctx, x_1..x_{i-1})`` (``i = 1..k+1``), in the paper's notation (Algorithm 2,
Eqs. 4-5):

1. cumulative weights ``w_0 = 1``, ``w_i = min(w_{i-1} p_i(x_i) / q_i(x_i), 1)``;
2. for ``i < k`` the residual mass ``Z_i = sum_y max(w_i p_{i+1}(y) - q_{i+1}(y), 0)``
   and the stopping probability ``h_i = Z_i / (Z_i + 1 - w_i)``; ``h_k = w_k``;
3. draw independent ``eta_1..eta_k ~ U(0, 1)``; the accepted length is the *last* ``i``
   with ``eta_i <= h_i`` (``tau = 0`` if none), so ``P(tau = i) = h_i prod_{j>i}(1 - h_j)``;
4. emit ``x_1..x_tau`` and one token ``Y``: from ``p_{k+1}`` if ``tau = k`` (the bonus),
   otherwise from the block residual ``max(w_tau p_{tau+1} - q_{tau+1}, 0) / Z_tau``.

A draft block that ends with EOS has no bonus position: ``tau = k`` then emits the block.
(This equals the paper's rule on models padded after EOS, where draft and target agree.)

Besides the exact rule (:data:`EXACT_VARIANTS`), two flawed variants that real
implementations shipped or were asked to ship (:data:`FLAWED_VARIANTS`):

``"token_residual"``
    The block rule's accepted length, but the corrected token is drawn from the
    token-level residual ``(p_{tau+1} - q_{tau+1})^+`` instead of the block residual
    (vllm-ascend issue #7807, fixed by PR #7808: "``sample_recovered_tokens`` draws tokens
    from the same distribution, regardless of whether block_verify is enabled").
``"first_failure"``
    Stop the scan at the first position with ``eta_i > h_i`` (accept the contiguous run
    of passes), the change a review of vllm-ascend PR #11985 asked for ("If a token at
    step i is rejected (u > h), all subsequent tokens must ..."). Block verification
    needs the *last* pass, not the first failure.

The module also gives the paper's worked example in exact fractions
(:func:`paper_example`: 10/9, 11/9 and 12/9 accepted drafts per cycle) and the bound that
no valid verifier can beat (:func:`accepted_bound`).

References
----------
.. [1] Z. Sun, U. Mendlovic, Y. Leviathan, A. Aharoni, J. H. Ro, A. Beirami,
   A. T. Suresh, "Block Verification Accelerates Speculative Decoding", ICLR 2025,
   arXiv:2403.10444, Algorithm 2, Theorems 1-2, Sec. 3 (the example).
.. [2] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023, Algorithm 1 (token-by-token verification).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from . import cycles
from .verify import check_rng
from .cycles import DraftPath, LawOracle
from .laws import LawError, check_int
from .models import ToyModel, check_prefix

__all__ = [
    "VARIANTS",
    "EXACT_VARIANTS",
    "FLAWED_VARIANTS",
    "ISSUES",
    "block_weights",
    "stopping_probabilities",
    "token_verify",
    "block_verify",
    "cycle_outcomes",
    "sequence_law",
    "accepted_count_law",
    "mean_accepted",
    "accepted_bound",
    "PaperExample",
    "paper_example",
    "sample_cycle",
]

#: Verification rules of this module. ``"token"`` is token-by-token verification,
#: ``"block"`` Sun et al.'s block verification; the others are flawed block variants.
VARIANTS: tuple[str, ...] = ("token", "block", "token_residual", "first_failure")
#: Rules whose emitted sequence has exactly the target's law.
EXACT_VARIANTS: tuple[str, ...] = ("token", "block")
#: Flawed block-verification variants (see the module docstring).
FLAWED_VARIANTS: tuple[str, ...] = ("token_residual", "first_failure")
#: Where each flawed variant was shipped or proposed.
ISSUES: dict[str, str] = {
    "token_residual": "https://github.com/vllm-project/vllm-ascend/issues/7807",
    "first_failure": "https://github.com/vllm-project/vllm-ascend/pull/11985",
}


def _check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"variant: must be one of {VARIANTS} (got {variant!r})")
    return variant


def block_weights(path: DraftPath) -> list:
    """Cumulative weights ``w_0 = 1, w_i = min(w_{i-1} p_i(x_i) / q_i(x_i), 1)``.

    Returns
    -------
    list, length ``k + 1``
        Floats or fractions, like the laws of ``path``.
    """
    one = path.prob * 0 + 1
    w = [one]
    for i, x in enumerate(path.tokens):
        w.append(min(w[-1] * path.p[i][x] / path.q[i][x], one))
    return w


def _residual(w, p, q) -> tuple[list, object]:
    """``max(w p - q, 0)`` and its mass."""
    plus = [max(w * a - b, 0 * b) for a, b in zip(p, q)]
    return plus, sum(plus)


def stopping_probabilities(path: DraftPath) -> list:
    """``h_0 .. h_k`` of block verification (``h_0 = 1``: tau is 0 when no later one passes).

    ``h_i = Z_i / (Z_i + 1 - w_i)`` for ``0 < i < k`` (1 when the denominator is 0) and
    ``h_k = w_k`` (Sun et al., Algorithm 2).
    """
    w = block_weights(path)
    k = len(path.tokens)
    one = w[0]
    h = [one]
    for i in range(1, k):
        _, z = _residual(w[i], path.p[i], path.q[i])
        den = z + one - w[i]
        h.append(z / den if den > 0 else one)
    if k:
        h.append(w[k])
    return h


def _tau_law(h: list, first_failure: bool) -> list:
    """``P(tau = i)``, ``i = 0..k``, from the stopping probabilities."""
    k = len(h) - 1
    if first_failure:
        out, run = [], h[0]
        for i in range(k + 1):
            nxt = h[i + 1] if i < k else None
            out.append(run * (1 - nxt) if nxt is not None else run)
            if nxt is not None:
                run = run * nxt
        return out
    out = [0] * (k + 1)
    tail = h[0] * 0 + 1
    for i in range(k, -1, -1):
        out[i] = h[i] * tail
        tail = tail * (1 - h[i])
    return out


def _finish(path: DraftPath, tau: int, weight, law: list, total, out: list) -> None:
    """Append the outcomes ``x_1..x_tau, Y`` with ``Y ~ law / total``."""
    if weight <= 0 or total <= 0:
        return
    head = path.tokens[:tau]
    for y, m in enumerate(law):
        if m > 0:
            out.append((weight * m / total, head + (y,), tau))


def token_verify(path: DraftPath) -> list:
    """Outcomes of token-by-token verification given a draft path.

    Accept ``x_i`` with probability ``min(1, p_i(x_i) / q_i(x_i))`` left to right; at the
    first rejection emit a draw from ``(p_i - q_i)^+``; after a full acceptance a bonus
    from ``p_{k+1}`` (none after EOS).

    Returns
    -------
    list of (probability given the path, emitted, n_accepted)
    """
    out: list = []
    run = path.prob * 0 + 1
    k = len(path.tokens)
    for i, x in enumerate(path.tokens):
        p, q = path.p[i], path.q[i]
        a = min(p[x] / q[x], run * 0 + 1)
        plus, z = _residual(1, p, q)
        _finish(path, i, run * (1 - a), plus, z, out)
        run = run * a
    _accept_all(path, k, run, out)
    return out


def _accept_all(path: DraftPath, k: int, weight, out: list) -> None:
    if weight <= 0:
        return
    if path.ends:
        out.append((weight, path.tokens, k))
    else:
        _finish(path, k, weight, path.p[k], sum(path.p[k]), out)


def block_verify(path: DraftPath, variant: str = "block") -> list:
    """Outcomes of block verification (or a flawed variant) given a draft path.

    Parameters
    ----------
    path : DraftPath
        A drafted block and the laws along it.
    variant : str
        ``"block"`` (Sun et al., Algorithm 2), ``"token_residual"`` or
        ``"first_failure"`` (see the module docstring); ``"token"`` delegates to
        :func:`token_verify`.

    Returns
    -------
    list of (probability given the path, emitted, n_accepted)

    Raises
    ------
    ValueError
        Unknown variant.
    """
    variant = _check_variant(variant)
    if variant == "token":
        return token_verify(path)
    w = block_weights(path)
    h = stopping_probabilities(path)
    taus = _tau_law(h, variant == "first_failure")
    k = len(path.tokens)
    out: list = []
    for tau in range(k):
        if variant == "token_residual":
            law, z = _residual(1, path.p[tau], path.q[tau])
        else:
            law, z = _residual(w[tau], path.p[tau], path.q[tau])
        _finish(path, tau, taus[tau], law, z, out)
    _accept_all(path, k, taus[k], out)
    return out


def cycle_outcomes(oracle: LawOracle, ctx: tuple, gamma: int, variant: str = "block") -> list:
    """Outcomes ``(probability, emitted, n_accepted)`` of one cycle from ``ctx``."""
    variant = _check_variant(variant)
    return cycles.chain_outcomes(lambda path: block_verify(path, variant), oracle, ctx, gamma)


def sequence_law(target: ToyModel, draft: ToyModel, prefix, gamma: int, length: int,
                 variant: str = "block") -> dict:
    """Exact law of the first ``length`` emitted tokens under repeated cycles of ``variant``.

    Parameters
    ----------
    target, draft : ToyModel
        Same vocabulary and EOS id.
    prefix : sequence of int
        Prompt (no EOS).
    gamma : int
        Draft length (>= 1).
    length : int
        Tokens whose law is computed (>= 1; cost grows like ``V ** length``).
    variant : str
        One of :data:`VARIANTS`.

    Returns
    -------
    dict[tuple[int, ...], float]
        Keys as in :func:`specdec.models.sequence_law`; equal to the target's law for
        the :data:`EXACT_VARIANTS` (Sun et al., Theorem 1), not for the flawed ones.

    Examples
    --------
    >>> from specdec.models import toy_pair, sequence_law as target_law
    >>> from specdec.block import law_tv
    >>> p, q = toy_pair()
    >>> round(law_tv(sequence_law(p, q, (), 3, 4), target_law(p, (), 4)), 12)
    0.0
    """
    oracle = cycles.model_oracle(target, draft)
    gamma = check_int(gamma, "gamma", minimum=1)
    variant = _check_variant(variant)
    return cycles.rule_sequence_law(lambda ctx: cycle_outcomes(oracle, ctx, gamma, variant),
                                    oracle, prefix, length)


def _oracle_and_ctx(target, draft, prefix):
    if isinstance(target, LawOracle):
        return target, tuple(prefix)
    oracle = cycles.model_oracle(target, draft)
    return oracle, check_prefix(prefix, oracle.vocab_size, eos=oracle.eos)


def accepted_count_law(target, draft, prefix, gamma: int, variant: str = "block") -> list:
    """Exact law of the number of accepted drafted tokens in one cycle from ``prefix``.

    ``target`` may be a :class:`~specdec.cycles.LawOracle` (then ``draft`` is ignored),
    which keeps fractions exact.

    Returns
    -------
    list, length ``gamma + 1``
        Entry ``i`` is P(``i`` drafted tokens accepted).

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> from specdec.cycles import fixed_oracle
    >>> o = fixed_oracle([F(1, 3), F(2, 3)], [F(2, 3), F(1, 3)])
    >>> [str(x) for x in accepted_count_law(o, None, (), 2, "block")]
    ['1/3', '1/9', '5/9']
    """
    oracle, ctx = _oracle_and_ctx(target, draft, prefix)
    gamma = check_int(gamma, "gamma", minimum=1)
    return cycles.accepted_count_law(cycle_outcomes(oracle, ctx, gamma, variant), gamma)


def mean_accepted(target, draft, prefix, gamma: int, variant: str = "block"):
    """Expected accepted drafted tokens per cycle (exact: fractions stay fractions)."""
    law = accepted_count_law(target, draft, prefix, gamma, variant)
    return sum(i * w for i, w in enumerate(law))


def accepted_bound(target, draft, prefix, gamma: int):
    """Upper bound on the expected accepted drafted tokens of *any* valid verifier.

    A verifier that keeps ``i`` drafted tokens emits them, so with an exact output the
    event "at least ``i`` accepted" is an event where the draft's first ``i`` tokens and
    the emitted first ``i`` tokens coincide; its probability is at most
    ``sum_{x^i} min(Q(x^i), P(x^i))``, where ``Q`` and ``P`` are the draft's and the
    target's laws of ``i``-token blocks (the coupling bound). Summing over
    ``i = 1..gamma``::

        E[tau] <= sum_{i=1}^{gamma} sum_{x^i} min(Q(x^i), P(x^i)).

    An idealised verifier that knows the joint block laws can reach it in Sun et al.'s
    example (12/9); block verification (which sees only the laws along the drafted path)
    reaches 11/9 there.

    Parameters
    ----------
    target, draft, prefix, gamma
        As in :func:`accepted_count_law` (``target`` may be a LawOracle).

    Returns
    -------
    float or Fraction

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> from specdec.cycles import fixed_oracle
    >>> accepted_bound(fixed_oracle([F(1, 3), F(2, 3)], [F(2, 3), F(1, 3)]), None, (), 2)
    Fraction(4, 3)
    """
    oracle, ctx = _oracle_and_ctx(target, draft, prefix)
    gamma = check_int(gamma, "gamma", minimum=1)
    eos = oracle.eos
    total = 0
    level = {(): (1 + 0 * oracle.p(ctx)[0], 1 + 0 * oracle.p(ctx)[0])}
    for _ in range(gamma):
        nxt = {}
        for seq, (pp, qq) in level.items():
            if seq and seq[-1] == eos:
                continue
            p, q = oracle.p(ctx + seq), oracle.q(ctx + seq)
            for x in range(len(p)):
                if p[x] > 0 and q[x] > 0:
                    nxt[seq + (x,)] = (pp * p[x], qq * q[x])
        total += sum(min(a, b) for a, b in nxt.values())
        level = nxt
    return total


@dataclass(frozen=True)
class PaperExample:
    """Sun et al.'s example: expected accepted drafts per cycle, in exact fractions.

    Attributes
    ----------
    p, q : tuple of Fraction
        Target and draft laws over ``{a, b}``, the same at every position.
    gamma : int
        Draft length (2).
    token : Fraction
        Token-by-token verification (10/9).
    block : Fraction
        Block verification (11/9).
    bound : Fraction
        The idealised verifier that knows the joint block laws (12/9), equal to the
        coupling bound of :func:`accepted_bound`.
    token_law, block_law : tuple of Fraction
        Laws of the accepted count (0, 1, 2) under each rule.
    """

    p: tuple
    q: tuple
    gamma: int
    token: Fraction
    block: Fraction
    bound: Fraction
    token_law: tuple
    block_law: tuple


def paper_example() -> PaperExample:
    """The worked example of Sun et al. (Sec. 3): ``p = (1/3, 2/3)``, ``q = (2/3, 1/3)``, ``gamma = 2``.

    Examples
    --------
    >>> ex = paper_example()
    >>> str(ex.token), str(ex.block), str(ex.bound)
    ('10/9', '11/9', '4/3')
    """
    p = (Fraction(1, 3), Fraction(2, 3))
    q = (Fraction(2, 3), Fraction(1, 3))
    oracle = cycles.fixed_oracle(p, q)
    tl = accepted_count_law(oracle, None, (), 2, "token")
    bl = accepted_count_law(oracle, None, (), 2, "block")
    return PaperExample(p=p, q=q, gamma=2,
                        token=sum(i * w for i, w in enumerate(tl)),
                        block=sum(i * w for i, w in enumerate(bl)),
                        bound=accepted_bound(oracle, None, (), 2),
                        token_law=tuple(tl), block_law=tuple(bl))



def sample_cycle(target: ToyModel, draft: ToyModel, prefix, gamma: int, rng,
                 variant: str = "block") -> tuple[tuple[int, ...], int]:
    """One cycle of ``variant``, sampled (reference implementation, for reading).

    Random numbers: one uniform per drafted token, one ``eta_i`` per position, one for
    the corrected or bonus token.

    Returns
    -------
    (emitted, n_accepted)

    Examples
    --------
    >>> from specdec.models import toy_pair
    >>> p, q = toy_pair()
    >>> emitted, n = sample_cycle(p, q, (), 3, np.random.default_rng(0))
    >>> 1 <= len(emitted) <= 4 and n == len(emitted) - 1
    True
    """
    cycles.check_models(target, draft)
    ctx = check_prefix(prefix, target.vocab_size, eos=target.eos)
    gamma = check_int(gamma, "gamma", minimum=1)
    rng = check_rng(rng)
    variant = _check_variant(variant)
    toks, ps, qs = [], [], []
    while len(toks) < gamma and not (toks and toks[-1] == target.eos):
        here = ctx + tuple(toks)
        q = draft.next_law(here)
        toks.append(cycles.draw_weights(q, rng.random()))
        ps.append(target.next_law(here).tolist())
        qs.append(q.tolist())
    if toks[-1] != target.eos:
        ps.append(target.next_law(ctx + tuple(toks)).tolist())
    path = DraftPath(tuple(toks), 1.0, tuple(ps), tuple(qs))
    k = len(toks)
    eta = rng.random(k)
    if variant == "token":
        tau = k
        for i, x in enumerate(toks):
            if not eta[i] * qs[i][x] < ps[i][x]:
                tau = i
                break
        law = ps[k] if tau == k and not path.ends else None
        if tau < k:
            law = np.maximum(np.array(ps[tau]) - np.array(qs[tau]), 0.0)
    else:
        h = stopping_probabilities(path)
        passed = [True] + [bool(eta[i - 1] <= h[i]) for i in range(1, k + 1)]
        if variant == "first_failure":
            tau = next((i - 1 for i in range(1, k + 1) if not passed[i]), k)
        else:
            tau = max(i for i in range(k + 1) if passed[i])
        w = block_weights(path)
        if tau < k:
            scale = 1.0 if variant == "token_residual" else w[tau]
            law = np.maximum(scale * np.array(ps[tau]) - np.array(qs[tau]), 0.0)
        else:
            law = None if path.ends else ps[k]
    u = rng.random()
    if law is None:
        return tuple(toks), k
    return tuple(toks[:tau]) + (cycles.draw_weights(law, u),), tau
