"""specdec: exact speculative decoding, checked.

The library behind *specdec-book*. One module per idea:

- :mod:`specdec.laws`: probability vectors, validation, TV distance, sampling laws from logits.
- :mod:`specdec.token`: one speculative step, its exact output law and flawed variants.
- :mod:`specdec.simulate`: Monte Carlo engines (vectorised numpy, and the article's protocol).
- :mod:`specdec.stats`: standard errors, goodness of fit, power and trials needed.
- :mod:`specdec.claims`: the article's numeric claims, in one table.
- :mod:`specdec.models`, :mod:`specdec.block`: toy autoregressive models and block cycles.
- :mod:`specdec.cost`: expected tokens per cycle, speedup, sweeps.
- :mod:`specdec.plotting`, :mod:`specdec.provenance`: the book's figures and run records.
"""

__version__ = "0.1.0"
