#!/usr/bin/env python3
"""Virtual environments with Hugging Face transformers at the releases the book tests.

The conformance kit's Hugging Face adapters (``specdec.conformance.hf``) are checked at
several transformers releases that span the changes of ``_speculative_sampling``'s
signature. Each release gets its own virtual environment, cached under
``~/.cache/specdec-book/hf/<release>/`` (``SPECDEC_HF_ENVS`` overrides the folder), with
torch (CPU build), that transformers release and this project's runtime dependencies.
The project itself is not installed there: :func:`environ` puts the calling checkout on
``PYTHONPATH``, so every checkout (a worktree, CI's clone) runs its own ``specdec``. An environment that already answers ``import transformers`` with the right
version is reused, so a second call costs a fraction of a second.

Used by tests/test_conformance_hf.py, notebooks/a3-kit-on-real-implementations.md and
.ci/run::

    python tools/hf_envs.py            # create (or reuse) every release's environment
    python tools/hf_envs.py --print    # one line per release: release and interpreter
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: transformers releases tested, one per minor series whose assisted-generation code
#: changed in a way the kit can see (tools/hf_series.py finds and records them): 4.37
#: (``_speculative_sampling(..., last_assistant_token_is_eos, max_matches)``), 4.40
#: (``is_done_candidate``, no ``max_matches``), 4.46 (the assistant with a different
#: tokenizer), 4.57 (the last 4.x), 5.0 (``_assisted_decoding`` rewritten), 5.14
#: (``assistant_ensemble_weight``), 5.18 (end-of-sequence handling moved to the caller),
#: and the newest.
RELEASES = ("4.37.2", "4.40.2", "4.46.3", "4.57.6", "5.0.0", "5.14.1", "5.18.0", "5.24.0")

#: torch build shared by every environment (pip takes the CPU wheel this machine holds).
TORCH = "torch==2.13.0"

#: Pins that keep an old release importable (transformers 4.37 predates numpy 2).
EXTRA = {"4.37.2": ["numpy<2"]}


def envs_dir() -> Path:
    """Folder holding one environment per release."""
    default = Path.home() / ".cache" / "specdec-book" / "hf"
    return Path(os.environ.get("SPECDEC_HF_ENVS", default))


def python_of(release: str) -> Path:
    """Interpreter of the environment for ``release`` (which may not exist yet)."""
    return envs_dir() / release / "bin" / "python"


def _version(python: Path) -> str | None:
    if not python.exists():
        return None
    proc = subprocess.run([str(python), "-c", "import transformers, torch, scipy; "
                           "print(transformers.__version__)"], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def ensure(release: str, *, quiet: bool = True) -> Path:
    """Create (or reuse) the environment for ``release``; returns its interpreter.

    Raises
    ------
    ValueError
        If ``release`` is not one of :data:`RELEASES`.
    RuntimeError
        If pip fails (its output is in ``<env>/pip.log``).
    """
    if release not in RELEASES:
        raise ValueError(f"release: must be one of {', '.join(RELEASES)} (got {release!r})")
    python = python_of(release)
    if _version(python) == release:
        return python
    env = python.parents[1]
    print(f"creating the environment of transformers {release} (pip; log {env / 'pip.log'}; "
          f"cached afterwards)", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    log = env / "pip.log"
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", TORCH,
           f"transformers=={release}", "numpy", "scipy", "matplotlib", *EXTRA.get(release, [])]
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"pip failed for transformers {release}; see {log}")
    found = _version(python)
    if found != release:
        raise RuntimeError(f"environment for transformers {release} imports {found!r}; see {log}")
    return python


def environ() -> dict[str, str]:
    """Environment variables for running this checkout's ``specdec`` in a release's interpreter."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env


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
