"""Tests of the measurement library (specdec.measure), the in-process protocol
(specdec.protocol) and chapter 8's study (specbook.study): arithmetic on synthetic
timings, fake clocks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from specdec import decode as dec
from specdec import measure as ms
from specdec import nn
from specdec import protocol as pr
from specbook.study import run_study
from specbook.tables import markdown_table, report_markdown

finite = st.floats(min_value=0.0, max_value=1e3, allow_nan=False, allow_infinity=False)


pytestmark = pytest.mark.usefixtures("one_blas_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def pair():
    t = nn.Transformer.random(nn.TransformerConfig(2, 16, 4, 64), np.random.default_rng(0), "t")
    d = nn.Transformer.random(nn.TransformerConfig(1, 8, 2, 64), np.random.default_rng(1), "d")
    return t, d


# ------------------------------------------------------------------------ arithmetic
def test_tick_clock():
    clock = ms.TickClock([1.0, 2.0], start=10.0)
    assert [clock() for _ in range(4)] == [10.0, 11.0, 13.0, 14.0]
    assert clock.calls == 4
    with pytest.raises(ValueError, match="step"):
        ms.TickClock(-1.0)


def test_percentiles_exact():
    assert ms.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert ms.percentiles(np.arange(101.0)) == {"p50": 50.0, "p90": 90.0, "p99": 99.0}
    assert ms.percentile([0.0, 10.0], 99) == pytest.approx(9.9)
    assert ms.median_iqr([1, 2, 3, 4, 5]) == (3.0, 2.0)
    # skewed: the median is not centred between the quartiles
    assert ms.quartiles([1.0, 2.0, 3.0, 4.0, 10.0]) == (2.0, 3.0, 4.0)
    assert ms.quartiles([1.0, 1.0, 1.0, 5.0]) == (1.0, 1.0, 2.0)
    with pytest.raises(ValueError, match="at least one value"):
        ms.percentile([], 50)
    with pytest.raises(ValueError, match="q: must be in"):
        ms.percentile([1.0], 101)
    with pytest.raises(ValueError, match="finite"):
        ms.median_iqr([1.0, math.nan])


@settings(max_examples=60, deadline=None)
@given(st.lists(finite, min_size=1, max_size=40))
def test_percentiles_properties(values):
    p = ms.percentiles(values)
    assert min(values) <= p["p50"] <= p["p90"] <= p["p99"] <= max(values)
    m, iqr = ms.median_iqr(values)
    assert iqr >= 0 and ms.median_iqr(values[::-1]) == (m, iqr)
    q1, q2, q3 = ms.quartiles(values)
    assert min(values) <= q1 <= q2 <= q3 <= max(values) and q2 == m
    assert q3 - q1 == pytest.approx(iqr, abs=1e-12 * (1 + abs(q3)))


def test_request_metrics_from_times():
    m = ms.RequestMetrics.from_times(1.0, [1.5, 1.5, 1.5, 2.0, 3.0], cycles=3, accepted=2,
                                     proposed=6)
    assert m.ttft == 0.5 and m.total == 2.0 and m.tokens == 5
    assert m.itls == (0.0, 0.0, 0.5, 1.0)
    assert m.itl_mean == pytest.approx(1.5 / 4)
    with pytest.raises(ValueError, match="non-decreasing"):
        ms.RequestMetrics.from_times(0.0, [2.0, 1.0])
    with pytest.raises(ValueError, match="not before start"):
        ms.RequestMetrics.from_times(5.0, [2.0])
    with pytest.raises(ValueError, match="at least one value"):
        ms.RequestMetrics.from_times(0.0, [])


def test_summarize_synthetic():
    reqs = [ms.RequestMetrics.from_times(0.0, [0.2, 0.3, 0.4], cycles=2, accepted=1, proposed=4,
                                         characters=2, accepted_lengths=(0, 1)),
            ms.RequestMetrics.from_times(0.4, [1.0, 1.0, 1.4], cycles=2, accepted=2, proposed=4,
                                         characters=5, accepted_lengths=(2, 0))]
    s = ms.summarize(reqs, wall=1.4)
    assert s.accepted_length_counts == (2, 1, 1)
    assert s.char_throughput == pytest.approx(7 / 1.4)
    assert s.tokens == 6 and s.requests == 2
    assert s.throughput == pytest.approx(6 / 1.4)
    assert s.ttft_p50 == pytest.approx(0.4)            # (0.2 + 0.6) / 2
    assert s.itl_p50 == pytest.approx(0.1)             # gaps 0.1, 0.1, 0.0, 0.4
    assert s.itl_mean == pytest.approx((0.2 + 0.4) / 4)
    assert s.acceptance == pytest.approx(3 / 8)
    assert s.tokens_per_cycle == pytest.approx(6 / 4)
    with pytest.raises(ValueError, match="wall"):
        ms.summarize(reqs, wall=0.0)
    with pytest.raises(ValueError, match="at least one request"):
        ms.summarize([], wall=1.0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(0.0, 5.0), min_size=1, max_size=8), min_size=1, max_size=5))
def test_summarize_properties(gap_lists):
    reqs, t = [], 0.0
    for gaps in gap_lists:
        times = np.cumsum(gaps) + t
        reqs.append(ms.RequestMetrics.from_times(t, times))
        t = float(times[-1])
    wall = max(t, 1e-9)
    s = ms.summarize(reqs, wall)
    assert s.tokens == sum(len(g) for g in gap_lists)
    assert s.throughput == pytest.approx(s.tokens / wall)
    assert s.ttft_p50 <= s.ttft_p90 <= s.ttft_p99


# ----------------------------------------------------------------- decoders + clock
def test_autoregressive_timestamps_with_fake_clock(pair):
    target, _ = pair
    out = dec.autoregressive(target, "hi", 5, np.random.default_rng(0), clock=ms.TickClock(1.0))
    (m,) = ms.request_metrics(out)
    # readings: start 0, end of prefill 1, token 2; then per token: before and after the
    # forward pass, emission (3 readings)
    assert out.start == 0.0 and out.emit_times[0] == (2.0, 5.0, 8.0, 11.0, 14.0)
    assert m.ttft == 2.0 and m.itls == (3.0,) * 4 and m.total == 14.0 and m.cycles == 5
    assert out.pass_seconds == {"prefill": 1.0, "target": 4.0, "draft": 0.0,
                                "target_passes": 4, "draft_passes": 0}


def test_speculative_timestamps_with_fake_clock(pair):
    target, draft = pair
    out = dec.speculative(target, draft, ["hello", "ciao"], 9, 3, np.random.default_rng(0),
                          clock=ms.TickClock(1.0))
    metrics = ms.request_metrics(out)
    assert out.pass_seconds["draft_passes"] == 3 * max(out.cycles)
    assert out.pass_seconds["target_passes"] == max(out.cycles)
    for m, times, cycles in zip(metrics, out.emit_times, out.cycles):
        assert m.tokens == 9 and len(set(times)) == cycles      # one stamp per cycle
        assert len(m.accepted_lengths) == cycles and sum(m.accepted_lengths) == m.accepted
        assert all(0 <= a <= 3 for a in m.accepted_lengths) and m.characters > 0
        assert m.ttft == times[0] - out.start
    assert out.end == max(max(t) for t in out.emit_times) + 1.0


def test_step_costs_with_constant_clock(pair):
    target, draft = pair
    rep = pr.step_costs(target, draft, (1, 3), prefix=8, repeats=5, clock=ms.TickClock(0.25))
    assert [r["gamma"] for r in rep.rows] == [1, 3]
    for row in rep.rows:
        assert row["c"] == 1.0 and row["g"] == 1.0 and row["target_step_s"] == 0.25
        assert row["c_min"] == row["g_min"] == 1.0 and row["disturbance"] == 0.0
    with pytest.raises(ValueError, match="prefix"):
        pr.step_costs(target, draft, (1,), prefix=70)


def test_compare_and_concurrency_structure(pair):
    target, draft = pair
    settings_ = [pr.Setting("baseline", target), pr.Setting("spec g=2", target, draft, 2)]
    prompts = {"it": ["ciao a tutti", "buona sera"], "en": ["hello there", "good night"]}
    rep = pr.compare(settings_, prompts, max_new_tokens=6, repeats=2, memory=True,
                     clock=ms.TickClock(0.01))
    assert len(rep.raw) == 2 * 2 * 2 and len(rep.rows) == 4
    spec = [r for r in rep.rows if r["setting"] == "spec g=2"]
    assert all(r["speedup"] > 0 and r["peak_memory_mib"] > 0 for r in spec)
    # the speedup's bar (Chapter 8's figures) is the quartiles of the paired ratios
    for r in spec:
        ratios = [s_["throughput"] / b["throughput"] for s_ in rep.raw for b in rep.raw
                  if s_["setting"] == "spec g=2" and b["setting"] == "baseline"
                  and s_["language"] == b["language"] == r["language"]
                  and s_["repeat"] == b["repeat"]]
        assert (r["speedup_q1"], r["speedup"], r["speedup_q3"]) == ms.quartiles(ratios)
        assert r["speedup_iqr"] == r["speedup_q3"] - r["speedup_q1"]
    base = [r for r in rep.rows if r["setting"] == "baseline"]
    # with a tick clock every reading costs 0.01 s: a baseline request of 6 tokens reads
    # the clock at its start, after the prefill, at its first token, 3 times for each
    # further token (around the forward pass and at the emission) and at its end: 19
    # readings; the run adds one reading before its 2 requests: 39 ticks of wall time
    assert all(r["throughput"] == pytest.approx(12 / (39 * 0.01)) for r in base)
    assert all(r["target_pass_s"] == pytest.approx(0.01) for r in rep.rows)
    assert all(r["draft_pass_s"] == pytest.approx(0.01) for r in spec)
    md = report_markdown(rep, metadata=True)
    assert "| language | setting |" in md and "prompt_distribution" in md
    conc = pr.concurrency(target, draft, ["a b c", "d e f", "g h i"], batch_sizes=(1, 3),
                          max_new_tokens=5, repeats=1, clock=ms.TickClock(0.01))
    assert {(r["batch"], r["setting"]) for r in conc.rows} == {
        (1, "baseline"), (3, "baseline"), (1, "speculative gamma=2"), (3, "speculative gamma=2")}
    with pytest.raises(ValueError, match="need at least 3 prompts"):
        pr.concurrency(target, draft, ["a"], batch_sizes=(3,))


def test_setting_validation(pair):
    target, draft = pair
    with pytest.raises(ValueError, match="gamma"):
        pr.Setting("x", target, draft, 0)
    with pytest.raises(ValueError, match="gamma: only meaningful"):
        pr.Setting("x", target, None, 2)
    with pytest.raises(ValueError, match="names must be distinct"):
        pr.compare([pr.Setting("a", target), pr.Setting("a", target)], {"it": ["x"]})


def test_peak_memory_counts_numpy_buffers():
    peak = ms.peak_memory(lambda: np.ones(2**20))        # 8 MiB
    assert 8 * 2**20 <= peak < 9 * 2**20


def test_blas_threads_limited_and_restored():
    before = ms.blas_threads()
    with ms.limit_blas_threads(1):
        assert all(n == 1 for n in ms.blas_threads().values())
    assert ms.blas_threads() == before
    with ms.limit_blas_threads(None):
        assert ms.blas_threads() == before
    with pytest.raises(ValueError, match="threads"):
        with ms.limit_blas_threads(0):
            pass


def test_rotation():
    assert [ms.rotation("abc", r) for r in range(4)] == [
        list("abc"), list("bca"), list("cab"), list("abc")]
    assert ms.rotation([], 3) == []


def test_environment_and_markdown():
    env = ms.environment()
    for key in ("cpu", "cores", "blas", "numpy", "python"):
        assert key in env
    assert markdown_table([{"a": 1, "b": float("nan")}]).endswith("| 1 | - |")


@pytest.mark.skipif(not (nn.MODELS_DIR / "manifest.json").exists(), reason="models/ not built")
def test_run_study_smoke():
    study = run_study(max_new_tokens=4, prompts_per_language=1, repeats=1, gammas=(1,),
                         wide_gammas=(1,), cost_gammas=(1, 2), cost_repeats=2,
                         batch_sizes=(1, 2), concurrency_repeats=1)
    assert len(study.latency.rows) == 4 * 4          # languages x settings
    summary = study.summary()
    for key in ("speedup_spec_g_1_zh", "acceptance_wide_spec_g_1_it", "c_target",
                "g2_target_wide", "g2_target_B2", "c_target_B2", "gain_B2", "seconds"):
        assert key in summary, key
    meta = study.metadata
    assert meta["models"]["target"]["parameters"] == nn.load_manifest()["models"]["target"]["parameters"]
    assert len(meta["models"]["draft"]["weight_sha256"]) == 16
    assert set(meta["prompt_distribution"]) == set(nn.LANGUAGES)
    assert "blas" in meta["hardware"] and study.to_markdown().count("|") > 50
    check = study.model_check.rows
    assert len(check) == 4 * 2 and all(r["predicted_speedup"] > 0 for r in check)
    assert all(r["g_in_situ"] > 0 and r["c_in_situ"] > 0 for r in check)


def test_decoders_accept_one_token_prompts(pair):
    target, draft = pair
    out = dec.speculative(target, draft, ["a", "b"], 7, 2, np.random.default_rng(0))
    assert [len(t) for t in out.tokens] == [7, 7]
    out = dec.autoregressive(target, [[5]], 3, np.random.default_rng(0))
    assert len(out.tokens[0]) == 3


def test_idle_cores_from_cpu_ticks(tmp_path):
    from specdec.measure import idle_cores, usable_cores

    stat = tmp_path / "stat"
    lines = iter(["cpu  100 0 100 800 0 0 0 0 0 0\n",       # before
                  "cpu  150 0 150 900 0 0 0 0 0 0\n"])      # 100 busy, 100 idle jiffies
    stat.write_text(next(lines))
    got = idle_cores(0.5, sleep=lambda s: stat.write_text(next(lines)), path=str(stat))
    assert got == pytest.approx(0.5 * usable_cores())
    # no report: every usable core counts as idle
    assert idle_cores(0.01, sleep=lambda s: None, path=str(tmp_path / "none")) == usable_cores()
    with pytest.raises(ValueError, match="seconds: must be a positive number"):
        idle_cores(0)
    assert 0 <= idle_cores(0.05) <= usable_cores()               # this machine, now
