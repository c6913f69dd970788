"""A slow per-user reference of seed 003's client algorithms, written straight from spec ``ipp_app_capp.md``
§3.1-§3.4, §3.6, §3.7 (one user and one slot at a time, plain Python floats and lists).

It shares nothing with the vectorised code but the square wave's integers ``(B, P, Q)`` and the order of the
draws (per slot, one 64-bit draw per user in user order; BA-SW two per user), so with the same seeded
generator both must give identical reports.  The discretised sampler is re-derived here from the square
wave's module doc: the input's grid point ``i``, band cell ``i - B + U // P`` when ``U < 2B·P``, else the
``k = (U - 2BP) // Q``-th cell of the low region counted left to right.
"""

from __future__ import annotations

import numpy as np


def grid_streams(users: int, slots: int, seed: int) -> np.ndarray:
    """Streams on the 16-bit grid: a random walk clipped to [0, 1] (values near both ends occur)."""
    generator = np.random.default_rng(seed)
    walk = np.clip(0.5 + np.cumsum(generator.normal(0, 0.2, (users, slots)), axis=1), 0, 1)
    return np.rint(walk * 65536) / 65536


def sw_report(sw, value: float, draw: int) -> float:
    """One discretised SW report of ``value`` (clipped to [0, 1]) for the 64-bit ``draw``."""
    m, half = sw.steps, sw.half_band
    v = min(max(value, 0.0), 1.0)
    i = int(np.rint(v * m))
    band = 2 * half * sw.keep
    if draw < band:
        cell = i - half + draw // sw.keep
    else:
        k = (draw - band) // sw.other
        cell = k - half if k < i else k + half
    return (cell + 0.5) / m


def draws_for_slot(rng, users: int, per_user: int = 1) -> list[int]:
    return [int(d) for d in rng.uint32(2 * per_user * users).view(np.uint64)]


def on_grid(sw, value: float) -> float:
    return int(np.rint(value * sw.steps)) / sw.steps


def client_reference(values, rng, sw, method: str, memory: int | None, reset: int | None,
                     bounds=(0.0, 1.0, 0.0, 1.0)) -> np.ndarray:
    """SW-direct / IPP / APP / CAPP per user (memory: IPP 1; APP/CAPP ``h``, or None for every deviation)."""
    x = np.asarray(values, np.float64)
    users, slots = x.shape
    low, high, low_in, high_in = bounds
    remembered = [[] for _ in range(users)]  # each user's deviations since the last reset, oldest first
    out = np.empty_like(x)
    for t in range(slots):
        draws = draws_for_slot(rng, users)
        for u in range(users):
            if reset is not None and t % reset == 0:
                remembered[u] = []
            xt = on_grid(sw, float(x[u, t]))
            if method == "sw":
                shift = 0.0
            elif method == "ipp":
                shift = remembered[u][-1] if remembered[u] else 0.0
            else:
                kept = remembered[u] if memory is None else remembered[u][-memory:] if memory else []
                shift = sum(kept)
            z = min(max((xt + shift - low_in) / (high_in - low_in), 0.0), 1.0)
            report = low + (high - low) * sw_report(sw, z, draws[u])
            remembered[u].append(xt - report)  # d_t = x_t - x'_t: original value minus released value (T9)
            out[u, t] = report
    return out


def absorption_reference(values, rng, params) -> tuple[np.ndarray, np.ndarray]:
    """BA-SW per user (spec §3.7.1), 0-based slots; released values and charges in units."""
    x = np.asarray(values, np.float64)
    users, slots = x.shape
    e1 = params.wave(1)
    released = np.empty_like(x)
    charges = np.zeros(x.shape, np.int64)
    pub_val, last_pub, last_shares = [0.0] * users, [0] * users, [1] * users
    for i in range(slots):
        draws = draws_for_slot(rng, users, 2)
        for u in range(users):
            c = float(x[u, i])
            dis_draw, pub_draw = draws[u], draws[users + u]
            if i == 0:
                pub_val[u] = sw_report(e1, c, pub_draw)
                charges[u, i] = e1.realised_units
                released[u, i] = pub_val[u]
                continue
            dis = abs(sw_report(e1, abs(pub_val[u] - c), dis_draw))
            charges[u, i] = e1.realised_units
            to_nullify = last_shares[u] - 1
            if i - last_pub[u] > to_nullify:
                shares = min(i - (last_pub[u] + to_nullify), params.window)
                wave = params.wave(shares)
                if dis > float(wave.b):
                    pub_val[u] = sw_report(wave, c, pub_draw)
                    last_pub[u], last_shares[u] = i, shares
                    charges[u, i] += wave.realised_units
            released[u, i] = pub_val[u]
    return released, charges


def sampling_reference(queries, rng, client_args: dict, samples: int) -> np.ndarray:
    """PP-S per user (spec §3.6): segment means (the last segment takes the leftover), the base client on them,
    the piecewise-constant expansion."""
    x = np.asarray(queries, np.float64)
    n = x.shape[1]
    length = n // samples
    bounds = [(r * length, (r + 1) * length if r < samples - 1 else n) for r in range(samples)]
    means = np.array([[x[u, a:b].sum() / (b - a) for a, b in bounds] for u in range(x.shape[0])])
    reports = client_reference(means, rng, **client_args)
    expanded = np.empty_like(x)
    for r, (a, b) in enumerate(bounds):
        expanded[:, a:b] = reports[:, r:r + 1]
    return expanded
