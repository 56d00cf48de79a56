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
  (:func:`tiny_models`), whose exact sequence law the kit enumerates
  (:func:`toy_view`). The assistant's draft length is fixed (``num_assistant_tokens``,
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
4.57      ``is_done_candidate``: passed the truth
5.x       ``assistant_ensemble_weight=None`` (lossless); the end-of-sequence handling
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

from .cases import BlockCase
from .conventions import block_sampler, token_sampler
from .torchrng import seed_torch

__all__ = ["release", "signature", "speculative_sampling", "token_step", "BlockCycle",
           "tiny_models", "toy_view", "generate_cases", "Generate", "run_all", "main"]


def release() -> str:
    """The installed transformers version."""
    import transformers

    return transformers.__version__


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
                         *, eos: int | None):
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

    Returns
    -------
    (list of int, int)
        The emitted tokens and ``n_matches``, as transformers returns them.

    Raises
    ------
    RuntimeError
        If the installed signature is none of the known ones.
    """
    from transformers.generation.utils import _speculative_sampling

    names = signature()
    last_is_eos = bool(eos is not None and candidate_length > 0
                       and int(candidate_input_ids[0, -1]) == eos)
    args = (candidate_input_ids, candidate_logits, candidate_length, new_logits)
    if "max_matches" in names:                                      # 4.37
        valid, n = _speculative_sampling(*args, last_is_eos, candidate_length)
        return valid[0].tolist(), int(n)
    if "is_done_candidate" in names:                                # 4.4x - 4.57
        valid, n = _speculative_sampling(*args, last_is_eos)
        return valid[0].tolist(), int(n)
    if len(names) == 4 or "assistant_ensemble_weight" in names:     # 5.x
        valid, n = _speculative_sampling(*args)
        tokens = valid[0].tolist()
        if eos is not None and eos in tokens:                       # the caller's crop
            tokens = tokens[: tokens.index(eos) + 1]
            n = len(tokens) - 1
        return tokens, int(n)
    raise RuntimeError(f"_speculative_sampling: unknown signature {names} "
                       f"(transformers {release()})")


@token_sampler
def token_step(p, q, rng):
    """One speculative step through transformers' function (token level, laws inputs).

    Draws the proposal ``x ~ q`` with ``rng``, then calls the function with one
    candidate, ``log q`` as the candidate logits and ``[log p, log p]`` as the target
    logits (the second row is the bonus position, unused at token level).

    Returns
    -------
    (int, bool)
        The first emitted token and whether it is the accepted proposal.
    """
    import torch

    x = int(rng.choice(len(q), p=q))
    ids = torch.tensor([[x]], dtype=torch.long)
    lp = _logits(p)
    seed_torch(rng)
    tokens, n = speculative_sampling(ids, _logits(q)[None, None, :], 1,
                                     torch.stack([lp, lp])[None], eos=None)
    return int(tokens[0]), n >= 1


@block_sampler
class BlockCycle:
    """One speculative cycle through transformers' function (block level).

    The toy draft proposes up to ``gamma`` tokens (stopping after end-of-sequence); the
    candidate logits are the draft's ``log q`` at each position, the target logits the
    target's ``log p`` at each position plus the bonus one.

    Returns
    -------
    (list of int, int, int)
        Emitted tokens, ``n_matches`` as transformers reports it, proposals made.
    """

    def __call__(self, target, draft, prefix, gamma, rng):
        import torch

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
        tokens, n = speculative_sampling(ids, cand, k, new, eos=target.eos)
        return tokens, n, k


# --------------------------------------------------------------------------------------
# End to end: generate(assistant_model=...) on tiny models with an enumerable law
# --------------------------------------------------------------------------------------

#: The tiny models' vocabulary: ids 0..3, end-of-sequence 3; every decode starts from (0,).
VOCAB, EOS, PROMPT = 4, 3, (0,)


@lru_cache(maxsize=None)
def tiny_models(seed: int = 2026):
    """A tiny GPT-2 target and assistant (vocabulary of 4, one layer), in eval mode.

    Built from small configurations with torch's generator seeded by ``seed`` (target)
    and ``seed + 1`` (assistant); the output layer is scaled so the next-token laws are
    far from uniform. Nothing is downloaded.

    Returns
    -------
    (transformers.GPT2LMHeadModel, transformers.GPT2LMHeadModel)
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    out = []
    for k, scale in ((0, 4.0), (1, 2.5)):
        torch.manual_seed(seed + k)
        cfg = GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                         bos_token_id=0, eos_token_id=EOS, pad_token_id=EOS)
        model = GPT2LMHeadModel(cfg).eval()
        with torch.no_grad():
            model.transformer.wte.weight.mul_(scale)
        out.append(model)
    return tuple(out)


