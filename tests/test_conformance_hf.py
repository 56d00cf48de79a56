"""The conformance kit on Hugging Face transformers, at every release the book tests.

Each release runs in its own virtual environment (tools/hf_envs.py, which .ci/run calls
before the tests); each gets its rows (token step, block cycle, ``generate`` with an
assistant, with prompt lookup, with an assistant of another tokenizer where the release
has it) and their controls through ``python -m specdec.conformance.hf`` with fixed,
small trials: every row must pass except prompt lookup where transformers overshoots
``max_new_tokens``, and every control must fail. A test skips, saying how to create it,
where a release's environment is missing. The bad-input tests need no environment.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import hf_envs  # noqa: E402
import hf_series  # noqa: E402

from specdec.conformance.hf import CONTROL_CASE  # noqa: E402  (imports numpy only)

#: Trials per case: small (a few seconds per release on an idle machine).
TRIALS = {"token": 300, "block": 60, "generate": 15, "lookup": 15, "tokenizers": 15,
          "token:patched": 2000, "block:patched": 1500, "lookup:patched": 200,
          "generate:patched": 600, "tokenizers:patched": 600, "token:ensemble": 2000}
ROWS = ("token", "block", "generate", "lookup", "tokenizers")
#: Controls that must fail at these trials. ``tokenizers:patched`` (600 ``generate``
#: calls, about a minute) runs at the newest release only, in its own test below.
CONTROLS = ("token:patched", "block:patched", "generate:patched", "lookup:patched",
            "token:ensemble")


def _release(text: str) -> tuple[int, int]:
    return tuple(int(x) for x in text.split(".")[:2])


def _run_release(release: str):
    """The rows and controls at one release (its JSON summary), or why it cannot run."""
    python = hf_envs.python_of(release)
    if hf_envs._version(python) != release:
        return f"no environment for transformers {release}: run " \
               f"`python tools/hf_envs.py {release}` (.ci/run does)"
    proc = subprocess.run([str(python), "-m", "specdec.conformance.hf", "--seed", "2026",
                           "--batteries", ",".join(ROWS + CONTROLS),
                           "--trials", ",".join(f"{k}={v}" for k, v in TRIALS.items()),
                           "--false-alarm", "1e-6"], capture_output=True, text=True,
                          env=hf_envs.environ(), cwd=ROOT, timeout=900)
    return proc


def _run_safely(release: str):
    try:
        return _run_release(release)
    except Exception as exc:                    # a timeout fails this release's tests only
        return exc


@pytest.fixture(scope="module")
def every_release(request):
    """The selected releases' runs, two processes at a time (one per core of CI's machine:
    each is one Python process, mostly importing torch and calling small functions)."""
    selected = [r for r in hf_envs.RELEASES
                if any(getattr(item, "callspec", None) is not None
                       and item.callspec.params.get("summary") == r
                       for item in request.session.items)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(selected, pool.map(_run_safely, selected)))


@pytest.fixture(scope="module", params=hf_envs.RELEASES)
def summary(request, every_release):
    proc = every_release[request.param]
    if isinstance(proc, str):
        pytest.skip(proc)
    if isinstance(proc, Exception):
        raise proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_the_other_tokenizer_control_fails_at_the_newest_release():
    """The other-tokenizer row's control (the target's logits doubled inside
    ``_speculative_sampling``) must fail; accepting every draft, the control before, moved
    these decodes by a TV of about 0.15 only and passed at 600 calls."""
    release = hf_envs.RELEASES[-1]
    python = hf_envs.python_of(release)
    if hf_envs._version(python) != release:
        pytest.skip(f"no environment for transformers {release}: run "
                    f"`python tools/hf_envs.py {release}` (.ci/run does)")
    proc = subprocess.run([str(python), "-m", "specdec.conformance.hf", "--seed", "2026",
                           "--batteries", "tokenizers:patched", "--trials",
                           f"tokenizers:patched={TRIALS['tokenizers:patched']}",
                           "--false-alarm", "1e-6"], capture_output=True, text=True,
                          env=hf_envs.environ(), cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    control = json.loads(proc.stdout)["tokenizers:patched"]
    assert control["available"] and not control["passed"], control["markdown"]
    assert control["cases"][0]["tv"] > control["max_detectable_tv"]


#: Series whose assistant drafts greedily while its law is taken as sampled
#: (huggingface/transformers#32867): ``generate`` with an assistant is not exact there.
GREEDY_ASSISTANT = ((4, 41), (4, 45))


def _greedy(release: str) -> bool:
    return GREEDY_ASSISTANT[0] <= _release(release) < GREEDY_ASSISTANT[1]


@pytest.mark.slow
def test_the_function_and_generate_pass_at_every_release(summary):
    """The function passes everywhere; ``generate`` with an assistant everywhere but where
    the assistant drafts greedily (the test below)."""
    assert summary["release"] in hf_envs.RELEASES
    for name in ("token", "block") + (() if _greedy(summary["release"]) else ("generate",)):
        run = summary[name]
        assert run["passed"] and run["exact"] and run["accounting_ok"], run["markdown"]
        assert all(c["trials"] == TRIALS[name] for c in run["cases"])
        assert 0 < run["max_detectable_tv"] < 1


@pytest.mark.slow
def test_the_greedy_assistant_of_4_41_to_4_44_is_not_exact_end_to_end():
    """4.44.2's assistant drafts its arg-max while ``_speculative_sampling`` takes its law as
    the one it sampled from: 200 ``generate`` calls per case show the bias on every case."""
    release = next(r for r in hf_envs.RELEASES if _greedy(r))
    python = hf_envs.python_of(release)
    if hf_envs._version(python) != release:
        pytest.skip(f"no environment for transformers {release}: run "
                    f"`python tools/hf_envs.py {release}` (.ci/run does)")
    proc = subprocess.run([str(python), "-m", "specdec.conformance.hf", "--seed", "2026",
                           "--batteries", "generate", "--trials", "generate=200",
                           "--false-alarm", "1e-6"], capture_output=True, text=True,
                          env=hf_envs.environ(), cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads(proc.stdout)["generate"]
    assert not run["passed"], run["markdown"]
    assert all(not c["passed"] and c["tv_low"] > 0.2 for c in run["cases"]), run["markdown"]


@pytest.mark.slow
def test_every_control_fails(summary):
    """A pass means something: the same adapter on a lossy copy fails on one case."""
    for name in CONTROLS:
        run = summary[name]
        if not run["available"]:
            newer = {"token:ensemble": (5, 14)}
            assert _release(summary["release"]) < newer[name], name
            continue
        assert not run["passed"], run["markdown"]
        assert [c["name"] for c in run["cases"]] == [CONTROL_CASE[name.partition(":")[0]]]


@pytest.mark.slow
def test_prompt_lookup_is_exact_or_overshoots_max_new_tokens(summary):
    """Prompt lookup's law is the target's; where it fails, the cause is the length cap."""
    run = summary["lookup"]
    if run["passed"]:
        assert run["exact"]
        return
    causes = [c for case in run["cases"] for c in case["causes"]]
    assert causes and all("new tokens with max_new_tokens=4" in c for c in causes), causes
    assert _release(summary["release"]) < (5, 14)     # 5.14 crops the kept tokens


@pytest.mark.slow
def test_the_different_tokenizer_row_exists_from_4_46(summary):
    run = summary["tokenizers"]
    assert run["available"] == (_release(summary["release"]) >= (4, 46))
    if run["available"]:
        assert run["passed"], run["markdown"]


@pytest.mark.slow
def test_the_translation_matches_the_release(summary):
    names = summary["signature"]
    release = _release(summary["release"])
    assert ("max_matches" in names) == (release < (4, 40))
    assert ("is_done_candidate" in names) == ((4, 40) <= release < (5, 18))
    assert ("assistant_ensemble_weight" in names) == (release >= (5, 14))


@pytest.mark.slow
def test_transformers_does_not_count_an_accepted_eos(summary):
    """The block battery detects the convention instead of failing on it."""
    assert ("an accepted end-of-sequence is not counted as accepted (detected)"
            in summary["block"]["conventions"])


@pytest.mark.slow
def test_generate_runs_multi_token_cycles(summary):
    """More than one token per target forward pass: the assistant really drafts blocks."""
    assert summary["generate"]["tokens_per_target_pass"] > 1.2


# ------------------------------------------------------------------ bad input, no env


def test_an_unknown_release_is_refused_by_name():
    with pytest.raises(ValueError, match=r"release: must be one of .*4\.37\.2"):
        hf_envs.ensure("4.99.0")


@pytest.mark.parametrize("argv, message", [
    (["--batteries", "token,bogus"], "battery: must be one of token, block"),
    (["--trials", "token=0"], "--trials: token must be positive"),
    (["--resolution", "nothing"], "--resolution: NAME=VALUE pairs"),
])
def test_the_command_line_names_a_bad_argument(argv, message):
    proc = subprocess.run([sys.executable, "-m", "specdec.conformance.hf", *argv],
                          capture_output=True, text=True, cwd=ROOT, env=hf_envs.environ())
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_a_missing_environment_has_no_version(tmp_path):
    assert hf_envs._version(tmp_path / "bin" / "python") is None


def test_a_series_needs_major_and_minor():
    assert hf_series.series_of("4.46.3") == "4.46"
    with pytest.raises(ValueError, match="release: expected MAJOR.MINOR"):
        hf_series.series_of("four")


def test_the_series_table_covers_every_verification_change():
    """The committed table names a tested release in every series whose verification changed."""
    rows = json.loads(hf_series.DATA.read_text())
    tested = {hf_series.series_of(r) for r in hf_envs.RELEASES}
    changed = [r["series"] for r in rows if r["verification"]]
    assert changed == ["4.40", "5.14", "5.18"]
    assert set(changed) <= tested
    assert set(hf_series.NOTES) <= {r["series"] for r in rows}


def test_the_series_table_covers_every_change_of_the_draw():
    """4.41 made the assistant draft greedily and 4.45 undid it: the releases tested cover
    both states, and would not without the 4.44 release."""
    rows = json.loads(hf_series.DATA.read_text())
    assert [r["series"] for r in rows if r["draw"]] == ["4.41", "4.45"]
    assert hf_series.uncovered(rows, hf_envs.RELEASES) == []
    without = [r for r in hf_envs.RELEASES if not r.startswith("4.44.")]
    assert hf_series.uncovered(rows, without) == [
        "series 4.41 changed how drafts are drawn and no release from it on before 4.45 is in "
        "RELEASES"]


def test_a_draw_line_is_told_from_plumbing():
    assert hf_series.touches_draw("x = 1", "self.generation_config.do_sample = False")
    assert hf_series.touches_draw("c.top_k = 50", "c.top_k = None")
    assert not hf_series.touches_draw("self.logits_processor = p", "self.logits_processor = q")
    assert not hf_series.touches_draw("best = np.argmax(v)", "best = int(np.argmax(v))")


def test_a_verification_line_is_told_from_bookkeeping():
    assert hf_series.touches_verification("n_matches = a.sum()", "n_matches = b.sum()")
    assert not hf_series.touches_verification("x = 1", "n_matches = 0")
    assert not hf_series.touches_verification("f(num_new_tokens=n_matches + 1)",
                                              "g(num_new_tokens=n_matches + 1)")
