"""Per-record random keys: one derivation every stochastic stage shares.

A record's key depends only on the stage's base key, the epoch and the record's
stable index, so its augmentation is the same at any batch size, in any shuffle
order, on any host and after any resume, and changes from epoch to epoch.

Example:
    >>> import jax, jax.numpy as jnp
    >>> base = jax.random.key(0)
    >>> a = record_keys(base, 0, jnp.array([5, 7]))
    >>> b = record_keys(base, 0, jnp.array([7]))
    >>> bool((jax.random.key_data(a[1]) == jax.random.key_data(b[0])).all())
    True
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.core.errors import ConfigError, DataraxError


#: a stable index from here on is keyed by both its 32-bit words (see :func:`index_words`)
WIDE_FROM = 2**32


def record_keys(base_key: Any, epoch: Any, record_indices: Any) -> Any:
    """Keys for each record: ``fold_in(fold_in(base_key, epoch), index)`` (wide indices:
    see :func:`index_words`)."""
    epoch_key = jax.random.fold_in(base_key, jnp.asarray(epoch, jnp.uint32))
    indices = jnp.asarray(record_indices).astype(jnp.uint32)
    if indices.ndim == 2:  # wide: (low, high) words
        def wide(words: Any) -> Any:
            key = jax.random.fold_in(epoch_key, words[0])
            return jax.lax.cond(words[1] != 0, lambda: jax.random.fold_in(key, words[1]),
                                lambda: key)
        return jax.vmap(wide)(indices)
    return jax.vmap(lambda i: jax.random.fold_in(epoch_key, i))(indices)


def index_words(indices: Any) -> np.ndarray:
    """The ``(n, 2)`` uint32 ``(low, high)`` words of int64 stable ``indices``. A key is
    ``fold_in(row, low)``, then ``fold_in(.., high)`` where ``high`` is not 0: an index
    below ``2**32`` keeps its key, every other gets its own.

    >>> index_words([5, 2**32 + 5]).tolist()
    [[5, 0], [5, 1]]
    """
    indices = np.asarray(indices, np.int64)
    return np.stack([indices & 0xFFFFFFFF, indices >> 32], -1).astype(np.uint32)


def step_indices(indices: Any, wide: bool, source: Any) -> np.ndarray:
    """What a step takes for a batch's stable ``indices``: :func:`index_words` where
    ``wide``, else int32; a narrow pass given an index past ``2**32`` is refused, naming
    ``source`` (its key would repeat another record's).

    >>> step_indices(np.asarray([3, 4]), False, None).dtype, step_indices([3], True, None).shape
    (dtype('int32'), (1, 2))
    """
    if wide:
        return index_words(indices)
    indices = np.asarray(indices)
    if indices.size and int(indices.max()) >= WIDE_FROM:
        name, first = type(source).__name__, int(indices[indices >= WIDE_FROM][0])
        raise DataraxError(
            f"{name} gave a record stable index {first}, past 2**32, though "
            "its stable_index_bound() (or its length) says its indices stay below that: "
            "its per-record key would repeat that of the record 2**32 below it. Make "
            f"{name}.stable_index_bound() return a bound of its indices (None: unbounded)."
        )
    return indices.astype(np.int32)


def stage_record_keys(pipeline_key: Any, positions: Any, epoch: Any, record_indices: Any) -> Any:
    """``(len(positions), records)`` keys: row ``s`` is ``record_keys(fold_in(pipeline_key,
    positions[s]), epoch, record_indices)``, every stage's derived together.

    >>> import jax, jax.numpy as jnp
    >>> key = jax.random.key(0)
    >>> both = stage_record_keys(key, [1, 3], 2, jnp.array([4, 9]))
    >>> one = record_keys(jax.random.fold_in(key, 3), 2, jnp.array([4, 9]))
    >>> both.shape, bool((jax.random.key_data(both[1]) == jax.random.key_data(one)).all())
    ((2, 2), True)
    """
    positions = jnp.asarray(positions, jnp.uint32)
    bases = jax.vmap(lambda p: jax.random.fold_in(pipeline_key, p))(positions)
    return jax.vmap(lambda base: record_keys(base, epoch, record_indices))(bases)


class StepKeys(NamedTuple):
    """A pass's keys, drawn on the host with NumPy: ``pipeline`` (``fold_in(key, count)``)
    and ``stages``, row ``p - 1`` ``fold_in(fold_in(pipeline, p), epoch)``. Bit for bit
    the keys :func:`stage_record_keys` derives in-step, with less threefry work."""

    pipeline: Any
    stages: Any


def step_keys(key: Any, count: Any, positions: int, epoch: int) -> Any:
    """:class:`StepKeys` of a pass over ``epoch`` with ``positions`` stage positions, or
    the ``(key, count)`` pair as it is where the key is not raw threefry data.

    >>> import jax
    >>> keys = step_keys(np.asarray([0, 7], np.uint32), np.uint32(2), 3, 5)
    >>> expect = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(
    ...     jax.random.key(7), 2), 3), 5)
    >>> keys.stages.shape, keys.stages[2].tolist() == jax.random.key_data(expect).tolist()
    ((3, 2), True)
    """
    data = np.asarray(key) if isinstance(key, np.ndarray) else None
    if (data is None or data.shape != (2,) or data.dtype != np.uint32
            or str(jax.config.jax_default_prng_impl) != "threefry2x32"):
        return key, count
    pipeline = host_fold_in(data, int(count))
    rows = host_fold_in(host_fold_in(pipeline, np.arange(1, positions + 1)), epoch)
    return StepKeys(pipeline, rows.reshape(positions, 2))


def step_key(key: Any) -> Any:
    """The pipeline key (typed, traceable) of a step's ``key`` argument: a
    :class:`StepKeys` or a ``(key, count)`` pair."""
    if isinstance(key, StepKeys):
        return jax.random.wrap_key_data(key.pipeline)
    return draw(*key)


def for_stages(key: Any) -> Any:
    """A step's ``key`` as :func:`~datarax.core.stages.apply_stages` takes it."""
    return key if isinstance(key, StepKeys) else draw(*key)


