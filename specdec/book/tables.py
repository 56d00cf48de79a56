"""Tables of the book: numbered, captioned, citable ("Table 6.1") in the HTML and the PDF.

A chapter builds the rows of a Markdown table from its results and displays them with
:func:`numbered_table`, which wraps them in a MyST ``{table}`` directive with a caption
and a label. Sphinx numbers every such table per chapter (``numfig``), so the prose can
write ``{numref}`tab-draft-sweep``` and a reader can cite "Table 6.1".
"""

from __future__ import annotations

import re
from typing import Sequence

_LABEL = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$")


def table_markdown(rows: str | Sequence[str], caption: str, name: str) -> str:
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

    Returns
    -------
    str
        A ``{table}`` directive.

    Raises
    ------
    ValueError
        If the caption is empty or spans lines, the label does not follow the rule, or the
        rows are not a Markdown table (every line starts with ``|``).

    Examples
    --------
    >>> print(table_markdown(["| a | b |", "|--|--|", "| 1 | 2 |"], "Two numbers.", "tab-x-y"))
    ```{table} Two numbers.
    :name: tab-x-y
    <BLANKLINE>
    | a | b |
    |--|--|
    | 1 | 2 |
    ```
    """
    lines = rows.splitlines() if isinstance(rows, str) else list(rows)
    if not caption.strip() or "\n" in caption:
        raise ValueError(f"caption: must be one non-empty line (got {caption!r})")
    if not (name.startswith("tab-") and _LABEL.match(name)):
        raise ValueError(f"name: must be a label such as 'tab-draft-sweep' (got {name!r})")
    if len(lines) < 2 or not all(line.lstrip().startswith("|") for line in lines):
        raise ValueError("rows: must be the lines of a Markdown table (header, separator, "
                         "body), each starting with '|'")
    return "\n".join([f"```{{table}} {caption.strip()}", f":name: {name}", "", *lines, "```"])


def numbered_table(rows: str | Sequence[str], caption: str, name: str):
    """Display object of :func:`table_markdown` (an IPython ``Markdown``), for a cell's last line.

    Used in every chapter that shows a table.
    """
    from IPython.display import Markdown

    return Markdown(table_markdown(rows, caption, name))
