"""Randomness and noise primitives for the differentially private histograms.

Secure by default: :class:`SecureRandomness` (a ChaCha20 keystream keyed by
the operating system's CSPRNG) is the only source meant for releases;
:class:`InsecureSeededRandomness` is a deterministic stream for tests and
reproducible replays only.

Noise on counts is discrete Laplace noise sampled *exactly* with integer
arithmetic (Canonne, Kamath and Steinke, NeurIPS 2020): no floating point is
involved, so the realised distribution is exactly the one the privacy
analysis assumes.  Textbook floating-point Laplace sampling (``-b * log(U)``)
is avoided because its rounding leaks the input through the low-order bits of
the output (Mironov, "On Significance of the Least Significant Bits for
Differential Privacy", CCS 2012).  Subsampling coins compare uniform
``uint32`` draws with integer thresholds rounded down, so a realised success
probability never exceeds the requested one.

Modules: :mod:`.generators` (the sources), :mod:`.samplers` (the exact
discrete Laplace, scalar and vectorized), :mod:`.pool` (the entry points
:func:`discrete_laplace` and :func:`discrete_laplace_draw`, and each
generator's pool of pre-drawn noise), :mod:`.coins` (subsampling coins),
:mod:`.binomial` (exact Binomial and equal-probability Multinomial draws in
sublinear time) and :mod:`.variance` (the noise's variance for error models).
"""

from transforms.mechanisms.noise.binomial import binomial, multinomial_equal
from transforms.mechanisms.noise.coins import bernoulli_thresholds, count_successes
from transforms.mechanisms.noise.generators import (
    InsecureSeededRandomness,
    Randomness,
    SecureRandomness,
    insecure_seeded_randomness,
    secure_randomness,
)
from transforms.mechanisms.noise.pool import discrete_laplace, discrete_laplace_draw
from transforms.mechanisms.noise.variance import continuous_laplace_variance, discrete_laplace_variance

# Pickles (checkpoints, Beam's state) name the classes by this package, as before the split into
# modules: checkpoints load in either release, and the checkpoint loader's allow-list stays valid.
for _cls in (Randomness, SecureRandomness, InsecureSeededRandomness):
    _cls.__module__ = __name__
del _cls

__all__ = [
    "InsecureSeededRandomness",
    "Randomness",
    "SecureRandomness",
    "bernoulli_thresholds",
    "binomial",
    "continuous_laplace_variance",
    "count_successes",
    "discrete_laplace",
    "discrete_laplace_draw",
    "discrete_laplace_variance",
    "insecure_seeded_randomness",
    "multinomial_equal",
    "secure_randomness",
]
