"""The per-record draw (draw version 2): one call for a record's random words, then plain
arithmetic for every number an operator needs.

Each ``jax.random`` call is one threefry evaluation XLA compiles apart, so an operator
asks :func:`words` for every word it needs at once (none at all up to the key's own 64
bits) and turns them into numbers with :func:`uniform` and :func:`integer`. Values stay a
pure function of the record's key: the same at any batch size, resume or host.
:data:`DRAW_VERSION` is recorded in a saved state; another version is refused.

Example:
    >>> import jax
    >>> key = jax.random.key(3)
    >>> w = words(key, 3)
    >>> w.shape, str(w.dtype)
    ((3,), 'uint32')
    >>> bool(0.2 <= uniform(w[0], 0.2, 0.4) < 0.4), int(integer(w[1], 5, 6))
    (True, 5)
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

#: the version of the per-record derivation of random values
DRAW_VERSION = 2


def words(key: Any, count: int) -> Any:
    """``count`` random uint32 words of one record's ``key`` (typed or raw key data), in one
    threefry evaluation, or none: up to the key data's own size they are its words."""
    typed = jax.dtypes.issubdtype(getattr(key, "dtype", np.dtype(np.uint32)), jax.dtypes.prng_key)
    data = jnp.ravel(jax.random.key_data(key) if typed else jnp.asarray(key))
    if count <= data.shape[0]:
        return data[:count].astype(jnp.uint32)
    typed_key = key if typed else jax.random.wrap_key_data(key)
    return jax.random.bits(typed_key, (count,), jnp.uint32)


def unit(word: Any) -> Any:
    """A float32 in [0, 1) from a word's high 23 bits (what ``jax.random.uniform`` does
    with its bits)."""
    one = jnp.uint32(0x3F800000)  # 1.0f: a mantissa of random bits makes [1, 2)
    value = jax.lax.bitcast_convert_type((jnp.asarray(word, jnp.uint32) >> 9) | one, jnp.float32)
    return value - 1.0


def uniform(word: Any, low: Any = 0.0, high: Any = 1.0) -> Any:
    """A float32 in ``[low, high)`` from one word (``low`` when they are equal)."""
    low = jnp.asarray(low, jnp.float32)
    high = jnp.asarray(high, jnp.float32)
    return jnp.clip(low + unit(word) * (high - low), low, jnp.maximum(low, jnp.nextafter(high, low)))


def integer(word: Any, low: Any, high: Any) -> Any:
    """An int32 in ``[low, high)`` from one word (``high > low``; spans up to 2**24 are
    drawn evenly to within 2**-24)."""
    low = jnp.asarray(low, jnp.int32)
    span = jnp.asarray(high, jnp.int32) - low
    offset = jnp.floor(unit(word) * span.astype(jnp.float32)).astype(jnp.int32)
    return low + jnp.clip(offset, 0, jnp.maximum(span - 1, 0))


def _normal(word: Any) -> Any:
    """A standard normal float32 from one word (inverse CDF of a uniform in (0, 1))."""
    half_step = jnp.float32(2.0**-24)
    return jax.scipy.special.ndtri(unit(word) + half_step)


@functools.partial(jax.jit, static_argnames="a")  # one compile when called eagerly
def symmetric_beta(keys: Any, a: float) -> Any:
    """One ``Beta(a, a)`` float32 per key of ``keys`` (shape ``(n,)``), exact in law.

    Each value is ``G1 / (G1 + G2)`` of two ``Gamma(a)`` variates (Marsaglia-Tsang for
    ``Gamma(a + 1)`` times ``U ** (1 / a)``, in log space). Try ``t`` of a record uses
    words of ``fold_in(key, t)``, so its value depends on its own key alone; cheaper to
    compile than ``jax.random.beta`` under ``vmap``.

    Example:
        >>> import jax
        >>> lam = symmetric_beta(jax.random.split(jax.random.key(0), 3), 0.4)
        >>> lam.shape, bool(((lam >= 0) & (lam <= 1)).all())
        ((3,), True)
    """
    d = jnp.float32(a + 1.0 - 1.0 / 3.0)
    c = 1.0 / jnp.sqrt(9.0 * d)
    inv_a = jnp.float32(1.0 / a)
    n = keys.shape[0]

    def tries(t: Any) -> tuple[Any, Any]:
        """Per record and gamma: a log Gamma(a) candidate and whether it is accepted."""
        w = jax.vmap(lambda k: jax.vmap(lambda j: words(jax.random.fold_in(k, 3 * t + j), 2))(
            jnp.arange(3, dtype=jnp.uint32)))(keys)  # (n, 3, 2): fold_in is the cheap call
        w = w.transpose(0, 2, 1)  # (n, gamma, word)
        x = _normal(w[..., 0])
        v = (1.0 + c * x) ** 3
        log_u = jnp.log1p(-unit(w[..., 1]))  # log of a uniform in (0, 1]
        log_v = jnp.log(jnp.maximum(v, jnp.float32(1e-30)))
        accept = (v > 0) & (log_u < 0.5 * x * x + d - d * v + d * log_v)
        log_boost = jnp.log1p(-unit(w[..., 2])) * inv_a  # log U ** (1 / a)
        return jnp.log(d) + log_v + log_boost, accept

    def step(state: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        t, log_g, done = state
        cand, accept = tries(t)
        take = accept & ~done
        return t + 1, jnp.where(take, cand, log_g), done | accept

    def pending(state: tuple[Any, Any, Any]) -> Any:
        return ~state[2].all()

    start = (jnp.uint32(0), jnp.zeros((n, 2), jnp.float32), jnp.zeros((n, 2), bool))
    _, log_g, _ = jax.lax.while_loop(pending, step, start)
    return jax.nn.sigmoid(log_g[:, 0] - log_g[:, 1])
