"""Adapters that put real engines' speculative samplers under the conformance kit.

One module per engine: ``vllm`` (vLLM V1's rejection sampler, in-process, the kit's batch
convention), ``llama_speculative`` (llama.cpp's ``llama-speculative`` example, black box
through its command line, every emitted token tested by :mod:`specdec.stats.pertoken`); more
engines, one module each. An adapter is a thin translation between the kit's calling
conventions (:mod:`specdec.conformance`) or its per-token check and the engine's own
interface (a function, a command line, a server): it converts arrays, builds the engine's
metadata, seeds the engine's randomness from the kit's generator, and reads the engine's
output back. It neither fixes nor hides anything the engine does: no clipping,
renormalising or filtering of what the engine emits.

Every adapter module declares itself through one interface, :class:`Adapter`, bound to the
module-level name ``ADAPTER``: its pinned environment (:class:`Environment`, also bound to
``ENVIRONMENT``; None for an adapter run by the project's own interpreter), its fixed facts
in Appendix C's first table (a :class:`specdec.conformance.matrix.Scope`) and ``rows``,
which reads the JSON summary its command line prints into matrix rows. :func:`registry`
finds every such module in this package, so a new engine is two files: its module here and
its test. ``tools/py_engines.py`` builds the environments from the same declarations; it
reads ``ENVIRONMENT = Environment(...)`` from the module's source without importing it (it
runs on a bare ``python3`` before any environment exists), so that expression may use only
literals, the module's own constants and this package's pins (:data:`TORCH`,
:data:`TRANSFORMERS_STACK`).

Python engines run in a virtual environment of their own, built and cached by
``tools/py_engines.py``; C++ engines are built by ``tools/engine.py``. Each module has a
command line ``python -m specdec.conformance.adapters.NAME`` that prints a JSON summary.
Importing this package does not import any engine.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

__all__ = ["TORCH", "TRANSFORMERS_STACK", "Environment", "Adapter", "registry", "cache_root"]

#: torch build shared by every environment (the CPU wheel this machine holds): an unpinned
#: ``torch`` would pull a multi-gigabyte CUDA build from the registry.
TORCH = "torch==2.13.0"

#: torch 2.13.0 CPU + transformers 5.19.0 + scipy with every dependency pinned, as pip
#: resolved them on this machine (``pip install --dry-run --report``): for engines installed
#: with ``--no-deps`` because their own declared dependencies are unpinned or unneeded.
TRANSFORMERS_STACK = (
    TORCH, "transformers==5.19.0", "scipy==1.17.1", "numpy==2.4.6", "Jinja2==3.1.6",
    "MarkupSafe==3.0.4", "PyYAML==6.0.4", "Pygments==2.21.0", "annotated-doc==0.0.7",
    "annotated-types==0.8.0", "anyio==4.16.0", "click==8.5.1", "filelock==4.3.1",
    "fsspec==2026.9.0", "h11==0.16.0", "hf-xet==1.8.0", "httpcore2==2.16.2",
    "httpx2==2.16.2", "huggingface_hub==2.4.0", "idna==3.20", "markdown-it-py==4.3.0",
    "mdurl==0.1.2", "mpmath==1.3.0", "networkx==3.6.1", "packaging==26.4",
    "pydantic==2.14.4", "pydantic_core==2.50.5", "regex==2026.11.19", "rich==15.0.0",
    "safetensors==0.8.0", "setuptools==84.2.1", "shellingham==1.5.4", "sympy==1.14.0",
    "tokenizers==0.23.3", "tqdm==4.70.1", "truststore==0.10.5", "typer==0.29.2",
    "typing-inspection==0.4.5", "typing_extensions==4.16.0",
)


@dataclass(frozen=True)
class Environment:
    """An engine's pinned virtual environment: what decides its install.

    Attributes
    ----------
    name : str
        The environment's name (``python tools/py_engines.py NAME``; the first part of its
        folder and of its cache key).
    version : str
        The engine's version, as ``probe`` prints it.
    requirements : tuple of str
        Requirement specifiers, each pinned with ``==``.
    probe : str
        Python source printing the installed engine's version on standard output.
    pip_args : tuple of str
        Extra installer arguments (``--no-deps``).
    remove : tuple of str
        Distributions uninstalled after the install (declared by the engine, unusable here).
    notes : str
        Why the pins are what they are.
    """

    name: str
    version: str
    requirements: tuple
    probe: str
    pip_args: tuple = ()
    remove: tuple = ()
    notes: str = ""

    def __post_init__(self):
        for req in self.requirements:
            if "==" not in req:
                raise ValueError(f"requirements: every requirement of engine {self.name!r} must "
                                 f"be pinned with == (got {req!r})")


@dataclass(frozen=True)
class Adapter:
    """What an adapter module declares (its ``ADAPTER``): one engine of the matrix.

    Attributes
    ----------
    name : str
        The engine's key (:func:`registry`, :func:`specdec.conformance.matrix.engine_rows`);
        its environment's name when it has one.
    environment : Environment or None
        The pinned environment its command line runs in; None when the project's own
        interpreter runs it (a C++ binary, a server started from another environment).
    scope : Scope
        Its fixed facts in Appendix C's first table (:class:`specdec.conformance.matrix.Scope`).
    rows : callable
        ``rows(summary, **facts) -> list[MatrixRow]``: the matrix rows of the JSON summary
        its command line prints; ``facts`` are what the page adds (the rule in one line, the
        report draft).
    example : mapping
        ``{"summary": ..., "facts": ...}``: a minimal summary of its shape and the facts its
        rows need, from which the registry's test builds rows.
    """

    name: str
    environment: Environment | None
    scope: Any
    rows: Callable[..., list]
    example: Mapping = field(default_factory=dict)

    def __post_init__(self):
        if self.environment is not None and self.environment.name != self.name:
            raise ValueError(f"environment: named {self.environment.name!r}, the adapter "
                             f"{self.name!r}")


def cache_root() -> Path:
    """The per-machine cache the book's tools share: ``$SPECDEC_CACHE``, else
    ``$XDG_CACHE_HOME/specdec-book``, else ``~/.cache/specdec-book`` (the rule of
    ``tools/engine.py`` and ``tools/py_engines.py``, which the library may not import)."""
    env = os.environ.get("SPECDEC_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specdec-book"


def registry() -> dict[str, Adapter]:
    """Every adapter of this package, by name, in the order of Appendix C's first table.

    Each module whose name does not start with an underscore is imported (no engine is:
    the adapters import their engines when they run); those that bind ``ADAPTER`` are the
    engines (``seeds`` is a helper).

    Raises
    ------
    TypeError
        If a module's ``ADAPTER`` is not an :class:`Adapter`.
    ValueError
        If two modules declare the same name.
    """
    found: dict[str, Adapter] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        adapter = getattr(module, "ADAPTER", None)
        if adapter is None:
            continue
        if not isinstance(adapter, Adapter):
            raise TypeError(f"{module.__name__}.ADAPTER: must be an Adapter "
                            f"(got {type(adapter).__name__})")
        if adapter.name in found:
            raise ValueError(f"{module.__name__}: the name {adapter.name!r} is declared twice")
        found[adapter.name] = adapter
    return dict(sorted(found.items(), key=lambda item: (item[1].scope.position, item[0])))
