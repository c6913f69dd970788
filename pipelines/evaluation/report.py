"""The results document (``summary.md``, ``--report``): setup and provenance, the privacy check, the papers'
claims checked, the adaptive mechanism, the ratio experiments, the useful regimes, one section of tables per
dataset, plots and running time."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess

import numpy as np

from pipelines.evaluation.claims import CLAIMS, ClaimCheck, check_claims, claim_verdict, paired
from pipelines.evaluation.experiment import NOISE_NOTE
from pipelines.evaluation.paper import PAPER_AMRE, PAPER_NOTE
from pipelines.evaluation.ratio import OBSES, dc_sample_shortfall, switch_point
from pipelines.evaluation.stats import ALPHA, paired_lower
from pipelines.evaluation.sweeps import (BINS, DEFAULT_EPSILON, DEFAULT_WINDOW, EPSILON_REPEATS, RATIO_HIGH_EPSILON,
                                         RATIO_LOW_WINDOW, RATIO_SWEEPS, RATIOS, REAL, SWEEP_COLUMN,
                                         SWEEP_LABELS, SYNTHETIC, dataset_name, label_name, run_labels, scenario_of,
                                         sweep_points)
from pipelines.evaluation_data import EventStream
from transforms.mechanisms.scenarios import SCENARIOS

REAL_NOTE = ("The papers ran Taxi on all 10,357 taxis and Foursquare on 5% of the global users binned by country; "
             "here {users:,} users on a 10x10 grid, so absolute AMRE values are not comparable: compare orderings "
             "and relative reductions.")


LDP_POINTER = ("The central mechanisms (the PWSM papers). The local-DP methods of LDP-IDS are evaluated in\n"
               "[`results_ldp_ids.md`](results_ldp_ids.md), the numeric local-DP streams (SW-direct, IPP, APP, CAPP)\n"
               "in [`results_numeric.md`](results_numeric.md), DPI under a lifetime budget in\n"
               "[`results_dpi.md`](results_dpi.md).")
"""The lines heading the document that point to the other families' results, beside it in docs/."""


def formatted_number(value: float) -> str:
    """``value`` for a results table: thousands separated, at most four significant digits below 100."""
    if not np.isfinite(value):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.4g}"


def mean_std(values: list[float]) -> str:
    """Mean and the sample standard deviation (``12,345 ± 1,234``)."""
    mean = float(np.mean(values))
    if len(values) < 2:
        return formatted_number(mean)
    return f"{formatted_number(mean)} ± {formatted_number(float(np.std(values, ddof=1)))}"


def _repeat_means(rows: list[dict], column: str) -> list[float]:
    """``column``'s mean over each repeat's rows (one value per repeat, in repeat order)."""
    by_repeat: dict[int, list[float]] = {}
    for row in rows:
        by_repeat.setdefault(row["repeat"], []).append(row[column])
    return [float(np.mean(by_repeat[repeat])) for repeat in sorted(by_repeat)]


def _fraction_mean_std(values: list[float]) -> str:
    """A fraction's mean ± sample standard deviation, three decimals (``0.177 ± 0.004``)."""
    mean = f"{float(np.mean(values)):.3f}"
    return mean if len(values) < 2 else f"{mean} ± {float(np.std(values, ddof=1)):.3f}"