def _next_laws(model, prefixes: list[tuple]) -> dict:
    """float64 softmax of the model's float32 logits at the end of each prefix."""
    import torch

    out = {}
    by_len: dict[int, list] = {}
    for x in prefixes:
        by_len.setdefault(len(x), []).append(x)
    with torch.no_grad():
        for _, group in by_len.items():
            logits = model(torch.tensor(group, dtype=torch.long)).logits[:, -1, :]
            for x, row in zip(group, logits.double().softmax(-1).numpy()):
                out[x] = row / row.sum()
    return out


@lru_cache(maxsize=None)
def toy_view(length: int = 4, seed: int = 2026):
    """The tiny models as :class:`specdec.models.ToyModel` objects with their exact laws.

    Every prefix of ``PROMPT`` plus up to ``length`` tokens (none after end-of-sequence)
    is run through each model once; the laws are the softmax of its logits, what
    ``generate(do_sample=True)`` samples from with temperature 1 and no truncation.

    Returns
    -------
    (ToyModel, ToyModel)
        Target and draft.
    """
    from specdec import models

    prefixes, frontier = [PROMPT], [PROMPT]
    for _ in range(length):
        frontier = [x + (t,) for x in frontier if EOS not in x[len(PROMPT):] for t in range(VOCAB)]
        prefixes += [x for x in frontier if EOS not in x[len(PROMPT):-1]]
    target, assistant = tiny_models(seed)
    out = []
    for model, name in ((target, "hf-target"), (assistant, "hf-assistant")):
        table = _next_laws(model, [x for x in prefixes if EOS not in x[len(PROMPT):]])

        def law(prefix, table=table):
            return table[tuple(prefix)]

        out.append(models.ToyModel(VOCAB, EOS, law_fn=law, name=name))
    return tuple(out)


def generate_cases(length: int = 4, seed: int = 2026) -> tuple[BlockCase, ...]:
    """Block cases on the tiny models: draft lengths 1, 2 and 4, decodes of ``length``."""
    target, draft = toy_view(length, seed)
    return tuple(BlockCase(f"hf_generate_g{g}", f"tiny GPT-2 pair, generate(assistant_model), "
                           f"gamma = {g}, up to {length} tokens", target, draft, g, length, PROMPT)
                 for g in (1, 2, 4))


@block_sampler(vectorised=True)
class Generate:
    """``n`` whole decodes with ``generate(assistant_model=..., do_sample=True)``.

    The kit's case gives the draft length (``num_assistant_tokens``, schedule
    ``"constant"``, confidence threshold 0) and the decode length (``max_new_tokens``);
    its ``target``/``draft`` must be :func:`toy_view` of the same models.

    Returns
    -------
    numpy.ndarray, shape (n, length)
        Generated tokens after the prompt, ``-1`` after the decode stops.
    """

    def __init__(self, seed: int = 2026):
        self.seed = seed
        self.target_passes = 0       # forward passes of the target model, over all calls
        self.tokens = 0              # tokens generated, over all calls

    def __call__(self, target, draft, prefix, gamma, length, rng, n):
        import torch
        import transformers

        transformers.logging.set_verbosity_error()
        model, assistant = tiny_models(self.seed)
        gc = assistant.generation_config
        gc.num_assistant_tokens = int(gamma)
        gc.num_assistant_tokens_schedule = "constant"
        if hasattr(gc, "assistant_confidence_threshold"):
            gc.assistant_confidence_threshold = 0.0
        out = np.full((n, length), -1, dtype=np.int64)
        ids = torch.tensor([list(prefix)], dtype=torch.long)
        kwargs = dict(assistant_model=assistant, do_sample=True, max_new_tokens=length,
                      top_k=0, top_p=1.0, temperature=1.0, eos_token_id=EOS, pad_token_id=EOS)
        kwargs["attention_mask"] = torch.ones_like(ids)

        def count(*_):
            self.target_passes += 1

        hook = model.register_forward_hook(count)
        try:
            with torch.no_grad():
                for i in range(n):
                    seed_torch(rng)
                    seq = model.generate(ids, **kwargs)[0, ids.shape[1]:].tolist()
                    if EOS in seq:
                        seq = seq[: seq.index(EOS) + 1]
                    out[i, : len(seq)] = seq
                    self.tokens += len(seq)
        finally:
            hook.remove()
        return out


