"""The rendered-sentence extractor (specbook.sentences) on small HTML snippets, with the
exact sentences and word counts it must give."""

from __future__ import annotations

from specbook import sentences as S


def page(body: str) -> str:
    return f"<html><body><nav><p>Menu text. Not prose.</p></nav><main>{body}</main></body></html>"


def test_paragraphs_are_split_into_sentences():
    html = page("<p>One two three. Four five six! Is it seven? 8 is a digit.</p>")
    assert S.page_sentences(html) == ["One two three.", "Four five six!", "Is it seven?",
                                      "8 is a digit."]


def test_abbreviations_and_lowercase_do_not_end_a_sentence():
    html = page("<p>See Fig. 8.3 and e.g. this, cf. that, vs. them (Chen et al. 2016). "
                "A number 0.5 stays. Then lower. case continues.</p>")
    assert S.page_sentences(html) == [
        "See Fig. 8.3 and e.g. this, cf. that, vs. them (Chen et al. 2016).",
        "A number 0.5 stays.", "Then lower. case continues."]


def test_tables_code_math_and_chrome_are_not_prose():
    html = page("<p>Kept here.</p>"
                "<table><tr><td><p>A cell. Not kept.</p></td></tr></table>"
                "<pre>code. Not kept.</pre>"
                "<div class='cell_input'><p>Input. Not kept.</p></div>"
                "<div class='highlight'><p>Highlighted. Not kept.</p></div>"
                "<div class='math'>x = 1. Not kept.</div>"
                "<p>Inline <span class='math'>\\(a. B\\)</span> math goes.</p>"
                "<script>var x = 'Not kept.';</script>")
    assert S.page_sentences(html) == ["Kept here.", "Inline math goes."]


def test_innermost_blocks_only_and_text_is_normalised():
    html = page("<ul><li><p>In a\n   paragraph.</p></li><li>A bare <b>item</b>.</li></ul>"
                "<dl><dt>term</dt><dd>Its definition.</dd></dl><p>   </p>")
    assert S.blocks(html) == ["In a paragraph.", "A bare item .", "Its definition."]


def test_words_count_tokens_with_a_letter_or_digit():
    assert S.words("The draft gives 0.64× (95% interval 0.58 to 0.69) — slower .") == 10
    assert S.words("– · ( ) ;") == 0
    assert S.words("") == 0


def test_long_sentences_names_the_count_and_the_sentence():
    long = "W0 " + " ".join(f"w{i}" for i in range(1, 46)) + "."
    html = page(f"<p>Short one. {long} Another short.</p>")
    assert S.long_sentences(html) == [(46, long)]
    assert S.long_sentences(html, limit=46) == []
    assert S.MAX_WORDS == 45


def test_a_page_without_main_falls_back_to_the_body():
    assert S.page_sentences("<html><body><p>Body. Text.</p></body></html>") == ["Body.", "Text."]


def _notebook(*markdown):
    cells = [{"cell_type": "markdown", "source": m} for m in markdown]
    cells.insert(1, {"cell_type": "code", "source": "print('Not. Prose.')", "outputs": []})
    return {"cells": cells}


def test_notebook_prose_puts_glued_values_and_references_in_place():
    nb = _notebook("The draft gives {glue:text}`speed:.2f`× ({glue:text}`side`). "
                   "See {ref}`sec-run` and {ref}`the run <sec-run>`.",
                   "As {numref}`Chapter %s <ch-mass>` shows {cite}`a,b`, $p$ and $q$ go.\n\n"
                   "```{glue:figure} fig\nA caption. Not here.\n```\n\n- An item\n  "
                   "continues. {glue:text}`other.ipynb::key`")
    glued = {"speed": 0.6449, "side": "slower"}
    html = S.notebook_prose(nb, glued, S.section_titles(["(sec-run)=\n\n## Does it pay?\n"]))
    assert S.page_sentences(html) == [
        "The draft gives 0.64× (slower).", "See Does it pay? and the run.",
        "As Chapter 8.8 shows Author et al. 2000 Author et al. 2000, and go.",
        "An item continues. a value from another page"]


def test_notebook_prose_refuses_a_key_that_was_not_glued():
    import pytest

    with pytest.raises(KeyError, match="'speed'"):
        S.notebook_prose(_notebook("{glue:text}`speed:.2f`"), {}, {})
