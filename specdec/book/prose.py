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

_SUPERSCRIPTS = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


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


def sci(x: float, digits: int = 1) -> str:
    """Scientific notation for the prose: ``10⁻⁹``, ``3.2 × 10⁻¹⁰``; zero stays ``0``.

    Parameters
    ----------
    x : float
        The number (typically a probability).
    digits : int, default 1
        Digits after the decimal point of the mantissa.

    Returns
    -------
    str
        ``"10ᵉ"`` when the mantissa rounds to 1, ``"m × 10ᵉ"`` otherwise.

    Raises
    ------
    ValueError
        If ``x`` is not a finite real number or ``digits`` is negative.

    Examples
    --------
    >>> sci(1e-9)
    '10⁻⁹'
    >>> sci(3.2e-10)
    '3.2 × 10⁻¹⁰'
    >>> sci(0.0)
    '0'
    """
    if not isinstance(x, numbers.Real) or not np.isfinite(x):
        raise ValueError(f"x: must be a finite real number (got {x!r})")
    if not isinstance(digits, numbers.Integral) or digits < 0:
        raise ValueError(f"digits: must be an integer >= 0 (got {digits!r})")
    if x == 0:
        return "0"
    mantissa, exponent = f"{float(x):.{digits}e}".split("e")
    power = "10" + str(int(exponent)).translate(_SUPERSCRIPTS)
    if float(mantissa) == 1:
        return power
    if float(mantissa) == -1:
        return "−" + power
    return f"{mantissa} × {power}"


def pvalue_text(p: float) -> str:
    """A p-value for the prose and tables: 2 significant digits, small ones in powers of ten.

    A p-value is never exactly 0; one that underflows to 0 in floating point is written
    as a bound, ``< 10⁻³⁰⁰``.

    Parameters
    ----------
    p : float
        The p-value, ``0 <= p <= 1``.

    Returns
    -------
    str
        ``"0.57"``, ``"0.031"``, ``"2.6 × 10⁻⁹"``, ``"< 10⁻³⁰⁰"``.

    Raises
    ------
    ValueError
        If ``p`` is not a real number in [0, 1].

    Examples
    --------
    >>> pvalue_text(0.5712)
    '0.57'
    >>> pvalue_text(2.63e-9)
    '2.6 × 10⁻⁹'
    >>> pvalue_text(0.0)
    '< 10⁻³⁰⁰'
    """
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= p <= 1:
        raise ValueError(f"p: must be a real number in [0, 1] (got {p!r})")
    if p == 0:
        return "< " + sci(1e-300)
    return f"{float(p):.2g}" if p >= 1e-3 else sci(float(p))


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


def signed_percent(x: float) -> str:
    """A relative change as a signed whole percentage, with no "-0%" or "+0%": a change
    that rounds to zero reads "0%".

    >>> signed_percent(-0.003), signed_percent(0.126), signed_percent(-0.05)
    ('0%', '+13%', '-5%')
    """
    rounded = round(float(x), 2)
    return "0%" if rounded == 0 else f"{rounded:+.0%}"
