"""Spec ``ldp_ids.md`` §7 test vectors against the fast LDP-IDS methods and the per-user reference.

TV-4 (LBD/LBA traces) and TV-5 (LPD/LPA traces, with the pool sizes) fix the
dissimilarity sequence: subclasses of the fast mechanisms override
``dissimilarity(...)`` to return it (the reference takes it as
``dis_override``), so budgets, populations, errors and decisions are
deterministic.  TV-3 (Eq. 3), TV-6/TV-7 (Eqs. 6-9, Theorem 5.1) and TV-8
(LPD's first step at the paper's scale) check V and the first decision;
TV-12 checks the communication of LBU, LPU and LSP (``last_bits``, the §6.3
convention) against the predicted bits per user per slot.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from reference_ldp_ids import DIS, PUB, Reference

from transforms.mechanisms import FixedRequirements, SlotBatch, make_mechanism
from transforms.mechanisms.ldp import ldp_variance
from transforms.mechanisms.ldp.budget_division import LBA, LBD
from transforms.mechanisms.ldp.population_division import LPA, LPD
from transforms.mechanisms.ldp.stream import LocalParams
from transforms.mechanisms.noise import insecure_seeded_randomness

UNITS = 10**12
PUB_, APX, NUL = "fresh", "skipped", "nullified"  # the spec tables' decisions as release kinds


def injected(cls, dissimilarities):
    """``cls`` with Eq. (3) replaced by the given sequence (slot t gets ``dissimilarities[t-1]``)."""

    class Injected(cls):
        def dissimilarity(self, estimate, units, reporters):
            return dissimilarities[self.slot - 1]

    return Injected


def everyone(n: int, window: int, epsilon: str) -> SlotBatch:
    """All ``n`` users report (values alternate 0/1), declaring the mechanism's own ``(w, ε)``."""
    reqs = FixedRequirements(np.full(n, window, np.int64), np.full(n, int(Fraction(epsilon) * UNITS), np.int64))
    return SlotBatch.of(range(n), np.arange(n) % 2, reqs)


def run_traced(mechanism, n: int, window: int, slots: int, observe=lambda mechanism, t: None):
    """Step ``mechanism`` with everyone present; per slot the release, the ``(part, reporters, units)`` of each
    batch of reports, LBA/LPA's ``t_N`` before the slot and what ``observe(mechanism, t)`` says after it."""
    asked = []
    simulate = mechanism.simulate

    def recording(reports, holders, rng):
        asked.append((reports.part, reports.users.size, reports.oracle.epsilon_units))
        return simulate(reports, holders, rng)

    mechanism.simulate = recording
    rng = insecure_seeded_randomness(4)
    batch = everyone(n, window, "1")
    out = []
    for t in range(1, slots + 1):
        del asked[:]
        t_n = getattr(mechanism, "units_absorbed", 0) - 1  # l + t_N - l: the nullified slots after l
        release = mechanism.step(batch, rng)
        out.append((release, list(asked), t_n, observe(mechanism, t)))
    return out


def run_reference(method: str, n: int, window: int, dissimilarities, slots: int):
    reference = Reference(method, 2, "1", window, simulation="aggregate",
                          dis_override=lambda t: dissimilarities[t - 1])
    rng = insecure_seeded_randomness(4)
    rows = [(u, u % 2, None) for u in range(n)]
    return [reference.step(rows, rng) for _ in range(slots)]


def units(value) -> int:
    exact = Fraction(value) * UNITS
    assert exact.denominator == 1
    return int(exact)


