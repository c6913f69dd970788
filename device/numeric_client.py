"""The device side of the numeric local-DP streams (seed 003): :class:`NumericClient`, standard library only.

Embedded beside ``wevent_client.py`` (whose :class:`~wevent_client.SquareWave`,
:class:`~wevent_client.WEventClient` budget bookkeeping and refusals it uses):
either both files inside a package (``device.numeric_client``) or both as
top-level modules in one folder (``numeric_client``); see ``device/README.md``.
Every report spends an exact whole number of budget units, in slot order (public
schedules), and a refusal never holds the user's value.
"""

from __future__ import annotations

import json
import math
import secrets

try:  # inside the device package
    from .wevent_client import UNITS_PER_EPSILON, RequestRefused, SquareWave, WEventClient, units_to_decimal_string
except ImportError:  # the two files embedded as top-level modules side by side
    from wevent_client import (UNITS_PER_EPSILON, RequestRefused, SquareWave,  # type: ignore[no-redef]
                               WEventClient, units_to_decimal_string)


NUMERIC_METHODS = {"sw-direct": 0, "ipp": 1, "app": None, "capp": None}
"""The per-slot client methods and their fixed deviation memory (None: ``memory``, default ``window``)."""
SAMPLED_METHODS = {"pp-s": 1, "app-s": None, "capp-s": None, "sampling": 0}
"""The sampling methods (a segment's mean per report) and their memory in samples (None: ``memory``, default
``ceil(window/segment)``)."""
BASELINE_METHODS = ("ba-sw", "topl")
DEVICE_NUMERIC_METHODS = (*NUMERIC_METHODS, *SAMPLED_METHODS, *BASELINE_METHODS)


def capp_delta(epsilon: float) -> float:
    """CAPP's clip parameter ``δ = e_s - e_d`` at the per-report budget (the collector's formula, spec Eq. 11),
    from the continuous Square Wave's ``(b, p, q)``: the same float operations as the collector's core."""
    em1 = math.expm1(epsilon)
    big = em1 + 1
    b = 0.5 - epsilon / 3 if epsilon < 1e-4 else (epsilon * big - em1) / (2 * big * (em1 - epsilon))
    p, q = big / (2 * b * big + 1), 1 / (2 * b * big + 1)
    mean_at_one = q * (1 + 2 * b) / 2 + 2 * b * (p - q) * 1
    variance = 2 * b**3 * p / 3 - b**2 * q**2 + b**2 * q - b * q**2 + b * q - q**2 / 4 + q / 3
    return math.expm1(1 - mean_at_one) - math.sqrt(variance)


