"""Sphinx extension of the book (loaded through ``sphinx.local_extensions`` in _config.yml).

Adds, on every chapter page, a download button for the chapter's source: the jupytext
Markdown file ``notebooks/NN-slug.md`` that the executed notebook was made from (its path
is recorded by tools/build.py in the notebook's ``metadata.specdec.source``). The source is
copied to ``_sources/notebooks/`` of the HTML output. The theme's own button already
offers the executed notebook (``.ipynb``).
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


def setup(app):
    # After sphinx-book-theme's handlers (default priority 500) built the buttons.
    app.connect("html-page-context", add_source_download, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