def _threefry(k0: Any, k1: Any, x1: Any, add: Any, xor: Any, rotate: Any) -> tuple[Any, Any]:
    """Threefry-2x32 of the block ``(0, x1)`` under ``(k0, k1)`` (``fold_in``'s rounds),
    over the caller's uint32 ``add``, ``xor`` and ``rotate``: NumPy's or ``lax``'s."""
    ks = (k0, k1, xor(xor(k0, k1), np.uint32(0x1BD11BDA)))
    x0, x1 = ks[0], add(x1, ks[1])  # the block (0, x1), keyed
    for block in range(5):
        for r in ((13, 15, 26, 6), (17, 29, 16, 24))[block % 2]:
            x0 = add(x0, x1)
            x1 = xor(rotate(x1, r), x0)
        x0 = add(x0, ks[(block + 1) % 3])
        x1 = add(add(x1, ks[(block + 2) % 3]), np.uint32(block + 1))
    return x0, x1


def host_fold_in(key: Any, data: Any) -> np.ndarray:
    """``key_data(fold_in(k, data))`` for raw threefry data ``key`` (``(..., 2)`` uint32),
    computed with NumPy; ``data`` broadcasts against the keys."""
    key = np.asarray(key, np.uint32)
    x1 = np.asarray(np.asarray(data, np.int64) & 0xFFFFFFFF, np.uint32)
    k0, k1, x1 = (np.array(a).reshape(-1) for a in np.broadcast_arrays(key[..., 0],
                                                                        key[..., 1], x1))
    x0, x1 = _threefry(k0, k1, x1, np.add, np.bitwise_xor,  # arrays (1-d): wrapping adds
                       lambda x, r: (x << np.uint32(r)) | (x >> np.uint32(32 - r)))
    return np.stack([x0, x1], -1).reshape(np.broadcast(key[..., 0], data).shape + (2,))


def fold_in_rows(rows: Any, records: Any) -> Any:
    """``(len(rows), len(records), 2)`` uint32 key data: entry ``[s, r]`` is the data of
    ``jax.random.fold_in(wrap_key_data(rows[s]), records[r])`` for threefry rows
    (``(n, 2)`` uint32), bit for bit (traceable). On ``lax`` ops: far cheaper to lower
    than JAX's ``fold_in`` under ``vmap``.

    >>> import jax
    >>> rows = np.asarray([[0, 7], [3, 9]], np.uint32)
    >>> got = fold_in_rows(rows, np.asarray([5, 6], np.uint32))
    >>> want = jax.random.fold_in(jax.random.wrap_key_data(rows[1]), np.uint32(6))
    >>> got.shape, got[1, 1].tolist() == jax.random.key_data(want).tolist()
    ((2, 2, 2), True)
    """
    lax = jax.lax  # lax throughout: no promotion or broadcast ops to lower
    rows = lax.convert_element_type(rows, np.uint32)
    records = lax.convert_element_type(records, np.uint32)
    high = None
    if records.ndim == 2:  # wide: the (low, high) words of index_words
        records, high = (lax.index_in_dim(records, i, 1, keepdims=False) for i in (0, 1))
    shape = (rows.shape[0], records.shape[0])
    k0, k1 = (lax.broadcast_in_dim(lax.index_in_dim(rows, i, 1, keepdims=False), shape, (0,))
              for i in (0, 1))
    x0, x1 = _lax_threefry(k0, k1, lax.broadcast_in_dim(records, shape, (1,)))
    if high is not None:  # fold_in(that, high) where high is not 0
        high = lax.broadcast_in_dim(high, shape, (1,))
        y0, y1 = _lax_threefry(x0, x1, high)
        wide = lax.ne(high, lax.full_like(high, 0))
        x0, x1 = lax.select(wide, y0, x0), lax.select(wide, y1, x1)
    return lax.concatenate([lax.expand_dims(x0, (2,)), lax.expand_dims(x1, (2,))], 2)


