"""The reference anchor runs the authors' loops under Octave beside ours and reports both (not a timed test)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from benchmarks import numeric_anchor


def _unavailable() -> str | None:
    if shutil.which("octave") is None:
        return "GNU Octave is not installed (apt-get install octave)"
    if not os.path.isdir(numeric_anchor.DEFAULT_MIRROR):
        return f"no mirror of github:RONGDUGithub/CAPP at {numeric_anchor.DEFAULT_MIRROR}"
    return None


@pytest.mark.skipif(_unavailable() is not None, reason=str(_unavailable()))
def test_both_sides_are_timed_on_the_same_sizes(capsys):
    assert numeric_anchor.main(["--users", "6", "--slots", "5", "--window", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["users"], result["slots"]) == (6, 5) and result["octave"].startswith("GNU Octave")
    assert set(result["methods"]) == {"sw-direct", "app"}
    for row in result["methods"].values():
        assert row["reference_seconds"] > 0 and row["ours_seconds"] > 0
        assert row["ratio"] == pytest.approx(row["reference_seconds"] / row["ours_seconds"])
        assert row["ours_seconds_per_user_slot"] == pytest.approx(row["ours_seconds"] / 30)


def test_a_missing_mirror_or_octave_is_one_line_not_a_traceback(tmp_path, capsys):
    args = ["--users", "2", "--slots", "2", "--mirror", str(tmp_path / "absent")]
    assert numeric_anchor.main(args + ["--octave", shutil.which("octave") or "octave"]) == 2
    assert "no mirror of the reference" in capsys.readouterr().err
    if shutil.which("octave") is None:
        assert numeric_anchor.main(["--users", "2", "--slots", "2"]) == 2
        assert "Octave is not installed" in capsys.readouterr().err
