"""specdec: exact speculative decoding, checked.

The library behind *specdec-book*. One module per idea:

- :mod:`specdec.laws`: probability vectors, validation, TV distance, sampling laws from logits.
- :mod:`specdec.verify`: the verification kernel (accept, residual, bonus over rows x
  gamma, ragged drafts) that every sampler of the library calls, and the one
  inverse-CDF draw.
- :mod:`specdec.rules.token`: token-by-token verification as one rule object (its samplers
  call the kernel) and its flaws, one object per bug (a new flaw is one subclass that
  overrides the hook it gets wrong, one instance, and its entry in ``STEP_FLAWS``).
- :mod:`specdec.rules`: the registry of every verification rule and flaw, by name.
- :mod:`specdec.step`: one speculative step's exact output law under any token rule.
- :mod:`specdec.simulate`: Monte Carlo engines (vectorised numpy, and the article's protocol).
- :mod:`specdec.stats`: standard errors, goodness of fit, power and trials needed;
  :mod:`specdec.stats.gof`: the conformance kit's statistics (pooled chi-square, Holm).
- :mod:`specdec.stats.pertoken`: per-token exactness (every emitted token, randomised PIT, Holm).
- :mod:`specdec.models`, :mod:`specdec.simulate.cycle`: toy autoregressive models and block cycles;
  :mod:`specdec.rules.cycle`: the block cycle's rules (correct and stateful bugs) and exact
  laws; :mod:`specdec.cost.accounting`: honest and inflated throughput figures of a run.
- :mod:`specdec.cost`: expected tokens per cycle, speedup, sweeps, best draft length, for
  a constant alpha or any workload (one function per quantity).
- :mod:`specdec.cost.workloads`: acceptance that depends on context or draft position, with the
  regime carried across cycles (exact Markov renewal-reward laws);
  :mod:`specdec.stats.dependence`: dependence between consecutive cycles, measured.
- :mod:`specdec.rules.base`: exact laws of stateless verification rules (draft paths, cycle
  outcomes) and the one sequence-law dynamic programme over cycle states.
- :mod:`specdec.rules.block`: block verification (Sun et al.), the paper's 10/9 and 11/9,
  the sum-of-minima bound (12/9 there, not attained), and its flawed variants.
- :mod:`specdec.rules.optimality`: the linear program over every exact verifier of one cycle
  (scipy's HiGHS, certified in fractions): its optimum is block verification's count.
- :mod:`specdec.rules.trees`: several drafts per position and draft trees, verified by
  recursive rejection sampling (SpecInfer; with and without replacement, top-k).
- :mod:`specdec.rules.matching`: the matching rule (accept while the target's own sample
  equals the draft), exact for any draft, and its same-seed property.
- :mod:`specdec.rules.lossy`: lossy acceptance (typical, SGLang's thresholds, a scaled ratio,
  relaxed): exact TV and KL to the target beside the accepted tokens they buy.
- :mod:`specdec.conformance`, :mod:`specdec.conformance.gallery`: a test kit for real samplers, and
  buggy samplers it must catch (``python -m specdec.conformance pkg.module:function``).
- :mod:`specdec.nn`, :mod:`specdec.decode`: numpy inference of the small trained models
  and speculative decoding with them.
- :mod:`specdec.measure`, :mod:`specdec.protocol`, :mod:`specdec.client`: timing
  arithmetic and reports; the paired, interleaved protocol on in-process decoders; the
  same protocol over HTTP against a streaming server (``python -m specdec.client``).
- :mod:`specbook`: what exists for the book only: the article's claims table
  (:mod:`~specbook.claims`), numbers in prose (:mod:`~specbook.prose`), run records
  (:mod:`~specbook.provenance`), figure defaults (:mod:`~specbook.plotting`),
  numbered tables (:mod:`~specbook.tables`) and chapter 8's study, served-engine runs
  and data-chosen sentences (:mod:`~specbook.study`, :mod:`~specbook.served`,
  :mod:`~specbook.ch8_text`).
"""

__version__ = "0.1.0"
