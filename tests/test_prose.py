import json
import re

import numpy as np
import pytest

from specbook.prose import glue_value, plain, sci


def test_plain_converts_numpy_scalars():
    assert type(plain(np.float64(0.25))) is float
    assert type(plain(np.int64(3))) is int
    assert type(plain(np.array(2.0))) is float
    assert plain("x") == "x"


@pytest.mark.parametrize(
    "x, digits, text",
    [(1e-9, 1, "10⁻⁹"), (3.2e-10, 1, "3.2 × 10⁻¹⁰"), (0.0, 1, "0"), (2.5e3, 2, "2.50 × 10³"),
     (-1e-4, 1, "−10⁻⁴")],
)
def test_sci(x, digits, text):
    assert sci(x, digits) == text


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "1e-9"])
def test_sci_rejects_non_finite(bad):
    with pytest.raises(ValueError, match="x: must be a finite real number"):
        sci(bad)


def test_glue_value_rejects_bad_key():
    with pytest.raises(ValueError, match="key: must be a non-empty string"):
        glue_value("two words", 1.0)


def test_glue_value_returns_plain_value():
    pytest.importorskip("myst_nb")
    assert type(glue_value("k", np.float64(0.5))) is float


# ------------------------------------------- generated sentences against glued values (slow)
#
# Every sentence of a chapter that compares or explains a computed number is chosen by
# code from the data. These tests rebuild the chapters at several (seed, trials) (the
# builds of ``chapters_at_other_seeds`` in tests/conftest.py, shared with the pipeline's
# multi-seed test) and check each generated sentence against the values glued next to
# it: ranges against their members, orderings against the numbers ordered, words such as
# "fewer", "rescues" or "contains 0" against the comparison they state.


def _glued(built, stem):
    [name] = [n for n in built.names if n.startswith(stem)]
    return built.glued(name)


def _ranked(text):
    """'a (3.110) > b (3.059)' -> [('a', 3.110), ('b', 3.059)]."""
    return [(m.group(1).strip(), float(m.group(2))) for m in re.finditer(r"([a-z ]+?) \(([0-9.]+)\)", text)]


@pytest.mark.slow
def test_built_chapters_glue_their_sentences(chapters_at_other_seeds):
    built = chapters_at_other_seeds
    assert built.proc.returncode == 0, built.proc.stdout + built.proc.stderr
    for stem in ("04", "05", "06", "07"):
        g = _glued(built, stem)
        assert g, stem
        raw = [k for k, v in g.items() if isinstance(v, str) and re.search(r"\bnp\.\w+\(", v)]
        assert not raw, f"{stem}: glued numpy reprs (glue plain Python values): {raw}"


@pytest.mark.slow
def test_chapter_4_sentences(chapters_at_other_seeds):
    g = _glued(chapters_at_other_seeds, "04")
    assert "at most below" not in g["ch4_miss_bound"]
    assert g["ch4_miss_bound"].startswith("below") == str(g["ch4_miss"]).startswith("below")
    trials = chapters_at_other_seeds.trials
    asserted = "asserts that the fallback sampler is detected" in g["ch4_detect_sentence"]
    assert asserted == (trials >= g["ch4_n_min"])
    assert f"{trials:,}" in g["ch4_detect_sentence"]


@pytest.mark.slow
def test_chapter_5_range_is_the_range_of_the_table(chapters_at_other_seeds):
    g = _glued(chapters_at_other_seeds, "05")
    flawed = list(g["ch5_tv_flawed"].values())            # the table's flawed rows
    assert len(flawed) >= 2
    assert all(g[f"ch5_tv_{name}"] == value for name, value in g["ch5_tv_flawed"].items())
    assert g["ch5_tv_flawed_min"] == min(flawed) and g["ch5_tv_flawed_max"] == max(flawed)


