"""``MixSchedule``: which source serves each record of a weighted mixture, in O(1) state.

Weights become integers ``W_i`` over a period ``P = sum(W_i)`` (exactly when they are
simple ratios such as 0.5/0.3/0.2 -> 5/3/2 over 10, otherwise rounded over
``P = 65536``). Within a period, draw ``t`` of source ``i`` (``0 <= t < W_i``) sits at
*virtual time* ``(t + phase_i) / W_i`` with ``phase_i`` drawn from the seed; the
period's order sorts all draws by virtual time (ties by source number). So record ``g``'s
source and draw are ``owner[g % P]`` and ``(g // P) * W_owner + rank[g % P]``; each
source's draws among the first ``g`` records are exact in O(sources) (a resume is a seek);
in every window each source's share is within 2 of ``window * W_i / P``.

Example:
    >>> s = MixSchedule([0.5, 0.3, 0.2], seed=0)
    >>> s.period, s.units.tolist()
    (10, [5, 3, 2])
    >>> owners, draws = s.owners_and_draws(0, 20)
    >>> [int((owners == i).sum()) for i in range(3)]
    [10, 6, 4]
    >>> s.counts(13).tolist() == [int((owners[:13] == i).sum()) for i in range(3)]
    True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from datarax.core.errors import ConfigError

MAX_PERIOD = 1 << 16  # records per schedule period when weights are not simple ratios
_EXACT_DENOMINATOR = 4096  # weights within 1e-9 of a fraction with this denominator are exact
_PHASE_SCALE = 1 << 20  # phases are integers in [0, _PHASE_SCALE): exact comparisons


def as_number(value: Any) -> Any:
    """A 0-d array of a number (``np.float32(0.7)``, ``jnp.float32(0.7)``) as the number it
    holds; any other value as it is (a weight is checked after).

    Example:
        >>> as_number(np.float32(0.5)), as_number(np.array(3)), as_number(True), as_number("a")
        (0.5, 3, True, 'a')
    """
    if isinstance(value, (bool, np.bool_)) or not hasattr(value, "__array__"):
        return value
    array = np.asarray(value)
    return array.item() if array.ndim == 0 and array.dtype.kind in "iuf" else value


def integer_weights(weights: Sequence[float], names: Sequence[str]) -> np.ndarray:
    """``W_i`` with ``W_i / sum(W)`` the normalised weights (or within 1/65536)."""
    for name, w in zip(names, weights):
        if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating)):
            raise ConfigError(f"MixSource weight of '{name}' must be a number, got {w!r}.")
        if not math.isfinite(float(w)) or float(w) <= 0:
            what = ("leave the source out rather than giving it weight 0" if float(w) == 0
                    else "give each source a relative weight such as 0.7 or 7")
            raise ConfigError(
                f"MixSource weight of '{name}' must be a finite number > 0, got {w!r}; {what}."
            )
    values = [float(w) for w in weights]
    if not math.isfinite(sum(values)):  # huge weights overflow their sum: scale them first
        values = [v / max(values) for v in values]
    total = sum(values)
    shares = [v / total for v in values]
    fractions = [Fraction(s).limit_denominator(_EXACT_DENOMINATOR) for s in shares]
    if (
        sum(fractions) == 1
        and all(f > 0 for f in fractions)
        and all(abs(float(f) - s) <= 1e-9 for f, s in zip(fractions, shares))
    ):
        period = math.lcm(*(f.denominator for f in fractions))
        if period <= MAX_PERIOD:
            return np.asarray([int(f * period) for f in fractions], np.int64)
    # Largest remainder over MAX_PERIOD records.
    exact = np.asarray(shares) * MAX_PERIOD
    units = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - units), kind="stable")
    units[order[: MAX_PERIOD - int(units.sum())]] += 1
    for name, unit, share in zip(names, units, shares):
        if unit == 0:
            raise ConfigError(
                f"MixSource weight of '{name}' is {share:.3g} of the total, below the "
                f"1/{MAX_PERIOD} a mixture can schedule; raise it or leave the source out."
            )
    return units


class MixSchedule:
    """The deterministic interleaving of ``len(weights)`` sources; see the module docstring.

    Args:
        weights: relative weights (> 0), one per source.
        seed: draws the phases (which source leads, how draws interleave).
        names: source names for error messages.
    """

    def __init__(
        self, weights: Sequence[float], seed: int = 0, names: Sequence[str] | None = None
    ) -> None:
        names = list(names) if names is not None else [f"source{i}" for i in range(len(weights))]
        self.units = integer_weights(weights, names)
        self.period = int(self.units.sum())
        rng = np.random.default_rng([int(seed), len(self.units)])
        self.phases = rng.integers(0, _PHASE_SCALE, len(self.units)).astype(np.int64)
        entries = [
            (Fraction(int(t) * _PHASE_SCALE + int(self.phases[i]), int(w)), i, t)
            for i, w in enumerate(self.units)
            for t in range(int(w))
        ]
        entries.sort()
        self.owner = np.asarray([i for _, i, _ in entries], np.int64)
        self.rank = np.asarray([t for _, _, t in entries], np.int64)
        self._max_counts: dict[int, np.ndarray] = {}

    def __eq__(self, other: object) -> bool:  # equal schedules share compiled steps
        return (
            isinstance(other, MixSchedule)
            and self.units.tolist() == other.units.tolist()
            and self.phases.tolist() == other.phases.tolist()
        )

    def __hash__(self) -> int:
        return hash((tuple(self.units.tolist()), tuple(self.phases.tolist())))

    def owners_and_draws_jnp(self, start: Any, count: int) -> tuple[Any, Any]:
        """:meth:`owners_and_draws` traced (``start`` may be a traced int; results of its
        dtype: int32, int64 under x64)."""
        import jax.numpy as jnp

        dtype = jnp.asarray(start).dtype  # one dtype throughout: strict promotion refuses a mix
        g = jnp.arange(count, dtype=dtype) + start
        p = g % self.period
        owner = jnp.asarray(self.owner, dtype)[p]
        draws = (g // self.period) * jnp.asarray(self.units, dtype)[owner]
        return owner, draws + jnp.asarray(self.rank, dtype)[p]

    def owners_and_draws(self, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Source and draw (counted across the whole mixture) of records ``start ..``."""
        g = np.arange(int(start), int(start) + int(count), dtype=np.int64)
        p = g % self.period
        owner = self.owner[p]
        return owner, (g // self.period) * self.units[owner] + self.rank[p]

    def max_counts(self, count: int) -> np.ndarray:
        """Most records each source serves among any ``count`` consecutive records (exact).

        >>> MixSchedule([0.5, 0.3, 0.2], seed=0).max_counts(256).tolist()
        [129, 77, 52]
        """
        key = int(count)
        cached = self._max_counts.get(key)
        if cached is not None:
            return cached
        whole, rest = divmod(key, self.period)
        out = whole * self.units
        if rest:
            ring = np.concatenate([self.owner, self.owner[:rest]])
            for i in range(len(self.units)):
                prefix = np.concatenate([[0], np.cumsum(ring == i)])
                out[i] += int((prefix[rest : rest + self.period] - prefix[: self.period]).max())
        self._max_counts[key] = out
        return out

    def counts(self, g: int) -> np.ndarray:
        """Draws of each source among the first ``g`` records (exact, O(sources))."""
        cycles, p = divmod(int(g), self.period)
        return cycles * self.units + self._prefix(p)

    def _prefix(self, p: int) -> np.ndarray:
        """Draws of each source among the first ``p`` records of a period (``p < P``)."""
        out = np.zeros(len(self.units), np.int64)
        if p == 0:
            return out
        o, r = int(self.owner[p]), int(self.rank[p])
        w_o, a_o = int(self.units[o]), int(self.phases[o])
        for j, (w_j, a_j) in enumerate(zip(self.units.tolist(), self.phases.tolist())):
            if j == o:
                out[j] = r
                continue
            # draws t of j before entry p: (t*Q + a_j) / w_j < (r*Q + a_o) / w_o, ties by number
            span = (r * _PHASE_SCALE + a_o) * w_j - a_j * w_o
            step = _PHASE_SCALE * w_o
            if span < 0:
                count = 0
            else:
                count = -(-span // step)
                if span % step == 0 and j < o:
                    count += 1
            out[j] = min(count, w_j)
        return out
