"""GRR/OUE: spec TV-1, the Ada rule, and the exact privacy of the rounded probabilities on every grid point."""

from __future__ import annotations

from fractions import Fraction

import pytest

from ldp_grid import GRID, exp_taylor
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.ldp import FrequencyOracle, choose_oracle, ldp_variance, oracle_for
from transforms.mechanisms.ldp.oracles import ORACLES

# TV-1 (spec §7): eps, d, n, FO, p, q, V exact, V printed (None: same or not applicable), bits
TV1 = [
    ("1", 2, 10000, "grr", 0.731059, 0.268941, 9.206736e-05, 9.206736e-05, 1),
    ("1", 5, 10000, "grr", 0.404610, 0.148848, 2.285950e-04, 3.682694e-04, 3),
    ("1", 77, 10000, "oue", 0.5, 0.268941, 3.695681e-04, None, 77),
    ("1", 117, 10000, "oue", 0.5, 0.268941, 3.691241e-04, None, 117),
    ("0.05", 2, 200000, "grr", 0.512497, 0.487503, 1.999583e-03, 1.999583e-03, 1),
    ("0.5", 5, 1000, "grr", 0.291875, 0.177031, 1.197121e-02, 1.567079e-02, 3),
    ("2", 77, 100000, "oue", 0.5, 0.119203, 7.370487e-06, None, 77),
]


@pytest.mark.parametrize("eps, d, n, kind, p, q, v_exact, v_printed, bits", TV1)
def test_tv1_parameters_and_variance(eps, d, n, kind, p, q, v_exact, v_printed, bits):
    oracle = oracle_for(to_units(eps), d)
    assert oracle.kind == kind
    assert float(oracle.p) == pytest.approx(p, abs=1e-6)
    assert float(oracle.q) == pytest.approx(q, abs=1e-6)
    assert oracle.bits == bits
    assert ldp_variance(float(eps), d, n) == pytest.approx(v_exact, rel=1e-6)
    if v_printed is not None:
        assert ldp_variance(float(eps), d, n, grr_mode="paper_printed") == pytest.approx(v_printed, rel=1e-6)


@pytest.mark.parametrize("units, d, expected", [
    (to_units("0.025"), 5, "grr"),  # spec T11: 5 < 3e^0.025 + 2 = 5.076
    (to_units("0.025"), 6, "oue"),
    (to_units("1"), 10, "grr"),  # 3e + 2 = 10.15
    (to_units("1"), 11, "oue"),
    (to_units("0.5"), 6, "grr"),  # 3e^0.5 + 2 = 6.946
    (to_units("0.5"), 7, "oue"),
])
def test_ada_rule_at_its_threshold(units, d, expected):
    assert choose_oracle(units, d) == expected


def test_ada_rule_ties_are_decided_exactly():
    # e^eps just below and above 8/3 (d = 10): eps = ln(8/3) = 0.980829253011726...
    assert choose_oracle(980829253011, 10) == "oue"
    assert choose_oracle(980829253012, 10) == "grr"


def _largest_output_ratio(oracle: FrequencyOracle) -> Fraction:
    """max over outputs and two inputs of Pr[out | v] / Pr[out | v'], from the exposed p and q only."""
    p, q = oracle.p, oracle.q
    if oracle.kind == "grr":
        assert p + (oracle.d - 1) * q == 1
        return max(p / q, q / p)
    # OUE: only the bits at v and v' differ in likelihood; the four (bit_v, bit_v') outcomes.
    assert p == Fraction(1, 2) and 0 < q < 1
    return max((p * (1 - q)) / (q * (1 - p)), (q * (1 - p)) / (p * (1 - q)),
               ((1 - p) * (1 - q)) / ((1 - q) * (1 - p)), (p * q) / (q * p))


@pytest.mark.parametrize("kind", ORACLES)
def test_realised_ratio_never_exceeds_e_eps_on_the_grid(kind):
    """Exact: every ratio is below a rational lower bound of e^eps (a Taylor partial sum)."""
    for units, d in GRID:
        oracle = FrequencyOracle.create(kind, units, d)
        ratio = _largest_output_ratio(oracle)
        assert ratio == oracle.ratio
        assert ratio <= exp_taylor(units)[0], (kind, units, d)


@pytest.mark.parametrize("kind", ORACLES)
def test_realised_epsilon_units_are_the_rounded_up_loss(kind):
    """e^(u/10^12) >= P/Q > e^((u-1)/10^12): u is ln(P/Q) rounded up, never above the nominal units."""
    for units, d in GRID:
        oracle = FrequencyOracle.create(kind, units, d)
        u = oracle.realised_units
        assert 0 < u <= units
        assert exp_taylor(u)[0] >= oracle.ratio, (kind, units, d)
        assert exp_taylor(u - 1)[1] < oracle.ratio, (kind, units, d)


def test_rounding_gives_up_little_budget():
    for units, d in GRID:
        oracle = oracle_for(units, d)
        lost = units - oracle.realised_units
        assert lost <= (units * 10**-6 if oracle.kind == "oue" else 1), (units, d, oracle.kind)


@pytest.mark.parametrize("kind, units, d, message", [
    ("rappor", 10**12, 5, "oracle must be"),
    ("grr", 0, 5, "epsilon units"),
    ("grr", 21 * 10**12, 5, "epsilon units"),
    ("grr", 10**12, 1, "domain size"),
    ("oue", 1, 5, "below the resolution"),
])
def test_bad_parameters_raise(kind, units, d, message):
    with pytest.raises(ValueError, match=message):
        FrequencyOracle.create(kind, units, d)


def test_parameters_cannot_be_forged():
    oracle = oracle_for(10**12, 5)
    with pytest.raises(ValueError, match="must come from"):
        FrequencyOracle(oracle.kind, oracle.epsilon_units, oracle.d, oracle.keep + 1, oracle.other,
                        oracle.denominator, oracle.realised_units)


def test_estimate_inverts_the_expected_counts_exactly():
    for kind in ORACLES:
        oracle = FrequencyOracle.create(kind, to_units("1"), 4)
        true = [Fraction(1, 2), Fraction(1, 4), Fraction(1, 4), Fraction(0)]
        n = 4000
        expected_counts = [float(n * (c * oracle.p + (1 - c) * oracle.q)) for c in true]
        assert oracle.estimate(expected_counts, n) == pytest.approx([float(c) for c in true], abs=1e-12)
    with pytest.raises(ValueError, match="reporters"):
        oracle.estimate([1, 2, 3, 4], 0)
    with pytest.raises(ValueError, match="shape"):
        oracle.estimate([1, 2, 3], 10)
