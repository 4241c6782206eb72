"""The per-record draw (draw version 2): one call for a record's random words, then plain
arithmetic for every number an operator needs.

Each ``jax.random`` call (``uniform``, ``randint``, ``split``, ``fold_in``) is one
threefry evaluation in the compiled program, and XLA compiles each one apart: under
``jax.vmap`` a chain of ~20 such calls per record made most of an augmentation step's
compile time. An operator of draw version 2 asks :func:`words` for every random word it
needs at once (no threefry at all for at most a key's own 64 bits: a record key is
already threefry output) and turns them into numbers with :func:`uniform` and
:func:`integer`; one that also needs a field of values (noise over the image) draws it
from the key itself, its one ``jax.random`` call. Values stay a pure function of the record's key, so of (seed, epoch,
record index): the same at any batch size, after any resume and on any host.

:data:`DRAW_VERSION` names this derivation; a saved Pipeline state records it when the
pipeline draws (``settings["draw"]``), and a state of another version is refused
(docs/reliability.md), since its remaining batches would not be the ones it saw.

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

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

#: the version of the per-record derivation of random values (see the module docstring);
#: 1: each operator drew with its own ``jax.random`` calls (datarax before it)
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
