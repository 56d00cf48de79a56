"""Sphinx extension of the book (loaded through ``sphinx.local_extensions`` in _config.yml).

* HTML: on every chapter page, a download button for the chapter's source, the jupytext
  Markdown file ``notebooks/NN-slug.md`` that the executed notebook was made from (its
  path is recorded by tools/build.py in the notebook's ``metadata.specdec.source``),
  copied to ``_sources/notebooks/``. The theme's own button offers the executed notebook.
* HTML: without thebe (``launch_buttons.thebe: false``), the sphinx-thebe scripts are
  left out of the pages: they only declare a CDN address, twice, which is a JavaScript
  error in the console of every page.
* HTML and PDF: the note at the top of every chapter ("This page was executed with seed
  ...") gets the command that re-executes that chapter alone and how long its execution
  took in this build (``metadata.specdec.seconds``, written by tools/build.py).
* HTML and PDF: the provenance box that closes every chapter names the lock file of the
  exact versions of the environment (``requirements-lock.txt`` at the root of the
  repository, published next to the HTML pages and linked from the box).
* The repository address is one setting, ``repository.url`` in _config.yml. Pages write
  ``@REPOSITORY_URL@`` and ``@BOOK_URL@`` (the GitHub Pages address derived from it) and
  ``@PLACEHOLDER_NOTE@``; they are replaced before parsing, code blocks included. While
  ``specdec_repository_placeholder`` is true (the address is not yet a published
  repository), the note says so and chapter pages get no Binder/Colab launch buttons
  (they would open a repository that does not exist).
* The edition: the citing page writes ``@EDITION@`` (the version, "unreleased build"
  unless the version's tag ``vX.Y.Z`` points at the built commit of a clean tree),
  ``@COMMIT@`` and ``@EDITION_NOTE@`` (a warning when the build is not a released edition),
  filled in from git (specbook.provenance.Edition). ``@BOOK_EXECUTION_TIME@`` (the
  landing page) is the sum of the executed chapters' run times in this build.
* Heading permalinks: a section with an explicit label (``(sec-mass-rule)=``) has the
  label as its first id, so the ``#`` link next to its heading is ``#sec-mass-rule``, the
  address the citing page tells readers to use, not one made from the heading's words.
* Appendices: the executed notebooks of the unnumbered part of _toc.yml are lettered A,
  B, C, ... in reading order (``tools/labels.py``, :func:`labels.appendix_letters`). In
  the HTML, their headings, the sidebar and ``{numref}`` read "A", "A.1", "A.1.2", and
  their tables, figures and equations are numbered per appendix (Table A.1, Fig. B.2),
  as a chapter's are per chapter. The other unnumbered pages (bibliography, citing...)
  stay unnumbered; their tables and figures are numbered 1, 2, ... across those pages.
* PDF: the same numbering as the HTML. LaTeX would number every chapter 1, 2, ...: before
  each appendix the LaTeX starts an appendix (``\\specdecappendix``: "Appendix A",
  sections A.1, Table A.1), and before each other unnumbered page it switches numbering
  off (``\\specdecunnumbered``: ``secnumdepth`` -1, tables and figures 1, 2, ... across
  those pages), so "2.1", "A.3" and "Table B.2" mean the same thing in both.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

SOURCES_DIR = "_sources/notebooks"


RUN_NOTE = "This page was executed with"  # specbook.provenance.run_parameters_markdown


def _build_metadata(app, pagename: str) -> dict:
    """``metadata.specdec`` of an executed chapter notebook (tools/build.py), or {}."""
    try:
        path = Path(app.env.doc2path(pagename))
    except Exception:
        return {}
    if path.suffix != ".ipynb" or not path.exists():
        return {}
    try:
        meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
    except (OSError, ValueError):
        return {}
    return meta.get("specdec", {}) or {}


def _chapter_source(app, pagename: str) -> Path | None:
    rel = _build_metadata(app, pagename).get("source")
    if not rel:
        return None
    source = Path(app.confdir) / rel
    return source if source.is_file() else None


def add_source_download(app, pagename, templatename, context, doctree):
    """Append a ".md (source)" entry to the theme's download menu of a chapter page."""
    if app.builder.format != "html" or doctree is None:
        return
    source = _chapter_source(app, pagename)
    if source is None:
        return
    target = Path(app.outdir) / SOURCES_DIR / source.name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    url = f"{context['pathto'](SOURCES_DIR, 1)}/{source.name}"
    for group in context.get("header_buttons", []):
        if group.get("label") == "download-buttons":
            group["buttons"].insert(1, {
                "type": "link",
                "url": url,
                "text": ".md (source)",
                "tooltip": "Download the chapter's source (jupytext Markdown)",
                "icon": "fas fa-file-lines",
                "label": "download-chapter-source-button",
            })


