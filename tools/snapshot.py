"""Copy the repository's source files (tracked or new, not ignored) to another directory.

Used by the end-to-end tests and by ``make bench`` to build the book from scratch without
touching the working tree's caches. Generated and ignored files (.venv, _build, .cache,
executed notebooks) are not copied.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def source_files(repo: Path) -> list[str]:
    """Paths (relative to ``repo``) of tracked and untracked-but-not-ignored files."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=repo, check=True, capture_output=True,
    ).stdout.decode()
    return sorted(p for p in out.split("\0") if p and (repo / p).is_file())


def copy_sources(repo: Path, dest: Path) -> Path:
    """Copy :func:`source_files` of ``repo`` into ``dest`` (created); return ``dest``."""
    repo, dest = Path(repo), Path(dest)
    for rel in source_files(repo):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / rel, target)
    return dest
