"""A conformance kit for speculative samplers: does this sampler preserve the target law?

Give the kit a sampler as a plain Python callable; it runs a standard battery of cases,
compares what the sampler emits with the exact law it must emit, checks the accounting
the sampler reports, and returns a :class:`Report` with one verdict per case and one for
the whole battery. The family-wise false-alarm probability is controlled: a correct
sampler fails the battery with probability at most ``false_alarm`` (Holm's step-down
procedure over every statistical check of the run), whatever the seed.

Samplers
--------
Three kinds of sampler are recognised (token, block, batch), six calling conventions in
all; mark a sampler with :func:`token_sampler`, :func:`block_sampler` or
:func:`batch_sampler`, or pass ``kind=``, ``vectorised=``, ``inputs=`` explicitly (see
:func:`describe_sampler` for the rules used when nothing is said).

Token sampler, law inputs (the default)
    ``f(p, q, rng) -> int``: one speculative step. ``p`` is the target law and ``q`` the
    draft law, both ``(V,)`` float64 probability vectors *after* all processing
    (temperature, top-k, top-p); ``rng`` a :class:`numpy.random.Generator`. The sampler
    proposes from ``q``, runs its accept test and recovery, and returns the emitted token
    id. It may also return ``(token, accepted)`` where ``accepted`` says whether the token
    is the accepted proposal; the kit then also checks that accounting.
Token sampler, vectorised
    ``f(p, q, rng, n) -> (n,) int array`` (or ``(tokens, accepted)`` with a ``(n,)`` bool
    array): ``n`` independent steps at once. Mark it ``@token_sampler(vectorised=True)``.
    A vectorised sampler is tested on ten times more trials in the same time.
Token sampler, logits inputs
    ``f(target_logits, draft_logits, rng[, n], *, temperature, top_k, top_p)``: the sampler
    receives raw logits and the sampling settings and must itself turn them into laws, as
    real decoders do; the law it must emit is
    ``specdec.laws.sampling_law(target_logits, temperature=..., top_k=..., top_p=...)``.
    Mark it ``@token_sampler(inputs="logits")``. Bugs in the post-processing (a ratio on
    the wrong law) can only be seen through this convention.
Block sampler
    ``f(target, draft, prefix, gamma, rng)``: one speculative cycle over the toy
    autoregressive models of :mod:`specdec.models` (``next_law(prefix) -> (V,)``,
    ``vocab_size``, ``eos``) from the confirmed ``prefix`` (tuple of token ids) with draft
    length ``gamma``. It returns the emitted tokens (a sequence of 1 to ``gamma + 1``
    ids), or ``(emitted, n_accepted, n_proposed)``, or an object with ``emitted``,
    ``n_accepted`` and ``n_proposed`` attributes (:class:`specdec.simulate.cycle.CycleResult`). The
    kit decodes by calling it repeatedly, appending what it emits to the prefix, until
    ``length`` tokens or end-of-sequence, and compares the law of the decoded sequence
    with the target's exact sequence law (:func:`specdec.models.sequence_law`). A sampler
    that keeps state between the cycles of one decode (a cache, leftover proposals) may
    define a ``reset()`` method; the kit calls it before every decode.
Block sampler, vectorised
    ``f(target, draft, prefix, gamma, length, rng, n)``: ``n`` independent decodes of up
    to ``length`` tokens. Returns a ``(n, length)`` integer array padded with ``-1``, or
    an object with ``tokens`` (and optionally ``n_tokens`` and the per-cycle arrays
    ``sequence``, ``n_emitted``, ``n_accepted``, ``n_proposed``, ``hit_eos``), such as
    :class:`specdec.simulate.cycle.GenerationBatch`. Mark it ``@block_sampler(vectorised=True)``.

Batch sampler
    ``f(target_logits, draft_probs, draft_tokens, n_draft, settings, rng)``: one call
    verifies a batch of requests in the flattened ragged layout of vLLM's rejection
    sampler, each request with its own settings (temperature, top-k, top-p, greedy) and
    its own number of proposals (0 allowed). Mark it ``@batch_sampler``; the layout and
    return value are in :func:`batch_sampler`. Each request is checked against its own law.

Accounting
    Where a sampler reports what it accepted, the kit checks it. Token step: the joint
    law of (token, accepted) must be ``(min(p, q), (p - q)^+)``. Block cycle: the accepted
    proposals are the emitted tokens before the corrected or bonus token, so
    ``n_accepted = len(emitted) - 1`` (``= len(emitted)`` when the cycle ends at an
    accepted end-of-sequence) and ``0 <= n_accepted <= n_proposed <= gamma``, in every
    cycle; and the accepted count of the first cycle of each decode must follow its
    exact law (:func:`specdec.rules.cycle.cycle_accepted_law`). Accepts after the first
    rejection must not be counted: ``[accept, reject, accept, accept]`` counts 1.
    That law is token-by-token verification's; a block sampler that verifies otherwise
    (block verification, a draft tree, the matching rule) names the accepted-count law of
    its rule with ``accepted_law=`` (``"token"``, ``"block"``, ``"matching"`` or a callable,
    see :class:`SamplerSpec`), or carries it as a ``first_cycle_accepted_law`` method, as
    the library's rules do through :class:`specdec.rules.RuleSampler`. The opt-in block
    cases :data:`RULE_CASE_NAMES` are where the flaws of those rules show.

Measurement
    :func:`measure_loss` runs the same cases and conventions and reports, instead of a
    verdict, how far the sampler's law is from the target's: the TV distance with an
    interval valid for every number of trials and the KL divergence with a bootstrap
    interval (:class:`LossReport`); for a lossy acceptance mode, whose failing the battery
    says nothing new (command line: ``--measure``).

The statistics
--------------
For each case the kit counts outcomes (token ids, or whole emitted sequences) over
``trials`` independent repetitions and applies:

* **Impossible outcomes.** An outcome the target gives probability 0 (or a token id out of
  the vocabulary, a malformed return value, an exception, an accounting identity that
  does not hold) is a deterministic failure: a correct sampler never produces it, so it
  costs no false-alarm budget.
* **Pooled Pearson chi-square.** Possible cells are binned so that every bin has an
  expected count of at least ``min_expected`` (10) and there are at most ``max_bins``
  (100) bins: cells whose expected count reaches the floor are bins of their own, the
  others are pooled in decreasing order of probability (see :func:`pool_cells`). The
  binning depends only on the exact law and the number of trials, never on the data, so
  the test is valid; a chi-square on cells with tiny expectations is never computed.
* **TV distance** between the empirical and the exact law on the bins (a lower bound on
  the TV over outcomes, equal to it when nothing is pooled), with a confidence interval
  valid for every number of trials (:func:`specdec.stats.tv_ci`, Weissman et al.'s L1
  deviation bound applied to the bins).
* **Detectable TV**: the smallest TV distance from the target (on the bins) that the
  chi-square test detects with probability ``power`` at the Bonferroni level
  ``false_alarm / m`` (see :func:`detectable_tv`), and, for a failing case, an estimate
  of the trials the test needed to catch the bug at that power.
* **Holm-Bonferroni** over the ``m`` statistical checks of the battery (law and
  accounting checks with at least one degree of freedom): a check fails when its
  Holm-adjusted p-value is at most ``false_alarm``.

References
----------
.. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via
   Speculative Decoding", ICML 2023 (PMLR 202), Sec. 2.3 and App. A.1 (the step is exact
   for any processed laws p, q).
.. [2] S. Holm, "A simple sequentially rejective multiple test procedure",
   Scandinavian Journal of Statistics 6(2), 65-70, 1979.
.. [3] T. Weissman, E. Ordentlich, G. Seroussi, S. Verdu, M. Weinberger, "Inequalities
   for the L1 Deviation of the Empirical Distribution", HP Labs HPL-2003-97, 2003.
.. [4] W. G. Cochran, "Some methods for strengthening the common chi-square tests",
   Biometrics 10(4), 417-451, 1954 (expected counts per cell).

Examples
--------
>>> import numpy as np
>>> from specdec import conformance
>>> from specdec.conformance import gallery
>>> report = conformance.run_battery(gallery.vectorised_correct, seed=1,
...                                  cases=["article", "spread_residual"], trials=20_000)
>>> report.passed
True
>>> conformance.run_battery(gallery.shared_uniform, seed=1, trials=20_000,
...                         cases=["spread_residual"]).passed
False
"""

