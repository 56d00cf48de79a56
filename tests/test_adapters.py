"""Every engine adapter keeps one interface (specdec.conformance.adapters): a pinned
environment that tools/py_engines.py builds, a scope for Appendix C's first table, and rows
read from its summary; a module dropped into the package is found without another edit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from specdec.conformance import adapters, matrix

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import py_engines  # noqa: E402

REGISTRY = adapters.registry()

#: Appendix C's first table, in its order (the adapters' positions and OWN_SCOPES').
FIRST_TABLE = ["transformers", "vLLM rejection sampler", "vLLM OpenAI server", "EAGLE",
               "Medusa", "llama.cpp llama-speculative", "llama.cpp llama-server",
               "OpenVINO GenAI", "ONNX Runtime GenAI", "mlx-lm"]


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_adapter_declares_its_environment_scope_and_rows(name):
    adapter = REGISTRY[name]
    env = adapter.environment
    if env is not None:
        assert env.name == name and env.requirements and env.probe
        assert all("==" in r for r in env.requirements), env.requirements
        eng = py_engines.ENGINES[name]           # read from the source, not imported
        for field in ("name", "version", "requirements", "probe", "pip_args", "remove",
                      "notes"):
            assert getattr(eng, field) == getattr(env, field), field
    else:
        assert name not in py_engines.ENGINES
    sc = adapter.scope
    assert isinstance(sc, matrix.Scope) and isinstance(sc.position, int)
    for field in ("engine", "build", "rule", "not_tested", "report"):
        assert isinstance(getattr(sc, field), str) and getattr(sc, field), field
    assert sc.implementations and all(isinstance(i, str) for i in sc.implementations)
    rows = adapter.rows(adapter.example["summary"], **adapter.example["facts"])
    assert rows and all(isinstance(r, matrix.MatrixRow) for r in rows)
    assert {r.implementation for r in rows} <= set(sc.implementations)
    assert matrix.engine_rows(name, adapter.example["summary"],
                              **adapter.example["facts"]) == rows


def test_the_registry_gives_the_table_its_engines_and_order():
    assert set(py_engines.ENGINES) == {n for n, a in REGISTRY.items() if a.environment}
    assert [sc.engine for sc in matrix.SCOPES] == FIRST_TABLE
    assert matrix.SCOPES == matrix.scopes() and "seeds" not in REGISTRY
    with pytest.raises(ValueError, match="no adapter is named 'nope'"):
        matrix.engine_rows("nope", {})


NEW_ADAPTER = '''
from specdec.conformance.adapters import TORCH, Adapter, Environment
from specdec.conformance.matrix import MatrixRow, Scope

PINNED = "1.0"
ENVIRONMENT = Environment("newengine", PINNED, (TORCH, f"newengine=={PINNED}"),
                          "import newengine; print(newengine.__version__)",
                          pip_args=("--no-deps",))


def matrix_rows(summary, *, rule):
    return [MatrixRow("New engine", summary["version"], "function", "temperature 1", rule,
                      "PASS" if summary["passed"] else "FAIL", detectable_tv=0.03,
                      trials=10)]


ADAPTER = Adapter("newengine", ENVIRONMENT,
                  Scope("New engine", ("New engine",), "its wheel", "its rule", "GPU",
                        position=95),
                  matrix_rows, example={"summary": {"version": PINNED, "passed": True},
                                        "facts": {"rule": "r"}})
'''


def test_a_new_adapter_module_is_found_and_gets_its_environment(tmp_path, monkeypatch):
    path = tmp_path / "newengine.py"
    path.write_text(NEW_ADAPTER)
    monkeypatch.setattr(adapters, "__path__", [*adapters.__path__, str(tmp_path)])
    try:
        found = adapters.registry()
        assert list(found)[-1] == "newengine" and set(REGISTRY) < set(found)
        (row,) = matrix.engine_rows("newengine", {"version": "1.0", "passed": True}, rule="r")
        assert row.verdict == "PASS" and matrix.SCOPES[-1].engine == "New engine"
    finally:
        sys.modules.pop("specdec.conformance.adapters.newengine", None)
    engines = py_engines.declared_engines([*py_engines.ADAPTERS.glob("*.py"), path])
    assert {n: e.key for n, e in engines.items() if n != "newengine"} == \
        {n: e.key for n, e in py_engines.ENGINES.items()}
    monkeypatch.setattr(py_engines, "TABLE", py_engines.table(engines, py_engines.HF))
    eng = py_engines.engine("newengine", "1.0")
    assert eng.requirements == ("torch==2.13.0", "newengine==1.0")
    assert eng.pip_args == ("--no-deps",) and eng.group == "engines"
    assert py_engines.env_dir("newengine").name == f"newengine-1.0-{eng.key}"


def test_a_declaration_that_breaks_the_interface_is_refused(tmp_path):
    with pytest.raises(ValueError, match="must be pinned with =="):
        adapters.Environment("x", "1", ("numpy",), "print(1)")
    env = adapters.Environment("x", "1", ("numpy==2.4.6",), "print(1)")
    with pytest.raises(ValueError, match="environment: named 'x'"):
        adapters.Adapter("y", env, REGISTRY["vllm"].scope, lambda s: [])
    bad = tmp_path / "loose.py"
    bad.write_text('ENVIRONMENT = Environment("loose", "1", ("numpy",), "print(1)")\n')
    with pytest.raises(ValueError, match="must be pinned with =="):
        py_engines.declared_engines([bad])
    twice = tmp_path / "twice.py"
    twice.write_text(NEW_ADAPTER)
    with pytest.raises(ValueError, match="declared twice"):
        py_engines.declared_engines([tmp_path / "twice.py", _copy(twice, tmp_path / "b.py")])


def _copy(src: Path, dst: Path) -> Path:
    dst.write_text(src.read_text())
    return dst


def test_the_adapters_models_live_in_the_machine_cache_the_tools_use(monkeypatch, tmp_path):
    """The models an adapter builds go under $SPECDEC_CACHE, like the environments and the
    engine build (tools/py_engines.py), so one folder holds everything a machine caches."""
    from specdec.conformance.adapters import cache_root, ortgenai, vllm_server
    from tools import py_engines

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECDEC_ENGINE_ENVS", raising=False)
    monkeypatch.delenv("SPECDEC_ORTGENAI_MODELS", raising=False)
    assert cache_root() == py_engines.cache_root() == tmp_path
    assert vllm_server.models_dir().is_relative_to(tmp_path)
    assert ortgenai.models_dir().is_relative_to(tmp_path)
    monkeypatch.delenv("SPECDEC_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == py_engines.cache_root() == tmp_path / "xdg" / "specdec-book"
