"""``report.html``: built from the released and public files only, agreeing with them, rendered by Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from decimal import Decimal

import numpy as np
import pytest

from pipelines import replay, report_html
from pipelines.local import GRID
from pipelines.report_data import PublicConfig, load
from transforms.declarations import RequirementPolicy
from transforms.loaders import synthetic_taxi_stream
from transforms.mechanisms.requirements import FixedRequirement

LEVELS, RATIOS = "hour=fixed:6,2.0;two_hours=fixed:12,1.0", "hour=0.5,two_hours=0.5"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _job(tmp, name: str, extra: list) -> str:
    """The main job's configuration (pipelines.local) on 150 taxis over 6 hours, seeded."""
    data = tmp / "taxis.jsonl"
    if not data.exists():
        synthetic_taxi_stream(str(data), taxis=150, hours=6)
    output = str(tmp / name)
    code = replay.run(["--input", str(data), "--binning", GRID, "--slot-seconds", "600", "--carry-forward",
                       "--start", "2008-02-02T00:00:00Z", "--end", "2008-02-02T06:00:00Z", "--mechanism", "pbd",
                       "--levels", LEVELS, "--level-ratios", RATIOS, "--output", output, "--overwrite", "--quiet",
                       "--insecure-seed", "7", *extra])
    assert code == 0
    return output


@pytest.fixture(scope="module")
def main_job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html")
    return _job(tmp, "out", ["--ledger-detail", "--evaluate"])


@pytest.fixture(scope="module")
def plain_job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html_plain")
    return _job(tmp, "out", [])


def _releases(output: str) -> list[dict]:
    with open(os.path.join(output, "releases-00000-of-00001.jsonl")) as f:
        return sorted((json.loads(line) for line in f), key=lambda r: r["slot"])


def _page(output: str) -> str:
    with open(os.path.join(output, "report.html"), encoding="utf-8") as f:
        return f.read()


def test_the_replay_writes_the_page_with_every_section(main_job):
    page = _page(main_job)
    for section in ("summary", "busiest-bins", "heat-map", "level-usage"):
        assert f'<section id="{section}">' in page
    assert page.count("<svg") == 6 + 2 + 1  # six busiest bins, two heat maps, one usage chart
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # no network
    assert "https://" not in page and "<script src" not in page and "@import" not in page
    with open(os.path.join(main_job, "report.json")) as f:
        report = json.load(f)
    assert f"<td>records_read</td><td class=\"n\">{report['records_read']:,}</td>" in page


def test_the_busiest_bins_are_the_largest_released_means(main_job):
    releases = _releases(main_job)
    means = np.mean([r["estimate"] for r in releases], axis=0)
    expected = sorted(range(means.size), key=lambda b: (-means[b], b))[:6]
    table = re.search(r'<table class="busiest">(.*?)</table>', _page(main_job)).group(1)
    rows = re.findall(r"<td>cell row (\d+), col (\d+)[^<]*</td><td>([^<]+)</td>", table)
    assert [int(r) * 5 + int(c) for r, c, _ in rows] == expected
    for (_, _, shown), b in zip(rows, expected):
        assert float(shown.replace(",", "")) == pytest.approx(means[b], abs=0.005 + 1e-9)


def test_the_heat_map_shows_the_mean_released_count_of_every_cell(main_job):
    means = np.mean([r["estimate"] for r in _releases(main_job)], axis=0)
    section = re.search(r'<section id="heat-map">(.*?)</section>', _page(main_job)).group(1)
    first_map = section.split("</svg>")[0]
    shown = {int(b): v for b, v in re.findall(r"<title>bin (\d+): ([^<]+)</title>", first_map)}
    assert sorted(shown) == list(range(25))
    for b, text in shown.items():
        assert float(text.replace(",", "")) == pytest.approx(means[b], abs=0.005 + 1e-9)


def test_level_usage_over_time_is_the_ledgers_own_window_sums(main_job):
    """Recomputed here by brute force from ledger-* and the public rule; the page's largest values agree with
    usage-* (so every user is in a level) and the curve never exceeds the bound."""
    policy = RequirementPolicy({"hour": FixedRequirement(6, 2.0), "two_hours": FixedRequirement(12, 1.0)},
                               level_shares=(("hour", 0.5), ("two_hours", 0.5)))
    charges: dict = {}
    with open(os.path.join(main_job, "ledger-00000-of-00001.jsonl")) as f:
        for line in f:
            entry = json.loads(line)
            charges.setdefault(entry["user"], {})[entry["slot"]] = Decimal(entry["charge"])
    data = load(main_job, PublicConfig("grid:116,116.8,39.5,40.3,5x5", LEVELS, RATIOS))
    assert data.usage_source == "ledger" and data.unmatched_users == 0
    for level in data.levels:
        requirement = policy.levels[level.name]
        users = [u for u in charges if policy.assigned(u) == ("level", level.name)]
        assert level.users == len(users) > 0
        for i, slot in enumerate(level.slots.tolist()):
            worst = max(sum(charges[u].get(s, Decimal(0)) for s in range(slot - requirement.window + 1, slot + 1))
                        for u in users) / Decimal(str(requirement.epsilon))
            assert level.usage[i] == pytest.approx(float(worst), abs=1e-9)
        assert level.usage.max() <= 1.0
    with open(os.path.join(main_job, "usage-00000-of-00001.jsonl")) as f:
        largest = max(json.loads(line)["max_window_usage_ratio"] for line in f)
    assert max(level.largest for level in data.levels) == largest
    page = _page(main_job)
    assert 'class="bound"' in page and page.count('class="usage"') == 2


