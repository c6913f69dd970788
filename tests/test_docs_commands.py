"""Every command in the README and in ``docs/`` runs as written (issue 27, 'a README a newcomer can follow to the
letter').

The convention, stated in ``docs/usage.md``:

* A command to run is a fenced ``bash`` block.  Each block runs with ``bash -euo pipefail`` in a fresh directory
  that holds a copy of ``examples/`` and ``.venv`` (a link to the environment running the tests), after
  ``. .venv/bin/activate``: the README's set-up, nothing more.  ``PYTHONPATH`` is this checkout, so the code
  under test is the code the docs describe.  No flag is substituted: the docs' commands are small enough to run
  as written (a few seconds each).
* A block that cannot run here (a cloud runner, a live loop, an hour-long regeneration, data not in the
  repository) is preceded by ``<!-- not run: REASON -->``; the reason is required.
* A command is never hidden in an unlabelled or ``sh``/``shell``/``console`` block (that would escape both rules).
* The generated result documents (``results*.md``, ``audit.md``) are records of the command that made them, not
  instructions: they are not run, and their commands are hour-long regenerations with data not in the
  repository.

Also: no document refers to files outside the repository (the project's specification and paper folders, or
its data folder, which a reader of the repository does not have).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md", *sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))]
GENERATED = re.compile(r"docs/(results.*|audit)\.md$")
"""Documents a command wrote (their fenced command is the record of how): not run."""
NOT_RUN = re.compile(r"^<!--\s*not run:(.*?)-->\s*$")
COMMAND_START = re.compile(r"^\s*(\$ |wevent\b|python\b|\.venv/|\./|nice\b|\.\s)")
OUTSIDE = re.compile(r"(\bspec/[a-z_]+\.md|\.\./shared|/work/shared|\bseeds/)")
OUTSIDE_ALLOWED: set[str] = set()
"""Docs allowed a reference outside the repository: none."""
BLOCK_SECONDS = 300


@dataclass(frozen=True)
class Block:
    """One fenced block of a document: where it starts, its language, its text, the not-run reason if marked."""

    doc: str
    line: int
    language: str
    text: str
    not_run: str | None


def read(doc: str) -> str:
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        return f.read()


def blocks(doc: str) -> list[Block]:
    """The fenced blocks of ``doc`` (a path relative to the repository), in order."""
    lines = read(doc).split("\n")
    found, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            language, start = lines[i][3:].strip(), i
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            marker = NOT_RUN.match(before)
            found.append(Block(doc, start + 1, language, "\n".join(lines[start + 1:end]),
                               marker.group(1).strip() if marker else None))
            i = end
        i += 1
    return found


def runnable() -> list[Block]:
    return [b for doc in DOCS if not GENERATED.search(doc) for b in blocks(doc)
            if b.language == "bash" and b.not_run is None]


def test_the_convention_is_followed():
    """Every not-run marker gives a reason and stands before a bash block; no command hides elsewhere."""
    problems = []
    for doc in DOCS:
        for number, line in enumerate(read(doc).split("\n"), 1):
            marker = NOT_RUN.match(line)
            if marker and len(marker.group(1).strip()) < 10:
                problems.append(f"{doc}:{number}: a not-run marker without its reason")
        if GENERATED.search(doc):
            continue
        marked = {b.line for b in blocks(doc) if b.not_run is not None}
        for block in blocks(doc):
            if block.language in ("sh", "shell", "console") or (
                    block.language == "" and any(COMMAND_START.match(line) for line in block.text.split("\n"))):
                problems.append(f"{doc}:{block.line}: commands go in a bash block (```bash)")
            if block.not_run is not None and block.language != "bash":
                problems.append(f"{doc}:{block.line}: a not-run marker before a {block.language or 'plain'} block")
        assert len(marked) == sum(1 for b in blocks(doc) if b.not_run is not None)
    assert not problems, "\n".join(problems)
    assert len(runnable()) >= 10  # the docs keep commands a newcomer can run


def test_no_document_refers_outside_the_repository():
    hits = []
    for doc in DOCS:
        if doc in OUTSIDE_ALLOWED:
            continue
        for number, line in enumerate(read(doc).split("\n"), 1):
            found = OUTSIDE.search(line)
            if found:
                hits.append(f"{doc}:{number}: {found.group(0)}")
    assert not hits, "\n".join(hits)


def test_the_readme_is_short_and_its_example_is_the_file():
    """The README stays an entrance (at most 150 lines); its three-line input example is the example file's head."""
    readme = read("README.md")
    assert len(readme.rstrip("\n").split("\n")) <= 150
    with open(os.path.join(ROOT, "examples", "events.jsonl"), encoding="utf-8") as f:
        head = [next(f).rstrip("\n") for _ in range(3)]
    for doc in ("README.md", "docs/usage.md"):
        examples = [b.text for b in blocks(doc) if b.language == "json"]
        assert examples and examples[0].split("\n") == head, doc


def environment() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONPATH"] = ROOT
    return env


@pytest.mark.parametrize("block", runnable(), ids=lambda b: f"{b.doc}:{b.line}")
def test_the_command_runs_as_written(block, tmp_path):
    shutil.copytree(os.path.join(ROOT, "examples"), tmp_path / "examples")
    os.symlink(sys.prefix, tmp_path / ".venv")  # the environment running the tests, where the README puts it
    if not os.path.exists(tmp_path / ".venv" / "bin" / "activate"):
        pytest.skip(f"the tests do not run in a virtual environment ({sys.prefix} has no bin/activate)")
    script = f". .venv/bin/activate\n{block.text}\n"
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=environment(),
                          capture_output=True, text=True, timeout=BLOCK_SECONDS)
    assert done.returncode == 0, (f"{block.doc}:{block.line} exited {done.returncode}\n{block.text}\n"
                                  f"--- stderr (last lines)\n{done.stderr[-3000:]}")
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_relative_link_names_a_file_of_the_repository():
    broken = []
    for doc in DOCS:
        for target in LINK.findall(read(doc)):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            if not os.path.exists(os.path.join(ROOT, os.path.dirname(doc), target)):
                broken.append(f"{doc}: {target}")
    assert not broken, "\n".join(broken)
