"""A new user's one command against a running vLLM server: ``specdec exactness reported``.

Chapter 8 tells a reader to test their own server with the installed command, read from
its ``--help``. These tests do exactly that against vLLM's OpenAI server from its CPU wheel
(the engine's pinned environment, ``python tools/py_engines.py vllm``; they skip, saying
so, where it is absent), with the adapter's tiny models: the plain server passes (exit
status 0), and the draft-model server as shipped, reporting the raw law at temperature 1,
fails (exit status 1: the CPU wheel's rejection sampler reads uninitialised per-token
settings, Appendix C). Each starts one server (about a minute) and sends its requests
through the command line, nothing else.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specdec.conformance.adapters import vllm_server as vs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny target and draft, and a prompts file in the command's format."""
    root = tmp_path_factory.mktemp("vllm-cli")
    cfg = vs.TinyConfig()
    models = vs.build_models(cfg, root=root)
    prompts = root / "prompts.json"
    prompts.write_text(json.dumps({"tiny": vs.prompts(cfg.vocab, seed=3)}))
    return models, prompts, root


def _exactness(url: str, prompts, out, requests: int, max_tokens: int):
    """The command as chapter 8 prints it, with the tiny model's name and vLLM's
    ``ignore_eos`` so that every request has its tokens."""
    return subprocess.run(
        [sys.executable, "-m", "specdec", "exactness", "reported", "--endpoint", url,
         "--model", "tiny", "--prompts", str(prompts), "--requests", str(requests),
         "--max-tokens", str(max_tokens), "--field", "ignore_eos=true", "--no-progress",
         "--out", str(out)], capture_output=True, text=True, timeout=900)


def test_the_plain_server_passes_with_one_command(vllm_python, tiny):
    models, prompts, root = tiny
    with vs.serve(vllm_python, models, vs.SETTINGS["plain"], log_dir=root) as (url, _):
        proc = _exactness(url, prompts, root / "plain.json", requests=16, max_tokens=32)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert "per-token exactness: pass" in proc.stdout
    check = json.loads((root / "plain.json").read_text())["exactness"]
    assert check["passed"] and check["tokens"] == 16 * 32


def test_the_shipped_draft_model_server_fails_with_one_command(vllm_python, tiny):
    models, prompts, root = tiny
    with vs.serve(vllm_python, models, vs.SETTINGS["draft_model_raw"],
                  log_dir=root) as (url, _):
        proc = _exactness(url, prompts, root / "draft.json", requests=48, max_tokens=64)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
    assert "per-token exactness: FAIL" in proc.stdout
    check = json.loads((root / "draft.json").read_text())["exactness"]
    assert not check["passed"] and check["pvalue"] < 1e-12
