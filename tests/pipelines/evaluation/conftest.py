"""The tiny sweep shared by the command-line and document tests (run once per session)."""

from __future__ import annotations

import pytest

from pipelines.evaluation import cli


@pytest.fixture(scope="session")
def sweep(tmp_path_factory):
    """(exit code, output directory) of a 3-dataset, 3-mechanism epsilon sweep on 2 workers."""
    out = tmp_path_factory.mktemp("sweep")
    code = cli.main(["--users", "300", "--slots", "200", "--repeats", "2", "--sweep", "epsilon",
                     "--datasets", "sin,log,tlns", "--mechanisms", "pbd,bd,pba", "--workers", "2",
                     "--output", str(out), "--quiet"])
    return code, out
