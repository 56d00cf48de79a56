"""Exactness of a served engine, black box: the law of the first tokens after a prompt.

The assumption-free cross-check of the per-token check (:mod:`specdec.client.tokencheck`,
every emitted token against the law of its position):

Seeded requests over HTTP, with every truncation off (:func:`~specdec.client.stream.
plain_sampling`), give independent draws of the first ``k`` tokens the server emits
after a prompt (:func:`first_tokens`, llama.cpp's ``/completion`` with
``return_tokens``). Two checks use the conformance kit's calibrated statistics
(:mod:`specdec.stats`):

* :func:`first_tokens_law_test`: when the exact law can be computed from the same weights (the
  book's models, :func:`specdec.decode.target_sequence_law`), the counts are tested
  against it with :func:`specdec.stats.assert_law` after pooling the cells whose expected
  count is small (:func:`specdec.stats.pool_sparse_cells`: a choice made from the law and
  the number of trials only), with a TV confidence interval (:func:`specdec.stats.tv_ci`)
  and the smallest TV the run detects with probability ``power``
  (:func:`specdec.stats.trials_to_detect`).
* :func:`two_sample`: when it cannot (a production model), the speculative server is
  compared with the same server without speculation, same prompt, same sampling: the
  two count vectors are tested for one common law with a chi-square test of homogeneity
  (:func:`scipy.stats.chi2_contingency`) on cells pooled by their pooled expected count;
  no enumeration needed, at the price of twice the requests and less power.

Both are statistical: a correct server fails with probability at most ``false_alarm``.
With the same seed, a server whose verification consumes one random draw per emitted
token (llama.cpp's: sample the target at each drafted position, accept while the sample
equals the draft token) emits the same text with and without the draft:
:func:`same_seed_identity` counts the requests where it does not. Used in Chapter 8.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from scipy import stats as sps

from specdec import stats
from specdec.client.stream import ClientError, Endpoint, plain_sampling, post_all

__all__ = ["first_tokens", "LawCheck", "first_tokens_law_test", "TwoSample", "two_sample",
           "same_seed_identity", "pad_law"]


def first_tokens(endpoint: Endpoint, prompt: str, n: int, *, k: int = 2,
                 temperature: float = 1.0, seed: int = 0, concurrency: int = 4,
                 pad: int = -1, generate: int | None = None,
                 extra: Mapping | None = None, progress=None) -> np.ndarray:
    """Token ids of the first ``k`` tokens of ``n`` seeded requests (seeds ``seed`` to
    ``seed + n - 1``), shape (n, k); a request that stopped early (end of sequence) is
    padded with ``pad``.

    Each request generates ``generate`` tokens (default ``k + 8``) of which the first
    ``k`` are kept: a server drafts at most the tokens still to generate, so a request of
    exactly ``k`` tokens would never speculate at the positions that are counted. Uses
    llama.cpp's native ``/completion`` endpoint (``return_tokens``); ``progress`` is called
    with 1 after each answer. Raises :class:`ClientError` naming the request on failure."""
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"n: must be an integer >= 1 (got {n!r})")
    if not (isinstance(k, int) and k >= 1):
        raise ValueError(f"k: must be an integer >= 1 (got {k!r})")
    generate = k + 8 if generate is None else generate
    if not (isinstance(generate, int) and generate >= k):
        raise ValueError(f"generate: must be an integer >= k (got {generate!r})")
    base = {"prompt": prompt, "n_predict": generate, "return_tokens": True, "stream": False,
            "cache_prompt": True, **plain_sampling(temperature), **dict(extra or {})}
    out = np.full((n, k), pad, dtype=np.int64)

    answers = post_all(endpoint, "/completion", [{**base, "seed": seed + i} for i in range(n)],
                       concurrency=concurrency, seeds=[seed + i for i in range(n)],
                       progress=progress)
    for i, answer in enumerate(answers):
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list):
            raise ClientError(f"request {i} (seed {seed + i}) to {endpoint.url}/completion: no "
                              f"'tokens' in the answer (not llama.cpp?)")
        out[i, :len(tokens[:k])] = tokens[:k]
    return out


def pad_law(law: np.ndarray, stop: int) -> np.ndarray:
    """The law of the first two tokens as the server reports them when ``stop`` ends a
    request: every sequence that starts with ``stop`` becomes ``(stop, stop)``."""
    law = np.array(law, dtype=float)
    if law.ndim != 2:
        raise ValueError(f"law: must have shape (V, V) (got {law.shape})")
    row = law[stop].sum()
    law[stop] = 0.0
    law[stop, stop] = row
    return law


def _cells(tokens: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or tokens.shape[1] != len(shape):
        raise ValueError(f"tokens: must have shape (n, {len(shape)}) (got {tokens.shape})")
    if tokens.min() < 0 or np.any(tokens >= np.array(shape)):
        raise ValueError("tokens: ids must lie in the law's range (pad stopped requests "
                         "with the stop token, see pad_law)")
    flat = np.ravel_multi_index(tuple(tokens.T), shape)
    return np.bincount(flat, minlength=int(np.prod(shape)))


@dataclass(frozen=True)
class LawCheck:
    """Result of :func:`first_tokens_law_test`: ``passed`` is the calibrated verdict."""

    trials: int
    cells: int
    passed: bool
    pvalue: float
    false_alarm: float
    tv: stats.TvInterval
    detectable_tv: float
    power: float
    message: str = ""

    def to_dict(self) -> dict:
        return {"trials": self.trials, "cells": self.cells, "passed": self.passed,
                "pvalue": self.pvalue, "false_alarm": self.false_alarm,
                "tv_estimate": self.tv.estimate, "tv_low": self.tv.low, "tv_high": self.tv.high,
                "tv_confidence": self.tv.confidence, "detectable_tv": self.detectable_tv,
                "power": self.power, "message": self.message}


def _detectable(law: np.ndarray, n: int, false_alarm: float, power: float) -> float:
    lo, hi = 1e-4, 1.0
    if stats.trials_to_detect(hi, law=law, false_alarm=false_alarm, power=power) > n:
        return math.nan
    for _ in range(30):
        mid = math.sqrt(lo * hi)
        if stats.trials_to_detect(mid, law=law, false_alarm=false_alarm, power=power) <= n:
            hi = mid
        else:
            lo = mid
    return hi


def first_tokens_law_test(tokens, law, *, false_alarm: float = 1e-6, power: float = 0.99,
              min_expected: float = 5.0) -> LawCheck:
    """Test first-token draws against an exact law.

    Parameters
    ----------
    tokens : array_like of int, shape (n, k)
        Draws (see :func:`first_tokens`).
    law : array_like, shape (V,) * k
        The exact law of the first ``k`` tokens (see :func:`pad_law` for stopped
        requests).
    false_alarm : float
        Probability that a correct server fails.
    power : float
        For ``detectable_tv``: the smallest TV (hardest alternative on the pooled cells)
        detected with this probability at these trials.
    min_expected : float
        Cells with a smaller expected count are pooled into one.

    Returns
    -------
    LawCheck
    """
    law = np.asarray(law, dtype=float)
    counts = _cells(tokens, law.shape)
    c, p = stats.pool_sparse_cells(counts, law.ravel(), min_expected=min_expected)
    n = int(c.sum())
    try:
        pvalue, passed, message = stats.assert_law(c, p, false_alarm=false_alarm), True, ""
    except AssertionError as err:
        pvalue, passed, message = stats.law_pvalue(c, p), False, str(err)
    return LawCheck(trials=n, cells=int(c.size), passed=passed, pvalue=float(pvalue),
                    false_alarm=false_alarm, tv=stats.tv_ci(c, p),
                    detectable_tv=_detectable(p, n, false_alarm, power), power=power,
                    message=message)


@dataclass(frozen=True)
class TwoSample:
    """Result of :func:`two_sample`: a chi-square test that two servers share one law."""

    trials: tuple[int, int]
    cells: int
    statistic: float
    dof: int
    pvalue: float
    passed: bool
    false_alarm: float
    tv_estimate: float
    detectable_tv: float = math.nan
    power: float = 0.99

    def to_dict(self) -> dict:
        return dict(self.__dict__, trials=list(self.trials))


def _detectable_two(n_a: int, n_b: int, dof: int, false_alarm: float, power: float) -> float:
    """The smallest TV between the two servers' laws that the homogeneity test detects
    with probability ``power`` in any direction: the one-sample Pearson answer
    (:func:`specdec.stats.gof.detectable_tv`) at the effective size ``n_a n_b / (n_a +
    n_b)``, which gives the two-sample statistic the same noncentrality (Lachin, J. M.,
    1977, Sample size determinations for r x c comparative trials, Biometrics 33(2),
    315-324); NaN when even a TV of 1 is out of reach."""
    from specdec.stats.gof import detectable_tv

    n_eff = max(1, int(n_a * n_b / (n_a + n_b)))        # rounded down: never optimistic
    tv = detectable_tv(n_eff, dof, false_alarm, power)
    return math.nan if tv >= 1.0 else tv


def two_sample(tokens_a, tokens_b, *, false_alarm: float = 1e-6, power: float = 0.99,
               min_expected: float = 5.0) -> TwoSample:
    """Do two servers' first-token draws follow one law? (no exact law needed)

    Outcomes are pooled by their count in both samples together (cells whose expected
    count in the smaller sample is below ``min_expected`` merge into one), then
    :func:`scipy.stats.chi2_contingency` tests homogeneity; ``passed`` when its p-value
    is at least ``false_alarm``. Asymptotic, not finite-sample: keep ``min_expected`` at
    5 or more. ``tv_estimate`` is the plug-in TV between the two frequency vectors;
    ``detectable_tv`` the smallest TV between the two laws (on the test's cells, in any
    direction) that fails the test with probability ``power``, from the noncentral
    chi-square at the effective sample size ``n_a n_b / (n_a + n_b)``: what a pass rules
    out. NaN when even a TV of 1 is out of reach.
    """
    a, b = np.asarray(tokens_a), np.asarray(tokens_b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError("tokens_a, tokens_b: must both have shape (n, k) with the same k")
    rows = np.concatenate([a, b])
    _, inverse = np.unique(rows, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    ca = np.bincount(inverse[:len(a)], minlength=inverse.max() + 1)
    cb = np.bincount(inverse[len(a):], minlength=inverse.max() + 1)
    pooled = (ca + cb) / (len(a) + len(b))
    small = pooled * min(len(a), len(b)) < min_expected
    if small.any():
        ca = np.append(ca[~small], ca[small].sum())
        cb = np.append(cb[~small], cb[small].sum())
    keep = (ca + cb) > 0
    table = np.stack([ca[keep], cb[keep]])
    if table.shape[1] < 2:
        return TwoSample((len(a), len(b)), 1, 0.0, 0, 1.0, True, false_alarm, 0.0,
                         math.nan, power)
    res = sps.chi2_contingency(table, correction=False)
    tv = 0.5 * float(np.abs(table[0] / len(a) - table[1] / len(b)).sum())
    return TwoSample((len(a), len(b)), int(table.shape[1]), float(res.statistic),
                     int(res.dof), float(res.pvalue), bool(res.pvalue >= false_alarm),
                     false_alarm, tv,
                     _detectable_two(len(a), len(b), int(res.dof), false_alarm, power), power)


def same_seed_identity(texts_a: Sequence, texts_b: Sequence) -> dict:
    """How many same-seed requests emitted the same text (or token ids) on two servers.

    Examples
    --------
    >>> same_seed_identity(["ab", "cd"], ["ab", "ce"])
    {'requests': 2, 'identical': 1, 'different': 1}
    """
    if len(texts_a) != len(texts_b):
        raise ValueError("texts_a, texts_b: need one text per seed in both")
    same = sum(bool(np.array_equal(np.asarray(x), np.asarray(y)))
               for x, y in zip(texts_a, texts_b))
    return {"requests": len(texts_a), "identical": same, "different": len(texts_a) - same}
