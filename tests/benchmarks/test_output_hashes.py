"""The outputs' fingerprints (benchmarks/output_hashes.py): timing ignored, shard order ignored, anything else seen."""

from __future__ import annotations

import json

from benchmarks.output_hashes import JOBS, compare, fingerprints_of


def write_job(work, lines: list[str], seconds: float, fresh: int) -> None:
    out = work / JOBS["main_job"]
    out.mkdir(parents=True)
    (out / "releases-00000-of-00001.jsonl").write_text("".join(lines))
    (out / "report.json").write_text(json.dumps({"fresh": fresh, "wall_seconds": seconds}))


def test_fingerprints_ignore_timing_and_shard_order_but_not_content(tmp_path):
    write_job(tmp_path / "a", ['{"slot": 1}\n', '{"slot": 2}\n'], 1.0, 3)
    write_job(tmp_path / "b", ['{"slot": 2}\n', '{"slot": 1}\n'], 9.0, 3)
    write_job(tmp_path / "c", ['{"slot": 1}\n', '{"slot": 3}\n'], 1.0, 4)
    a, b, c = (fingerprints_of(str(tmp_path / name)) for name in "abc")
    assert "skipped" in a["tdrive_replay"]
    assert compare(a, b) == []
    assert compare(a, c) == ["main_job/releases-00000-of-00001.jsonl", "main_job/report.json"]


def test_every_family_has_a_job_and_the_numeric_stream_is_reproducible(tmp_path):
    from benchmarks.output_hashes import FAMILY_JOBS, write_numeric_stream
    from transforms.mechanisms import Family, mechanism_class

    mechanisms = {flags[flags.index("--mechanism") + 1] for flags in FAMILY_JOBS.values()}
    assert {Family.of(mechanism_class(name)) for name in mechanisms} >= {Family.HOMOGENEOUS, Family.FIXED,
                                                                         Family.LIFETIME}
    assert {"lpd", "plbu", "dpi", "capp"} <= mechanisms  # LDP-IDS, PLBU, DPI and a numeric method
    assert any("--per-user-clients" in flags for flags in FAMILY_JOBS.values())
    write_numeric_stream(str(tmp_path / "a.jsonl"))
    write_numeric_stream(str(tmp_path / "b.jsonl"))
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    rows = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert len({row["user"] for row in rows}) == 200 and min(r["value"] for r in rows) >= 0
