"""The best any exact verifier can do: a linear program over every verifier of one cycle.

A verifier sees the draft block ``x = x_1..x_k`` (``k = gamma``, or fewer when ``x_k`` is
EOS), drawn from the draft's block law ``Q(x)``, and emits an accepted prefix
``x_1..x_tau`` and one token ``y``: a correction chosen as it likes when ``tau < k``, the
bonus from the target's ``p(. | ctx, x)`` when ``tau = k`` (none after EOS). Whatever the
verifier knows (the laws on the drafted path, the laws off it, the whole joint block
laws), all it can do is choose the joint law ``pi(x, tau, y)``. Decoding continues from
the emitted text with the target's law, so the verifier is exact exactly when the emitted
tokens, followed by target samples up to ``gamma + 1`` tokens, have the target's law of
``(gamma + 1)``-token sequences. That is a linear program:

.. math::

    \\max_{\\pi \\ge 0} \\; E[\\tau] = \\sum \\tau\\, \\pi(x, \\tau, y)
    \\quad \\text{s.t.} \\quad
    \\sum_{\\tau, y} \\pi(x, \\tau, y) = Q(x) \\;\\; \\forall x, \\qquad
    \\sum_{e \\preceq s} \\pi(e)\\, P(s \\mid e) = P(s) \\;\\; \\forall s,

where ``pi(e)`` is the probability that the cycle emits the tokens ``e`` (a prefix of the
sequence ``s``), ``P(s | e)`` the target's probability of completing ``e`` into ``s`` and
``P(s)`` the target's law of ``s`` (a sequence that emits EOS stops there; an emitted
EOS completes only to itself). Full acceptance of ``x`` is one variable ``a(x)``, whose
emitted law is ``x`` followed by the target's bonus; its completion law is ``P(s | x)``.

Its optimum is the largest expected accepted count of *any* valid verifier, with full
knowledge of the joint laws. Sun et al. prove block verification optimal among verifiers
that use the probabilities on the drafted path; Thomas and Pal extend the proof to
verifiers that also use off-path probabilities with such a linear program. The optimum
equals block verification's accepted count (:data:`specdec.rules.block.BLOCK`) on every
case this module has been run on, and lies below the sum-of-minima bound
(:func:`specdec.rules.block.accepted_bound`), which no valid verifier attains in general
(on Sun et al.'s example: 11/9 against 12/9).

What the bound would need shows when the program admits more than verifiers
(``free_tokens=True``): schemes that, after a rejection, emit several tokens of their own
(from the target's laws off the drafted path, which one target pass along the path does
not give). Their optimum reaches the sum-of-minima bound on Sun et al.'s example (12/9,
certified) and on the book's toy pair at ``gamma = 2`` and 3.

:func:`optimal_accepted` solves the program with scipy's HiGHS. On laws given as
fractions (:func:`specdec.rules.base.fixed_oracle`) it also *certifies* the optimum in exact
rational arithmetic: a primal solution and a dual solution, both rationalised, are
checked exactly for feasibility, and their objectives are equal, so the value is the
exact optimum (weak duality), not a rounded float. Used in Appendix A4.

References
----------
.. [1] Z. Sun, U. Mendlovic, Y. Leviathan, A. Aharoni, J. H. Ro, A. Beirami,
   A. T. Suresh, "Block Verification Accelerates Speculative Decoding", ICLR 2025,
   arXiv:2403.10444, Sec. 2 (verifiers, validity), Theorem 2 (optimality).
.. [2] R. Thomas, A. Pal, "Greedy Multi-Path Block Verification for Faster Decoding in
   Speculative Sampling", 2026, arXiv:2602.16961 (an information-agnostic linear
   program: block verification is optimal also over verifiers using off-path
   probabilities).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from specdec.rules import base as cycles
from specdec.rules.block import accepted_bound
from specdec.laws import check_int
from specdec.models import check_prefix

__all__ = ["MAX_VARIABLES", "VerifierLP", "verifier_lp", "OptimalVerifier", "optimal_accepted"]

#: Largest linear program :func:`verifier_lp` builds (variables), a guard on ``V ** gamma``.
MAX_VARIABLES = 200_000


@dataclass(frozen=True)
class VerifierLP:
    """The linear program of one cycle in equality form: maximise ``c @ v``, ``A v = b``, ``v >= 0``.

    Attributes
    ----------
    columns : tuple of tuple of (int, number)
        Column ``j`` of ``A`` as ``(row, coefficient)`` pairs (floats, or fractions when
        the laws are fractions).
    b : tuple of number, shape (n_rows,)
        Right-hand sides: the draft's block laws, then the target's sequence laws.
    c : tuple of int, shape (n_variables,)
        Objective: the accepted count of each variable.
    labels : tuple of tuple
        ``(draft block, tau, tail)`` per variable: the cycle emits the block's first
        ``tau`` tokens and then ``tail`` (one token for a verifier's correction; empty
        for full acceptance, whose bonus is the target's).
    n_blocks : int
        Number of draft-block rows (the first rows of ``A``).
    """

    columns: tuple
    b: tuple
    c: tuple
    labels: tuple
    n_blocks: int

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, variables)``."""
        return len(self.b), len(self.c)

    def dense(self) -> np.ndarray:
        """``A`` as a float array, shape ``(rows, variables)``."""
        a = np.zeros(self.shape)
        for j, col in enumerate(self.columns):
            for i, v in col:
                a[i, j] += float(v)
        return a


def _completions(oracle, ctx: tuple, head: tuple, length: int, one):
    """``(s, P(s | head))`` for every target continuation ``s`` of ``head`` with positive probability."""
    eos = oracle.eos
    out = []

    def rec(seq, prob):
        if len(seq) == length or (seq and seq[-1] == eos):
            out.append((seq, prob))
            return
        for y, w in enumerate(oracle.p(ctx + seq)):
            if w > 0:
                rec(seq + (y,), prob * w)

    rec(tuple(head), one)
    return out


def verifier_lp(oracle, ctx: tuple, gamma: int, *, free_tokens: bool = False) -> VerifierLP:
    """Build the linear program over every exact verifier of one cycle from ``ctx``.

    With ``free_tokens`` the program also admits schemes that, after accepting
    ``x_1..x_tau`` (``tau < k``), emit any ``1`` to ``gamma + 1 - tau`` tokens of their own
    choosing (not only one): tokens whose laws lie off the drafted path, which a verifier
    cannot emit. Its optimum shows what the sum-of-minima bound would need.

    Parameters
    ----------
    oracle : specdec.rules.base.LawOracle
        Target and draft laws (floats, or fractions for an exact program).
    ctx : tuple of int
        Confirmed context (valid for the oracle).
    gamma : int
        Draft length (>= 1); the draft samples its tokens.
    free_tokens : bool
        Admit several emitted tokens after a rejection (default: one, a verifier).

    Returns
    -------
    VerifierLP

    Raises
    ------
    ValueError
        ``gamma`` below 1, or more than :data:`MAX_VARIABLES` variables before EOS
        shortens any block (``V ** gamma * (gamma V + 1)`` for a verifier).
    """
    gamma = check_int(gamma, "gamma", minimum=1)
    vocab = oracle.vocab_size
    length = gamma + 1
    spans = [range(1, length - tau + 1) if free_tokens else range(1, 2) for tau in range(gamma)]
    most = vocab ** gamma * (1 + sum(vocab ** m for span in spans for m in span))
    if most > MAX_VARIABLES:
        raise ValueError(f"gamma: the program could have {most} variables (more than "
                         f"{MAX_VARIABLES}); use a smaller gamma or vocabulary")
    paths = cycles.draft_paths(oracle, ctx, gamma)
    one = paths[0].prob * 0 + 1
    eos = oracle.eos
    rows: dict = {}
    target = _completions(oracle, ctx, (), length, one)
    b = [d.prob for d in paths]
    for s, w in target:
        rows[s] = len(b)
        b.append(w)

    def column(block_row, head):
        col = [(block_row, one)]
        for s, w in _completions(oracle, ctx, head, length, one):
            if s not in rows:                 # reachable only through a head the target
                rows[s] = len(b)              # never emits: its target probability is 0
                b.append(0 * one)
            col.append((rows[s], w))
        return tuple(col)

    columns, c, labels = [], [], []
    for j, d in enumerate(paths):
        k = len(d.tokens)
        for tau in range(k):
            for m in spans[tau]:
                for tail in itertools.product(range(vocab), repeat=m):
                    if eos is not None and eos in tail[:-1]:
                        continue              # nothing is emitted after EOS
                    columns.append(column(j, d.tokens[:tau] + tail))
                    c.append(tau)
                    labels.append((d.tokens, tau, tail))
        columns.append(column(j, d.tokens))   # full acceptance: the block, then the target
        c.append(k)
        labels.append((d.tokens, k, ()))
    return VerifierLP(columns=tuple(columns), b=tuple(b), c=tuple(c), labels=tuple(labels),
                      n_blocks=len(paths))


def _rational(values, limit: int) -> list:
    return [Fraction(float(v)).limit_denominator(limit) for v in values]


def _certify(lp: VerifierLP, x, u) -> Fraction | None:
    """The exact optimum if rationalised ``x`` (primal) and ``u`` (dual) prove it, else None."""
    for limit in (10**2, 10**3, 10**4, 10**6):
        xs, us = _rational(x, limit), _rational(u, limit)
        if min(xs) < 0:
            continue
        residual = [-v for v in lp.b]
        for j, col in enumerate(lp.columns):
            if xs[j]:
                for i, a in col:
                    residual[i] += a * xs[j]
        if any(residual):
            continue
        # dual of max c.v, A v = b, v >= 0: min b.u subject to A^T u >= c
        if any(sum(a * us[i] for i, a in col) < lp.c[j] for j, col in enumerate(lp.columns)):
            continue
        primal = sum(cj * xj for cj, xj in zip(lp.c, xs))
        dual = sum(bi * ui for bi, ui in zip(lp.b, us))
        if primal == dual:
            return primal
    return None


@dataclass(frozen=True)
class OptimalVerifier:
    """The optimum of :func:`verifier_lp`: the most accepted drafts any exact verifier gets.

    Attributes
    ----------
    value : float or Fraction
        Optimal expected accepted drafted tokens per cycle; a Fraction when
        :attr:`certified`.
    certified : bool
        Whether :attr:`value` was proved exact in rational arithmetic (a primal and a
        dual solution checked exactly, with equal objectives). Only laws given as
        fractions can be certified.
    accepted_law : tuple of float, length ``gamma + 1``
        Law of the accepted count under the solver's optimal verifier (one of possibly
        several optima).
    coupling_bound : float or Fraction
        The sum-of-minima bound of :func:`specdec.rules.block.accepted_bound`, for
        comparison (never below :attr:`value`).
    n_variables, n_constraints : int
        Size of the program.
    """

    value: object
    certified: bool
    accepted_law: tuple
    coupling_bound: object
    n_variables: int
    n_constraints: int


def optimal_accepted(target, draft, prefix, gamma: int, *, free_tokens: bool = False) -> OptimalVerifier:
    """Solve the linear program over every exact verifier of one cycle (HiGHS).

    Parameters
    ----------
    target, draft : ToyModel, or a LawOracle and None
        The models (same vocabulary and EOS id), or a :class:`specdec.rules.base.LawOracle`
        (``draft`` ignored), whose fractions give an exactly certified optimum.
    prefix : sequence of int
        Prompt (no EOS).
    gamma : int
        Draft length (>= 1); the draft samples its tokens.
    free_tokens : bool
        Solve instead over schemes that may emit several tokens of their own after a
        rejection (:func:`verifier_lp`): not verifiers; their optimum can exceed every
        verifier's and reach the sum-of-minima bound.

    Returns
    -------
    OptimalVerifier

    Raises
    ------
    TypeError, ValueError
        Invalid models, prefix or gamma; a program too large (:data:`MAX_VARIABLES`).
    RuntimeError
        The solver did not reach an optimum (it always should: block verification is a
        feasible point).

    References
    ----------
    Sun et al. 2025, Theorem 2; Thomas and Pal 2026, arXiv:2602.16961 (the linear
    program over verifiers).

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> from specdec.rules.base import fixed_oracle
    >>> res = optimal_accepted(fixed_oracle([F(1, 3), F(2, 3)], [F(2, 3), F(1, 3)]), None, (), 2)
    >>> res.value, res.certified, res.coupling_bound
    (Fraction(11, 9), True, Fraction(4, 3))
    >>> optimal_accepted(fixed_oracle([F(1, 3), F(2, 3)], [F(2, 3), F(1, 3)]), None, (), 2,
    ...                  free_tokens=True).value                 # not a verifier: the bound
    Fraction(4, 3)
    """
    from scipy.optimize import linprog
    from scipy.sparse import csc_array

    if isinstance(target, cycles.LawOracle):
        oracle, ctx = target, tuple(prefix)
    else:
        oracle = cycles.model_oracle(target, draft)
        ctx = check_prefix(prefix, oracle.vocab_size, eos=oracle.eos)
    gamma = check_int(gamma, "gamma", minimum=1)
    lp = verifier_lp(oracle, ctx, gamma, free_tokens=free_tokens)
    n_rows, n_vars = lp.shape
    idx = [(i, j, float(v)) for j, col in enumerate(lp.columns) for i, v in col]
    rr, cc, vv = zip(*idx)
    a_eq = csc_array((vv, (rr, cc)), shape=(n_rows, n_vars))
    cost, b_eq = -np.asarray(lp.c, dtype=float), np.array(lp.b, dtype=float)
    res = linprog(cost, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    if res.status == 2:
        # The program is feasible by construction (block verification is a feasible point):
        # with draft probabilities near 1e-3 HiGHS's presolve can declare it infeasible in
        # floating point; the solver without presolve then finds the optimum.
        res = linprog(cost, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs",
                      options={"presolve": False})
    if res.status != 0:
        raise RuntimeError(f"linprog: no optimum ({res.message})")
    value = -float(res.fun)
    certified = False
    exact_laws = all(isinstance(w, Fraction) for w in lp.b)
    if exact_laws:
        exact = _certify(lp, res.x, -np.asarray(res.eqlin.marginals))
        if exact is not None:
            value, certified = exact, True
    law = np.zeros(gamma + 1)
    np.add.at(law, np.asarray(lp.c), np.clip(res.x, 0, None))
    return OptimalVerifier(value=value, certified=certified, accepted_law=tuple(law.tolist()),
                           coupling_bound=accepted_bound(oracle, None, ctx, gamma),
                           n_variables=n_vars, n_constraints=n_rows)
