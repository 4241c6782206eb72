"""Feistel index shuffle: a random permutation of ``[0, n)`` in O(1) memory.

The permutation of ``grain.experimental.index_shuffle`` (4-round Simon-style Feistel,
cycle walking, ``std::seed_seq`` round keys), in Python, NumPy and traceable JAX forms
that agree bit for bit. Unlike Grain, the block is widened by two bits when ``max_index``
is an even power of two >= 2**16, where Grain's output is not a permutation.

Example:
    >>> perm = [index_shuffle(i, max_index=9, seed=42) for i in range(10)]
    >>> sorted(perm) == list(range(10))
    True
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

ROUNDS = 4
_MASK32 = 0xFFFFFFFF
_MIN_BLOCK_BITS = 16


def block_bits(max_index: int) -> int:
    """Bit width of the cipher block used to permute ``[0, max_index]``."""
    if max_index <= 0:
        return _MIN_BLOCK_BITS
    bits = int(math.ceil(math.log2(max_index)))
    bits = max(bits + bits % 2, _MIN_BLOCK_BITS)
    if max_index >= (1 << bits):  # Grain's width would drop the top index here.
        bits += 2
    return bits


def round_keys(seed: int, rounds: int = ROUNDS) -> list[int]:
    """The ``rounds`` 32-bit round keys ``std::seed_seq{seed}.generate`` produces."""
    return [int(k) for k in _seed_seq(np.asarray(seed, dtype=np.uint64) & _MASK32, rounds, np)]


def _seed_seq(seed: Any, n: int, xp: Any) -> list[Any]:
    """C++ ``std::seed_seq`` with one input word, for ``xp`` arrays. Values not depending on
    ``seed`` stay Python ints, so a traced call stages only the steps that read the seed."""
    if xp is np:
        seed = np.asarray(seed, dtype=np.uint64) & np.uint64(_MASK32)
        const: Any = np.uint64

        def wrap(x: Any) -> Any:
            return x & np.uint64(_MASK32)
    else:
        seed = jnp.asarray(seed).astype(jnp.uint32)
        const = np.uint32  # a NumPy scalar: not staged, and uint32 arithmetic wraps

        def wrap(x: Any) -> Any:
            return x

    def lift(x: Any) -> Any:
        return const(x) if isinstance(x, int) else x

    def add(x: Any, y: Any) -> Any:
        if isinstance(x, int) and isinstance(y, int):
            return (x + y) & _MASK32
        return wrap(lift(x) + lift(y))

    def sub(x: Any, c: int) -> Any:
        if isinstance(x, int):
            return (x - c) & _MASK32
        return wrap(x - const(c))

    def xor(x: Any, y: Any) -> Any:
        if isinstance(x, int) and isinstance(y, int):
            return x ^ y
        return lift(x) ^ lift(y)

    def mul(c: int, x: Any) -> Any:
        if isinstance(x, int):
            return (x * c) & _MASK32
        return wrap(x * const(c))

    def tmix(x: Any) -> Any:
        return xor(x, x >> 27 if isinstance(x, int) else x >> const(27))

    s = 1
    out: list[Any] = [0x8B8B8B8B] * n
    if n >= 623:
        t = 11
    elif n >= 68:
        t = 7
    elif n >= 39:
        t = 5
    elif n >= 7:
        t = 3
    else:
        t = (n - 1) // 2
    p = (n - t) // 2
    q = p + t
    m = max(s + 1, n)

    for k in range(m):
        r1 = mul(1664525, tmix(xor(xor(out[k % n], out[(k + p) % n]), out[(k - 1) % n])))
        if k == 0:
            r2 = add(r1, s)
        elif k <= s:
            r2 = add(add(r1, k % n), seed)
        else:
            r2 = add(r1, k % n)
        out[(k + p) % n] = add(out[(k + p) % n], r1)
        out[(k + q) % n] = add(out[(k + q) % n], r2)
        out[k % n] = r2
    for k in range(m, m + n):
        r3 = mul(1566083941, tmix(add(add(out[k % n], out[(k + p) % n]), out[(k - 1) % n])))
        r4 = sub(r3, k % n)
        out[(k + p) % n] = xor(out[(k + p) % n], r3)
        out[(k + q) % n] = xor(out[(k + q) % n], r4)
        out[k % n] = r4
    zero = seed * const(0)  # a word the seed never reached: still one per seed
    return [add(zero, v) if isinstance(v, int) else v for v in out]


def _encrypt(value: Any, keys: list[Any], half: int, one: Any) -> Any:
    """One pass of the Feistel cipher on ``2*half``-bit blocks (``one``: the dtype's 1)."""
    mask = (one << half) - one
    h = one * half

    def rotl(x: Any, r: int) -> Any:
        if r % half == 0:  # a whole turn: x itself (x holds ``half`` bits)
            return x
        return ((x << (one * r)) | (x >> (h - one * r))) & mask

    def f(x: Any) -> Any:
        return (rotl(x, 1) & rotl(x, 8)) ^ rotl(x, 2)

    left = (value >> h) & mask
    right = value & mask
    for i in range(0, len(keys), 2):
        left = left ^ f(right) ^ (keys[i] & mask)
        right = right ^ f(left) ^ (keys[i + 1] & mask)
    return (left << h) | right


def index_shuffle(index: int, max_index: int, seed: int, rounds: int = ROUNDS) -> int:
    """Position of ``index`` in the permutation of ``[0, max_index]`` given by ``seed``
    (an int >= 0, taken mod ``2**32``)."""
    if not 0 <= index <= max_index:
        raise ValueError(f"index must be in [0, {max_index}], got {index}.")
    seed = int(_host_seed(seed, "index_shuffle"))
    if max_index == 0:
        return 0
    half = block_bits(max_index) // 2
    keys = round_keys(seed, rounds)
    value = index
    while True:
        value = _encrypt(value, keys, half, 1)
        if value <= max_index:
            return value


SMALL_DOMAIN = 1 << _MIN_BLOCK_BITS
_TABLE_RATIO = 4  # use successor tables when cycle walking averages > 4 encryptions


def uses_small_table(max_index: int) -> bool:
    """Whether ``[0, max_index]`` is small enough that a 2**16-entry table beats cycle walking."""
    return 0 < max_index and SMALL_DOMAIN > _TABLE_RATIO * (max_index + 1)


# 128 (<= 16 MiB): a mixture or concatenation of small sources reads one per child and epoch
@functools.lru_cache(maxsize=128)
def small_permutation(length: int, seed: int) -> np.ndarray:
    """The whole permutation of ``[0, length)`` for small ``length`` (cached, read-only)."""
    keys = _seed_seq(np.asarray(seed, dtype=np.uint64) & np.uint64(_MASK32), ROUNDS, np)
    domain = np.arange(SMALL_DOMAIN, dtype=np.uint64)
    target = _encrypt(domain, keys, _MIN_BLOCK_BITS // 2, np.uint64(1)).astype(np.int64)
    found = target < length
    while not found[:length].all():
        target, found = np.where(found, target, target[target]), found | found[target]
    out = target[:length].copy()
    out.setflags(write=False)
    return out


def index_shuffle_np(
    indices: np.ndarray, max_index: int, seed: int | np.ndarray, rounds: int = ROUNDS
) -> np.ndarray:
    """Vectorised :func:`index_shuffle`; ``seed`` may be an array broadcastable to ``indices``.

    Example:
        >>> index_shuffle_np(np.array([10]), 9, 0)
        Traceback (most recent call last):
        ...
        ValueError: index_shuffle_np indices must be in [0, 9] (positions of the permutation of [0, max_index]), got 10..10.
    """
    idx = _checked_indices(indices, max_index)
    seed = _host_seed(seed, "index_shuffle_np")
    if max_index == 0:
        return np.zeros_like(idx, dtype=np.int64)
    if rounds == ROUNDS and uses_small_table(max_index):
        seeds = np.broadcast_to(np.asarray(seed, dtype=np.uint64) & np.uint64(_MASK32), idx.shape)
        out = np.empty(idx.shape, dtype=np.int64)
        for value in np.unique(seeds):
            mask = seeds == value
            out[mask] = small_permutation(max_index + 1, int(value))[idx[mask].astype(np.int64)]
        return out
    half = block_bits(max_index) // 2
    keys = _seed_seq(np.asarray(seed, dtype=np.uint64) & np.uint64(_MASK32), rounds, np)
    one = np.uint64(1)
    limit = np.uint64(max_index)
    if np.ndim(seed) == 0:  # cycle-walk only the values still out of range
        value = _encrypt(idx, keys, half, one)
        flat = value.reshape(-1)
        pending = np.flatnonzero(flat > limit)
        while pending.size:
            walked = _encrypt(flat[pending], keys, half, one)
            flat[pending] = walked
            pending = pending[walked > limit]
        return value.astype(np.int64)
    value = idx
    pending = np.ones(value.shape, dtype=bool)
    while True:
        value = np.where(pending, _encrypt(value, keys, half, one), value)
        pending = value > limit
        if not pending.any():
            return value.astype(np.int64)


def _checked_indices(indices: Any, max_index: int) -> np.ndarray:
    """``indices`` as uint64, refused unless integers in ``[0, max_index]`` (a position out
    of range would name a record twice)."""
    given = np.asarray(indices)
    where = "index_shuffle_np"
    if max_index < 0:
        raise ValueError(f"{where} max_index must be >= 0 (the permutation is of "
                         f"[0, max_index]), got {max_index}.")
    if given.size == 0:
        return given.astype(np.uint64)
    if given.dtype.kind not in "iu":
        raise ValueError(f"{where} indices must be integers, got dtype {given.dtype}; "
                         "pass positions as an int array.")
    low, high = int(given.min()), int(given.max())
    if low < 0 or high > max_index:
        raise ValueError(f"{where} indices must be in [0, {max_index}] (positions of the "
                         f"permutation of [0, max_index]), got {low}..{high}.")
    return given.astype(np.uint64)


def _host_seed(seed: Any, where: str) -> np.ndarray:
    """``seed`` (an int or int array) as uint64 words mod ``2**32``; a negative or
    non-integer seed is refused (it would be cast to some other seed)."""
    if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0:
        return np.asarray(seed & _MASK32, dtype=np.uint64)
    given = np.asarray(seed)
    if given.dtype.kind not in "iu":
        raise ValueError(f"{where} seed must be an int (or int array), got {type(seed).__name__} "
                         f"{seed!r}.")
    if given.size and int(given.min()) < 0:
        raise ValueError(f"{where} seed must be >= 0 (taken mod 2**32), got {int(given.min())}.")
    return given.astype(np.uint64) & np.uint64(_MASK32)


def index_shuffle_jnp(indices: Any, max_index: int, seed: Any, rounds: int = ROUNDS) -> Any:
    """Traceable :func:`index_shuffle` (static ``max_index`` < 2**32); int32 positions
    (uint32 when ``max_index`` >= 2**31)."""
    if max_index >= 2**32:
        raise ValueError(f"index_shuffle_jnp supports up to 2**32 records, got {max_index + 1}.")
    idx = jnp.asarray(indices).astype(jnp.uint32)
    out_dtype = jnp.int32 if max_index < 2**31 else jnp.uint32
    if max_index == 0:
        return jnp.zeros(idx.shape, out_dtype)
    half = block_bits(max_index) // 2
    keys = _seed_seq(_seed32(seed), rounds, jnp)
    one = np.uint32(1)  # NumPy constants: computed here, not staged
    limit = np.uint32(max_index)

    def body(carry: Any) -> Any:
        value, pending = carry
        value = jnp.where(pending, _encrypt(value, keys, half, one), value)
        return value, value > limit

    value, _ = lax.while_loop(lambda c: jnp.any(c[1]), body,
                              (idx, jnp.ones(idx.shape, jnp.bool_)))
    return value.astype(out_dtype)


def epoch_permutation_jnp(positions: Any, length: int, seed: Any) -> Any:
    """Record index served at each global position ``p >= 0`` (epoch ``p // length`` uses
    ``seed + epoch``). Compiled cycle walking beats a table even for tiny data sets."""
    positions = jnp.asarray(positions)
    # positions are >= 0: C division is floor division (fewer ops than jnp's % and //)
    size = np.asarray(length, positions.dtype)
    within = lax.rem(positions, size)
    epoch = lax.div(positions, size)
    return index_shuffle_jnp(within, length - 1, _seed32(seed) + epoch.astype(jnp.uint32))


def _seed32(seed: Any) -> Any:
    if isinstance(seed, (int, np.integer)):
        return jnp.uint32(int(seed) & _MASK32)
    return jnp.asarray(seed).astype(jnp.uint32)