def markdown_table(header: list[str], body: list[list[str]]) -> list[str]:
    """The lines of a Markdown table with ``header`` and the rows of ``body``."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in body]


def _dataset_rows(stream_info: dict, args) -> list[list[str]]:
    body = []
    for dataset in args.datasets:
        info = stream_info.get(dataset)
        if dataset in SYNTHETIC:
            body.append([dataset_name(dataset), f"{args.users:,}", f"{args.slots:,}", str(BINS),
                         {"sin": "p_t = 0.05 sin(0.01 t) + 0.075", "log": "p_t = 0.25 / (1 + e^(-0.01 t))",
                          "tlns": "p_t = clip(p_(t-1) + N(0, 0.0025²)), p_0 = 0.05"}[dataset]
                         + "; each user's value is 1 with probability p_t"])
        elif info is not None:
            counts = info.counts
            body.append([dataset_name(dataset), f"{info.users:,}", f"{info.slots:,}", str(info.bins),
                         f"{info.description}; {counts['records_read']:,} records read, "
                         f"{counts['dead_letters']:,} dropped (outside the grid or invalid), "
                         f"{counts['duplicates']:,} more than one per user and slot; carried forward"])
    return body


def document(rows: list[dict], args, streams: dict[str, EventStream], skipped: dict[str, str],
             plots: list[str] | None, *, command: str | None = None, plot_prefix: str = "",
             wall_seconds: float | None = None, commit: str = "", regimes: dict | None = None,
             original: dict | None = None) -> str:
    """The results document: setup, privacy check, the papers' claims checked, tables, plots, timing."""
    datasets = [d for d in args.datasets if any(r["dataset"] == d for r in rows)]
    lines = ["# Evaluation results" if command else "# Evaluation summary", "", LDP_POINTER, ""]
    if command:
        lines += ["Generated, with every number, table and plot below, by one command run from the repository "
                  "root (`python` is the project's `.venv/bin/python`):", "", "```", command, "```", ""]
        if original is not None:  # the run's own record (run.json beside the results)
            lines += [f"Run on {original['date']} at commit `{original['commit']}` on {original['machine']}, "
                      f"{original['workers']} worker processes, in **{original['wall_seconds'] / 60:.1f} minutes of "
                      "wall time** (the whole command: reading the data, every run, the regime checks, plots and "
                      "document).", ""]
        else:
            lines += [provenance(wall_seconds, args.workers, commit, args.from_csv is not None), ""]
        if args.from_csv is not None:
            runs = {_run_key(r): r for r in rows}
            hours = sum(float(r["wall_seconds"]) for r in runs.values()) / 3600
            lines += [f"This copy was rendered{f' at commit `{commit}`' if commit else ''} from that command's "
                      f"results (`--from-csv {args.from_csv}`) without repeating the runs; their wall times add up "
                      f"to {hours:.1f} hours of run time.", ""]
    repeats = ", ".join(f"{sweep} {args.repeats[sweep]}" for sweep in args.sweeps)
    lines += ["## Setup", "",
              f"* Repeats per point: {repeats} (each repeat draws new data, requirements and noise); seed "
              f"{args.seed}. Cells are means over repeats ± the sample standard deviation over repeats. Every "
              "mechanism, requirement scenario and ratio o of one repeat runs on the same data with the same noise "
              "seed (paired runs).",
              f"* Noise: {NOISE_NOTE} (the seeded generator draws the same discrete Laplace noise as the secure one).",
              "* AMRE is the papers' metric, which is a mean SQUARED error: (1/T) Σ_t (1/d) ||r_t − c_t||². AJSD as "
              "spec §5.3 (released counts clipped at 0 and normalised).",
              "* Requirements as in the papers (spec §5.2): users split into ten contiguous types; each type draws "
              "E_i from the grid values ≥ E and w_i from those ≤ w; the dynamic mechanisms get forward requirements "
              "drawn per type from {E_i, …, 1.0} × {40, …, w_i}: redrawn every slot (`redrawn`, the authors' code), "
              f"once (`held`) or every {args.drift_every} slots (`drifting`); BD, BA, Uniform and Sample run at "
              "(E, w) = (min E_i, max w_i).",
              "* Real streams (spec §5.1): users are the taxis or check-in users; a user's value at a slot is the "
              "grid cell of their latest record at or before it (the last record within a slot wins; carried "
              "forward as the papers' preprocessing [RC]); before their first record a user is absent (the "
              "reference code back-fills the first cell, which uses future data); records outside the grid are "
              "dropped. Every user is registered from the first slot and charged at every slot.",
              ("* Mechanisms run over the whole stream without resets: the w-event guarantee holds over the whole "
               "stream (the authors' code resets every 250 slots)." if not args.segment_reset else
               f"* Mechanisms re-created every {args.segment_reset} slots: NO w-event guarantee across segments; "
               "max usage is per segment."), ""]
    if min(args.repeats.values()) < 3:
        lines[-1:-1] = ["* With fewer than three repeats a cell is one or two runs: a difference within the "
                        "run-to-run spread (the ± where two repeats ran) is not evidence either way."]
    lines += markdown_table(["dataset", "users N", "slots T", "bins d", "stream"], _dataset_rows(streams, args)) + [""]
    for dataset, reason in skipped.items():
        lines += [f"* **{dataset_name(dataset)} skipped**: {reason}."]
    if skipped:
        lines.append("")
    lines += _privacy_section(rows)
    checks = check_claims(rows, datasets)
    lines += _adaptive_section(rows, datasets) + _dynamic_adaptive_section(rows, datasets, args.scenarios)
    if checks:
        lines += _claims_section(checks) + _scenario_section(checks)
    users_of = {d: (args.users if d in SYNTHETIC else streams[d].users) for d in datasets
                if d in SYNTHETIC or d in streams}
    lines += _ratio_section(rows, datasets, users_of)
    if regimes is not None:
        lines += _regimes_section(regimes, plot_prefix)
    for dataset in datasets:
        lines += _dataset_section(rows, args, dataset, streams.get(dataset))
    if plots is None:
        lines += ["Plots skipped: matplotlib is not installed; plots need `pip install -e .[plot]`.", ""]
    elif plots:
        lines += ["## Plots", "", "One panel per dataset, log-scale y, means over repeats (as the papers' figures).",
                  ""] + [f"![{name}]({plot_prefix}{name})" for name in plots] + [""]
    lines += _timing_section(rows, args, datasets)
    return "\n".join(lines)


