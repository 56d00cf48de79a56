"""Tiny Hugging Face models whose exact laws the kit enumerates (transformers under the kit, end to end).

The end-to-end rows of :mod:`specdec.conformance.hf` decode with ``generate`` on tiny
GPT-2 models built from small configurations (nothing downloaded): a target and an
assistant over a vocabulary of 4 with an end-of-sequence token (:func:`tiny_models`), their
exact laws as toy models (:func:`toy_view`), a third model with a tokenizer of its own for
universal assisted decoding (:func:`tiny_different_tokenizer`), which modes the installed
release has (:func:`has_mode`), and the kit's cases over them (:func:`generate_cases`).
Requires torch and transformers (imported inside the functions).
"""

from __future__ import annotations

from functools import lru_cache

from specdec import laws

from specdec.conformance.cases import BlockCase

__all__ = ["release", "VOCAB", "EOS", "PROMPT", "tiny_models", "toy_view", "LOOKUP_PROMPT", "MODES",
           "TARGET_CHARS", "ASSISTANT_CHARS", "tiny_different_tokenizer", "has_mode",
           "verifies_with_draft_logits", "generate_cases"]


def release() -> str:
    """The installed transformers version."""
    import transformers

    return transformers.__version__


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
def toy_view(length: int = 4, seed: int = 2026, prompt: tuple = PROMPT):
    """The tiny models as :class:`specdec.models.ToyModel` objects with their exact laws.

    Every prefix of ``prompt`` plus up to ``length`` tokens (none after end-of-sequence)
    is run through each model once; the laws are the softmax of its logits, what
    ``generate(do_sample=True)`` samples from with temperature 1 and no truncation.

    Parameters
    ----------
    length : int
        Longest decode, in tokens after the prompt.
    seed : int
        Seed of :func:`tiny_models`.
    prompt : tuple of int
        Token ids every decode starts from (ids in ``0..VOCAB-1``, no end-of-sequence).

    Returns
    -------
    (ToyModel, ToyModel)
        Target and draft.

    Raises
    ------
    ValueError
        If ``prompt`` is empty, holds an id outside the vocabulary or the end-of-sequence.
    """
    from specdec import models

    prompt = tuple(int(t) for t in prompt)
    if not prompt or any(not 0 <= t < VOCAB for t in prompt) or EOS in prompt:
        raise ValueError(f"prompt: non-empty ids in 0..{VOCAB - 1} without the "
                         f"end-of-sequence {EOS} (got {prompt})")
    laws.check_int(length, "length", minimum=1)
    n0 = len(prompt)
    prefixes, frontier = [prompt], [prompt]
    for _ in range(length):
        frontier = [x + (t,) for x in frontier if EOS not in x[n0:] for t in range(VOCAB)]
        prefixes += [x for x in frontier if EOS not in x[n0:-1]]
    target, assistant = tiny_models(seed)
    out = []
    for model, name in ((target, "hf-target"), (assistant, "hf-assistant")):
        table = _next_laws(model, [x for x in prefixes if EOS not in x[n0:]])

        def law(prefix, table=table):
            return table[tuple(prefix)]

        out.append(models.ToyModel(VOCAB, EOS, law_fn=law, name=name))
    return tuple(out)


#: The prompt of the prompt-lookup cases: repeated bigrams, so that the n-gram lookup
#: finds continuations from the first step on.
LOOKUP_PROMPT = (0, 1, 2, 0, 1, 2, 1)

#: Modes of :class:`Generate` and what drafts: the assistant model, the prompt's n-grams, or
#: an assistant with its own tokenizer (universal assisted decoding, 4.46 on).
MODES = ("assistant", "prompt_lookup", "different_tokenizer")

#: The target's characters, one token each (id = position); the last is end-of-sequence.
TARGET_CHARS = ("a", "b", "c", "~")

#: The assistant's characters with a different tokenizer: the same text in another order,
#: plus one character the target never writes (the vocabularies must differ in size, or
#: transformers refuses ``assistant_tokenizer``).
ASSISTANT_CHARS = ("c", "a", "b", "~", "d")


