#!/usr/bin/env python3
"""Which transformers minor series changed the assisted-generation code.

Reads the wheel of the last release of every minor series from 4.37 to the newest
(``pip download --no-deps``, cached under ``~/.cache/specdec-book/hf-wheels/``;
``SPECDEC_HF_WHEELS`` overrides the folder), extracts the functions that decide what an
assisted ``generate`` emits, and compares each series with the one before:

* ``generation/utils.py``: ``_speculative_sampling`` (the accept test and the residual)
  and ``GenerationMixin._assisted_decoding`` (the loop that calls it, crops at
  end-of-sequence, and takes the greedy path when there are no draft logits);
* ``generation/candidate_generator.py``: every function and method (the assistant's
  drafting, prompt lookup, the assistant with a different tokenizer).

A function counts as changed when its code differs once docstrings, comments and
formatting are removed (``ast.unparse`` of the tree without docstrings). Each series is
classified (:func:`classify`): the *verification* changed when ``_speculative_sampling``
did or the lines of ``_assisted_decoding`` that decide the kept tokens did; *drafting*
when candidate-generator code did, and among it the *draw* when the lines that decide how
a generator the kit drives draws its drafts did (:data:`DRAW_LINE`: sampled or greedy, and
with which temperature or truncation); *loop* for the rest of ``_assisted_decoding``.

The rule for which releases are tested (:func:`check`): a release in every series whose
verification changed, and, after every series whose draw changed, a release before the
verification or the draw changes again. A change to how drafts are drawn breaks
exactness as surely as one to how they are verified: 4.41 made the assistant draft
greedily while its probabilities were still used as the law it had sampled from, a
known end-to-end bias at temperature > 0 (huggingface/transformers#32867), undone in
4.45 (huggingface/transformers#33534); neither series changed the verification.

The result is committed as ``tools/hf_series.json`` (Appendix A3's table of series reads
it, without downloading anything); ``--check`` recomputes it from the wheels and checks
the rule against tools/hf_envs.py's releases::

    python tools/hf_series.py               # download what is missing, print the table
    python tools/hf_series.py --write       # rewrite tools/hf_series.json
    python tools/hf_series.py --check       # exit 1 if the committed table is stale
    python tools/hf_series.py --diff 4.46   # the changed functions' diff, 4.45.2 -> 4.46.3
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

#: Last release of every minor series from 4.37 to the newest, as PyPI listed them.
LAST_OF_SERIES = (
    "4.37.2", "4.38.2", "4.39.3", "4.40.2", "4.41.2", "4.42.4", "4.43.4", "4.44.2",
    "4.45.2", "4.46.3", "4.47.1", "4.48.3", "4.49.0", "4.50.3", "4.51.3", "4.52.4",
    "4.53.3", "4.54.1", "4.55.4", "4.56.2", "4.57.6", "5.0.0", "5.1.0", "5.2.0", "5.3.0",
    "5.4.0", "5.5.4", "5.6.2", "5.7.0", "5.8.1", "5.9.0", "5.10.4", "5.11.0", "5.12.1",
    "5.13.1", "5.14.1", "5.15.1", "5.16.1", "5.17.0", "5.18.0", "5.19.0", "5.20.2",
    "5.21.1", "5.22.2", "5.23.0", "5.24.0",
)

#: Files read inside the wheel, and which of their functions count (None: all of them).
SOURCES = {
    "transformers/generation/utils.py": ("_speculative_sampling",
                                         "GenerationMixin._assisted_decoding",
                                         "GenerationMixin.assisted_decoding"),
    "transformers/generation/candidate_generator.py": None,
}

#: Functions renamed across the series (4.39 made ``assisted_decoding`` private).
ALIASES = {"GenerationMixin.assisted_decoding": "GenerationMixin._assisted_decoding"}

#: What the series the book tests changed, read from the diffs (``--diff SERIES``); the
#: rest of the table is computed. :func:`check` requires each to have changed something.
NOTES = {
    "4.40": "`_speculative_sampling` loses `max_matches` (the length cap moves to the caller); "
            "`last_assistant_token_is_eos` becomes `is_done_candidate`",
    "4.41": "the assistant drafts greedily (`do_sample = False`, its sampling settings "
            "cleared) while its probabilities are still taken as the law it sampled from: "
            "biased at temperature > 0 (huggingface/transformers#32867)",
    "4.45": "the assistant samples again when the target samples (4.41's greedy draft "
            "reverted, huggingface/transformers#33534)",
    "4.46": "the assistant with a different tokenizer (`assistant_tokenizer`, `tokenizer`): "
            "drafts re-tokenised as text, verified without draft probabilities",
    "5.14": "`assistant_ensemble_weight`: accept against `w p + (1 - w) q` (lossy, opt-in); "
            "an empty residual falls back to `p`; drafts cropped at `max_length`",
    "5.18": "`is_done_candidate` removed: `_assisted_decoding` crops the kept tokens at the "
            "first end-of-sequence and sets `n_matches` from what is left",
}

#: The committed result of :func:`changes` (``--write`` rewrites it; Appendix A3 reads it).
DATA = Path(__file__).with_suffix(".json")


def wheels_dir() -> Path:
    default = Path.home() / ".cache" / "specdec-book" / "hf-wheels"
    return Path(os.environ.get("SPECDEC_HF_WHEELS", default))


def series_of(release: str) -> str:
    """``"4.46.3" -> "4.46"``."""
    parts = release.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise ValueError(f"release: expected MAJOR.MINOR[.PATCH] (got {release!r})")
    return ".".join(parts[:2])


def wheel(release: str) -> Path:
    """The release's wheel, downloaded with pip on first use.

    Raises
    ------
    RuntimeError
        If pip cannot download it (no network, unknown release).
    """
    folder = wheels_dir()
    path = folder / f"transformers-{release}-py3-none-any.whl"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                               "--only-binary", ":all:", f"transformers=={release}",
                               "-d", str(folder)], capture_output=True, text=True)
        if proc.returncode != 0 or not path.exists():
            raise RuntimeError(f"pip could not download transformers {release}: "
                               f"{proc.stderr.strip()[-500:]}")
    return path


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
    return tree


def functions(source: str, wanted=None) -> dict[str, str]:
    """Normalised code of every top-level function and method, by qualified name."""
    tree = ast.parse(source)
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f"{node.name}.{sub.name}"] = sub
    if wanted is not None:
        out = {k: v for k, v in out.items() if k in wanted}
    return {k: ast.unparse(_strip_docstrings(v)) for k, v in out.items()}


def extract(release: str) -> dict[str, str]:
    """``{"file:function": normalised code}`` for one release (a file it lacks is skipped)."""
    out = {}
    with zipfile.ZipFile(wheel(release)) as zf:
        names = set(zf.namelist())
        for path, wanted in SOURCES.items():
            if path not in names:
                continue
            short = path.rsplit("/", 1)[1]
            for name, code in functions(zf.read(path).decode("utf-8"), wanted).items():
                out[f"{short}:{ALIASES.get(name, name)}"] = code
    return out


def changes(releases=LAST_OF_SERIES) -> list[dict]:
    """One entry per series after the first: the functions added, removed and changed."""
    out, before = [], extract(releases[0])
    for rel in releases[1:]:
        now = extract(rel)
        out.append({"series": series_of(rel), "release": rel,
                    "added": sorted(set(now) - set(before)),
                    "removed": sorted(set(before) - set(now)),
                    "changed": sorted(k for k in set(now) & set(before) if now[k] != before[k]),
                    **classify(before, now)})
        before = now
    return out


#: Lines of ``_assisted_decoding`` that decide which tokens are kept: the call of
#: ``_speculative_sampling``, and assignments computing the kept tokens, their number, the
#: target's samples or the end-of-sequence crop (an initialisation to a literal is not one).
VERIFICATION_LINE = re.compile(
    r"_speculative_sampling\(|^\s*(valid_tokens|n_matches|selected_tokens|probs|"
    r"is_done_candidate|eos_positions|num_drafted)\b[^=]*=(?!=)(?!\s*\d+\s*$)")


#: The candidate generators the kit drives (the assistant, prompt lookup, the assistant
#: with another tokenizer in both of its forms) and the base class they share.
DRAW_GENERATORS = ("AssistedCandidateGenerator.", "AssistedCandidateGeneratorDifferentTokenizers.",
                   "UniversalSpeculativeDecodingGenerator.", "PromptLookupCandidateGenerator.",
                   "CandidateGenerator.")

#: Lines of those generators that decide how drafts are drawn: sampled or greedy, and the
#: sampling settings (temperature, truncations) the draft's law is taken at.
DRAW_LINE = re.compile(r"\b(do_sample|temperature|top_k|top_p|min_p|typical_p|epsilon_cutoff|"
                       r"eta_cutoff|multinomial)\b")


def _changed_lines(before: str, after: str) -> list[str]:
    """The lines removed or added between two normalised functions."""
    return [line[1:] for line in difflib.unified_diff(before.splitlines(), after.splitlines(),
                                                      lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def touches_draw(before: str, after: str) -> bool:
    """Whether the changed lines of a candidate generator match :data:`DRAW_LINE`."""
    return any(DRAW_LINE.search(line) for line in _changed_lines(before, after))


def touches_verification(before: str, after: str) -> bool:
    """Whether the changed lines of ``_assisted_decoding`` match :data:`VERIFICATION_LINE`."""
    return any(VERIFICATION_LINE.search(line) for line in _changed_lines(before, after))


def classify(before: dict, now: dict) -> dict:
    """What a series changed, in three kinds.

    ``verification``: ``_speculative_sampling``'s code, or the lines of
    ``_assisted_decoding`` that decide the kept tokens (:func:`touches_verification`);
    ``drafting``: candidate-generator functions added, removed or changed; ``draw``: those
    of them, in the generators the kit drives (:data:`DRAW_GENERATORS`), whose changed
    lines decide how drafts are drawn (:func:`touches_draw`); ``loop``: the rest of
    ``_assisted_decoding`` (caches, outputs, arguments).
    """
    sp, ad = "utils.py:_speculative_sampling", "utils.py:GenerationMixin._assisted_decoding"
    out = {"verification": [], "drafting": [], "draw": [], "loop": []}
    if before.get(sp) != now.get(sp):
        out["verification"].append("_speculative_sampling")
    if before.get(ad) != now.get(ad):
        kind = "verification" if touches_verification(before.get(ad, ""), now.get(ad, "")) else "loop"
        out[kind].append("_assisted_decoding")
    for k in sorted(set(before) | set(now)):
        if k.startswith("candidate_generator.py:") and before.get(k) != now.get(k):
            name = k.split(":", 1)[1]
            out["drafting"].append(name)
            if name.startswith(DRAW_GENERATORS) and touches_draw(before.get(k, ""), now.get(k, "")):
                out["draw"].append(name)
    return out


def diff(series: str) -> str:
    """Unified diff of the changed functions between ``series`` and the series before."""
    rels = {series_of(r): r for r in LAST_OF_SERIES}
    if series not in rels or series == series_of(LAST_OF_SERIES[0]):
        raise ValueError(f"series: must be one of {', '.join(list(rels)[1:])} (got {series!r})")
    order = list(rels)
    a, b = rels[order[order.index(series) - 1]], rels[series]
    fa, fb = extract(a), extract(b)
    lines = []
    for k in sorted(set(fa) | set(fb)):
        if fa.get(k) != fb.get(k):
            lines += difflib.unified_diff(fa.get(k, "").splitlines(), fb.get(k, "").splitlines(),
                                          f"{a}/{k}", f"{b}/{k}", lineterm="", n=1)
    return "\n".join(lines)


def summary(found: list[dict]) -> list[dict]:
    """The series that changed something, with the functions by kind (JSON-ready)."""
    return [{k: e[k] for k in ("series", "release", "verification", "drafting", "draw", "loop")}
            for e in found if e["verification"] or e["drafting"] or e["loop"]]


def check(rows: list[dict], releases=()) -> list[str]:
    """Disagreements between the committed table and the sources (empty when they agree).

    ``rows`` is :func:`summary` of the sources; checked: :data:`DATA` holds the same,
    every series in :data:`NOTES` changed something, and ``releases`` (tools/hf_envs.py's
    ``RELEASES``) follow the rule (:func:`uncovered`).
    """
    problems = []
    committed = json.loads(DATA.read_text()) if DATA.exists() else None
    if committed != rows:
        problems.append(f"{DATA.name} differs from the sources: run `python tools/hf_series.py --write`")
    changed = {r["series"] for r in rows}
    problems += [f"NOTES names {s}, whose code did not change" for s in NOTES if s not in changed]
    problems += uncovered(rows, releases)
    return problems


def _key(series: str) -> tuple:
    return tuple(int(p) for p in series.split("."))


def uncovered(rows: list[dict], releases=()) -> list[str]:
    """Where ``releases`` break the rule (empty when they follow it).

    The rule: a tested release in every series whose verification changed, and after
    every series whose draw changed (``rows[i]["draw"]``), a tested release in that series
    or a later one before the next series that changes the verification or the draw.

    Parameters
    ----------
    rows : list of dict
        :func:`summary` of the sources (or the committed :data:`DATA`), in series order.
    releases : sequence of str
        The releases tested.
    """
    tested = sorted({series_of(r) for r in releases}, key=_key)
    problems = [f"series {r['series']} changed the verification and has no release in RELEASES"
                for r in rows if r["verification"] and r["series"] not in tested]
    marks = [r["series"] for r in rows if r["verification"] or r.get("draw")]
    for r in rows:
        if not r.get("draw"):
            continue
        later = [m for m in marks if _key(m) > _key(r["series"])]
        end = _key(later[0]) if later else (10 ** 6,)
        if not any(_key(r["series"]) <= _key(t) < end for t in tested):
            until = f" before {later[0]}" if later else ""
            problems.append(f"series {r['series']} changed how drafts are drawn and no release "
                            f"from it on{until} is in RELEASES")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if the committed table disagrees with the sources")
    ap.add_argument("--write", action="store_true", help=f"rewrite {DATA.name}")
    ap.add_argument("--diff", metavar="SERIES", help="print the diff of one series")
    args = ap.parse_args(argv)
    if args.diff:
        print(diff(args.diff))
        return 0
    rows = summary(changes())
    if args.write:
        DATA.write_text(json.dumps(rows, indent=1) + "\n")
    for r in rows:
        kinds = "; ".join(f"{k}: {', '.join(r[k])}" for k in ("verification", "draw", "drafting", "loop")
                          if r[k])
        print(f"{r['series']:>5} ({r['release']}) {kinds}")
        if r["series"] in NOTES:
            print(f"        {NOTES[r['series']]}")
    sys.path.insert(0, str(Path(__file__).parent))
    import hf_envs

    problems = check(rows, hf_envs.RELEASES)
    for p in problems:
        print("MISMATCH", p, file=sys.stderr)
    return 1 if (args.check and problems) else 0


if __name__ == "__main__":
    sys.exit(main())
