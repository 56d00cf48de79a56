"""The registry of verification rules: every rule of the library, exact or flawed, by name.

Each rule module owns its exact rule and its flaws (one subclass per bug, one instance,
listed in the module's tuple of flaws):

==========================  ===================================  ==========================
module                      exact rule(s)                        flaws
==========================  ===================================  ==========================
:mod:`specdec.rules.token`    ``TOKEN`` (token by token)           ``STEP_FLAWS``
:mod:`specdec.rules.block`  ``BLOCK`` (Sun et al.)               ``BLOCK_FLAWS``
:mod:`specdec.rules.trees`   ``RecursiveRejection(drafting)``     ``TREE_FLAWS``
:mod:`specdec.rules.matching`     ``MATCHING``                         ``MATCHING_FLAWS``
:mod:`specdec.rules.cycle`     ``CORRECT_CYCLE`` (block cycle)      ``CYCLE_FLAWS``
==========================  ===================================  ==========================

This module reads those tuples through :data:`FAMILIES`, so a new flaw is its class and
its instance in its module plus one entry in the module's tuple of flaws (one file), and a
new family is its module plus one import and one ``Family`` line here (two files). The
conformance kit (``--rule NAME``, ``accepted_law=NAME``), the engines and the tests read
:data:`RULES`, :data:`EXACT_RULES`, :data:`FLAWS` and :data:`CYCLE_RULES` instead of lists
of their own.

The stateless rules (:data:`RULES`) are :class:`specdec.rules.base.Rule` objects: the law of one
cycle depends only on the emitted text, so each has an exact sequence law, an accepted-count
law, and a reference sampler that the kit runs through :class:`specdec.rules.RuleSampler`.
The cycle rules of :mod:`specdec.rules.cycle` carry state from one cycle to the next; they are
registered apart (:data:`CYCLE_RULES`) and run by :func:`specdec.simulate.cycle.generate`.

A rule's name is ``repr(rule)``: its class's ``name``, with the drafting mode for a tree
rule (``recursive_rejection(with)``). The token-by-token rule is named ``correct`` (the
name chapters 1-4 give it); ``token`` is accepted for it where the kit took
``--accepted-law token``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from specdec.rules import block as blockverify, matching, trees as multidraft, cycle as stateful, token as tokenrule
from specdec.rules.base import Rule
from specdec.laws import check_int
from specdec.models import check_models, check_prefix
from specdec.verify import check_rng

__all__ = ["Family", "FAMILIES", "EXACT_RULES", "FLAWS", "RULES", "CYCLE_RULES", "ALIASES",
           "rule_name", "get_rule", "accepted_law", "RuleSampler"]


@dataclass(frozen=True)
class Family:
    """One rule module's entry in the registry: its exact rule(s) and its flaws.

    Attributes
    ----------
    module : str
        The module that owns the rules (``"specdec.rules.block"``).
    exact : tuple of Rule
        Its exact rules (several when a parameter is part of the rule: the drafting modes of
        recursive rejection).
    flaws : tuple of Rule
        Its flaws, one object per bug. A flaw must change the law visibly on the kit's
        rule case ``rules_far_g3``: a TV of at least 0.05 to the target there (the
        registry's tests check it, and the kit's tests catch it with that margin).
    """

    module: str
    exact: tuple
    flaws: tuple


#: The rule families, one line each: a new family is its module (exact rule, flaws, their
#: tuple) and one line here; a new flaw of an existing family is one object in its module
#: and its entry in the module's tuple of flaws.
FAMILIES: tuple[Family, ...] = (
    Family("specdec.rules.token", (tokenrule.TOKEN,), tokenrule.STEP_FLAWS),
    Family("specdec.rules.block", (blockverify.BLOCK,), blockverify.BLOCK_FLAWS),
    Family("specdec.rules.trees", tuple(multidraft.RecursiveRejection(d) for d in multidraft.DRAFTING),
           multidraft.TREE_FLAWS),
    Family("specdec.rules.matching", (matching.MATCHING,), matching.MATCHING_FLAWS),
)
#: Every exact stateless rule: token by token, block verification, recursive rejection in
#: each drafting mode, the matching rule.
EXACT_RULES: tuple[Rule, ...] = tuple(r for f in FAMILIES for r in f.exact)
#: Every flaw of a stateless rule, family by family (``UNCLIPPED_RATIO`` is a suspicion that
#: turns out exact; its ``exact`` attribute says so).
FLAWS: tuple[Rule, ...] = tuple(r for f in FAMILIES for r in f.flaws)
#: The stateful block-cycle rules: the correct cycle, its bugs, and the exact reuse of stale
#: proposals (:data:`specdec.rules.cycle.CYCLE_RULES`), by name.
CYCLE_RULES: dict[str, stateful.CycleRule] = {r.name: r for r in stateful.CYCLE_RULES}
#: Earlier spellings: ``--accepted-law token`` named the token-by-token rule.
ALIASES: dict[str, str] = {"token": "correct"}


def rule_name(rule: Rule) -> str:
    """The registry name of ``rule``: ``repr(rule)`` (``'block'``, ``'recursive_rejection(with)'``)."""
    return repr(rule)


def _registry() -> dict[str, Rule]:
    out: dict[str, Rule] = {}
    for rule in EXACT_RULES + FLAWS:
        name = rule_name(rule)
        if name in out:
            raise RuntimeError(f"two rules are named {name!r}: {out[name]!r} and {rule!r}")
        out[name] = rule
    return out


#: Every stateless rule, exact or flawed, by name.
RULES: dict[str, Rule] = _registry()


def get_rule(name: str) -> Rule:
    """The stateless rule called ``name`` (or an alias of :data:`ALIASES`).

    Parameters
    ----------
    name : str
        A key of :data:`RULES`, e.g. ``"block"``, ``"token_residual"``, ``"fallback_p"``.

    Returns
    -------
    specdec.rules.base.Rule

    Raises
    ------
    TypeError
        ``name`` is not a string.
    ValueError
        No rule has that name (the message lists the names).

    Examples
    --------
    >>> get_rule("block").name, get_rule("token") is get_rule("correct")
    ('block', True)
    """
    if not isinstance(name, str):
        raise TypeError(f"rule: must be a rule's name, a string (got {type(name).__name__})")
    rule = RULES.get(ALIASES.get(name, name))
    if rule is None:
        raise ValueError(f"rule: no rule is named {name!r}; the rules are "
                         f"{', '.join(sorted(RULES))} (and {', '.join(sorted(ALIASES))})")
    return rule


def accepted_law(name: str) -> Callable:
    """The first-cycle accepted-count law of the chain rule called ``name``, for the kit.

    Returns
    -------
    callable
        ``law(target, draft, prefix, gamma) -> numpy.ndarray of shape (gamma + 1, 2)``: the
        joint law of one cycle's accepted count and its end at an accepted EOS
        (:meth:`specdec.rules.base.Rule.first_cycle_accepted_law`).

    Raises
    ------
    ValueError
        An unknown name, a tree rule (its law needs the tree's widths: declare it with
        ``RuleSampler(rule, top_widths=...)``), or a rule without a chain form.

    Examples
    --------
    >>> from specdec.models import toy_pair
    >>> p, q = toy_pair()
    >>> accepted_law("block")(p, q, (), 2).shape
    (3, 2)
    """
    rule = get_rule(name)
    if rule.tree:
        raise ValueError(f"rule: {name!r} verifies a tree, whose accepted-count law depends on its "
                         "widths; declare it with specdec.rules.RuleSampler(rule, top_widths=...)")
    if not getattr(rule, "proposes", True):
        raise ValueError(f"rule: {name!r} is an error in the formula of one step's law, not a "
                         "procedure with accepted counts")

    def law(target, draft, prefix, gamma):
        return rule.first_cycle_accepted_law(target, draft, prefix, gamma)

    law.__qualname__ = f"accepted_law({rule_name(rule)!r})"
    return law


@dataclass(frozen=True)
class RuleSampler:
    """A rule as the conformance kit's block sampler ``f(target, draft, prefix, gamma, rng)``.

    Calling it runs one cycle of :attr:`rule` (:meth:`specdec.rules.base.Rule.sample`) and returns
    ``(emitted, n_accepted, n_proposed)``. Its :meth:`first_cycle_accepted_law` declares the
    accepted-count law of the rule, which the kit then checks the reported counts
    against instead of the token-by-token law (:func:`specdec.conformance.run_battery`).

    Attributes
    ----------
    rule : Rule
        The verification rule (exact or flawed).
    greedy : bool
        Greedy drafts (chain rules).
    top_widths : tuple of int, optional
        Tree rules only: the widths at the top of the tree, filled with 1 to depth
        ``gamma`` (``(2,)`` gives ``(2, 1, ..., 1)``); required for a tree rule.

    Raises
    ------
    TypeError
        ``rule`` is not a :class:`Rule`.
    ValueError
        ``top_widths`` missing for a tree rule or given for a chain rule.

    Examples
    --------
    >>> import numpy as np
    >>> from specdec.rules import block as blockverify
    >>> from specdec import models
    >>> p, q = models.toy_pair()
    >>> f = RuleSampler(blockverify.BLOCK)
    >>> emitted, n, k = f(p, q, (), 3, np.random.default_rng(0))
    >>> 1 <= len(emitted) <= 4 and n <= k <= 3
    True
    """

    rule: Rule
    greedy: bool = False
    top_widths: tuple | None = None

    def __post_init__(self):
        if not isinstance(self.rule, Rule):
            raise TypeError(f"rule: must be a specdec.rules.base.Rule such as blockverify.BLOCK "
                            f"(got {self.rule!r})")
        if self.rule.tree and self.top_widths is None:
            raise ValueError(f"top_widths: required for the tree rule {self.rule!r} (e.g. (2,))")
        if not self.rule.tree and self.top_widths is not None:
            raise ValueError(f"top_widths: only for tree rules ({self.rule!r} verifies a chain)")
        if self.top_widths is not None:
            widths = tuple(self.top_widths)
            if not widths or any(check_int(w, "top_widths", minimum=1) < 1 for w in widths):
                raise ValueError("top_widths: must be a non-empty sequence of integers >= 1")
            object.__setattr__(self, "top_widths", widths)

    def shape(self, gamma: int):
        """What one cycle drafts at draft length ``gamma``: gamma, or the tree widths."""
        gamma = check_int(gamma, "gamma", minimum=1)
        if self.top_widths is None:
            return gamma
        return (self.top_widths + (1,) * gamma)[:gamma]

    def __call__(self, target, draft, prefix, gamma, rng):
        check_models(target, draft)
        ctx = check_prefix(prefix, target.vocab_size, eos=target.eos)
        return self.rule.sample(target, draft, ctx, self.shape(gamma), check_rng(rng),
                                greedy=self.greedy)

    def first_cycle_accepted_law(self, target, draft, prefix, gamma) -> np.ndarray:
        """The rule's joint law of one cycle's accepted count and accepted EOS, ``(gamma + 1, 2)``."""
        return self.rule.first_cycle_accepted_law(target, draft, prefix, self.shape(gamma),
                                                  greedy=self.greedy)

    def __repr__(self) -> str:
        extra = (", greedy" if self.greedy else "") + (f", top_widths={self.top_widths}"
                                                        if self.top_widths else "")
        return f"RuleSampler({self.rule!r}{extra})"