def test_nothing_is_read_from_the_evaluation_folder(main_job, tmp_path):
    """The same page with OUTPUT/evaluation/ (the true histograms) removed: it was never read."""
    copy = tmp_path / "copy"
    shutil.copytree(main_job, copy)
    shutil.rmtree(copy / "evaluation")
    config = PublicConfig("grid:116,116.8,39.5,40.3,5x5", LEVELS, RATIOS)
    report_html.build(str(copy), config)
    with_evaluation = report_html.render(load(main_job, config))
    without = _page(str(copy))
    assert without.replace(str(copy), main_job) == with_evaluation


def test_the_command_rebuilds_it_from_the_page_own_configuration(main_job, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(main_job, copy)
    before = _page(str(copy))
    os.remove(copy / "ledger-00000-of-00001.jsonl")  # the rebuild reads the files as they are now
    result = subprocess.run([sys.executable, "-m", "pipelines.report_html", str(copy)], capture_output=True,
                            text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert result.returncode == 0, result.stderr
    after = _page(str(copy))
    assert after != before and '<section id="heat-map">' in after  # the grid came from the page itself
    assert "run the replay with --ledger-detail" in after and 'class="usage"' not in after
    bad = subprocess.run([sys.executable, "-m", "pipelines.report_html", str(tmp_path / "missing")],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: ")


def test_without_the_ledger_detail_each_level_shows_its_largest_usage(plain_job):
    data = load(plain_job, PublicConfig(GRID, LEVELS, RATIOS))
    assert data.usage_source == "usage" and {level.name for level in data.levels} == {"hour", "two_hours"}
    assert all(level.usage.size == 0 and 0 < level.largest <= 1 for level in data.levels)
    assert sum(level.users for level in data.levels) == data.users == 150


def test_the_refresher_builds_at_most_every_interval_and_never_loses_a_release(plain_job, monkeypatch):
    now = [0.0]
    built = []
    monkeypatch.setattr(report_html, "write_after_job", lambda output, config: built.append(now[0]))
    refresher = report_html.Refresher(plain_job, PublicConfig(GRID), min_seconds=10, clock=lambda: now[0])
    assert refresher.refresh(True) and built == [0.0]
    now[0] = 5.0
    assert not refresher.refresh(True)       # too soon: pending
    now[0] = 11.0
    assert refresher.refresh(False)          # a round without releases draws the pending one
    now[0] = 30.0
    assert not refresher.refresh(False)      # nothing new
    assert built == [0.0, 11.0]


def _chromium() -> str | None:
    return next(filter(None, (shutil.which(name) for name in ("chromium", "chromium-browser"))), None)


@pytest.mark.skipif(_chromium() is None, reason="no chromium binary (Debian: apt-get install -y chromium)")
def test_headless_chromium_renders_the_page(main_job, tmp_path):
    """Chromium loads the file with the network off, lays out every SVG and reports no error from the page."""
    url = "file://" + os.path.abspath(os.path.join(main_job, "report.html"))
    common = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
              "--user-data-dir=" + str(tmp_path / "profile"), "--proxy-server=127.0.0.1:9",
              "--proxy-bypass-list=<-loopback>", "--enable-logging=stderr", "--v=0"]
    dumped = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    assert dumped.stdout.count("<svg") == 9 and 'id="level-usage"' in dumped.stdout
    assert "CONSOLE" not in dumped.stderr and "Uncaught" not in dumped.stderr
    screenshot = tmp_path / "report.png"
    shot = subprocess.run([*common, f"--screenshot={screenshot}", "--window-size=1200,2600", url],
                          capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0 and screenshot.stat().st_size > 10_000, shot.stderr[-2000:]
    keep = os.environ.get("REPORT_HTML_SCREENSHOT")
    if keep:
        shutil.copy(screenshot, keep)


def _records_on_page(page: str) -> int:
    found = re.search(r"<td>stream &#x27;default&#x27;: release records on disk</td><td class=\"n\">(\d+)</td>", page)
    return int(found.group(1)) if found else 0


def test_the_watch_loop_redraws_the_page_as_slots_are_released(tmp_path):
    """After every round that released slots the page shows exactly the releases on disk (refreshed with no
    minimum interval here), so it follows the loop slot by slot; the final page has the loop's report.json."""
    from pipelines.live import watch
    from transforms.parse import ParseConfig
    from transforms.private_histogram import PrivateStreamHistogram

    incoming, out = tmp_path / "in", tmp_path / "out"
    incoming.mkdir()
    for slot in range(4):
        records = [{"user": f"u{u}", "time": slot * 60 + 10 + u, "value": (slot + u) % 4} for u in range(4)]
        (incoming / f"slot{slot}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    transform = PrivateStreamHistogram("pbd", 60, 4, insecure_seed=3,
                                       policy=RequirementPolicy(default=FixedRequirement(3, 1.0)))
    now = [0.0]
    refresher = report_html.Refresher(str(out), PublicConfig("int:4", requirement="fixed:3,1.0"), min_seconds=0)
    seen = []

    def on_round(released: bool) -> None:
        refresher.refresh(released)
        if released:
            on_disk = len((out / "releases-live.jsonl").read_text().splitlines())
            seen.append((on_disk, _records_on_page(_page(str(out)))))

    counts = watch(str(incoming), str(out), ParseConfig(bins=4), transform, 30.0, 6, clock=lambda: now[0],
                   sleep=lambda s: now.__setitem__(0, now[0] + s), on_round=on_round)
    assert len(seen) >= 3 and all(on_disk == shown for on_disk, shown in seen), seen
    assert [n for n, _ in seen] == sorted({n for n, _ in seen})  # one redraw per round that released a slot
    report_html.write_after_job(str(out), refresher.config)  # what streaming.run_watch does after the loop
    page = _page(str(out))
    assert _records_on_page(page) == counts["releases"] == 4
    assert "the watch loop writes no per-user usage" in page
    assert "<td>all users</td><td>w = 3, E = 1</td></tr></table>" in page  # no users, no usage: none on disk


def test_the_streaming_demo_writes_the_page(tmp_path):
    from pipelines import streaming

    out = tmp_path / "demo"
    assert streaming.run(["--demo", "--demo-taxis", "15", "--max-slots", "6", "--requirement", "fixed:3,1.0",
                          "--output", str(out), "--quiet", "--insecure-seed", "3"]) == 0
    page = _page(str(out))
    files = sorted(out.glob("releases-*.jsonl"))
    assert _records_on_page(page) == len(files) > 0
    assert '<section id="heat-map">' in page  # the demo's T-Drive grid, from its own --binning default
    assert json.loads(re.search(r'id="public-configuration">(.*?)</script>', page).group(1))["binning"] == "tdrive"


def test_a_lifetime_budget_is_drawn_as_everything_spent_since_the_start(tmp_path):
    """DPI under lifetime:2.0: the curve is each slot's cumulative charge over E (the ledger's own sums), it never
    falls, and it ends at the largest usage the ledger wrote."""
    gen = np.random.default_rng(0)
    lines = [json.dumps({"user": f"u{u}", "time": 10 * t + float(gen.random()), "value": int(gen.integers(4))})
             for t in range(6) for u in range(20)]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert replay.run(["--input", str(tmp_path / "events.jsonl"), "--binning", "int:4", "--slot-seconds", "10",
                       "--start", "0", "--end", "60", "--requirement", "lifetime:2.0", "--mechanism", "dpi",
                       "--epsilon", "2.0", "--param", "pool_size=50", "--param", "draws=4", "--output", str(out),
                       "--quiet", "--insecure-seed", "1", "--ledger-detail"]) == 0
    data = load(str(out), PublicConfig("int:4", requirement="lifetime:2.0"))
    (level,) = data.levels
    assert level.name == "all users" and level.users == 20 and data.unmatched_users == 0
    spent: dict = {}
    with open(out / "ledger-00000-of-00001.jsonl") as f:
        for line in f:
            entry = json.loads(line)
            spent[entry["slot"]] = max(spent.get(entry["slot"], Decimal(0)), Decimal(entry["charge"]))
    expected = np.cumsum([float(spent.get(s, 0)) for s in level.slots.tolist()]) / 2.0
    assert level.usage == pytest.approx(expected, abs=1e-9)  # every user is charged alike here
    assert np.all(np.diff(level.usage) >= 0) and level.usage[-1] == pytest.approx(level.largest, abs=1e-12)
    assert _page(str(out)).count('class="usage"') == 1


def test_a_ledger_too_large_to_read_falls_back_to_each_levels_largest_usage(main_job, monkeypatch):
    from pipelines import report_data

    monkeypatch.setattr(report_data, "LEDGER_READ_LIMIT", 1000)
    data = load(main_job, PublicConfig(GRID, LEVELS, RATIOS))
    assert data.usage_source == "usage" and data.ledger_not_read == os.path.getsize(
        os.path.join(main_job, "ledger-00000-of-00001.jsonl"))
    monkeypatch.setattr(report_data, "LEDGER_READ_LIMIT", 2**40)
    whole = load(main_job, PublicConfig(GRID, LEVELS, RATIOS))
    assert [(level.name, level.users, level.largest) for level in data.levels] == \
        [(level.name, level.users, level.largest) for level in whole.levels]  # every user in their hashed level
    assert "are larger than this page reads" in report_html.render(data)
