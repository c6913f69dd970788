"""The population as a whole: cohorts, joining users, the memberships releases report, and its state."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import old_population_layout
from mechanism_helpers import admit, run_with_ledger
from streams import StreamSpec
from test_mechanisms import specs
from transforms.mechanisms import FixedRequirements, SlotBatch, make_mechanism
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.personalized import fixed_share
from transforms.mechanisms.population import WAITING

FIXTURE = Path(__file__).parent / "data" / "population_old_layout.npz"


def fixed(windows, epsilons):
    return FixedRequirements.of(windows, epsilons)


def test_cohorts_are_distinct_requirements_and_obs_counts_registered_users():
    pbd = make_mechanism("pbd", bins=2)
    gen = np.random.default_rng(0)
    n = 3000
    reqs = fixed(gen.choice([10, 20], n), gen.choice([0.5, 1.0], n))
    pbd.step(SlotBatch.of(np.arange(n), gen.integers(0, 2, n), reqs), insecure_seeded_randomness(0))
    assert pbd.population.table.rows == 4
    # Only 10 users report next: the public cohort sizes (what OBS uses) still count everyone.
    data = admit(pbd, SlotBatch.of(np.arange(10), np.zeros(10, np.int64)), 2)
    assert data.sizes.sum() == n
    assert data.cells.count.sum() == 10


def test_a_joining_user_shares_the_cohort_trajectory_from_the_slot_they_join():
    pbd = make_mechanism("pbd", bins=2)
    batches = [SlotBatch.of([0], [t % 2], fixed([3], [1.0]) if t == 0 else None) for t in range(10)]
    batches[6] = SlotBatch.of([0, 5], [0, 1], fixed([3, 3], [1.0, 1.0]))
    releases, ledger = run_with_ledger(pbd, batches)
    assert ledger.ok
    assert 5 not in releases[5].charges.users
    joined = releases[6].charges
    assert list(joined.units[joined.users == 5]) == list(joined.units[joined.users == 0])


def test_every_user_batches_are_recognized_only_when_exactly_0_to_n_minus_1():
    """``SlotBatch.of(range(n), ...)`` skips scanning the users; nothing else is taken for it."""
    from transforms.mechanisms.batch import every_user

    assert SlotBatch.of(range(4), [0, 1, 1, 0]).validate(2).dense
    assert SlotBatch.of(np.asarray(every_user(100)[:3]).reshape(-1), [0, 1, 1]).validate(2).dense
    users = every_user(6)
    with pytest.raises(ValueError):
        users[0] = 5  # bytes-backed: no view of it can be written to
    for lookalike in (users[1:], users[::2], users.copy()[::-1], np.arange(3)[::-1]):
        extent = SlotBatch.of(lookalike, np.zeros(lookalike.size, np.int64)).validate(2)
        assert not extent.dense
    with pytest.raises(ValueError, match="distinct"):
        SlotBatch.of([0, 1, 1], [0, 0, 0]).validate(2)


@settings(max_examples=30, deadline=None)
@given(spec=specs, name=st.sampled_from(["pbd", "pba", "bd", "dpba"]))
def test_releases_report_the_memberships_and_requirements_of_their_slot(spec, name):
    """Snapshots of memberships are shared between slots in which nobody joins or changes; each
    release must still report exactly the cohort rows, waiting users and requirements of its slot."""
    dynamic = name == "dpba"
    mechanism = make_mechanism(name, **StreamSpec.mechanism_kwargs(spec, name))
    rng = insecure_seeded_randomness(spec.seed)
    for batch in spec.batches(dynamic=dynamic):
        release = mechanism.step(batch, rng)
        population = mechanism.population
        charges = release.charges
        assert np.array_equal(charges.cohort_of, population.cohort_of)
        assert not charges.cohort_of.flags.writeable
        assert np.array_equal(charges.waiting_users, np.flatnonzero(population.cohort_of == WAITING))
        if not dynamic:
            table = population.table.data
            assert np.array_equal(charges.cohort_requirements.window, table["window"])
            assert np.array_equal(charges.cohort_requirements.epsilon_units, table["epsilon_units"])
            waiting = charges.waiting_users
            if waiting.size:
                assert np.array_equal(charges.waiting_requirements.window, population.cohorts.requirement_of(waiting).window)


@settings(max_examples=30, deadline=None)
@given(spec=specs, name=st.sampled_from(["pbd", "pba", "adaptive", "dpbd", "bd"]), carry=st.booleans())
def test_everything_kept_between_slots_equals_a_recomputation(spec, name, carry):
    """Sizes, shares, requirements in force and cells are kept while nothing changes; at every slot each
    must equal what the live state gives when computed afresh."""
    dynamic = name == "dpbd"
    mechanism = make_mechanism(name, **spec.mechanism_kwargs(name, carry_forward=carry))
    population = mechanism.population
    rng = insecure_seeded_randomness(spec.seed)
    last = np.full(2 * spec.users + 16, -1)  # the registry grows at most to twice the users, or 16
    for batch in spec.batches(dynamic=dynamic):
        mechanism.step(batch, rng)
        table = population.table
        live = population.registry.state_arrays()["cohort_of"]
        rows = live[live >= 0]
        assert np.array_equal(population.cohorts.sizes(), np.bincount(rows, minlength=table.rows))
        assert np.array_equal(population.cohorts.sizes(), table.size)
        if not dynamic:
            in_force = population.in_force()
            assert np.array_equal(in_force.window, table.data["window"])
            assert np.array_equal(in_force.epsilon_units, table.data["epsilon_units"])
            if name != "bd":
                share = fixed_share(population)
                assert np.array_equal(share, table.data["epsilon_units"] // (2 * table.data["window"]))
        reporting = batch.values >= 0
        last[batch.users[reporting]] = batch.values[reporting]
        users, values = (np.arange(live.size), last[:live.size]) if carry else (batch.users, batch.values)
        groups = live[users]
        keep = (groups >= 0) & (values >= 0)
        if mechanism.samples_cohorts:
            cells = mechanism._last_cells
            counts = np.bincount(cells.cohort * spec.bins + cells.bin, weights=cells.count,
                                 minlength=table.rows * spec.bins).astype(np.int64)
            assert np.array_equal(counts, np.bincount(groups[keep] * spec.bins + values[keep],
                                                      minlength=table.rows * spec.bins))
        assert np.array_equal(mechanism.exact_histogram_for_evaluation(),
                              np.bincount(values[keep], minlength=spec.bins))


# ---------------------------------------------------------------- state


@pytest.mark.parametrize("name", list(old_population_layout.MECHANISMS))
def test_a_checkpoint_of_the_single_class_population_resumes_identically(name):
    """State saved before the split (``population.*`` arrays, by commit d3e53d7's code, see
    old_population_layout.py) loads, continues with the same releases and charges, and saves in the new layout."""
    with np.load(FIXTURE) as data:
        fixture = {key[len(name) + 1:]: data[key] for key in data.files if key.startswith(f"{name}.")}
    with np.load(io.BytesIO(fixture["payload"].tobytes()), allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files if key != "__header__"}
    assert "population.cohort_of" in arrays  # the old layout
    stream = old_population_layout.batches(dynamic=name.startswith("dp"))
    mechanism = make_mechanism(name, **old_population_layout.MECHANISMS[name])
    mechanism.load_state_arrays(arrays)
    resaved = mechanism.to_bytes()
    continued = old_population_layout.continuation(mechanism, stream)
    for key in ("histograms", "kinds", "units"):
        assert np.array_equal(continued[key], fixture[key]), key
    again = type(mechanism).from_bytes(mechanism.params, resaved)
    assert not any(key.startswith("population.") for key in again.state_arrays())
    for key, values in old_population_layout.continuation(again, stream).items():
        assert np.array_equal(values, fixture[key]), key


@pytest.mark.parametrize("name", ["pbd", "dpba"])
def test_each_part_saves_its_own_state(name):
    mechanism = make_mechanism(name, **old_population_layout.MECHANISMS[name])
    rng = insecure_seeded_randomness(0)
    for batch in old_population_layout.batches(dynamic=name.startswith("dp"))[:4]:
        mechanism.step(batch, rng)
    parts = {key.split(".")[0] for key in mechanism.state_arrays()} - {"slot", "last_release", "extra"}
    assert parts == ({"registry", "table", "cohorts"} if name == "pbd" else {"registry", "table"})
