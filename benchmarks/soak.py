"""Soak run: a dynamic mechanism and the privacy ledger over a long stream, checking memory and exactness.

    python -m benchmarks.soak --users 10000 --slots 100000 --mechanism dpbd --json

streams a synthetic binary stream (spec §5.1) with the papers' per-type dynamic
requirements (``PaperSetup.dynamic_declarations``, windows up to 200) through
``dpbd`` or ``dpba`` and a :class:`PrivacyLedger`, and prints one JSON object:
at each checkpoint the current RSS, the peak RSS of the slots since the
previous checkpoint (Linux: VmHWM restarted through ``/proc/self/clear_refs``
after a ``malloc_trim``, so neither an early transient nor heap kept from the
checkpoint's own serializations hides or fakes growth) and of the run, the
mechanism's and the ledger's state sizes, the cohort count, the ledger's
verdict and the seconds per slot; then the growth of the interval peak from
the first checkpoint to the last, with a verdict.  The first two windows are
a warm-up measured on their own.  No tracemalloc (it would slow the run).

Exactness: :class:`ExactWindows` keeps every user's raw charges of the last
``max_window`` slots (no running totals, so it cannot drift) and recomputes
windows from them; every user's every grid-length window is compared with
``ledger.window_sum`` at each checkpoint, and random users' random windows at
random slots.  The ledger's uint64 running totals start just below 2^64 (a
random offset per user, ``--start-below-wrap``) so that they wrap during the
run, which real charges alone would not do in 100,000 slots.

Noise comes from the secure generator unless ``--insecure-seed`` asks for a
reproducible, *not private*, replay.  The exit code is 0 only when memory is
flat, no window sum mismatches and the ledger reports no violation.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import io
import json
import sys
import time

import numpy as np

from benchmarks.core import peak_memory_bytes
from transforms.mechanisms import PrivacyLedger, ReleaseKind, SlotBatch
from transforms.mechanisms.budget import UNITS_PER_EPSILON, to_units
from transforms.mechanisms.dynamic import DYNAMIC
from transforms.mechanisms.engine import Engine
from transforms.mechanisms.noise import insecure_seeded_randomness, secure_randomness
from transforms.mechanisms.registry import mechanism_for_setup
from transforms.mechanisms.scenarios import WINDOW_GRID, PaperSetup
from transforms.mechanisms.synthetic import STREAMS, binary_stream, stream_probabilities

MIB = 2**20
MAX_MISMATCHES_KEPT = 10


class ExactWindows:
    """A drift-free reference for the ledger's window sums.

    Keeps each user's raw per-slot charges of the last ``max_window`` slots and
    adds a window's charges afresh on every query, so no error can accumulate.
    Every charge is checked to be below ``2^63 / max_window``, which makes the
    int64 additions exact.  ``totals`` (each user's whole-run spend, guarded
    below 2^62) only tells which users' ledger totals wrapped.
    """

    def __init__(self, users: int, max_window: int):
        self.max_window = max_window
        self.slot = 0
        self._charges = np.zeros((max_window, users), np.int64)
        self._bound = np.iinfo(np.int64).max // max_window
        self.totals = np.zeros(users, np.int64)
        self.checks = 0
        self.mismatches = 0
        self.first_mismatches: list[dict] = []

    def record(self, slot: int, users: np.ndarray, units: np.ndarray) -> None:
        """Keep slot ``slot``'s charges (slots in order, without gaps)."""
        if slot != self.slot + 1:
            raise ValueError(f"expected slot {self.slot + 1}, got {slot}")
        if units.size and not 0 <= units.min() <= units.max() < self._bound:
            raise ValueError("a charge is negative or too large for exact int64 window sums")
        row = self._charges[slot % self.max_window]
        row[:] = 0
        row[users] = units
        self.totals[users] += units
        if self.totals.max(initial=0) >= 2**62:
            raise OverflowError("whole-run totals near int64 overflow")
        self.slot = slot

    def window(self, users: np.ndarray, length: int) -> np.ndarray:
        """Exact charges of ``users`` over the last ``length`` slots."""
        if not 1 <= length <= min(self.max_window, self.slot):
            raise ValueError(f"window of {length} slots outside the kept history")
        total = np.zeros(users.size, np.int64)
        for slot in range(self.slot - length + 1, self.slot + 1):
            total += self._charges[slot % self.max_window, users]
        return total

    def check(self, ledger: PrivacyLedger, users: np.ndarray, length: int) -> int:
        """Compare ``ledger.window_sum`` with the exact sum for each user; return the mismatches."""
        first, last = self.slot - length + 1, self.slot
        bad = 0
        for user, want in zip(users.tolist(), self.window(users, length).tolist()):
            got = ledger.window_sum(user, first, last)
            if got != want:
                bad += 1
                if len(self.first_mismatches) < MAX_MISMATCHES_KEPT:
                    self.first_mismatches.append({"user": user, "first_slot": first, "last_slot": last,
                                                  "ledger": got, "exact": want})
        self.checks += users.size
        self.mismatches += bad
        return bad


