"""Samplers for users who drive record access themselves: which index to read next.

Item ``i`` of epoch ``e`` is a pure function of ``(e, i)``, so state is two ints and a
restore is a seek.

Example:
    >>> sampler = ShuffledSampler(5, seed=1, num_epochs=2)
    >>> first = [next(sampler) for _ in range(3)]
    >>> state = sampler.get_state(); state
    {'epoch': 0, 'index': 3}
    >>> rest = list(sampler)
    >>> again = ShuffledSampler(5, seed=1, num_epochs=2); again.set_state(state)
    >>> list(again) == rest, sorted(first + rest[:2])
    (True, [0, 1, 2, 3, 4])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datarax.core.config import check_count
from datarax.core.errors import ConfigError
from datarax.core.position import refuse_pipeline_state, saved_count
from datarax.samplers.index_shuffle import index_shuffle_np


class Sampler:
    """Base: items of an epoch by position, iterated over ``num_epochs`` (-1: endless)."""

    def __init__(self, num_epochs: int = 1) -> None:
        if num_epochs != -1:
            check_count(num_epochs, f"{type(self).__name__} num_epochs", 1)
        self.num_epochs = int(num_epochs)
        self.epoch = 0
        self.index = 0

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in vars(self).items()
                             if k not in ("epoch", "index") and not k.startswith("_"))
        return f"{type(self).__name__}({settings}) at epoch {self.epoch}, index {self.index}"

    def __len__(self) -> int:
        """Items in one epoch."""
        raise NotImplementedError

    def item(self, epoch: int, index: int) -> Any:
        """Item ``index`` of epoch ``epoch``."""
        raise NotImplementedError

    def __iter__(self) -> Sampler:
        return self

    def __next__(self) -> Any:
        if self.index >= len(self):
            if self.num_epochs != -1 and self.epoch + 1 >= self.num_epochs:
                raise StopIteration
            self.epoch, self.index = self.epoch + 1, 0
        value = self.item(self.epoch, self.index)
        self.index += 1
        return value

    def get_state(self) -> dict[str, int]:
        """``{"epoch": e, "index": i}``: items ``0 .. i-1`` of epoch ``e`` were handed out."""
        return {"epoch": self.epoch, "index": self.index}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue after the last item the saved sampler handed out."""
        name = type(self).__name__
        refuse_pipeline_state(state, name)
        last = None if self.num_epochs == -1 else self.num_epochs - 1
        epoch = saved_count(state, "epoch", name, at_most=last,
                            meaning=f"the epoch it stands in; this one runs num_epochs="
                            f"{self.num_epochs}: build it as the saved one was")
        index = saved_count(state, "index", name, at_most=len(self),
                            meaning=f"items handed out of an epoch of {len(self)} items")
        self.epoch, self.index = epoch, index


class SequentialSampler(Sampler):
    """``0 .. num_records - 1`` in order, every epoch.

    Example:
        >>> list(SequentialSampler(3, num_epochs=2))
        [0, 1, 2, 0, 1, 2]
    """

    def __init__(self, num_records: int, *, num_epochs: int = 1) -> None:
        super().__init__(num_epochs)
        self.num_records = check_count(num_records, f"{type(self).__name__} num_records", 1)

    def __len__(self) -> int:
        return self.num_records

    def item(self, epoch: int, index: int) -> int:
        return int(index)


class ShuffledSampler(Sampler):
    """A new Feistel permutation of ``0 .. num_records - 1`` each epoch (seed ``seed + epoch``).

    Example:
        >>> s = ShuffledSampler(4, seed=0, num_epochs=2)
        >>> order = list(s); sorted(order[:4]) == sorted(order[4:]) == [0, 1, 2, 3]
        True
    """

    def __init__(self, num_records: int, *, seed: int = 0, num_epochs: int = 1) -> None:
        super().__init__(num_epochs)
        self.num_records = check_count(num_records, f"{type(self).__name__} num_records", 1)
        self.seed = check_count(seed, f"{type(self).__name__} seed", 0)
        if self.seed >= 2**32:
            raise ConfigError(f"ShuffledSampler seed must be < 2**32, got {seed}.")

    def __len__(self) -> int:
        return self.num_records

    def item(self, epoch: int, index: int) -> int:
        seed = (self.seed + int(epoch)) % 2**32
        return int(index_shuffle_np(np.asarray([index]), self.num_records - 1, seed)[0])


class RangeSampler(Sampler):
    """``start, start + step, ...`` below ``stop``, every epoch (a slice of a source).

    Example:
        >>> list(RangeSampler(2, 9, step=3))
        [2, 5, 8]
    """

    def __init__(self, start: int, stop: int, *, step: int = 1, num_epochs: int = 1) -> None:
        super().__init__(num_epochs)
        name = type(self).__name__
        self.start = check_count(start, f"{name} start", 0)
        self.stop = check_count(stop, f"{name} stop", self.start + 1)
        self.step = check_count(step, f"{name} step", 1)

    def __len__(self) -> int:
        return len(range(self.start, self.stop, self.step))

    def item(self, epoch: int, index: int) -> int:
        return self.start + int(index) * self.step


class SlidingWindowSampler(Sampler):
    """Windows of ``window`` consecutive indices, starts ``stride`` apart, that fit in
    ``num_records`` (a last window that would run past the end is not served).

    Example:
        >>> [w.tolist() for w in SlidingWindowSampler(6, window=3, stride=2)]
        [[0, 1, 2], [2, 3, 4]]
    """

    def __init__(
        self, num_records: int, *, window: int, stride: int = 1, num_epochs: int = 1
    ) -> None:
        super().__init__(num_epochs)
        name = type(self).__name__
        self.num_records = check_count(num_records, f"{name} num_records", 1)
        self.window = check_count(window, f"{name} window", 1)
        self.stride = check_count(stride, f"{name} stride", 1)
        if self.window > self.num_records:
            raise ConfigError(
                f"SlidingWindowSampler window={window} is longer than the {num_records} "
                "records; no window fits."
            )

    def __len__(self) -> int:
        return (self.num_records - self.window) // self.stride + 1

    def item(self, epoch: int, index: int) -> np.ndarray:
        start = int(index) * self.stride
        return np.arange(start, start + self.window, dtype=np.int64)