def git_commit() -> str:
    """The checkout's commit (short), or '' outside git."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__)), timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def provenance(wall_seconds: float | None, workers: int, commit: str, rendered_only: bool = False) -> str:
    parts = [f"{'Rendered' if rendered_only else 'Run'} on {datetime.date.today().isoformat()}"]
    if commit:
        parts.append(f"at commit `{commit}`")
    parts.append(f"on {_machine()}, {workers} worker processes")
    if wall_seconds is not None:
        parts.append(f"in {wall_seconds / 60:.1f} minutes of wall time")
    return " ".join(parts) + "."


def run_record(command: str, commit: str, workers: int, wall_seconds: float) -> dict:
    """A run's own record (``run.json`` beside its results), which heads every copy rendered from them later."""
    return {"command": command, "commit": commit, "date": datetime.date.today().isoformat(), "machine": _machine(),
            "workers": workers, "wall_seconds": wall_seconds}


def _machine() -> str:
    return f"{platform.machine()} with {os.cpu_count()} cores (shared with other work)"


def _run_key(row: dict) -> tuple:
    """One run: a point shared by the epsilon and window sweeps ran once (the ratio sweeps' points are their own)."""
    return (row["dataset"], row["mechanism"], row["epsilon"], row["window"], row["ratio"], row["repeat"],
            row["sweep"] if row["sweep"] in RATIO_SWEEPS else "")


def _privacy_section(rows: list[dict]) -> list[str]:
    runs = list({_run_key(r): r for r in rows}.values())
    worst = max(float(r["max_window_usage_ratio"]) for r in runs)
    violations = sum(int(r["ledger_violations"]) for r in runs)
    return ["## Privacy check", "",
            f"An independent ledger checked every window of every user's requirement in all {len(runs):,} runs: "
            f"the largest share of a requirement spent in any window is {worst:.4f} "
            f"({'within' if worst <= 1 else 'ABOVE'} the requirement), with {violations} violations. Every number "
            "below is therefore measured under correct privacy accounting; BA, PBA and DPBA nullify slots after "
            "a publication as the papers specify (the nullified fractions are in the tables).", ""]


def formatted_p(value: float) -> str:
    """A p-value with two significant digits (in exponent form below 0.001)."""
    return f"{value:.2g}" if value >= 1e-3 else f"{value:.0e}"


def _claims_section(checks: list[ClaimCheck]) -> list[str]:
    lines = ["## The papers' headline claims under correct privacy accounting", "",
             "Each claim is decided per dataset and sweep by a **paired test** over every (point, repeat) pair: "
             "both mechanisms ran on the same data, requirements and noise seed. The statistic is the mean of "
             "log(AMRE_A / AMRE_B); p is the one-sided sign-flip permutation p-value of 'A below B' "
             "(pipelines/evaluation/stats.py), and 'p (Holm)' adjusts it for every test of this section (both "
             f"directions of every row). A row **holds** when p (Holm) < {ALPHA}, is **reversed** when the opposite "
             "test's p (Holm) is, and is **not shown** otherwise. 'A/B' is the geometric mean ratio over pairs, "
             "'wins' the pairs where A < B, 'points' the sweep points where the per-point paired test (its repeats "
             f"only) has p < {ALPHA}. '1 − A/B' is the papers' formula (mean over points of 1 − mean A / mean B, "
             "spec §5.4), shown beside the papers' own value.", ""]
    for claim in CLAIMS:
        mine = [c for c in checks if c.claim is claim]
        if not mine:
            continue
        lines += [f"### {claim.statement}: **{claim_verdict(mine)}**", ""]
        body = [[dataset_name(c.dataset), SWEEP_LABELS[c.sweep], label_name(c.better), f"{c.ours:+.1f}%",
                 "–" if c.papers is None else f"{c.papers:+.1f}%", f"{c.test.ratio:.3f}",
                 f"{c.test.wins} of {c.test.pairs}", f"{c.points_won} of {c.points}", formatted_p(c.test.p_value),
                 formatted_p(c.p_holm), c.verdict] for c in mine]
        lines += markdown_table(["dataset", "varies", "A", "1 − A/B, ours", "papers", "A/B (paired)", "wins",
                         "points", "p", "p (Holm)", "verdict"], body)
        lines += ["", claim.explanation + ("" if claim_verdict(mine) == "holds" else " " + claim.where_it_fails), ""]
    return lines


