"""What exists for the book rather than for a reader's own code.

The library (:mod:`specdec`) is what an inference engineer takes home; this subpackage is
how the book's chapters present it. Nothing in :mod:`specdec` outside this subpackage
imports it.

- :mod:`specbook.claims`: the article's numeric claims, in one table, each recomputed.
- :mod:`specbook.prose`: numbers in prose (glued plain values, readable formats).
- :mod:`specbook.provenance`: the run records at the top and bottom of every chapter.
- :mod:`specbook.plotting`: the book's palette and figure defaults.
- :mod:`specbook.tables`: numbered, captioned tables; Markdown of tidy rows and of
  :class:`specdec.measure.Report` objects.
- :mod:`specbook.study`: chapter 8's in-process study (which models, settings and
  prompts, in which order), on top of :mod:`specdec.protocol`.
- :mod:`specbook.served`: chapter 8's served study, :mod:`specdec.client` run against
  llama.cpp's server serving the book's models; :mod:`specbook.instruments`: its
  instruments (pass timings, the sampled-text protocol, the bandwidth baseline, the context
  of a run).
- :mod:`specbook.rule`: does the exact rule pay on this CPU? The book's decoder with and
  without a draft (today's, or the one distilled on the large target), exactness first,
  paired timing, its c and g, the cost model's prediction, exact acceptance per language,
  the decoder's achieved bandwidth (Appendix F, ``benchmarks/bench_rule.py``).
- :mod:`specbook.ch8_text`: chapter 8's comparative and causal sentences, chosen from
  the measurements.
- :mod:`specbook.sentences`: the prose sentences of a rendered page and their word counts
  (the book's rule: none over 45 words).
"""
