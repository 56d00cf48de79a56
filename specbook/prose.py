"""Numbers for the prose: plain Python values for glue, and readable formats.

Every number a chapter's text shows is computed by the chapter and glued with myst-nb.
myst-nb formats glued values through their ``text/plain`` representation, which fails
for numpy scalars in format specs such as ``{glue:text}`key:.4f```; :func:`glue_value`
converts them to plain Python numbers first. :func:`sci` writes small probabilities
(false-alarm rates, p-values) the way the prose prints them.
"""

from __future__ import annotations

import numbers

import numpy as np

from specdec.conformance.report import pvalue_text, sci  # noqa: F401  (the book writes numbers as the kit does)


def plain(value):
    """Return ``value`` as a plain Python object (numpy scalars become int/float/bool).

    Parameters
    ----------
    value : object
        A number, numpy scalar, string or any other object.

    Returns
    -------
    object
        ``value.item()`` for a numpy scalar or 0-d array, ``value`` otherwise.

    Examples
    --------
    >>> type(plain(np.float64(0.5))).__name__
    'float'
    >>> plain("A")
    'A'
    """
    if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.ndim == 0):
        return value.item()
    return value


def glue_value(key: str, value):
    """Glue ``value`` under ``key`` for the prose (hidden output) and return it.

    Parameters
    ----------
    key : str
        The glue key, prefixed by its chapter (``"ch2_beta"``).
    value : object
        The value; numpy scalars are converted with :func:`plain`.

    Returns
    -------
    object
        The plain value that was glued, so a call can sit inside an expression.

    Raises
    ------
    ValueError
        If ``key`` is empty or contains whitespace.
    """
    if not isinstance(key, str) or not key or any(ch.isspace() for ch in key):
        raise ValueError(f"key: must be a non-empty string without spaces (got {key!r})")
    from myst_nb import glue

    value = plain(value)
    glue(key, value, display=False)
    return value


def widths_text(widths) -> str:
    """The widths of a draft tree per depth, as the book writes them: ``2-1-1``.

    Parameters
    ----------
    widths : sequence of int
        Children per node at each depth, each ``>= 1``, at least one depth.

    Returns
    -------
    str
        The widths joined by hyphens (a chain of three is ``1-1-1``, one level of two
        candidates ``2``).

    Raises
    ------
    ValueError
        If ``widths`` is empty or holds anything but integers ``>= 1``.

    Examples
    --------
    >>> widths_text((2, 1, 1))
    '2-1-1'
    >>> widths_text((3,))
    '3'
    """
    widths = tuple(widths)
    if not widths or not all(isinstance(w, numbers.Integral) and not isinstance(w, bool) and w >= 1
                             for w in widths):
        raise ValueError(f"widths: must be a non-empty sequence of integers >= 1 (got {widths!r})")
    return "-".join(str(int(w)) for w in widths)


def spoken_list(items) -> str:
    """Items as a sentence lists them: ``"a"``, ``"a and b"``, ``"a, b and c"``.

    Examples
    --------
    >>> spoken_list(["Italian"]), spoken_list(["Italian", "English", "Chinese"])
    ('Italian', 'Italian, English and Chinese')

    Raises
    ------
    ValueError
        ``items`` is empty.
    """
    words = [str(x) for x in items]
    if not words:
        raise ValueError("items: needs at least one item")
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """A count with its noun in the right number, as prose says it: ``"1 thread"``,
    ``"2 threads"`` (``plural`` for a noun that does not take an ``s``).

    >>> counted(1, "thread"), counted(32, "slot"), counted(2, "process", "processes")
    ('1 thread', '32 slots', '2 processes')

    Raises
    ------
    ValueError
        ``n`` is not a non-negative integer.
    """
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n: must be a non-negative integer (got {n!r})")
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"


def signed_percent(x: float) -> str:
    """A relative change as a signed whole percentage, with no "-0%" or "+0%": a change
    that rounds to zero reads "0%".

    >>> signed_percent(-0.003), signed_percent(0.126), signed_percent(-0.05)
    ('0%', '+13%', '-5%')
    """
    rounded = round(float(x), 2)
    return "0%" if rounded == 0 else f"{rounded:+.0%}"
