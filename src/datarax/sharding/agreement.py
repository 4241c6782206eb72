"""Collectives over the processes of a ``jax.distributed`` run (every process calls them).

Example (one process: its own value only):
    >>> every_process({"batch_size": 4})
    [{'batch_size': 4}]
    >>> check_same_everywhere({"batch_size": 4}, "Pipeline")
"""

from __future__ import annotations

import json
from typing import Any

import jax
import numpy as np

from datarax.core.errors import ConfigError, first_line
from datarax.host.counts import count_words


def every_process(value: Any, where: str = "every_process") -> list[Any]:
    """The JSON-able ``value`` of every process, in process order.

    Raises:
        RuntimeError: the exchange failed (naming ``where``), e.g. another process died.
    """
    if jax.process_count() == 1:
        return [value]
    from jax.experimental import multihost_utils

    raw = np.frombuffer(json.dumps(value).encode(), np.uint8)
    try:
        sizes = np.asarray(multihost_utils.process_allgather(np.asarray([raw.size], np.int32)))
        padded = np.zeros(int(sizes.max()), np.uint8)
        padded[: raw.size] = raw
        every = np.asarray(multihost_utils.process_allgather(padded))
    except (jax.errors.JaxRuntimeError, ValueError) as err:  # some JAX paths raise ValueError
        raise RuntimeError(
            f"{where}: exchanging with the other "
            f"{count_words(jax.process_count() - 1, 'process', 'processes')} failed "
            f"({first_line(err)}). Every process must reach this point of its program "
            "together: a process that died, failed earlier or took another path leaves the "
            "others without an answer; see the other processes' logs."
        ) from err
    return [json.loads(every[i, : int(sizes[i, 0])].tobytes()) for i in range(len(every))]


#: the key under which a process that refused to build hands its error to the others
REFUSED = "refused on this process"


def refuse_everywhere(error: Exception) -> None:
    """Hand ``error`` (raised while building on this process) to the other processes,
    which wait for this one in :func:`check_same_everywhere`: each of them then raises
    a ``ConfigError`` naming this process and the error, instead of waiting forever."""
    every_process({REFUSED: f"{type(error).__name__}: {error}"}, "Pipeline(sharding=...)")


def check_same_everywhere(settings: dict[str, Any], where: str) -> None:
    """Raise ``ConfigError`` on every process when ``settings`` differ between processes
    (or another process refused to build, :func:`refuse_everywhere`)."""
    every = every_process(settings, where)
    refused = [(i, one[REFUSED]) for i, one in enumerate(every) if REFUSED in one]
    if refused:
        index, error = refused[0]
        raise ConfigError(
            f"{where}: process {index} could not build this pipeline ({error}), so this "
            "process cannot use it either: every process must build the same pipeline. "
            f"Fix what process {index} names (the same fix on every process)."
        )
    for name in dict.fromkeys(key for one in every for key in one):
        values = [one.get(name) for one in every]
        other = next((i for i, v in enumerate(values) if v != values[0]), None)
        if other is not None:
            raise ConfigError(
                f"{where}: {name} is {values[0]!r} on process 0 but {values[other]!r} on "
                f"process {other}. Every process must build the same pipeline (the same "
                "data, batch size, stages and seeds): each process serves its share of "
                "one global order, and each global batch joins every process's batch."
            )
