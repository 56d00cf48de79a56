"""Chapter 8's served-study helpers (specbook.instruments) without an engine: the mixed
stream's order, the repetition measure, the bootstrap interval over prompts, the cost
window, the context of a run, and the sampled protocol against two scripted servers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scripted_server import Script, ScriptedServer

from specdec import client as cl
from specbook import instruments as s


def test_interleave_languages_takes_turns_and_refuses_nothing():
    assert s.interleave_languages({"en": ["a", "b", "c"], "it": ["d"], "zh": ["e", "f"]}) == [
        ("en", "a"), ("it", "d"), ("zh", "e"), ("en", "b"), ("zh", "f"), ("en", "c")]
    with pytest.raises(ValueError, match="prompts"):
        s.interleave_languages({"en": []})


def test_distinct_ngram_share_exact_values():
    assert s.distinct_ngram_share("abcdefgh") == 1.0
    # "the " repeated: 13 4-grams, 4 distinct
    assert s.distinct_ngram_share("the the the the ") == 4 / 13
    assert s.distinct_ngram_share("aaaaaa", 1) == 1 / 6
    assert s.distinct_ngram_share("可可可可", 3) == 3 / 10          # bytes, not characters
    assert math.isnan(s.distinct_ngram_share("abcd", 4))
    with pytest.raises(ValueError, match="n: must be an integer >= 1"):
        s.distinct_ngram_share("abc", 0)


def test_ratio_interval_point_is_the_stream_ratio_and_covers_it():
    bt, bk = np.array([1.0, 2.0, 1.0, 4.0]), np.array([10.0, 20.0, 10.0, 40.0])
    st_, sk = np.array([0.5, 1.0, 1.0, 2.0]), bk
    out = s.ratio_interval(bt, bk, st_, sk, seed=1)
    # 80 tokens in 8 s against 80 tokens in 4.5 s
    assert out["speedup"] == pytest.approx(8 / 4.5) and out["prompts"] == 4
    assert out["low"] <= out["speedup"] <= out["high"] and out["confidence"] == 0.95
    same = s.ratio_interval(bt, bk, bt / 2, bk, seed=1)        # every prompt twice as fast
    assert same["speedup"] == same["low"] == same["high"] == pytest.approx(2.0)


def test_ratio_interval_is_reproducible_and_narrows_with_prompts():
    rng = np.random.default_rng(5)
    widths = []
    for n in (20, 320):
        bt = rng.uniform(0.2, 0.4, n)
        st_ = bt / 1.3 * rng.uniform(0.7, 1.3, n)
        k = np.full(n, 32.0)
        a = s.ratio_interval(bt, k, st_, k, seed=3)
        assert a == s.ratio_interval(bt, k, st_, k, seed=3)
        assert a["low"] < 1.3 < a["high"] or abs(a["speedup"] - 1.3) < 0.1
        widths.append(a["high"] - a["low"])
    assert widths[1] < widths[0] / 2


def test_ratio_interval_refuses_bad_input():
    one = np.ones(3)
    with pytest.raises(ValueError, match="spec_time: must be one-dimensional"):
        s.ratio_interval(one, one, np.ones(4), one, seed=0)
    with pytest.raises(ValueError, match="base_tokens: every value must be finite and positive"):
        s.ratio_interval(one, np.array([1.0, 0.0, 1.0]), one, one, seed=0)
    with pytest.raises(ValueError, match="at least 2 prompts"):
        s.ratio_interval([1.0], [1.0], [1.0], [1.0], seed=0)
    with pytest.raises(ValueError, match="confidence"):
        s.ratio_interval(one, one, one, one, seed=0, confidence=1.5)


def test_memory_bandwidth_shape_and_refusals():
    out = s.memory_bandwidth(megabytes=16, repeats=2)
    assert out["bytes"] == 16 * 2**20 and out["repeats"] == 2
    for key in ("read_gbs", "read_gbs_median", "copy_gbs", "copy_gbs_median"):
        assert out[key] > 0
    assert out["read_gbs"] >= out["read_gbs_median"] and out["copy_gbs"] >= out["copy_gbs_median"]
    with pytest.raises(ValueError, match="megabytes: must be an integer >= 16"):
        s.memory_bandwidth(megabytes=8)
    with pytest.raises(ValueError, match="repeats: must be an integer >= 1"):
        s.memory_bandwidth(repeats=0)


def test_cpu_model_and_server_context(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Test CPU 9000\n")
    assert s.cpu_model(info) == "Test CPU 9000"
    assert s.cpu_model(tmp_path / "absent") == "not reported"
    plain = s.server_context(["-m", "t.gguf", "-t", "1", "-tb", "1", "-np", "4", "-c", "512"])
    assert plain == {"slots": 4, "context": 512, "threads": 1, "batch_threads": 1,
                     "cache_k": "f16", "cache_v": "f16", "flash_attention": "auto",
                     "draft": None, "gamma": None}
    spec = s.server_context(["-m", "t.gguf", "-md", "/x/draft.gguf", "--spec-draft-n-max", "4",
                             "-ctk", "f32", "-ctv", "f32", "-fa", "off"])
    assert spec["draft"] == "draft.gguf" and spec["gamma"] == 4
    assert (spec["cache_k"], spec["cache_v"], spec["flash_attention"]) == ("f32", "f32", "off")


def _timings(p1, pv, step, draft, gamma=2, cpu=None):
    """Pass rows (the target's, 1 to ``gamma + 1`` positions) and step rows (target and
    draft) of three repeats; ``cpu``: each timing's CPU time as a share of its wall time
    (None: no CPU times, as on a system that does not report them)."""
    passes, steps = [], []
    for r, jitter in enumerate((1.0, 1.2, 1.1)):
        for k, ms in ((1, p1), (2, (p1 + pv) / 2), (gamma + 1, pv)):
            passes.append({"server": "target", "repeat": r, "positions": k, "ms": ms * jitter,
                           "cpu_ms": None if cpu is None else ms * jitter * cpu})
        for server, ms in (("target", step), ("draft", draft)):
            steps.append({"server": server, "repeat": r, "steps": 16, "ms": ms * jitter,
                          "cpu_ms": None if cpu is None else ms * jitter * cpu})
    return passes, steps


def test_window_costs_use_medians_of_wall_time_without_cpu_times():
    # passes of 10 and 14 ms, a step of 8 ms inside a generation (the request's fixed
    # work, 2 ms, is in the passes only), a draft step of 0.8 ms
    passes, steps = _timings(10.0, 14.0, 8.0, 0.8)
    w = s.window_costs(passes, steps, 2)
    assert s.COST_ESTIMATOR == "median CPU time" and w["clock"] == "wall"
    assert w["target_ms"] == pytest.approx(8.8) and w["draft_ms"] == pytest.approx(0.88)
    assert w["verify_ms"] == pytest.approx(8.8 + 15.4 - 11.0)       # a step plus P(3) - P(1)
    assert w["c"] == pytest.approx(0.1) and w["g"] == pytest.approx(13.2 / 8.8)
    assert (w["c_wall"], w["g_wall"]) == (w["c"], w["g"])
    assert w["g_by_gamma"] == pytest.approx([(8.8 + 2.2) / 8.8, 13.2 / 8.8])
    assert w["disturbance"] == pytest.approx(0.1) and math.isnan(w["waiting"])
    # the draft's tenth-of-a-millisecond step may spread widely: not a disturbance
    noisy = [dict(x, ms=x["ms"] * (1 + 4 * x["repeat"])) if x["server"] == "draft" else x
             for x in steps]
    assert s.window_costs(passes, noisy, 2)["disturbance"] == pytest.approx(0.1)
    with pytest.raises(RuntimeError, match="no pass of 4 positions"):
        s.window_costs(passes, steps, 3)
    with pytest.raises(RuntimeError, match="no decoding step measured on draft"):
        s.window_costs(passes, [x for x in steps if x["server"] == "target"], 2)


def test_window_costs_take_cpu_time_when_every_timing_has_it():
    passes, steps = _timings(10.0, 14.0, 8.0, 0.8)
    for r in passes:                    # preemption: the long pass waited half its time
        r["cpu_ms"] = r["ms"] / 2.0 if r["positions"] == 3 else r["ms"]
    for r in steps:
        r["cpu_ms"] = r["ms"]
    w = s.window_costs(passes, steps, 2)
    assert w["clock"] == "cpu" and w["target_ms"] == pytest.approx(8.8)
    assert w["verify_ms"] == pytest.approx(8.8 + 7.7 - 11.0)
    assert w["verify_wall_ms"] == pytest.approx(8.8 + 15.4 - 11.0)
    assert w["g"] == pytest.approx(5.5 / 8.8) and w["g_wall"] == pytest.approx(13.2 / 8.8)
    assert w["c"] == pytest.approx(0.1) and w["c_wall"] == pytest.approx(0.1)
    assert w["waiting"] == pytest.approx(1 - (8.8 + 5.5 + 0.88) / (8.8 + 13.2 + 0.88))
    steps[0]["cpu_ms"] = None           # one timing without its CPU time: wall time for all
    assert s.window_costs(passes, steps, 2)["clock"] == "wall"
    w = s.window_costs(*_timings(10.0, 14.0, 8.0, 0.8, cpu=1.0), 2)
    assert w["clock"] == "cpu" and w["waiting"] == pytest.approx(0.0)


def test_window_costs_refuse_costs_that_are_not_positive_and_bad_rows():
    # a one-position pass slower than a five-position one by more than a step: the
    # verification t + P(5) - P(1) would be negative
    passes, steps = _timings(14.0, 10.0, 2.0, 0.2)
    with pytest.raises(RuntimeError, match=r"wall clock .* P\(1\) = 15\.4 ms, P\(3\) = 11 "
                                           r"ms.* every cost must be positive"):
        s.window_costs(passes, steps, 2)
    passes, steps = _timings(10.0, 14.0, 8.0, 0.8)
    zero = [dict(x, ms=0.0) if x["server"] == "draft" else x for x in steps]
    with pytest.raises(RuntimeError, match="the draft's 0 ms"):
        s.window_costs(passes, zero, 2)
    for args, match in (((None, steps), "passes: must be a list of rows of pass_times"),
                        ((passes, None), "steps: must be a list of rows of step_times"),
                        ((steps, passes), "passes: must be a list of rows of pass_times")):
        with pytest.raises(TypeError, match=match):
            s.window_costs(*args, 2)


def test_step_times_name_a_server_without_llama_cpp_timings():
    """A server that reports no ``predicted_ms`` (the scripted one, like most that are not
    llama.cpp) cannot be timed step by step: the error says which field and which server."""
    with ScriptedServer(Script(delays=(0.0,), texts=("a",), tokens=(1,))) as url:
        with pytest.raises(RuntimeError, match="'plain' reported no predicted_ms"):
            s.step_times({"plain": cl.Endpoint(url)}, "abc", 4, 1)


def test_thread_times_count_running_and_waiting_apart():
    import os
    import time

    pid = os.getpid()
    before = s.thread_times(pid)
    if before is None:
        pytest.skip("this system does not report thread times (/proc/PID/task/TID/schedstat)")
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.05:         # busy for 50 ms of wall time
        pass
    mid = s.thread_times(pid)
    wall = 1e3 * (time.perf_counter() - t0)
    ran, waited = mid[0] - before[0], mid[1] - before[1]
    # busy, the thread either ran or waited for a processor (on a loaded machine, the
    # wait takes a share); the two add up to the wall time
    assert ran > 0 and waited >= 0 and abs(ran + waited - wall) < 15.0
    time.sleep(0.05)                               # 50 ms asleep: it neither ran nor waited
    after = s.thread_times(pid)
    assert after[0] - mid[0] < 10.0 and after[1] - mid[1] < 25.0
    assert s.thread_times(2 ** 22 + 12345) is None            # no such process


def test_predicted_speedup_exact_and_refusals():
    assert s.predicted_speedup(0.5, 0.1, 1.4, 4) == pytest.approx(3.0 / 1.8)
    assert s.predicted_speedup(0.0, 0.25, 1.0, 4) == pytest.approx(0.5)
    for bad, match in (((1.5, 0.1, 1.0, 4), "acceptance"), ((0.5, 0.0, 1.0, 4), "c, g"),
                       ((0.5, 0.1, 1.0, 0), "gamma")):
        with pytest.raises(ValueError, match=match):
            s.predicted_speedup(*bad)


def test_predicted_speedup_per_request_exact_and_refusals():
    # E = 1 + 4 * 0.5 = 3, cycle 1.8 steps: decode-only 3 / 1.8
    req = dict(step_ms=10.0, ttft_ms=50.0, spec_ttft_ms=60.0, tokens=11)
    # plain: 50 + 10 * 10 = 150 ms; speculative: 60 + 10 * 10 * 1.8 / 3 = 120 ms
    assert s.predicted_speedup(0.5, 0.1, 1.4, 4, **req) == pytest.approx(150 / 120)
    # one token: only the times to first token count
    one = dict(req, tokens=1)
    assert s.predicted_speedup(0.5, 0.1, 1.4, 4, **one) == pytest.approx(50 / 60)
    # long requests tend to the per-step model
    long = dict(req, tokens=10 ** 7)
    assert s.predicted_speedup(0.5, 0.1, 1.4, 4, **long) == pytest.approx(3 / 1.8, rel=1e-4)
    with pytest.raises(ValueError, match="give all or none .*only step_ms, tokens"):
        s.predicted_speedup(0.5, 0.1, 1.4, 4, step_ms=10.0, tokens=5)
    for name, bad in (("step_ms", 0.0), ("ttft_ms", float("nan")), ("spec_ttft_ms", -1.0)):
        with pytest.raises(ValueError, match=f"{name}: must be a positive number"):
            s.predicted_speedup(0.5, 0.1, 1.4, 4, **dict(req, **{name: bad}))
    with pytest.raises(ValueError, match="tokens"):
        s.predicted_speedup(0.5, 0.1, 1.4, 4, **dict(req, tokens=0))


def test_first_token_times_one_token_per_server_in_rotating_order():
    slow = Script(delays=(0.03,), texts=("a",), tokens=(1,), timings={})
    fast = Script(delays=(0.0,), texts=("a",), tokens=(1,), timings={})
    with ScriptedServer(slow) as a, ScriptedServer(fast) as b:
        eps = {"baseline": cl.Endpoint(a), "speculative": cl.Endpoint(b)}
        first = s.first_token_times(eps, "p", 1.0, 7, order=0)
        second = s.first_token_times(eps, "p", 1.0, 7, order=1)
    assert [x["setting"] for x in first] == ["baseline", "speculative"]
    assert [x["setting"] for x in second] == ["speculative", "baseline"]
    ms = {x["setting"]: x["ms"] for x in first}
    assert ms["baseline"] >= 30 and ms["speculative"] < ms["baseline"]
    assert [b_["max_tokens"] for b_ in slow.bodies] == [1, 1]
    assert [b_["seed"] for b_ in fast.bodies] == [7, 7]


@settings(max_examples=30, deadline=None)
@given(st.floats(0, 1), st.floats(0.01, 2), st.floats(0.5, 6), st.integers(1, 8))
def test_predicted_speedup_grows_with_acceptance(a, c, g, gamma):
    lo, hi = s.predicted_speedup(a / 2, c, g, gamma), s.predicted_speedup(a, c, g, gamma)
    assert lo <= hi and hi <= (1 + gamma) / (gamma * c + g) + 1e-12


def test_sampled_protocol_against_two_scripted_servers():
    slow = Script(delays=(0.02, 0.02, 0.02), texts=("abcd", "efg", "h"), tokens=(2, 1, 1),
                  timings={})
    fast = Script(delays=(0.01, 0.005, 0.005), texts=("abcd", "efg", "h"), tokens=(2, 1, 1),
                  timings={"draft_n": 4, "draft_n_accepted": 3})
    windows = []
    with ScriptedServer(slow) as base_url, ScriptedServer(fast) as spec_url:
        eps = {"baseline": cl.Endpoint(base_url), "speculative": cl.Endpoint(spec_url)}
        out = s.sampled_protocol(eps, {"en": ["p0", "p1"], "it": ["q0", "q1", "q2"]},
                                 baseline="baseline", repeats=3, max_tokens=4,
                                 temperature=1.0, seed=10,
                                 window=lambda r, j: windows.append((r, j)) or {"r": r, "j": j},
                                 window_parts=2)
    assert windows == [(r, j) for r in range(3) for j in range(2)]
    assert out["windows"] == [[{"r": r, "j": 0}, {"r": r, "j": 1}] for r in range(3)]
    assert out["stream"] == ["en", "it", "en", "it", "it"]
    # request by request, each to both servers in an order that rotates with the request
    assert [(x["prompt"], x["setting"]) for x in out["requests"][:4]] == [
        (0, "baseline"), (0, "speculative"), (1, "speculative"), (1, "baseline")]
    assert all(st_["wall"] == pytest.approx(sum(x["seconds"] for x in out["requests"]
                                                if x["repeat"] == st_["repeat"]
                                                and x["setting"] == st_["setting"]))
               for st_ in out["streams"])
    assert len(out["requests"]) == 3 * 2 * 5
    seeds = [b["seed"] for b in slow.bodies]
    assert seeds == [10, 11, 12, 13, 14] * 3 and [b["seed"] for b in fast.bodies] == seeds
    assert {b["prompt"] for b in slow.bodies} == {"p0", "p1", "q0", "q1", "q2"}
    res = out["speedup"]["speculative"]
    assert set(res) == {"mixed", "en", "it"} and res["mixed"]["prompts"] == 5
    assert res["en"]["prompts"] == 2 and res["it"]["prompts"] == 3
    assert res["mixed"]["speedup"] > 1.3 and res["mixed"]["acceptance"] == 0.75
    assert len(res["mixed"]["per_repeat"]) == 3 and all(x > 1 for x in res["mixed"]["per_repeat"])
    assert out["identical"]["speculative"] == {"identical": 15, "compared": 15}
    assert out["distinct_4gram_share"]["mixed"] == 1.0
    with pytest.raises(ValueError, match="baseline"):
        s.sampled_protocol(eps, {"en": ["p"]}, baseline="plain", repeats=1, max_tokens=4,
                           temperature=1.0, seed=0)
    with pytest.raises(ValueError, match="window_parts: at most the 1 requests"):
        s.sampled_protocol(eps, {"en": ["p"]}, baseline="baseline", repeats=1, max_tokens=4,
                           temperature=1.0, seed=0, window=lambda r, j: None, window_parts=2)


def test_pass_times_positions_are_checked_before_any_request():
    eps = {"target": cl.Endpoint("http://127.0.0.1:9"), "draft": cl.Endpoint("http://127.0.0.1:9")}
    with pytest.raises(TypeError, match="positions: must be a sequence of integers"):
        s.pass_times(eps, "abc", "defgh", {"target": (1, 2)}, 1)
    with pytest.raises(ValueError, match="positions: must hold at least one"):
        s.pass_times(eps, "abc", "defgh", (), 1)
    with pytest.raises(ValueError, match="continuation: needs at least 6"):
        s.pass_times(eps, "abc", "defgh", (1, 6), 1)


def test_scale_study_and_protocol_refuse_bad_windows_before_serving():
    from specbook.served import run_scale_study

    with pytest.raises(ValueError, match="cost_repeats: must be an integer from 1 to the 8"):
        run_scale_study(languages=("en", "it"), prompts_per_language=4, cost_repeats=9)
    with pytest.raises(ValueError, match="cost_repeats"):
        run_scale_study(cost_repeats=0)
    eps = {"baseline": cl.Endpoint("http://127.0.0.1:9")}
    with pytest.raises(ValueError, match="prompts: must hold at least one prompt"):
        s.sampled_protocol(eps, {}, baseline="baseline", repeats=1, max_tokens=4,
                           temperature=1.0, seed=0)
