#!/usr/bin/env python3
"""``make bench``: run benchmarks/bench_*.py, then time a clean build and an unchanged rebuild.

The builds run in a temporary copy of the repository's sources (tools/snapshot.py), so
the working tree's cache and _build/ are neither used nor touched.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from snapshot import copy_sources  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def timed(command: list[str], cwd: Path) -> tuple[int, float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    return proc.returncode, time.perf_counter() - t0, proc.stdout + proc.stderr


def _stop(signum, frame):
    """SIGTERM (``timeout``, ``kill``): leave through the running ``subprocess.run``, which
    then kills its benchmark or build; their servers go with them (``tools/engine.py``)."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _stop)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", default="2026")
    parser.add_argument("--trials", default="200000")
    parser.add_argument("--no-build", action="store_true", help="only run benchmarks/bench_*.py")
    args = parser.parse_args(argv)

    rows: list[tuple[str, str, float]] = []
    for script in sorted((REPO / "benchmarks").glob("bench_*.py")):
        print(f"== {script.relative_to(REPO)}", flush=True)
        code, seconds, output = timed([sys.executable, str(script)], REPO)
        print(output.rstrip())
        rows.append((script.name, "ok" if code == 0 else f"FAILED ({code})", seconds))
    if not rows:
        print("no benchmarks/*.py yet")

    if not args.no_build:
        with tempfile.TemporaryDirectory(prefix="specdec-bench-") as tmp:
            root = copy_sources(REPO, Path(tmp) / "repo")
            build = [sys.executable, str(root / "tools" / "build.py"), "--root", str(root),
                     "--seed", args.seed, "--trials", args.trials]
            for label in ("clean build", "unchanged rebuild"):
                print(f"== {label} (SEED={args.seed} TRIALS={args.trials})", flush=True)
                code, seconds, output = timed(build, root)
                print(output.rstrip())
                rows.append((label, "ok" if code == 0 else f"FAILED ({code})", seconds))

    width = max(len(name) for name, _, _ in rows) if rows else 10
    print(f"\n{'benchmark':<{width}}  {'status':<12} {'seconds':>8}")
    print(f"{'-' * width}  {'-' * 12} {'-' * 8}")
    for name, status, seconds in rows:
        print(f"{name:<{width}}  {status:<12} {seconds:>8.2f}")
    return 0 if all(status == "ok" for _, status, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
