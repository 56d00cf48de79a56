"""Tables of the book: numbered, captioned, citable ("Table 6.1") in the HTML and the PDF.

A chapter builds the rows of a Markdown table from its results and displays them with
:func:`numbered_table`, which wraps them in a MyST ``{table}`` directive with a caption
and a label. Sphinx numbers every such table per chapter (``numfig``), so the prose can
write ``{numref}`tab-draft-sweep``` and a reader can cite "Table 6.1".

:func:`markdown_table` and :func:`report_markdown` render tidy rows and
:class:`specdec.measure.Report` objects (chapter 8's study) as Markdown.
"""

from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

_LABEL = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$")


def table_markdown(rows: str | Sequence[str], caption: str, name: str,
                   widths: Sequence[int] | None = None) -> str:
    """MyST source of a numbered table.

    Parameters
    ----------
    rows : str or sequence of str
        The Markdown table (header, separator and body lines), one string or one per line.
    caption : str
        One line of MyST (math and roles allowed); shown after "Table N.M".
    name : str
        The label, e.g. ``"tab-draft-sweep"``: lower case words joined by hyphens, starting
        with ``tab-``.
    widths : sequence of int, optional
        Relative column widths (the directive's ``:widths:``), one positive integer per
        column: the PDF then wraps every column in its share of the line instead of
        letting long cells squeeze the others. Such a table is also a ``longtable`` in
        the PDF (``:class: longtable``), so that one taller than a page breaks across
        pages with its header repeated instead of running past the foot of the page
        (Appendix C's first table did).

    Returns
    -------
    str
        A ``{table}`` directive in a colon fence (``:::``): a backtick fence would end at
        the first inline code of the caption, and the table would lose its number.

    Raises
    ------
    ValueError
        If the caption is empty or spans lines, the label does not follow the rule, the
        rows are not a Markdown table (every line starts with ``|``), or ``widths`` does
        not give one positive integer per column.

    Examples
    --------
    >>> print(table_markdown(["| a | b |", "|--|--|", "| 1 | 2 |"], "Two numbers.", "tab-x-y"))
    :::{table} Two numbers.
    :name: tab-x-y
    <BLANKLINE>
    | a | b |
    |--|--|
    | 1 | 2 |
    :::
    """
    lines = rows.splitlines() if isinstance(rows, str) else list(rows)
    if not caption.strip() or "\n" in caption:
        raise ValueError(f"caption: must be one non-empty line (got {caption!r})")
    if not (name.startswith("tab-") and _LABEL.match(name)):
        raise ValueError(f"name: must be a label such as 'tab-draft-sweep' (got {name!r})")
    if len(lines) < 2 or not all(line.lstrip().startswith("|") for line in lines):
        raise ValueError("rows: must be the lines of a Markdown table (header, separator, "
                         "body), each starting with '|'")
    head = [f":::{{table}} {caption.strip()}", f":name: {name}"]
    if widths is not None:
        columns = lines[0].strip().strip("|").count("|") + 1
        if len(widths) != columns or not all(isinstance(w, int) and not isinstance(w, bool)
                                             and w > 0 for w in widths):
            raise ValueError(f"widths: need {columns} positive integers, one per column "
                             f"(got {list(widths)!r})")
        head += [":class: longtable", ":widths: " + " ".join(str(w) for w in widths)]
    return "\n".join([*head, "", *lines, ":::"])


def number_tables(markdown: str, captions: Sequence[tuple[str, str]]) -> str:
    """Give each Markdown table inside ``markdown`` a numbered caption, in order.

    For text made elsewhere (a report the command line also prints): every run of lines
    starting with ``|`` is one table, wrapped by :func:`table_markdown` with the next
    ``(caption, name)``; the text around the tables is kept.

    Raises
    ------
    ValueError
        If the number of tables and of captions differ.

    Examples
    --------
    >>> print(number_tables("Two:\\n\\n| a |\\n|--|\\n| 1 |\\n\\nend", [("One.", "tab-x-one")]))
    Two:
    <BLANKLINE>
    :::{table} One.
    :name: tab-x-one
    <BLANKLINE>
    | a |
    |--|
    | 1 |
    :::
    <BLANKLINE>
    end
    """
    out, table, k = [], [], 0
    lines = markdown.splitlines()
    for i, line in enumerate(lines + [""]):
        if line.lstrip().startswith("|") and i < len(lines):
            table.append(line)
            continue
        if table:
            if k >= len(captions):
                raise ValueError(f"captions: {len(captions)} given, the text has more tables")
            out.append(table_markdown(table, *captions[k]))
            table, k = [], k + 1
        if i < len(lines):
            out.append(line)
    if k != len(captions):
        raise ValueError(f"captions: {len(captions)} given for {k} tables")
    return "\n".join(out)


def numbered_table(rows: str | Sequence[str], caption: str, name: str,
                   widths: Sequence[int] | None = None):
    """Display object of :func:`table_markdown` (an IPython ``Markdown``), for a cell's last line.

    Used in every chapter that shows a table.
    """
    from IPython.display import Markdown

    return Markdown(table_markdown(rows, caption, name, widths))


def format_cell(value) -> str:
    """One table cell: floats with 3-4 significant digits, ``-`` for NaN and None.

    Examples
    --------
    >>> [format_cell(v) for v in (1234.5678, 3.0588189999999997, 0.04444, float("nan"), None, 7)]
    ['1234.6', '3.059', '0.0444', '-', '-', '7']
    """
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        a = abs(value)
        if a == 0:
            return "0"
        if a >= 100:
            return f"{value:.1f}"
        if a >= 1:
            return f"{value:.3f}"
        return f"{value:.3g}"
    return "-" if value is None else str(value)


def markdown_table(rows: Sequence[Mapping], columns: Sequence[str] | None = None) -> str:
    """A Markdown table of tidy rows (cells by :func:`format_cell`).

    Parameters
    ----------
    rows : sequence of mappings
        One mapping per row; missing keys show as ``-``.
    columns : sequence of str, optional
        Columns in order (default: the keys of the first row).

    Examples
    --------
    >>> print(markdown_table([{"a": 1, "b": 0.5}]))
    | a | b |
    |---|---|
    | 1 | 0.5 |
    """
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(format_cell(row.get(c)) for c in columns) + " |")
    return "\n".join(lines)


def metadata_markdown(meta: Mapping) -> str:
    """A bullet list of a report's metadata (nested mappings on one line each)."""
    lines = []
    for key, value in meta.items():
        if isinstance(value, Mapping):
            inner = ", ".join(f"{k}={format_cell(v) if isinstance(v, float) else v}"
                              for k, v in value.items() if not isinstance(v, (Mapping, list)))
            lines.append(f"- {key}: {inner}")
        else:
            lines.append(f"- {key}: {value}")
    return "\n".join(lines)


def report_markdown(report, columns: Sequence[str] | None = None, *,
                    metadata: bool = False) -> str:
    """A :class:`specdec.measure.Report` as Markdown: its title, its rows as a table and,
    with ``metadata=True``, its metadata. Used in Chapter 8."""
    out = [f"**{report.title}**", "",
           markdown_table(report.rows, columns or report.columns or None)]
    if metadata:
        out += ["", metadata_markdown(report.metadata)]
    return "\n".join(out)
