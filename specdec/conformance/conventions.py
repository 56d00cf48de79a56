"""Calling conventions of the samplers the kit tests: marks, signatures, loading by name.

See the package docstring (:mod:`specdec.conformance`) for the conventions themselves.
"""

from __future__ import annotations

import dataclasses
import inspect
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from specdec import rules as _rules

__all__ = ["TOKEN", "BLOCK", "BATCH", "batch_sampler", "LAWS", "LOGITS", "AUTO", "FROM_Q", "OWN", "COUNTED", "NOT_COUNTED",
           "SamplerSpec", "token_sampler", "block_sampler",
           "describe_sampler", "load_sampler", "ACCEPTED_LAWS", "check_accepted_law"]

TOKEN = "token"
BLOCK = "block"
BATCH = "batch"
LAWS = "laws"
LOGITS = "logits"

#: Accounting conventions (see :class:`SamplerSpec`): where proposals come from, and how
#: an accepted end-of-sequence proposal is counted. ``AUTO``: decided from the data.
AUTO = "auto"
FROM_Q = "q"
OWN = "own"
COUNTED = "counted"
NOT_COUNTED = "not_counted"

#: Verification rules whose accepted-count law a block sampler can name (see
#: :class:`SamplerSpec`): every chain rule of the registry :data:`specdec.rules.RULES`, exact
#: or flawed (``"correct"`` is token by token, the default; ``"token"`` is its earlier name).
ACCEPTED_LAWS: tuple[str, ...] = tuple(
    sorted(name for name, rule in _rules.RULES.items()
           if not rule.tree and getattr(rule, "proposes", True))) + tuple(_rules.ALIASES)

#: Largest number of steps requested from a vectorised sampler in one call.
CHUNK = 1 << 18

_MARK = "__conformance__"


# --------------------------------------------------------------------------------------
# Samplers: calling conventions
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplerSpec:
    """How the kit calls a sampler.

    Attributes
    ----------
    kind : {"token", "block"}
        One speculative step, or one speculative cycle over toy autoregressive models.
    vectorised : bool
        The callable produces ``n`` independent outcomes per call (token steps, or whole
        decodes for a block sampler).
    inputs : {"laws", "logits"}
        Token samplers only: receives processed laws ``(p, q)`` or raw logits plus the
        sampling settings.
    name : str
        Printable name (``module:qualname``).
    proposals : {"auto", "q", "own"}
        Accounting convention: the proposals are drawn from the draft law ``q`` the kit
        passes (``"q"``), or from a law of the sampler's own (``"own"``: an arg-max draft,
        a draft restricted to a smaller vocabulary, a different precision). With
        ``"own"`` the reported accepted flags are checked only against the identities
        that hold for every proposal law, and a low acceptance is an efficiency warning.
        ``"auto"`` (default): ``"q"`` unless a token case shows accept/reject outcomes
        that proposals from ``q`` can never give but another proposal law can (the
        report says it was detected).
    accepted_eos : {"auto", "counted", "not_counted"}
        Block accounting convention: a cycle that ends at an *accepted* end-of-sequence
        proposal reports it among the accepted proposals (``"counted"``, as
        :mod:`specdec.simulate.cycle` does) or not (``"not_counted"``, as Hugging Face transformers
        does: it reports ``n_matches = L - 1``). ``"auto"``: ``"counted"`` if some cycle
        reports it, else ``"not_counted"``.
    accepted_law : str, callable or None
        Block samplers: the verification rule whose accepted-count law the reported
        counts of the first cycle must follow. A name of :data:`ACCEPTED_LAWS`
        (``"token"``: token by token, Leviathan et al.; ``"block"``: block verification,
        Sun et al.; ``"matching"``: the matching rule with drafts sampled from ``q``), or a
        callable ``law(target, draft, prefix, gamma)`` returning the joint law
        ``(gamma + 1, 2)`` of (accepted count, cycle ends at an accepted end-of-sequence),
        or a ``(gamma + 1,)`` law of the reported count. ``None`` (default): the sampler's
        own ``first_cycle_accepted_law`` method if it has one (as
        :class:`specdec.rules.RuleSampler` does), else token by token.
    """

    kind: str
    vectorised: bool = False
    inputs: str = LAWS
    name: str = "sampler"
    proposals: str = AUTO
    accepted_eos: str = AUTO
    accepted_law: Any = None


def _callable_name(f: Any) -> str:
    mod = getattr(f, "__module__", None) or type(f).__module__
    qual = getattr(f, "__qualname__", None)
    if qual is None:                      # an instance: its class, and what its repr says
        qual, text = type(f).__qualname__, repr(f)
        if text.startswith(qual + "("):   # e.g. RuleSampler(block), not the class alone
            qual = text
    return f"{mod}:{qual}"