def _scenario_section(checks: list[ClaimCheck]) -> list[str]:
    """Which requirement scenario the papers' dynamic claims need."""
    dynamic = [c for c in checks if c.claim.better in ("dpbd", "dpba") and c.claim.worse in ("pbd", "pba")]
    if not dynamic:
        return []
    body, conclusions = [], []
    for claim in dict.fromkeys(c.claim for c in dynamic):
        held_on = {}
        for label in dict.fromkeys(c.better for c in dynamic if c.claim is claim):
            mine = [c for c in dynamic if c.claim is claim and c.better == label]
            held_on[scenario_of(label)] = (sum(c.verdict == "holds" for c in mine), len(mine))
            body.append([claim.statement, scenario_of(label), f"{held_on[scenario_of(label)][0]} of {len(mine)}",
                         f"{sum(c.verdict == 'reversed' for c in mine)} of {len(mine)}",
                         f"{float(np.exp(np.mean([np.log(c.test.ratio) for c in mine]))):.3f}"])
        best = max(held_on, key=lambda scenario: held_on[scenario][0])
        counts = ", ".join(f"{scenario} {shown} of {total}" for scenario, (shown, total) in held_on.items())
        if held_on[best][0] == 0:
            conclusions.append(f"* **{claim.statement}** holds under no scenario ({counts}).")
        elif best == SCENARIOS[0] or held_on[best][0] == held_on.get(SCENARIOS[0], (0, 0))[0]:
            conclusions.append(f"* **{claim.statement}** does not need more than the authors' per-slot redraw "
                               f"({counts}).")
        else:
            conclusions.append(f"* **{claim.statement}** needs requirements that stay put: it holds most often "
                               f"under `{best}` ({counts}).")
    return ["## Requirement scenarios of the dynamic mechanisms", "",
            "The papers never say how often a dynamic requirement changes. `redrawn`: every type redraws its "
            "forward requirement at every slot (the authors' code); `held`: one forward draw per type for the "
            "whole run; `drifting`: a new draw every K slots (K in Setup). All three draw from the same "
            "candidates {E_i, …, 1.0} × {40, …, w_i}, never stricter than PBD's and PBA's (w_i, E_i), from the "
            "same requirement generator (the first draw is shared). Rows: the claim's (dataset, sweep) checks of "
            "the previous section under each scenario; 'A/B' the geometric mean of their paired ratios.", ""] + \
        markdown_table(["claim", "scenario", "holds on", "reversed on", "A/B"], body) + [""] + conclusions + [
            "", "A claim **needs** a scenario when it holds there and not under the authors' per-slot redraw: "
            "a declaration redrawn every slot stays live for w_F slots, so DPBD's budget is the minimum over up "
            "to w_F different live declarations and DPBA nullifies whenever any of them reached its border; held "
            "declarations are steadily looser than (w_i, E_i), which is what the papers' explanation (\"a higher "
            "budget of at least E_i and a smaller window of at most w_i\") assumes.", ""]