# ------------------------------------------------------------------ TV-4
TV4_DIS = [0.05, 0.004, 0.001, 0.02, 0.0005, 0.02, 0.02, 0.02, 0.0001, 0.01]
# t: (ε_rm, ε_{t,2}, err, decision); ε_rm and ε_{t,2} exact (the table rounds 7/128 and 19/128 to 6 digits)
TV4_LBD = [
    ("1/2", "1/4", 1.5917e-03, PUB_), ("1/4", "1/8", 6.3917e-03, APX), ("1/4", "1/8", 6.3917e-03, APX),
    ("1/4", "1/8", 6.3917e-03, PUB_), ("3/8", "3/16", 2.8361e-03, APX), ("3/8", "3/16", 2.8361e-03, PUB_),
    ("3/16", "3/32", 1.1369e-02, PUB_), ("7/32", "7/64", 8.3509e-03, PUB_), ("7/64", "7/128", 3.3428e-02, APX),
    ("19/64", "19/128", 4.5302e-03, PUB_),
]
# t: (t_N, t_A or None, ε_{t,2} or None, err or None, decision); unit = 1/8
TV4_LBA = [
    (-1, 2, "1/4", 1.5917e-03, PUB_), (1, None, None, None, NUL), (1, 1, "1/8", 6.3917e-03, APX),
    (1, 2, "1/4", 1.5917e-03, PUB_), (1, None, None, None, NUL), (1, 1, "1/8", 6.3917e-03, PUB_),
    (0, 1, "1/8", 6.3917e-03, PUB_), (0, 1, "1/8", 6.3917e-03, PUB_), (0, 1, "1/8", 6.3917e-03, APX),
    (0, 2, "1/4", 1.5917e-03, PUB_),
]
N_TV = 10000


def test_tv4_lbd_trace():
    params = LocalParams(bins=2, epsilon=1.0, window=4, beta=0.5, simulation="aggregate")
    fast = run_traced(injected(LBD, TV4_DIS)(params), N_TV, 4, 10)
    reference = run_reference("lbd", N_TV, 4, TV4_DIS, 10)
    assert ldp_variance(0.125, 2, N_TV) == pytest.approx(6.3917e-3, rel=1e-4)
    for t, ((eps_rm, eps_t2, err, decision), (release, asked, _, _), ref) in enumerate(
            zip(TV4_LBD, fast, reference), 1):
        assert (ref.trace["eps_rm"], ref.trace["eps_t2"]) == (units(eps_rm), units(eps_t2)), t
        assert ref.trace["err"] == pytest.approx(err, rel=1e-4) and ref.kind == decision, t
        assert release.kind.value == decision, t
        assert release.predicted_error == pytest.approx(err, rel=1e-4), t
        expected = [(DIS, N_TV, units("1/8"))] + ([(PUB, N_TV, units(eps_t2))] if decision == PUB_ else [])
        assert asked == expected, t  # every user reports to M1 every slot, and again (T12) when publishing
        assert release.epsilon_units == (units(eps_t2) if decision == PUB_ else 0), t


def test_tv4_lba_trace():
    params = LocalParams(bins=2, epsilon=1.0, window=4, beta=0.5, simulation="aggregate")
    fast = run_traced(injected(LBA, TV4_DIS)(params), N_TV, 4, 10)
    reference = run_reference("lba", N_TV, 4, TV4_DIS, 10)
    for t, ((t_n, t_a, eps_t2, err, decision), (release, asked, t_n_fast, _), ref) in enumerate(
            zip(TV4_LBA, fast, reference), 1):
        assert ref.kind == release.kind.value == decision, t
        assert ref.trace["t_N"] == t_n_fast == t_n, t
        assert asked[0] == (DIS, N_TV, units("1/8")), t  # M1 runs at nullified slots too (T7)
        if decision == NUL:
            assert len(asked) == 1 and math.isinf(release.predicted_error), t
            continue
        assert (ref.trace["t_A"], ref.trace["eps_t2"]) == (t_a, units(eps_t2)), t
        assert ref.trace["err"] == pytest.approx(err, rel=1e-4), t
        assert release.predicted_error == pytest.approx(err, rel=1e-4), t
        assert asked[1:] == ([(PUB, N_TV, units(eps_t2))] if decision == PUB_ else []), t


