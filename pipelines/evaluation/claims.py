"""The papers' headline claims (PBD below BD, ...), each checked per dataset and sweep by a paired test over every
(point, repeat) pair with Holm-adjusted p-values (:mod:`pipelines.evaluation.stats`), beside the papers' own
percentage (:mod:`pipelines.evaluation.paper`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from pipelines.evaluation.paper import PAPER_AMRE
from pipelines.evaluation.stats import ALPHA, PairedResult, holm, paired_lower
from pipelines.evaluation.sweeps import EVENTS, REAL, SWEEP_COLUMN, SYNTHETIC, base_mechanism, sweep_points


@dataclass(frozen=True)
class Claim:
    """A headline claim of the papers: ``better`` has a lower AMRE than ``worse`` on the ``scope`` datasets."""

    statement: str
    better: str
    worse: str
    scope: tuple[str, ...]
    explanation: str
    """What the comparison means under correct accounting; always shown."""
    where_it_fails: str
    """Why it can fail here; shown when the claim does not hold at every point."""


CLAIMS = (
    Claim("PBD below BD on every dataset", "pbd", "bd", REAL + SYNTHETIC + (EVENTS,),
          "BD runs every user at the strictest requirement, (min E_i, max w_i) = (E, w); PBD gives each of the ten "
          "user types its own (w_i, E_i), never stricter, and OBS picks the budget that minimises the predicted "
          "error. Budget distribution records every slot's spending in both, so correct accounting changes "
          "nothing in this comparison.",
          "Where PBD loses, OBS's sampling error (it publishes from the users who can afford the chosen budget) "
          "outweighs the noise it saves."),
    Claim("PBA below BA on the synthetic streams", "pba", "ba", SYNTHETIC,
          "The papers' BA and PBA numbers come from code that never records the last publication (reference_impl "
          "§4.4): no slot is ever nullified and after w slots every publication spends the full E/2 (or E_i/2), "
          "which is not private. Here both absorb and then nullify as the papers specify (the nullified fractions "
          "are in the tables), so the absolute values are not comparable with the papers'; the comparison itself "
          "is fair, both sides being correct.",
          "Where PBA loses, publishing from a sample of the users costs more than the larger budget gains."),
    Claim("DPBD below PBD", "dpbd", "pbd", REAL + SYNTHETIC + (EVENTS,),
          "Not a like-for-like comparison: the dynamic methods get forward requirements drawn from "
          "{E_i, ..., 1.0} x {40, ..., w_i}, never stricter than PBD's (w_i, E_i) (spec §5.2, trap 13), so they may "
          "spend more and a gain would partly be the weaker guarantee. With equal requirements DPBD is PBD "
          "(spec A.6). Each scenario (A = DPBD (held), ...) is a row of its own; the next section sums them up.",
          "Where it fails, the weaker requirements did not buy a lower error. DPBD's budget at a slot is the "
          "smallest remaining budget over every forward declaration still live (Alg. 6): redrawn every slot, up to "
          "w_F different declarations are live at once and the tightest of them binds, so DPBD gains little over "
          "PBD's steady (w_i, E_i); held declarations are steadily looser, which is what the papers' explanation "
          "assumes. The papers' DPBD numbers cannot be checked against the authors' code: their snapshot has the "
          "dynamic mechanisms commented out (spec §6, item 9)."),
    Claim("DPBA below PBA", "dpba", "pba", REAL + SYNTHETIC + (EVENTS,),
          "As for DPBD: DPBA faces weaker requirements than PBA, so a gain is partly the weaker guarantee, not the "
          "algorithm. The papers' PBA also lacked nullification. Each scenario is a row of its own.",
          "Where DPBA loses, note that it nullifies almost every slot after a publication (its nullified fraction "
          "in the tables), so it publishes in very few slots and holds each release long; on the drifting synthetic "
          "counts that can cost more than PBA's more frequent publications."),
    Claim("DPBD below BD on the real streams", "dpbd", "bd", REAL,
          "The papers' 62.7-93.3% on Taxi and Foursquare: personalized requirements plus the weaker dynamic ones.",
          "Where it fails, see DPBD against PBD."),
    Claim("DPBA below BA on the synthetic streams", "dpba", "ba", SYNTHETIC,
          "The papers' headline 'at least 53.6% smaller error': personalized plus weaker dynamic requirements; the "
          "papers' BA lacked nullification, which made its error smaller than a correct BA's.",
          "Where DPBA loses, see DPBA against PBA: its publications are rare and held long."),
    Claim("PBD better than PBA on the real streams", "pbd", "pba", REAL,
          "The papers' reading (S1 admits 'PBA slightly worse than BA' on real data): sparse real histograms "
          "(d = 100, few users changing cell per slot) favour distributing the budget over absorbing it.",
          "Where PBA wins here, both publish in about 1% of the slots (the carried-forward cells barely change "
          "from one 1-minute slot to the next); our Taxi stream has 593 taxis where the papers had 10,357, which "
          "changes the balance between noise and sampling error, and the papers' PBA lacked nullification. We "
          "have not isolated the cause further."),
    Claim("PBA better than PBD on the smooth synthetic streams", "pba", "pbd", SYNTHETIC,
          "On the synthetic streams (d = 2) the true counts drift slowly, so absorption's rare publications with "
          "large budgets track them better than distribution's many small-budget ones.",
          "Where PBD wins, the stream moved faster than PBA's absorbed budgets allow it to follow."),
)
CLAIM_SWEEPS = ("epsilon", "window")
"""The papers' Tables 5 and 6."""


