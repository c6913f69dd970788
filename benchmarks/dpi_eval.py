"""DPI against its baselines on synthetic streams (spec §2.12, §4.1, §4.6): does it beat releasing uniform?

    python -m benchmarks.dpi_eval --slots 300 --json

Streams (``--users`` reports per slot over ``--bins`` bins): **synthetic A**
(spec §4.1: each slot's counts ~ N(100, σ²), σ drawn from 1..10 per slot,
clipped at 0; users are drawn from the normalised counts) and **zipf** (a
Zipf(1.5) distribution: the skewed stress test the paper lacks).  For each
ε, the accumulative query (truth = PDF of every slot so far) is answered by
``dpi`` (the paper's loop; Algorithm 4's ranges, so that ε matters),
``dpi-sound`` (same RBA), **uniform** (data-independent) and **exact** (not
private).  Reported per method: mean per-bin MSE and mean KL(true || released)
over the slots (spec §4.2, smoothed KL), and for the DPI variants the charged
ε at the end and the slot at which ``dpi`` stopped (its sound figure reached ε).
Seeded (``--seed``): the numbers are reproducible, the releases NOT private.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from transforms.mechanisms import (
    LifetimeRequirements,
    ReleaseKind,
    SlotBatch,
    make_mechanism,
)
from transforms.mechanisms.dpi.theory import kl_divergence, pdf_mse
from transforms.mechanisms.noise import insecure_seeded_randomness


def stream_values(kind: str, users: int, bins: int, slots: int, gen: np.random.Generator) -> list[np.ndarray]:
    """Each slot's reported bins (one per user)."""
    if kind == "zipf":
        weights = np.arange(1, bins + 1, dtype=float) ** -1.5
        return [gen.choice(bins, users, p=weights / weights.sum()) for _ in range(slots)]
    values = []
    for _ in range(slots):
        counts = np.clip(gen.normal(100, gen.integers(1, 11), bins), 0, None)
        values.append(gen.choice(bins, users, p=counts / counts.sum()))
    return values


def evaluate(kind: str, epsilon: float, users: int, bins: int, slots: int, pool: int, seed: int) -> dict:
    gen = np.random.default_rng(seed)
    values = stream_values(kind, users, bins, slots, gen)
    truths, cumulative = [], np.zeros(bins)
    for v in values:
        cumulative += np.bincount(v, minlength=bins)
        truths.append(cumulative / cumulative.sum())
    uniform = np.full(bins, 1 / bins)
    result = {"uniform": {"mse": float(np.mean([pdf_mse(uniform, t) for t in truths])),
                          "kl": float(np.mean([kl_divergence(t, uniform) for t in truths]))},
              "exact": {"mse": 0.0, "kl": 0.0}}
    for name in ("dpi", "dpi-sound"):
        mechanism = make_mechanism(name, bins=bins, epsilon=epsilon, pool_size=pool, rba="ranges")
        rng, releases = insecure_seeded_randomness(seed), []
        for t, v in enumerate(values):
            requirements = LifetimeRequirements.of(np.full(users, epsilon)) if t == 0 else None
            releases.append(mechanism.step(SlotBatch.of(range(users), v, requirements), rng))
        stopped = next((r.slot for r in releases if r.kind is ReleaseKind.SKIPPED), None)
        result[name] = {"mse": float(np.mean([pdf_mse(r.values, t) for r, t in zip(releases, truths)])),
                        "kl": float(np.mean([kl_divergence(t, r.values) for r, t in zip(releases, truths)])),
                        "eps_charged": releases[-1].figures["eps_charged_total"],
                        "eps_claimed": releases[-1].figures["eps_claimed"], "stopped_at_slot": stopped}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dpi_eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--bins", type=int, default=100)
    parser.add_argument("--slots", type=int, default=300)
    parser.add_argument("--pool", type=int, default=2000, help="pool size N")
    parser.add_argument("--epsilons", default="0.5,2,10")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    args = parser.parse_args(argv)
    try:
        epsilons = [float(e) for e in args.epsilons.split(",")]
    except ValueError:
        parser.error(f"--epsilons must be numbers separated by commas, got {args.epsilons!r}")
    if min(args.users, args.bins, args.slots, args.pool) < 1:
        parser.error("--users, --bins, --slots and --pool must be at least 1")
    results = {kind: {str(e): evaluate(kind, e, args.users, args.bins, args.slots, args.pool, args.seed)
                      for e in epsilons} for kind in ("synthetic_a", "zipf")}
    output = {"users": args.users, "bins": args.bins, "slots": args.slots, "pool": args.pool, "results": results}
    print(json.dumps(output) if args.json else json.dumps(output, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
