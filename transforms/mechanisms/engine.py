"""The one run loop: a stream of slot batches through a mechanism, its charges through a ledger.

Every caller that steps a mechanism goes through :class:`Engine`: the plain
runner (``transforms.mechanisms.run``), the evaluation, the audit, the
benchmarks and soak test, the tests' helpers, and the release stage's
stream engine (``transforms.engine``), which adds user ids, declarations,
records and checkpoints around it.  So what a mechanism releases for a given
stream and generator is the same wherever it runs (a test drives one stream
through all of them and compares the outputs byte for byte).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from transforms.mechanisms.base import Mechanism, Release
from transforms.mechanisms.batch import SlotBatch
from transforms.mechanisms.ledger import PrivacyLedger
from transforms.mechanisms.noise import Randomness


class Engine:
    """Steps ``mechanism`` slot by slot with ``randomness``; every release's charges go to ``ledger`` (if any).

    ``clock`` times the mechanism's steps and the ledger's checks apart
    (``mechanism_seconds``, ``ledger_seconds``): ``time.perf_counter`` for
    wall time, ``time.process_time`` for CPU time.
    """

    def __init__(self, mechanism: Mechanism, randomness: Randomness, ledger: PrivacyLedger | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.mechanism, self.randomness, self.ledger, self.clock = mechanism, randomness, ledger, clock
        self.mechanism_seconds = 0.0
        self.ledger_seconds = 0.0

    def step(self, batch: SlotBatch) -> Release:
        """Release the next slot from ``batch``; the ledger checks its charges before it is returned."""
        return self._timed(self.mechanism.step, batch)

    def step_exchangeable(self, batch: SlotBatch, true_counts) -> Release:
        """As :meth:`step` for a local method whose users' values are exchangeable counts
        (``LocalMechanism.step_exchangeable``: spec §3.5's hypergeometric shortcut for synthetic streams)."""
        step_exchangeable = getattr(self.mechanism, "step_exchangeable", None)
        if step_exchangeable is None:
            raise ValueError(f"{self.mechanism.name} is not a local-DP frequency method: it needs users' values")
        return self._timed(lambda b, rng: step_exchangeable(b, true_counts, rng), batch)

    def _timed(self, step, batch: SlotBatch) -> Release:
        start = self.clock()
        release = step(batch, self.randomness)
        middle = self.clock()
        self.mechanism_seconds += middle - start
        if self.ledger is not None:
            self.ledger.record(release.slot, release.charges)
            self.ledger_seconds += self.clock() - middle
        return release

    def run(self, batches: Iterable[SlotBatch]) -> Iterator[Release]:
        """Release one slot per batch, in order (lazily: a caller may stop early)."""
        for batch in batches:
            yield self.step(batch)

    def close(self) -> None:
        """End of the stream: the ledger checks the forward windows still open."""
        if self.ledger is not None:
            self.ledger.close()

    def exact_histogram_for_evaluation(self) -> np.ndarray:
        """The TRUE histogram of the last slot's data: NOT private (utility measurements only)."""
        return self.mechanism.exact_histogram_for_evaluation()
