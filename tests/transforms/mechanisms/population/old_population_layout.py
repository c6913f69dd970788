"""Writes ``population_old_layout.npz``: mechanism state saved by the single-class ``Population``.

Run it with the code of commit d3e53d7 (the last with ``population.*`` state arrays) on the path::

    git archive d3e53d7 | tar -x -C /tmp/old && cd /tmp/old
    HERE=$REPO/tests/transforms/mechanisms/population
    PYTHONPATH=. python $HERE/old_population_layout.py $HERE/data

For each mechanism it runs :func:`batches` for ``SAVED`` slots, stores ``to_bytes()``, then continues
with a fresh seeded generator and stores what every later slot released, so that a test can load the
old payload with today's code and check that the run continues identically.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from transforms.mechanisms import DynamicRequirements, FixedRequirements, SlotBatch, make_mechanism
from transforms.mechanisms.noise import insecure_seeded_randomness

USERS, BINS, SAVED, SLOTS = 10, 3, 6, 12
MECHANISMS = {
    "pbd": {"bins": BINS, "carry_forward": True},
    "pba": {"bins": BINS},
    "adaptive": {"bins": BINS},
    "bd": {"bins": BINS, "epsilon": 5.0, "window": 5},
    "dpbd": {"bins": BINS, "max_window": 5},
    "dpba": {"bins": BINS, "max_window": 5},
}


def batches(dynamic: bool) -> list[SlotBatch]:
    """A small stream with late joiners, absences and requirement changes (user 0 waits at slot ``SAVED``)."""
    gen = np.random.default_rng(13)
    windows, epsilons = np.array([2, 3, 5]), np.array([5.0, 10.0])
    joins = np.concatenate([[1, 1, 1], gen.integers(1, SLOTS, USERS - 3)])
    level = gen.integers(0, 4, (USERS, 4))
    out = []
    for t in range(1, SLOTS + 1):
        changing = gen.random((USERS, 1)) < 0.25
        level = np.where(changing, gen.integers(0, 4, (USERS, 4)), level)
        if t == SAVED - 1:
            level[0] = [2, 0, 2, 0]  # user 0 asks for w = 5: in force from slot SAVED + 3
        present = (joins <= t) & ((gen.random(USERS) < 0.8) | (joins == t))
        users = np.flatnonzero(present)
        values = gen.integers(-1, BINS, users.size)
        w, e = windows[level[users] % 3], epsilons[level[users] % 2]
        reqs = (DynamicRequirements.of(w[:, 0], e[:, 0] * 2, w[:, 2], e[:, 1]) if dynamic
                else FixedRequirements.of(w[:, 0], e[:, 1]))
        out.append(SlotBatch.of(users, values, reqs))
    return out


def continuation(mechanism, stream: list[SlotBatch]) -> dict[str, np.ndarray]:
    """Step slots ``SAVED+1..SLOTS`` with a fresh seeded generator: histograms, kinds, units per user."""
    rng = insecure_seeded_randomness(2)
    histograms, kinds, units = [], [], []
    for batch in stream[SAVED:]:
        release = mechanism.step(batch, rng)
        per_user = np.full(USERS, -1, np.int64)
        per_user[release.charges.users] = release.charges.units
        histograms.append(release.histogram)
        kinds.append(release.kind.value)
        units.append(per_user)
    return {"histograms": np.array(histograms), "kinds": np.array(kinds), "units": np.array(units)}


def main(out_dir: str) -> None:
    arrays = {}
    for name, params in MECHANISMS.items():
        mechanism = make_mechanism(name, **params)
        stream = batches(dynamic=name.startswith("dp"))
        rng = insecure_seeded_randomness(1)
        for batch in stream[:SAVED]:
            mechanism.step(batch, rng)
        arrays[f"{name}.payload"] = np.frombuffer(mechanism.to_bytes(), np.uint8)
        arrays.update({f"{name}.{key}": value for key, value in continuation(mechanism, stream).items()})
    np.savez_compressed(Path(out_dir) / "population_old_layout.npz", **arrays)


if __name__ == "__main__":
    main(sys.argv[1])
