"""The privacy audit of spec TV10: DPI's paper variant loses more than it claims, the sound variant does not.

    python -m benchmarks.dpi_audit --slots 1000 --json

TV10's set-up (spec §2.10.1): domain k = 2, pool {(.5,.5), (1,0)}, λ = μ = 0.1,
every distribution updated, a constant slot budget of 0.002 (0.001 for the
synopsis distribution: α = 1.25e-5).  Stream D has slot histogram (2, 1),
its neighbour D' lacks the user who adds a record of item 0 every slot (1, 1).

Both real mechanisms run on both streams.  Before each slot the script reads
the law of that slot's draw from the mechanism itself (the paper variant's
softmax of its log-weights; the sound variant's exponential mechanism from
the exact distances of :mod:`transforms.mechanisms.dpi.exponential`); draws are
independent given those laws, so the largest log-likelihood ratio over all
transcripts is exactly the sum over slots of each slot's largest per-draw
log-ratio, times r.  That is compared with what each variant claims and
charges.  The script also samples ``--samples`` transcripts of D and reports
their privacy-loss random variable (its mean is the KL divergence).

Prints one JSON object: per variant and r, the worst-case loss, the sampled
losses, ``eps_claimed`` and ``eps_sound_upper`` (the paper's synopsis share of
the claim is half of ``eps_claimed``).
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from transforms.mechanisms import LifetimeRequirements, SlotBatch, make_mechanism
from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.dpi.exponential import SENSITIVITY, l1_numerators_of_matrix
from transforms.mechanisms.noise import insecure_seeded_randomness

POOL = np.array([[1, 1], [2, 0]], np.uint16)
"""TV10's pool {(.5,.5), (1,0)} as counts over n_units = 2."""
SLOT_UNITS = 2 * UNITS_PER_EPSILON // 1000
STREAMS = {"D": (2, 1), "D'": (1, 1)}


class ConstantRBA:
    """TV10's constant slot budget (no series: the counterexample fixes ε_t)."""

    def __init__(self, units: int):
        self.units, self.rng = units, None

    def next(self) -> tuple[int, int]:
        return 1, self.units

    def state(self) -> dict:
        return {}


def tv10_mechanism(name: str, epsilon: float = 1000.0):
    """``name`` on TV10's set-up (a large lifetime budget so that nothing stops it; ζ only sizes the series)."""
    mechanism = make_mechanism(name, bins=2, epsilon=epsilon, lam=0.1, mu=0.1, zeta=0.01, pool_size=2, draws=1,
                               n_units=2, update="all", pool_cache_mb=1)
    mechanism._matrix = POOL  # TV10's two-entry pool in place of the seeded one (read through the cache)
    mechanism.rba = ConstantRBA(SLOT_UNITS)
    return mechanism


def draw_law(mechanism, histogram: np.ndarray) -> np.ndarray:
    """The law of the next slot's draw over the pool, read from the mechanism before it steps."""
    if mechanism.name == "dpi":
        weights = mechanism.weights[0]
        law = np.exp(weights - weights.max())
        return law / law.sum()
    per_draw = SLOT_UNITS // mechanism.params.draws
    numerators, denominator = l1_numerators_of_matrix(mechanism.cumulative + histogram, POOL, 2)
    exponent = -per_draw / UNITS_PER_EPSILON * (np.array(numerators) - min(numerators)) / (2 * SENSITIVITY
                                                                                          * denominator)
    law = np.exp(exponent)
    return law / law.sum()


def run_stream(name: str, counts: tuple[int, int], slots: int):
    """Each slot's draw law under the stream with slot histogram ``counts``, and the last release."""
    mechanism, rng = tv10_mechanism(name), insecure_seeded_randomness(0)
    users, values = np.arange(sum(counts)), np.repeat([0, 1], counts)
    laws, release = [], None
    for t in range(slots):
        laws.append(draw_law(mechanism, np.array(counts)))
        requirements = LifetimeRequirements.of(np.full(users.size, 1000.0)) if t == 0 else None
        release = mechanism.step(SlotBatch.of(users, values, requirements), rng)
    return np.array(laws), release


def audit(name: str, slots: int, samples: int, seed: int = 0) -> dict:
    """The worst-case and sampled losses of ``name`` on TV10, beside what it claims and charges (r = 1)."""
    (laws_d, release), (laws_d2, _) = (run_stream(name, counts, slots) for counts in STREAMS.values())
    ratios = np.log(laws_d / laws_d2)  # slots x pool
    worst = float(np.abs(ratios).max(axis=1).sum())
    gen = np.random.default_rng(seed)
    drawn = (gen.random((samples, slots)) > laws_d[:, 0]).astype(int)  # pool index per slot, drawn under D
    losses = ratios[np.arange(slots), drawn].sum(axis=1)
    return {"worst_case_loss": worst, "sampled_loss_mean": float(losses.mean()),
            "sampled_loss_max": float(losses.max()), "eps_claimed": release.figures["eps_claimed"],
            "eps_sound_upper": release.figures["eps_sound_upper"],
            "exceeds_claim": worst > release.figures["eps_claimed"] / (2 if name == "dpi" else 1),
            "within_charge": worst <= release.figures["eps_sound_upper"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dpi_audit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=2000, help="transcripts of D sampled for the loss variable")
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    args = parser.parse_args(argv)
    if args.slots < 1 or args.samples < 1:
        parser.error("--slots and --samples must be at least 1")
    result = {"slots": args.slots, "variants": {name: audit(name, args.slots, args.samples)
                                                for name in ("dpi", "dpi-sound")}}
    result["variants"]["dpi"]["worst_case_loss_r20"] = 20 * result["variants"]["dpi"]["worst_case_loss"]
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
