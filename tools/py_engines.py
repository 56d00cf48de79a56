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

The engines' entries (:data:`ENGINES`) are not written here: each adapter module of
``specdec/conformance/adapters/`` declares its environment (``ENVIRONMENT =
Environment(...)``: name, version, pinned requirements, version probe, installer arguments,
removals), read from its source by :func:`declared_engines` without importing it, so a new
engine is its adapter module and its test. torch is pinned to the CPU build this machine
holds (:data:`TORCH`, from the adapters' package): an unpinned ``torch`` would pull a
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
import ast
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


#: The adapters' package: each module that declares ``ENVIRONMENT = Environment(...)``
#: is an engine of the table (specdec/conformance/adapters/__init__.py says how).
ADAPTERS = REPO / "specdec" / "conformance" / "adapters"


def _assignments(path: Path) -> dict:
    """The top-level ``NAME = expression`` assignments of a module's source, by name."""
    found = {}
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.value is not None:
            found[node.target.id] = node.value
    return found


def _evaluate(node: ast.expr, scopes: list, namespace: dict):
    """``node`` evaluated without builtins; a name it reads comes from ``namespace`` or is
    the first of ``scopes`` (assignments) that binds it, evaluated the same way."""
    for name in sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                       - set(namespace)):
        for scope in scopes:
            if name in scope:
                namespace[name] = _evaluate(scope[name], scopes, namespace)
                break
    return eval(compile(ast.Expression(node), "<declaration>", "eval"),   # noqa: S307
                {"__builtins__": {}, **namespace})


def package_pin(name: str, folder: Path = ADAPTERS):
    """A pin the adapters' package declares (``TORCH``, ``TRANSFORMERS_STACK``)."""
    return _evaluate(_assignments(folder / "__init__.py")[name], [], {})


#: torch build shared by every environment (the CPU wheel this machine holds), as the
#: adapters' package pins it.
TORCH = package_pin("TORCH")


def declared_engines(paths=None, folder: Path = ADAPTERS) -> dict:
    """One :class:`Engine` per adapter module that declares ``ENVIRONMENT`` (``paths``:
    those modules' files, default every ``*.py`` of ``folder``), by name, sorted.

    The declaration is read from the source and evaluated with the module's own constants
    and the package's pins, without importing the module: this script runs on a bare
    ``python3``, before any environment exists, and the adapters import numpy and the kit.

    Raises
    ------
    ValueError
        If two modules declare the same environment name.
    """
    package = _assignments(folder / "__init__.py")
    found = {}
    for path in sorted(Path(p) for p in (paths if paths is not None else folder.glob("*.py"))):
        module = _assignments(path)
        if path.name.startswith("_") or "ENVIRONMENT" not in module:
            continue
        eng = _evaluate(module["ENVIRONMENT"], [module, package], {"Environment": Engine})
        if eng.name in found:
            raise ValueError(f"{path}: environment {eng.name!r} is declared twice")
        found[eng.name] = eng
    return dict(sorted(found.items()))


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

#: Every engine the kit is run on, by name: the environments its adapters declare
#: (``ENVIRONMENT`` in specdec/conformance/adapters/NAME.py).
ENGINES: dict[str, Engine] = declared_engines()

#: The one table of pinned environments: the engines by name, the releases as
#: ``transformers-<release>``.
def table(engines: dict, releases: dict) -> dict:
    """The table of ``engines`` (by name) and transformers ``releases`` (by release)."""
    return {**engines, **{e.label: e for e in releases.values()}}


TABLE: dict[str, Engine] = table(ENGINES, HF)


def cache_root() -> Path:
    """The machine's cache: ``$SPECDEC_CACHE``, else ``$XDG_CACHE_HOME/specdec-book``, else
    ``~/.cache/specdec-book`` (the rule of ``tools/engine.py`` and of the adapters'
    ``specdec.conformance.adapters.cache_root``)."""
    env = os.environ.get("SPECDEC_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specdec-book"


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
