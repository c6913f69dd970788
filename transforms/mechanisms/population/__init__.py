"""Who is protected: the user registry, cohorts, and each slot's data as cells.

**Cohorts.**  Users whose requirement history is identical are charged the
same budget at every slot, so a mechanism keeps one budget trajectory per
*cohort* instead of one per user (DESIGN §3).  Per-slot work is then
``O(cohorts · window)`` for budgets plus ``O(users)`` for the histogram.

* fixed requirements: one cohort per distinct ``(w, E)``;
* dynamic requirements: one cohort per distinct declaration history.  When
  some members of a cohort declare something new, they split off into a copy
  of the cohort's state (their charge history *is* the cohort's), so the
  split is exact, not conservative.

**Policies** (the papers assume a fixed population that reports every slot):

* *absent users* are still registered and still charged: the releases
  depend on whether they reported, so the guarantee must cover absence.
  With ``carry_forward`` a user's last bin stays in force until they report
  a new one (the papers' taxi preprocessing); without it an absent user
  contributes nothing that slot.
* *joining users* are registered at their first row.  Under fixed
  requirements they join the cohort of their ``(w, E)``; their history is
  all zeros, which is pointwise below the cohort's, so every window of theirs
  sums to at most the cohort's.  Under dynamic requirements joiners with the
  same declaration form a new cohort with an empty history.
* *a changed fixed requirement* ``(w, E) → (w', E')`` declared at slot ``t``
  takes effect at ``t + w' - 1``.  In between the user contributes nothing
  and is charged nothing, and the old requirement stays in force.  Every
  window of ``w'`` slots that ends once the new requirement is in force then
  holds only zeros and new-cohort charges, and every earlier window only old
  charges and zeros.  Declaring the old requirement again during the wait
  cancels the change.  (Dynamic requirements change at any slot; that is what
  DPBD/DPBA are for.)
* the number of registered users per cohort is public (the requirements are
  public mechanism parameters, spec §1.7), so OBS counts registered users,
  never only the ones present in a slot, which would leak presence.

**Parts**, each owning its state, what it derives from it, and its saved arrays:
``registry`` (users: cohort row, last value), ``table`` (per-cohort rows),
``cohorts`` (the policy of the requirement kind: ``fixed_cohorts`` or
``dynamic_cohorts``, chosen once), ``cells`` (each slot's counts).
:class:`Population` puts them together for :class:`~transforms.mechanisms.base.Mechanism`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transforms.mechanisms.batch import BatchExtent, SlotBatch
from transforms.mechanisms.population.cells import CellBuilder
from transforms.mechanisms.population.cohorts import CohortPolicy, Memberships
from transforms.mechanisms.population.dynamic_cohorts import DynamicCohorts
from transforms.mechanisms.population.fixed_cohorts import FixedCohorts
from transforms.mechanisms.population.lifetime_cohorts import LifetimeCohorts
from transforms.mechanisms.population.registry import UserRegistry
from transforms.mechanisms.population.table import UNREGISTERED, WAITING, CohortTable, Column, read_only_copy
from transforms.mechanisms.requirements import (DynamicRequirements, FixedRequirements, LifetimeRequirements,
                                                Requirements)
from transforms.mechanisms.sampling import Cells

POLICIES: dict[type, type[CohortPolicy]] = {FixedRequirements: FixedCohorts, DynamicRequirements: DynamicCohorts,
                                             LifetimeRequirements: LifetimeCohorts}
"""The cohort policy of each requirement kind."""


@dataclass
class SlotData:
    """What a mechanism sees of one slot after the population is updated."""

    cells: Cells
    sizes: np.ndarray        # registered, active users per cohort row (public)
    groups: np.ndarray       # the memberships snapshot the cells were counted from (cohort row per user)


class Population:
    """The parts together: registry of users, cohort table, the kind's cohort policy, cell building."""

    def __init__(self, kind: type, bins: int, columns: dict[str, Column], carry_forward: bool = False,
                 default_requirement: Requirements | None = None):
        policy = POLICIES[kind]
        overlap = policy.columns.keys() & columns.keys()
        if overlap:
            raise ValueError(f"column names reserved by the population: {sorted(overlap)}")
        self.default_requirement = default_requirement
        self.registry = UserRegistry()
        self.table = CohortTable({**policy.columns, **columns})
        self.cohorts = policy(self.registry, self.table, default_requirement)
        self.cells = CellBuilder(bins, carry_forward, self.registry)

    @property
    def cohort_of(self) -> np.ndarray:
        """Cohort row per user index (or UNREGISTERED / WAITING), read-only."""
        return self.registry.cohort_of()

    def memberships(self) -> Memberships:
        """This slot's memberships (one snapshot for every slot in which nobody joins or changes)."""
        return self.cohorts.memberships()

    def in_force(self) -> Requirements:
        """The requirement in force per cohort row."""
        return self.cohorts.in_force()

    # ------------------------------------------------------------------ per slot
    def rows_of(self, users: np.ndarray, extent: BatchExtent) -> np.ndarray:
        """Each user's cohort row (or UNREGISTERED / WAITING), read-only, without changing anything."""
        return self.registry.rows_of(users, extent)

    def validate(self, batch: SlotBatch, rows: np.ndarray, extent: BatchExtent) -> bool:
        """Fail before any change when a new user comes without a requirement.

        Returns whether every row is already in a cohort.
        """
        registered = self.registry.all_in_cohorts(rows, extent.dense)
        if not registered and batch.requirements is None and self.default_requirement is None:
            new = rows == UNREGISTERED
            if new.any():
                raise ValueError(f"user {int(batch.users[np.argmax(new)])} has no requirement and the "
                                 "mechanism has no default_requirement")
        return registered

    def admit(self, batch: SlotBatch, slot: int, rows: np.ndarray, extent: BatchExtent, registered: bool,
              by_cohort: bool = True) -> SlotData:
        """Apply one slot's rows (registrations, changes, values); return the slot's cells.

        ``rows`` is :meth:`rows_of` the batch's users, ``extent`` what the batch's
        validation returned and ``registered`` what :meth:`validate` returned, all
        computed by the caller before any change.  With ``by_cohort=False`` the
        cells are pooled over cohorts (see :class:`Cells`).
        """
        self.registry.grow(extent.max_user)
        cohorts = self.cohorts
        steady = registered and cohorts.steady(batch)  # nobody joins or changes
        if not steady:
            cohorts.declare(batch, slot, rows)
            cohorts.compact()
        groups = self.registry.cohort_of()
        if steady:
            rows = groups[:batch.users.size] if extent.dense else groups[batch.users]
        else:  # memberships may have changed: the rows are read again
            rows = groups[batch.users]
        cells = self.cells.cells(batch, groups, rows, extent.all_report, by_cohort, self.table.rows,
                                 registered=steady, dense=steady and extent.dense)
        return SlotData(cells=cells, sizes=cohorts.sizes(), groups=groups)

    # ------------------------------------------------------------------ state
    _PARTS = ("registry", "table", "cohorts")

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Each part's state, named ``<part>.<array>``."""
        return {f"{part}.{name}": values for part in self._PARTS
                for name, values in getattr(self, part).state_arrays().items()}

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Inverse of :meth:`state_arrays`; also reads the single-object layout older checkpoints have."""
        if "population.waiting" in arrays:
            arrays = _from_old_layout(arrays)
        for part in self._PARTS:
            prefix = f"{part}."
            getattr(self, part).load_state_arrays(
                {name[len(prefix):]: values for name, values in arrays.items() if name.startswith(prefix)})


_REGISTRY_ARRAYS = ("cohort_of", "value_of")


def _from_old_layout(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Names of checkpoints written when one class held the population (``population.*``)."""
    renamed = {name: values for name, values in arrays.items() if name.startswith("table.")}
    for name, values in arrays.items():
        if name.startswith("population."):
            short = name[len("population."):]
            renamed[f"registry.{short}" if short in _REGISTRY_ARRAYS else f"cohorts.{short}"] = values
    return renamed


__all__ = ["UNREGISTERED", "WAITING", "CellBuilder", "CohortPolicy", "CohortTable", "Column", "DynamicCohorts",
           "FixedCohorts", "Memberships", "Population", "SlotData", "UserRegistry", "read_only_copy"]
