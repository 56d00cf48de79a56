"""The kit's measurement mode: how far a (lossy) sampler's law is from the target's.

The battery (:func:`specdec.conformance.run_battery`) *tests* exactness: a lossy sampler
fails it, and that is all it says. :func:`measure_loss` runs the same cases through the
same calling conventions and *measures* the distance instead: for each case, the TV
distance between the sampler's law and the exact law, with an interval valid for every
number of trials (:func:`specdec.stats.tv_ci`, Weissman et al.'s bound), and the plug-in
KL divergence with a multinomial bootstrap interval (:func:`specdec.stats.gof.kl_ci`). The
outcomes are whole decoded sequences of ``length`` tokens for a block sampler and tokens
for a token sampler; outcomes the target never produces form one cell of exact
probability 0 (they make the KL infinite). Used in Appendix A4 on the lossy acceptance
modes of :mod:`specdec.rules.lossy`.

References
----------
.. [1] T. Weissman, E. Ordentlich, G. Seroussi, S. Verdu, M. Weinberger, "Inequalities
   for the L1 Deviation of the Empirical Distribution", HP Labs HPL-2003-97, 2003.
.. [2] B. Efron, R. Tibshirani, "An Introduction to the Bootstrap", Chapman & Hall, 1993,
   Ch. 13 (percentile intervals).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from specdec.stats import gof as kitstats
from specdec import laws, stats

from specdec.conformance.conventions import BATCH, BLOCK, SamplerSpec, describe_sampler
from specdec.conformance.checks import case_rng, resolve_cases, sequence_counts
from specdec.conformance.drive import call_token, run_block_scalar, run_block_vectorised, tally_tokens

__all__ = ["CaseLoss", "LossReport", "measure_loss", "DEFAULT_LOSS_TRIALS"]

#: Trials per case when none are given.
DEFAULT_LOSS_TRIALS = 20_000


@dataclass(frozen=True)
class CaseLoss:
    """The measured distance of one case.

    Attributes
    ----------
    name, kind, description : str
    trials : int
        Outcomes counted (decodes, or token steps).
    tv : specdec.stats.TvInterval
        TV between the sampler's law and the exact law, with its interval.
    kl : specdec.stats.gof.KlInterval
        Plug-in ``KL(frequencies || exact law)`` in nats, with a bootstrap interval.
    impossible : int
        Outcomes of probability 0 under the target.
    """

    name: str
    kind: str
    description: str
    trials: int
    tv: stats.TvInterval
    kl: kitstats.KlInterval
    impossible: int

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "trials": self.trials,
                "tv": self.tv.estimate, "tv_low": self.tv.low, "tv_high": self.tv.high,
                "kl": self.kl.estimate, "kl_low": self.kl.low, "kl_high": self.kl.high,
                "impossible": self.impossible}


@dataclass(frozen=True)
class LossReport:
    """Result of :func:`measure_loss`: one :class:`CaseLoss` per case.

    Attributes
    ----------
    sampler : SamplerSpec
    seed : int
    confidence : float
        Coverage of the TV interval (guaranteed) and the KL interval (approximate).
    cases : tuple of CaseLoss
    seconds : float
    """

    sampler: SamplerSpec
    seed: int
    confidence: float
    cases: tuple
    seconds: float

    def case(self, name: str) -> CaseLoss:
        """The measurement of case ``name`` (``KeyError`` if it was not run)."""
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_markdown(self) -> str:
        """The measurements as a Markdown table."""
        pct = f"{100 * self.confidence:g}%"
        lines = [f"Loss of `{self.sampler.name}` ({self.sampler.kind} sampler), seed {self.seed}: "
                 f"TV with its {pct} interval valid for every number of trials, KL (nats) with "
                 f"a {pct} bootstrap interval.", "",
                 "| case | trials | TV | TV interval | KL | KL interval | impossible |",
                 "|:--|--:|--:|:--|--:|:--|--:|"]
        for c in self.cases:
            lines.append(f"| {c.name} | {c.trials:,} | {c.tv.estimate:.4f} | [{c.tv.low:.4f}, "
                         f"{c.tv.high:.4f}] | {c.kl.estimate:.4f} | [{c.kl.low:.4f}, "
                         f"{c.kl.high:.4f}] | {c.impossible:,} |")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"sampler": self.sampler.name, "kind": self.sampler.kind, "seed": self.seed,
                "confidence": self.confidence, "seconds": self.seconds,
                "cases": [c.to_dict() for c in self.cases]}


def _counts(sampler, spec: SamplerSpec, case, rng, trials: int) -> tuple[np.ndarray, np.ndarray]:
    """Counts over the possible outcomes plus one last cell for the impossible ones, and the law."""
    clock = [0.0]
    if spec.kind == BLOCK:
        run = run_block_vectorised if spec.vectorised else run_block_scalar
        rows, lens = run(sampler, case, rng, trials, clock)[:2]
        law, counts, known = sequence_counts(case, rows, lens)
        return np.append(counts, int((~known).sum())), np.append(law / law.sum(), 0.0)
    counts, _, _, n_bad = tally_tokens(call_token(sampler, spec, case, rng, trials, clock),
                                        case.vocab_size)
    return np.append(counts, n_bad), np.append(case.p, 0.0)


def measure_loss(sampler, *, kind: str | None = None, vectorised: bool | None = None,
                 inputs: str | None = None, cases=None, seed: int = 0, trials=None,
                 confidence: float = 0.95, resamples: int = 1000) -> LossReport:
    """Measure how far a sampler's law is from the target's, case by case (no verdict).

    Parameters
    ----------
    sampler : callable
        Token or block sampler, in the kit's calling conventions
        (:func:`specdec.conformance.describe_sampler`); batched samplers are not measured.
    kind, vectorised, inputs : optional
        Calling convention, when neither a mark nor the signature says it.
    cases : sequence of str or case objects, optional
        As for :func:`specdec.conformance.run_battery` (default: the standard battery of
        the kind; custom :class:`~specdec.conformance.BlockCase` objects are welcome).
    seed : int
        Master seed; case ``c`` uses the same stream as in the battery.
    trials : int or dict, optional
        Outcomes per case, for every case or by name (default :data:`DEFAULT_LOSS_TRIALS`).
    confidence : float
        Coverage of both intervals, in (0, 1).
    resamples : int
        Bootstrap resamples of the KL interval (>= 100).

    Returns
    -------
    LossReport

    Raises
    ------
    TypeError
        ``sampler`` is not callable.
    ValueError
        A batched sampler, an undecidable convention, unknown cases, invalid trials,
        seed or confidence.
    RuntimeError
        The sampler's output cannot be read (the battery reports that as a failure).

    Examples
    --------
    >>> from specdec.rules import lossy
    >>> from specdec import rules
    >>> f = rules.RuleSampler(lossy.Lossy("typical"))
    >>> r = measure_loss(f, cases=["block_g1"], trials=2_000, seed=1)
    >>> c = r.case("block_g1")
    >>> 0 < c.tv.low <= c.tv.estimate <= c.tv.high and c.kl.low <= c.kl.high
    True
    """
    t0 = time.perf_counter()
    spec = describe_sampler(sampler, kind=kind, vectorised=vectorised, inputs=inputs)
    if spec.kind == BATCH:
        raise ValueError("sampler: measure_loss measures token and block samplers (a batched "
                         "sampler is tested by run_battery)")
    seed = laws.check_int(seed, "seed", minimum=0)
    if not (isinstance(confidence, float) and 0.0 < confidence < 1.0):
        raise ValueError(f"confidence: must be a number in (0, 1) (got {confidence!r})")
    case_list = resolve_cases(spec.kind, cases)
    if isinstance(trials, dict):
        unknown = set(trials) - {c.name for c in case_list}
        if unknown:
            raise ValueError(f"trials: no case called {', '.join(sorted(unknown))} here")
    out = []
    for case in case_list:
        n = trials.get(case.name, DEFAULT_LOSS_TRIALS) if isinstance(trials, dict) else \
            DEFAULT_LOSS_TRIALS if trials is None else trials
        n = laws.check_int(n, "trials")
        rng = case_rng(seed, case.name)
        try:
            counts, law = _counts(sampler, spec, case, rng, n)
        except Exception as exc:
            raise RuntimeError(f"sampler: case {case.name!r}: {type(exc).__name__}: {exc}") from exc
        out.append(CaseLoss(case.name, spec.kind, case.description, int(counts.sum()),
                            stats.tv_ci(counts, law, confidence),
                            kitstats.kl_ci(counts, law, confidence, rng=rng, resamples=resamples),
                            int(counts[-1])))
    return LossReport(spec, seed, float(confidence), tuple(out), time.perf_counter() - t0)
