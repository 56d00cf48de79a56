#!/usr/bin/env python3
"""Virtual environments with Hugging Face transformers at the releases the book tests.

The conformance kit's Hugging Face adapters (``specdec.conformance.hf``) are checked at
several transformers releases that span the changes of ``_speculative_sampling``'s
signature. Each release gets its own virtual environment, cached under
``~/.cache/specdec-book/hf/<release>/`` (``$SPECDEC_CACHE/hf``; ``SPECDEC_HF_ENVS``
overrides the folder), with torch (CPU build), that transformers release and this project's
runtime dependencies. The project itself is not installed there: :func:`environ` puts the
calling checkout on ``PYTHONPATH``, so every checkout (a worktree, CI's clone) runs its own
``specdec``. An environment that already answers ``import transformers`` with the right
version is reused, so a second call costs a fraction of a second.

This module is a view of the one table of pinned environments, tools/py_engines.py
(:data:`py_engines.HF`, entries ``transformers-<release>``), which builds them with uv
(pip if uv cannot be had), torch stored once for all of them.

Used by tests/test_conformance_hf.py, notebooks/a3-kit-on-real-implementations.md and
.ci/run::

    python tools/hf_envs.py            # create (or reuse) every release's environment
    python tools/hf_envs.py --print    # one line per release: release and interpreter
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import py_engines  # noqa: E402

REPO = py_engines.REPO

#: transformers releases tested (see :data:`py_engines.RELEASES`).
RELEASES = py_engines.RELEASES

#: torch build shared by every environment (the CPU wheel this machine holds).
TORCH = py_engines.TORCH

#: Pins that keep an old release importable (transformers 4.37 predates numpy 2).
EXTRA = py_engines.EXTRA

#: The environments of the releases, by release: entries of :data:`py_engines.TABLE`.
HF = py_engines.HF

#: Environment variables for running this checkout's ``specdec`` in a release's interpreter.
environ = py_engines.environ


def envs_dir() -> Path:
    """Folder holding one environment per release."""
    return py_engines.hf_envs_dir()


def python_of(release: str) -> Path:
    """Interpreter of the environment for ``release`` (which may not exist yet)."""
    return envs_dir() / release / "bin" / "python"


def _version(python: Path) -> str | None:
    """The transformers version ``python`` imports (with torch and scipy), or None."""
    return py_engines.run_probe(Path(python), py_engines.HF_PROBE, timeout=600)


def ensure(release: str, *, quiet: bool = True) -> Path:
    """Create (or reuse) the environment for ``release``; returns its interpreter.

    Raises
    ------
    ValueError
        If ``release`` is not one of :data:`RELEASES`.
    RuntimeError
        If the installer fails (its output is in ``<env>/install.log``).
    """
    if release not in RELEASES:
        raise ValueError(f"release: must be one of {', '.join(RELEASES)} (got {release!r})")
    return py_engines.ensure(HF[release].label)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--print", action="store_true", help="print release and interpreter")
    ap.add_argument("releases", nargs="*", default=list(RELEASES))
    args = ap.parse_args(argv)
    for release in args.releases:
        t0 = time.perf_counter()
        python = ensure(release)
        if args.print:
            print(release, python)
        else:
            print(f"transformers {release}: {python} ({time.perf_counter() - t0:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