def _ratio_section(rows: list[dict], datasets: list[str], users_of: dict[str, int]) -> list[str]:
    """§6.5: AMRE said to be stable until o > 0.8, then to drop sharply for PBD and PBA; and where OBS switches."""
    lines = []
    for sweep in (s for s in RATIO_SWEEPS if any(r["sweep"] == s for r in rows)):
        first, second = (((DEFAULT_WINDOW, RATIO_HIGH_EPSILON), (DEFAULT_WINDOW, DEFAULT_EPSILON)) if sweep == "ratio"
                         else ((RATIO_LOW_WINDOW, DEFAULT_EPSILON), (DEFAULT_WINDOW, DEFAULT_EPSILON)))
        switch = []
        for d in (d for d in datasets if d in users_of):
            missed = [dc_sample_shortfall(users_of[d], first, second, o) for o in (RATIOS[-2], RATIOS[-1])]
            switch.append([dataset_name(d), f"{users_of[d]:,}"]
                          + [str(switch_point(users_of[d], first, second, obs) or "never") for obs in OBSES]
                          + [f"{m:,.0f} ({scale:,.0f})" for m, scale in missed])
        body = []
        for dataset in datasets:
            for mechanism in ("pbd", "pba", "adaptive"):
                mine = [r for r in rows if r["dataset"] == dataset and r["sweep"] == sweep
                        and r["mechanism"] == mechanism]
                if not mine:
                    continue
                cells = []
                for o in RATIOS:
                    at = [r for r in mine if r["ratio"] == o]
                    fresh = np.mean([r["fresh_fraction"] for r in at]) if at else 0.0
                    cells.append(f"{mean_std([r['amre'] for r in at])} ({fresh:.3f})" if at else "–")
                high = {r["repeat"]: r["amre"] for r in mine if r["ratio"] == RATIOS[-1]}
                low = {r["repeat"]: r["amre"] for r in mine if r["ratio"] == RATIOS[-2]}
                keys = sorted(high.keys() & low.keys())
                test = paired_lower([high[k] for k in keys], [low[k] for k in keys])
                body.append([dataset_name(dataset), label_name(mechanism)] + cells +
                            [f"{test.ratio:.3f}", formatted_p(test.p_value), "drops" if test.p_value < ALPHA else
                             ("rises" if paired_lower([low[k] for k in keys], [high[k] for k in keys]).p_value
                              < ALPHA else "no change shown")])
        what = ("a fraction o of the users has E = 1.0, the rest E = 0.6, all w = 120" if sweep == "ratio" else
                "a fraction o of the users has w = 40, the rest w = 120, all E = 0.6")
        lines += [f"## User-type ratio (§6.5): {what}", "",
                  "The papers: AMRE is stable until o > 0.8, then drops sharply for PBD and PBA, because OBS "
                  "switches to the larger budget. Here **one stream is shared by every o** (and by the mechanisms): "
                  "each repeat's data and noise seed depend on the repeat only, so the differences between "
                  "columns are the requirement mix's alone. Cells: AMRE mean ± standard deviation over repeats "
                  "(fresh fraction). '0.9/0.7' is the paired geometric-mean ratio of AMRE at o = 0.9 to o = 0.7 and "
                  "p the one-sided paired p-value of 'lower at 0.9' (the papers' drop).", ""]
        lines += markdown_table(["dataset", "mechanism"] + [f"o = {o}" for o in RATIOS] + ["0.9/0.7", "p", "at 0.9"],
                        body) + [""]
        lines += ["Where each OBS picks the larger budget (the smallest o on a 0.01 grid; computed with the "
                  "mechanisms' own OBS and error model for N users, pipelines/evaluation/ratio.py): `dc` the "
                  "dissimilarity's E_i/(2w_i), `pbd` PBD's first publication E_i/4, `pba` PBA's publication after "
                  "40 skipped slots; 'never' when the two types offer the same budget or OBS never prefers the "
                  "larger one. The last two columns: how many users the dissimilarity's sample is expected to "
                  "leave out at o = 0.7 and 0.9 (Σ n_k (1 − p_k) at the threshold OBS picks), beside the Laplace "
                  "scale of the dissimilarity's noise; every missed user adds one to the distance from the last "
                  "release.", ""] + markdown_table(["dataset", "users N", "dc", "pbd", "pba", "missed at o = 0.7 (noise)",
                                            "missed at o = 0.9 (noise)"], switch) + [""]
    if lines:
        lines += ["Why AMRE moves at the switch (checked above on one shared stream): once the dissimilarity's OBS "
                  "picks the larger budget, the users below it are sampled with p = (e^ε − 1)/(e^θ − 1) < 1, so the "
                  "sampled histogram misses part of the low-budget users and its distance to the last release "
                  "(published from a different sample) is inflated; this triggers publications (the fresh "
                  "fractions rise) that a correct PBA pays for with its absorbed budget and nullified slots, so "
                  "AMRE does not drop. The papers' drop needs the authors' unrecorded last publication, which is "
                  "not private (reference_impl §4.4). The switch point moves with N, so a stream of another size "
                  "switches at another o.", ""]
    return lines


