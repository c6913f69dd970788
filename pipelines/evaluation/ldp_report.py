"""The LDP-IDS results document (``docs/results_ldp_ids.md``): the command, the set-up, the privacy check, Table 2
reproduced beside the paper's, the spec's re-simulation MREs as a second reference, the paper's claims decided
by paired tests, and one table per experiment (mean ± std over repeats), Fig. 10's with its plot."""

from __future__ import annotations

import numpy as np

from pipelines.evaluation.experiment import NOISE_NOTE
from pipelines.evaluation.ldp import (ADAPTIVE, BETAS, CON, EPSILONS, EXPERIMENTS, EXTENSIONS, FLUCTUATIONS,
                                      LNS_FLOOR, PAPER_METHODS, REAL, ROC_WINDOW, SYNTHETIC, WINDOWS, LdpTask,
                                      base_dataset, dataset_name, mean_version, method_name, probability_path)
from pipelines.evaluation.ldp_claims import check_claims
from pipelines.evaluation.ldp_data import LdpStream
from pipelines.evaluation.ldp_paper import FIG3_TICKS, TABLE2, TABLE2_DATASETS, TABLE2_SETTINGS, TV12_MRE, \
    predicted_bits
from pipelines.evaluation.report import mean_std, formatted_number, formatted_p, markdown_table, provenance
from pipelines.evaluation.stats import ALPHA
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.ldp.oracles import oracle_for

TOLERANCE = 0.05
"""Table 2's acceptance: our bits within 5% of the paper's."""
SYNTHETIC_TEXT = {"lns": "p_t = p_(t-1) + N(0, Q), p_0 = 0.05, sqrt(Q) = 0.0025; paths redrawn until every "
                         f"p_t > {LNS_FLOOR}",
                  "sin": "p_t = 0.05 sin(b t) + 0.075, b = 0.01", "log": "p_t = 0.25 / (1 + e^(-0.01 t))"}


def _group(rows: list[dict], experiment: str, *keys: str) -> dict[tuple, list[dict]]:
    out: dict = {}
    for r in rows:
        if r["experiment"] == experiment:
            out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


def _cell(group: list[dict] | None, metric: str) -> str:
    if not group:
        return "–"
    values = [float(r[metric]) for r in group if np.isfinite(float(r[metric]))]
    return mean_std(values) if values else "n/a"


