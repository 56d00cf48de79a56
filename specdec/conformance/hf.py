"""Adapters that put Hugging Face transformers' speculative sampling under the kit.

transformers implements speculative sampling (Leviathan et al. 2023, Algorithm 1) in
``transformers.generation.utils._speculative_sampling`` and runs it from
``generate(assistant_model=..., do_sample=True)``. Three adapters expose it in the kit's
calling conventions (:mod:`specdec.conformance`):

* :func:`token_step`: one step, token level (``f(p, q, rng) -> (token, accepted)``): the
  proposal ``x ~ q`` is drawn by the adapter, ``log q`` and ``log p`` go to the function as
  float32 logits (``-inf`` where the probability is 0), with one target row per proposal
  plus the bonus row;
* :class:`BlockCycle`: one cycle over the kit's toy models, block level
  (``f(target, draft, prefix, gamma, rng)``): the draft proposes up to ``gamma`` tokens
  autoregressively (stopping at end-of-sequence, as the assistant does), the function
  verifies them;
* :class:`Generate`: end to end, whole decodes with ``model.generate(assistant_model=...,
  do_sample=True)`` on two tiny GPT-2 models built from small configurations
  (:func:`specdec.conformance.hf_models.tiny_models`), whose exact sequence law the kit enumerates
  (:func:`specdec.conformance.hf_models.toy_view`). The assistant's draft length is fixed (``num_assistant_tokens``,
  schedule ``"constant"``) and its confidence threshold set to 0, or transformers would
  stop drafting early and multi-token cycles would rarely happen.

The function's signature changed across releases; :func:`speculative_sampling` is the one
translation, and it neither fixes nor hides anything transformers does:

========  =======================================================================
release   ``_speculative_sampling(candidate_input_ids, candidate_logits,
          candidate_length, new_logits, ...)``, then
========  =======================================================================
4.37      ``last_assistant_token_is_eos, max_matches``: passed the truth and
          ``max_matches = candidate_length`` (no length cap inside a cycle; the kit
          bounds the decode)
4.40-5.17 ``is_done_candidate``: passed the truth (5.14 adds
          ``assistant_ensemble_weight``, left at None: lossless)
5.18 on   ``assistant_ensemble_weight=None``; the end-of-sequence handling
          moved to the caller (``_assisted_decoding`` crops the tokens at the first
          end-of-sequence and sets ``n_matches = len - 1``), so the translation applies
          that same crop, exactly as transformers' caller does
========  =======================================================================

Accounting: when the last accepted proposal is end-of-sequence, transformers reports
``n_matches = L - 1`` (the end-of-sequence is not counted as accepted); the kit detects
that convention (``accepted_eos="not_counted"``).

Randomness: the function draws from torch's global generator, reseeded per call from the
kit's numpy generator with :func:`specdec.conformance.torchrng.seed_torch` (cheap;
``torch.manual_seed`` costs more than the function itself).

Requires ``pip install -e '.[hf]'`` in a clone (torch CPU and transformers). Used in Appendix A3,
"The kit on real implementations"; run ``python -m specdec.conformance.hf`` for a JSON
summary of the three batteries at the installed release.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from functools import lru_cache

import numpy as np

from specdec import laws

from specdec.conformance.conventions import block_sampler, token_sampler
from specdec.conformance.torchrng import seed_torch
from specdec.conformance.hf_models import (EOS, generate_cases, has_mode, release, tiny_different_tokenizer,
                        tiny_models, toy_view, verifies_with_draft_logits)

__all__ = ["signature", "speculative_sampling", "patched_speculative_sampling", "TokenSteps",
           "token_step", "BlockCycle", "Generate", "BATTERIES", "available", "run_all", "main"]



@lru_cache(maxsize=1)
def signature() -> tuple[str, ...]:
    """Parameter names of the installed ``_speculative_sampling``."""
    from transformers.generation.utils import _speculative_sampling

    return tuple(inspect.signature(_speculative_sampling).parameters)


def _logits(law: np.ndarray):
    """float32 logits ``log law`` (``-inf`` where the law is 0), as a torch tensor."""
    import torch

    with np.errstate(divide="ignore"):
        return torch.from_numpy(np.log(np.asarray(law, dtype=np.float64)).astype(np.float32))


def speculative_sampling(candidate_input_ids, candidate_logits, candidate_length: int, new_logits,
                         *, eos: int | None, function=None, ensemble_weight: float | None = None):
    """Call the installed ``_speculative_sampling`` with one translation across releases.

    Parameters
    ----------
    candidate_input_ids : torch.LongTensor, shape (1, prefix + candidate_length)
    candidate_logits : torch.FloatTensor, shape (1, candidate_length, V)
    candidate_length : int
    new_logits : torch.FloatTensor, shape (1, candidate_length + 1, V)
    eos : int or None
        End-of-sequence id (the releases that take a flag get ``last candidate == eos``;
        5.x gets the caller's crop at the first end-of-sequence).
    function : callable, optional
        The function to call instead of the installed one (a patched copy,
        :func:`patched_speculative_sampling`); same signature.
    ensemble_weight : float, optional
        ``assistant_ensemble_weight`` (5.14 on; transformers' own lossy option), passed
        only when given.

    Returns
    -------
    (list of int, int)
        The emitted tokens and ``n_matches``, as transformers returns them.

    Raises
    ------
    RuntimeError
        If the installed signature is none of the known ones.
    ValueError
        If ``ensemble_weight`` is given to a release without that parameter.
    """
    from transformers.generation.utils import _speculative_sampling

    fn = _speculative_sampling if function is None else function
    names = signature()
    weight = {}
    if ensemble_weight is not None:
        if "assistant_ensemble_weight" not in names:
            raise ValueError(f"ensemble_weight: transformers {release()} has no "
                             f"assistant_ensemble_weight (5.14 and later)")
        weight = dict(assistant_ensemble_weight=float(ensemble_weight))
    last_is_eos = bool(eos is not None and candidate_length > 0
                       and int(candidate_input_ids[0, -1]) == eos)
    args = (candidate_input_ids, candidate_logits, candidate_length, new_logits)
    if "max_matches" in names:                                      # 4.37
        valid, n = fn(*args, last_is_eos, candidate_length)
        return valid[0].tolist(), int(n)
    if "is_done_candidate" in names:                                # 4.40 - 5.17
        valid, n = fn(*args, last_is_eos, **weight)
        return valid[0].tolist(), int(n)
    if len(names) == 4 or "assistant_ensemble_weight" in names:     # 5.18 on
        valid, n = fn(*args, **weight)
        tokens = valid[0].tolist()
        if eos is not None and eos in tokens:                       # the caller's crop
            tokens = tokens[: tokens.index(eos) + 1]
            n = len(tokens) - 1
        return tokens, int(n)
    raise RuntimeError(f"_speculative_sampling: unknown signature {names} "
                       f"(transformers {release()})")


#: The one-line patch of the controls: the residual after a rejection is the target's law
#: ``p`` itself instead of ``(p - q)^+`` normalised (the gallery's "residual from p" bug).
PATCH_LINE = ("p_prime = torch.clamp((p_n_plus_1 - q_n_plus_1), min=0)",
              "p_prime = p_n_plus_1.clone()")

#: The one-line patch of the end-to-end controls that verify with draft probabilities:
#: every draft is accepted (the accept test skipped). The residual bug above changes whole
#: decodes of the tiny models by a TV of about 0.1, too little for a short run to see.
PATCH_LINE_ACCEPT = ("is_accepted = r_i <= probability_ratio",
                     "is_accepted = r_i <= 1.0 + probability_ratio")

#: The one-line patch of the other-tokenizer control where it verifies with draft
#: probabilities (4.50 on): the target's law is taken at temperature 1/2 in the accept test,
#: the residual and the bonus token, the error :data:`PATCH_LINE_NO_LOGITS` makes in the
#: releases that verify without them. Accepting every draft (:data:`PATCH_LINE_ACCEPT`)
#: moves these decodes by a TV of about 0.15 only, within what 600 calls resolve.
PATCH_LINE_TARGET_HALF = ("p = new_logits.softmax(dim=-1)",
                          "p = (2 * new_logits).softmax(dim=-1)")

#: The one-line patch of the prompt-lookup control: the target's rows are sampled at
#: temperature 1/2 in the verification that has no draft probabilities.
PATCH_LINE_NO_LOGITS = ("probs = new_logits.softmax(dim=-1)",
                        "probs = (2 * new_logits).softmax(dim=-1)")


def _patched_copy(func, line: tuple[str, str], namespace: dict):
    """``func`` recompiled from its source with one line replaced, in ``namespace``."""
    import textwrap

    src = textwrap.dedent(inspect.getsource(func))
    old, new = line
    if src.count(old) != 1:
        raise RuntimeError(f"{func.__qualname__}: the line {old!r} occurs {src.count(old)} "
                           f"times in transformers {release()} (expected once)")
    ns = dict(namespace)
    exec(compile(src.replace(old, new), f"<patched {func.__qualname__}>", "exec"), ns)
    return ns[func.__name__]


@lru_cache(maxsize=None)
def patched_speculative_sampling(line: tuple = PATCH_LINE):
    """A copy of the installed ``_speculative_sampling`` with one line replaced.

    ``line`` is ``(old, new)``: :data:`PATCH_LINE` (the function rows' control) or
    :data:`PATCH_LINE_ACCEPT` (the end-to-end controls). The module is not modified; the
    copy runs in a copy of its globals.

    Raises
    ------
    RuntimeError
        If the line to patch is not found exactly once.
    """
    from transformers.generation import utils

    return _patched_copy(utils._speculative_sampling, tuple(line), vars(utils))


def _check_control(control, allowed):
    if control not in allowed:
        raise ValueError(f"control: must be one of {', '.join(map(repr, allowed))} "
                         f"(got {control!r})")
    if control == "ensemble" and "assistant_ensemble_weight" not in signature():
        raise ValueError(f"control: 'ensemble' needs assistant_ensemble_weight "
                         f"(transformers 5.14 and later; this is {release()})")


#: ``assistant_ensemble_weight`` of the ``"ensemble"`` control (transformers' lossy option:
#: accept against ``w p + (1 - w) q``).
ENSEMBLE_WEIGHT = 0.1


@token_sampler(vectorised=True)
class TokenSteps:
    """``n`` speculative steps through transformers' function (token level, laws inputs).

    For each step: draws the proposal ``x ~ q`` with ``rng``, then calls the function with
    one candidate, ``log q`` as the candidate logits and ``[log p, log p]`` as the target
    logits (the second row is the bonus position, unused at token level). The function
    handles one sequence per call (its ``n_matches`` sums over the batch), so the steps are
    ``n`` calls; torch's generator is seeded once per batch from ``rng``.

    Parameters
    ----------
    control : {None, "patched", "ensemble"}
        None: the installed function, untouched. ``"patched"``: the copy with
        :data:`PATCH_LINE` (must fail). ``"ensemble"``: the installed function with
        ``assistant_ensemble_weight`` = :data:`ENSEMBLE_WEIGHT` (5.14 on; must fail).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray), shapes (n,) and (n,)
        The first emitted token of each step and whether it is the accepted proposal.
    """

    def __init__(self, control: str | None = None):
        _check_control(control, (None, "patched", "ensemble"))
        self.control = control

    def __call__(self, p, q, rng, n):
        import torch

        fn = patched_speculative_sampling() if self.control == "patched" else None
        w = ENSEMBLE_WEIGHT if self.control == "ensemble" else None
        xs = rng.choice(len(q), size=int(n), p=q)
        lp = _logits(p)
        new = torch.stack([lp, lp])[None]
        cand = _logits(q)[None, None, :]
        ids = torch.from_numpy(xs.astype(np.int64)).reshape(-1, 1, 1)
        tokens = np.empty(int(n), dtype=np.int64)
        accepted = np.empty(int(n), dtype=bool)
        seed_torch(rng)
        for i in range(int(n)):
            out, k = speculative_sampling(ids[i], cand, 1, new, eos=None, function=fn,
                                          ensemble_weight=w)
            tokens[i], accepted[i] = out[0], k >= 1
        return tokens, accepted


@token_sampler
def token_step(p, q, rng):
    """One speculative step through transformers' function (:class:`TokenSteps` with n = 1).

    Returns
    -------
    (int, bool)
        The first emitted token and whether it is the accepted proposal.
    """
    tokens, accepted = TokenSteps()(p, q, rng, 1)
    return int(tokens[0]), bool(accepted[0])


@block_sampler
class BlockCycle:
    """One speculative cycle through transformers' function (block level).

    The toy draft proposes up to ``gamma`` tokens (stopping after end-of-sequence); the
    candidate logits are the draft's ``log q`` at each position, the target logits the
    target's ``log p`` at each position plus the bonus one.

    Parameters
    ----------
    control : {None, "patched", "ensemble"}
        As in :class:`TokenSteps`.

    Returns
    -------
    (list of int, int, int)
        Emitted tokens, ``n_matches`` as transformers reports it, proposals made.
    """

    def __init__(self, control: str | None = None):
        _check_control(control, (None, "patched", "ensemble"))
        self.control = control

    def __call__(self, target, draft, prefix, gamma, rng):
        import torch

        fn = patched_speculative_sampling() if self.control == "patched" else None
        w = ENSEMBLE_WEIGHT if self.control == "ensemble" else None
        prefix = tuple(prefix)
        proposals, qs = [], []
        ctx = prefix
        for _ in range(gamma):
            q = draft.next_law(ctx)
            x = int(rng.choice(q.size, p=q))
            proposals.append(x)
            qs.append(q)
            ctx = ctx + (x,)
            if draft.eos is not None and x == draft.eos:
                break
        k = len(proposals)
        ps = [target.next_law(prefix + tuple(proposals[:i])) for i in range(k + 1)]
        ids = torch.tensor([list(prefix) + proposals], dtype=torch.long)
        cand = torch.stack([_logits(q) for q in qs])[None]
        new = torch.stack([_logits(p) for p in ps])[None]
        seed_torch(rng)
        tokens, n = speculative_sampling(ids, cand, k, new, eos=target.eos, function=fn,
                                         ensemble_weight=w)
        return tokens, n, k


class _Patched:
    """Context manager: a transformers function replaced by a one-line patched copy."""

    def __init__(self, mode: str):
        self.mode = mode

    def __enter__(self):
        from transformers.generation import utils

        if verifies_with_draft_logits(self.mode):
            self.owner, self.name = utils, "_speculative_sampling"
            new = patched_speculative_sampling(PATCH_LINE_TARGET_HALF
                                               if self.mode == "different_tokenizer"
                                               else PATCH_LINE_ACCEPT)
        else:
            cls = utils.GenerationMixin
            self.owner = cls
            self.name = "_assisted_decoding" if "_assisted_decoding" in vars(cls) else "assisted_decoding"
            new = _patched_copy(vars(cls)[self.name], PATCH_LINE_NO_LOGITS, vars(utils))
        self.old = getattr(self.owner, self.name)
        setattr(self.owner, self.name, new)
        return self

    def __exit__(self, *exc):
        setattr(self.owner, self.name, self.old)
        return False


@block_sampler(vectorised=True)
class Generate:
    """``n`` whole decodes with ``generate(..., do_sample=True)`` on the tiny models.

    ``mode="assistant"``: ``generate(assistant_model=...)``; the kit's case gives the
    draft length (``num_assistant_tokens``, schedule ``"constant"``, confidence threshold
    0). ``mode="prompt_lookup"``: ``generate(prompt_lookup_num_tokens=gamma)``, drafts
    copied from the context's n-grams, with no draft probabilities: transformers then
    samples every target row and keeps the drafts while they equal the samples (the
    matching rule with a deterministic draft, exact). ``mode="different_tokenizer"``
    (4.46 on): ``generate(assistant_model=..., tokenizer=..., assistant_tokenizer=...)``
    with :func:`tiny_different_tokenizer`'s assistant, which drafts in its own vocabulary;
    4.46-4.49 re-tokenise its text and verify without draft probabilities, 4.50 on
    translate its logits to the target's vocabulary and call ``_speculative_sampling``
    (``UniversalSpeculativeDecodingGenerator``). The decode length is
    ``max_new_tokens``; the case's ``target``/``draft`` must be :func:`toy_view` of the
    same models and prompt.

    Parameters
    ----------
    seed : int
        Seed of :func:`tiny_models`.
    mode : {"assistant", "prompt_lookup"}
    control : {None, "patched", "ensemble"}
        None: transformers untouched. ``"patched"``: during the calls, the assistant mode
        runs ``patched_speculative_sampling(PATCH_LINE_ACCEPT)`` in place of the module's
        function (so
        does the different-tokenizer mode from 4.50), the modes that verify without
        draft probabilities a copy of ``_assisted_decoding`` with
        :data:`PATCH_LINE_NO_LOGITS`; all must fail. ``"ensemble"`` (assistant mode,
        5.14 on): ``assistant_ensemble_weight`` = :data:`ENSEMBLE_WEIGHT`; must fail.

    Returns
    -------
    numpy.ndarray, shape (n, length)
        Generated tokens after the prompt, ``-1`` after the decode stops.

    Raises
    ------
    ValueError
        If ``mode`` or ``control`` is not one of its choices, or the release lacks it.
    RuntimeError
        If ``generate`` returns more than ``max_new_tokens`` new tokens (prompt lookup
        before 5.14 does; the kit reports the case as failed with this message).
    """

    def __init__(self, seed: int = 2026, mode: str = "assistant", control: str | None = None):
        if not has_mode(mode):
            raise ValueError(f"mode: {mode!r} needs transformers 4.46 or later "
                             f"(this is {release()})")
        _check_control(control, (None, "patched") + (("ensemble",) if mode == "assistant" else ()))
        self.seed, self.mode, self.control = seed, mode, control
        self.target_passes = 0       # forward passes of the target model, over all calls
        self.tokens = 0              # tokens generated, over all calls

    def __call__(self, target, draft, prefix, gamma, length, rng, n):
        import contextlib

        import torch
        import transformers

        transformers.logging.set_verbosity_error()
        model, assistant = tiny_models(self.seed)
        ids = torch.tensor([list(prefix)], dtype=torch.long)
        kwargs = dict(do_sample=True, max_new_tokens=length, top_k=0, top_p=1.0,
                      temperature=1.0, eos_token_id=EOS, pad_token_id=EOS,
                      attention_mask=torch.ones_like(ids))
        if self.mode == "assistant":
            gc = assistant.generation_config
            gc.num_assistant_tokens = int(gamma)
            gc.num_assistant_tokens_schedule = "constant"
            if hasattr(gc, "assistant_confidence_threshold"):
                gc.assistant_confidence_threshold = 0.0
            kwargs["assistant_model"] = assistant
            if self.control == "ensemble":
                kwargs["assistant_ensemble_weight"] = ENSEMBLE_WEIGHT
        elif self.mode == "prompt_lookup":
            kwargs["prompt_lookup_num_tokens"] = int(gamma)
        else:
            tok, assistant_tok, other = tiny_different_tokenizer(self.seed)
            gc = other.generation_config
            gc.num_assistant_tokens = int(gamma)
            gc.num_assistant_tokens_schedule = "constant"
            if hasattr(gc, "assistant_confidence_threshold"):
                gc.assistant_confidence_threshold = 0.0
            kwargs.update(assistant_model=other, tokenizer=tok, assistant_tokenizer=assistant_tok)
        out = np.full((n, length), -1, dtype=np.int64)

        def count(*_):
            self.target_passes += 1

        hook = model.register_forward_hook(count)
        patch = _Patched(self.mode) if self.control == "patched" else contextlib.nullcontext()
        try:
            with torch.no_grad(), patch:
                for i in range(n):
                    seed_torch(rng)
                    seq = model.generate(ids, **kwargs)[0, ids.shape[1]:].tolist()
                    if len(seq) > length:
                        raise RuntimeError(f"generate returned {len(seq)} new tokens with "
                                           f"max_new_tokens={length}: {seq}")
                    if EOS in seq:
                        seq = seq[: seq.index(EOS) + 1]
                    out[i, : len(seq)] = seq
                    self.tokens += len(seq)
        finally:
            hook.remove()
        return out


#: The batteries :func:`run_all` knows: name -> (what it runs, control or None). A
#: control's name is its row's name, ``:``, the control.
BATTERIES = {
    "token": ("TokenSteps: the function alone, token level", None),
    "block": ("BlockCycle: the function alone, one cycle over the toy models", None),
    "generate": ("generate(assistant_model), end to end", None),
    "lookup": ("generate(prompt_lookup_num_tokens), end to end", None),
    "token:patched": ("TokenSteps with the patched copy", "patched"),
    "block:patched": ("BlockCycle with the patched copy", "patched"),
    "generate:patched": ("generate(assistant_model) with the patched copy", "patched"),
    "lookup:patched": ("generate(prompt_lookup_num_tokens) with the patched copy", "patched"),
    "tokenizers": ("generate(assistant_model, tokenizer, assistant_tokenizer), end to end", None),
    "tokenizers:patched": ("generate with a different tokenizer, with the patched copy",
                           "patched"),
    "token:ensemble": ("TokenSteps with assistant_ensemble_weight", "ensemble"),
    "generate:ensemble": ("generate(assistant_model, assistant_ensemble_weight)", "ensemble"),
}


def available(name: str) -> bool:
    """Whether the installed release has what battery ``name`` needs."""
    if name not in BATTERIES:
        raise ValueError(f"battery: must be one of {', '.join(BATTERIES)} (got {name!r})")
    if name.startswith("tokenizers"):
        return has_mode("different_tokenizer")
    return not name.endswith(":ensemble") or "assistant_ensemble_weight" in signature()


#: The one case a control runs on (a control must fail; one case is enough and cheaper).
CONTROL_CASE = {"token": "article", "block": "block_g2", "generate": "hf_generate_g2",
                "lookup": "hf_lookup_g2", "tokenizers": "hf_tokenizers_g2"}


def _battery(name: str):
    """(sampler, cases) of battery ``name``."""
    row, _, control = name.partition(":")
    control = control or None
    if row == "token":
        sampler, cases = TokenSteps(control), None
    elif row == "block":
        sampler, cases = BlockCycle(control), None
    elif row == "generate":
        sampler, cases = Generate(control=control), list(generate_cases())
    elif row == "tokenizers":
        sampler = Generate(mode="different_tokenizer", control=control)
        cases = list(generate_cases(mode="different_tokenizer", gammas=(2,)))
    else:
        sampler = Generate(mode="prompt_lookup", control=control)
        cases = list(generate_cases(mode="prompt_lookup", gammas=(2, 4)))
    if control is not None:
        cases = ([CONTROL_CASE[row]] if cases is None else
                 [c for c in cases if c.name == CONTROL_CASE[row]])
    return sampler, cases


def run_all(*, batteries=("token", "block", "generate", "lookup", "tokenizers"), seed: int = 0,
            budget: float | None = None, trials: dict | None = None,
            resolution: dict | None = None, false_alarm: float = 1e-3) -> dict:
    """Batteries at the installed release, as a dict.

    Parameters
    ----------
    batteries : sequence of str
        Names from :data:`BATTERIES`; one the release lacks (the ensemble weight before
        5.14) is reported as ``{"available": False}`` instead of run.
    seed : int
        Master seed of the batteries.
    budget : float, optional
        Seconds per battery (the kit plans the trials from a pilot; the counts then
        depend on the machine's speed).
    trials : dict, optional
        Trials per case by battery name (a control without an entry takes its row's).
        The report is then a function of the seed alone.
    resolution : dict, optional
        Detectable TV wanted by battery name (the kit plans the trials).
    false_alarm : float
        Family-wise false-alarm probability of each battery.

    Returns
    -------
    dict
        ``release``, ``signature``, and per battery the report's
        :meth:`~specdec.conformance.Report.to_dict` plus ``seconds_per_call`` (sampler
        seconds per trial), ``wall_seconds``, ``max_detectable_tv``, ``markdown`` and,
        end to end, ``tokens_per_target_pass``.

    Raises
    ------
    ValueError
        If a battery name is unknown, or no battery is given.
    """
    import torch

    from specdec.conformance import run_battery

    batteries = list(batteries)
    if not batteries:
        raise ValueError("batteries: at least one")
    for name in batteries:
        available(name)
    torch.set_num_threads(1)      # tensors of a few entries: threads only add overhead
    trials, resolution = dict(trials or {}), dict(resolution or {})
    out = {"release": release(), "signature": list(signature()), "budget": budget,
           "trials": trials, "resolution": resolution, "batteries": batteries}
    for name in batteries:
        if not available(name):
            out[name] = {"available": False}
            continue
        sampler, cases = _battery(name)
        row = name.partition(":")[0]
        how = {}
        if name in trials or row in trials:
            how["trials"] = int(trials.get(name, trials.get(row)))
        elif name in resolution or row in resolution:
            how["resolution"] = float(resolution.get(name, resolution.get(row)))
        elif budget is not None:
            how["budget"] = float(budget)
        t0 = time.perf_counter()
        rep = run_battery(sampler, cases=cases, seed=seed, false_alarm=false_alarm, **how)
        d = rep.to_dict()
        n_trials = sum(c.trials for c in rep.cases)
        d["available"] = True
        d["seconds_per_call"] = rep.sampler_seconds / max(n_trials, 1)
        d["wall_seconds"] = time.perf_counter() - t0
        d["resolution"] = rep.resolution
        d["max_detectable_tv"] = rep.max_detectable_tv
        d["markdown"] = rep.to_markdown(heading=False)
        if isinstance(sampler, Generate):
            d["tokens_per_target_pass"] = sampler.tokens / max(sampler.target_passes, 1)
        out[name] = d
    return out


def _per_battery(text: str, what: str, cast) -> dict:
    """``"token=500,generate=40"`` -> ``{"token": 500, "generate": 40}``."""
    out = {}
    for item in filter(None, text.split(",")):
        name, eq, value = item.partition("=")
        if not eq or name not in BATTERIES:
            raise ValueError(f"--{what}: NAME=VALUE pairs with NAME one of "
                             f"{', '.join(BATTERIES)} (got {item!r})")
        v = cast(value)
        if not v > 0:
            raise ValueError(f"--{what}: {name} must be positive (got {value})")
        out[name] = v
    return out


def main(argv=None) -> int:
    """``python -m specdec.conformance.hf``: run batteries, print JSON."""
    ap = argparse.ArgumentParser(prog="python -m specdec.conformance.hf",
                                 description="Run the kit's batteries on transformers' "
                                             "speculative sampling at the installed release.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batteries", default="token,block,generate,lookup,tokenizers",
                    help=f"comma-separated, from: {', '.join(BATTERIES)}")
    ap.add_argument("--budget", type=float, default=None, help="seconds per battery")
    ap.add_argument("--false-alarm", type=float, default=1e-3,
                    help="family-wise false-alarm probability of each battery")
    ap.add_argument("--trials", default=None,
                    help="trials per case by battery, e.g. token=2000,generate=40")
    ap.add_argument("--resolution", default=None,
                    help="detectable TV wanted by battery, e.g. token=0.01,generate=0.03")
    args = ap.parse_args(argv)
    laws.check_int(args.seed, "seed", minimum=0)
    try:
        names = [b for b in args.batteries.split(",") if b]
        for b in names:
            if b not in BATTERIES:
                raise ValueError(f"battery: must be one of {', '.join(BATTERIES)} (got {b!r})")
        trials = _per_battery(args.trials or "", "trials", int)
        resolution = _per_battery(args.resolution or "", "resolution", float)
    except ValueError as exc:
        ap.error(str(exc))
    budget = args.budget if not (trials or resolution) or args.budget else None
    if budget is None and not trials and not resolution:
        budget = 20.0
    print(json.dumps(run_all(batteries=names, seed=args.seed, budget=budget, trials=trials,
                             resolution=resolution, false_alarm=args.false_alarm)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