def drop_thebe(app, pagename, templatename, context, doctree):
    """Remove sphinx-thebe's scripts when thebe is off (nothing would use them)."""
    launch = (app.config.html_theme_options or {}).get("launch_buttons", {}) or {}
    if launch.get("thebe"):
        return
    scripts = context.get("script_files")
    if not scripts:
        return
    keep = []
    for script in scripts:
        filename = getattr(script, "filename", None) or str(script)
        body = (getattr(script, "attributes", None) or {}).get("body", "")
        if "THEBE_JS_URL" in body or str(filename).endswith("sphinx-thebe.js"):
            continue
        keep.append(script)
    context["script_files"] = keep
    context["css_files"] = [css for css in context.get("css_files", [])
                            if not str(getattr(css, "filename", css)).endswith("sphinx-thebe.css")]


def _provenance_record(app, pagename: str) -> dict | None:
    """The provenance record the chapter's last cell attached to its output, or None."""
    import execution_stats  # tools/execution_stats.py, next to this file

    try:
        path = Path(app.env.doc2path(pagename))
        return execution_stats._provenance(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def rerun_one_chapter(app, doctree):
    """Add to a chapter's run note the ``make chapter`` command and this build's time.

    The time is the provenance box's (from the run note to the box, the same measurement
    and the same format), then the notebook's whole run with the kernel's start, which
    the execution-statistics page lists; without a provenance record, the latter only.
    """
    from docutils import nodes

    meta = _build_metadata(app, app.env.docname)
    source, seconds = meta.get("source"), meta.get("seconds")
    if not source or seconds is None:
        return
    name = Path(source).stem
    duration = _provenance_module()._duration_text
    record = _provenance_record(app, app.env.docname) or {}
    for note in doctree.findall(nodes.Admonition):
        if RUN_NOTE not in note.astext():
            continue
        if isinstance(record.get("duration"), (int, float)):
            took = (f"its execution took {duration(record['duration'])} in this build, as the "
                    f"provenance box at its end says; {duration(seconds)} with the kernel's start")
        else:
            took = f"its execution took {duration(seconds)} in this build"
        note += nodes.paragraph("", "", nodes.Text("This chapter alone: "),
                                nodes.literal(text=f"make chapter NAME={name} SEED=<int>"),
                                nodes.Text(f" ({took})."))
        return


LOCK_FILE = "requirements-lock.txt"  # exact versions (make lock), next to _config.yml


def link_lock_file(app, doctree):
    """Append to a chapter's provenance box where the exact versions are."""
    from docutils import nodes

    if not (Path(app.confdir) / LOCK_FILE).is_file():
        return
    for box in doctree.findall(nodes.Admonition):
        if "provenance" not in box.get("classes", []):
            continue
        if app.builder.format == "html":
            up = "../" * app.env.docname.count("/")
            name = nodes.reference("", "", nodes.literal(text=LOCK_FILE), refuri=up + LOCK_FILE)
        else:
            name = nodes.literal(text=LOCK_FILE)
        box += nodes.paragraph("", "", nodes.Text("Exact versions of every package of this "
                                                  "environment: "), name,
                               nodes.Text(" (in the repository; pip install -c it)."))


def publish_lock_file(app, exception):
    """Copy the lock file next to the HTML pages (the provenance boxes link to it)."""
    source = Path(app.confdir) / LOCK_FILE
    if exception is None and app.builder.format == "html" and source.is_file():
        shutil.copyfile(source, Path(app.outdir) / LOCK_FILE)


PLACEHOLDER_NOTE = """:::{important}
The repository and web addresses on this page are placeholders: this version of the book
has not been published at them yet. Until it is, cite the book by title, version and the
commit named in a chapter's provenance box.
:::"""


def repository_urls(app) -> tuple[str, str]:
    """(repository address, address of the published pages) from ``repository.url``."""
    repo = (app.config.html_theme_options or {}).get("repository_url", "").rstrip("/")
    parts = repo.split("github.com/", 1)[-1].split("/") if "github.com/" in repo else []
    site = f"https://{parts[0]}.github.io/{parts[1]}/" if len(parts) >= 2 else repo + "/"
    return repo, site


def _provenance_module():
    """specbook/provenance.py of this repository, loaded by path (the Sphinx process
    may have another copy of specdec on its path, or none)."""
    import importlib.util
    import sys

    name = "_specdec_book_provenance"
    if name not in sys.modules:
        path = Path(__file__).resolve().parent.parent / "specbook" / "provenance.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def book_version(root: Path) -> str | None:
    """The version in ``pyproject.toml`` at the book's root (None without one)."""
    import tomllib

    path = Path(root) / "pyproject.toml"
    if not path.is_file():
        return None
    return tomllib.loads(path.read_text(encoding="utf-8")).get("project", {}).get("version")


def build_edition(root: Path) -> dict[str, str]:
    """What the citing page says of this build's edition: ``label`` (BibTeX ``edition``),
    ``commit`` and ``note`` (specbook.provenance.Edition). Also part of the render
    fingerprint of tools/build.py, so a new commit renders the pages again."""
    provenance = _provenance_module()
    edition = provenance.edition_of(root, book_version(root))
    return {"label": edition.label, "commit": edition.commit,
            "note": provenance.edition_markdown(edition)}


def execution_time_text(root: Path) -> str:
    """The whole book's execution time in this build, e.g. ``"17.2 minutes"``: the sum of
    the run times of the executed notebooks of _toc.yml (``metadata.specdec.seconds``,
    written by tools/build.py; the execution-statistics page lists them), or
    ``"an unknown time"`` when no notebook records one."""
    import execution_stats  # tools/execution_stats.py, next to this file
    import labels

    toc = Path(root) / "_toc.yml"
    seconds = []
    for document, _ in (labels.toc_pages(toc) if toc.is_file() else []):
        path = Path(root) / f"{document}.ipynb"
        if document.startswith("book/chapters/") and path.is_file():
            seconds.append(execution_stats.notebook_row(path)["seconds"])
    known = [s for s in seconds if s is not None]
    if not known:
        return "an unknown time"
    total = sum(known)
    return f"{total / 60:.1f} minutes" if total >= 90 else f"{total:.0f} seconds"


def substitute_addresses(app, docname, source):
    """Write the repository setting and the edition of this build into every page, code
    blocks included (``@EDITION@``, ``@COMMIT@``, ``@EDITION_NOTE@``)."""
    text = source[0]
    if "@" not in text:
        return
    repo, site = repository_urls(app)
    note = PLACEHOLDER_NOTE if app.config.specdec_repository_placeholder else ""
    text = (text.replace("@REPOSITORY_URL@", repo).replace("@BOOK_URL@", site)
            .replace("@PLACEHOLDER_NOTE@", note))
    if "@BOOK_EXECUTION_TIME@" in text:
        text = text.replace("@BOOK_EXECUTION_TIME@", execution_time_text(Path(app.confdir)))
    if "@EDITION" in text or "@COMMIT@" in text:
        edition = getattr(app, "specdec_edition", None)
        if edition is None:
            edition = app.specdec_edition = build_edition(Path(app.confdir))
        text = (text.replace("@EDITION_NOTE@", edition["note"])
                .replace("@EDITION@", edition["label"]).replace("@COMMIT@", edition["commit"]))
    source[0] = text


def drop_placeholder_launch_buttons(app, pagename, templatename, context, doctree):
    """No Binder/Colab buttons while the repository address is a placeholder."""
    if not app.config.specdec_repository_placeholder:
        return
    context["header_buttons"] = [group for group in context.get("header_buttons", [])
                                 if group.get("label") != "launch-buttons"]


def labels_as_permalinks(app, doctree):
    """Put a section's explicit label first among its ids (the headerlink uses ids[0])."""
    from docutils import nodes

    for section in doctree.findall(nodes.section):
        labels = [doctree.nameids.get(name) for name in section["names"]
                  if doctree.nametypes.get(name)]
        labels = [i for i in labels if i and i in section["ids"]]
        if labels and section["ids"][0] != labels[0]:
            section["ids"].remove(labels[0])
            section["ids"].insert(0, labels[0])


def _appendix_letters(app) -> dict[str, str]:
    """Document name to appendix letter, from the book's _toc.yml."""
    import labels  # tools/labels.py, next to this file

    toc = Path(app.confdir) / "_toc.yml"
    return labels.appendix_letters(labels.toc_pages(toc)) if toc.is_file() else {}


def _number_local_toc(node, letter: str, stack: list[int], secnums: dict) -> None:
    """Number a document's local toc (env.tocs) under ``letter``: title (letter,), its
    sections (letter, 1), (letter, 1, 1)... as Sphinx numbers a chapter's."""
    from docutils import nodes
    from sphinx import addnodes

    if isinstance(node, nodes.bullet_list):
        stack.append(0)
        for sub in node.children:
            _number_local_toc(sub, letter, stack, secnums)
        stack.pop()
    elif isinstance(node, (nodes.list_item, addnodes.only)):
        for sub in node.children:
            _number_local_toc(sub, letter, stack, secnums)
    elif isinstance(node, addnodes.compact_paragraph) and node.children and stack:
        stack[-1] += 1
        number = (letter, *stack[1:])
        reference = node[0]
        secnums[reference["anchorname"]] = number
        reference["secnumber"] = number


def letter_appendices(app, env):
    """Section numbers A, A.1, ... for the appendices, then the figure numbers again.

    Runs after Sphinx's toctree collector (``env-get-updated``), which numbered the
    numbered part only and every table and figure of the unnumbered part in one series.
    Returns the documents whose numbers changed (Sphinx writes them again).
    """
    from sphinx.environment.collectors.toctree import TocTreeCollector

    letters = _appendix_letters(app)
    changed = []
    for docname, letter in letters.items():
        if docname not in env.tocs:
            continue
        secnums: dict = {}
        _number_local_toc(env.tocs[docname], letter, [], secnums)
        if docname in env.titles:
            env.titles[docname]["secnumber"] = (letter,)
        if env.toc_secnumbers.get(docname) != secnums:
            changed.append(docname)
        env.toc_secnumbers[docname] = secnums
    if not letters:
        return []
    # Sphinx's own numbering pass over the whole toc, now that the appendices have section
    # numbers: their tables and figures get A.1, A.2, ... (it uses only ``env``).
    changed += TocTreeCollector.assign_figure_numbers(TocTreeCollector(), env)
    return sorted(set(changed))


LATEX_APPENDIX_MACROS = r"""
% Appendices A, B, ... (tools/book_ext.py): \specdecappendix{N} starts appendix number N
% (chapter "Appendix A", sections A.1, Table A.1, Fig. A.1, equation (A.1)), and
% \specdecunnumbered starts a page without numbers (tables and figures 1, 2, ... across
% all such pages), as in the HTML. Distinct hyperref targets for every numbered thing.
\makeatletter
\newif\ifspecdec@unnumbered
\newcount\specdec@figures \newcount\specdec@tables \newcount\specdec@equations
\newcommand\specdec@keepsecnumdepth{\ifdefined\specdec@secnumdepth\else
  \xdef\specdec@secnumdepth{\the\value{secnumdepth}}\fi}
\newcommand\specdecappendix[1]{\specdec@keepsecnumdepth
  \ifspecdec@unnumbered  % keep the series of the unnumbered pages for the next one
    \global\specdec@figures=\value{figure}\global\specdec@tables=\value{table}%
    \global\specdec@equations=\value{equation}%
  \fi
  \global\specdec@unnumberedfalse
  \setcounter{secnumdepth}{\specdec@secnumdepth}%
  \setcounter{chapter}{\numexpr#1-1\relax}%
  \gdef\thechapter{\Alph{chapter}}\gdef\@chapapp{\appendixname}%
  \ifdefined\inapptrue\global\let\ifinapp\iftrue\fi  % fncychap: "Appendix A", not "One"
  \gdef\theHchapter{appendix.\Alph{chapter}}%
  \gdef\thefigure{\thechapter.\arabic{figure}}\gdef\thetable{\thechapter.\arabic{table}}%
  \gdef\theequation{\thechapter.\arabic{equation}}%
  \gdef\theliteralblock{\thechapter.\arabic{literalblock}}%
  \gdef\theHfigure{\theHchapter.\arabic{figure}}\gdef\theHtable{\theHchapter.\arabic{table}}%
  \gdef\theHequation{\theHchapter.\arabic{equation}}}
\newcommand\specdecunnumbered{\specdec@keepsecnumdepth
  \setcounter{secnumdepth}{-1}%
  \ifspecdec@unnumbered\else  % resume the series of the unnumbered pages
    \setcounter{figure}{\specdec@figures}\setcounter{table}{\specdec@tables}%
    \setcounter{equation}{\specdec@equations}%
  \fi
  \global\specdec@unnumberedtrue
  \gdef\thefigure{\arabic{figure}}\gdef\thetable{\arabic{table}}%
  \gdef\theequation{\arabic{equation}}\gdef\theliteralblock{\arabic{literalblock}}%
  \gdef\theHfigure{unnumbered.\arabic{figure}}\gdef\theHtable{unnumbered.\arabic{table}}%
  \gdef\theHequation{unnumbered.\arabic{equation}}}
\makeatother
"""


def latex_appendix_macros(app, config):
    """Add the LaTeX macros of the appendix numbering to the preamble."""
    elements = dict(config.latex_elements or {})
    elements["preamble"] = elements.get("preamble", "") + LATEX_APPENDIX_MACROS
    config.latex_elements = elements


def number_latex_appendices(app, doctree, docname):
    """In the assembled LaTeX document, letter the appendices and unnumber the other
    pages after the numbered part (see the module docstring)."""
    if app.builder.name != "latex":
        return
    from docutils import nodes
    from sphinx import addnodes

    letters = list(_appendix_letters(app))
    numbered = {name for name, numbers in (getattr(app.env, "toc_secnumbers", {}) or {}).items()
                if numbers and name not in letters}
    seen_numbered = False
    for node in doctree.findall(addnodes.start_of_file):
        name = node.get("docname")
        if name in numbered:
            seen_numbered = True
        elif name in letters:
            raw = f"\\specdecappendix{{{letters.index(name) + 1}}}\n"
            node.insert(0, nodes.raw("", raw, format="latex"))
        elif seen_numbered and name != app.config.root_doc:
            node.insert(0, nodes.raw("", "\\specdecunnumbered\n", format="latex"))


def setup(app):
    app.add_config_value("specdec_repository_placeholder", True, "env", [bool])
    app.connect("source-read", substitute_addresses)
    app.connect("doctree-read", labels_as_permalinks, priority=100)  # before the toc collector
    app.connect("doctree-read", rerun_one_chapter)
    app.connect("doctree-read", link_lock_file)
    app.connect("build-finished", publish_lock_file)
    app.connect("html-page-context", drop_placeholder_launch_buttons, priority=900)
    app.connect("env-get-updated", letter_appendices, priority=900)  # after the toc collector
    app.connect("config-inited", latex_appendix_macros)
    app.connect("doctree-resolved", number_latex_appendices)
    app.connect("html-page-context", drop_thebe, priority=900)
    # After sphinx-book-theme's handlers (default priority 500) built the buttons.
    app.connect("html-page-context", add_source_download, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