# ------------------------------------------------------------------ TV-5
TV5_DIS = [0.0100, 0.0010, 0.0002, 0.0050, 0.00005, 0.0030, 0.0030, 0.0030, 0.00001, 0.0009]
# t: (n_rm, n_pp, err, decision, |U_{t,2}|, |U_A| after sampling, |U_A| after recycling)
TV5_LPD = [
    (5000, 2500, 3.6827e-04, PUB_, 2500, 6250, 6250), (2500, 1250, 7.3654e-04, PUB_, 1250, 3750, 3750),
    (1250, 625, 1.4731e-03, APX, 0, 2500, 2500), (1250, 625, 1.4731e-03, PUB_, 625, 625, 4375),
    (3125, 1562, 5.8942e-04, APX, 0, 3125, 5625), (4375, 2187, 4.2098e-04, PUB_, 2187, 2188, 3438),
    (2188, 1094, 8.4157e-04, PUB_, 1094, 1094, 2969), (1719, 859, 1.0718e-03, PUB_, 859, 860, 2110),
    (860, 430, 2.1411e-03, APX, 0, 860, 4297), (3047, 1523, 6.0451e-04, PUB_, 1523, 1524, 3868),
]
# t: (t_N, t_A or None, n_pp or None, err or None, decision, |U_{t,2}|, |U_A| after sampling)
TV5_LPA = [
    (-1, 2, 2500, 3.6827e-04, PUB_, 2500, 6250), (1, None, None, None, NUL, 0, 5000),
    (1, 1, 1250, 7.3654e-04, APX, 0, 3750), (1, 2, 2500, 3.6827e-04, PUB_, 2500, 0),
    (1, None, None, None, NUL, 0, 2500), (1, 1, 1250, 7.3654e-04, PUB_, 1250, 1250),
    (0, 1, 1250, 7.3654e-04, PUB_, 1250, 0), (0, 1, 1250, 7.3654e-04, PUB_, 1250, 1250),
    (0, 1, 1250, 7.3654e-04, APX, 0, 1250), (0, 2, 2500, 3.6827e-04, PUB_, 2500, 0),
]


def pool_sizes(mechanism, t: int, n: int, window: int) -> tuple[int, int]:
    """|U_A| of the fast mechanism after slot ``t``'s sampling and after its recycling (from each user's last
    report: available at ``s`` iff never used or last used at ``s - w`` or earlier)."""
    last = mechanism.last_report[:n]
    return (int(np.count_nonzero((last == 0) | (last <= t - window))),
            int(np.count_nonzero((last == 0) | (last <= t + 1 - window))))


def publications(published: int) -> list:
    """The reports of a TV-5 slot: 1250 M1 users, then the publication users if any, all with ε = 1."""
    return [(DIS, 1250, UNITS)] + ([(PUB, published, UNITS)] if published else [])


def test_tv5_lpd_trace():
    mechanism = injected(LPD, TV5_DIS)(LocalParams(bins=2, epsilon=1.0, window=4, simulation="aggregate"))
    fast = run_traced(mechanism, N_TV, 4, 10, lambda m, t: pool_sizes(m, t, N_TV, 4))
    reference = run_reference("lpd", N_TV, 4, TV5_DIS, 10)
    for t, ((n_rm, n_pp, err, decision, published, *pool), (release, asked, _, fast_pool), ref) in enumerate(
            zip(TV5_LPD, fast, reference), 1):
        assert ref.trace["n1"] == 1250 and (ref.trace["n_rm"], ref.trace["n_pp"]) == (n_rm, n_pp), t
        assert ref.trace["err"] == pytest.approx(err, rel=1e-4) and ref.kind == decision, t
        assert [ref.trace["U_A_after_sampling"], ref.trace["U_A_after_recycling"]] == pool == list(fast_pool), t
        assert release.kind.value == decision and release.predicted_error == pytest.approx(err, rel=1e-4), t
        assert asked == publications(published), t


def test_tv5_lpa_trace():
    mechanism = injected(LPA, TV5_DIS)(LocalParams(bins=2, epsilon=1.0, window=4, simulation="aggregate"))
    fast = run_traced(mechanism, N_TV, 4, 10, lambda m, t: pool_sizes(m, t, N_TV, 4)[0])
    reference = run_reference("lpa", N_TV, 4, TV5_DIS, 10)
    for t, ((t_n, t_a, n_pp, err, decision, published, pool), (release, asked, t_n_fast, fast_pool), ref) in \
            enumerate(zip(TV5_LPA, fast, reference), 1):
        assert ref.kind == release.kind.value == decision, t
        assert ref.trace["t_N"] == t_n_fast == t_n, t
        assert ref.trace["U_A_after_sampling"] == fast_pool == pool, t
        assert asked == publications(published), t
        if decision != NUL:
            assert (ref.trace["t_A"], ref.trace["n_pp"]) == (t_a, n_pp), t
            assert ref.trace["err"] == pytest.approx(err, rel=1e-4), t
            assert release.predicted_error == pytest.approx(err, rel=1e-4), t


