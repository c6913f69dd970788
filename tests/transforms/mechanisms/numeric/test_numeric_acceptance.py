"""Spec §6.4.3 acceptance on the UCI Volume series under the reference protocol (§6.2.1): w = q = 10, 40 evenly
spaced queries each perturbed from scratch at ``ε/w`` (the per-query runs are w-event private: each result says
so), 400 repetitions, MSE of the unsmoothed means, cosine distance after the trailing SMA (SW-direct raw).

The spec gives two Monte-Carlo estimates per cell (the reference code's stored table and the spec author's
re-implementation, 4,000 query-repetitions each); they differ by up to 8% (IPP at ε = 1).  A cell passes when
the estimate here lies within the two widened by 12% (MSE) or 0.02 (cosine distance).  With 16,000
query-repetitions the estimate's own relative standard error is about 1.5% (MSE) and 0.002 (cosine), so a
correct implementation falls outside only if the spec's numbers are themselves off by more than 10%: an
approximate acceptance test, not a calibrated statistical one (the paper's claim CAPP < SW-direct at ε = 0.5
is checked beside it: a 15% gap, about 10 standard errors).  Skips, saying why, when the data are absent.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from transforms.mechanisms.noise import secure_randomness
from transforms.mechanisms.numeric.baselines import AbsorptionParams, ToplParams, ba_sw, topl
from transforms.mechanisms.numeric.perturbation import PerturbationParams, perturb_queries
from transforms.mechanisms.numeric.server import cosine_distances, mse, sma, subsequence_means

_REPOSITORY = Path(__file__).resolve().parents[4]
_DATA = [_REPOSITORY.parent / "shared" / "data" / "uci_numeric_streams",  # ../shared/data, as the other tests
         Path("/work/shared/data/uci_numeric_streams")]  # where it is when the repository is a worktree
VOLUME = next((folder for folder in _DATA if folder.exists()), _DATA[0]) / "volume.csv"
WINDOW, REPEATS = 10, 400

# epsilon: method -> ((REF MSE, spec MSE), (REF cosd, spec cosd)); BA-SW at the true w: the spec's only
REFERENCE = {
    0.5: {"sw": ((6.169e-2, 6.27e-2), (0.402, 0.403)), "ipp": ((6.244e-2, 6.34e-2), (0.267, 0.258)),
          "app": ((6.051e-2, 5.94e-2), (0.266, 0.260)), "capp": ((5.335e-2, 5.27e-2), (0.229, 0.221)),
          "ba-sw": ((1.23e-1, 1.27e-1), (0.371, 0.372)), "topl": ((50.90, 53.8), (0.964, 0.960))},
    1.0: {"sw": ((5.829e-2, 5.91e-2), (0.397, 0.394)), "ipp": ((6.301e-2, 5.82e-2), (0.247, 0.252)),
          "app": ((5.419e-2, 5.64e-2), (0.255, 0.252)), "capp": ((5.230e-2, 5.05e-2), (0.226, 0.227)),
          "ba-sw": ((1.16e-1, 1.16e-1), (0.358, 0.358)), "topl": ((12.75, 13.4), (0.930, 0.917))},
    3.0: {"sw": ((5.085e-2, 5.05e-2), (0.351, 0.352)), "ipp": ((4.850e-2, 4.66e-2), (0.221, 0.214)),
          "app": ((4.200e-2, 4.15e-2), (0.226, 0.225)), "capp": ((4.143e-2, 4.19e-2), (0.221, 0.222)),
          "ba-sw": ((9.2e-2, 9.14e-2), (0.321, 0.319)), "topl": ((1.357, 1.32), (0.812, 0.798))},
}


@pytest.fixture(scope="module")
def queries() -> np.ndarray:
    if not VOLUME.exists():
        pytest.skip(f"the UCI Volume series is not at {VOLUME} (shared data absent on this machine)")
    series = np.loadtxt(VOLUME, skiprows=1)
    series = (series - series.min()) / (series.max() - series.min())  # min-max over the whole series (§6.1)
    step = series.size // 40
    starts = np.arange(0, series.size - WINDOW, step)
    assert starts.size == 40
    return np.repeat(series[starts[:, None] + np.arange(WINDOW)], REPEATS, axis=0)


def released(method: str, epsilon: float, x: np.ndarray) -> np.ndarray:
    rng = secure_randomness()
    if method == "ba-sw":
        return ba_sw(AbsorptionParams(epsilon, WINDOW), x, rng).reports
    if method == "topl":
        return topl(ToplParams(epsilon, WINDOW), x, rng).reports
    memory = dict(unbounded=True) if method in ("app", "capp") else {}
    params = PerturbationParams(epsilon, WINDOW, method, reset=WINDOW, budget="paper", **memory)
    result = perturb_queries(params, x, rng)
    assert result.w_event_private  # one query of w reports at eps/w each
    return result.reports


@pytest.mark.parametrize("epsilon", sorted(REFERENCE))
def test_volume_w10_falls_in_the_spec_acceptance_ranges(queries, epsilon):
    truth = queries.mean(axis=1)
    errors = {}
    for method, ((mse_a, mse_b), (cos_a, cos_b)) in REFERENCE[epsilon].items():
        reports = released(method, epsilon, queries)
        error = mse(subsequence_means(reports), truth)
        published = reports if method == "sw" else sma(reports, 3, "trailing")
        distances, dropped = cosine_distances(queries, published)
        assert dropped == 0
        errors[method] = error
        assert min(mse_a, mse_b) / 1.12 <= error <= max(mse_a, mse_b) * 1.12, (method, error)
        assert min(cos_a, cos_b) - 0.02 <= distances.mean() <= max(cos_a, cos_b) + 0.02, (method, distances.mean())
    if epsilon == 0.5:
        assert errors["capp"] < errors["sw"]  # the paper's headline claim, a 15% gap here
        # power: CAPP with the printed bounds (trap T2; spec: 6.90e-2) falls outside CAPP's range
        literal = PerturbationParams(epsilon, WINDOW, "capp", unbounded=True, reset=WINDOW, budget="paper",
                                     bound_mode="paper_literal")
        error = mse(subsequence_means(perturb_queries(literal, queries, secure_randomness()).reports), truth)
        assert error > max(REFERENCE[epsilon]["capp"][0]) * 1.12


# C6H6, w = 10, eps = 0.5 (spec §6.4.3, the sign-convention table: one Monte-Carlo source, 4,000 runs)
C6H6 = {"sw": 1.54e-1, "app": 1.52e-1, "ref": 1.43e-1, "consistent_shrink": 1.44e-1, "paper_literal": 1.63e-1}


def test_c6h6_sign_conventions_fall_in_the_spec_ranges():
    path = VOLUME.with_name("air.csv")
    if not path.exists():
        pytest.skip(f"the UCI C6H6 series is not at {path} (shared data absent on this machine)")
    series = np.loadtxt(path, skiprows=1)
    series = (series - series.min()) / (series.max() - series.min())
    starts = np.arange(0, series.size - WINDOW, series.size // 40)
    x = np.repeat(series[starts[:, None] + np.arange(WINDOW)], REPEATS, axis=0)
    for name, expected in C6H6.items():
        method, mode = (name, "ref") if name in ("sw", "app") else ("capp", name)
        memory = dict(unbounded=True) if method != "sw" else {}
        params = PerturbationParams(0.5, WINDOW, method, reset=WINDOW, budget="paper", bound_mode=mode, **memory)
        error = mse(subsequence_means(perturb_queries(params, x, secure_randomness()).reports), x.mean(axis=1))
        assert expected / 1.12 <= error <= expected * 1.12, (name, error)
