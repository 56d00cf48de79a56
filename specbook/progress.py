"""Progress lines from inside a notebook to the console of the build that executes it.

A cell that runs for minutes (Appendix C's matrix of engines, Appendix F's studies) says
how far along it is with :func:`report`. ``tools/build.py`` sets ``SPECDEC_PROGRESS`` to a
file for each long (``execute: alone``) notebook it executes and prints the lines written
there as they arrive, with the notebook's name and the elapsed time. The notebook's own
outputs stay free of them: a reader's page shows results, not a log. Outside such a build
(a notebook opened in Jupyter, a test) :func:`report` does nothing.

Hand-rolled rather than a logging handler or tqdm: the kernel's standard streams are the
notebook's outputs, and the build runs in another process, so a file both can open is the
plainest channel between them.
"""

from __future__ import annotations

import os

__all__ = ["ENV", "report"]

#: The environment variable naming the file :func:`report` appends to.
ENV = "SPECDEC_PROGRESS"


def report(line: str) -> None:
    """Append ``line`` to the build's progress file, if any; a text of several lines
    becomes several lines of the console."""
    path = os.environ.get(ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("".join(part + "\n" for part in str(line).splitlines() if part.strip()))