def _goal_rows(rows: list[dict], datasets: list[str], candidate: str, rivals: tuple[str, str],
               lead: list[str] = ()) -> tuple[list[list[str]], int, list[str]]:
    """``candidate`` against the better of ``rivals`` at every dataset and E (epsilon sweep): the table rows
    (each headed by ``lead``), how many points are within 10% of the better mean, and the datasets where the
    candidate is below both rivals at every E (paired p < ALPHA)."""
    labels = (candidate,) + rivals
    body, within, beats = [], 0, {}
    for dataset in datasets:
        for epsilon in sweep_points("epsilon"):
            values = {m: [r["amre"] for r in rows if r["dataset"] == dataset and r["sweep"] == "epsilon"
                          and r["mechanism"] == m and r["epsilon"] == epsilon] for m in labels}
            if not all(values.values()):
                continue
            best = min(rivals, key=lambda m: np.mean(values[m]))
            ratio = float(np.mean(values[candidate]) / np.mean(values[best]))
            tests = {m: paired_lower(*paired(rows, dataset, "epsilon", candidate, m, epsilon)) for m in rivals}
            below_both = all(t.p_value < ALPHA for t in tests.values())
            within += ratio <= 1.1
            beats.setdefault(dataset, []).append(below_both)
            body.append(list(lead) + [dataset_name(dataset), str(epsilon)]
                        + [mean_std(values[m]) for m in labels]
                        + [f"{ratio:.3f}"] + [formatted_p(tests[m].p_value) for m in rivals] + ["yes" if below_both else "no"])
    return body, within, [d for d, flags in beats.items() if all(flags)]


def _goal_verdict(within: int, points: int, beaten: list[str]) -> str:
    """The issue's goal in one sentence: within 10% of the better everywhere, below both on two datasets."""
    met = within == points and len(beaten) >= 2
    return (f"within 10% of the better at {within} of {points} points; below both (every E, paired p < {ALPHA}) on "
            f"{len(beaten)} dataset(s){': ' + ', '.join(dataset_name(d) for d in beaten) if beaten else ''}: "
            f"the goal is {'met' if met else 'not met'}")


def _adaptive_section(rows: list[dict], datasets: list[str]) -> list[str]:
    """The adaptive mechanism against the better of PBD and PBA at every dataset and E (epsilon sweep)."""
    body, within, beaten = _goal_rows(rows, datasets, "adaptive", ("pbd", "pba"))
    if not body:
        return []
    return ["## The adaptive mechanism against PBD and PBA", "",
            "`adaptive` (transforms/mechanisms/adaptive.py, docs/adaptive.md) chooses per slot between PBD's and "
            "PBA's publication budget under a window cap, spends no more of it than buys a publication error "
            "below the resolution of the dissimilarity, and publishes only when the charged dissimilarity clears "
            "the predicted error by one standard deviation of the dissimilarity's own noise. Goal (issue): within "
            "10% of the better of PBD and PBA on every dataset and E, and better than both on at least two "
            "datasets. Cells: AMRE mean ± standard deviation (epsilon sweep); 'ratio' adaptive's mean over the "
            "better mean; p the one-sided paired p-values of 'adaptive below PBD' and '… below PBA' over the "
            f"point's repeats; 'below both' when both are < {ALPHA}.", ""] + \
        markdown_table(["dataset", "E", "adaptive", "PBD", "PBA", "ratio", "p vs PBD", "p vs PBA", "below both"], body) + \
        ["", f"**Adaptive: {_goal_verdict(within, len(body), beaten)}.**", ""]


def _dynamic_adaptive_section(rows: list[dict], datasets: list[str], scenarios: list[str]) -> list[str]:
    """``dadaptive`` against the better of DPBD and DPBA under each requirement scenario (epsilon sweep)."""
    lines, verdicts = [], []
    for scenario in scenarios:
        suffix = "" if scenario == SCENARIOS[0] else f":{scenario}"
        body, within, beaten = _goal_rows(rows, datasets, "dadaptive" + suffix, ("dpbd" + suffix, "dpba" + suffix),
                                          lead=[scenario])
        if body:
            lines += body
            verdicts.append(f"* `{scenario}`: {_goal_verdict(within, len(body), beaten)}.")
    if not lines:
        return []
    return ["## The adaptive mechanism under dynamic requirements: `dadaptive` against DPBD and DPBA", "",
            "`dadaptive` is `adaptive`'s rule under DPBD's caps (docs/adaptive.md), run on the same streams, "
            "requirement draws and noise seeds as DPBD and DPBA under each requirement scenario (Setup). Same goal "
            "and cells as the previous section, against the better of DPBD and DPBA of the same scenario.", ""] + \
        markdown_table(["scenario", "dataset", "E", "dadaptive", "DPBD", "DPBA", "ratio", "p vs DPBD", "p vs DPBA",
                "below both"], lines) + [""] + verdicts + [""]