def reduction(better, worse) -> float:
    """Mean over the columns of ``1 - A/B`` in percent: how the papers state their gains (spec §5.4)."""
    return 100.0 * float(np.mean([1.0 - a / b for a, b in zip(better, worse)]))


@dataclass(frozen=True)
class ClaimCheck:
    """One claim on one dataset and sweep, decided by a paired test over every (point, repeat) pair."""

    claim: Claim
    better: str
    """The run label standing for ``claim.better`` (a dynamic mechanism under one requirement scenario)."""
    dataset: str
    sweep: str
    ours: float
    test: PairedResult
    reverse_p: float
    """p-value of the opposite claim (worse < better), to tell 'reversed' from 'not shown'."""
    points_won: int
    """Points where the claim's own paired test over that point's repeats has p < ALPHA."""
    points: int
    papers: float | None
    p_holm: float = 1.0
    reverse_holm: float = 1.0

    @property
    def verdict(self) -> str:
        if self.p_holm < ALPHA:
            return "holds"
        return "reversed" if self.reverse_holm < ALPHA else "not shown"


def _point_means(rows: list[dict], metric: str = "amre") -> dict[tuple[str, str, str], list[float]]:
    """(dataset, sweep, mechanism) -> the metric's mean over repeats at each sweep point, when all points ran."""
    groups: dict = {}
    for row in rows:
        key = (row["dataset"], row["sweep"], row["mechanism"])
        groups.setdefault(key, {}).setdefault(row[SWEEP_COLUMN[row["sweep"]]], []).append(float(row[metric]))
    means = {}
    for (dataset, sweep, mechanism), by_point in groups.items():
        points = sweep_points(sweep)
        if all(p in by_point for p in points):
            means[(dataset, sweep, mechanism)] = [float(np.mean(by_point[p])) for p in points]
    return means


def _pairs(rows: list[dict], dataset: str, sweep: str, label: str) -> dict[tuple, float]:
    """(point, repeat) -> AMRE of one run label on one dataset and sweep."""
    column = SWEEP_COLUMN[sweep]
    return {(r[column], r["repeat"]): float(r["amre"]) for r in rows
            if r["dataset"] == dataset and r["sweep"] == sweep and r["mechanism"] == label}


def paired(rows: list[dict], dataset: str, sweep: str, better: str, worse: str, point=None
           ) -> tuple[np.ndarray, np.ndarray]:
    """Aligned AMREs of two run labels over their common (point, repeat) pairs (one point if given)."""
    a, b = _pairs(rows, dataset, sweep, better), _pairs(rows, dataset, sweep, worse)
    keys = sorted(k for k in a.keys() & b.keys() if point is None or k[0] == point)
    return np.array([a[k] for k in keys]), np.array([b[k] for k in keys])


def _labels_for(name: str, rows: list[dict]) -> list[str]:
    """Run labels of ``name`` present in ``rows`` (a dynamic mechanism: one per requirement scenario)."""
    present = dict.fromkeys(r["mechanism"] for r in rows)
    return [label for label in present if base_mechanism(label) == name]


def check_claims(rows: list[dict], datasets: list[str]) -> list[ClaimCheck]:
    """Every headline claim on every dataset and sweep in ``rows`` that has both of its mechanisms, each decided
    by a paired test (Holm-adjusted over every check made)."""
    means = _point_means(rows)
    checks = []
    for claim in CLAIMS:
        for better_label in _labels_for(claim.better, rows):
            for dataset in (d for d in datasets if d in claim.scope):
                for sweep in CLAIM_SWEEPS:
                    better, worse = means.get((dataset, sweep, better_label)), means.get((dataset, sweep, claim.worse))
                    if better is None or worse is None:
                        continue
                    paper = PAPER_AMRE.get((dataset, sweep), {})
                    papers = reduction(paper[claim.better], paper[claim.worse]) \
                        if claim.better in paper and claim.worse in paper else None
                    a, b = paired(rows, dataset, sweep, better_label, claim.worse)
                    won = sum(paired_lower(*paired(rows, dataset, sweep, better_label, claim.worse, p)).p_value
                              < ALPHA for p in sweep_points(sweep))
                    checks.append(ClaimCheck(claim, better_label, dataset, sweep, reduction(better, worse),
                                             paired_lower(a, b), paired_lower(b, a).p_value, won, len(better),
                                             papers))
    adjusted = holm([c.test.p_value for c in checks] + [c.reverse_p for c in checks])
    n = len(checks)
    return [dataclasses.replace(c, p_holm=adjusted[i], reverse_holm=adjusted[n + i]) for i, c in enumerate(checks)]


def claim_verdict(checks: list[ClaimCheck]) -> str:
    """A claim over its checks: on how many (dataset, sweep) pairs the paired test shows it, or its reverse."""
    shown = sum(c.verdict == "holds" for c in checks)
    reversed_ = sum(c.verdict == "reversed" for c in checks)
    if shown == len(checks):
        return "holds"
    return f"shown on {shown} of {len(checks)}, reversed on {reversed_}"