def _report_bits(epsilon: float, window: int, bins: int, per_slot: bool) -> int:
    """Bits of one report of the data-independent methods (Ada's oracle at ε/w for LBU, ε otherwise)."""
    units = to_units(epsilon, "epsilon")
    return oracle_for(units // window if per_slot else units, bins, None).bits


def table2_section(rows: list[dict], args) -> tuple[list[str], list[str]]:
    """Table 2 reproduced on the synthetic streams, and the acceptance lines."""
    groups = _group(rows, "table2", "epsilon", "window", "method", "dataset")
    body, misses, checked, single = [], [], 0, []
    for epsilon, window in TABLE2_SETTINGS:
        for method in PAPER_METHODS:
            cells = [f"({epsilon:g}, {window})" if method == PAPER_METHODS[0] else "", method_name(method)]
            for dataset in SYNTHETIC:
                group = groups.get((epsilon, window, method, dataset))
                paper = TABLE2[(epsilon, window, method, dataset)]
                if not group:
                    cells += ["–", f"{paper:.4f}", "–"]
                    continue
                ours = float(np.mean([r["bits_per_user_slot"] for r in group]))
                difference = ours / paper - 1
                if method in ADAPTIVE:
                    single += [abs(r["bits_per_user_slot"] / paper - 1) <= TOLERANCE for r in group]
                checked += 1
                if abs(difference) > TOLERANCE:
                    misses.append(f"{method_name(method)} on {dataset_name(dataset)} at ({epsilon:g}, {window}): "
                                  f"{ours:.4f} vs {paper:.4f} ({100 * difference:+.1f}%)")
                users, slots = group[0]["users"], group[0]["slots"]
                predicted = predicted_bits(method, epsilon, window, users, slots,
                                           _report_bits(epsilon, window, 2, False),
                                           _report_bits(epsilon, window, 2, True))
                exact = "" if predicted is None else (" (= TV-12)" if abs(ours - predicted) < 1e-12
                                                      else f" (TV-12 {predicted:.4f})")
                cells += [_cell(group, "bits_per_user_slot") + exact, f"{paper:.4f}", f"{100 * difference:+.1f}%"]
            body.append(cells)
    if not checked:
        return [], []
    header = ["(ε, w)", "method"]
    for dataset in SYNTHETIC:
        header += [f"{dataset_name(dataset)} ours", "paper", "diff"]
    lines = ["## Table 2: bits per user per timestamp", "",
             f"Synthetic streams at n = {args.table2_users:,}, T = {args.table2_slots}; every count follows spec "
             "§6.3 (`last_bits`: each report's ⌈log2 d⌉ or d bits, plus one request bit per population-method "
             "report and per budget-method publication report), summed over the T slots and divided by n·T. LBU, "
             "LSP and LPU send data-independent bits (one run each; '= TV-12' marks an exact match with the spec's "
             "prediction); "
             f"the adaptive methods' bits vary with the data and the noise: mean ± standard deviation over "
             f"{args.table2_repeats} repeats (each its own stream and noise seed). 'diff' and the acceptance compare "
             "the mean with the paper's value.", ""]
    lines += markdown_table(header, body) + [""]
    verdict = (f"**Acceptance: all {checked} entries lie within {100 * TOLERANCE:.0f}% of the paper's.**" if not misses
               else f"**Acceptance: {checked - len(misses)} of {checked} entries lie within "
                    f"{100 * TOLERANCE:.0f}% of the paper's; outside:** " + "; ".join(misses) + ".")
    if single:
        verdict += (f" Run by run, {sum(single)} of the {len(single)} adaptive runs lie within "
                    f"{100 * TOLERANCE:.0f}% on their own.")
    return lines + [verdict, ""], misses


def _paper_table2() -> list[str]:
    body = []
    for epsilon, window in TABLE2_SETTINGS:
        for method in PAPER_METHODS:
            body.append([f"{epsilon:g}, {window}" if method == PAPER_METHODS[0] else "", method_name(method)]
                        + [f"{TABLE2[(epsilon, window, method, d)]:.4f}" for d in TABLE2_DATASETS])
    return ["### The paper's Table 2 (verbatim, spec §8.6)", ""] + \
        markdown_table(["ε, w", "method", "LNS", "Sin", "Log", "Taxi", "Foursquare", "Taobao"], body) + [""]


def _tv12_section(rows: list[dict], args) -> list[str]:
    groups = _group(rows, "table2", "epsilon", "window", "method", "dataset")
    body = []
    for dataset in ("sin", "log", "lns"):
        cells = [dataset_name(dataset)]
        for method in ("lbu", "lbd", "lba", "lsp", "lpu", "lpd", "lpa"):
            cells.append(f"{_cell(groups.get((1.0, 20, method, dataset)), 'mre')} ({TV12_MRE[(dataset, method)]})")
        body.append(cells)
    if not any((1.0, 20, m, d) in groups for m in PAPER_METHODS for d in SYNTHETIC):
        return []
    return ["## MRE at ε = 1, w = 20 beside the spec's re-simulation (TV-12)", "",
            f"Ours (Table 2's runs: n = {args.table2_users:,}, T = {args.table2_slots}) and, in brackets, the spec "
            "author's own "
            "re-simulation (TV-12: 3 runs; not the paper's numbers, which were not extracted from its figures). "
            "Its LNS is one path (seed 3, min p > 0.01); ours are other paths with the same floor, so LNS values "
            "differ with the path.", ""] + \
        markdown_table(["data"] + [method_name(m) for m in ("lbu", "lbd", "lba", "lsp", "lpu", "lpd", "lpa")], body) + [""]


def _claims_section(rows: list[dict]) -> list[str]:
    results = check_claims(rows)
    if not results:
        return []
    lines = ["## The paper's claims (spec §8.6) decided on these runs", "",
             "Each claim is one or more comparisons 'A below B' (per dataset, per method, ...) over paired runs: the "
             "same stream and noise seed, so pairs are the (dataset, point, repeat) runs a comparison names. The "
             "test is the central evaluation's one-sided sign-flip permutation test on log(A/B) "
             "(`pipelines.evaluation.stats`). A claim's verdict is that test over the pairs of **all** its "
             f"comparisons, Holm-adjusted over every claim and its reverse: 'holds' when p_Holm < {ALPHA}, "
             "'reversed' when the opposite is shown, 'not shown' otherwise. Each comparison's own test "
             f"(unadjusted, p < {ALPHA}) is tallied beside it, so a claim can hold overall and fail on a dataset. "
             "AUC claims compare 1 − AUC; bit claims compare bits per user per slot. Comparisons of one claim can "
             "share a run (LSP against each other method, say), so its pooled pairs are not all independent and "
             "its p-value is optimistic; the per-comparison tallies do not have that problem.", ""]
    lines += markdown_table(["figure", "claim", "verdict", "pairs", "geo-mean A/B", "p (Holm)", "comparisons"],
                    [[r.figure, r.statement, f"**{r.verdict}**", str(r.pooled.pairs), formatted_number(r.pooled.ratio),
                      formatted_p(r.p_holm), r.tally] for r in results]) + [""]
    failed = [r for r in results if r.verdict != "holds" and r.where_it_fails]
    if failed:
        lines += ["### Where a claim does not hold: what we found", ""]
        lines += [f"* **{r.figure}, {r.statement}** ({r.verdict}): {r.where_it_fails}" for r in failed] + [""]
    body = []
    for r in results:
        for c in r.checks:
            body.append([r.figure, c.scope, str(c.test.pairs), f"{c.test.wins}/{c.test.pairs}",
                         formatted_number(c.test.ratio), formatted_p(c.test.p_value), c.verdict])
    return lines + ["### Every comparison", ""] + \
        markdown_table(["figure", "comparison (A < B)", "pairs", "A below B", "geo-mean A/B", "p", "verdict"], body) + [""]


def _sweep_table(rows: list[dict], experiment: str, metric: str, points, methods, datasets) -> list[str]:
    column = EXPERIMENTS[experiment].column
    groups = _group(rows, experiment, "dataset", "method", column)
    body = []
    for dataset in datasets:
        for method in methods:
            if any((dataset, method, p) in groups for p in points):
                body.append([dataset_name(dataset), method_name(method)]
                            + [_cell(groups.get((dataset, method, p)), metric) for p in points])
    return markdown_table(["data", "method"] + [str(p) for p in points], body) + [""] if body else []


def fig10_section(rows: list[dict], args, plots: list[str] | None, figure_prefix: str) -> list[str]:
    """Fig. 10: the mean methods' MRE against the fluctuation and ε on the -Con streams, with the plot."""
    if not any(r["experiment"] in ("mean", "mean-epsilon") for r in rows):
        return []
    methods = [m for m in map(mean_version, PAPER_METHODS) if m is not None]
    lines = ["## Fig. 10: mean estimation (HM; ε = 1, w = 20 unless varied)", "",
             "The paper's Fig. 10 (a), (b) are MRE against the fluctuation on LNS-Con (sqrt(Q)) and Sin-Con (b) at ε = "
             "1, w = 20, with 'very similar trends as Figs. 6(c) and 6(d)'; (c), (d) are Taobao-Price after "
             "ToPL-style truncation, where 'the population division methods still show significantly less error than "
             "the budget division ones'. The spec quotes no number from Fig. 10, so there is no paper value to put "
             "beside ours, and Taobao-Price is not on this machine: the ε sweep on the three -Con streams stands in "
             "for panels (c), (d) (their small domain needs no truncation). The methods are the `*-mean` versions of "
             "the seven (HM reports, spec §5.13; V(ε, n) = Var*(ε)·(B/2)²/n with the corrected Var*, trap T3). The "
             f"paper's σ = 10 'dwarfs p_t' (spec §8.1, ambiguity 12): we use σ = {args.con_sigma:g} on the domain "
             f"[0, {args.con_high:g}] (`--con-sigma`, `--con-high`). {args.repeats} repeats per point; cells are mean "
             "± std over repeats; the claims are decided in the claims section above.", ""]
    if plots:
        lines += [f"![Fig. 10: MRE of the mean methods]({figure_prefix}{plots[0]})", ""]
    elif plots is None:
        lines += ["(No plot: matplotlib is not installed.)", ""]
    for dataset, name in (("lns-con", "sqrt(Q)"), ("sin-con", "b")):
        table = _sweep_table(rows, "mean", "mre", FLUCTUATIONS[base_dataset(dataset)], methods, (dataset,))
        if table:
            lines += [f"### Fig. 10 ({dataset_name(dataset)}): MRE vs {name} (ε = 1, w = 20)", ""] + table
    for metric, what in (("mre", "MRE"), ("mse", "MSE"), ("bits_per_user_slot", "bits per user per slot")):
        table = _sweep_table(rows, "mean-epsilon", metric, EPSILONS, methods, CON)
        if table:
            lines += [f"### Fig. 10 (ε): {what} vs ε on the -Con streams (w = 20)", ""] + table
    return lines


def _experiment_sections(rows: list[dict], args, plots: list[str] | None = None, figure_prefix: str = ""
                         ) -> list[str]:
    present = set(r["dataset"] for r in rows)
    datasets = [d for d in SYNTHETIC + REAL if d in present]
    lines = []

    def section(title, experiment, metric, points, methods, note, sets=None):
        table = _sweep_table(rows, experiment, metric, points, methods, sets or datasets)
        if table:
            lines.extend([f"## {title}", "", note, ""] + table)

    section("Fig. 3: MRE vs ε (w = 20)", "epsilon", "mre", EPSILONS, PAPER_METHODS,
            "Fig. 3's surviving tick ranges (budget / population panel): "
            + "; ".join(f"{dataset_name(d)} {b} / {p}" for d, (b, p) in FIG3_TICKS.items())
            + ". Our real streams are far smaller than the paper's (590 taxis of 10,357; 4,969 and 926 check-in "
            "users on a US grid, not 266,909 users by country), and on Foursquare and Gowalla most bins are "
            "near-empty in most slots, so an MRE with δ = 1/n is dominated by them (trap T15): read the MSE table "
            "for those, and orderings rather than values everywhere.")
    section("Fig. 3 (MSE): MSE vs ε (w = 20)", "epsilon", "mse", EPSILONS, PAPER_METHODS,
            "Mean squared error per bin, the metric the spec's analyses (§6.2) predict.")
    section("Fig. 4: MRE vs w (ε = 1)", "window", "mre", WINDOWS, PAPER_METHODS, "")
    section(f"Fig. 5: event-monitoring AUC vs w (ε = 1; the paper's Fig. 5 is w = {ROC_WINDOW})", "window", "auc",
            WINDOWS, ("lba", "lsp", "lpu", "lpd", "lpa"),
            "An event is a slot whose true statistic exceeds min + 0.75 (max − min) of the true series; the score is "
            "the released statistic (binary data: the frequency of value 1; real data: the mean category index, "
            "`--reduction`); AUC sweeps the detection threshold (spec §8.5). NaN where a series has no event.")
    section("Fig. 6 (n): MRE vs n (ε = 1, w = 20)", "users", "mre",
            sorted({r["users"] for r in rows if r["experiment"] == "users"}), PAPER_METHODS,
            "The same probability path at every n; only the users' subsets are redrawn (spec §8.1).")
    for dataset, name in (("lns", "sqrt(Q)"), ("sin", "b")):
        section(f"Fig. 6 ({dataset_name(dataset)}): MRE vs {name} (ε = 1, w = 20)", "fluctuation", "mre",
                FLUCTUATIONS[dataset], PAPER_METHODS, _lns_levels(rows) if dataset == "lns" else "", (dataset,))
    section("Fig. 7: bits per user per slot on LNS vs ε", "epsilon", "bits_per_user_slot", EPSILONS, PAPER_METHODS,
            "", ("lns",))
    section("Fig. 7: bits per user per slot on LNS vs w", "window", "bits_per_user_slot", WINDOWS, PAPER_METHODS,
            "", ("lns",))
    section("Fig. 7: bits per user per slot on LNS vs n", "users", "bits_per_user_slot",
            sorted({r["users"] for r in rows if r["experiment"] == "users"}), PAPER_METHODS, "", ("lns",))
    section("Fig. 7: bits per user per slot on LNS vs sqrt(Q)", "fluctuation", "bits_per_user_slot",
            FLUCTUATIONS["lns"], PAPER_METHODS, "", ("lns",))
    section("Real data: bits per user per slot vs ε (w = 20)", "epsilon", "bits_per_user_slot", EPSILONS,
            PAPER_METHODS, "Real streams: the paper's Taxi column of Table 2 is 3 / 4.2195 / 3.8126 / 0.2032 / "
            "0.1998 / 0.1870 / 0.1651 (LBU, LBD, LBA, LSP, LPU, LPD, LPA at ε = 1, w = 20, 10,357 taxis); ours "
            "divide by every registered user, including those with no value yet.", [d for d in REAL if d in present])
    section("Fig. 8: MRE vs β (ε = 1, w = 20)", "beta", "mre", BETAS, ADAPTIVE, "")
    section("Publication fraction vs ε (fresh releases / T)", "epsilon", "fresh_fraction", EPSILONS, ADAPTIVE,
            "Table 2 implies LBD ≈ 0.24–0.33 and LBA ≈ 0.16–0.21 on the synthetic streams (TV-12).")
    lines += fig10_section(rows, args, plots, figure_prefix)
    if EXTENSIONS:
        section("Fig. 11: the LB-/LP- adaptations (ε = 1, w = 30)", "extensions", "mre", (1.0,),
                list(EXTENSIONS) + ["lba", "lpa"], "")
    else:
        lines += ["## Fig. 11: the LB-/LP- adaptations", "",
                  "Not run: no LB-/LP- adaptation (DSATw, RescueDP, ...) is registered in this checkout.", ""]
    return lines


def _lns_levels(rows: list[dict]) -> str:
    """The mean p_t of the fluctuation experiment's LNS paths per sqrt(Q) (recomputed from their seeds)."""
    paths: dict = {}
    for r in rows:
        if r["experiment"] == "fluctuation" and r["dataset"] == "lns":
            task = LdpTask("lns", r["method"], r["epsilon"], r["window"], r["beta"], r["users"], r["slots"],
                           r["repeat"], r["seed"], float(r["fluctuation"]))
            paths.setdefault(float(r["fluctuation"]), {})[r["repeat"]] = task
    if not paths:
        return ""
    levels = {q: np.mean([probability_path(task)[0].mean() for task in by_repeat.values()])
              for q, by_repeat in sorted(paths.items())}
    return ("Mean p_t of the LNS paths (averaged over the repeats): "
            + ", ".join(f"sqrt(Q) = {q:g}: {level:.3f}" for q, level in levels.items())
            + ". Paths redrawn until they stay above the floor wander higher as sqrt(Q) grows.")


def _setup_section(rows: list[dict], args, streams: dict[str, LdpStream], skipped: dict[str, str]) -> list[str]:
    body = []
    attempts: dict = {}
    for r in rows:
        if r["dataset"] == "lns":
            attempts.setdefault(r["fluctuation"], set()).add((r["repeat"], r["path_attempts"]))
    for dataset in SYNTHETIC:
        if any(r["dataset"] == dataset for r in rows):
            body.append([dataset_name(dataset), f"{args.users:,} (Table 2: {args.table2_users:,})",
                         f"{args.slots} (Table 2: {args.table2_slots})",
                         "2", SYNTHETIC_TEXT[dataset] + "; exactly round(p_t n) ones on a fresh uniform subset "
                                                        "per slot"])
    for dataset in CON:
        if any(r["dataset"] == dataset for r in rows):
            body.append([dataset_name(dataset), f"{args.users:,}", f"{args.slots}", "1 (a mean)",
                         f"each user's value drawn afresh per slot from N(p_t, σ²), σ = {args.con_sigma:g}, around "
                         f"{dataset_name(base_dataset(dataset))}'s p_t (the same path per repeat); declared domain "
                         f"[0, {args.con_high:g}], values outside clipped by the mechanism; the truth is the mean of "
                         "the clipped values"])
    for dataset, stream in streams.items():
        counts = stream.stream.counts
        body.append([dataset_name(dataset), f"{stream.users:,}", f"{stream.slots:,}", str(stream.bins),
                     f"{stream.description}; {counts['records_read']:,} records, {counts['dead_letters']:,} outside "
                     f"the grid (the user keeps their last cell), {counts['duplicates']:,} beyond one per user and "
                     "slot; carried forward"])
    ran = dict.fromkeys(r["experiment"] for r in rows)
    lines = ["## Set-up", "", "* Experiments: " + "; ".join(
                 f"`{name}` ({EXPERIMENTS[name].figure})" for name in ran) + ".",
             f"* Repeats: {args.repeats} per point (Table 2: see there); seed {args.seed}. "
             f"{NOISE_NOTE}: data and noise seeds depend on (seed, dataset, n, T, fluctuation, repeat) only, so "
             "every method and every (ε, w, β) of a repeat runs on the same stream with the same noise seed.",
             "* Every run: `Engine(method, randomness, PrivacyLedger(max_window=w))` over all T slots, users' "
             "reports simulated in aggregate (`simulation=\"aggregate\"`, exact in distribution; the mean methods "
             "of Fig. 10 user by user, each user's value through HM); every user declares (w, ε) at the first slot.",
             "* MRE = (1/T) Σ_t (1/d) Σ_k |r_t[k] − c_t[k]| / max(c_t[k], δ) over **all** bins, δ = "
             + ("1/n" if args.mre_floor is None else f"{args.mre_floor:g}") + " (spec §8.5, T15); MSE the same "
             "with squares; nothing post-processed (T22). For a mean (d = 1) it is (1/T) Σ_t |r_t − c_t| / "
             "max(c_t, δ).",
             f"* Sweeps (Fig. 10's too) run at n = {args.users:,}, T = {args.slots} (the paper: 200,000 and 800) to "
             "keep the document's generation within an hour on 2 workers (most of it goes to Table 2's "
             f"{args.table2_repeats} repeats of the adaptive methods at n = {args.table2_users:,}, T = "
             f"{args.table2_slots}, where Table 2 and the TV-12 comparison run). Absolute MREs at n = {args.users:,} "
             "are larger than the paper's (V scales as 1/n); compare orderings and trends.",
             "* LNS paths redrawn until min p_t > 0.01 (trap T14); walks drawn per (fluctuation, repeat): "
             + "; ".join(f"sqrt(Q) = {q if q != '' else '?'}: " + ", ".join(str(a) for _, a in sorted(v))
                         for q, v in sorted(attempts.items(), key=lambda kv: repr(kv[0]))) + ".", ""]
    lines += markdown_table(["data", "n", "T", "d", "stream"], body) + [""]
    for reason in skipped.values():
        lines.append(f"* Skipped {reason}.")
    return lines + ([""] if skipped else [])


def _privacy_section(rows: list[dict]) -> list[str]:
    runs = {(r["dataset"], r["method"], r["epsilon"], r["window"], r["beta"], r["users"], r["fluctuation"],
             r["repeat"]): r for r in rows}
    violations = sum(int(r["ledger_violations"]) for r in runs.values())
    worst = max(float(r["max_window_usage_ratio"]) for r in runs.values())
    return ["## Privacy check", "",
            f"A `PrivacyLedger` checked every window of every user in all {len(runs):,} runs: **{violations} "
            f"violations**; the largest share of ε spent in any user's window is {worst:.4f}.", ""]


def _timing_section(rows: list[dict], workers: int) -> list[str]:
    runs = {(r["dataset"], r["method"], r["epsilon"], r["window"], r["beta"], r["users"], r["fluctuation"],
             r["repeat"]): r for r in rows}
    total = sum(float(r["cpu_seconds"]) for r in runs.values())
    by_method: dict = {}
    for r in runs.values():
        by_method.setdefault(r["method"], []).append(float(r["cpu_seconds"]))
    return ["## Running time", "", f"{len(runs):,} runs, {total / 60:.1f} CPU minutes in total, i.e. about "
            f"{total / 60 / workers:.0f} minutes of wall time on {workers} otherwise idle cores (plus about a minute "
            "to read the real data); the wall time above is longer when the machine is shared. CPU seconds per "
            "run by method: " + ", ".join(f"{method_name(m)} {np.mean(v):.2f} (max {max(v):.1f})"
                                          for m, v in by_method.items()) + ".", ""]


def document(rows: list[dict], args, streams: dict[str, LdpStream], skipped: dict[str, str], record: dict,
             plots: list[str] | None = None, figure_prefix: str = "") -> str:
    """The whole document; ``plots`` are the figures written (None: matplotlib missing), linked as
    ``figure_prefix + name``."""
    lines = ["# LDP-IDS evaluation (spec `ldp_ids.md` §8)", "", "Generated by", "", "```",
             record["command"], "```", "",
             provenance(record.get("wall_seconds"), record["workers"], record["commit"]), ""]
    if record.get("wall_seconds") is None:
        lines += ["**Rendered from a run cut short (its results.partial.csv): experiments may lack points or "
                  "repeats.**", ""]
    lines += ["Every number below comes from the runs of that command (its `results.csv` is in the output folder); "
              "the paper's numbers are quoted beside ours.", ""]
    lines += _setup_section(rows, args, streams, skipped)
    lines += _privacy_section(rows)
    table2, _ = table2_section(rows, args)
    lines += table2 + _paper_table2() + _tv12_section(rows, args)
    lines += _claims_section(rows)
    lines += _experiment_sections(rows, args, plots, figure_prefix)
    lines += _timing_section(rows, record["workers"])
    return "\n".join(lines)