def _dataset_section(rows: list[dict], args, dataset: str, stream: EventStream | None) -> list[str]:
    lines = [f"## {dataset_name(dataset)}", ""]
    if dataset in REAL and stream is not None:
        lines += [REAL_NOTE.format(users=stream.users), ""]
    for sweep in args.sweeps:
        chosen = [r for r in rows if r["dataset"] == dataset and r["sweep"] == sweep]
        if not chosen:
            continue
        points = sweep_points(sweep)
        paper = PAPER_AMRE.get((dataset, sweep))
        label = SWEEP_LABELS[sweep].split(" ")[0]
        header = ["mechanism"] + [f"{label} = {p}" for p in points]
        amre, ajsd, behaviour = [], [], []
        for mechanism in run_labels(args.mechanisms, args.scenarios):
            mine = [r for r in chosen if r["mechanism"] == mechanism]
            if not mine:
                continue
            at = {p: [r for r in mine if r[SWEEP_COLUMN[sweep]] == p] for p in points}
            amre.append([label_name(mechanism)] + [mean_std([r["amre"] for r in at[p]]) if at[p] else "–"
                                                   for p in points])
            if paper and mechanism in paper:
                amre.append(["*papers*"] + [f"*{v:,.2f}*" for v in paper[mechanism]])
            ajsd.append([label_name(mechanism)] + [mean_std([r["ajsd"] for r in at[p]]) if at[p] else "–"
                                                   for p in points])
            kinds = " / ".join(_fraction_mean_std(_repeat_means(mine, k + "_fraction"))
                               for k in ("fresh", "skipped", "nullified"))
            behaviour.append([label_name(mechanism), kinds,
                              f"{1e3 * np.mean([r['seconds_per_slot'] for r in mine]):.3f}",
                              f"{max(r['max_window_usage_ratio'] for r in mine):.4f}"])
        lines += [f"### {dataset_name(dataset)}: {SWEEP_LABELS[sweep]} varies", "", "AMRE (mean squared error):", ""]
        lines += markdown_table(header, amre) + [""]
        if paper:
            lines += [PAPER_NOTE, ""]
        lines += ["AJSD (mean ± standard deviation):", ""] + markdown_table(header, ajsd) + [""]
        lines += ["Slots fresh / skipped / nullified (each repeat's mean over the sweep's points; mean ± standard "
                  "deviation over repeats), time, largest window usage:", ""]
        lines += markdown_table(["mechanism", "fresh / skipped / nullified", "ms per slot", "max window usage"],
                        behaviour) + [""]
    return lines


FULL_SWEEP_MECHANISMS = ("bd", "ba", "pbd", "pba", "dpbd", "dpba")


def _timing_section(rows: list[dict], args, datasets: list[str]) -> list[str]:
    timed = [r for r in rows if r["sweep"] == "epsilon"] or rows
    by_cpu = all("cpu_seconds" in r for r in rows)  # results from before cpu_seconds timed on the wall clock
    mechanisms = [m for m in run_labels(args.mechanisms, args.scenarios) if any(r["mechanism"] == m for r in timed)]
    body = []
    for mechanism in mechanisms:
        cells = []
        for dataset in datasets:
            mine = [r for r in timed if r["dataset"] == dataset and r["mechanism"] == mechanism]
            cells.append(f"{1e3 * np.mean([r['seconds_per_slot'] for r in mine]):.3f}" if mine else "–")
        body.append([label_name(mechanism)] + cells)
    lines = ["## Running time", "",
             ("CPU milliseconds" if by_cpu else "Milliseconds") + " per slot in the mechanism's `step` (mean over the "
             "runs" + (" of the epsilon sweep" if timed is not rows else "") + f"; {args.workers} runs at a time on a "
             "machine shared with other work, " + ("whose load still shows through caches and memory bandwidth):"
                                                   if by_cpu else "so the times vary with its load):"), ""]
    lines += markdown_table(["mechanism"] + [dataset_name(d) for d in datasets], body) + [""]
    for dataset in (d for d in datasets if d in SYNTHETIC):
        estimate = full_sweep_estimate(rows, dataset, args.workers)
        if estimate is not None:
            seconds, users, slots = estimate
            lines += [f"* **Extrapolated, not measured**: the full default epsilon sweep on {dataset_name(dataset)} "
                      f"(BD, BA, PBD, PBA, DPBD, DPBA × 5 values of E × {EPSILON_REPEATS} repeats at N = {users:,}, "
                      f"T = {slots:,}) would take about {seconds / 60:.0f} minutes on {args.workers} workers"
                      + (" with a free core each" if by_cpu else "") + ": the measured mean "
                      + ("CPU" if by_cpu else "wall") + " time per run (data, mechanism and ledger) of each "
                      f"mechanism and E, times {EPSILON_REPEATS} repeats, divided by the workers."]
    lines.append("")
    return lines