def _check_choice(value, name: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"{name}: must be one of {', '.join(map(repr, choices))} (got {value!r})")
    return value


def _marker(func, kind: str, vectorised: bool, inputs: str, **conventions):
    """What the three markers below return: ``func`` with its :class:`SamplerSpec`
    attached, or (``func`` None, the marker called with arguments) the decorator doing it."""

    def mark(f):
        setattr(f, _MARK, SamplerSpec(kind, bool(vectorised), inputs, _callable_name(f), **conventions))
        return f

    return mark(func) if func is not None else mark


def token_sampler(func: Callable | None = None, *, vectorised: bool = False, inputs: str = LAWS,
                  proposals: str = AUTO):
    """Mark a callable as a token-level sampler (decorator, with or without arguments).

    Parameters
    ----------
    func : callable, optional
        The sampler; see the module docstring for the signatures.
    vectorised : bool
        ``True`` if the sampler takes a trailing ``n`` and returns ``n`` draws.
    inputs : {"laws", "logits"}
        What the sampler receives: processed laws ``(p, q)``, or logits and settings.
    proposals : {"auto", "q", "own"}
        Where its proposals come from (see :class:`SamplerSpec`).

    Returns
    -------
    callable
        ``func`` itself, with a :class:`SamplerSpec` attached.

    Raises
    ------
    ValueError
        If ``inputs`` or ``proposals`` is not one of its choices.

    Examples
    --------
    >>> @token_sampler(vectorised=True)
    ... def mine(p, q, rng, n):
    ...     return rng.choice(len(p), size=n, p=p)
    >>> describe_sampler(mine).vectorised
    True
    """
    _check_choice(inputs, "inputs", (LAWS, LOGITS))
    _check_choice(proposals, "proposals", (AUTO, FROM_Q, OWN))
    return _marker(func, TOKEN, vectorised, inputs, proposals=proposals)


def block_sampler(func: Callable | None = None, *, vectorised: bool = False, proposals: str = AUTO,
                  accepted_eos: str = AUTO, accepted_law=None):
    """Mark a callable (or a class of callables) as a block-level sampler.

    Parameters
    ----------
    func : callable
        ``func(target, draft, prefix, gamma, rng)`` (one cycle) or, with
        ``vectorised=True``, ``func(target, draft, prefix, gamma, length, rng, n)`` (``n``
        whole decodes); see the module docstring.
    vectorised : bool
        Whole decodes at once.
    proposals : {"auto", "q", "own"}
    accepted_eos : {"auto", "counted", "not_counted"}
        Accounting conventions (see :class:`SamplerSpec`).
    accepted_law : str or callable, optional
        The accepted-count law of the sampler's verification rule (``"block"`` for block
        verification; see :class:`SamplerSpec`); default token by token.

    Returns
    -------
    callable
        ``func`` itself, with a :class:`SamplerSpec` attached.

    Raises
    ------
    ValueError
        If a convention is not one of its choices.

    Examples
    --------
    >>> @block_sampler(accepted_law="block")
    ... def mine(target, draft, prefix, gamma, rng):
    ...     return [0], 0, gamma
    >>> describe_sampler(mine).accepted_law
    'block'
    """
    _check_choice(proposals, "proposals", (AUTO, FROM_Q, OWN))
    _check_choice(accepted_eos, "accepted_eos", (AUTO, COUNTED, NOT_COUNTED))
    check_accepted_law(accepted_law)
    return _marker(func, BLOCK, vectorised, LAWS, proposals=proposals, accepted_eos=accepted_eos,
                   accepted_law=accepted_law)


def batch_sampler(func: Callable | None = None):
    """Mark a callable as a batched sampler: one call verifies a batch of requests.

    ``func(target_logits, draft_probs, draft_tokens, n_draft, settings, rng)``, with the
    flattened ragged layout real engines use (vLLM's rejection sampler):

    * ``n_draft`` ``(R,)`` int: proposals of each request, 0 allowed;
    * ``draft_tokens`` ``(N,)`` int, ``N = n_draft.sum()``: the proposals, request by
      request; ``draft_probs`` ``(N, V)``: the (processed) draft law each was drawn from;
    * ``target_logits`` ``(N + R, V)``: raw target logits, request by request, one row per
      proposal then the bonus row;
    * ``settings``: dict of ``(R,)`` arrays ``temperature``, ``top_k`` (0: off),
      ``top_p`` (1.0: off) and ``greedy`` (bool: the request decodes by arg-max).

    It returns ``(tokens, n_emitted)`` (``(R, max(n_draft) + 1)`` ints padded with -1, and
    ``(R,)``), or an object with those attributes (and optionally ``n_accepted``). Each
    request is checked against its own law: the target law processed with its own
    settings, token by token along its accepted prefix.
    """
    return _marker(func, BATCH, True, LAWS)


