"""The book's palette and figure defaults.

One colour per role, used by every chapter: the target law p, the draft law q, the
output of a correct sampler, and the output of a flawed one. Colours are from the
Okabe-Ito palette, which stays distinguishable under the common colour-vision deficiencies.

The meaning of green (``correct``: exact) and vermilion (``wrong``: a flawed rule or a
wrong law) is fixed across the book: they are never used for an ordinary category.
Categories (workloads, languages, settings) take :data:`CATEGORIES` in order, and a figure
that must be read in grey also varies :data:`MARKERS` and :data:`LINESTYLES`. Captions
name colours with :data:`COLOUR_NAMES`, one name per colour.
"""

from __future__ import annotations

import matplotlib as mpl

#: Colour per role. Keys: ``target``, ``draft``, ``correct``, ``wrong``, ``accent``,
#: ``neutral``, ``residual``.
PALETTE: dict[str, str] = {
    "target": "#000000",
    "draft": "#56B4E9",
    "correct": "#009E73",
    "wrong": "#D55E00",
    "accent": "#E69F00",
    "residual": "#CC79A7",
    "neutral": "#999999",
}

#: Colours for ordinary categories, in order: neither green nor vermilion.
CATEGORIES: tuple[str, ...] = ("#0072B2", "#E69F00", "#CC79A7", "#56B4E9", "#000000")

#: Markers and line styles that go with :data:`CATEGORIES` (same order).
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v")
LINESTYLES: tuple[str, ...] = ("-", "--", "-.", ":", (0, (5, 1)))

#: The one name a caption uses for each colour of the book.
COLOUR_NAMES: dict[str, str] = {
    "#000000": "black",
    "#56B4E9": "sky blue",
    "#009E73": "green",
    "#D55E00": "vermilion",
    "#E69F00": "orange",
    "#CC79A7": "pink",
    "#999999": "grey",
    "#0072B2": "blue",
}


def category_style(i: int) -> dict:
    """Colour, marker and line style of the ``i``-th category (cycles after five).

    Examples
    --------
    >>> category_style(0)
    {'color': '#0072B2', 'marker': 'o', 'linestyle': '-'}
    """
    k = i % len(CATEGORIES)
    return {"color": CATEGORIES[k], "marker": MARKERS[k], "linestyle": LINESTYLES[k]}


def quartile_bars(rows) -> list[list[float]]:
    """Error-bar extents from each row's median to its quartiles, for ``Axes.errorbar``.

    ``rows`` are mappings with ``speedup``, ``speedup_q1`` and ``speedup_q3`` (the median
    and quartiles of paired ratios, :func:`specdec.measure.quartiles`); returns
    ``[below, above]``, two lists as long as ``rows``, so the bar runs from the first to
    the third quartile (not half the interquartile range on each side of the median).
    """
    rows = list(rows)
    return [[r["speedup"] - r["speedup_q1"] for r in rows],
            [r["speedup_q3"] - r["speedup"] for r in rows]]


def use_book_style() -> None:
    """Apply the book's matplotlib defaults (vector SVG output, readable sizes).

    Sets rcParams only; call once near the top of a chapter. Figures are rendered as
    SVG in the HTML build and PDF in the LaTeX build (see ``_config.yml``).
    """
    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 3.6),
            "figure.dpi": 110,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.titlesize": "medium",
            "legend.frameon": False,
            "svg.fonttype": "none",
            "font.size": 10,
        }
    )
    try:  # inline backend in a notebook: emit vector graphics
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("svg", "pdf")
    except Exception:  # pragma: no cover - outside IPython
        pass