# ------------------------------------------------------------------ TV-3, TV-6, TV-7, TV-8
@pytest.mark.parametrize("d, n1, estimate, previous, mode, expected", [
    (2, 5000, [0.9, 0.1], [0.95, 0.05], "exact", 2.3158653e-3),
    (5, 1000, [0.30, 0.25, 0.20, 0.15, 0.10], [0.2] * 5, "exact", 2.7140497e-3),
    (5, 1000, [0.30, 0.25, 0.20, 0.15, 0.10], [0.2] * 5, "paper_printed", 1.3173056e-3),
])
def test_tv3_dissimilarity(d, n1, estimate, previous, mode, expected):
    mechanism = make_mechanism("lbd", bins=d, epsilon=1.0, window=4, grr_variance=mode)
    mechanism.last_estimate = np.array(previous)
    assert mechanism.dissimilarity(np.array(estimate), UNITS, n1) == pytest.approx(expected, rel=1e-6)
    reference = Reference("lpd", d, "1", 4, grr_variance=mode)
    reference.r = np.array(previous)
    assert reference.dissimilarity(np.array(estimate), UNITS, n1) == pytest.approx(expected, rel=1e-6)


# m: LBD Σ (bound), LBA, LPD, LPA at n = 200000, d = 2, ε = 1, w = 20
TV6 = [
    (1, 7.9585e-05, 7.9585e-05, 7.2147e-05, 1.8413e-05, 1.7537e-05),
    (2, 3.9917e-04, 6.3917e-04, 5.2809e-04, 5.5240e-05, 6.6958e-05),
    (4, 6.7983e-03, 2.0478e-02, 3.5539e-03, 2.7620e-04, 2.4551e-04),
    (8, 1.7476e+00, 1.0486e+01, 2.0895e-02, 4.6954e-03, 8.4176e-04),
    (12, 4.4739e+02, 4.0265e+03, 5.3995e-02, 7.5403e-02, 1.6572e-03),
]


@pytest.mark.parametrize("m, lbd, bound, lba, lpd, lpa", TV6)
def test_tv6_publication_variance_terms(m, lbd, bound, lba, lpd, lpa):
    n, d, eps, w = 200000, 2, 1.0, 20
    assert sum(ldp_variance(eps / 2 ** (i + 1), d, n) for i in range(1, m + 1)) == pytest.approx(lbd, rel=1e-4)
    assert m * ldp_variance(eps / 2 ** (m + 1), d, n) == pytest.approx(bound, rel=1e-4)
    assert m * ldp_variance((w + m) * eps / (4 * w * m), d, n) == pytest.approx(lba, rel=1e-4)
    assert sum(ldp_variance(eps, d, n / 2 ** (i + 1)) for i in range(1, m + 1)) == pytest.approx(lpd, rel=1e-4)
    assert m * ldp_variance(eps, d, (w + m) * n / (4 * w * m)) == pytest.approx(lpa, rel=1e-4)


@pytest.mark.parametrize("d, eps, w, lbu, lpu, ratio", [
    (2, 1.0, 20, 1.9996e-03, 9.2067e-05, 21.72), (5, 1.0, 20, 7.7643e-03, 2.2860e-04, 33.97),
    (77, 1.0, 20, 7.9984e-03, 3.6957e-04, 21.64), (117, 1.0, 20, 7.9984e-03, 3.6912e-04, 21.67),
    (2, 2.0, 40, None, None, 55.23),
])
def test_tv7_lbu_against_lpu(d, eps, w, lbu, lpu, ratio):
    n = 200000
    v_lbu, v_lpu = ldp_variance(eps / w, d, n), ldp_variance(eps, d, n / w)
    if lbu is not None:
        assert (v_lbu, v_lpu) == (pytest.approx(lbu, rel=1e-4), pytest.approx(lpu, rel=1e-4))
    assert v_lbu / v_lpu == pytest.approx(ratio, abs=0.005)  # Theorem 5.1: LPU's error is the smaller