def check_accepted_law(law):
    """``law`` if it is None, a name of :data:`ACCEPTED_LAWS` or a callable; else an error naming it."""
    if isinstance(law, str):
        _check_choice(law, "accepted_law", ACCEPTED_LAWS)
    elif law is not None and not callable(law):
        raise TypeError(f"accepted_law: must be a rule's name (specdec.rules.RULES, e.g. 'block') or a "
                        f"callable law(target, draft, prefix, gamma) (got {law!r})")
    elif law is not None:
        try:
            inspect.signature(law).bind(None, None, (), 1)
        except TypeError as exc:       # it cannot be called as law(target, draft, prefix, gamma)
            raise TypeError(f"accepted_law: must be callable as law(target, draft, prefix, "
                            f"gamma); {getattr(law, '__qualname__', repr(law))} is not "
                            f"({exc})") from None
        except ValueError:             # no signature (some builtins): found when it is called
            pass
    return law


def _required_positional(f) -> int | None:
    try:
        sig = inspect.signature(f)
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for prm in sig.parameters.values()
               if prm.kind in kinds and prm.default is inspect.Parameter.empty)


def _has_keyword(f, name: str) -> bool:
    try:
        return name in inspect.signature(f).parameters
    except (TypeError, ValueError):
        return False


def describe_sampler(sampler, *, kind: str | None = None, vectorised: bool | None = None,
                     inputs: str | None = None, proposals: str | None = None,
                     accepted_eos: str | None = None, accepted_law=None) -> SamplerSpec:
    """Decide how to call ``sampler``.

    Explicit arguments win; then the mark left by :func:`token_sampler` or
    :func:`block_sampler`; then the signature: 7 required positional parameters means a
    vectorised block sampler, 6 a batched sampler, 5 a block sampler, 4 a vectorised token sampler, 3 a token
    sampler; a keyword parameter named ``temperature`` means logits inputs.

    Parameters
    ----------
    sampler : callable
        The sampler under test.
    kind : {"token", "block"} or None
    vectorised : bool or None
    inputs : {"laws", "logits"} or None
    proposals : {"auto", "q", "own"} or None
    accepted_eos : {"auto", "counted", "not_counted"} or None
        Accounting conventions (see :class:`SamplerSpec`).
    accepted_law : str, callable or None
        Accepted-count law of a block sampler's rule (see :class:`SamplerSpec`).

    Returns
    -------
    SamplerSpec

    Raises
    ------
    TypeError
        If ``sampler`` is not callable.
    ValueError
        If an argument is not one of its choices, or if nothing is said and the signature
        does not decide (e.g. ``*args``).

    Examples
    --------
    >>> describe_sampler(lambda target, draft, prefix, gamma, rng: [0]).kind
    'block'
    >>> describe_sampler(lambda p, q, rng: 0)
    SamplerSpec(kind='token', vectorised=False, inputs='laws', name='specdec.conformance.conventions:<lambda>', proposals='auto', accepted_eos='auto', accepted_law=None)
    """
    if not callable(sampler):
        raise TypeError(f"sampler: must be callable (got {type(sampler).__name__})")
    if kind is not None:
        _check_choice(kind, "kind", (TOKEN, BLOCK, BATCH))
    if inputs is not None:
        _check_choice(inputs, "inputs", (LAWS, LOGITS))
    mark = getattr(sampler, _MARK, None)
    if isinstance(mark, SamplerSpec):
        spec = mark
    else:
        n = _required_positional(sampler)
        if n in (5, 7):
            guess = SamplerSpec(BLOCK, vectorised=(n == 7))
        elif n == 6:
            guess = SamplerSpec(BATCH, vectorised=True)
        elif n in (3, 4):
            guess = SamplerSpec(TOKEN, vectorised=(n == 4),
                                inputs=LOGITS if _has_keyword(sampler, "temperature") else LAWS)
        elif kind is None:
            raise ValueError(
                "sampler: cannot tell the calling convention from the signature "
                f"({n} required positional parameters); pass kind= (and vectorised=, inputs=) "
                "or mark it with @token_sampler / @block_sampler")
        else:
            guess = SamplerSpec(kind)
        spec = dataclasses.replace(guess, name=_callable_name(sampler))
    if kind is not None and kind != spec.kind:
        spec = dataclasses.replace(spec, kind=kind)
    if vectorised is not None:
        spec = dataclasses.replace(spec, vectorised=bool(vectorised))
    if inputs is not None:
        spec = dataclasses.replace(spec, inputs=inputs)
    if proposals is not None:
        spec = dataclasses.replace(spec, proposals=_check_choice(proposals, "proposals",
                                                                 (AUTO, FROM_Q, OWN)))
    if accepted_eos is not None:
        spec = dataclasses.replace(spec, accepted_eos=_check_choice(
            accepted_eos, "accepted_eos", (AUTO, COUNTED, NOT_COUNTED)))
    if accepted_law is not None:
        check_accepted_law(accepted_law)
        if spec.kind != BLOCK:
            raise ValueError("accepted_law: applies to block samplers only")
        spec = dataclasses.replace(spec, accepted_law=accepted_law)
    if spec.kind in (BLOCK, BATCH) and spec.inputs != LAWS:
        raise ValueError("inputs: block samplers receive toy models, not logits "
                         "(inputs='logits' applies to token samplers only)")
    return spec



