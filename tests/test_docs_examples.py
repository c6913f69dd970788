"""The Beam example in ``docs/usage.md`` is a test as it stands: this runs the very block of the document (the
``python`` block after ``<!-- example: testpipeline -->``), so the example and the test cannot drift apart.

The example builds a ``TestPipeline`` on ``FnApiRunner`` (Beam's default DirectRunner would fetch the Prism
binary), feeds four lines through ``ParseEvents`` and ``PrivateStreamHistogram`` and checks with ``assert_that``:
two slots released over 4 bins with 1 and 2 registered users, the malformed line a dead letter with its reason,
no ledger violation.  It failed before this change: the README's snippet used an undefined ``lines`` and there
was no ``TestPipeline`` example anywhere."""

from __future__ import annotations

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "<!-- example: testpipeline -->"


def example() -> str:
    with open(os.path.join(ROOT, "docs", "usage.md"), encoding="utf-8") as f:
        text = f.read()
    found = re.search(re.escape(MARKER) + r"\s*\n```python\n(.*?)\n```", text, re.S)
    assert found, f"docs/usage.md has no python block after {MARKER}"
    return found.group(1)


def test_the_testpipeline_example_runs_and_checks_the_releases():
    code = example()
    assert "TestPipeline" in code and "assert_that" in code
    exec(compile(code, "docs/usage.md (example: testpipeline)", "exec"), {"__name__": "docs_example"})


def test_the_example_fails_when_its_expectation_is_wrong():
    """The example's assert_that really checks: the same code with one wrong expected slot fails."""
    code = example().replace("(1700000400.0, 4, 2)", "(1700000400.0, 4, 3)")
    assert "(1700000400.0, 4, 3)" in code
    with pytest.raises(Exception, match="Failed assert|equal_to|unexpected|missing"):
        exec(compile(code, "docs/usage.md (altered)", "exec"), {"__name__": "docs_example"})
