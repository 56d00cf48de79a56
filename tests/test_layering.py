"""The three wings hold: imports go one way, nothing reaches into tools/, the wheel ships the
library and its tools and not the book's machinery, and the library stays small.

The contracts themselves are in ``pyproject.toml`` (``[tool.importlinter]``), run here with
import-linter; the other checks are what import-linter cannot see (a path handed to
``importlib`` or ``sys.path``, a module nobody listed, what the wheel holds).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
LIBRARY_LINES = 13_000        # issue 29: what the chapters import, at most this many lines
LIBRARY_TOP_LEVEL = 12        # and at most this many top-level modules beside sub-packages


def _contract(type_: str, source: str) -> dict:
    for contract in CONFIG["contracts"]:
        if contract["type"] == type_ and source in contract["source_modules"]:
            return contract
    raise AssertionError(f"no {type_} contract for {source} in pyproject.toml")


LIBRARY = _contract("forbidden", "specdec.laws")["source_modules"]
TOOLS_WING = _contract("forbidden", "specdec.conformance")["source_modules"]


def test_import_contracts_are_kept():
    from importlinter.cli import lint_imports

    cwd = os.getcwd()
    os.chdir(REPO)                            # import-linter reads ./pyproject.toml
    try:
        assert lint_imports(config_filename=str(REPO / "pyproject.toml"),
                            no_cache=True) == 0, "an import contract is broken (see above)"
    finally:
        os.chdir(cwd)


def test_every_top_level_module_of_specdec_is_in_one_wing():
    found = {f"specdec.{p.stem if p.suffix == '.py' else p.name}"
             for p in (REPO / "specdec").iterdir()
             if (p.suffix == ".py" and p.stem != "__init__")
             or (p.is_dir() and (p / "__init__.py").exists())}
    listed = set(LIBRARY) | set(TOOLS_WING) | {"specdec.__main__"}
    assert found - listed == set(), ("modules in no contract of pyproject.toml "
                                     f"(add each to the library or the tools wing): "
                                     f"{sorted(found - listed)}")
    assert listed - found == set(), f"contracts name missing modules: {sorted(listed - found)}"
    assert not set(LIBRARY) & set(TOOLS_WING)


def _library_files() -> list[Path]:
    files = []
    for name in LIBRARY:
        path = REPO / Path(*name.split("."))
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
    return files + [REPO / "specdec" / "__init__.py"]


def test_the_library_stays_small():
    lines = sum(len(p.read_text().splitlines()) for p in _library_files())
    assert lines <= LIBRARY_LINES, (f"the library (the modules the chapters import) has "
                                    f"{lines:,} lines, more than {LIBRARY_LINES:,}")
    top = [n for n in LIBRARY if not (REPO / Path(*n.split("."))).is_dir()]
    assert len(top) <= LIBRARY_TOP_LEVEL, f"{len(top)} top-level modules: {top}"


REACH = re.compile(r"sys\.path\.(insert|append)|spec_from_file_location|"
                   r"SourceFileLoader|runpy\.run_path")


@pytest.mark.parametrize("where", ["specdec", "specbook", "notebooks"])
def test_nothing_reaches_into_tools_by_path(where):
    """What ships (specdec), the book's machinery and the notebooks import tools/ by name
    (``from tools import engine``), if at all; never by a file path on sys.path or through
    importlib, which no import graph shows and a non-editable install breaks."""
    offenders = []
    for path in sorted((REPO / where).rglob("*")):
        if path.suffix not in (".py", ".md") or not path.is_file():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if REACH.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert offenders == []


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                           str(out), str(REPO)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"pip wheel failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    (path,) = out.glob("specdec-*.whl")
    return path


def test_the_wheel_holds_the_library_and_its_tools_not_the_book(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("specdec/laws.py", "specdec/rules/__init__.py", "specdec/rules/token.py",
                   "specdec/stats/pertoken.py", "specdec/cost/__init__.py",
                   "specdec/simulate/cycle.py", "specdec/conformance/__main__.py",
                   "specdec/conformance/adapters/vllm.py", "specdec/client/llama.py",
                   "specdec/__main__.py", "specdec/data/models/target.npz"):
        assert needed in names, needed
    shipped_elsewhere = sorted(n for n in names if n.split("/")[0] in ("specbook", "tools",
                                                                        "notebooks", "tests"))
    assert shipped_elsewhere == []
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert re.search(r"^specdec = specdec\.__main__:main$", text, re.M), text


def test_an_installed_wheel_runs_its_commands_outside_the_checkout(wheel, tmp_path):
    """``pip install`` of the wheel (dependencies from this environment), run from a folder
    that is not the checkout: the commands start, the library imports from the install,
    and the book's machinery is not there."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    probe = ("import specdec, specdec.rules, specdec.client.llama, specdec.conformance, "
             "importlib.util as u; print(specdec.__file__); "
             "print(u.find_spec('specbook') is None)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[0].startswith(str(target)) and out[1] == "True", out
    for argv in (["--help"], ["kit", "--help"], ["bench", "--help"], ["exactness", "--help"],
                 ["serve", "--help"]):
        done = subprocess.run([sys.executable, "-m", "specdec", *argv], cwd=tmp_path,
                              env=env, capture_output=True, text=True)
        assert done.returncode == 0, (argv, done.stderr[-1500:])
        assert "exit status" in done.stdout.lower(), (argv, done.stdout[:600])
