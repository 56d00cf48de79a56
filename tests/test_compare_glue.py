"""tools/compare_glue.py: glued values of two executions of a fixture notebook.

The fixture ``tests/fixtures/ok.md`` glues its ``seed`` parameter; executing it with two
seeds must show exactly that glue name as differing, and a build compared with itself
must show nothing.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
sys.path.insert(0, str(REPO / "tools"))
import compare_glue  # noqa: E402  (a script of tools/, imported by path)


def _execute(source: Path, out: Path, seed: int) -> Path:
    import jupytext
    import papermill

    out.mkdir(parents=True, exist_ok=True)
    raw = out / f"{source.stem}-0123456789abcdef0123.ipynb"  # a .cache/executed-style name
    jupytext.write(jupytext.read(source), raw)
    papermill.execute_notebook(str(raw), str(raw), parameters={"seed": seed, "trials": 10},
                               kernel_name="python3", progress_bar=False, cwd=str(out))
    return raw


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory):
    root = tmp_path_factory.mktemp("glue")
    _execute(FIXTURES / "ok.md", root / "a", seed=1)
    _execute(FIXTURES / "ok.md", root / "b", seed=2)
    shutil.copytree(root / "a", root / "a_copy")
    return root


@pytest.mark.slow
def test_same_build_has_no_difference(two_builds, capsys):
    assert compare_glue.main([str(two_builds / "a"), str(two_builds / "a_copy")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("0 differing glue value(s) in 1 notebook(s)")


@pytest.mark.slow
def test_other_seed_shows_the_glued_seed_only(two_builds, capsys):
    assert compare_glue.main([str(two_builds / "a"), str(two_builds / "b")]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "ok: fx_ok_seed: 1 -> 2"
    assert lines[1].startswith("1 differing glue value(s)")


@pytest.mark.slow
def test_notebook_names_drop_the_fingerprint_and_missing_values_are_listed(two_builds):
    old = compare_glue.load_build(two_builds / "a")
    assert list(old) == ["ok"] and old["ok"]["fx_ok_seed"] == ["1"]
    new = {"ok": {k: v for k, v in old["ok"].items() if k != "fx_ok_seed"}, "extra": {}}
    diffs = compare_glue.compare(old, new)
    assert [(d.notebook, d.name, d.old, d.new) for d in diffs] == [
        ("extra", "(notebook)", None, "present"), ("ok", "fx_ok_seed", "1", None)]
    assert diffs[1].line() == "ok: fx_ok_seed: 1 -> (absent)"


def test_missing_directory_is_a_usage_error(tmp_path, capsys):
    assert compare_glue.main([str(tmp_path / "nope"), str(tmp_path)]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert compare_glue.main([str(tmp_path), str(tmp_path)]) == 2
