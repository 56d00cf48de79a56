"""Adapters that put real engines' speculative samplers under the conformance kit.

One module per engine: ``vllm`` (vLLM V1's rejection sampler, in-process, the kit's batch
convention), ``llama_speculative`` (llama.cpp's ``llama-speculative`` example, black box
through its command line, every emitted token tested by :mod:`specdec.stats.pertoken`); more
engines, one module each. An adapter is a thin translation between the kit's calling
conventions (:mod:`specdec.conformance`) or its per-token check and the engine's own
interface (a function, a command line, a server): it converts arrays, builds the engine's
metadata, seeds the engine's randomness from the kit's generator, and reads the engine's
output back. It neither fixes nor hides anything the engine does: no clipping,
renormalising or filtering of what the engine emits.

Python engines run in a virtual environment of their own, built and cached by
``tools/py_engines.py``; C++ engines are built by ``tools/engine.py``. Each module has a
command line ``python -m specdec.conformance.adapters.NAME`` that prints a JSON summary.
Importing this package does not import any engine.
"""
