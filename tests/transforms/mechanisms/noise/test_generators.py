"""Tests for transforms.mechanisms.noise.generators: the seeded and the secure source.

False-failure budget: see ``noise_helpers``.
"""

from __future__ import annotations

import os
import pickle
from fractions import Fraction

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from noise_helpers import pooled_samples
from transforms.mechanisms.noise import (InsecureSeededRandomness, Randomness, SecureRandomness, discrete_laplace,
                                         discrete_laplace_draw, insecure_seeded_randomness, secure_randomness)


# --------------------------------------------------------------------------
# InsecureSeededRandomness
# --------------------------------------------------------------------------


def test_seeded_randomness_is_reproducible():
    a = discrete_laplace(Fraction(3), 200, InsecureSeededRandomness(42))
    b = discrete_laplace(Fraction(3), 200, insecure_seeded_randomness(42))
    assert np.array_equal(a, b)
    assert np.array_equal(InsecureSeededRandomness(42).uint32(50), InsecureSeededRandomness(42).uint32(50))
    # Same seed and same requests (pooled draws, refills, several scales): same outputs.
    runs = [pooled_samples(Fraction(2000, 3), 3000, InsecureSeededRandomness(43)) for _ in range(2)]
    assert np.array_equal(*runs)


def test_different_seeds_differ():
    # Deterministic for these seeds (FFP over seeds: P(200 draws of scale 3 agree) < 1e-50).
    a = discrete_laplace(Fraction(3), 200, InsecureSeededRandomness(1))
    b = discrete_laplace(Fraction(3), 200, InsecureSeededRandomness(2))
    assert not np.array_equal(a, b)
    assert not np.array_equal(InsecureSeededRandomness(1).uint32(8), InsecureSeededRandomness(2).uint32(8))


def advance_with_pooled_draws(rng: Randomness) -> None:
    """Advance both streams mid-way and leave pooled draws of two scales behind."""
    discrete_laplace(Fraction(5, 2), 37, rng)
    for _ in range(40):
        discrete_laplace_draw(Fraction(5, 2), rng)
        discrete_laplace_draw(Fraction(2000, 3), rng)
    discrete_laplace(Fraction(2000, 3), 50, rng)
    rng.uint32(13)
    assert rng._noise_pool[(5, 2)][0] and rng._noise_pool[(2000, 3)][0]  # draws are waiting in the pool


def same_continuation(rng: Randomness, clone: Randomness) -> None:
    for scale in (Fraction(5, 2), Fraction(2000, 3)):  # first the pooled draws, then refills
        assert [discrete_laplace_draw(scale, rng) for _ in range(300)] == \
            [discrete_laplace_draw(scale, clone) for _ in range(300)]
        assert np.array_equal(discrete_laplace(scale, 100, rng), discrete_laplace(scale, 100, clone))
    assert np.array_equal(discrete_laplace(Fraction(7, 5), 100, rng), discrete_laplace(Fraction(7, 5), 100, clone))
    assert np.array_equal(rng.uint32(100), clone.uint32(100))
    assert [rng.randbelow(2**200) for _ in range(5)] == [clone.randbelow(2**200) for _ in range(5)]


def test_seeded_randomness_pickle_continues_sequence():
    rng = InsecureSeededRandomness(123)
    advance_with_pooled_draws(rng)
    clone = pickle.loads(pickle.dumps(rng))
    assert clone.is_secure is False
    assert clone._noise_pool == rng._noise_pool
    same_continuation(rng, clone)


def test_seeded_randomness_with_pooled_draws_goes_through_a_checkpoint():
    # The checkpoint loader accepts only the generator's own classes: the pool
    # must be plain containers.
    from transforms.checkpoint import dump_randomness, load_randomness

    rng = InsecureSeededRandomness(321)
    advance_with_pooled_draws(rng)
    clone = load_randomness(dump_randomness(rng))
    assert isinstance(clone, InsecureSeededRandomness)
    same_continuation(rng, clone)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", None, True, 2.0])
def test_seeded_randomness_rejects_bad_seed(bad):
    with pytest.raises(ValueError, match="seed"):
        InsecureSeededRandomness(bad)


def test_seeded_randomness_values():
    rng = InsecureSeededRandomness(0)
    big = 2**300 + 17
    assert all(0 <= rng.randbelow(big) < big for _ in range(100))
    assert rng.randbelow(1) == 0
    values = rng.uint32(1000)
    assert values.dtype == np.uint32 and values.shape == (1000,)
    assert InsecureSeededRandomness(np.int64(5)).uint32(3).tolist() == InsecureSeededRandomness(5).uint32(3).tolist()




