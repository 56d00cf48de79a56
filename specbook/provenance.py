"""Records of an execution: the parameters a chapter ran with, and where and how it ran.

Two displays, both produced while a chapter notebook executes (never when the book is
rendered), so that a page always describes the run that made its numbers:

- :func:`show_run_parameters` at the top of a chapter: the seed and trials.
- :func:`show_provenance` as the last cell: seed, trials, library version, git commit (and
  whether the working tree had uncommitted changes), Python and key package versions,
  execution date and duration.

:func:`show_provenance` also attaches a machine-readable copy of the record to the
metadata of its output (key :data:`PROVENANCE_MIME`), which the build reads to write the
book's execution-statistics page; renderers ignore output metadata.

Nothing here is part of the notebook's source or parameters, so recording provenance never
changes the fingerprint that decides whether a notebook must be executed again.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import importlib.metadata
import platform
import subprocess
import sys
import time
from pathlib import Path

#: Key of the JSON record that :func:`show_provenance` puts in its output's metadata.
PROVENANCE_MIME = "application/vnd.specdec.provenance+json"

#: Distributions whose versions every provenance record lists (when installed).
KEY_PACKAGES: tuple[str, ...] = ("numpy", "scipy", "matplotlib")

#: Further distributions listed only when the chapter actually imported them.
OPTIONAL_PACKAGES: tuple[str, ...] = ("torch", "transformers", "pandas")

# Wall-clock start of the run: set when this module is first imported, reset by
# show_run_parameters (the second cell of every chapter).
_RUN_STARTED: float = time.time()


@dataclasses.dataclass(frozen=True)
class GitState:
    """The commit a run was executed from.

    Attributes
    ----------
    commit : str or None
        Full hash of ``HEAD``, or None outside a git work tree (or without git).
    dirty : bool or None
        True when tracked files differed from ``HEAD`` (the definition of
        ``git describe --dirty``); None when unknown.
    """

    commit: str | None
    dirty: bool | None

    @property
    def short(self) -> str:
        """Twelve-character hash, ``+dirty`` appended when the tree had changes."""
        if self.commit is None:
            return "unknown"
        return self.commit[:12] + ("+dirty" if self.dirty else "")


@dataclasses.dataclass(frozen=True)
class Provenance:
    """Everything needed to say how a page's numbers were produced.

    Attributes
    ----------
    seed : int
        Seed of the run (papermill parameter).
    trials : int or None
        Monte Carlo trials per experiment, when the chapter samples.
    specdec_version : str
        Version of the library that computed the results.
    git : GitState
        Commit of the repository holding the library.
    python : str
        Python version and implementation, e.g. ``"3.11.7 (CPython)"``.
    platform : str
        Operating system and machine, e.g. ``"Linux-6.1-x86_64"``.
    packages : dict of str to str
        Versions of :data:`KEY_PACKAGES` (and imported :data:`OPTIONAL_PACKAGES`).
    started : str
        Start of the execution, ISO 8601 in UTC, to the second.
    finished : str
        End of the execution (the moment of the call), ISO 8601 in UTC.
    duration : float
        ``finished - started`` in seconds (>= 0).
    released : bool or None
        True when the commit is the release of ``specdec_version`` (its tag, a clean tree:
        :class:`Edition`), False otherwise, None when not recorded.
    """

    seed: int
    trials: int | None
    specdec_version: str
    git: GitState
    python: str
    platform: str
    packages: dict[str, str]
    started: str
    finished: str
    duration: float
    released: bool | None = None

    def as_dict(self) -> dict:
        """A JSON-serialisable copy (the record attached to the notebook output)."""
        data = dataclasses.asdict(self)
        data["git"]["short"] = self.git.short
        return data


def git_state(path: str | Path | None = None, *, timeout: float = 10.0) -> GitState:
    """Commit and dirtiness of the git work tree containing ``path``.

    Parameters
    ----------
    path : str or Path, optional
        A file or directory inside the work tree; default: the directory holding the
        ``specdec`` package.
    timeout : float
        Seconds allowed to each git command.

    Returns
    -------
    GitState
        ``GitState(None, None)`` when git is missing or ``path`` is not in a work tree
        (e.g. an installed wheel on Colab): provenance degrades, it never fails.
    """
    where = _work_tree_dir(path)
    commit = _git(where, timeout, "rev-parse", "--verify", "HEAD")
    if not commit:
        return GitState(None, None)
    status = _git(where, timeout, "status", "--porcelain", "--untracked-files=no")
    return GitState(commit, None if status is None else bool(status))


def _work_tree_dir(path: str | Path | None) -> Path:
    where = Path(path) if path is not None else Path(__file__).resolve().parent
    return where.parent if where.is_file() else where


def _git(where: Path, timeout: float, *args: str) -> str | None:
    """Output of a git command run in ``where``, or None if git or the command failed."""
    try:
        proc = subprocess.run(["git", "-C", str(where), *args], capture_output=True,
                              text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def release_tag(version: str) -> str:
    """The git tag of a released version: ``v`` and the version, e.g. ``v0.1.0``."""
    return f"v{version}"


@dataclasses.dataclass(frozen=True)
class Edition:
    """Which edition of the book a build is, for citing it.

    A released edition is a commit that the tag ``v<version>`` points at, built from a
    clean working tree; any other build (the main branch between releases, a local
    change) holds content that no released edition has, and is cited by its commit.

    Attributes
    ----------
    version : str
        The version of ``pyproject.toml`` (the last one released, or the one being prepared).
    git : GitState
        The commit the build was made from.
    tagged : bool
        True when :func:`release_tag` of ``version`` points at ``git.commit``.
    """

    version: str
    git: GitState
    tagged: bool

    @property
    def released(self) -> bool:
        """True for a released edition: the version's tag at this commit, a clean tree."""
        return self.tagged and self.git.commit is not None and self.git.dirty is False

    @property
    def label(self) -> str:
        """The edition as BibTeX's ``edition`` field gives it: ``0.1.0`` when released,
        ``0.1.0, unreleased build`` otherwise (the commit says which)."""
        return self.version if self.released else f"{self.version}, unreleased build"

    @property
    def commit(self) -> str:
        """Twelve-character commit (``+dirty`` with uncommitted changes), or ``unknown``."""
        return self.git.short


