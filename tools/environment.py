#!/usr/bin/env python3
"""Write environment.yml (Binder, conda) from requirements-lock.txt.

    python tools/environment.py            # rewrite environment.yml
    python tools/environment.py --check    # exit 1, with a diff, if it is out of date

The lock (``make lock``: pip freeze of the .venv the book was built and tested with) is
the one list of exact versions. environment.yml takes from conda only the Python of the
lock's header ("Python 3.11") and pip, and installs every locked distribution with pip at
its locked version, then the library itself from the checkout; so a Binder or conda
environment has the versions the provenance boxes show. ``make lock`` runs this after
rewriting the lock, and tests/test_publishing.py checks that the two files agree.

Only the standard library is used.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "requirements-lock.txt"
ENVIRONMENT = REPO / "environment.yml"

HEADER = """\
# Environment of the book for Binder (repo2docker reads this file) and for conda users:
# `conda env create -f environment.yml`. Generated from requirements-lock.txt by
# tools/environment.py (`make lock` runs it; do not edit by hand): Python from conda, then
# every distribution at the exact version the book was built and tested with, from pip,
# and the library itself from this checkout (the last line).
"""


def lock_pins(lock_text: str) -> list[str]:
    """The ``name==version`` lines of a lock file, in its order.

    Raises
    ------
    ValueError
        If a line that is neither blank nor a comment is not ``name==version``.
    """
    pins = []
    for n, line in enumerate(lock_text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]*==[A-Za-z0-9_.+!\-]+", line):
            raise ValueError(f"requirements-lock.txt line {n}: {line!r} is not name==version")
        pins.append(line)
    return pins


def lock_python(lock_text: str) -> str:
    """The Python version (``3.11``) named in the lock's header comment.

    Raises
    ------
    ValueError
        If the header names no ``Python X.Y``.
    """
    header = "\n".join(ln for ln in lock_text.splitlines() if ln.startswith("#"))
    m = re.search(r"\bPython (\d+\.\d+)\b", header)
    if m is None:
        raise ValueError("requirements-lock.txt: its header must name the Python version "
                         "(e.g. 'Python 3.11')")
    return m.group(1)


def render(lock_text: str) -> str:
    """The text of environment.yml for the lock ``lock_text``."""
    lines = [HEADER.rstrip("\n"), "name: specdec-book", "channels:", "  - conda-forge",
             "dependencies:", f"  - python={lock_python(lock_text)}", "  - pip", "  - pip:"]
    lines += [f"      - {pin}" for pin in lock_pins(lock_text)]
    lines.append("      - -e .")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if environment.yml differs from the lock")
    args = parser.parse_args(argv)
    wanted = render(LOCK.read_text(encoding="utf-8"))
    current = ENVIRONMENT.read_text(encoding="utf-8") if ENVIRONMENT.exists() else ""
    if args.check:
        if current != wanted:
            sys.stdout.writelines(difflib.unified_diff(
                current.splitlines(True), wanted.splitlines(True), "environment.yml",
                "environment.yml from requirements-lock.txt"))
            print("environment.yml is out of date: run `python tools/environment.py`")
            return 1
        return 0
    ENVIRONMENT.write_text(wanted, encoding="utf-8")
    print(f"wrote environment.yml ({len(lock_pins(LOCK.read_text(encoding='utf-8')))} "
          "pinned distributions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
