import numpy as np
import pytest

from specdec.book.prose import glue_value, plain, sci


def test_plain_converts_numpy_scalars():
    assert type(plain(np.float64(0.25))) is float
    assert type(plain(np.int64(3))) is int
    assert type(plain(np.array(2.0))) is float
    assert plain("x") == "x"


@pytest.mark.parametrize(
    "x, digits, text",
    [(1e-9, 1, "10⁻⁹"), (3.2e-10, 1, "3.2 × 10⁻¹⁰"), (0.0, 1, "0"), (2.5e3, 2, "2.50 × 10³"),
     (-1e-4, 1, "−10⁻⁴")],
)
def test_sci(x, digits, text):
    assert sci(x, digits) == text


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "1e-9"])
def test_sci_rejects_non_finite(bad):
    with pytest.raises(ValueError, match="x: must be a finite real number"):
        sci(bad)


def test_glue_value_rejects_bad_key():
    with pytest.raises(ValueError, match="key: must be a non-empty string"):
        glue_value("two words", 1.0)


def test_glue_value_returns_plain_value():
    pytest.importorskip("myst_nb")
    assert type(glue_value("k", np.float64(0.5))) is float
