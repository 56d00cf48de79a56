"""Adapters that put real engines' speculative samplers under the conformance kit.

One module per engine (``vllm``: vLLM V1's rejection sampler; more engines, one module
each). An adapter is a thin translation between the kit's calling conventions
(:mod:`specdec.conformance`) and the engine's own interface: it converts arrays, builds
the engine's metadata, seeds the engine's randomness from the kit's generator, and reads
the engine's output back. It neither fixes nor hides anything the engine does: no
clipping, renormalising or filtering of what the engine emits.

Each engine runs in a virtual environment of its own, built and cached by
``tools/py_engines.py``; an adapter module is run with that environment's interpreter and
this checkout on ``PYTHONPATH`` (``python -m specdec.conformance.adapters.NAME``). Importing
this package does not import any engine.
"""
