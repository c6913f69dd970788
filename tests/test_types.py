"""The type checker over the public API (the files ``mypy.ini`` lists) reports no error."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_mypy_finds_no_error_in_the_public_api():
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert "No module named mypy" not in result.stderr, "mypy is in the test extra: pip install -e .[test]"
    assert result.returncode == 0 and "Success: no issues found" in result.stdout, result.stdout + result.stderr
