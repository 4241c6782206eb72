"""The compiled step of a filtered pass over an indexed source: full batches of kept
records from an epoch position (see :mod:`datarax.pipeline.filtered` for the pass)."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from flax import nnx
from jax import lax

from datarax.core.batch import gather_rows
from datarax.core.errors import SourceContractError
from datarax.core.keys import for_stages
from datarax.core.stages import apply_stages, filtered
from datarax.core.compiled_store import stored_jit
from datarax.core.step_cache import cached
from datarax.pipeline.plan import passed
from datarax.pipeline.steps import indexed_batch
from datarax.typing import Batch


def spec_key(spec: Any) -> Any:
    """A hashable form of a per-record spec (None: not all numeric)."""
    leaves, tree = jax.tree.flatten(spec)
    if not all(isinstance(s, jax.ShapeDtypeStruct) for s in leaves):
        return None
    return tree, tuple((tuple(s.shape), np.dtype(s.dtype).str) for s in leaves)


def filtered_step(graphdef: Any, batch_size: int, group: int, at: int, fuse: bool,
                  read_spec: Any = None, by_position: bool = False) -> Any:
    """Compiled ``(state, inputs, begin, end, base, epoch, key) -> (batches, indices,
    kept, ends)``: the next ``group`` batches of kept records from epoch position
    ``begin`` (of ``[begin, end)``; the shard starts at global ``base``). ``ends[k]``:
    the epoch position after batch ``k``'s last record. ``fuse``: the stages after the
    filter run here too. ``read_spec``: :func:`spec_key` of the records, sparing a second
    trace of the read."""
    rows = group * batch_size

    def step(state: Any, inputs: Any, begin: Any, end: Any, base: Any, epoch: Any,
             key: Any) -> Any:
        source, stages = nnx.merge(graphdef, state)
        stages = list(stages)
        pre, filt = stages[:at], stages[at]
        post = [passed] * at + [filtered] + stages[at + 1:]

        def chunk(p: Any) -> Any:  # the chunk at p, read and staged as a plain batch is
            batch, indices = indexed_batch(source, pre, inputs, lax.add(base, p), epoch, key,
                                           batch_size, by_position)
            pos = _positions(p, batch_size)
            inside = lax.bitwise_and(lax.ge(pos, _spread(begin, batch_size)),
                                     lax.lt(pos, _spread(end, batch_size)))
            mask = lax.bitwise_and(filt.keep(batch), inside)
            return (batch, lax.convert_element_type(indices, np.int32), pos), mask

        first = lax.sub(begin, lax.rem(begin, np.asarray(batch_size, begin.dtype)))  # begin >= 0
        if read_spec is None:
            shapes = jax.eval_shape(chunk, first)[0]
        else:
            tree, leaves = read_spec
            records = jax.tree.unflatten(tree, [
                jax.ShapeDtypeStruct((batch_size, *shape), np.dtype(dtype))
                for shape, dtype in leaves])
            shapes = (records, jax.ShapeDtypeStruct((batch_size,), np.int32),
                      jax.ShapeDtypeStruct((batch_size,), begin.dtype))

        def more(carry: Any) -> Any:
            p, kept, _ = carry
            return lax.bitwise_and(lax.lt(kept, np.int32(rows)), lax.lt(p, end))

        def packed(p: Any, kept: Any, buffer: Any, values: Any, mask: Any) -> Any:
            """``buffer`` with the kept ``values`` of the chunk at ``p`` appended (their
            positions alone where ``values`` is None)."""
            buffer, count = _appended(buffer, kept, p, values, mask)
            step = np.asarray(batch_size, p.dtype)
            return lax.add(p, step), lax.min(lax.add(kept, count), np.int32(rows)), buffer

        def checked_chunk(p: Any) -> Any:
            values, mask = chunk(p)
            got = jax.tree.map(lambda v: (v.shape[1:], v.dtype), values)
            want = jax.tree.map(lambda v: (v.shape[1:], v.dtype), shapes)
            if got != want:
                raise SourceContractError(
                    f"the records the source reads, {got}, differ from its element_spec() "
                    f"(rows of {want}); make element_spec() describe get_batch_at()."
                )
            return values, mask

        if at == 0 and by_position:
            # pack the kept positions, then read just those records in one gather
            def body(carry: Any) -> Any:
                p, kept, buffer = carry
                _, mask = checked_chunk(p)
                return packed(p, kept, buffer, None, mask)

            _, kept, pos = lax.while_loop(
                more, body, (first, np.int32(0), lax.full((rows + batch_size,), 0, begin.dtype))
            )
            pos = lax.slice_in_dim(pos, 0, rows)  # past kept: read (as position 0), cut
            pos = lax.select(lax.lt(lax.iota(np.int32, rows), _spread(kept, rows)), pos,
                             lax.full_like(pos, 0))

            def read_one(q: Any) -> Any:  # the record at shard position q (rows past kept: 0)
                batch, indices = indexed_batch(source, [], inputs, lax.add(base, q), epoch, key,
                                               1, by_position)
                return (jax.tree.map(_first_row, batch),
                        lax.convert_element_type(_first_row(indices), np.int32))

            data, indices = jax.vmap(read_one)(pos)
        else:
            def body(carry: Any) -> Any:
                p, kept, buffer = carry
                values, mask = checked_chunk(p)
                return packed(p, kept, buffer, values, mask)

            empty = jax.tree.map(
                lambda s: lax.full((rows + batch_size, *s.shape[1:]), 0, s.dtype), shapes)
            _, kept, buffer = lax.while_loop(more, body, (first, np.int32(0), empty))
            data, indices, pos = jax.tree.map(lambda v: lax.slice_in_dim(v, 0, rows), buffer)
        # lax, not jnp: each jnp operator is one more jitted wrapper to trace and lower
        full = lax.ge(_spread(kept, group), np.arange(1, group + 1, dtype=np.int32) * batch_size)
        last = lax.add(lax.slice(pos, (batch_size - 1,), (rows,), (batch_size,)),
                       np.asarray(1, pos.dtype))
        ends = lax.select(full, last, _spread(end, group))
        stacked = jax.tree.map(lambda v: lax.reshape(v, (group, batch_size, *v.shape[1:])), data)
        rows_of = lax.reshape(indices, (group, batch_size))
        if fuse:
            def staged(args: Any) -> Batch:
                return apply_stages(post, dict(args[0]), args[1], epoch, for_stages(key))

            stacked = lax.map(staged, (stacked, rows_of)) if group > 1 else \
                jax.tree.map(lambda v: lax.expand_dims(v, (0,)),
                             staged(jax.tree.map(_first_row, (stacked, rows_of))))
        batches = tuple(jax.tree.map(lambda v, i=i: lax.index_in_dim(v, i, keepdims=False),
                                     stacked) for i in range(group))
        return batches, rows_of, kept, ends

    return cached(("filtered", graphdef, batch_size, group, at, fuse, read_spec, by_position),
                  lambda: stored_jit(step))


def _appended(buffer: Any, kept: Any, p: Any, values: Any, mask: Any) -> tuple[Any, Any]:
    """``buffer`` with the ``values`` (None: positions) of the chunk at ``p`` that ``mask``
    keeps written from row ``kept`` on, in order, and how many were kept. A stable sort
    and slice updates compile to fewer kernels than a running sum and a scatter."""
    n = mask.shape[0]
    dropped, pos = lax.sort((lax.bitwise_not(mask), _positions(p, n)), num_keys=1,
                            is_stable=True)
    count = lax.reduce(lax.convert_element_type(lax.bitwise_not(dropped), np.int32),
                       np.int32(0), lax.add, (0,))
    if values is None:
        return lax.dynamic_update_slice_in_dim(buffer, pos, kept, 0), count
    order = lax.sub(pos, _spread(p, n))
    return jax.tree.map(
        lambda b, v: lax.dynamic_update_slice_in_dim(b, gather_rows(v, order), kept, 0),
        buffer, values), count


def _spread(value: Any, size: int) -> Any:
    """The scalar ``value`` as ``size`` copies (a ``lax`` operand of a vector's shape)."""
    return lax.broadcast_in_dim(value, (size,), ())


def _positions(p: Any, size: int) -> Any:
    """``p, p + 1, ..., p + size - 1`` in ``p``'s dtype."""
    return lax.add(lax.iota(p.dtype, size), _spread(p, size))


def _first_row(value: Any) -> Any:
    """``value[0]``."""
    return lax.index_in_dim(value, 0, keepdims=False)

