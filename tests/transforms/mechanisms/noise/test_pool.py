"""Tests for transforms.mechanisms.noise.pool: the entry points' validation and the pool of pre-drawn noise.

False-failure budget: see ``noise_helpers``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from noise_helpers import CountingRandomness
from transforms.mechanisms.noise import InsecureSeededRandomness, Randomness, discrete_laplace, discrete_laplace_draw
from transforms.mechanisms.noise import pool as noise_pool


# --------------------------------------------------------------------------
# The pool of pre-drawn noise
# --------------------------------------------------------------------------


@pytest.fixture
def draw_sizes(monkeypatch):
    """Sizes of the fresh batches drawn (by the pool's refills or directly)."""
    sizes: list[int] = []
    real = noise_pool.laplace_draws
    monkeypatch.setattr(noise_pool, "laplace_draws", lambda num, den, size, rng: sizes.append(size) or real(num, den, size, rng))
    return sizes


def test_pool_first_request_draws_exactly_what_it_needs(draw_sizes):
    rng = InsecureSeededRandomness(0)
    assert discrete_laplace(Fraction(2000, 3), 100, rng).shape == (100,)
    assert type(discrete_laplace_draw(Fraction(7, 2), rng)) is int
    assert draw_sizes == [100, 1]
    assert rng._noise_pool == {(2000, 3): [[], 2], (7, 2): [[], 2]}  # no waste, next refills of 2


def test_pool_refills_double_up_to_the_cap(draw_sizes):
    rng = InsecureSeededRandomness(1)
    scale = Fraction(7, 2)
    longest = 0
    for _ in range(5000):
        assert type(discrete_laplace_draw(scale, rng)) is int
        longest = max(longest, len(rng._noise_pool[(7, 2)][0]))
    cap = noise_pool._POOL_MAX_REFILL
    assert cap == 1024 and draw_sizes == [min(2**i, cap) for i in range(len(draw_sizes))]
    assert draw_sizes[-3:] == [cap] * 3 and longest == cap - 1


def test_pool_sizes_stay_bounded_under_mixed_requests():
    rng = InsecureSeededRandomness(2)
    choice = np.random.Generator(np.random.PCG64(2))
    scales = [Fraction(1, 3), Fraction(5, 2), Fraction(2000, 3)]
    for size in choice.integers(0, 300, 400).tolist() + [5000, 1, 3000, 2]:
        scale = scales[size % 3]
        out = discrete_laplace(scale, size, rng) if size != 1 else [discrete_laplace_draw(scale, rng)]
        assert len(out) == size
        for pooled, refill in rng._noise_pool.values():
            assert len(pooled) <= noise_pool._POOL_MAX_REFILL and refill <= noise_pool._POOL_MAX_REFILL
            assert all(type(value) is int for value in pooled[-3:])


def test_pool_keeps_the_64_most_recently_used_scales():
    rng = InsecureSeededRandomness(3)
    keys = [(i, 1_000_003) for i in range(1, 101)]  # distinct reduced fractions
    for num, den in keys:
        for _ in range(2):  # the second request leaves one pooled draw
            discrete_laplace_draw(Fraction(num, den), rng)
    pool = rng._noise_pool
    assert noise_pool._POOL_MAX_KEYS == 64 and list(pool) == keys[-64:]
    assert all(len(entry[0]) == 1 for entry in pool.values())
    discrete_laplace_draw(Fraction(*keys[36]), rng)  # used again: most recent, keeps its draws
    discrete_laplace(Fraction(1, 7), 3, rng)  # a new scale evicts the least recently used one
    assert list(pool)[-2:] == [keys[36], (1, 7)] and keys[37] not in pool and len(pool) == 64
    assert pool[keys[36]][0] == []  # its pooled draw was used


def test_pool_hands_out_each_draw_once():
    # Every pooled value is returned exactly once: replaying the same seed with
    # one big request of each refill's size gives the same multiset.
    rng = InsecureSeededRandomness(4)
    scale = Fraction(5, 2)
    singles = [discrete_laplace_draw(scale, rng) for _ in range(127)]  # refills 1, 2, ..., 64
    assert rng._noise_pool[(5, 2)][0] == []
    replay = InsecureSeededRandomness(4)
    batches = [noise_pool.laplace_draws(5, 2, 2**i, replay) for i in range(7)]
    assert sorted(singles) == sorted(np.concatenate(batches).tolist())


def test_pooled_release_is_not_a_view_of_the_pool():
    # A release must not be a view of a batch whose other values wait in the
    # pool: whoever holds the release could read the noise still to come.
    rng = InsecureSeededRandomness(5)
    scale = Fraction(2000, 3)
    checked = 0
    for size in [1, 1, 1, 3, 2, 5, 40, 33, 100, 7, 1, 300] * 3:
        out = discrete_laplace(scale, size, rng)
        if rng._noise_pool[(2000, 3)][0]:  # draws wait in the pool
            assert out.base is None
            checked += 1
    assert checked > 10


# --------------------------------------------------------------------------
# The entry points: arguments, and the scales that are pooled
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad", [0, -1, Fraction(-1, 2), Fraction(0), math.nan, 2.0, "1", None, True, 2**54]
)
def test_discrete_laplace_rejects_bad_scale(bad):
    with pytest.raises(ValueError, match="scale"):
        discrete_laplace(bad, 3, InsecureSeededRandomness(0))