def _lax_threefry(k0: Any, k1: Any, x1: Any) -> tuple[Any, Any]:
    """:func:`_threefry` on ``lax`` ops (uint32 arrays of one shape)."""
    lax = jax.lax
    return _threefry(k0, k1, x1, lax.add, lax.bitwise_xor, lambda x, r: lax.bitwise_or(
        lax.shift_left(x, np.uint32(r)), lax.shift_right_logical(x, np.uint32(32 - r))))


def check_rngs(rngs: Any, owner: str) -> None:
    """Refuse an ``rngs`` that is neither None nor an ``nnx.Rngs``."""
    if rngs is not None and not isinstance(rngs, nnx.Rngs):
        raise ConfigError(
            f"{owner} rngs must be an nnx.Rngs or None, got {type(rngs).__name__} "
            f"{repr(rngs)[:80]}. Pass rngs=nnx.Rngs(seed), e.g. rngs=nnx.Rngs(0)."
        )


def reserve_draw(rngs: Any, stream: str, owner: str) -> tuple[Any, Any]:
    """Reserve one draw of an ``nnx.Rngs`` stream without running device code.

    Returns ``(key, count)``: :func:`draw` of it is exactly the key ``rngs[stream]()``
    would have returned, and the counter advances as if called. The ``fold_in`` is
    deferred into the compiled step, so construction compiles nothing.
    """
    check_rngs(rngs, owner)
    try:
        rng_stream = rngs[stream]
    except (KeyError, AttributeError) as err:
        missing = "no 'default' stream" if stream == "default" else (
            f"no stream '{stream}' and no 'default' stream")
        raise ConfigError(
            f"{owner}: rngs has {missing}; pass nnx.Rngs({stream}=seed) or nnx.Rngs(seed)."
        ) from err
    key = rng_stream.key.get_value()
    count = np.asarray(rng_stream.count.get_value(), dtype=np.uint32)
    rng_stream.count.set_value(jnp.asarray(count + np.uint32(1), dtype=jnp.uint32))
    if str(jax.random.key_impl(key)) == str(jax.config.jax_default_prng_impl):
        # raw key data: plain arrays that Orbax saves
        key = np.asarray(jax.random.key_data(key))
    return key, count


def seed_key(seed: Any, owner: str) -> tuple[Any, Any]:
    """:func:`reserve_draw`'s pair for ``nnx.Rngs(seed)``, without building one (nor, for
    threefry keys, device work). ``seed``: an int in [0, 2**32).

    >>> key, count = seed_key(7, "Pipeline")
    >>> key.tolist(), int(count)
    ([0, 7], 0)
    """
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        shown = " ".join(repr(seed).split())[:80]  # a key array's repr spans lines
        raise ConfigError(
            f"{owner} seed must be an int, got {type(seed).__name__} {shown}. "
            f"{_seed_hint(seed)}"
        )
    if not 0 <= int(seed) < 2**32:
        raise ConfigError(
            f"{owner} seed must be in [0, 2**32), got {int(seed)}. It seeds 32-bit keys: "
            "give one in that range (seed % 2**32 for a wider one)."
        )
    if str(jax.config.jax_default_prng_impl) == "threefry2x32":
        key = np.asarray([0, int(seed)], np.uint32)  # jax.random.key(seed)'s data
    else:
        key = np.asarray(jax.random.key_data(jax.random.key(int(seed))))
    return key, np.asarray(0, np.uint32)


def _seed_hint(seed: Any) -> str:
    """What to pass instead of ``seed``, a value :func:`seed_key` refused."""
    dtype = getattr(seed, "dtype", None)
    if dtype is not None and (jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key) or (
            getattr(seed, "shape", None) == (2,) and np.dtype(dtype) == np.uint32)):  # raw key
        return "A JAX key goes in rngs=nnx.Rngs(key) instead of seed=."
    if dtype is not None and getattr(seed, "shape", None) == () \
            and np.issubdtype(np.dtype(dtype), np.integer):
        return "Pass int(seed), a Python int in [0, 2**32)."
    return "Give an int in [0, 2**32), e.g. seed=0."


def draw(key: Any, count: Any) -> Any:
    """The key a reserved draw stands for (traceable); ``key`` may be raw key data."""
    if not jax.dtypes.issubdtype(getattr(key, "dtype", np.dtype(np.uint32)), jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)
    return jax.random.fold_in(key, count)


def default_key() -> Any:
    """The raw data of ``jax.random.key(0)`` (``draw`` wraps it), built without device work."""
    return np.zeros((2,), np.uint32)


def child_keys(keys: Any, position: int) -> Any:
    """Per-record child keys for a whole batch of record keys."""
    if keys is None:
        return None
    return jax.vmap(lambda k: jax.random.fold_in(k, position))(keys)