def edition_of(path: str | Path | None = None, version: str | None = None, *,
               timeout: float = 10.0) -> Edition:
    """The edition of the work tree containing ``path``.

    Parameters
    ----------
    path : str or Path, optional
        A file or directory of the book's repository (default: this package's directory).
    version : str, optional
        The book's version (default: the version of the installed ``specdec``).
    timeout : float
        Seconds allowed to each git command.

    Returns
    -------
    Edition
        Not released when git is missing or ``path`` is outside a work tree.

    Raises
    ------
    ValueError
        If ``version`` is empty or contains whitespace.
    """
    version = _library_version() if version is None else version
    if not isinstance(version, str) or not version or any(c.isspace() for c in version):
        raise ValueError(f"version: must be a non-empty version string such as '0.1.0' "
                         f"(got {version!r})")
    where = _work_tree_dir(path)
    state = git_state(where, timeout=timeout)
    tags = _git(where, timeout, "tag", "--points-at", "HEAD") if state.commit else None
    return Edition(version, state, release_tag(version) in (tags or "").split())


def edition_markdown(edition: Edition) -> str:
    """The note of the citing page on the edition of this build (MyST admonition).

    Parameters
    ----------
    edition : Edition
        From :func:`edition_of`.

    Returns
    -------
    str
        For a released edition, a note naming it and its commit; otherwise a warning that
        this build is not a released edition and is to be cited by its commit.
    """
    tag = release_tag(edition.version)
    if edition.released:
        return (":::{note}\n"
                f"This is the released edition {edition.version} of the book (tag `{tag}`, "
                f"commit `{edition.commit}`).\n:::")
    if edition.git.commit is None:
        where = "it was not built from a git work tree, so its commit is unknown"
    elif not edition.tagged:
        where = f"no tag `{tag}` points at its commit `{edition.git.short.split('+')[0]}`"
    else:
        where = f"its commit `{edition.git.commit[:12]}` is tagged `{tag}`"
    if edition.git.dirty:
        where += ", and it was built with uncommitted changes"
    return (":::{warning}\n"
            f"This build is not a released edition: {where}. It may hold changes made after "
            f"version {edition.version} (see the unreleased section of the changelog): "
            "cite it with its commit, as the entries below do.\n:::")


