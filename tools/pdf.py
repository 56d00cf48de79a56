#!/usr/bin/env python3
"""Render the book as a PDF with xelatex, from the notebooks ``make book`` executed.

    python tools/pdf.py [--root DIR] [--no-install]

Data flow: ``book/chapters/*.ipynb`` (executed by tools/build.py, never re-executed here)
--jupyter-book --builder latex--> ``_build/latex/specdec-book.tex`` --latexmk (xelatex,
xindy)--> ``_build/latex/specdec-book.pdf``, copied to ``_build/pdf/`` and, when the HTML
exists, to ``_build/html/`` (the landing page links it).

* TeX: the Debian packages in :data:`APT_PACKAGES` are installed with apt-get when
  something is missing and this runs as root; otherwise the exact command is printed.
* Fails on any Sphinx warning, on any LaTeX error (the relevant lines of the log are
  shown), and on "Missing character" (xelatex silently drops glyphs its fonts lack).
* Unicode: xelatex with FreeFont for Latin/Greek text and xeCJK with Noto CJK for Chinese
  (preamble in _config.yml). Jupyter Book's class needs ``bbm.sty``: tools/latex/bbm.sty
  stands in for it (see that file).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent
NAME = "specdec-book"  # latex.latex_documents.targetname in _config.yml, without .tex

# Debian packages the PDF needs, and what each provides.
APT_PACKAGES = {
    "texlive-xetex": "xelatex",
    "latexmk": "latexmk",
    "texlive-latex-extra": "LaTeX packages of Sphinx's class (tabulary, capt-of, ...)",
    "texlive-fonts-recommended": "standard fonts",
    "texlive-lang-chinese": "xeCJK",
    "fonts-noto-cjk": "Noto CJK fonts (Chinese text)",
    "fonts-freefont-otf": "FreeSerif/FreeSans/FreeMono, Sphinx's xelatex fonts",
    "xindy": "index for xelatex",
    "poppler-utils": "pdftotext/pdftoppm (tests, page previews)",
}
COMMANDS = {"xelatex": "texlive-xetex", "latexmk": "latexmk", "xindy": "xindy",
            "kpsewhich": "texlive-xetex", "fc-list": "fontconfig"}
STYLES = {"xeCJK.sty": "texlive-lang-chinese", "tabulary.sty": "texlive-latex-extra",
          "capt-of.sty": "texlive-latex-extra", "needspace.sty": "texlive-latex-extra",
          "fncychap.sty": "texlive-latex-extra", "wrapfig.sty": "texlive-latex-extra",
          "framed.sty": "texlive-latex-extra", "changepage.sty": "texlive-latex-extra",
          "pgfplots.sty": "texlive-latex-extra", "mathrsfs.sty": "texlive-fonts-recommended"}
FONTS = {"FreeSerif": "fonts-freefont-otf", "Noto Serif CJK SC": "fonts-noto-cjk",
         "Noto Sans CJK SC": "fonts-noto-cjk"}


class PdfError(Exception):
    """A failure the user can act on; printed as is."""


def missing_packages() -> list[str]:
    """Debian packages whose commands, LaTeX styles or fonts are not found."""
    missing = set()
    for command, package in COMMANDS.items():
        if shutil.which(command) is None:
            missing.add(package)
    if shutil.which("kpsewhich"):
        for style, package in STYLES.items():
            found = subprocess.run(["kpsewhich", style], capture_output=True, text=True)
            if found.returncode != 0 or not found.stdout.strip():
                missing.add(package)
    if shutil.which("fc-list"):
        families = subprocess.run(["fc-list", ":", "family"], capture_output=True,
                                  text=True).stdout
        for font, package in FONTS.items():
            if font not in families:
                missing.add(package)
    return sorted(missing)


def ensure_tex(install: bool = True) -> None:
    """Install the missing Debian packages (as root, with apt-get) or say what to run."""
    missing = missing_packages()
    if not missing:
        return
    command = "apt-get install -y --no-install-recommends " + " ".join(sorted(APT_PACKAGES))
    can = install and shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0
    if not can:
        why = "not root" if shutil.which("apt-get") else "no apt-get on this system"
        raise PdfError(
            f"the PDF needs TeX packages that are missing here ({', '.join(missing)}); {why}, "
            f"so install them yourself:\n    sudo apt-get update && sudo {command}\n"
            "(elsewhere: TeX Live with xetex, latexmk, xindy and the collections "
            "latexextra, fontsrecommended and langchinese, plus the Noto CJK and GNU "
            "FreeFont fonts)")
    print(f"installing TeX with apt-get (missing: {', '.join(missing)}); a few minutes, once...",
          flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for step in (["apt-get", "update", "-qq"], command.split() + ["-qq"]):
        proc = subprocess.run(step, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise PdfError(f"`{' '.join(step)}` failed:\n{proc.stderr.strip()[-2000:]}")
    still = missing_packages()
    if still:
        raise PdfError(f"still missing after apt-get: {', '.join(still)}")


def latex_problems(log_text: str, context: int = 4) -> list[str]:
    """Error lines of a (xe)LaTeX log with a few lines of context, and dropped glyphs."""
    lines = log_text.splitlines()
    problems = []
    for i, line in enumerate(lines):
        if line.startswith("!") or re.match(r"^\S+\.(tex|sty|cls):\d+: ", line):
            block = lines[i:i + context + 1]
            problems.append("\n".join(block))
    missing = sorted({m.group(0) for m in re.finditer(
        r"Missing character: There is no .+? in font [^!]+!", log_text)})
    problems.extend(missing)
    return problems


def run_latex(latex_dir: Path) -> Path:
    """latexmk with xelatex in the Sphinx LaTeX directory; returns the PDF."""
    tex = latex_dir / f"{NAME}.tex"
    if not tex.exists():
        raise PdfError(f"{tex} was not written by Sphinx")
    env = dict(os.environ, LATEXOPTS="-interaction=nonstopmode -halt-on-error -file-line-error")
    command = ["latexmk", "-pdf", "-dvi-", "-ps-", "-interaction=nonstopmode",
               "-halt-on-error", "-file-line-error", tex.name]
    proc = subprocess.run(command, cwd=latex_dir, env=env, capture_output=True, text=True)
    log = latex_dir / f"{NAME}.log"
    log_text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    problems = latex_problems(log_text)
    pdf = latex_dir / f"{NAME}.pdf"
    if proc.returncode != 0 or problems or not pdf.exists():
        shown = problems or (proc.stdout + proc.stderr).strip().splitlines()[-30:]
        raise PdfError(f"LaTeX failed (log: {log}):\n" + "\n".join("  " + ln for p in shown
                                                                    for ln in p.splitlines()))
    return pdf


def build_latex(root: Path, out: Path) -> Path:
    """Sphinx's LaTeX builder through jupyter-book; warnings are errors."""
    jb = Path(sys.executable).parent / "jupyter-book"
    command = [str(jb) if jb.exists() else "jupyter-book", "build", str(root),
               "--builder", "latex", "--all", "-W", "--keep-going", "--path-output", str(out)]
    env = dict(os.environ, PYTHONHASHSEED="0")
    env["PYTHONPATH"] = os.pathsep.join([str(TOOLS)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    output = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", proc.stdout + proc.stderr)
    problems = [ln for ln in output.splitlines() if re.search(r"WARNING|ERROR|CRITICAL", ln)]
    latex_dir = out / "_build" / "latex"
    if proc.returncode != 0 or problems:
        tail = problems or output.strip().splitlines()[-25:]
        raise PdfError("jupyter-book (latex) failed (Sphinx warnings are errors):\n"
                       + "\n".join("  " + ln.replace(str(root) + os.sep, "") for ln in tail))
    return latex_dir


def check_executed(root: Path) -> None:
    """The PDF is rendered from the executed notebooks; refuse to start without them."""
    sys.path.insert(0, str(TOOLS))
    import build

    layout = build.Layout(root)
    missing = [name for name, _ in build.chapter_sources(layout)
               if not (layout.chapters / f"{name}.ipynb").exists()]
    if missing:
        raise PdfError(f"not executed yet: {', '.join(missing)}; run `make book` first "
                       "(`make pdf` does)")
    import execution_stats  # the page is generated by the build; regenerate (same content)

    execution_stats.write_page(layout.chapters, layout.root / f"{build.EXECUTION_STATS_PAGE}.md",
                               [name for name, _ in build.chapter_sources(layout)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(REPO), help="book root (default: this repository)")
    parser.add_argument("--no-install", action="store_true",
                        help="never run apt-get; only say what is missing")
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    t0 = time.perf_counter()
    try:
        check_executed(root)
        ensure_tex(install=not args.no_install)
        print("rendering LaTeX with jupyter-book...", flush=True)
        latex_dir = build_latex(root, root)
        print("running latexmk (xelatex)...", flush=True)
        pdf = run_latex(latex_dir)
    except PdfError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = root / "_build" / "pdf"
    out.mkdir(parents=True, exist_ok=True)
    final = out / pdf.name
    shutil.copyfile(pdf, final)
    html = root / "_build" / "html"
    if (html / "index.html").exists():
        shutil.copyfile(pdf, html / pdf.name)
    shown = final.relative_to(root) if Path.cwd().resolve() == root else final
    print(f"PDF ({time.perf_counter() - t0:.0f} s): {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
