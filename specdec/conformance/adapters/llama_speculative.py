"""llama.cpp's ``llama-speculative`` example, black box through its command line.

The example ``examples/speculative/speculative.cpp`` of the pinned llama.cpp (the sources
vendored in llama-cpp-python 0.3.36, built by ``python tools/engine.py build --target
llama-speculative``) implements stochastic verification at temperature > 0, unlike
llama-server's rule (accept while the target's sample equals the draft token). Read from
the code (line numbers of that file, :data:`RULE`):

* drafting (509-594): at each of ``n_draft`` steps every drafting sequence runs the
  draft's sampler chain (521: ``common_sampler_sample``, the same settings as the
  target's), sorts the candidates by probability (523), and drafts ``cur_p->data[0]``
  (570), the **most probable** candidate, not the token the sampler drew; with several
  sequences (``-np``), a branch is split off for each further candidate ``f`` whose
  probability exceeds ``--spec-draft-p-split`` (533-566) and drafts ``data[f]``; the
  whole candidate list is stored as the draft's law (578);
* verification (270-395): the target's candidates after its chain (272-274); an active
  sequence chosen uniformly (281-282); accept its token if ``r <= p_tgt / p_dft`` for a
  fresh uniform ``r`` (298, 317); on rejection the target's candidates and the draft's are
  sorted by id and subtracted index by index, clipped at 0 and renormalised (331-361),
  and the next sequence is verified against that residual; when every sequence is
  rejected, or none has a token at this depth, a token is drawn from the current
  candidates (379-395);
* end (485): after the cycle in which more than ``-n`` tokens were emitted, or an
  end-of-generation token.

The accept test and residual are those of Leviathan et al. (2023, Algorithm 1) and, for
several sequences, of SpecInfer's multi-step speculative sampling (Miao et al. 2024,
Algorithm 2), which are exact only for drafts **drawn from** the draft's law. Here the
draft token is its arg-max: at a drafted position with ``x* = argmax q`` the engine emits
``x*`` with probability ``min(1, p(x*)/q(x*))`` and otherwise a token of
``(p - q)+ / Z`` (:func:`rule_laws`), which is not ``p``. With one draft sequence the
emitted tokens determine which positions were drafted (a drafted position emits ``x*``
exactly when its draft was accepted), so :func:`rule_laws` gives the engine's law at every
position, and the per-token check against it tests the diagnosis itself.

The adapter runs one process per response (the binary takes one prompt), seeded
(``--seed``), every truncation off unless the setting asks for top-k or top-p, one thread,
a float32 KV cache and no flash attention (the setting under which llama.cpp's laws agree
with numpy's within the tolerance :func:`specdec.client.tokencheck.engine_disagreement`
measures on llama-server, the same libraries), and reads the emitted tokens from standard
output: the book's models are byte-level (token id = byte), and the example prints the
prompt then every emitted token's bytes. The count is checked against the ``n_predict``
the example reports on standard error; anything else is :class:`OutputError`.

References
----------
Leviathan, Kalman, Matias (2023), Fast inference from transformers via speculative
decoding, ICML, Algorithm 1 and Theorem 1.
Miao et al. (2024), SpecInfer, ASPLOS, section 4.2 and Algorithm 2 (multi-step
speculative sampling).
llama.cpp pull request 5625 (stochastic verification in this example; its description
notes that drafting stays as it was).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence, Mapping

import numpy as np

from specdec.stats import pertoken as pt
from specdec.decode import SamplingSettings
from specdec.client.llama import EngineError
from specdec.laws import check_int, check_real
from specdec.conformance.adapters import Adapter
from specdec.conformance.matrix import MatrixRow, Scope, rule_line

__all__ = ["ADAPTER", "matrix_rows",
           "RULE", "OutputError", "Setting", "Run", "command", "parse_output", "parse_prefix",
           "run_once",
           "generate", "rule_laws", "pertoken_check", "Summary", "summarise", "main"]

SOURCE = "examples/speculative/speculative.cpp"

#: The rule the example implements, step by step, with the lines of SOURCE (pinned
#: llama.cpp of llama-cpp-python 0.3.36).
RULE = {
    "source": f"llama.cpp (vendored in llama-cpp-python 0.3.36) {SOURCE}",
    "draft": "arg-max of the draft's candidates after its sampler chain: cur_p->data[0] "
             "after sorting by probability (lines 521, 523, 570); the token the draft's "
             "sampler drew is not used",
    "split": "with -np > 1, a new branch for each further candidate f (1..7) whose "
             "probability exceeds --spec-draft-p-split, drafting data[f] (533-566)",
    "accept": "r <= p_tgt / p_dft, r uniform from std::default_random_engine seeded by "
              "--seed, the sequence chosen uniformly among the active ones (281-282, "
              "298, 317)",
    "residual": "target and draft candidates sorted by id, max(0, p - q) index by index, "
                "renormalised; later sequences verified against it (331-361)",
    "recovery": "a draw from the current candidates (the residual after a rejection, the "
                "target's law after all drafts were accepted) with "
                "std::discrete_distribution (379-395)",
    "stop": "after the cycle in which more than -n tokens were emitted (485)",
    "exact_for": "drafts drawn from the draft's law (Leviathan et al. 2023, Theorem 1); "
                 "the example drafts its arg-max, so the emitted law is not the target's "
                 "when --spec-draft-n-max >= 1 (see rule_laws)",
}

EOS = 0xFF                      # the book's GGUF conversion (tools/engine.py)
EOS_PIECE = "\u00ff".encode()   # llama.cpp prints a control token's text


class OutputError(RuntimeError):
    """llama-speculative's output could not be read as the tokens of one response."""