from __future__ import annotations

from specdec.stats.gof import Binning, detectable_tv, holm_adjust, pool_cells

from specdec.conformance.pilot import plan_battery
from specdec.conformance.plan import DEFAULT_RESOLUTION, Plan
from specdec.conformance.cases import (BATCH_CASE_NAMES, BLOCK_CASE_NAMES, CASE_NAMES, RULE_CASE_NAMES, BatchCase, BlockCase,
                    TokenCase, batch_cases, block_cases, rule_cases, token_cases)
from specdec.conformance.conventions import (ACCEPTED_LAWS, SamplerSpec, batch_sampler, block_sampler, describe_sampler,
                          load_sampler, token_sampler)
from specdec.conformance.loss import CaseLoss, LossReport, measure_loss
from specdec.conformance.report import CaseResult, Check, CycleAccounting, Report
from specdec.conformance.checks import run_case
from specdec.conformance.runner import assert_conforms, run_battery

__all__ = [
    "SamplerSpec",
    "token_sampler",
    "block_sampler",
    "batch_sampler",
    "BatchCase",
    "batch_cases",
    "BATCH_CASE_NAMES",
    "describe_sampler",
    "load_sampler",
    "TokenCase",
    "BlockCase",
    "token_cases",
    "block_cases",
    "CASE_NAMES",
    "BLOCK_CASE_NAMES",
    "RULE_CASE_NAMES",
    "rule_cases",
    "ACCEPTED_LAWS",
    "measure_loss",
    "LossReport",
    "CaseLoss",
    "Binning",
    "pool_cells",
    "detectable_tv",
    "holm_adjust",
    "Check",
    "CycleAccounting",
    "CaseResult",
    "Report",
    "DEFAULT_RESOLUTION",
    "Plan",
    "plan_battery",
    "run_case",
    "run_battery",
    "assert_conforms",
    "main",
]


def main(argv=None) -> int:
    """Command-line entry point (``python -m specdec.conformance``); see :mod:`specdec.conformance.__main__`."""
    from specdec.conformance.__main__ import main as _main

    return _main(argv)
