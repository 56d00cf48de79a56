"""specbook.provenance: the run records at the top and the bottom of every chapter."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess

import pytest

from specdec import __version__
from specbook import provenance


def test_run_parameters_markdown_is_a_note_with_seed_and_trials():
    text = provenance.run_parameters_markdown(seed=2026, trials=200_000)
    assert text.startswith(":::{note}") and text.endswith(":::")
    assert "seed = `2026`" in text and "trials = `200,000`" in text
    assert "trials" not in provenance.run_parameters_markdown(seed=3)


def test_collect_provenance_records_parameters_versions_and_times():
    record = provenance.collect_provenance(seed=5, trials=1000, started=100.0, now=161.25)
    assert (record.seed, record.trials) == (5, 1000)
    assert record.specdec_version == __version__
    assert record.duration == pytest.approx(61.25)
    assert record.started == "1970-01-01T00:01:40Z"
    assert record.finished == "1970-01-01T00:02:41Z"
    assert set(provenance.KEY_PACKAGES) <= set(record.packages)
    assert record.python.split()[0].count(".") == 2
    json.dumps(record.as_dict())  # serialisable as the notebook's JSON output


def test_started_may_be_an_aware_datetime():
    start = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    record = provenance.collect_provenance(seed=0, started=start, now=start.timestamp() + 3)
    assert record.started == "2026-01-02T03:04:05Z" and record.duration == pytest.approx(3)


@pytest.mark.parametrize("kwargs, message", [
    ({"seed": -1}, "seed: must be a non-negative integer"),
    ({"seed": 1.5}, "seed: must be a non-negative integer"),
    ({"seed": True}, "seed: must be a non-negative integer"),
    ({"seed": 1, "trials": 0}, "trials: must be an integer >= 1"),
    ({"seed": 1, "started": float("nan")}, "started: must be a finite"),
    ({"seed": 1, "started": "yesterday"}, "started: expected seconds"),
    ({"seed": 1, "started": dt.datetime(2026, 1, 1)}, "started: a datetime must be timezone-aware"),
    ({"seed": 1, "started": 10.0, "now": 5.0}, "started: later than the end"),
])
def test_bad_input_raises_value_error_naming_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        provenance.collect_provenance(**kwargs)


def test_git_state_of_this_repository_matches_git(tmp_path):
    state = provenance.git_state()
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=provenance.__file__.rsplit("/", 2)[0])
    if head.returncode != 0:
        pytest.skip("the library is not inside a git work tree here")
    assert state.commit == head.stdout.strip()
    assert state.dirty in (True, False)
    assert state.short.startswith(state.commit[:12])


def test_git_state_outside_a_work_tree_is_unknown_not_an_error(tmp_path):
    state = provenance.git_state(tmp_path)
    assert state == provenance.GitState(None, None) and state.short == "unknown"


def test_git_state_sees_uncommitted_changes(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "f.txt").write_text("a\n")
    git("add", "f.txt")
    git("-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "-m", "init")
    assert provenance.git_state(tmp_path).dirty is False
    (tmp_path / "untracked.txt").write_text("ignored, as by git describe --dirty\n")
    assert provenance.git_state(tmp_path).dirty is False
    (tmp_path / "f.txt").write_text("b\n")
    edited = provenance.git_state(tmp_path)
    assert edited.dirty is True and edited.short.endswith("+dirty")


def test_provenance_markdown_is_an_admonition_with_every_fact():
    record = provenance.collect_provenance(seed=42, trials=10_000, started=0.0, now=75.0)
    text = provenance.provenance_markdown(record)
    assert text.startswith(":::{admonition} Provenance of this page") and text.endswith(":::")
    for fact in ("seed `42`", "trials `10,000`", f"specdec {__version__}", "Python ",
                 "numpy ", "1970-01-01 00:00:00 UTC", "1 min 15 s"):
        assert fact in text, fact
    if record.git.commit:
        assert record.git.commit[:12] in text
    exact = provenance.collect_provenance(seed=1, started=0.0, now=1.0)
    assert "none (exact computation)" in provenance.provenance_markdown(exact)


def test_show_provenance_displays_markdown_with_json_metadata_and_returns_nothing(monkeypatch):
    shown = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display",
                        lambda obj, metadata=None, raw=False: shown.append((obj, metadata, raw)))
    assert provenance.show_provenance(seed=3, trials=7) is None
    (bundle, metadata, raw), = shown
    assert raw is True
    assert bundle["text/markdown"].startswith(":::{admonition} Provenance of this page")
    assert set(bundle) == {"text/markdown", "text/plain"}  # renderers know both
    record = metadata[provenance.PROVENANCE_MIME]
    assert record["seed"] == 3 and record["trials"] == 7 and record["duration"] >= 0


def test_show_run_parameters_marks_the_start_of_the_run(monkeypatch):
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda obj: None)
    monkeypatch.setattr(provenance, "_RUN_STARTED", 0.0)
    provenance.show_run_parameters(seed=1, trials=2)
    record = provenance.collect_provenance(seed=1, trials=2)
    assert record.duration < 60  # measured from show_run_parameters, not from the epoch


def _repository(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.org")
    git("config", "user.name", "t")
    (tmp_path / "f.txt").write_text("a\n")
    git("add", "f.txt")
    git("commit", "-qm", "one")
    return git


def test_edition_is_released_only_at_the_version_tag_with_a_clean_tree(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    git = _repository(tmp_path)
    untagged = provenance.edition_of(tmp_path, "1.2.0")
    assert untagged.tagged is False and untagged.released is False
    assert untagged.label == "1.2.0, unreleased build"
    note = provenance.edition_markdown(untagged)
    assert note.startswith(":::{warning}\nThis build is not a released edition: no tag "
                           f"`v1.2.0` points at its commit `{untagged.git.commit[:12]}`.")
    git("tag", "v1.1.0")  # another version's tag does not make this one released
    assert provenance.edition_of(tmp_path, "1.2.0").released is False
    git("tag", "v1.2.0")
    tagged = provenance.edition_of(tmp_path, "1.2.0")
    assert tagged.released is True and tagged.label == "1.2.0"
    assert provenance.edition_markdown(tagged) == (
        ":::{note}\nThis is the released edition 1.2.0 of the book (tag `v1.2.0`, commit "
        f"`{tagged.git.commit[:12]}`).\n:::")
    (tmp_path / "f.txt").write_text("b\n")  # a local change on the tagged commit
    edited = provenance.edition_of(tmp_path, "1.2.0")
    assert edited.tagged is True and edited.released is False
    assert edited.commit.endswith("+dirty") and edited.label == "1.2.0, unreleased build"
    assert "built with uncommitted changes" in provenance.edition_markdown(edited)


def test_edition_outside_a_work_tree_is_unreleased_and_says_so(tmp_path):
    edition = provenance.edition_of(tmp_path, "0.1.0")
    assert edition.released is False and edition.commit == "unknown"
    assert "not built from a git work tree" in provenance.edition_markdown(edition)
    with pytest.raises(ValueError, match="version: must be a non-empty version"):
        provenance.edition_of(tmp_path, "")


def test_provenance_box_says_whether_the_edition_is_released():
    record = provenance.collect_provenance(seed=1, started=0.0, now=1.0)
    text = provenance.provenance_markdown(record)
    expected = provenance.edition_of(version=__version__).released
    assert record.released is expected
    assert ("(released edition)" if expected else "(not a released edition") in text