def package_versions(names: tuple[str, ...] = KEY_PACKAGES,
                     optional: tuple[str, ...] = OPTIONAL_PACKAGES) -> dict[str, str]:
    """Installed versions of ``names``, plus those of ``optional`` already imported.

    Returns
    -------
    dict of str to str
        Distribution name to version; ``"not installed"`` for a missing name of ``names``.
    """
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    for name in optional:
        if name in sys.modules:
            try:
                versions[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                continue
    return versions


def _library_version() -> str:
    from specdec import __version__

    return __version__


def _as_timestamp(started: float | _dt.datetime | None) -> float:
    if started is None:
        return _RUN_STARTED
    if isinstance(started, _dt.datetime):
        if started.tzinfo is None:
            raise ValueError("started: a datetime must be timezone-aware (e.g. UTC)")
        return started.timestamp()
    if isinstance(started, bool) or not isinstance(started, (int, float)):
        raise ValueError(f"started: expected seconds since the epoch (time.time()) or an "
                         f"aware datetime (got {type(started).__name__})")
    value = float(started)
    if not value == value or value in (float("inf"), float("-inf")) or value < 0:
        raise ValueError(f"started: must be a finite, non-negative time.time() value (got {value})")
    return value


def _iso(timestamp: float) -> str:
    moment = _dt.datetime.fromtimestamp(timestamp, tz=_dt.timezone.utc)
    return moment.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def collect_provenance(*, seed: int, trials: int | None = None,
                       started: float | _dt.datetime | None = None,
                       now: float | None = None) -> Provenance:
    """Gather the record of the current run.

    Parameters
    ----------
    seed : int
        Seed the chapter ran with; a non-negative integer.
    trials : int or None
        Monte Carlo trials per experiment; an integer >= 1 when given.
    started : float, datetime or None
        Start of the execution: ``time.time()`` taken in the first cells, or an aware
        datetime. Default: the moment :func:`show_run_parameters` ran (or this module was
        imported), which is the start of the chapter in the book's notebooks.
    now : float or None
        End of the execution (``time.time()``); default: now. For tests.

    Returns
    -------
    Provenance

    Raises
    ------
    ValueError
        ``seed`` negative or not an integer, ``trials`` < 1, ``started`` not a finite time,
        or ``started`` later than ``now``.

    Examples
    --------
    >>> record = collect_provenance(seed=7, trials=100, started=0.0, now=2.5)
    >>> record.duration, record.started, record.finished
    (2.5, '1970-01-01T00:00:00Z', '1970-01-01T00:00:02Z')
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: must be a non-negative integer (got {seed!r})")
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int) or trials < 1):
        raise ValueError(f"trials: must be an integer >= 1 (got {trials!r})")
    t0 = _as_timestamp(started)
    t1 = time.time() if now is None else float(now)
    if t1 < t0:
        raise ValueError(f"started: later than the end of the run ({t0} > {t1})")
    version = _library_version()
    edition = edition_of(version=version)
    return Provenance(
        seed=seed,
        trials=trials,
        specdec_version=version,
        git=edition.git,
        python=f"{platform.python_version()} ({platform.python_implementation()})",
        platform=f"{platform.system()}-{platform.release()}-{platform.machine()}",
        packages=package_versions(),
        started=_iso(t0),
        finished=_iso(t1),
        duration=round(t1 - t0, 3),
        released=edition.released,
    )


def _duration_text(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)} min {rest:.0f} s"


def provenance_markdown(record: Provenance) -> str:
    """The provenance box that closes every chapter, as a MyST admonition.

    Parameters
    ----------
    record : Provenance
        From :func:`collect_provenance`.

    Returns
    -------
    str
        A ``{admonition}`` block with class ``provenance`` and one bullet per fact.
    """
    commit = "unknown (not run from a git work tree)"
    if record.git.commit is not None:
        state = {True: "with uncommitted changes", False: "clean working tree",
                 None: "state unknown"}[record.git.dirty]
        commit = f"`{record.git.commit[:12]}` ({state})"
    trials = f"`{record.trials:,}`" if record.trials is not None else "none (exact computation)"
    packages = ", ".join(f"{name} {version}" for name, version in record.packages.items())
    edition = {True: " (released edition)", False: " (not a released edition: the commit may "
               "hold changes made after this version)", None: ""}[record.released]
    lines = [
        ":::{admonition} Provenance of this page",
        ":class: provenance note",
        "",
        f"- **Parameters:** seed `{record.seed}`, trials {trials}",
        f"- **Library:** specdec {record.specdec_version}{edition}, commit {commit}",
        f"- **Environment:** Python {record.python} on {record.platform}; {packages}",
        f"- **Executed:** {record.started.replace('T', ' ').rstrip('Z')} UTC, in {_duration_text(record.duration)}",
        "",
        "Re-execute with another seed: `make book SEED=<int>`.",
        ":::",
    ]
    return "\n".join(lines)


def show_provenance(*, seed: int, trials: int | None = None,
                    started: float | _dt.datetime | None = None) -> None:
    """Display the provenance box (the last cell of every chapter).

    The output carries the Markdown box and, in its metadata under
    :data:`PROVENANCE_MIME`, the record as JSON for the execution-statistics page.

    Parameters
    ----------
    seed, trials, started
        As in :func:`collect_provenance`.

    Use :func:`collect_provenance` to get the record as an object; this function returns
    None so that, as the last line of a cell, it displays nothing else.
    """
    from IPython.display import display

    record = collect_provenance(seed=seed, trials=trials, started=started)
    display({"text/markdown": provenance_markdown(record),
             "text/plain": f"Provenance(seed={seed}, trials={trials}, commit={record.git.short})"},
            metadata={PROVENANCE_MIME: record.as_dict()}, raw=True)


def run_parameters_markdown(*, seed: int, trials: int | None = None) -> str:
    """Markdown for the note at the top of every chapter.

    Parameters
    ----------
    seed : int
        The seed the chapter was executed with (papermill parameter).
    trials : int or None
        Monte Carlo trials per experiment, if the chapter samples.

    Returns
    -------
    str
        A one-paragraph MyST admonition.
    """
    parts = [f"seed = `{seed}`"]
    if trials is not None:
        parts.append(f"trials = `{trials:,}`")
    return (
        ":::{note}\n"
        f"This page was executed with {', '.join(parts)}. "
        "Re-execute it with another seed with `make book SEED=<int>`.\n"
        ":::"
    )


def show_run_parameters(*, seed: int, trials: int | None = None) -> None:
    """Display :func:`run_parameters_markdown` as a Markdown output cell.

    Also marks the start of the run, the default ``started`` of :func:`show_provenance`.
    """
    global _RUN_STARTED
    from IPython.display import Markdown, display

    _RUN_STARTED = time.time()
    display(Markdown(run_parameters_markdown(seed=seed, trials=trials)))


#: The trials every chapter runs at by default (tools/build.py's ``TRIALS_DEFAULT``).
BOOK_TRIALS = 200_000
#: The smallest share of the book's evidence a quick execution collects.
QUICK_FLOOR = 0.05


def evidence_share(trials: int) -> float:
    """The share of the book's served evidence an execution at ``trials`` collects: 1 at
    :data:`BOOK_TRIALS` and above, ``trials / BOOK_TRIALS`` below, never under
    :data:`QUICK_FLOOR` (the chapters that run engines: chapter 8, Appendix C).

    >>> evidence_share(200_000), evidence_share(20_000), evidence_share(1), evidence_share(10**6)
    (1.0, 0.1, 0.05, 1.0)

    Raises
    ------
    ValueError
        ``trials`` is not an integer >= 1.
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials: must be an integer >= 1 (got {trials!r})")
    return min(1.0, max(trials / BOOK_TRIALS, QUICK_FLOOR))


def quick_note_markdown(trials: int, what: str) -> str | None:
    """The note a chapter that runs engines shows when :func:`evidence_share` is below 1
    (None at the book's trials): that this execution is a quick one, ``what`` it shrank,
    and that its numbers are not the book's.

    >>> print(quick_note_markdown(20_000, "fewer prompts."))
    :::{note}
    This is a quick execution (trials = 20,000; the book's 200,000 collect all its evidence): fewer prompts. Its numbers are not the book's.
    :::
    >>> quick_note_markdown(200_000, "fewer prompts.") is None
    True
    """
    if evidence_share(trials) == 1.0:
        return None
    return (":::{note}\n"
            f"This is a quick execution (trials = {trials:,}; the book's {BOOK_TRIALS:,} "
            f"collect all its evidence): {what} Its numbers are not the book's.\n"
            ":::")


def show_quick_note(trials: int, what: str) -> None:
    """Display :func:`quick_note_markdown`, if any, as a Markdown output cell."""
    text = quick_note_markdown(trials, what)
    if text is not None:
        from IPython.display import Markdown, display

        display(Markdown(text))