def full_sweep_estimate(rows: list[dict], dataset: str, workers: int) -> tuple[float, int, int] | None:
    """Seconds of the default epsilon sweep (6 mechanisms x 5 E x 10 repeats) from measured run times.

    Uses each run's CPU time (its wall time in results from before ``cpu_seconds`` was recorded).
    """
    mine = [r for r in rows if r["dataset"] == dataset and r["sweep"] == "epsilon"]
    total = 0.0
    for mechanism in FULL_SWEEP_MECHANISMS:
        for epsilon in sweep_points("epsilon"):
            runs = [r.get("cpu_seconds", r["wall_seconds"]) for r in mine
                    if r["mechanism"] == mechanism and r["epsilon"] == epsilon]
            if not runs:
                return None
            total += float(np.mean(runs)) * EPSILON_REPEATS
    return total / workers, int(mine[0]["users"]), int(mine[0]["slots"])


def _regimes_section(regimes: dict, plot_prefix: str) -> list[str]:
    lines = ["## Where the mechanisms publish something useful", "",
             "Two conditions from the mechanisms' own error model (pipelines/evaluation/regimes.py): (1) a "
             "publication's predicted per-bin error, sqrt(Var(noise(θ))), must be below the mean count N/d, "
             "otherwise PWSM's test never fires against the initial all-zero release and a release would be "
             "noise; the largest θ for one publication is E/4 when distributing (PBD, BD) and E/2 when absorbing "
             "(PBA, BA, adaptive). (2) The dissimilarity's own noise per bin (budget E/(2w)) must be below the mean "
             "count, which reads N > sqrt(Var(noise(E/(2w)))) (d cancels), or the publish decision is a coin flip. "
             "The slot length enters through w (a window protecting a fixed time spans time / slot length slots) and "
             "through how far the counts move per slot; the grid through d. Marked: the settings below and the "
             "papers'.", ""]
    if regimes.get("plot"):
        lines += [f"![useful regimes]({plot_prefix}{regimes['plot']})", ""]
    rows = regimes["rows"]
    if not rows:
        return lines + [f"The T-Drive checks did not run: {regimes['why']}.", ""]
    body = [[r["regime"], label_name(r["mechanism"]), f"{r['mean_present']:.0f} / {r['bins']}",
             f"{r['predicted_relative_error']:.2f}", f"{r['fresh']} of {r['slots']}", formatted_number(r["amre"]),
             formatted_number(r["zero_amre"]), f"{r['zero_amre'] / max(r['amre'], 1e-12):.1f}×", f"{r['ajsd']:.4f}",
             str(r["ledger_violations"])] for r in rows]
    return lines + ["Checked on the T-Drive sample (593 taxis, 2-8 Feb 2008, each taxi's cell carried forward; half "
                    "the taxis at each of the two levels (w, E); one run each, seeded noise). 'predicted' is "
                    "condition (1) at the smaller E with the mean number of taxis present; 'zero' the AMRE of "
                    "releasing the all-zero histogram forever, which is what a mechanism that never publishes "
                    "releases; 'gain' zero / AMRE.", ""] + \
        markdown_table(["setting", "mechanism", "taxis / bins", "predicted", "fresh", "AMRE", "zero", "gain", "AJSD",
                "violations"], body) + [""]


def command_line(argv: list[str]) -> str:
    """The command line that makes the document (with its ``nice`` level, if any; without ``--from-csv``)."""
    niceness = os.nice(0) if hasattr(os, "nice") else 0
    prefix = f"nice -n {niceness} " if niceness > 0 else ""
    kept, skip = [], False
    for item in argv:
        if skip or item == "--from-csv":
            skip = not skip
            continue
        if not item.startswith("--from-csv="):
            kept.append(item)
    return prefix + "python -m pipelines.evaluate " + shlex.join(kept)