class NumericClient:
    """One user's numeric stream on the device (seed 003), every method under the strict budget.

    * SW-direct, IPP, APP, CAPP: the device remembers at most ``h`` of its own past deviations (a ring; SW-direct
      0, IPP 1, APP/CAPP ``memory``, default ``window``), so a report depends on the values of its last ``h + 1``
      slots, and each report spends ``budget/(window + h)`` (rounded down to budget units): a change within
      ``window`` slots moves at most ``window + h`` reports (trap T1: unbounded memory is not offered here).
    * PP-S, APP-S, CAPP-S, Sampling: the values of each segment of ``segment`` slots (public, aligned on the slot
      numbers: ``kL .. kL + L - 1``) are averaged and the mean goes through the base client (IPP, APP, CAPP, plain
      SW; memory in samples) at the segment's last slot, at ``budget/(n_w + h)`` with ``n_w = ceil((w-1)/L) + 1``
      (the strict count of trap T3).  :meth:`report` returns None until a segment's last slot; :meth:`close`
      reports an open segment whose last slot has passed without a value.
    * BA-SW: every slot a dissimilarity report at ``e1 = budget/(2w)`` and, when the public rule says so (the
      dissimilarity report above the half-band of the absorbed budget, outside the nullified slots), a
      publication at ``k·e1``; the report carries ``[dissimilarity cell]``, ``[dissimilarity cell, publication
      cell]`` or, at the first slot, ``[publication cell]``.
    * ToPL: the Piecewise Mechanism's cell at ``budget/w`` (PM is a square wave with PM's half-band).

    CAPP's output bounds ``[δ, 1 - δ]`` (input ``[min(δ,0), max(1-δ,1)]``, the reference code's) use the public
    ``δ`` of :func:`capp_delta` on the grid.  Reports are output cells (integers; :meth:`report_value`), each drawn
    with one 64-bit integer (BA-SW two per slot); the same integers, draws and exact dyadic arithmetic as the
    collector's core, so a recorded report stream can be checked and replayed.  Every schedule is public: which
    slots report, at which budget, follows from the public parameters and the reports already sent.  The window
    budget is kept by a :class:`WEventClient` (its bookkeeping refuses what the budget cannot pay).
    """

    def __init__(self, user: str, method: str, window: int, budget: str, low: float, high: float, *,
                 memory: int | None = None, segment: int | None = None, grid_bits: int = 16,
                 randbits=secrets.randbits):
        if method not in DEVICE_NUMERIC_METHODS:
            raise ValueError(f"method must be one of {DEVICE_NUMERIC_METHODS}, got {method!r}")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (low, high)) \
                or not low < high:
            raise ValueError(f"a numeric stream needs finite low < high, got {low!r}, {high!r}")
        self.budget = WEventClient(user, window, budget, None, randbits=randbits)
        sampled = method in SAMPLED_METHODS
        if sampled and (type(segment) is not int or segment < 1):
            raise ValueError(f"{method} needs its public segment length: an int >= 1, got {segment!r}")
        if not sampled and segment is not None:
            raise ValueError(f"segment is the sampling methods' ({', '.join(SAMPLED_METHODS)})")
        fixed = {**NUMERIC_METHODS, **SAMPLED_METHODS, "ba-sw": 0, "topl": 0}[method]
        if fixed is not None and memory not in (None, fixed):
            raise ValueError(f"{method} remembers {fixed} deviation(s): memory does not apply")
        if memory is not None and (type(memory) is not int or memory < 1):
            raise ValueError(f"memory must be an int >= 1, got {memory!r}")
        self.method, self.low, self.high, self.segment = method, float(low), float(high), segment
        default = -(-window // segment) if sampled else window
        self.memory = fixed if fixed is not None else (default if memory is None else memory)
        if sampled:
            divisor = min(window, -(-(window - 1) // segment) + 1) + self.memory
        else:
            divisor = {"ba-sw": 2 * window, "topl": window}.get(method, window + self.memory)
        self.report_units = self.budget.budget_units // divisor
        if self.report_units < 1:
            raise ValueError(f"budget {budget} is too small to split over {divisor} reports")
        self.wave = SquareWave(self.report_units, grid_bits, piecewise=method == "topl")
        self.bounds = (0.0, 1.0, 0.0, 1.0)
        if method in ("capp", "capp-s"):
            steps = self.wave.steps
            delta = round(capp_delta(self.report_units / UNITS_PER_EPSILON) * steps) / steps
            if not delta < 0.5:
                raise ValueError(f"CAPP's delta {delta} leaves no output interval")
            self.bounds = (delta, 1 - delta, min(delta, 0.0), max(1 - delta, 1.0))
        self._randbits = randbits
        self.deviations = [0.0] * self.memory
        self.accumulated = 0.0
        self.age = 0
        self.last_slot: int | None = None
        self.open = [-1, 0.0, 0]  # the sampling methods' open segment: index, sum of grid values, count
        self.absorption = [0.0, -1, 1]  # BA-SW: last publication, its step (-1: none), its shares

    def report_value(self, cell: int) -> float:
        """A report cell's value in ``[0, 1]`` units of the interval (CAPP's mapped to its output bounds)."""
        low, high, _, _ = self.bounds
        v = self.wave.cell_value(cell)
        return low + (high - low) * v if self.bounds != (0.0, 1.0, 0.0, 1.0) else v

    def report(self, stream: str, slot: int, value: float, clip: bool = True) -> dict | None:
        """This slot's report of ``value`` (a number in ``[low, high]``; clipped by default), or None when a
        sampling method's segment goes on; raises :class:`RequestRefused` for a slot not after the last one, a
        window the budget cannot pay, or (sampling methods) a value after a segment left open (:meth:`close`)."""
        if type(slot) is not int or slot < 0:
            raise RequestRefused("invalid", f"slot must be an int >= 0, got {slot!r}")
        if self.last_slot is not None and slot <= self.last_slot:
            raise RequestRefused("duplicate" if slot == self.last_slot else "stale",
                                 f"slot {slot} is not after the last reported slot {self.last_slot}")
        try:
            index = self.wave.grid_index(value, self.low, self.high, clip)
        except ValueError as error:
            raise RequestRefused("invalid", str(error)) from None
        x = index / self.wave.steps
        if self.segment is not None:
            return self._add_to_segment(stream, slot, x)
        if self.method == "ba-sw":
            return self._absorb(stream, slot, x)
        self._pay(slot, self.wave.realised_units)
        cell = self.wave.cell(index, self._randbits(64)) if self.method == "topl" else self._client_cell(x)
        return self._sent(stream, slot, [cell], self.report_units, self.wave.realised_units)

    def close(self, stream: str, slot: int) -> dict | None:
        """The sampling methods: the report of the open segment if its last slot is at most ``slot`` (the device
        held no value at that slot), else None."""
        seg, total, count = self.open
        if self.segment is None or not count or (seg + 1) * self.segment - 1 > slot:
            return None
        end = (seg + 1) * self.segment - 1
        self._pay(end, self.wave.realised_units)
        mean = total / count  # exact sum of dyadic rationals, one rounding: the collector's
        cell = self._client_cell(round(min(max(mean, 0.0), 1.0) * self.wave.steps) / self.wave.steps)
        self.open = [-1, 0.0, 0]
        return self._sent(stream, end, [cell], self.report_units, self.wave.realised_units)

    def _add_to_segment(self, stream: str, slot: int, x: float) -> dict | None:
        seg, total, count = self.open
        k = slot // self.segment
        if count and k != seg:
            raise RequestRefused("order", f"segment {seg} (slots {seg * self.segment}..{(seg + 1) * self.segment - 1})"
                                 f" is still open: close(stream, {(seg + 1) * self.segment - 1}) first")
        self.open = [k, total + x, count + 1]
        self.last_slot = slot
        return self.close(stream, slot)

    def _pay(self, slot: int, charge: int) -> None:
        self.budget.check_slot(slot, self.method)
        self.budget.check_budget(slot, charge)

    def _sent(self, stream: str, slot: int, cells: list, units: int, realised: int) -> dict:
        self.budget.record_charge(slot, self.method, realised)
        self.last_slot = slot
        return {"stream": stream, "user": self.budget.user, "slot": slot, "method": self.method, "oracle": "sw",
                "epsilon": units_to_decimal_string(units), "realised_epsilon": units_to_decimal_string(realised),
                "domain_size": 1, "report": cells}

    def _client_cell(self, x: float) -> int:
        """One report of grid value ``x`` through the client (deviation memory, CAPP's bounds): its cell."""
        low_in, high_in = self.bounds[2:]
        shifted = x + self.accumulated if self.memory else x
        scaled = self.bounds != (0.0, 1.0, 0.0, 1.0)
        cell = self.wave.perturb((shifted - low_in) / (high_in - low_in) if scaled else shifted, clip=True,
                                 randbits=self._randbits)
        if self.memory:
            oldest = self.age % self.memory
            deviation = x - self.report_value(cell)
            self.accumulated += deviation - self.deviations[oldest]  # exact: dyadic rationals
            self.deviations[oldest] = deviation
        self.age += 1
        return cell

    def _absorb(self, stream: str, slot: int, x: float) -> dict:
        """BA-SW's step (the collector's ``absorption_step`` for one user): two 64-bit draws, always."""
        published, last, shares = self.absorption
        first, e1 = last < 0, self.wave
        dissimilarity_draw, publication_draw = self._randbits(64), self._randbits(64)
        cell = e1.cell(e1.grid_index(abs(published - x), clip=True), dissimilarity_draw)
        nullified = not first and self.age - last <= shares - 1
        k = 1 if first else min(max(self.age - (last + shares - 1), 1), self.budget.window)
        wave = SquareWave(k * self.report_units, e1.steps.bit_length() - 1)
        publish = not nullified and (first or abs(e1.cell_value(cell)) > wave.half_band / wave.steps)
        cells = [] if first else [cell]
        units, realised = (0, 0) if first else (self.report_units, e1.realised_units)
        if publish:
            cells.append(wave.cell(wave.grid_index(x, clip=True), publication_draw))
            units, realised = units + k * self.report_units, realised + wave.realised_units
        self._pay(slot, realised)
        if publish:
            self.absorption = [wave.cell_value(cells[-1]), self.age, k]
        self.age += 1
        return self._sent(stream, slot, cells, units, realised)

    def state(self) -> str:
        """The client as JSON: the budget bookkeeping, the deviation ring and ``D``, the open segment, BA-SW's last
        publication (floats exact, as hex)."""
        return json.dumps({"method": self.method, "low": self.low.hex(), "high": self.high.hex(),
                           "memory": self.memory, "segment": self.segment,
                           "grid_bits": self.wave.steps.bit_length() - 1,
                           "budget": json.loads(self.budget.state()), "age": self.age, "last_slot": self.last_slot,
                           "deviations": [d.hex() for d in self.deviations], "accumulated": self.accumulated.hex(),
                           "open": [self.open[0], self.open[1].hex(), self.open[2]],
                           "absorption": [self.absorption[0].hex(), *self.absorption[1:]]})

    @classmethod
    def from_state(cls, text: str, *, randbits=secrets.randbits) -> NumericClient:
        """A client continuing the state saved by :meth:`state`."""
        data = json.loads(text)
        budget, method = data["budget"], data["method"]
        fixed = {**NUMERIC_METHODS, **SAMPLED_METHODS}.get(method, 0)
        client = cls(budget["user"], method, budget["window"], budget["budget"], float.fromhex(data["low"]),
                     float.fromhex(data["high"]), memory=data["memory"] if fixed is None else None,
                     segment=data.get("segment"), grid_bits=data["grid_bits"], randbits=randbits)
        client.budget = WEventClient.from_state(json.dumps(budget), None, randbits=randbits)
        client.deviations = [float.fromhex(d) for d in data["deviations"]]
        client.accumulated = float.fromhex(data["accumulated"])
        client.age, client.last_slot = data["age"], data["last_slot"]
        if "open" in data:  # states saved before the sampling methods have none
            client.open = [data["open"][0], float.fromhex(data["open"][1]), data["open"][2]]
            client.absorption = [float.fromhex(data["absorption"][0]), *data["absorption"][1:]]
        return client
