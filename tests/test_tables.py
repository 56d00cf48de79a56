"""specbook.tables: the numbered tables' MyST source."""

import pytest


def test_table_widths_one_positive_integer_per_column():
    from specbook.tables import table_markdown

    text = table_markdown(["| a | b | c |", "|--|--|--|", "| 1 | 2 | 3 |"], "Three.", "tab-x-w",
                          widths=[5, 2, 3])
    # with widths, a longtable in the PDF: it breaks across pages instead of running past one
    assert text.splitlines()[:4] == [":::{table} Three.", ":name: tab-x-w", ":class: longtable",
                                     ":widths: 5 2 3"]
    for bad in ([5, 2], [5, 0, 3], [5, 2.5, 3], [True, 2, 3]):
        with pytest.raises(ValueError, match="widths: need 3 positive integers"):
            table_markdown(["| a | b | c |", "|--|--|--|"], "Three.", "tab-x-w", widths=bad)
