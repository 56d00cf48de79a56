#!/usr/bin/env python3
"""Compare the glued values of two builds of the book and print every difference.

Every number the prose shows is glued by its notebook (``myst_nb.glue``), and an executed
notebook keeps each glued value as an output whose metadata names it. This tool reads the
executed notebooks of two builds (two directories holding ``.ipynb`` files, for example a
saved copy of ``book/chapters`` or of ``.cache/executed`` and the current one), pairs the
notebooks by name (a ``-<fingerprint>`` suffix of ``.cache/executed`` is ignored), and
prints, for each notebook, every glue name whose value differs, appears in one build
only, or is glued twice with different values. Text values are compared as text (the
``text/plain``, ``text/markdown``, ``text/html`` or ``text/latex`` representation);
figures by the sha256 of their image data.

Usage::

    python tools/compare_glue.py OLD_DIR NEW_DIR [--only 01 02 a2]

Exit status 0 when every compared value is identical, 1 when something differs, 2 on a
usage error (missing directory, no notebook). Used to check that a refactoring changes
no result (issue 9).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

FINGERPRINT = re.compile(r"-[0-9a-f]{20}$")
TEXT_MIMES = ("text/plain", "text/markdown", "text/html", "text/latex")
IMAGE_MIMES = ("image/png", "image/svg+xml", "image/jpeg")


@dataclass(frozen=True)
class Difference:
    """One glue name whose value differs between the two builds."""

    notebook: str
    name: str
    old: str | None  # None: the name is not glued in the old build
    new: str | None

    def line(self) -> str:
        old = "(absent)" if self.old is None else self.old
        new = "(absent)" if self.new is None else self.new
        return f"{self.notebook}: {self.name}: {old} -> {new}"


def notebook_name(path: Path) -> str:
    """``01-contract`` for ``01-contract.ipynb`` and ``01-contract-<20 hex>.ipynb``."""
    return FINGERPRINT.sub("", path.stem)


def _value(data: dict, prefix: str) -> str:
    """A comparable text for one glued output's data bundle."""
    for mime in TEXT_MIMES:
        if prefix + mime in data:
            value = data[prefix + mime]
            return value if isinstance(value, str) else "".join(value)
    for mime in IMAGE_MIMES:
        if prefix + mime in data:
            raw = data[prefix + mime]
            raw = raw if isinstance(raw, str) else "".join(raw)
            return f"<{mime} sha256 {hashlib.sha256(raw.encode()).hexdigest()[:16]}>"
    return json.dumps(data, sort_keys=True)


def glued_values(notebook: dict) -> dict[str, list[str]]:
    """Glue name -> the values glued under it, in cell order (one entry per glue call)."""
    out: dict[str, list[str]] = {}
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            scrap = output.get("metadata", {}).get("scrapbook")
            if not scrap or "name" not in scrap:
                continue
            prefix = scrap.get("mime_prefix", "")
            out.setdefault(scrap["name"], []).append(_value(output.get("data", {}), prefix))
    return out


def load_build(directory: Path, only: tuple[str, ...] = ()) -> dict[str, dict[str, list[str]]]:
    """Notebook name -> glued values, for every ``.ipynb`` of ``directory``.

    When ``.cache/executed`` keeps several executions of one notebook, the most recently
    modified one is read.
    """
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: not a directory of executed notebooks")
    newest: dict[str, Path] = {}
    for path in sorted(directory.glob("*.ipynb")):
        name = notebook_name(path)
        if only and not name.startswith(only):
            continue
        if name not in newest or path.stat().st_mtime > newest[name].stat().st_mtime:
            newest[name] = path
    return {name: glued_values(json.loads(path.read_text())) for name, path in sorted(newest.items())}


def compare(old: dict[str, dict[str, list[str]]], new: dict[str, dict[str, list[str]]]) -> list[Difference]:
    """Every glue value that differs between two loaded builds (notebooks in name order)."""
    diffs: list[Difference] = []
    for nb in sorted(set(old) | set(new)):
        a, b = old.get(nb), new.get(nb)
        if a is None or b is None:
            diffs.append(Difference(nb, "(notebook)", None if a is None else "present",
                                    None if b is None else "present"))
            continue
        for name in sorted(set(a) | set(b)):
            va, vb = a.get(name), b.get(name)
            if va == vb:
                continue
            diffs.append(Difference(nb, name, None if va is None else " | ".join(va),
                                    None if vb is None else " | ".join(vb)))
    return diffs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="directory of the first build's executed notebooks")
    parser.add_argument("new", type=Path, help="directory of the second build's executed notebooks")
    parser.add_argument("--only", nargs="*", default=(),
                        help="compare only the notebooks whose name starts with one of these")
    args = parser.parse_args(argv)
    try:
        old = load_build(args.old, tuple(args.only))
        new = load_build(args.new, tuple(args.only))
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not old and not new:
        print("error: no notebook to compare", file=sys.stderr)
        return 2
    diffs = compare(old, new)
    n_values = sum(len(v) for v in old.values())
    for d in diffs:
        print(d.line())
    print(f"{len(diffs)} differing glue value(s) in {len(set(old) | set(new))} notebook(s) "
          f"({n_values} glued value(s) in the first build)")
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main())
