"""Local differential privacy for numeric values (spec ``ipp_app_capp.md``); never imports Beam.

:mod:`.square_wave` holds the Square Wave mechanism, discretised so that every probability is an exact
rational drawn from the project's generator, its moments and the de-biased mean.  See ``docs/local_dp.md``.
Seed 003's streams on it (``docs/numeric_ldp.md``): :mod:`.perturbation` (the per-user clients SW-direct, IPP,
APP, CAPP), :mod:`.sampling` (PP-S and its variants), :mod:`.baselines` (BA-SW, ToPL), :mod:`.server` (the
collector's estimates and metrics) and :mod:`.streams` (the registered mechanisms).
"""

from transforms.mechanisms.numeric.square_wave import (
    SquareWave,
    deviation_mean,
    deviation_variance_at_one,
    moments_at_one,
    sw_mean,
    sw_moment,
    sw_parameters,
    sw_variance,
)

__all__ = ["SquareWave", "deviation_mean", "deviation_variance_at_one", "moments_at_one", "sw_mean", "sw_moment",
           "sw_parameters", "sw_variance"]
