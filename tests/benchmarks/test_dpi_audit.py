"""Spec TV10 through the real mechanisms (benchmarks/dpi_audit.py): the paper's claim is exceeded, the sound
variant's charge covers its loss.  Exact: the laws are read from the mechanisms, no statistical test."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import dpi_audit


def test_tv10_the_papers_claim_is_exceeded_and_its_sound_figure_covers_the_loss():
    under_d, under_d2 = (dpi_audit.run_stream("dpi", counts, 1000)[0][:, 1] for counts in
                         dpi_audit.STREAMS.values())
    assert under_d == pytest.approx(0.5)  # D: both entries score -1, the weights stay equal
    assert np.log(under_d / under_d2)[-1] == pytest.approx(0.0126, abs=1e-4)  # the single draw at slot 1,000
    result = dpi_audit.audit("dpi", 1000, 200)
    assert result["worst_case_loss"] == pytest.approx(6.2698, abs=1e-3)  # TV10, against P_A's claimed 1.0
    assert 20 * result["worst_case_loss"] == pytest.approx(125.4, abs=0.05)  # TV10 with r = 20
    assert result["eps_claimed"] == pytest.approx(2.0)  # 0.001 for each distribution per slot
    assert result["exceeds_claim"] and result["within_charge"]
    assert result["eps_sound_upper"] >= result["worst_case_loss"]
    assert 0 < result["sampled_loss_mean"] < result["worst_case_loss"]


def test_tv10_the_sound_variant_stays_within_what_it_charges():
    result = dpi_audit.audit("dpi-sound", 1000, 200)
    assert result["eps_sound_upper"] == pytest.approx(2.0)  # 0.002 per slot, charged
    assert not result["exceeds_claim"] and result["within_charge"]
    assert 0 < result["worst_case_loss"] <= 2.0


def test_the_script_prints_one_json_object(capsys):
    assert dpi_audit.main(["--slots", "50", "--samples", "10", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["variants"]) == {"dpi", "dpi-sound"} and result["slots"] == 50
