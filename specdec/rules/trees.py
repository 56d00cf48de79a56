"""Several drafts per position and draft trees, verified by recursive rejection sampling.

A **draft tree** gives every node (the confirmed context at the root, a drafted token
below it) ``k_d`` children at depth ``d``: candidate next tokens drafted from the draft's
law at that node. The target scores every node in one pass (tree attention), and the
tree is verified top-down by **recursive rejection sampling** (SpecInfer, Miao et al.
2024, Algorithm 2; Chen et al. 2023 for one candidate): at a node with target law ``p``,
try the children in order; child ``j`` (token ``x_j``, drawn from ``q_j``) is accepted
with probability ``min(1, r_j(x_j) / q_j(x_j))`` where ``r_1 = p``; after a rejection
``r_{j+1} = (r_j - q_j)^+ / Z``. The first accepted child is emitted and verification
continues in its subtree; if every child is rejected, a token drawn from the last
residual is emitted and the cycle ends; at an accepted leaf a bonus token is drawn from
the target's law there. The emitted text has exactly the target's law whatever the
widths, provided ``q_j`` is the law child ``j`` was really drawn from:

``"with"``
    Children drawn independently from ``q`` (with replacement): ``q_j = q``.
``"without"``
    Children drawn from ``q`` without replacement: ``q_j`` is ``q`` restricted to the
    tokens not yet drawn, renormalised (Jeon et al. 2024, recursive speculative decoding;
    EAGLE's sampling path adjusts the draft law this way, SafeAILab/EAGLE issue #74).
``"topk"``
    The draft's ``k`` most likely tokens, deterministically (EAGLE-2's top-k expansion):
    ``q_j`` is a point mass on ``x_j``, so ``x_j`` is accepted with probability ``r_j(x_j)``
    and the residual is ``r_j`` with ``x_j`` removed. Exact as well, which settles the
    claim of SafeAILab/EAGLE issues #183, #221 and #329 that a deterministic top-k tree
    cannot be verified losslessly.

A chain of ``gamma`` drafts is the tree with widths ``(1,) * gamma``; ``k`` drafts per
position are widths ``(k,) * depth``. The rule is an object,
:class:`RecursiveRejection` (one per drafting mode); its two hooks
(:meth:`RecursiveRejection.proposal_law`, the law in the ratio and the residual, and
:attr:`RecursiveRejection.carries_residual`) are what the flawed variants override, each
one object in this module (:data:`specdec.rules.trees.TREE_FLAWS`: ``ORIGINAL_Q``,
``NO_RESIDUAL_UPDATE``). Used in Chapter 5 and Appendix A4.

References
----------
.. [1] X. Miao et al., "SpecInfer: Accelerating Large Language Model Serving with
   Tree-based Speculative Inference and Verification", ASPLOS 2024, Sec. 4, Algorithm 2
   (multi-step speculative sampling) and Theorem 4.2.
.. [2] W. Jeon et al., "Recursive Speculative Decoding: Accelerating LLM Inference via
   Sampling Without Replacement", arXiv:2402.14160, 2024.
.. [3] Y. Li, F. Wei, C. Zhang, H. Zhang, "EAGLE-2: Faster Inference of Language Models
   with Dynamic Draft Trees", EMNLP 2024 (top-k tree expansion).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import product
from typing import ClassVar

import numpy as np

from specdec.rules import base as cycles
from specdec.rules.base import LawOracle
from specdec.laws import check_int

__all__ = [
    "DRAFTING",
    "check_widths",
    "scored_positions",
    "candidate_sets",
    "RecursiveRejection",
    "OriginalQ",
    "NoResidualUpdate",
    "ORIGINAL_Q",
    "NO_RESIDUAL_UPDATE",
    "TREE_FLAWS",
]

#: How the children of a node are drafted.
DRAFTING: tuple[str, ...] = ("with", "without", "topk")


def check_widths(widths) -> tuple[int, ...]:
    """Validate tree widths: a non-empty sequence of integers >= 1 (children per depth).

    Raises
    ------
    TypeError, ValueError
        Naming ``widths`` and the rule broken (not a sequence; empty; a width below 1).
    """
    try:
        ws = tuple(widths)
    except TypeError:
        raise TypeError(f"widths: must be a sequence of integers >= 1 (got {widths!r})") from None
    if not ws:
        raise ValueError("widths: must have at least one depth")
    return tuple(check_int(w, "widths", minimum=1) for w in ws)


def scored_positions(widths) -> int:
    """Positions the target scores per cycle: every tree node, the root included.

    A chain of ``gamma`` drafts scores ``gamma + 1`` positions (the bonus position
    included); a tree of widths ``(k_1, .., k_d)`` scores
    ``1 + k_1 + k_1 k_2 + .. + k_1 .. k_d``.

    Examples
    --------
    >>> scored_positions((1, 1, 1)), scored_positions((2, 2)), scored_positions((3, 1))
    (4, 7, 7)
    """
    ws = check_widths(widths)
    total, level = 1, 1
    for w in ws:
        level *= w
        total += level
    return total


def candidate_sets(q: list, k: int, drafting: str) -> list:
    """Every ordered list of ``k`` children with its probability and the laws they came from.

    Parameters
    ----------
    q : list of float or Fraction
        The draft's law at the node.
    k : int
        Number of children (capped at the support size when drafting without
        replacement or top-k).
    drafting : str
        One of :data:`DRAFTING`.

    Returns
    -------
    list of (probability, tokens, laws)
        ``laws[j]`` is the law child ``j`` was drawn from (``q``; ``q`` renormalised on
        the tokens not yet drawn; or a point mass).

    Examples
    --------
    >>> [(w, t) for w, t, _ in candidate_sets([0.5, 0.25, 0.25], 2, "without")][:2]
    [(0.25, (0, 1)), (0.25, (0, 2))]
    """
    support = [x for x, w in enumerate(q) if w > 0]
    zero, one = 0 * q[0], 0 * q[0] + 1
    if drafting == "with":
        return [(_prod(q[x] for x in xs), xs, [q] * k) for xs in product(support, repeat=k)]
    k = min(k, len(support))
    if drafting == "topk":
        order = sorted(support, key=lambda x: (-q[x], x))[:k]
        laws = []
        for x in order:
            point = [zero] * len(q)
            point[x] = one
            laws.append(point)
        return [(one, tuple(order), laws)]
    out = []

    def rec(xs, prob, laws, left):
        if len(xs) == k:
            out.append((prob, xs, laws))
            return
        mass = sum(q[y] for y in left)
        law = [q[y] / mass if y in left else zero for y in range(len(q))]
        for y in sorted(left):
            rec(xs + (y,), prob * law[y], laws + [law], left - {y})

    rec((), one, [], frozenset(support))
    return out


def _prod(values):
    out = 1
    for v in values:
        out = out * v
    return out


@dataclass(frozen=True, repr=False)
class RecursiveRejection(cycles.Rule):
    """Recursive rejection sampling over a draft tree (SpecInfer, Algorithm 2): exact.

    Attributes
    ----------
    drafting : {"with", "without", "topk"}
        How the children of a node are drafted (see the module docstring).

    Raises
    ------
    ValueError
        Unknown ``drafting``.

    Examples
    --------
    >>> from specdec.models import toy_pair, sequence_law as target_law
    >>> from specdec.laws import law_tv
    >>> p, q = toy_pair()
    >>> law = RecursiveRejection("without").sequence_law(p, q, (), (2, 2), 3)
    >>> round(law_tv(law, target_law(p, (), 3)), 12)
    0.0
    """

    drafting: str = "with"
    name: ClassVar[str] = "recursive_rejection"
    tree: ClassVar[bool] = True
    #: The residual is carried from one sibling to the next (``r_{j+1} = (r_j - q_j)^+ / Z``).
    carries_residual: ClassVar[bool] = True

    def __post_init__(self):
        if self.drafting not in DRAFTING:
            raise ValueError(f"drafting: must be one of {DRAFTING} (got {self.drafting!r})")

    def proposal_law(self, q, law):
        """The law used in the ratio and the residual for a child drawn from ``law``: ``law``."""
        return law

    def depth(self, shape) -> int:
        return len(check_widths(shape))

    def _node(self, p: list, q: list, xs: tuple, laws: list) -> tuple[list, list, object]:
        """Recursive rejection over one node's children.

        Returns ``(accept, final_law, final_mass)``: ``accept[j]`` is the probability that
        child ``j`` is the first accepted; ``final_law / final_mass`` is the law of the
        correction emitted when all are rejected (weight ``1 - sum(accept)``).
        """
        one = 0 * p[0] + 1
        r = list(p)
        stay = one
        accept = []
        for x, law in zip(xs, laws):
            prop = self.proposal_law(q, law)
            a = min(r[x] / prop[x], one) if prop[x] > 0 else one
            accept.append(stay * a)
            stay = stay * (one - a)
            if not self.carries_residual:
                continue
            plus = [max(ri - qi, 0 * qi) for ri, qi in zip(r, prop)]
            z = sum(plus)
            r = [v / z for v in plus] if z > 0 else r
        if not self.carries_residual:
            plus = [max(pi - qi, 0 * qi) for pi, qi in zip(p, q)]
            z = sum(plus)
            return accept, (plus if z > 0 else list(p)), (z if z > 0 else one)
        return accept, r, sum(r)

    def outcomes(self, oracle: LawOracle, ctx: tuple, shape, *, greedy: bool = False) -> list:
        """Outcomes ``(probability, emitted, n_accepted)`` of one tree cycle of widths ``shape``.

        Raises
        ------
        ValueError, TypeError
            Invalid widths.
        """
        widths = check_widths(shape)
        memo: dict = {}
        eos = oracle.eos

        def law_at(c, depth):
            key = (oracle.canon(c), depth)
            hit = memo.get(key)
            if hit is not None:
                return hit
            p = oracle.p(c)
            out: dict = defaultdict(int)
            if depth == len(widths):
                for y, w in enumerate(p):
                    if w > 0:
                        out[((y,), 0)] += w
                memo[key] = out
                return out
            q = oracle.q(c)
            for prob, xs, laws in candidate_sets(q, widths[depth], self.drafting):
                accept, final, mass = self._node(p, q, xs, laws)
                for x, a in zip(xs, accept):
                    if a <= 0:
                        continue
                    if x == eos:
                        out[((x,), 1)] += prob * a
                        continue
                    for (em, n), w in law_at(c + (x,), depth + 1).items():
                        out[((x,) + em, n + 1)] += prob * a * w
                rest = 1 - sum(accept)
                if rest > 0 and mass > 0:
                    for y, m in enumerate(final):
                        if m > 0:
                            out[((y,), 0)] += prob * rest * m / mass
            memo[key] = out
            return out

        return [(w, em, n) for (em, n), w in law_at(tuple(ctx), 0).items()]

    def sample(self, target, draft, ctx, shape, rng, *, greedy=False):
        """One tree cycle, sampled: ``(emitted, n_accepted, depth)``.

        Only the subtree of the accepted child is drafted: the other subtrees are
        independent of everything emitted, so drafting them lazily does not change the
        law. ``depth = len(widths)`` plays the role of ``n_proposed``.
        """
        widths = check_widths(shape)
        emitted: list[int] = []
        for depth in range(len(widths) + 1):
            here = ctx + tuple(emitted)
            p = target.next_law(here)
            if depth == len(widths):
                emitted.append(cycles.draw_weights(p, rng.random()))
                return tuple(emitted), depth, len(widths)
            q = draft.next_law(here)
            xs, laws = _draw_children(q, widths[depth], self.drafting, rng)
            r = p.copy()
            chosen = None
            for x, law in zip(xs, laws):
                prop = self.proposal_law(q, law)
                if rng.random() * prop[x] < r[x]:
                    chosen = x
                    break
                if self.carries_residual:
                    plus = np.maximum(r - prop, 0.0)
                    r = plus / plus.sum() if plus.sum() > 0 else r
            if chosen is None:
                final = r if self.carries_residual else np.maximum(p - q, 0.0)
                if final.sum() <= 0:
                    final = p
                emitted.append(cycles.draw_weights(final, rng.random()))
                return tuple(emitted), depth, len(widths)
            emitted.append(chosen)
            if chosen == target.eos:
                return tuple(emitted), depth + 1, len(widths)
        raise AssertionError("unreachable")  # pragma: no cover

    def __repr__(self) -> str:
        return f"{self.name}({self.drafting})"


def _draw_children(q: np.ndarray, k: int, drafting: str, rng) -> tuple[list, list]:
    if drafting == "topk":
        order = sorted(np.flatnonzero(q > 0).tolist(), key=lambda x: (-q[x], x))[:k]
        laws = []
        for x in order:
            point = np.zeros_like(q)
            point[x] = 1.0
            laws.append(point)
        return order, laws
    xs, laws, left = [], [], q.copy()
    for _ in range(min(k, int((q > 0).sum())) if drafting == "without" else k):
        law = left / left.sum() if drafting == "without" else q
        x = cycles.draw_weights(law, rng.random())
        xs.append(x)
        laws.append(law)
        if drafting == "without":
            left = left.copy()
            left[x] = 0.0
    return xs, laws


# ------------------------------------------------------------------------------ flaws


@dataclass(frozen=True, repr=False)
class OriginalQ(RecursiveRejection):
    """Children drawn without replacement, verified with the unadjusted draft law ``q``.

    The ratio and the residual of child ``j`` must use the law it was drawn from: ``q``
    renormalised on the tokens not drawn before it. Using ``q`` itself is the question
    raised in SafeAILab/EAGLE issue #74 (EAGLE's sampling path draws its candidates
    without replacement). A flaw of drafting without replacement only.

    Raises
    ------
    ValueError
        ``drafting`` other than ``"without"``.
    """

    drafting: str = "without"
    name: ClassVar[str] = "original_q"
    exact: ClassVar[bool] = False

    def __post_init__(self):
        super().__post_init__()
        if self.drafting != "without":
            raise ValueError("drafting: 'original_q' is a flaw of drafting without replacement "
                             f"(drafting='without'; got {self.drafting!r})")

    def proposal_law(self, q, law):
        return q


@dataclass(frozen=True, repr=False)
class NoResidualUpdate(RecursiveRejection):
    """Every sibling tested against the node's target law ``p``; only the final correction uses ``(p - q)^+``.

    Recursive rejection must carry the residual from one sibling to the next
    (``r_{j+1} = (r_j - q_j)^+ / Z``): a second candidate tested against ``p`` again gets
    mass that the first candidate's acceptance already delivered. The natural way to
    generalise a one-candidate verifier to several; no shipped instance was found in the
    engines' trackers, so it stands as the plausible mistake of multi-draft verification.
    """

    name: ClassVar[str] = "no_residual_update"
    exact: ClassVar[bool] = False
    carries_residual: ClassVar[bool] = False


ORIGINAL_Q = OriginalQ()
NO_RESIDUAL_UPDATE = NoResidualUpdate("with")
#: Flaws of recursive rejection over draft trees (another drafting mode:
#: ``NoResidualUpdate("topk")``).
TREE_FLAWS: tuple[RecursiveRejection, ...] = (ORIGINAL_Q, NO_RESIDUAL_UPDATE)