def ledger_starting_below_wrap(max_window: int, below: np.ndarray) -> PrivacyLedger:
    """A fresh ledger whose user ``u``'s running total starts at ``2^64 - below[u]`` instead of 0.

    Window sums are differences of totals, so the start must not change them;
    starting near 2^64 makes the uint64 totals wrap during the run.  Built
    through the ledger's own ``to_bytes``/``from_bytes`` payload (slot-major
    ``totals[slot % (max_window + 1), user]``).
    """
    with np.load(io.BytesIO(PrivacyLedger(max_window).to_bytes()), allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    if arrays.get("totals", np.zeros(0)).shape != (max_window + 1, 0):
        raise RuntimeError("the ledger's payload no longer holds slot-major 'totals'; update the soak")
    start = (-np.asarray(below, np.int64)).view(np.uint64)  # 2^64 - below, modulo 2^64
    arrays["totals"] = arrays["dc_totals"] = np.tile(start, (max_window + 1, 1))
    arrays["origins"] = np.tile(start, (2, 1))  # both running totals before the first slot
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return PrivacyLedger.from_bytes(buffer.getvalue())


def memory_bytes() -> tuple[int | None, int]:
    """``(resident set size now, its peak since the last reset_peak_rss)``, from Linux ``/proc/self/status``.

    Without ``/proc`` the current size is None and the peak is the process's whole-life maximum.
    """
    fields = {}
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    fields[line[:5]] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return fields.get("VmRSS"), fields.get("VmHWM") or peak_memory_bytes()


def reset_peak_rss() -> bool:
    """Restart the kernel's peak-RSS count (VmHWM) from the current size; False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


def check_lengths(slot: int, max_window: int, rng: np.random.Generator) -> list[int]:
    """Window lengths checked for every user at a checkpoint: 1, the grid windows, the longest, one random."""
    lengths = {1, max_window, int(rng.integers(1, max_window + 1))} | {w for w in WINDOW_GRID if w <= max_window}
    return sorted(w for w in lengths if w <= slot)


class PeakMemory:
    """Peak RSS per interval (VmHWM restarted after each reading where Linux allows) and over the run."""

    def __init__(self):
        self.per_interval = reset_peak_rss()
        self.run_peak = 0

    def read(self) -> dict:
        """Current RSS, the interval's peak and the run's peak so far, in MiB."""
        rss, peak = memory_bytes()
        self.run_peak = max(self.run_peak, peak)
        return {"rss_mib": _mib(rss), "interval_peak_rss_mib": _mib(peak), "peak_rss_mib": _mib(self.run_peak)}

    def restart(self) -> None:
        """Start a new interval, first handing back to the OS the heap freed since the reading.

        Without the trim, heap that glibc keeps after the checkpoint's own
        serializations (tens of MiB) would count as RSS of the next interval.
        """
        if self.per_interval:
            trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc only
            if trim is not None:
                trim(0)
            reset_peak_rss()


def soak(users: int = 10_000, slots: int = 100_000, mechanism: str = "dpbd", checkpoints=(10_000, 50_000, 100_000),
         dataset: str = "sin", epsilon: float = 0.6, window: int = 200, data_seed: int = 0,
         insecure_seed: int | None = None, start_below_wrap: float = 1000.0, random_check_every: int = 500,
         random_check_users: int = 256, tolerance_mib: float = 4.0, tolerance_fraction: float = 0.02,
         progress=None) -> dict:
    """Run the soak in this process and return the report (see the module docstring).

    The first ``2 * max_window`` slots (the first windows) are the warm-up; each
    checkpoint reports the peak RSS of the slots since the previous one.
    """
    checkpoints = sorted({int(c) for c in checkpoints if 0 < int(c) <= slots} | {slots})
    data_rng = np.random.default_rng(data_seed)
    check_rng = np.random.default_rng([data_seed, 1])  # which slots, users and windows are checked
    grid = tuple(w for w in WINDOW_GRID if w <= window) or (window,)
    setup = PaperSetup(users=users, epsilon=epsilon, window=window, window_grid=grid)
    mech = mechanism_for_setup(mechanism, setup, bins=2)
    noise = secure_randomness() if insecure_seed is None else insecure_seeded_randomness(insecure_seed)
    max_window = setup.max_window
    warmup = min(2 * max_window, checkpoints[0] - 1)
    below = (check_rng.integers(0, to_units(start_below_wrap), users) if start_below_wrap > 0
             else np.zeros(users, np.int64))
    ledger = ledger_starting_below_wrap(max_window, below)
    exact = ExactWindows(users, max_window)
    declarations = setup.dynamic_declarations(data_rng, slots)
    stream = binary_stream(stream_probabilities(dataset, slots, data_rng), users, data_rng)
    index = np.arange(users)
    kinds = {k.value: 0 for k in ReleaseKind}
    memory = PeakMemory()
    rows, warm, random_checks = [], None, 0
    engine = Engine(mech, noise, ledger)
    began = interval_start = time.perf_counter()
    previous = 0
    for t, values in enumerate(stream, start=1):
        batch = SlotBatch.of(index, values, next(declarations))
        release = engine.step(batch)
        kinds[release.kind.value] += 1
        exact.record(t, release.charges.users, release.charges.units)
        if check_rng.random() * random_check_every < 1:
            picked = check_rng.choice(users, min(random_check_users, users), replace=False)
            exact.check(ledger, np.sort(picked), int(check_rng.integers(1, min(max_window, t) + 1)))
            random_checks += 1
        if t == warmup:
            warm = {"slots": t, **memory.read()}
            memory.restart()
        if t != checkpoints[len(rows)]:
            continue
        mismatches_before = exact.mismatches
        for length in check_lengths(t, max_window, check_rng):
            exact.check(ledger, index, length)
        done = t - previous
        seconds = {"mechanism": engine.mechanism_seconds / done, "ledger": engine.ledger_seconds / done,
                   "all": (time.perf_counter() - interval_start) / done}
        rows.append({
            "slot": t, **memory.read(),
            "mechanism_state_bytes": len(mech.to_bytes()), "cohorts": int(mech.population.table.rows),
            "history_width": int(mech.population.table.width), "ledger_state_bytes": len(ledger.to_bytes()),
            "python_objects": len(gc.get_objects()),
            "max_window_usage_ratio": ledger.max_usage_ratio, "violations": ledger.violation_count,
            "window_checks": exact.checks, "mismatches_at_checkpoint": exact.mismatches - mismatches_before,
            "seconds_per_slot": seconds, "kinds": dict(kinds),
        })
        if progress is not None:
            progress(rows[-1])
        memory.restart()
        engine.mechanism_seconds = engine.ledger_seconds = 0.0
        interval_start, previous = time.perf_counter(), t
    engine.close()
    first, last = rows[0], rows[-1]
    growth = last["interval_peak_rss_mib"] - first["interval_peak_rss_mib"]
    allowed = max(tolerance_mib, tolerance_fraction * first["interval_peak_rss_mib"])
    return {
        "mechanism": mechanism, "dataset": dataset, "users": users, "slots": slots, "epsilon": epsilon,
        "window": window, "max_window": max_window, "data_seed": data_seed,
        "noise": "secure" if insecure_seed is None else f"INSECURE seeded replay (seed {insecure_seed})",
        "warmup": warm,
        "checkpoints": rows,
        "memory": {
            "from_slot": first["slot"], "to_slot": last["slot"],
            "peak_per_interval": memory.per_interval,
            "interval_peak_rss_growth_mib": growth,
            "interval_peak_rss_growth_fraction": growth / first["interval_peak_rss_mib"],
            "run_peak_rss_growth_mib": last["peak_rss_mib"] - first["peak_rss_mib"],
            "rss_growth_mib": None if first["rss_mib"] is None else last["rss_mib"] - first["rss_mib"],
            "mechanism_state_growth_bytes": last["mechanism_state_bytes"] - first["mechanism_state_bytes"],
            "ledger_state_growth_bytes": last["ledger_state_bytes"] - first["ledger_state_bytes"],
            "tolerance": f"interval peak RSS growth <= max({tolerance_mib} MiB, {tolerance_fraction:.0%} of the "
                         f"first) = {allowed:.1f} MiB",
            "flat": bool(growth <= allowed),
        },
        "exactness": {
            "window_checks": exact.checks, "random_slot_checks": random_checks,
            "mismatches": exact.mismatches, "first_mismatches": exact.first_mismatches,
            "ledger_start_below_wrap_epsilon": start_below_wrap,
            "users_whose_ledger_total_wrapped": int(np.count_nonzero(exact.totals >= below)),
            "largest_user_spend_epsilon": float(exact.totals.max()) / UNITS_PER_EPSILON,
            "exact": exact.mismatches == 0,
        },
        "ledger": {"max_window_usage_ratio": ledger.max_usage_ratio, "violations": ledger.violation_count},
        "wall_seconds": time.perf_counter() - began,
    }


def _mib(value: int | None) -> float | None:
    return None if value is None else round(value / MIB, 2)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--slots", type=int, default=100_000)
    parser.add_argument("--mechanism", default="dpbd", choices=sorted(DYNAMIC))
    parser.add_argument("--checkpoints", default="10000,50000,100000",
                        help="comma-separated slots at which to measure and check every user (the last slot "
                             "is always one); memory growth is measured from the first to the last")
    parser.add_argument("--dataset", default="sin", choices=sorted(STREAMS))
    parser.add_argument("--epsilon", type=float, default=0.6, help="static E around which types draw E_k")
    parser.add_argument("--window", type=int, default=200, help="largest requirement window")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the data, requirements and checks")
    parser.add_argument("--insecure-seed", type=int, default=None,
                        help="draw noise from a seeded generator: reproducible, NOT private")
    parser.add_argument("--start-below-wrap", type=float, default=1000.0, metavar="EPSILON",
                        help="start each user's ledger total a random amount in [0, EPSILON) below 2^64 so "
                             "that the uint64 totals wrap during the run (0: start at 0)")
    parser.add_argument("--tolerance-mib", type=float, default=4.0,
                        help="memory is flat if the interval peak RSS grows by at most this many MiB ...")
    parser.add_argument("--tolerance-fraction", type=float, default=0.02,
                        help="... or this fraction of the first interval peak, whichever is larger")
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    args = parser.parse_args(argv)
    try:
        args.checkpoint_slots = [int(c) for c in args.checkpoints.split(",") if c.strip()]
    except ValueError:
        parser.error(f"--checkpoints must be comma-separated integers, got {args.checkpoints!r}")
    if args.users < 1 or args.slots < 1 or args.start_below_wrap < 0:
        parser.error("--users and --slots must be >= 1 and --start-below-wrap >= 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)

    def progress(row: dict) -> None:
        print(f"slot {row['slot']:>7}: rss {row['rss_mib']} MiB, peak since last {row['interval_peak_rss_mib']} MiB, "
              f"{row['cohorts']} cohorts, state {row['mechanism_state_bytes']} B, "
              f"{row['seconds_per_slot']['all'] * 1e3:.2f} ms/slot, "
              f"{row['mismatches_at_checkpoint']} mismatches", file=sys.stderr, flush=True)

    report = soak(users=args.users, slots=args.slots, mechanism=args.mechanism, checkpoints=args.checkpoint_slots,
                  dataset=args.dataset, epsilon=args.epsilon, window=args.window, data_seed=args.data_seed,
                  insecure_seed=args.insecure_seed, start_below_wrap=args.start_below_wrap,
                  tolerance_mib=args.tolerance_mib, tolerance_fraction=args.tolerance_fraction,
                  progress=None if args.json else progress)
    print(json.dumps(report))
    ok = report["memory"]["flat"] and report["exactness"]["exact"] and report["ledger"]["violations"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
