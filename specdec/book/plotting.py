"""The book's palette and figure defaults.

One colour per role, used by every chapter: the target law p, the draft law q, the
output of a correct sampler, and the output of a flawed one. Colours are from the
Okabe-Ito palette, which stays distinguishable under the common colour-vision deficiencies.
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