@dataclass(frozen=True)
class Setting:
    """One configuration of the example.

    Attributes
    ----------
    temperature : float
        ``--temp`` (> 0: stochastic verification).
    top_k : int or None
        ``--top-k`` (None: 0, off).
    top_p : float or None
        ``--top-p`` (None: 1, off). ``--min-p 0`` always.
    gamma : int
        ``--spec-draft-n-max`` (0: no drafting, every token from the target's law).
    parallel : int
        ``-np``: draft sequences (branches of the draft tree).
    p_split : float
        ``--spec-draft-p-split`` (only with ``parallel > 1``).
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    gamma: int = 3
    parallel: int = 1
    p_split: float = 0.1

    def __post_init__(self) -> None:
        t = check_real(self.temperature, "temperature", "(0, inf)")
        if not math.isfinite(t):
            raise ValueError(f"temperature: must be finite (got {self.temperature!r})")
        check_int(self.gamma, "gamma", minimum=0)
        check_int(self.parallel, "parallel", minimum=1)
        check_real(self.p_split, "p_split", "[0, 1]")
        self.sampling()                       # validates top_k and top_p

    def sampling(self) -> SamplingSettings:
        """The law the target should be sampled from under this setting."""
        return SamplingSettings(temperature=float(self.temperature), top_k=self.top_k,
                                top_p=self.top_p)

    def args(self) -> list[str]:
        """Command-line arguments of this setting."""
        return ["--temp", repr(float(self.temperature)),
                "--top-k", str(0 if self.top_k is None else self.top_k),
                "--top-p", repr(1.0 if self.top_p is None else float(self.top_p)),
                "--min-p", "0", "--typical", "1", "--repeat-penalty", "1",
                "--spec-draft-n-max", str(self.gamma), "--spec-draft-n-min", "0",
                "-np", str(self.parallel), "--spec-draft-p-split", repr(float(self.p_split))]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Run:
    """One process: the response to one prompt.

    Attributes
    ----------
    prompt : str
    seed : int
    tokens : tuple of int
        Emitted token ids, in order (all of them, possibly more than asked for: the
        example stops after the cycle that passes ``-n``).
    stopped : bool
        Ended by the end-of-sequence token.
    n_drafted, n_accept : int or None
        The example's own counts (``n_drafted`` counts draft steps); None when its log
        lost them (:func:`run_once`).
    seconds : float
        Wall time, every attempt included.
    attempts : int
        Processes run to read one complete output (see :func:`run_once`).
    """

    prompt: str
    seed: int
    tokens: tuple
    stopped: bool
    n_drafted: int
    n_accept: int
    seconds: float
    attempts: int = 1


def command(binary, target_gguf, draft_gguf, prompt: str, setting: Setting, *, seed: int,
            n_predict: int, context: int = 128, threads: int = 1) -> list[str]:
    """The command line of one run.

    Parameters
    ----------
    binary, target_gguf, draft_gguf : path-like
    prompt : str
    setting : Setting
    seed : int
        ``--seed``, in [0, 2**32 - 1) (2**32 - 1 is llama.cpp's "random").
    n_predict : int
        ``-n``, >= 1.
    context : int
        ``-c`` (the book's models have 128 positions).
    threads : int

    Returns
    -------
    list of str

    Raises
    ------
    ValueError
        A seed outside the range, a non-positive ``n_predict``.
    """
    seed = check_int(seed, "seed", minimum=0, maximum=2**32 - 2)
    n_predict = check_int(n_predict, "n_predict", minimum=1)
    threads = str(check_int(threads, "threads", minimum=1))
    return [str(binary), "-m", str(target_gguf), "-md", str(draft_gguf), "-p", prompt,
            "-n", str(n_predict), "-c", str(context),
            "--seed", str(seed), *setting.args(),
            "-t", threads, "-tb", threads, "-td", threads, "-tbd", threads,
            "-ctk", "f32", "-ctv", "f32", "-ctkd", "f32", "-ctvd", "f32", "-fa", "off"]


# "n_predict = 41" at the end of a log line (which may start with a time stamp and a level)
_COUNT = re.compile(rb"(?:^|\s)(n_predict|n_drafted|n_accept)\s*=\s*(-?\d+)[ \t\r]*$", re.M)


def parse_output(stdout: bytes, stderr: bytes, prompt: str) -> tuple[list[int], dict]:
    """The emitted token ids of one run, from its standard output.

    The example writes ``"\\n\\n"``, the prompt's pieces, every emitted token's piece,
    then ``"\\n\\n"`` twice (speculative.cpp lines 182-186, 437/441, 636, 665; the last
    one is sometimes lost at exit), and its counts on standard error (642-646). With a byte-level vocabulary each piece is the
    token's byte, except the end-of-sequence token (a control token: its text, U+00FF
    in UTF-8); the number of tokens must equal the reported ``n_predict``.

    Parameters
    ----------
    stdout, stderr : bytes
    prompt : str

    Returns
    -------
    tokens : list of int
    counts : dict
        ``n_predict``, ``n_drafted``, ``n_accept`` as reported.

    Raises
    ------
    OutputError
        The output does not start with the prompt, does not end as the example ends, the
        counts are missing, or the tokens do not number ``n_predict``.
    """
    if not isinstance(stdout, (bytes, bytearray)) or not isinstance(stderr, (bytes, bytearray)):
        raise TypeError("stdout, stderr: must be bytes (the process's raw output)")
    head = b"\n\n" + prompt.encode("utf-8")
    stdout, stderr = bytes(stdout), bytes(stderr)
    if not stdout.startswith(head):
        raise OutputError(f"llama-speculative output: standard output does not start with "
                          f"the prompt (got {stdout[:80]!r})")
    counts = {k.decode(): int(v) for k, v in _COUNT.findall(stderr)}
    if set(counts) != {"n_predict", "n_drafted", "n_accept"}:
        raise OutputError(f"llama-speculative output: the counts n_predict, n_drafted, "
                          f"n_accept are missing from standard error (found "
                          f"{sorted(counts)}; the process stopped early?)")
    n = counts["n_predict"]
    rest = stdout[len(head):]
    # the closing "\n\n" of line 665 is printed after the models are freed, by the log's
    # thread, and is sometimes lost at exit: the response is followed by 2 or 4 newlines,
    # and the reported count tells which when the response itself ends with newlines
    for k in (4, 2):
        if len(rest) < k or not rest.endswith(b"\n" * k):
            continue
        body = rest[:len(rest) - k]
        tokens = list(body)
        if len(tokens) == n + len(EOS_PIECE) - 1 and body.endswith(EOS_PIECE):
            tokens = tokens[:-len(EOS_PIECE)] + [EOS]
        if len(tokens) == n:
            break
    else:
        raise OutputError(f"llama-speculative output: no reading of standard output "
                          f"({len(rest)} bytes after the prompt, ending {rest[-12:]!r}) gives "
                          f"the n_predict = {n} tokens reported (a token that is not one "
                          f"byte, or the output was cut)")
    return tokens, counts


def parse_prefix(stdout: bytes, prompt: str, n: int) -> list[int]:
    """The first ``n`` emitted tokens from a standard output whose end may be lost.

    The example emits at least ``n + 1`` tokens when run with ``-n n`` (it stops after the
    cycle in which more than ``n`` were emitted, line 485; the end-of-sequence token of
    the book's models is not an end-of-generation token for llama.cpp, which warns
    "special_eos_id is not in special_eog_ids"), and its logger loses only a suffix of
    what it was given (one queue, in order), so the ``n`` bytes after the prompt are the
    first ``n`` tokens whenever that many are there.

    Raises
    ------
    OutputError
        No prompt echo, fewer than ``n`` bytes after it, or the end-of-sequence piece
        among them (a token of two bytes: the prefix cannot be read by length).
    """
    n = check_int(n, "n", minimum=1)
    head = b"\n\n" + prompt.encode("utf-8")
    stdout = bytes(stdout)
    if not stdout.startswith(head):
        raise OutputError(f"llama-speculative output: standard output does not start with "
                          f"the prompt (got {stdout[:80]!r})")
    body = stdout[len(head):len(head) + n]
    if len(body) < n:
        raise OutputError(f"llama-speculative output: {len(body)} bytes after the prompt, "
                          f"fewer than the {n} tokens asked for (the output was cut)")
    if EOS_PIECE in stdout[len(head):len(head) + n + 1]:
        raise OutputError("llama-speculative output: the end-of-sequence piece within the "
                          "first tokens, with no reported count to read it by")
    return list(body)


def run_once(binary, target_gguf, draft_gguf, prompt: str, setting: Setting, *, seed: int,
             n_predict: int, timeout: float = 120.0, attempts: int = 40) -> Run:
    """Run the example once and read its response.

    The example's logger is a thread that the process does not wait for at exit
    (``common_log_main`` in common/log.cpp leaks it on purpose), so the end of its output
    is sometimes lost, and on a loaded machine often: in a test session that ran Appendix
    C beside other tests, 8 attempts in a row lost it. An incomplete output is run again
    with the same seed, which gives the same tokens (one thread, a seeded generator),
    after a pause that grows with the attempt (0.25 s per attempt, at most 2 s, to let a
    burst of load pass), up to ``attempts`` times; after that the first ``n_predict``
    tokens are read without the count (:func:`parse_prefix`), and the run's counts are
    None. The attempts are recorded (:attr:`Run.attempts`; the matrix row's
    ``repeated_processes``).

    Parameters
    ----------
    binary, target_gguf, draft_gguf : path-like
        The executable (its shared libraries beside it) and the GGUF models.
    prompt : str
    setting : Setting
    seed, n_predict : int
    timeout : float
        Seconds before the process is killed.
    attempts : int
        Runs before an incomplete output is an error.

    Returns
    -------
    Run

    Raises
    ------
    FileNotFoundError
        The binary or a model is missing.
    OutputError
        The process failed (its status and standard error's tail) or its output is
        malformed (:func:`parse_output`).
    """
    for name, path in (("binary", binary), ("target_gguf", target_gguf),
                       ("draft_gguf", draft_gguf)):
        if not Path(path).is_file():
            raise FileNotFoundError(f"{name}: {path} does not exist (build it with "
                                    f"python tools/engine.py build --target "
                                    f"llama-speculative)")
    cmd = command(binary, target_gguf, draft_gguf, prompt, setting, seed=seed,
                  n_predict=n_predict)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, (str(Path(binary).parent),
                                                           env.get("LD_LIBRARY_PATH"))))
    t0 = time.perf_counter()
    for attempt in range(1, attempts + 1):
        try:
            done = subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL,
                                  env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise OutputError(f"llama-speculative (seed {seed}) did not finish within "
                              f"{timeout:g} s") from None
        if done.returncode != 0:
            raise OutputError(f"llama-speculative (seed {seed}) exited with status "
                              f"{done.returncode}:\n"
                              f"{done.stderr.decode(errors='replace')[-1500:]}")
        try:
            tokens, counts = parse_output(done.stdout, done.stderr, prompt)
            break
        except OutputError as err:
            if attempt < attempts:
                time.sleep(min(2.0, 0.25 * attempt))
                continue
            try:                                # the counts lost every time: the prefix
                tokens = parse_prefix(done.stdout, prompt, n_predict)
                counts = {"n_drafted": None, "n_accept": None}
            except OutputError:
                raise OutputError(f"{err} (seed {seed}, {attempts} attempts)") from None
    seconds = time.perf_counter() - t0
    return Run(prompt, int(seed), tuple(tokens), bool(tokens and tokens[-1] == EOS),
               counts["n_drafted"], counts["n_accept"], seconds, attempt)


def generate(binary, target_gguf, draft_gguf, prompts: Sequence[str], runs: int,
             setting: Setting, *, seed: int, n_predict: int,
             timeout: float = 120.0) -> list[Run]:
    """``runs`` seeded runs, run ``k`` on prompt ``prompts[k % len(prompts)]`` with seed
    ``seed + k``, one after the other (one process each: the example takes one prompt).

    Raises
    ------
    ValueError
        No prompts, ``runs < 1``.
    FileNotFoundError, OutputError
        See :func:`run_once`.
    """
    if isinstance(prompts, str) or not prompts or not all(
            isinstance(p, str) and p for p in prompts):
        raise ValueError("prompts: need a non-empty list of non-empty strings")
    runs = check_int(runs, "runs", minimum=1)
    return [run_once(binary, target_gguf, draft_gguf, prompts[k % len(prompts)], setting,
                     seed=seed + k, n_predict=n_predict, timeout=timeout)
            for k in range(runs)]


def rule_laws(p, q, tokens, gamma: int, *, tie: float = 0.0) -> tuple[np.ndarray, int]:
    """The law the example emits at each position, one draft sequence (``-np 1``).

    The first position of a response and every position after ``gamma`` accepted drafts
    is drawn from the target's law ``p``; at a drafted position, with ``x* = argmax q``
    the draft token (speculative.cpp line 570), the token is ``x*`` with probability
    ``a = min(1, p(x*)/q(x*))`` (line 317) and otherwise drawn from
    ``(p - q)+ / Z`` (331-395). The residual puts no mass on ``x*`` when ``a < 1``, so a
    drafted position emits ``x*`` exactly when its draft was accepted, and the emitted
    tokens say which positions are drafted.

    That reading needs ``x*`` and the side of ``p(x*) / q(x*)`` against 1 to be the
    engine's: a drafted position where the two largest draft probabilities, or
    ``p(x*)`` and ``q(x*)``, are within ``tie`` of each other (float32 against float64
    could order them otherwise) ends the positions whose law is known. That position
    depends on the tokens before it only, so stopping there is a stopping rule.

    Parameters
    ----------
    p, q : array_like, shape (n, V)
        The target's and the draft's laws at each emitted position (after temperature and
        truncation), given the response before it.
    tokens : array_like of int, shape (n,)
        The response.
    gamma : int
        Draft length (``--spec-draft-n-max``), >= 0.
    tie : float
        Probability gap below which two values may be ordered otherwise by the engine.

    Returns
    -------
    laws : numpy.ndarray, shape (n, V)
    known : int
        The first ``known`` rows are the engine's law (``n`` when no tie was met).

    Raises
    ------
    ValueError
        Shapes that do not match, a negative ``gamma`` or ``tie``.

    Examples
    --------
    >>> p = [[0.5, 0.5], [0.5, 0.5]]; q = [[0.8, 0.2], [0.8, 0.2]]
    >>> laws, known = rule_laws(p, q, [0, 0], 1)    # a bonus, then a drafted position
    >>> laws.round(4).tolist(), known
    ([[0.5, 0.5], [0.625, 0.375]], 2)
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    t = np.asarray(tokens, dtype=np.int64)
    gamma = check_int(gamma, "gamma", minimum=0)
    tie = check_real(tie, "tie", "[0, 1]")
    if p.ndim != 2 or q.shape != p.shape or t.shape != (p.shape[0],):
        raise ValueError(f"p, q, tokens: need shapes (n, V), (n, V), (n,) (got {p.shape}, "
                         f"{q.shape}, {t.shape})")
    out = p.copy()
    known = p.shape[0]
    k = gamma                   # index of the position in its cycle; gamma: the target's draw
    for i in range(p.shape[0]):
        if k >= gamma:          # the first token, or the bonus after gamma accepted drafts
            k = 0
            continue
        top2 = np.sort(q[i])[-2:] if q.shape[1] > 1 else np.array([0.0, q[i, 0]])
        x = int(np.argmax(q[i]))
        if known == p.shape[0] and (top2[1] - top2[0] <= tie or abs(p[i, x] - q[i, x]) <= tie):
            known = i
        a = 1.0 if q[i, x] <= 0 else min(1.0, p[i, x] / q[i, x])
        resid = np.maximum(p[i] - q[i], 0.0)
        z = resid.sum()
        law = (1.0 - a) * resid / z if z > 0 else np.zeros_like(p[i])
        law[x] += a
        out[i] = law / law.sum()
        k = k + 1 if t[i] == x else 0    # accepted: the next drafted position; else a new cycle
    return out, known


def pertoken_check(runs: Sequence[Run], target, draft, *, settings: SamplingSettings,
                   keep: int, rng, law: str = "target", gamma: int | None = None, tie: float = 1e-3,
                   false_alarm: float = 1e-6, power: float = 0.9, tolerance: float = 0.0,
                   extra: dict | None = None) -> pt.PerTokenCheck:
    """Per-token check of the first ``keep`` tokens of every run.

    Each position's law comes from the book's numpy models
    (:func:`specdec.stats.pertoken.response_laws`) at ``settings``: ``law="target"`` tests the
    target's law (exactness), ``law="rule"`` the law of the example's rule
    (:func:`rule_laws`, one draft sequence, ``gamma`` needed). Each token is transformed
    along the orderings ``draft_over_target`` and ``target``
    (:func:`specdec.stats.pertoken.randomized_pit`, uniforms from ``rng``), a run that stopped
    before ``keep`` tokens is padded with fresh uniforms, and
    :func:`specdec.stats.pertoken.pertoken_test` decides (Holm over the two orderings).

    Parameters
    ----------
    runs : sequence of Run
    target, draft : specdec.nn.Transformer
    settings : specdec.decode.SamplingSettings
        The law the client expects (a positive control passes another than the run's).
    keep : int
        Positions per run (a stopping rule fixed in advance).
    rng : numpy.random.Generator
    law : {"target", "rule"}
    gamma : int, optional
    tie : float
        ``law="rule"``: see :func:`rule_laws` (the positions after a tie are padding).
    false_alarm, power, tolerance : float
        See :func:`specdec.stats.pertoken.pertoken_test`.
    extra : dict, optional

    Returns
    -------
    specdec.stats.pertoken.PerTokenCheck

    Raises
    ------
    ValueError
        No runs, an unknown ``law``, ``law="rule"`` without ``gamma``, a run that emitted
        nothing.
    """
    from specdec.measure import limit_blas_threads
    from specdec.nn import encode
    from specdec.verify import check_rng

    rng = check_rng(rng)
    keep = check_int(keep, "keep", minimum=1)
    if not runs:
        raise ValueError("runs: need at least one")
    if law not in ("target", "rule"):
        raise ValueError(f"law: must be 'target' or 'rule' (got {law!r})")
    if law == "rule" and gamma is None:
        raise ValueError("gamma: law='rule' needs the draft length")
    names = ("draft_over_target", "target")
    parts = {k: [] for k in names}
    n_tokens = impossible = unknown = 0
    tv = []
    with limit_blas_threads(1):
        for r in runs:
            toks = np.asarray(r.tokens[:keep], dtype=np.int64)
            if toks.size == 0:
                raise ValueError(f"runs: seed {r.seed} emitted no token")
            prompt = encode(r.prompt)
            p = pt.response_laws(target, prompt, toks, settings)
            q = pt.response_laws(draft, prompt, toks, settings)
            rule, known = (None, toks.size) if gamma is None else rule_laws(
                p, q, toks, gamma, tie=tie)
            if rule is not None:
                tv.append(0.5 * np.abs(rule - p).sum(axis=1))
            tested = p
            if law == "rule":
                unknown += int(toks.size - known)
                tested, toks, q = rule[:known], toks[:known], q[:known]
            if toks.size == 0:                       # a tie at the first drafted position
                pad = rng.random(keep)
                for k in names:
                    parts[k].append(pad)
                continue
            v = rng.random(toks.size)
            pad = rng.random(keep - toks.size)       # the same padding for every ordering
            impossible += int((tested[np.arange(toks.size), toks] <= 0).sum())
            for k in names:
                parts[k] += [pt.randomized_pit(tested, toks, v, pt.order_keys(k, tested, q)),
                             pad]
            n_tokens += int(toks.size)
    pits = {k: np.concatenate(v) for k, v in parts.items()}
    rule_tv = float(np.concatenate(tv).mean()) if tv else None
    return pt.pertoken_test(pits, tokens=n_tokens, requests=len(runs), impossible=impossible,
                            false_alarm=false_alarm, power=power, tolerance=tolerance,
                            extra={"law": law, "settings": settings.to_dict(), "keep": keep,
                                   "rule_vs_target_tv": rule_tv,
                                   "positions_after_a_tie": unknown, **dict(extra or {})})


@dataclass(frozen=True)
class Summary:
    """What the command line prints (JSON): one setting's run and its checks."""

    setting: dict
    rule: dict
    verdict: str
    checks: dict
    runs: int
    tokens: int
    acceptance: float | None
    tolerance: float
    tolerance_source: str
    seconds: dict
    versions: dict
    log_losses: dict

    def to_dict(self) -> dict:
        return asdict(self)


def measure_tolerance(server, target_gguf, target, prompts, settings: SamplingSettings, *,
                      seed: int = 0) -> dict:
    """The numerical disagreement between numpy's laws and llama.cpp's, as
    :mod:`specdec.stats.pertoken` measures it: llama-server (the same libraries and cache
    settings) reporting its post-sampling probabilities on the plain target
    (:func:`specdec.client.tokencheck.engine_disagreement`), started from the ``server``
    binary with the GGUF file ``target_gguf`` of the numpy model ``target``."""
    from specdec.client import Endpoint, llama
    from specdec.client.tokencheck import engine_disagreement

    with llama.serve(server, target_gguf, exact_cache=True) as server:
        return engine_disagreement(Endpoint(server.url), prompts, target, settings,
                                   requests=8, max_tokens=40, seed=seed)


def summarise(setting: Setting, runs: Sequence[Run], checks: dict, *, tolerance: float,
              tolerance_source: str, seconds: dict, versions: dict) -> Summary:
    """Assemble the JSON summary; the verdict is the ``exactness`` check's."""
    counted = [r for r in runs if r.n_drafted is not None]
    drafted = sum(r.n_drafted for r in counted)
    accepted = sum(r.n_accept for r in counted)
    main_check = checks["exactness"]
    return Summary(setting=setting.to_dict(), rule=RULE,
                   verdict="PASS" if main_check["passed"] else "FAIL",
                   checks=checks, runs=len(runs), tokens=main_check["tokens"],
                   acceptance=None if not drafted else accepted / drafted,
                   tolerance=tolerance, tolerance_source=tolerance_source,
                   seconds=seconds, versions=versions,
                   log_losses={"runs_without_counts": len(runs) - len(counted),
                               "repeated_processes": sum(r.attempts - 1 for r in runs)})


def main(argv=None) -> int:
    """``python -m specdec.conformance.adapters.llama_speculative``: one setting, JSON."""
    ap = argparse.ArgumentParser(prog="python -m specdec.conformance.adapters."
                                 "llama_speculative", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0, help="seed of the first run (run k: "
                    "seed + k) and of the transform's uniforms")
    ap.add_argument("--runs", type=int, default=240, help="processes (one response each)")
    ap.add_argument("--keep", type=int, default=80, help="tokens tested per response")
    ap.add_argument("--gamma", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=1, help="-np: draft sequences")
    ap.add_argument("--p-split", type=float, default=0.1)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-k", type=int)
    ap.add_argument("--top-p", type=float)
    ap.add_argument("--control-temperature", type=float, default=None,
                    help="also test the runs against the target's law at this temperature "
                         "(a control that must fail)")
    ap.add_argument("--tolerance", type=float, help="per-token TV the null allows (default: "
                    "measured on llama-server)")
    ap.add_argument("--tie", type=float, help="probability gap under which the engine may "
                    "order two values otherwise (rule check; default: twice the measured "
                    "largest probability difference, 1e-3 with --tolerance)")
    ap.add_argument("--false-alarm", type=float, default=1e-6)
    ap.add_argument("--binary", type=Path, required=True, help="llama-speculative (the book "
                    "builds it: python tools/engine.py path --target llama-speculative)")
    ap.add_argument("--target-model", type=Path, required=True, help="GGUF file of the "
                    "target (the book's: python tools/engine.py convert)")
    ap.add_argument("--draft-model", type=Path, required=True, help="GGUF file of the draft")
    ap.add_argument("--server", type=Path, help="llama-server of the same sources, to measure "
                    "the tolerance on the plain target (needed without --tolerance)")
    ap.add_argument("--target", default="target", help="the book's model (numpy laws) that "
                    "--target-model holds")
    ap.add_argument("--draft", default="draft", help="the book's model --draft-model holds")
    ap.add_argument("--llama-cpp-python", metavar="VERSION", help="the llama-cpp-python "
                    "release whose sources built the binaries (recorded in the summary)")
    args = ap.parse_args(argv)
    from specdec import nn

    try:
        setting = Setting(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                          gamma=args.gamma, parallel=args.parallel, p_split=args.p_split)
        keep = check_int(args.keep, "keep", minimum=1)
        t0 = time.perf_counter()
        binary, ggufs = args.binary, [args.target_model, args.draft_model]
        if args.tolerance is None and args.server is None:
            raise ValueError("server: give --server (llama-server, to measure the tolerance) "
                             "or --tolerance")
        target, draft = nn.load_model(args.target), nn.load_model(args.draft)
        prompts = [p for lang in nn.LANGUAGES for p in nn.load_heldout()[lang]["prompts"]]
        longest = max(len(p.encode()) for p in prompts)
        if longest + keep + 2 * setting.gamma + 2 > target.config.context:
            raise ValueError(f"keep: {keep} tokens after a {longest}-byte prompt, with "
                             f"gamma {setting.gamma}, exceed the context of "
                             f"{target.config.context} positions")
        t1 = time.perf_counter()
        if args.tolerance is None:
            measured = measure_tolerance(args.server, args.target_model, target, prompts[:12],
                                         setting.sampling(), seed=args.seed)
            tolerance, source = measured["max_tv"], (
                f"llama-server post-sampling probabilities vs numpy, "
                f"{measured['positions']} positions (max TV)")
            tie = 2 * measured["max_abs"]
        else:
            tolerance = check_real(args.tolerance, "tolerance", "[0, 1]")
            source = "given (--tolerance)"
            tie = 1e-3
        if args.tie is not None:
            tie = check_real(args.tie, "tie", "[0, 1]")
        t2 = time.perf_counter()
        runs = generate(binary, *ggufs, prompts, args.runs, setting, seed=args.seed,
                        n_predict=keep)
        t3 = time.perf_counter()
        common = dict(keep=keep, false_alarm=args.false_alarm, tolerance=tolerance, tie=tie,
                      gamma=setting.gamma if setting.parallel == 1 else None)
        checks = {"exactness": pertoken_check(runs, target, draft,
                                              settings=setting.sampling(),
                                              rng=np.random.default_rng([args.seed, 1]),
                                              **common).to_dict()}
        if setting.parallel == 1 and setting.gamma >= 1:
            checks["rule"] = pertoken_check(runs, target, draft, settings=setting.sampling(),
                                            rng=np.random.default_rng([args.seed, 2]),
                                            law="rule", **common).to_dict()
        if args.control_temperature is not None:
            other = SamplingSettings(temperature=args.control_temperature,
                                     top_k=setting.top_k, top_p=setting.top_p)
            checks["control_temperature"] = pertoken_check(
                runs, target, draft, settings=other,
                rng=np.random.default_rng([args.seed, 3]), **common).to_dict()
        t4 = time.perf_counter()
    except (ValueError, FileNotFoundError, OutputError, EngineError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    versions = {"llama_cpp_python": args.llama_cpp_python, "binary": str(binary)}
    summary = summarise(setting, runs, checks, tolerance=tolerance, tolerance_source=source,
                        seconds={"setup": round(t1 - t0, 1), "tolerance": round(t2 - t1, 1),
                                 "runs": round(t3 - t2, 1), "checks": round(t4 - t3, 1),
                                 "per_run": round((t3 - t2) / len(runs), 3),
                                 "total": round(t4 - t0, 1)},
                        versions=versions)
    print(json.dumps(summary.to_dict(), indent=1))
    return 0 if summary.verdict == "PASS" else 1


def matrix_rows(summary: Mapping, *, report: str,
                           rule: str | None = None) -> list[MatrixRow]:
    """The row of :mod:`specdec.conformance.adapters.llama_speculative`'s summary
    (``rule``: one line for the rule; default, every step of the summary's)."""
    s, ex = summary["setting"], summary["checks"]["exactness"]
    control = summary["checks"].get("control_temperature")
    rule_tv = ex.get("extra", {}).get("rule_vs_target_tv")
    return [MatrixRow(
        implementation="llama.cpp llama-speculative",
        version=f"llama-cpp-python {summary['versions'].get('llama_cpp_python')} sources",
        interface="command line, seeded; every emitted token tested",
        setting=f"temperature {s['temperature']:g}, γ = {s['gamma']}, -np {s['parallel']}",
        rule=rule or rule_line(summary["rule"]), verdict=summary["verdict"],
        tv=rule_tv, detectable_tv=ex["detectable_tv"], trials=ex["tokens"],
        seconds=summary["seconds"]["total"],
        control="-" if control is None else (
            f"temperature mismatch: {'FAIL, as it must' if not control['passed'] else 'pass: the control missed'}"),
        note=(f"per-token TV of the rule read from the code {rule_tv:.2f} ({report})"
              if summary["verdict"] == "FAIL" and rule_tv is not None else ""))]


#: This engine in Appendix C's first table.
SCOPE = Scope("llama.cpp llama-speculative", ("llama.cpp llama-speculative",),
              "llama.cpp's example binary, built here, on its command line; book's models",
              "arg-max draft verified with min(1, p/q) as if sampled",
              "parallel drafts (`-np` > 1); GPU builds",
              "`llama-speculative-argmax-draft.md`: not sent",
              where={"rule": "temperature > 0"}, position=50)

#: The adapter's declaration (:mod:`specdec.conformance.adapters`).
ADAPTER = Adapter("llama_speculative", None, SCOPE, matrix_rows, example={
    "summary": {
    "setting": {"temperature": 1.0, "gamma": 3, "parallel": 1}, "verdict": "PASS",
    "rule": {"draft": "r"}, "versions": {"llama_cpp_python": "0"}, "seconds": {"total": 1.0},
    "checks": {"exactness": {"passed": True, "tokens": 10, "detectable_tv": 0.05}}},
    "facts": {"report": "reports/r.md"}})


if __name__ == "__main__":
    sys.exit(main())
