"""Randomness for torch samplers under the kit: seeded from the kit's numpy Generator, cheaply.

The kit hands every sampler a :class:`numpy.random.Generator` (one independent stream per
case, so a report is reproducible from its seed). A torch sampler needs torch's own
randomness; drawing its seed from the numpy generator keeps the whole run reproducible
and the cases independent:

* :func:`torch_generator` returns a new :class:`torch.Generator` seeded from ``rng``, for
  code that accepts ``generator=`` (``torch.multinomial``, ``torch.rand``); about 15 us.
* :func:`seed_torch` reseeds torch's default CPU generator from ``rng``, for code that
  draws from the global generator (Hugging Face transformers' ``_speculative_sampling``
  uses ``torch.rand_like`` and ``torch.multinomial`` without a generator); about 2 us.
  ``torch.manual_seed`` does the same and also seeds every accelerator backend: about
  1.4 ms per call on this machine, more than the function under test, so avoid it in a
  per-step loop.

Used in Appendix A3 ("The kit on real implementations") and by
:mod:`specdec.conformance.hf`. Requires torch (``pip install -e '.[hf]'`` in a clone).

Examples
--------
>>> import numpy as np
>>> import torch                                    # doctest: +SKIP
>>> g = torch_generator(np.random.default_rng(0))   # doctest: +SKIP
>>> torch.rand(2, generator=g).shape                # doctest: +SKIP
torch.Size([2])
"""

from __future__ import annotations

import numpy as np

__all__ = ["torch_seed", "torch_generator", "seed_torch"]


def torch_seed(rng: np.random.Generator) -> int:
    """A 63-bit seed drawn from ``rng`` (advances it by one draw).

    Raises
    ------
    TypeError
        If ``rng`` is not a :class:`numpy.random.Generator`.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: must be a numpy.random.Generator (got {type(rng).__name__})")
    return int(rng.integers(0, 2**63 - 1))


def seed_torch(rng: np.random.Generator, generator=None):
    """Seed a torch generator from ``rng`` and return it (cheap; draws one seed from ``rng``).

    Parameters
    ----------
    rng : numpy.random.Generator
        The kit's generator for the case.
    generator : torch.Generator, optional
        The generator to seed; by default torch's default CPU generator (for code that
        draws from the global generator).

    Returns
    -------
    torch.Generator
        ``generator``, seeded.

    Raises
    ------
    TypeError
        If ``rng`` is not a numpy Generator.
    ImportError
        If torch is not installed.
    """
    if generator is None:
        import torch

        generator = torch.default_generator
    return generator.manual_seed(torch_seed(rng))


def torch_generator(rng: np.random.Generator, device: str = "cpu"):
    """A new :class:`torch.Generator` on ``device``, seeded from ``rng`` by :func:`seed_torch`."""
    import torch

    return seed_torch(rng, torch.Generator(device=device))
