"""Records of an execution: the parameters a chapter ran with."""

from __future__ import annotations


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
    """Display :func:`run_parameters_markdown` as a Markdown output cell."""
    from IPython.display import Markdown, display

    display(Markdown(run_parameters_markdown(seed=seed, trials=trials)))
