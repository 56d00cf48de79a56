"""The sentences a reader reads on a rendered page, and how many words each has.

The book's rule for its prose: no rendered sentence of any page is longer than
:data:`MAX_WORDS` words. Tables, code, cell inputs and math are not prose and are left
out. :func:`page_sentences` reads one rendered HTML page the way the review tool
``sentences.py`` does (same blocks, same splitting, same word count), so a count here is
the count a reviewer gets; ``tests/test_publishing.py`` scans every page of the whole
book with it, and ``tests/test_ch8_text.py`` holds the generated sentences to the same
rule over many inputs.

The page is parsed with BeautifulSoup (``html.parser`` backend), not with the standard
library's :mod:`html.parser` alone: it is installed wherever these functions run (the
``test`` extra names it; the book's theme, pydata-sphinx-theme, requires it), and the
blocks are defined by nesting (a list item that holds a paragraph, anything inside a
table), which needs a tree, not the event stream the standard library gives.
"""

from __future__ import annotations

import re

__all__ = ["MAX_WORDS", "EXCLUDED", "blocks", "split_sentences", "words", "page_sentences",
           "long_sentences", "section_titles", "notebook_prose"]

#: The most words a rendered sentence may have.
MAX_WORDS = 45

#: What is not prose: tables, code and cell inputs, math, and the page's chrome.
EXCLUDED = ("table, pre, div.cell_input, div.highlight, script, style, nav, div.math, "
            "span.math")

# Abbreviations whose full stop does not end a sentence.
_ABBREV = re.compile(r"\b(e\.g|i\.e|et al|cf|vs|Fig|Eq|Sec|Ch|No|approx)\.")
_MASK = "\u00b7"
# A sentence ends at . ! or ? followed by space and a capital, a digit, a quote or "(".
_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\u201c\"(])")
_WORD = re.compile(r"\w")


def blocks(html: str) -> list[str]:
    """The prose blocks of a rendered page: the whitespace-normalised text of every
    paragraph, list item and definition outside tables, code and math, innermost only
    (a list item that holds a paragraph gives the paragraph)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    node = soup.find("main") or soup.find("article") or soup.body or soup
    for bad in node.select(EXCLUDED):
        bad.decompose()
    out = []
    for el in node.find_all(["p", "li", "dd"]):
        if el.find_parent(["table", "pre"]) or el.find(["p", "li"]):
            continue
        text = " ".join(el.get_text(" ").split())
        if text:
            out.append(text)
    return out


def split_sentences(text: str) -> list[str]:
    """``text`` cut into sentences at a full stop, ! or ? followed by a space and a
    capital, a digit, a quote or a parenthesis; the full stops of e.g., i.e., et al.,
    cf., vs., Fig., Eq., Sec., Ch., No. and approx. do not end one."""
    masked = _ABBREV.sub(lambda m: m.group(0).replace(".", _MASK), text)
    return [s.replace(_MASK, ".") for s in _END.split(masked) if s.strip()]


def words(text: str) -> int:
    """The number of words of ``text``: its space-separated tokens that hold a letter or a
    digit (a lone dash, bracket or symbol is not a word)."""
    return sum(1 for w in text.split() if _WORD.search(w))


def page_sentences(html: str) -> list[str]:
    """Every prose sentence of one rendered page, in reading order."""
    return [s for b in blocks(html) for s in split_sentences(b)]


def long_sentences(html: str, limit: int = MAX_WORDS) -> list[tuple[int, str]]:
    """The sentences of a rendered page longer than ``limit`` words, as (words, sentence)."""
    return [(n, s) for s in page_sentences(html) if (n := words(s)) > limit]


# ---------------------------------------------------- the prose of an executed notebook
#
# The rendered-page check above needs the HTML, that is a whole book build; the builds at
# other seeds (tests/conftest.py, ``chapters_at_other_seeds``) only execute. These
# functions read the same prose from an executed notebook instead: its markdown cells with
# every glued value put in place, the MyST roles replaced by the words they render to, and
# markdown-it (installed with myst-parser) turning the result into the HTML blocks that
# :func:`page_sentences` reads. A role whose rendering needs the whole book is replaced by
# its longest likely form, so a sentence is counted no shorter than it renders.

_ROLE = re.compile(r"\{([a-z][\w:-]*)\}`([^`]*)`")
_LABEL = re.compile(r"^\(([\w.-]+)\)=\s*\n+#+\s+(.+)$", re.M)
_DOLLAR_MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.S)
_FENCE = re.compile(r"^(`{3,}|:{3,}).*?^\1\s*$", re.S | re.M)


def section_titles(sources) -> dict[str, str]:
    """``label -> title`` of every ``(label)=`` heading in the given MyST markdown texts:
    what a ``{ref}`` without its own text renders to."""
    return {m.group(1): m.group(2).strip() for text in sources for m in _LABEL.finditer(text)}


def _glued_text(body: str, glued: dict) -> str:
    if "::" in body:                       # a value glued on another page: a few words
        return "a value from another page"
    key, _, spec = body.partition(":")
    if key not in glued:
        raise KeyError(f"{{glue:text}}`{body}`: no value glued under {key!r}")
    value = glued[key]
    return format(value, spec) if spec else str(value)


def notebook_prose(notebook: dict, glued: dict, titles: dict[str, str]) -> str:
    """The prose of an executed notebook as HTML: markdown cells only, each
    ``{glue:text}`` replaced by its glued value (formatted with its spec), references by
    the words they render to, math left out (as :data:`EXCLUDED` leaves it out of a page),
    and fenced blocks (figures, tables,
    directives) left out.

    Parameters
    ----------
    notebook : dict
        The executed notebook (nbformat JSON).
    glued : dict
        ``key -> value`` glued by that notebook (``tests/conftest.py``'s ``glued_values``).
    titles : dict
        ``label -> section title`` (:func:`section_titles`).

    Raises
    ------
    KeyError
        A ``{glue:text}`` names a key the notebook did not glue.
    """
    from markdown_it import MarkdownIt

    def role(m):
        name, body = m.groups()
        if name.startswith("glue"):
            return _glued_text(body, glued)
        text, _, label = body.partition("<")
        if name == "numref":
            return text.replace("%s", "8.8").strip() if label else "Figure 8.8"
        if name == "ref":
            return text.strip() if label else titles.get(body.strip(), "the section")
        if name.startswith("cite"):
            return " ".join("Author et al. 2000" for _ in body.split(","))
        return body

    parts = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        text = _FENCE.sub("", text)
        text = _ROLE.sub(role, text)
        parts.append(_DOLLAR_MATH.sub("", text))
    return "<main>" + MarkdownIt("commonmark").render("\n\n".join(parts)) + "</main>"
