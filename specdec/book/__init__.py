"""What exists for the book rather than for a reader's own code.

The library (:mod:`specdec`) is what an inference engineer takes home; this subpackage is
how the book's chapters present it. Nothing in :mod:`specdec` outside this subpackage
imports it.

- :mod:`specdec.book.claims`: the article's numeric claims, in one table, each recomputed.
- :mod:`specdec.book.prose`: numbers in prose (glued plain values, readable formats).
- :mod:`specdec.book.provenance`: the run records at the top and bottom of every chapter.
- :mod:`specdec.book.plotting`: the book's palette and figure defaults.
- :mod:`specdec.book.tables`: numbered, captioned tables; Markdown of tidy rows and of
  :class:`specdec.measure.Report` objects.
- :mod:`specdec.book.study`: chapter 8's in-process study (which models, settings and
  prompts, in which order), on top of :mod:`specdec.protocol`.
- :mod:`specdec.book.served`: chapter 8's served study, :mod:`specdec.client` run against
  llama.cpp's server serving the book's models; :mod:`specdec.book.instruments`: its
  instruments (pass timings, the sampled-text protocol, the bandwidth baseline, the context
  of a run).
- :mod:`specdec.book.ch8_text`: chapter 8's comparative and causal sentences, chosen from
  the measurements.
"""