# --------------------------------------------------------------------------
# SecureRandomness
# --------------------------------------------------------------------------


def test_secure_randomness_works():
    rng = secure_randomness()
    assert isinstance(rng, SecureRandomness) and rng.is_secure is True
    assert InsecureSeededRandomness.is_secure is False
    big = 2**300 + 17
    assert all(0 <= rng.randbelow(big) < big for _ in range(100))
    assert rng.randbelow(1) == 0
    values = rng.uint32(8)
    assert values.dtype == np.uint32 and values.shape == (8,)
    values[0] = 1  # writable
    # FFP: two independent 256-bit draws coincide with probability 2^-256.
    assert not np.array_equal(rng.uint32(8), rng.uint32(8))
    assert rng.uint32(0).shape == (0,)
    clone = pickle.loads(pickle.dumps(rng))
    assert isinstance(clone, SecureRandomness)
    draws = discrete_laplace(Fraction(2), 100, clone)
    assert draws.dtype == np.int64 and draws.shape == (100,)
    # Pooled draws are never pickled (nor is anything else of the state).
    for _ in range(70):
        discrete_laplace_draw(Fraction(2000, 3), rng)
    assert len(rng._noise_pool[(2000, 3)][0]) > 50
    payload = pickle.dumps(rng)
    assert pickle.loads(payload)._noise_pool == {} and len(payload) < 100


def test_secure_randomness_forked_child_never_repeats_the_parents_stream():
    """A child process must not hand out the keystream, buffer or pooled noise it inherited.

    FFP: 2^-256 for the stream; the 50 pooled draws of scale 2000/3 coincide
    with probability below (max pmf)^50 < 1333^-50.
    """
    rng = secure_randomness()
    rng.randbelow(10)  # key and buffer exist before the fork
    scale = Fraction(2000, 3)
    for _ in range(64):  # refills of 1, 2, ..., 64: 63 draws wait in the pool
        discrete_laplace_draw(scale, rng)
    assert len(rng._noise_pool[(2000, 3)][0]) >= 50

    def report() -> bytes:
        pool_size = sum(len(entry[0]) for entry in rng._noise_pool.values())
        draws = np.array([discrete_laplace_draw(scale, rng) for _ in range(50)], dtype=np.int64)
        return (rng.uint32(8).tobytes() + rng.randbelow(2**256).to_bytes(32, "little")
                + pool_size.to_bytes(8, "little") + draws.tobytes())

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report its next draws, then leave without running pytest's atexit
        try:
            os.write(write, report())
        finally:
            os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 4096):
        chunks.append(chunk)
    child = b"".join(chunks)
    os.close(read)
    os.waitpid(pid, 0)
    parent = report()
    assert len(child) == len(parent) == 64 + 8 + 400
    assert child[:64] != parent[:64]
    assert int.from_bytes(child[64:72], "little") == 0  # the child's pool starts empty
    assert int.from_bytes(parent[64:72], "little") >= 50
    assert child[72:] != parent[72:]


def test_secure_randomness_takes_a_fresh_key_after_rekey_bytes(monkeypatch):
    keys = []
    real = os.urandom
    monkeypatch.setattr(os, "urandom", lambda n: keys.append(n) or real(n))
    monkeypatch.setattr(SecureRandomness, "REKEY_BYTES", 4096)
    rng = SecureRandomness()
    rng.uint32(1000)   # 4000 bytes: first key (32-byte key + 12-byte nonce)
    rng.uint32(1000)   # would pass 4096: a new key
    assert keys == [32, 12, 32, 12]


def test_secure_randomness_block_counter_starts_at_zero(monkeypatch):
    """The 16 bytes cryptography calls the nonce begin with a 4-byte block counter.

    Random bytes there start the counter anywhere, and a counter that reaches 2**32 raises
    instead of wrapping: all-ones bytes from the OS must not leave one block before a crash.
    """
    monkeypatch.setattr(os, "urandom", lambda n: b"\xff" * n)
    rng = SecureRandomness()
    words = rng.uint32(3 * SecureRandomness._BUFFER_BYTES // 4)  # far more than one 64-byte block
    assert words.size == 3 * SecureRandomness._BUFFER_BYTES // 4
    reference = Cipher(algorithms.ChaCha20(b"\xff" * 32, bytes(4) + b"\xff" * 12), mode=None).encryptor()
    assert words[:16].tobytes() == reference.update(bytes(64))  # counter 0, key and nonce from the OS


