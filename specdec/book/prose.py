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