def test_tv8_lpd_first_step():
    n = 200000
    mechanism = make_mechanism("lpd", bins=2, epsilon=1.0, window=20, simulation="aggregate")
    asked = []
    simulate = mechanism.simulate
    mechanism.simulate = lambda reports, holders, r: (asked.append((reports.part, reports.users.size)),
                                                      simulate(reports, holders, r))[1]
    release = mechanism.step(everyone(n, 20, "1"), insecure_seeded_randomness(8))
    assert ldp_variance(1.0, 2, 5000) == pytest.approx(1.8413472e-4, rel=1e-7)
    assert release.kind.value == PUB_ and asked == [(DIS, 5000), (PUB, 50000)]
    assert release.predicted_error == pytest.approx(1.8413472e-5, rel=1e-7)
    reference = Reference("lpd", 2, "1", 20, simulation="aggregate")
    outcome = reference.step([(u, u % 2, None) for u in range(n)], insecure_seeded_randomness(8))
    assert (outcome.trace["n1"], outcome.trace["n_pp"], outcome.kind) == (5000, 50000, PUB_)
    # r_0 = 0: dis ≈ ((1-p)^2 + p^2)/2 = 1/4 for half ones, far above err
    assert outcome.trace["dis"] == pytest.approx(0.25, abs=0.01)
    assert outcome.trace["err"] == pytest.approx(1.8413472e-5, rel=1e-7)


# ------------------------------------------------------------------ TV-12
def mean_bits(method: str, d: int, n: int, slots: int, epsilon: float = 1.0, window: int = 20) -> float:
    """Bits per user per slot, (1/T) Σ_t bits_t / n, from ``last_bits`` (spec §6.3's counting)."""
    mechanism = make_mechanism(method, bins=d, epsilon=epsilon, window=window, simulation="aggregate")
    rng, batch = insecure_seeded_randomness(12), everyone(n, window, str(epsilon))
    total = 0
    for _ in range(slots):
        mechanism.step(batch, rng)
        total += mechanism.last_bits
    return total / (slots * n)


# dataset, d, T, LBU predicted, LSP predicted (TV-12; both independent of n)
TV12 = [("LNS", 2, 800, 1, 0.1000), ("Taxi", 5, 886, 3, 0.2032), ("Foursquare", 77, 447, 77, 4.0134),
        ("Taobao d=118", 118, 1440, 118, 5.95)]


@pytest.mark.parametrize("name, d, slots, lbu, lsp", TV12)
def test_tv12_lbu_and_lsp_bits(name, d, slots, lbu, lsp):
    assert mean_bits("lbu", d, 200, 30) == lbu  # b(ε/w) per user per slot, no request bit
    assert mean_bits("lsp", d, 200, slots) == pytest.approx(lsp, abs=5e-5)  # (b(ε) + 1) at t ≡ 1 (mod w)


@pytest.mark.parametrize("name, d, n, slots, predicted", [("LNS", 2, 2000, 800, 0.1000),
                                                         ("Taxi", 5, 10357, 886, 0.1997)])
def test_tv12_lpu_bits(name, d, n, slots, predicted):
    """TV-12 predicts (b+1)/w · (w⌊n/w⌋/n), counting ⌊n/w⌋ users per group; §5.5's groups hold ⌊n/w⌋ or
    ⌊n/w⌋+1 (every user in one), so the exact mean counts each slot's group size."""
    bits = (d - 1).bit_length() + 1
    sizes = [n // 20 + (g < n % 20) for g in range(20)]  # groups dealt round-robin from group 0
    exact = bits * sum(sizes[(t - 1) % 20] for t in range(1, slots + 1)) / (slots * n)
    assert mean_bits("lpu", d, n, slots) == pytest.approx(exact, rel=1e-12)
    assert exact == pytest.approx(predicted, abs=5e-4)
