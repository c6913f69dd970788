"""The device module: standard library only, the core's exact probabilities, and the user's own w-event budget.

Statistical assertions (the two fits of the randomizers' output) have false-failure probability 1e-7 each
and a computed power check (eps 1.2 instead of 1 is rejected with miss probability below 1e-7).
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from device import wevent_client as client
from device.wevent_client import RequestRefused, WEventClient
from schemas import validate
from transforms.mechanisms.budget import to_units
from transforms.mechanisms.ldp import FrequencyOracle, choose_oracle
from transforms.mechanisms.numeric import SquareWave

from tests.transforms.mechanisms.ldp.ldp_grid import GRID

ROOT = Path(__file__).parents[2]
ALPHA = POWER_MISS = 1e-7


@pytest.mark.parametrize("embedded", ["top-level files", "device package"])
def test_client_imports_with_the_standard_library_only(embedded):
    """A fresh interpreter without site-packages (-I -S), numpy and Beam blocked, loads the device files on their
    own: copied as top-level modules (``device/`` on the path) or as the ``device`` package."""
    if embedded == "top-level files":
        path, imports = ROOT / "device", "import wevent_client as c\nimport numeric_client as n\n"
    else:
        path, imports = ROOT, "from device import wevent_client as c\nfrom device import numeric_client as n\n"
    code = (
        "import sys\n"
        "for name in ('numpy', 'apache_beam', 'fastavro', 'pyarrow', 'scipy', 'transforms', 'schemas', 'pipelines'):\n"
        "    sys.modules[name] = None\n"
        f"sys.path.insert(0, {str(path)!r})\n"
        + imports +
        "assert n.NumericClient('u1', 'capp', 4, '1', 0.0, 10.0).report('s', 0, 3.5)['user'] == 'u1'\n"
        "device = c.WEventClient('u1', 3, '1', lambda slot: 1)\n"
        "r = device.respond({'stream': 's', 'user': 'u1', 'slot': 0, 'method': 'lbu', 'epsilon': '0.5',"
        " 'domain_size': 5})\n"
        "print(r['oracle'], r['realised_epsilon'], len(r['report']))\n"
        "sw = c.SquareWave(500000000000)\n"
        "print(sw.half_band, sw.keep, sw.other, sw.realised_units, -sw.half_band <= sw.perturb(0.25) < 65536 + sw.half_band)\n"
    )
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["grr", "0.5", "1"]
    sw = SquareWave.create(to_units("0.5"))  # the numeric randomizer too, with the core's integers
    assert lines[1].split() == [str(sw.half_band), str(sw.keep), str(sw.other), str(sw.realised_units), "True"]


@pytest.mark.parametrize("kind", ["grr", "oue"])
def test_client_and_core_compute_identical_probabilities_on_the_grid(kind):
    """Two independent methods (exact Taylor bounds vs certified decimal brackets) give the same integers."""
    for units, d in GRID:
        core = FrequencyOracle.create(kind, units, d)
        assert client.oracle_parameters(kind, units, d) == (core.keep, core.other, core.denominator)
        assert client.realised_epsilon_units(kind, units, d) == core.realised_units
        assert client.choose_oracle(units, d) == choose_oracle(units, d)


def _request(slot, epsilon="0.5", user="u1", d=2, **extra):
    return {"request_id": f"r{slot}", "stream": "s", "user": user, "slot": slot, "method": "lpu",
            "epsilon": epsilon, "domain_size": d, "oracle": None, **extra}


def _device(window=3, budget="1", **kwargs):
    return WEventClient("u1", window, budget, lambda slot: slot % 2, **kwargs)


def test_a_request_exactly_at_the_budget_is_answered_and_one_above_refused():
    device = _device()  # GRR over d = 2: realised eps = nominal exactly (checked below)
    assert client.realised_epsilon_units("grr", to_units("0.5"), 2) == to_units("0.5")
    assert device.respond(_request(0))["realised_epsilon"] == "0.5"
    device.respond(_request(1))  # window [0, 2] now holds exactly E = 1
    with pytest.raises(RequestRefused) as refused:
        device.respond(_request(2, epsilon="0.000000000001"))
    assert refused.value.code == "budget" and "spent 1 of 1" in refused.value.reason
    report = device.respond(_request(3))  # window [1, 3] holds 1: slot 0 has left it
    assert report["slot"] == 3 and device.window_spent(3) == to_units("1")


def test_refusals_charge_nothing_and_duplicates_are_refused():
    device = _device(budget="2")
    device.respond(_request(5))
    for request, code in [(_request(5), "duplicate"), (_request(1), "stale"), (_request(6, user="u2"), "wrong_user"),
                          (_request(6, epsilon="0.1234567890123"), "invalid"), (_request(6, epsilon=0.5), "invalid"),
                          (_request(6, d=1), "invalid"), (_request(6, d="5"), "invalid"),
                          (_request(6, d=[5]), "invalid"), (_request(6, method=3), "invalid"),
                          (_request(6, request_id=7), "invalid"), (_request(6, oracle=["grr"]), "invalid"), (_request(6, oracle="rappor"), "invalid"),
                          ({"slot": 6}, "invalid"), (_request(-1), "invalid"), ("{}", "invalid"),
                          (_request(6, epsilon="30"), "invalid")]:
        with pytest.raises(RequestRefused) as refused:
            device.respond(request)
        assert refused.value.code == code, (request, refused.value)
    assert device.window_spent(6) == to_units("0.5")


def test_out_of_order_slots_check_every_window_containing_them():
    device = _device(window=4, budget="1")
    device.respond(_request(10))
    device.respond(_request(13))  # window [10, 13] is full
    with pytest.raises(RequestRefused, match="budget"):
        device.respond(_request(12))  # inside [10, 13]
    device.respond(_request(14, epsilon="0.25"))  # slot 10 is outside every window containing 14 ...
    with pytest.raises(RequestRefused, match="budget"):
        device.respond(_request(11, epsilon="0.25"))  # ... but [10, 13] would hold 0.5 + 0.25 + 0.5 = 1.25
    device.respond(_request(17, epsilon="0.5"))
    with pytest.raises(RequestRefused, match="stale"):
        device.respond(_request(12, epsilon="0.25"))  # never answered, but older than 17 - 4


def test_random_request_sequences_never_overspend_any_window():
    """Brute force over every window: answered charges fit, and every budget refusal was necessary."""
    rng = random.Random(2024)
    refusals: dict[str, int] = {}
    for _ in range(40):
        window, budget = rng.randint(1, 6), rng.choice(["1", "1.5", "2"])
        device = _device(window=window, budget=budget, randbits=random.Random(1).getrandbits)
        spent: dict[int, int] = {}
        for _ in range(60):
            slot = max(0, max(spent, default=0) + rng.randint(-2 * window, 3))
            epsilon = rng.choice(["0.25", "0.5", "0.75", "1"])
            d = rng.choice([2, 5, 40])
            try:
                report = device.respond(_request(slot, epsilon=epsilon, d=d))
            except RequestRefused as refused:
                refusals[refused.code] = refusals.get(refused.code, 0) + 1
                if refused.code == "stale":
                    assert slot <= max(spent) - window
                if refused.code == "budget":
                    charge = client.realised_epsilon_units(client.choose_oracle(to_units(epsilon), d),
                                                           to_units(epsilon), d)
                    trial = {**spent, slot: charge}
                    assert any(sum(v for t, v in trial.items() if a <= t < a + window) > to_units(budget)
                               for a in range(slot - window + 1, slot + 1))
                continue
            assert slot not in spent
            spent[slot] = to_units(report["realised_epsilon"])
        for a in range(-window, max(spent, default=0) + 1):
            assert sum(v for t, v in spent.items() if a <= t < a + window) <= to_units(budget)
    assert {"budget", "duplicate", "stale"} <= set(refusals)  # every kind of refusal was exercised


def test_state_round_trips_and_keeps_refusing():
    device = _device(window=3, budget="1")
    device.respond(_request(0))
    device.respond(_request(1))
    restored = WEventClient.from_state(device.state(), lambda slot: 0)
    assert json.loads(restored.state()) == json.loads(device.state())
    with pytest.raises(RequestRefused, match="duplicate"):
        restored.respond(_request(1))
    with pytest.raises(RequestRefused, match="budget"):
        restored.respond(_request(2))


def test_requests_and_reports_follow_their_schemas():
    device = _device(budget="3")
    for slot, d, oracle in [(0, 2, None), (1, 5, "grr"), (2, 12, None), (3, 3, "oue")]:
        request = _request(slot, d=d, oracle=oracle)
        validate("request", request)
        report = device.respond(request)
        validate("report", report)
        json.dumps(report)
        assert report["oracle"] == (oracle or client.choose_oracle(to_units("0.5"), d))
        assert len(report["report"]) == (1 if report["oracle"] == "grr" else d)


@pytest.mark.parametrize("bad", [{"user": ""}, {"window": 0}, {"budget": "0"}, {"budget": "1e-13"}])
def test_bad_configuration_raises(bad):
    arguments = {"user": "u1", "window": 3, "budget": "1", **bad}
    with pytest.raises(ValueError):
        WEventClient(arguments["user"], arguments["window"], arguments["budget"], lambda slot: 0)


def _fit_and_power(observed: np.ndarray, probabilities: np.ndarray, wrong: np.ndarray) -> None:
    n = observed.sum()
    assert stats.chisquare(observed, probabilities * n).pvalue > ALPHA
    df = probabilities.size - 1
    noncentrality = n * float(((wrong - probabilities) ** 2 / probabilities).sum())
    assert stats.ncx2.cdf(stats.chi2.isf(ALPHA, df), df, noncentrality) < POWER_MISS


def test_grr_client_reports_follow_the_exact_probabilities():
    units, d, n = to_units("1"), 3, 30_000
    reports = [client.perturb("grr", 0, units, d)[0] for _ in range(n)]
    p, q, denominator = client.oracle_parameters("grr", units, d)
    wp, wq, _ = client.oracle_parameters("grr", to_units("1.2"), d)
    _fit_and_power(np.bincount(reports, minlength=d), np.array([p, q, q]) / denominator,
                   np.array([wp, wq, wq]) / denominator)


def test_oue_client_reports_follow_the_exact_probabilities():
    """Bits at the value are 1 with probability 1/2, the others with q: a fit of the (bit 0, bit 1) pairs."""
    units, d, n = to_units("1"), 4, 20_000
    bits = np.array([client.perturb("oue", 0, units, d) for _ in range(n)])
    _, q, denominator = client.oracle_parameters("oue", units, d)
    _, wq, _ = client.oracle_parameters("oue", to_units("1.2"), d)

    def pair_law(q):
        q = q / denominator
        return np.array([0.5 * (1 - q), 0.5 * q, 0.5 * (1 - q), 0.5 * q])  # (b0, b1) = 00, 01, 10, 11

    _fit_and_power(np.bincount(bits[:, 0] * 2 + bits[:, 1], minlength=4), pair_law(q), pair_law(wq))
    assert set(itertools.chain.from_iterable(bits.tolist())) <= {0, 1}


SECRET = 7318  # a value no message may show


@pytest.mark.parametrize("request_fields, value", [
    ({"method": "lbu/m2", "epsilon": "0.5", "domain_size": 4}, SECRET),           # outside [0, d)
    ({"method": "lbu/m2", "epsilon": "0.5", "domain_size": 4}, f"home-{SECRET}"),  # not a bin at all
    ({"method": "lbu-mean/m2", "epsilon": "0.5", "domain_size": 1, "low": 0.0, "high": 10.0},
     f"{SECRET}.5 km"),                                                            # a mean request, not a number
])
def test_a_refusal_never_carries_the_users_value(request_fields, value):
    """An app may log or forward a refusal: it says the value does not fit, never what it was; nothing is charged.
    Before, the randomizers raised a ValueError ending in ``got 7318``."""
    from device import wevent_client

    request = {"stream": "s", "user": "u1", "slot": 3, **request_fields}
    if request["domain_size"] == 1:
        units = wevent_client.epsilon_units_from_string(request["epsilon"])
        request["oracle"] = wevent_client.hybrid_mechanism(units).oracle
    client = WEventClient("u1", 4, "2", lambda slot: value)
    with pytest.raises(RequestRefused) as refused:
        client.respond(request)
    assert refused.value.code == "invalid" and str(SECRET) not in str(refused.value)
    assert client.window_spent(3) == 0
    with pytest.raises(ValueError) as error:  # the randomizers themselves
        if request["domain_size"] == 1:
            wevent_client.hybrid_mechanism(units).perturb(value, 0.0, 10.0)
        else:
            wevent_client.perturb("grr", value, 10**12, 4)
    assert str(SECRET) not in str(error.value)
