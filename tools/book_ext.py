"""Sphinx extension of the book (loaded through ``sphinx.local_extensions`` in _config.yml).

* HTML: on every chapter page, a download button for the chapter's source, the jupytext
  Markdown file ``notebooks/NN-slug.md`` that the executed notebook was made from (its
  path is recorded by tools/build.py in the notebook's ``metadata.specdec.source``),
  copied to ``_sources/notebooks/``. The theme's own button offers the executed notebook.
* HTML: without thebe (``launch_buttons.thebe: false``), the sphinx-thebe scripts are
  left out of the pages: they only declare a CDN address, twice, which is a JavaScript
  error in the console of every page.
* PDF: the same numbering as the HTML. The HTML numbers only the documents of the
  ``numbered`` part of _toc.yml; LaTeX would number every chapter. From the first
  unnumbered document after a numbered one on (the appendices), LaTeX numbering is
  switched off (``secnumdepth`` -1), so "2.1" means the same section in both.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

SOURCES_DIR = "_sources/notebooks"


def _chapter_source(app, pagename: str) -> Path | None:
    try:
        path = Path(app.env.doc2path(pagename))
    except Exception:
        return None
    if path.suffix != ".ipynb" or not path.exists():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
    except (OSError, ValueError):
        return None
    rel = meta.get("specdec", {}).get("source")
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


def unnumbered_appendices(app, doctree, docname):
    """In the assembled LaTeX document, stop numbering at the first unnumbered chapter."""
    if app.builder.name != "latex":
        return
    from docutils import nodes
    from sphinx import addnodes

    numbered = set(getattr(app.env, "toc_secnumbers", {}) or {})
    seen_numbered = False
    for node in doctree.findall(addnodes.start_of_file):
        name = node.get("docname")
        if name in numbered and app.env.toc_secnumbers.get(name):
            seen_numbered = True
        elif seen_numbered and name != app.config.root_doc:
            node.insert(0, nodes.raw("", "\\setcounter{secnumdepth}{-1}\n", format="latex"))
            return


def setup(app):
    app.connect("doctree-resolved", unnumbered_appendices)
    app.connect("html-page-context", drop_thebe, priority=900)
    # After sphinx-book-theme's handlers (default priority 500) built the buttons.
    app.connect("html-page-context", add_source_download, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