def _char_tokenizer(chars: tuple):
    """A fast tokenizer with one token per character (ids = positions), built locally."""
    from tokenizers import Tokenizer, decoders, models as tok_models
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(tok_models.BPE(vocab={c: i for i, c in enumerate(chars)}, merges=[]))
    raw.decoder = decoders.Fuse()
    eos = TARGET_CHARS[EOS]
    return PreTrainedTokenizerFast(tokenizer_object=raw, eos_token=eos, pad_token=eos)


@lru_cache(maxsize=None)
def tiny_different_tokenizer(seed: int = 2026):
    """Tokenizers of the target and of a third tiny model, which drafts in its own vocabulary.

    The target's tokenizer maps :data:`TARGET_CHARS` to ids 0..3 (the target of
    :func:`tiny_models`); the assistant's maps :data:`ASSISTANT_CHARS` to ids 0..4, with its
    own tiny GPT-2 of vocabulary 5 (torch's generator seeded by ``seed + 2``). Nothing is
    downloaded.

    Returns
    -------
    (PreTrainedTokenizerFast, PreTrainedTokenizerFast, GPT2LMHeadModel)
        Target tokenizer, assistant tokenizer, assistant model.
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed + 2)
    eos = ASSISTANT_CHARS.index(TARGET_CHARS[EOS])
    cfg = GPT2Config(vocab_size=len(ASSISTANT_CHARS), n_positions=16, n_embd=16, n_layer=1,
                     n_head=2, bos_token_id=0, eos_token_id=eos, pad_token_id=eos)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        model.transformer.wte.weight.mul_(2.5)
    return _char_tokenizer(TARGET_CHARS), _char_tokenizer(ASSISTANT_CHARS), model


def has_mode(mode: str) -> bool:
    """Whether the installed release has :class:`Generate`'s ``mode``."""
    if mode not in MODES:
        raise ValueError(f"mode: must be one of {', '.join(MODES)} (got {mode!r})")
    if mode != "different_tokenizer":
        return True
    from transformers.generation import candidate_generator

    return hasattr(candidate_generator, "AssistedCandidateGeneratorDifferentTokenizers")


def verifies_with_draft_logits(mode: str) -> bool:
    """Whether ``generate`` in ``mode`` at do_sample=True calls ``_speculative_sampling``."""
    if mode == "assistant":
        return True
    if mode == "prompt_lookup":
        return False
    from transformers.generation import candidate_generator

    # 4.46-4.49: drafts re-tokenised without logits; 4.50 on: the vocabulary translator
    return hasattr(candidate_generator, "UniversalSpeculativeDecodingGenerator")


def generate_cases(length: int = 4, seed: int = 2026, mode: str = "assistant",
                   gammas: tuple = (1, 2, 4)) -> tuple[BlockCase, ...]:
    """Block cases on the tiny models, one per draft length, decodes of ``length``.

    ``mode="assistant"`` starts from :data:`PROMPT`, ``"prompt_lookup"`` from
    :data:`LOOKUP_PROMPT` (the lookup needs n-grams to match); the case's draft is the
    tiny assistant either way (prompt lookup ignores it: the kit only uses the target's
    sequence law for a vectorised block sampler).

    Raises
    ------
    ValueError
        If ``mode`` is not one of :data:`MODES`, or a draft length is not a positive integer.
    """
    if mode not in MODES:
        raise ValueError(f"mode: must be one of {', '.join(MODES)} (got {mode!r})")
    for g in gammas:
        laws.check_int(g, "gammas", minimum=1)
    prompt = LOOKUP_PROMPT if mode == "prompt_lookup" else PROMPT
    target, draft = toy_view(length, seed, prompt)
    tag, what = {"assistant": ("hf_generate", "generate(assistant_model)"),
                 "prompt_lookup": ("hf_lookup", "generate(prompt_lookup_num_tokens)"),
                 "different_tokenizer": ("hf_tokenizers", "generate(assistant_model, "
                                         "tokenizer, assistant_tokenizer)")}[mode]
    return tuple(BlockCase(f"{tag}_g{g}", f"tiny GPT-2 pair, {what}, gamma = {g}, "
                           f"up to {length} tokens", target, draft, int(g), length, prompt)
                 for g in gammas)