@pytest.mark.slow
def test_chapter_6_sentences(chapters_at_other_seeds):
    g = _glued(chapters_at_other_seeds, "06")
    # "at alpha = 0 every draft is a loss ... even the cheapest draft reaches only S"
    assert g["ch6_alpha0_s1"] <= g["ch6_alpha0_dense_best"] < 1
    assert g["ch6_alpha0_dense_best"] == pytest.approx(1 / (1 + g["ch6_alpha0_dense_c"]))
    assert g["ch6_runner_up"] == g["ch6_best_low"] - 1


@pytest.mark.slow
def test_chapter_7_sentences(chapters_at_other_seeds):
    g = _glued(chapters_at_other_seeds, "07")
    names = ("constant", "bursty", "alternating")
    # the rankings are orderings of the glued E(6) values, carried and fresh
    for key, prefix in (("ch7_rank_carried", "ch7_E6_"), ("ch7_rank_fresh", "ch7_E6_fresh_")):
        ranked = _ranked(g[key])
        assert sorted(n for n, _ in ranked) == sorted(names)
        values = [g[prefix + n] for n, _ in ranked]
        assert values == sorted(values, reverse=True)
        assert all(f"{g[prefix + n]:.3f}" == f"{v:.3f}" for n, v in ranked)
    carried = [n for n, _ in _ranked(g["ch7_rank_carried"])]
    fresh = [n for n, _ in _ranked(g["ch7_rank_fresh"])]
    assert ("other way round" in g["ch7_rank_sentence"]) == (carried == fresh[::-1])
    assert g["ch7_bursty_vs_constant"] == ("fewer" if g["ch7_E6_bursty"] < g["ch7_E6_constant"] else "more")
    assert g["ch7_fresh_bursty_vs_constant"] == (
        "more" if g["ch7_E6_fresh_bursty"] > g["ch7_E6_fresh_constant"] else "fewer")
    # best draft lengths listed in the claim are the glued ones
    for n in names:
        assert f"{g[f'ch7_best_{n}']} ({n})" in g["ch7_best_list"]
    # a draft length "rescues" the slow pass exactly when its speedup exceeds 1
    rescued = g["ch7_best_scaled_speedup"] > 1
    assert ("beats plain decoding" in g["ch7_rescue_sentence"]
            and "nothing" not in g["ch7_rescue_sentence"]) == rescued
    assert ("but a short draft does" in g["ch7_rescue_claim"]) == rescued
    assert g["ch7_ratio_g3"] < 1 and g["ch7_best_g3_speedup"] < 1
    # the simulation sentence quotes the glued worst z
    assert f"{g['ch7_sim_z_max']:.1f} standard errors" in g["ch7_sim_sentence"]
    # the real models' verdict follows the interval
    low, high, bursty = g["ch7_real_low"], g["ch7_real_high"], g["ch7_corr_bursty"]
    sentence = g["ch7_real_sentence"]
    assert low <= g["ch7_real_r"] <= high
    assert ("contains 0" in sentence) == (low <= 0 <= high)
    assert ("excludes the bursty" in sentence) == (low <= 0 <= high and not low <= bursty <= high)
    assert ("positively correlated" in sentence) == (low > 0)
    assert ("negatively correlated" in sentence) == (high < 0)


@pytest.mark.slow
def test_chapter_8_simulation_sentences(whole_book):
    """Section 8.3's simulated sentences (chapter 8 is built once, in the whole-book build)."""
    assert whole_book.first.returncode == 0, whole_book.first.stdout + whole_book.first.stderr
    [nb] = sorted((whole_book.root / "book" / "chapters").glob("08-*.ipynb"))
    from conftest import glued_values

    g = glued_values(json.loads(nb.read_text()))
    tops = [g[f"ch8_sim_tuned_max_{n}"] for n in ("constant", "bursty", "alternating")]
    assert f"within {max(tops) - min(tops):.2f} of each other" in g["ch8_sim_converge"]
    long_runs = "run long sequences of one-token cycles" in g["ch8_sim_hard_sentence"]
    assert long_runs == (g["ch8_sim_ones_slow"] > g["ch8_sim_ones_median"])
    assert f"{g['ch8_sim_ones_slow']:.0%}" in g["ch8_sim_hard_sentence"]


