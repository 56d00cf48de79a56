#!/usr/bin/env python3
"""Write the book's index of labels: every labelled chapter and section, in reading order.

    python tools/labels.py [--root .] [--out book/labels.md]

A label (``(sec-mass-rule)=`` just before a heading) is the stable name of a section: it is
the anchor of the section's web address and of the ``#`` link next to its heading
(tools/book_ext.py), and it never changes once published, while numbers and titles may.
The page lists each label with its number (chapters of the numbered part, and the
appendices, lettered: :func:`appendix_letters`) and its title as a link, read from the sources of the pages in ``_toc.yml`` (``notebooks/NAME.md`` for
executed chapters, ``book/NAME.md`` otherwise). ``tools/build.py`` calls
:func:`write_page` before rendering; the page is generated, so it is git-ignored.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LABEL = "labels"
TARGET = re.compile(r"^\(([A-Za-z0-9][\w.:-]*)\)=\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*$")


@dataclass(frozen=True)
class Entry:
    label: str
    level: int          # 1 = chapter or page title, 2 = section, ...
    document: str       # the toc entry, e.g. book/chapters/02-mass
    numbered: bool      # in a numbered part of the toc
    appendix: str = ""  # the appendix letter of its document ("" if not an appendix)
    title: str = ""     # the heading as written in the source (MyST: math allowed)


def toc_pages(toc_path: Path) -> list[tuple[str, bool]]:
    """(document, numbered) for every toc entry, root first, in reading order."""
    import yaml

    data = yaml.safe_load(toc_path.read_text(encoding="utf-8"))
    pages = [(str(data["root"]), False)] if data.get("root") else []
    for part in data.get("parts", []):
        for chapter in part.get("chapters", []):
            pages.append((str(chapter["file"]), bool(part.get("numbered"))))
    return [(re.sub(r"\.(md|ipynb)$", "", doc), numbered) for doc, numbered in pages]


def appendix_letters(pages: list[tuple[str, bool]]) -> dict[str, str]:
    """Letter of every appendix: the executed notebooks of the toc's unnumbered parts.

    An unnumbered toc entry under ``book/chapters/`` (an executed chapter source
    ``notebooks/aN-slug.md``) is an appendix, lettered A, B, C, ... in reading order; the
    other unnumbered pages (bibliography, citing, labels index, changelog...) have no number.

    Parameters
    ----------
    pages : list of (str, bool)
        ``(document, numbered)`` in reading order, as returned by :func:`toc_pages`.

    Returns
    -------
    dict
        Document name to its letter, in reading order.

    Raises
    ------
    ValueError
        If there are more than 26 appendices (no single letter left).

    Examples
    --------
    >>> appendix_letters([("book/intro", False), ("book/chapters/01-a", True),
    ...                   ("book/chapters/a1-x", False), ("book/citing", False),
    ...                   ("book/chapters/a2-y", False)])
    {'book/chapters/a1-x': 'A', 'book/chapters/a2-y': 'B'}
    """
    documents = [doc for doc, numbered in pages
                 if not numbered and doc.startswith("book/chapters/")]
    if len(documents) > 26:
        raise ValueError(f"pages: {len(documents)} appendices, at most 26 can be lettered")
    return {doc: chr(ord("A") + i) for i, doc in enumerate(documents)}


def source_of(root: Path, document: str) -> Path | None:
    """The Markdown source a toc entry is rendered from (None if generated or missing)."""
    if document.startswith("book/chapters/"):
        path = root / "notebooks" / (document.removeprefix("book/chapters/") + ".md")
    else:
        path = root / f"{document}.md"
    return path if path.is_file() else None


def labelled_headings(text: str) -> list[tuple[str, int, str]]:
    """(label, heading level, heading text) of every label placed just before a heading."""
    found, pending = [], None
    in_code = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
            pending = None
            continue
        if in_code:
            continue
        target = TARGET.match(line)
        if target:
            pending = target.group(1)
            continue
        heading = HEADING.match(line)
        if heading and pending:
            found.append((pending, len(heading.group(1)), heading.group(2)))
        if line.strip():
            pending = None
    return found


def labels_in(text: str) -> list[tuple[str, int]]:
    """(label, heading level) of every label placed just before a heading."""
    return [(label, level) for label, level, _ in labelled_headings(text)]


def unlabelled_headings(text: str) -> list[tuple[int, str]]:
    """(line number from 1, heading) of every heading without a label just before it.

    Headings inside code fences (comments of a code cell) are not headings.

    Examples
    --------
    >>> unlabelled_headings("(ch-x)=\\n# Kept\\n\\n## Lost\\n```\\n# code\\n```")
    [(4, '## Lost')]
    """
    found, pending, in_code = [], False, False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith(("```", "~~~")):
            in_code, pending = not in_code, False
            continue
        if in_code:
            continue
        if TARGET.match(line):
            pending = True
            continue
        if HEADING.match(line) and not pending:
            found.append((number, line.strip()))
        if line.strip():
            pending = False
    return found


GENERATED_PAGES = ("labels.md", "execution-stats.md")  # book/, written by tools/build.py


def book_sources(root: Path) -> list[Path]:
    """The book's hand-written Markdown sources: ``notebooks/*.md`` and ``book/*.md``
    without the pages the build generates (:data:`GENERATED_PAGES`)."""
    return sorted([*(root / "notebooks").glob("*.md"),
                   *(p for p in (root / "book").glob("*.md") if p.name not in GENERATED_PAGES)])


def heading_labels(root: Path) -> list[str]:
    """Every label placed before a heading in :func:`book_sources`, sorted."""
    return sorted({label for source in book_sources(root)
                   for label, _ in labels_in(source.read_text(encoding="utf-8"))})


def entries(root: Path, toc_path: Path) -> list[Entry]:
    out = []
    pages = toc_pages(toc_path)
    letters = appendix_letters(pages)
    for document, numbered in pages:
        source = source_of(root, document)
        if source is None:
            continue
        for label, level, title in labelled_headings(source.read_text(encoding="utf-8")):
            if label != LABEL:
                out.append(Entry(label, level, document, numbered, letters.get(document, ""),
                                 title))
    return out


def render(items: list[Entry]) -> str:
    lines = [
        "% Generated by tools/labels.py from the sources of the pages in _toc.yml: do not edit.",
        f"({LABEL})=",
        "# Index of labels",
        "",
        "Every labelled chapter and section of the book, in reading order. A label never",
        "changes once published; cite a section by its page address followed by `#` and its",
        "label (see {ref}`citing-section`).",
        "",
        "```{list-table}",
        ":header-rows: 1",
        ":widths: 3 2 5",
        "",
        "* - label",
        "  - number",
        "  - title",
    ]
    for item in items:
        if item.numbered or item.appendix:
            kind = "Section" if item.level > 1 else "Chapter" if item.numbered else "Appendix"
            number = f"{{numref}}`{kind} %s <{item.label}>`"
        else:
            number = "\u2014"
        # A title with math is a Markdown link whose text is the source's heading, so that
        # the math is typeset ({ref} shows a title's plain text: TeX source for math).
        # Others stay {ref}: a link to a label named like a page would be ambiguous.
        if "$" in item.title:
            title = f"[{item.title}](#{item.label})"
        else:
            title = f"{{ref}}`{item.label}`"
        lines += [f"* - `{item.label}`", f"  - {number}", f"  - {title}"]
    lines.append("```")
    return "\n".join(lines) + "\n"


def write_page(root: Path, toc_path: Path, out: Path) -> bool:
    """Write the page if its content changed; return whether it was written."""
    text = render(entries(root, toc_path))
    if out.exists() and out.read_text(encoding="utf-8") == text:
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(REPO))
    parser.add_argument("--out", default=None, help="default: ROOT/book/labels.md")
    args = parser.parse_args(argv)
    root = Path(args.root)
    out = Path(args.out) if args.out else root / "book" / f"{LABEL}.md"
    write_page(root, root / "_toc.yml", out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