def run_all(*, seed: int = 0, budget: float | None = 20.0, trials: tuple | None = None,
            false_alarm: float = 1e-3) -> dict:
    """The token, block and end-to-end batteries at the installed release, as a dict.

    Parameters
    ----------
    seed : int
        Master seed of the batteries.
    budget : float or None
        Seconds per battery (the kit plans the trials from a pilot; the counts then
        depend on the machine's speed).
    trials : (int, int, int), optional
        Trials per case of the token, block and end-to-end batteries instead (the
        report is then a function of the seed alone).
    false_alarm : float
        Family-wise false-alarm probability of each battery.

    Returns
    -------
    dict
        ``release``, ``signature``, and per battery (``token``, ``block``, ``generate``)
        the report's :meth:`~specdec.conformance.Report.to_dict` plus ``seconds_per_call``
        (sampler seconds per trial) and ``markdown``.
    """
    import torch

    from .runner import run_battery

    torch.set_num_threads(1)      # tensors of a few entries: threads only add overhead
    out = {"release": release(), "signature": list(signature()), "budget": budget,
           "trials": None if trials is None else list(trials)}
    runs = (("token", token_step, None), ("block", BlockCycle(), None),
            ("generate", Generate(), list(generate_cases())))
    for i, (name, sampler, cases) in enumerate(runs):
        t0 = time.perf_counter()
        how = dict(budget=budget) if trials is None else dict(trials=int(trials[i]))
        rep = run_battery(sampler, cases=cases, seed=seed, false_alarm=false_alarm, **how)
        d = rep.to_dict()
        n_trials = sum(c.trials for c in rep.cases)
        d["seconds_per_call"] = rep.sampler_seconds / max(n_trials, 1)
        d["wall_seconds"] = time.perf_counter() - t0
        d["resolution"] = rep.resolution
        d["max_detectable_tv"] = rep.max_detectable_tv
        d["markdown"] = rep.to_markdown(heading=False)
        if isinstance(sampler, Generate):
            d["tokens_per_target_pass"] = sampler.tokens / max(sampler.target_passes, 1)
        out[name] = d
    return out


def main(argv=None) -> int:
    """``python -m specdec.conformance.hf [--seed N] [--budget S | --trials T,B,G]``: print JSON."""
    ap = argparse.ArgumentParser(prog="python -m specdec.conformance.hf",
                                 description="Run the kit's batteries on transformers' "
                                             "speculative sampling at the installed release.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=20.0, help="seconds per battery")
    ap.add_argument("--false-alarm", type=float, default=1e-3,
                    help="family-wise false-alarm probability of each battery")
    ap.add_argument("--trials", default=None,
                    help="trials per case of the token, block and generate batteries, "
                         "comma-separated (instead of a budget)")
    args = ap.parse_args(argv)
    laws.check_int(args.seed, "seed", minimum=0)
    trials = None
    if args.trials is not None:
        trials = tuple(int(x) for x in args.trials.split(","))
        if len(trials) != 3 or min(trials) < 1:
            ap.error("--trials: three positive integers, e.g. 500,200,40")
    print(json.dumps(run_all(seed=args.seed, budget=None if trials else args.budget,
                             trials=trials, false_alarm=args.false_alarm)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