@pytest.mark.parametrize("bad", [-1, 1.5, None])
def test_discrete_laplace_rejects_bad_size(bad):
    with pytest.raises(ValueError, match="size"):
        discrete_laplace(Fraction(1), bad, InsecureSeededRandomness(0))


def test_discrete_laplace_accepts_ints_and_empty_size():
    assert discrete_laplace(3, 5, InsecureSeededRandomness(0)).shape == (5,)
    assert discrete_laplace(np.int64(3), 5, InsecureSeededRandomness(0)).shape == (5,)
    empty = discrete_laplace(Fraction(1), 0, InsecureSeededRandomness(0))
    assert empty.dtype == np.int64 and empty.shape == (0,)
    assert discrete_laplace(2**53, 3, InsecureSeededRandomness(0)).dtype == np.int64


@pytest.mark.parametrize(
    "scale", [2**53, Fraction(2**53 * 3 - 1, 3), Fraction(10**40 + 1, 10**30), Fraction(2**50 + 1, 3), Fraction(3, 2**63)],
    ids=str,
)
def test_scales_past_the_vector_range_use_the_scalar_sampler(scale):
    # Numerators above 2**50 (huge scales, bignum fractions) or denominators of
    # 2**63 and more: python ints, no uint32 words, no pool.
    rng = CountingRandomness(1)
    out = discrete_laplace(scale, 40, rng)
    assert out.dtype == np.int64 and out.shape == (40,)
    draw = discrete_laplace_draw(scale, rng)
    assert type(draw) is int
    assert rng.uint32_calls == [] and rng.randbelow_calls > 40
    assert rng._noise_pool == {}
    if scale >= 10**9:  # FFP: P(|X| < 10**6) < 2e6 / 10**9 per draw, so < 1e-80 for 40 draws
        assert np.any(np.abs(out) > 10**6)


def test_the_vector_range_ends_at_num_2_pow_50():
    rng = CountingRandomness(2)
    out = discrete_laplace(Fraction(2**50, 3), 40, rng)
    assert out.dtype == np.int64 and out.shape == (40,) and rng.uint32_calls
    assert (2**50, 3) in rng._noise_pool



def test_a_generator_without_a_pool_draws_every_value_when_asked():
    """Nothing is attached to a source that keeps no pool: each request draws exactly what it needs."""

    class Unpooled(Randomness):
        def __init__(self):
            self.inner = InsecureSeededRandomness(0)

        def randbelow(self, n):
            return self.inner.randbelow(n)

        def uint32(self, size):
            return self.inner.uint32(size)

    rng = Unpooled()
    draws = [discrete_laplace_draw(Fraction(7, 2), rng) for _ in range(3)]
    assert rng._noise_pool is None and "_noise_pool" not in vars(rng)
    replay = InsecureSeededRandomness(0)  # the same stream, drawn one value at a time
    assert draws == [int(noise_pool.laplace_draws(7, 2, 1, replay)[0]) for _ in range(3)]
    pooled = CountingRandomness(0)
    for _ in range(3):
        discrete_laplace_draw(Fraction(7, 2), pooled)
    assert pooled._noise_pool[(7, 2)][1] == 4  # refills of 1 then 2: the third draw came from the pool


def test_an_unused_seeded_generator_pickled_without_a_pool_gets_one():
    """Before pools were part of the generator, one that had drawn no noise pickled without a pool."""
    import pickle

    rng = InsecureSeededRandomness(8)
    del rng._noise_pool
    restored = pickle.loads(pickle.dumps(rng))
    fresh = InsecureSeededRandomness(8)
    assert [discrete_laplace_draw(Fraction(7, 2), restored) for _ in range(20)] == \
        [discrete_laplace_draw(Fraction(7, 2), fresh) for _ in range(20)]
    assert restored._noise_pool.keys() == {(7, 2)}
