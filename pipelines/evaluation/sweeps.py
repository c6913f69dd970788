"""What the evaluation sweeps: its datasets, sweep points, repeats and run labels, and their display names.

A *run label* is a registered mechanism name, or ``name:scenario`` for a dynamic mechanism under a requirement
scenario other than the default (``dpbd``, ``dpbd:held``, ...).  Shared by the experiment, the claims, the
document, the plots and the command line.
"""

from __future__ import annotations

from pipelines.evaluation_data import REAL_SOURCES
from transforms.mechanisms import Family
from transforms.mechanisms.scenarios import EPSILON_GRID, SCENARIOS, WINDOW_GRID

BINS = 2
"""d of the synthetic streams."""
SYNTHETIC = ("sin", "log", "tlns")
REAL = tuple(REAL_SOURCES)
EVENTS = "events"
DATASETS = SYNTHETIC + REAL + (EVENTS,)
DEFAULT_DATASETS = REAL + ("tlns", "sin", "log")
"""In the papers' order (Tables 5-6)."""

DEFAULT_EPSILON = 0.6
DEFAULT_WINDOW = 120
RATIO_HIGH_EPSILON = 1.0
"""§6.5, first experiment: a fraction o of the users has E = 1.0; the others E = DEFAULT_EPSILON; all w = 120."""
RATIO_LOW_WINDOW = 40
"""§6.5, second experiment: a fraction o of the users has w = 40; the others w = DEFAULT_WINDOW; all E = 0.6."""
RATIOS = (0.1, 0.3, 0.5, 0.7, 0.9)
DEFAULT_REPEATS = 5
EPSILON_REPEATS = 10
DEFAULT_REPEATS_TEXT = f"{DEFAULT_REPEATS},epsilon={EPSILON_REPEATS}"
"""At least 10 repeats per point for the epsilon sweep and 5 elsewhere."""
DEFAULT_DRIFT_EVERY = 100

SWEEPS = {
    "epsilon": [(e, DEFAULT_WINDOW, None) for e in EPSILON_GRID],
    "window": [(DEFAULT_EPSILON, w, None) for w in WINDOW_GRID],
    "ratio": [(DEFAULT_EPSILON, DEFAULT_WINDOW, o) for o in RATIOS],
    "wratio": [(DEFAULT_EPSILON, DEFAULT_WINDOW, o) for o in RATIOS],
}
"""Sweep name -> points ``(epsilon, window, ratio or None)``."""
SWEEP_COLUMN = {"epsilon": "epsilon", "window": "window", "ratio": "ratio", "wratio": "ratio"}
"""The results.csv column each sweep varies."""
RATIO_SWEEPS = ("ratio", "wratio")
SWEEP_LABELS = {"epsilon": "E", "window": "w", "ratio": "o (fraction of users with E = 1.0)",
                "wratio": "o (fraction of users with w = 40)"}


def base_mechanism(label: str) -> str:
    """``dpbd:held`` -> ``dpbd``."""
    return label.partition(":")[0]


def scenario_of(label: str) -> str:
    """The requirement scenario of a run label (``redrawn`` unless named; '' for fixed requirements)."""
    return (label.partition(":")[2] or SCENARIOS[0]) if is_dynamic(label) else ""


def is_dynamic(name: str) -> bool:
    """The mechanism (or run label) takes dynamic requirements."""
    return Family.of(base_mechanism(name)) is Family.DYNAMIC


def takes_ratios(name: str) -> bool:
    """Personalized with fixed requirements: the only mechanisms a two-type mix changes."""
    return Family.of(base_mechanism(name)) is Family.FIXED


def run_labels(mechanisms: list[str], scenarios: list[str]) -> list[str]:
    """Every mechanism, the dynamic ones once per requirement scenario (``dpbd``, ``dpbd:held``, ...)."""
    labels = []
    for name in mechanisms:
        if is_dynamic(name):
            labels += [name if scenario == SCENARIOS[0] else f"{name}:{scenario}" for scenario in scenarios]
        else:
            labels.append(name)
    return labels


def sweep_points(sweep: str) -> list:
    """The values the sweep's column takes, in order (``E`` of the epsilon sweep, ...)."""
    return [point[("epsilon", "window", "ratio").index(SWEEP_COLUMN[sweep])] for point in SWEEPS[sweep]]


NAMES = {"sin": "Sin", "log": "Log", "tlns": "TLNS", "taxi": "Taxi", "foursquare": "Foursquare", EVENTS: "Events"}
MECHANISM_NAMES = {"bd": "BD", "ba": "BA", "uniform": "Uniform", "sample": "Sample", "pbd": "PBD", "pba": "PBA",
                   "dpbd": "DPBD", "dpba": "DPBA", "adaptive": "Adaptive", "dadaptive": "DAdaptive"}


def dataset_name(dataset: str) -> str:
    """``tlns`` -> ``TLNS``, as the papers name it."""
    return NAMES.get(dataset, dataset)


def label_name(label: str) -> str:
    """``dpbd:held`` -> ``DPBD (held)``."""
    name, _, scenario = label.partition(":")
    return MECHANISM_NAMES.get(name, name.upper()) + (f" ({scenario})" if scenario else "")
