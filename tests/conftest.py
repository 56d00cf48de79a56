"""Fixtures shared by test modules.

``whole_book`` builds the real book once per session, from a copy of the repository's
sources in a temporary directory, so the end-to-end pipeline test and the checks of the
rendered book (tests/test_publishing.py) run on a fresh build even in a clean clone
where ``make book`` was never run. It is slow (all notebooks execute): only tests marked
``slow`` use it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "tools" / "build.py"


def _load_snapshot():
    spec = importlib.util.spec_from_file_location("specdec_snapshot_tool_conftest",
                                                  REPO / "tools" / "snapshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class WholeBook:
    root: Path                              # the copy of the repository that was built
    first: subprocess.CompletedProcess      # its first (from scratch) build

    @property
    def html(self) -> Path:
        return self.root / "_build" / "html"


@pytest.fixture(scope="session")
def whole_book(tmp_path_factory) -> WholeBook:
    root = _load_snapshot().copy_sources(REPO, tmp_path_factory.mktemp("whole") / "repo")
    assert not (root / ".venv").exists() and not (root / "_build").exists()
    first = subprocess.run([sys.executable, str(BUILD), "--root", str(root)],
                           capture_output=True, text=True, cwd=root)
    return WholeBook(root=root, first=first)


@pytest.fixture(scope="module")
def one_blas_thread():
    """One BLAS thread for a test module: small products stall with 2 threads on a busy
    2-core machine. Use with ``pytestmark = pytest.mark.usefixtures("one_blas_thread")``."""
    from specdec.measure import limit_blas_threads

    with limit_blas_threads(1):
        yield