@pytest.mark.slow
def test_appendix_f_memory_bound_sentences(whole_book):
    """Appendix F's memory-bound section: its sentences name the values glued beside them."""
    assert whole_book.first.returncode == 0, whole_book.first.stdout + whole_book.first.stderr
    [nb] = sorted((whole_book.root / "book" / "chapters").glob("a6-*.ipynb"))
    from conftest import glued_values

    g = glued_values(json.loads(nb.read_text()))
    assert g["cpu_big_g_curve"].split("g = ")[1].split(" steps")[0].endswith(f"{g['cpu_big_g']:.2f}")
    assert f"{g['cpu_big_conc_last']:.2f}× with {g['cpu_big_conc_n']} requests" in g["cpu_conclusion"]
    fell = g["cpu_big_conc_last"] < g["cpu_big_conc_first"]
    if "fall larger" in g["cpu_big_conc_change"]:
        assert fell
    if "rise larger" in g["cpu_big_conc_change"]:
        assert not fell
    verdict = g["cpu_big_verdict"]        # against break-even, by the interval over prompts
    assert "interval over prompts" in verdict and "1.5×" not in verdict
    assert sum(w in verdict for w in ("faster than plain", "slower than plain", "spans 1")) == 1


@pytest.mark.slow
def test_appendix_a4_sentences(chapters_at_other_seeds):
    g = _glued(chapters_at_other_seeds, "a4")
    # "in numpy on this machine the draft's pass costs more/less than its share of the
    # parameters, and scoring gamma + 1 positions costs more/less than scoring one"
    share, block = g["a4_real_cost_reason"].split(", and ")
    assert share.endswith(("more" if g["a4_real_c_meas"] > g["a4_real_c"] else "less")
                          + " than its share of the parameters")
    assert block.endswith(("more" if g["a4_real_g_meas"] > 1 else "less") + " than scoring one")
    # the count after the target's own text against the count after held-out text
    gap, se, verdict = g["a4_own_gap"], g["a4_own_gap_se"], g["a4_own_verdict"]
    assert gap == pytest.approx(g["a4_own_mean"] - g["a4_real_token"])
    assert g["a4_own_E"] == pytest.approx(1 + g["a4_own_mean"])
    assert g["a4_real_E"] == pytest.approx(1 + g["a4_real_token"])
    if abs(gap) <= 2 * se:
        assert verdict.startswith("not distinguishable")
    else:
        assert verdict.startswith("fewer" if gap < 0 else "more")
        assert ("come out lower" if gap < 0 else "come out higher") in verdict
    assert f"{abs(gap):.3f}" in verdict and f"{se:.3f}" in verdict
    # a pass states the largest error it could have missed, in the book's notation
    assert 0 < g["a4_kit_detectable"] < 1 and g["a4_kit_false_alarm"] == "10⁻⁶"


@pytest.mark.slow
def test_sentences_at_other_seeds_are_at_most_45_words(chapters_at_other_seeds):
    """The rendered-sentence rule (tests/test_publishing.py checks every page of the
    seed-2026 book) at three more (seed, trials): each executed chapter's prose with its
    glued values in place, read as the page would render it (specbook.sentences)."""
    from specbook import sentences as S

    built = chapters_at_other_seeds
    assert built.proc.returncode == 0, built.proc.stdout + built.proc.stderr
    titles = S.section_titles(p.read_text(encoding="utf-8")
                              for p in sorted((built.root / "notebooks").glob("*.md")))
    found = []
    for name in built.names:
        prose = S.notebook_prose(built.notebook(name), built.glued(name), titles)
        found += [f"{name} ({n} words): {s}" for n, s in S.long_sentences(prose)]
    assert not found, (f"seed {built.seed}, trials {built.trials}: sentences over "
                       f"{S.MAX_WORDS} words:\n" + "\n".join(found))
