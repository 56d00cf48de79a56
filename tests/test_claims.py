"""Tests for specbook.claims: every claim recomputes, and check() reports clearly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specbook import claims
from specbook.claims import CLAIMS, RELATIONS, Claim, article_run_frequencies, check, claim, ledger


def test_every_claim_holds():
    rows = ledger()
    assert len(rows) == len(CLAIMS)
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad


def test_table_is_well_formed():
    keys = [c.key for c in CLAIMS]
    assert len(keys) == len(set(keys))
    for c in CLAIMS:
        assert isinstance(c, Claim)
        assert c.key.startswith(f"s{c.section}_")
        assert 1 <= c.section <= 8 and c.text and c.tolerance >= 0
        assert c.relation in RELATIONS and callable(c.recompute)
        assert isinstance(c.stated, (int, float)) and math.isfinite(c.stated)
    sections = [c.section for c in CLAIMS]
    assert sections == sorted(sections)
    assert {2, 3, 4} <= set(sections)


@pytest.mark.parametrize(
    "key, value",
    [
        ("s2_contrib_A", 0.20), ("s2_contrib_B", 0.30), ("s2_contrib_C", 0.20),
        ("s2_accept_B", 0.60), ("s2_accepted_mass", 0.70), ("s2_missing_mass", 0.30),
        ("s3_wrong_A", 0.35), ("s3_wrong_B", 0.39), ("s3_wrong_C", 0.26), ("s3_tv", 0.15),
        ("s4_trials", 200_000), ("s4_seed", 20260923), ("s4_se_A", 0.00112),
        ("s4_correct_obs_A", 0.50009), ("s4_correct_obs_B", 0.29844), ("s4_correct_obs_C", 0.20147),
        ("s4_wrong_obs_A", 0.35005), ("s4_wrong_obs_B", 0.38831), ("s4_wrong_obs_C", 0.26164),
    ],
)
def test_article_numbers_are_in_the_table(key, value):
    c = claim(key)
    assert c.stated == value
    recomputed = c.recompute()
    assert check(key, recomputed) == recomputed


def test_article_table_frequencies_round_exactly():
    f = article_run_frequencies()
    assert f["correct"].round(5).tolist() == [0.50009, 0.29844, 0.20147]
    assert f["fallback_p"].round(5).tolist() == [0.35005, 0.38831, 0.26164]
    assert np.max(np.abs(f["correct"] - [0.5, 0.3, 0.2])) < 0.0016


def test_check_failure_message():
    with pytest.raises(AssertionError) as err:
        check("s4_se_A", 0.0012)
    msg = str(err.value)
    assert msg.startswith("claim s4_se_A (section 4: ") and "stated 0.00112 +/- 5e-06, got 0.0012" in msg


def test_lt_relation():
    c = claim("s4_max_dev_correct")
    assert c.relation == "lt"
    assert check("s4_max_dev_correct", 0.00156) == 0.00156
    with pytest.raises(AssertionError, match=r"stated < 0.0016, got 0.0016"):
        check("s4_max_dev_correct", 0.0016)
    assert not c.holds(math.nan)


def test_unknown_key_suggests():
    with pytest.raises(KeyError, match="did you mean s3_tv"):
        claim("s3_tvv")
    with pytest.raises(KeyError, match="unknown claim"):
        check("nothing_like_it", 1.0)


def test_ledger_reports_broken_recompute(monkeypatch):
    def broken():
        raise RuntimeError("boom")

    extra = Claim("s9_broken", 8, "A claim whose recompute fails.", 1.0, 0.0, broken)
    monkeypatch.setattr(claims, "CLAIMS", claims.CLAIMS + (extra,))
    row = ledger()[-1]
    assert row["key"] == "s9_broken" and row["ok"] is False and "boom" in row["error"]
    assert math.isnan(row["recomputed"])