def _registry_sampler(name: str):
    """The reference sampler of the library's rule called ``name`` (``rule:NAME`` on the command line).

    A tree rule drafts two children at the top of its tree (``top_widths=(2,)``). The command
    line runs it on the block cases and the rule case ``rules_far_g3`` (where the flaws of
    the rules beyond token-by-token show) unless ``--cases`` says otherwise.

    Raises
    ------
    ValueError
        No rule of :mod:`specdec.rules` has that name (the message lists them), or the rule
        has no procedure to sample (an error in a formula, such as ``m_plus_r``).
    """
    from specdec import rules
    from specdec.rules import RuleSampler

    try:
        rule = rules.get_rule(name)
    except ValueError as exc:
        raise ValueError(f"sampler: 'rule:{name}': {str(exc).removeprefix('rule: ')}") from None
    if not getattr(rule, "proposes", True):
        raise ValueError(f"sampler: 'rule:{name}' is an error in the formula of one step's law, "
                         "not a procedure that drafts and verifies: it has no block sampler")
    return RuleSampler(rule, top_widths=(2,) if rule.tree else None)


def load_sampler(target: str, what: str = "sampler"):
    """Import ``package.module:attribute`` (``attribute`` may be dotted), by :func:`pkgutil.resolve_name`.

    ``rule:NAME`` is the reference sampler of the library's rule ``NAME``
    (:func:`specdec.rules.get_rule`, run by :class:`specdec.rules.RuleSampler`), which
    declares its own accepted-count law: ``python -m specdec.conformance rule:token_residual
    --cases rules_far_g3`` shows what a flaw of the registry looks like to the kit.

    A class is instantiated without arguments (stateful samplers such as
    :class:`specdec.conformance.gallery.StaleProposals`).

    Parameters
    ----------
    target : str
        ``package.module:function`` (or ``package.module.function``).
    what : str
        The name of the argument, for the error messages (the CLI passes its flag).

    Raises
    ------
    ValueError
        If the string is malformed or the attribute cannot be found.
    ImportError
        If the module cannot be imported, or raises (any exception, a syntax error
        included) while it is imported; the message names ``what`` and the exception.
    """
    if not isinstance(target, str) or not target.strip(". :"):
        raise ValueError(f"{what}: expected 'package.module:function' (got {target!r})")
    if target.startswith("rule:") and what == "sampler":
        return _registry_sampler(target.removeprefix("rule:"))
    module = target.strip().rstrip(":")
    try:
        obj = pkgutil.resolve_name(target)       # 'pkg.mod:attr' or 'pkg.mod.attr'
    except AttributeError:
        mod_name, _, attr = target.partition(":") if ":" in target else target.rpartition(".")
        raise ValueError(f"{what}: module {mod_name!r} has no attribute {attr!r}") from None
    except ValueError:
        raise ValueError(f"{what}: expected 'package.module:function' (got {target!r})") from None
    except ImportError as exc:
        raise ImportError(f"{what}: cannot import {target!r}: {exc}") from None
    except Exception as exc:  # the module itself failed while being imported
        raise ImportError(f"{what}: importing {target!r} raised {type(exc).__name__}: "
                          f"{exc}") from exc
    if inspect.ismodule(obj):
        raise ValueError(f"{what}: {target!r} is a module, not a sampler; to name a "
                         f"function of it, write '{module}:function'")
    if inspect.isclass(obj):  # a stateful sampler class: one instance, reset between decodes
        obj = obj()
    return obj


