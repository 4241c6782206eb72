"""Shares of an epoch among processes, as runs of epoch positions — and elastic re-splits.

An epoch's order is a sequence of positions ``0 .. length-1`` (the source maps each to
a stable record, shuffled or not). With ``count`` processes, process ``i`` serves the
block ``[i*L, (i+1)*L)``, ``L = length // count`` (:func:`block_shares`; the last
``length % count`` positions are left out so every process takes the same steps).

**Elastic resume.** Every process of a run saves its state at the same step, so all
of them stand at the same position ``k`` of their shares. A run restarted on another
number of processes continues that epoch from what is left: each old share's
positions from ``k`` on, in order (:func:`remaining`), cut into ``count`` equal,
consecutive shares (:func:`split_equal`). A share is then a few runs rather than one
block; the next epoch is again plain blocks. A history of several elastic restarts
within one epoch chains the same way (:func:`elastic_share`).

Invariant: the new shares are disjoint, equally long, and together they are exactly
what was left of the epoch, except its last ``left % count`` positions (fewer than
``count``), which are left out as an epoch's tail always is.

Example:
    >>> block_shares(10, 2)
    [[(0, 5)], [(5, 10)]]
    >>> remaining(block_shares(12, 2), 3)
    [(3, 6), (9, 12)]
    >>> split_equal([(3, 6), (9, 12)], 3)
    [[(3, 5)], [(5, 6), (9, 10)], [(10, 12)]]
"""

from __future__ import annotations

from collections.abc import Sequence

Run = tuple[int, int]  # [lo, hi) epoch positions
Share = list[Run]


def block_shares(length: int, count: int) -> list[Share]:
    """The plain layout: ``count`` consecutive blocks of ``length // count`` positions."""
    size = length // count
    return [[(i * size, (i + 1) * size)] if size else [] for i in range(count)]


def share_size(share: Share) -> int:
    """Positions a share holds."""
    return sum(hi - lo for lo, hi in share)


def skip(share: Share, count: int) -> Share:
    """``share`` after its first ``count`` positions."""
    out: Share = []
    for lo, hi in share:
        if count >= hi - lo:
            count -= hi - lo
            continue
        out.append((lo + count, hi))
        count = 0
    return out


def take(share: Share, start: int, count: int) -> Share:
    """Positions ``[start, start + count)`` of ``share`` (as runs)."""
    out: Share = []
    for lo, hi in skip(share, start):
        if count <= 0:
            break
        piece = min(count, hi - lo)
        out.append((lo, lo + piece))
        count -= piece
    return out


def remaining(shares: Sequence[Share], position: int) -> Share:
    """What is left when every share has served its first ``position`` positions: the
    shares' rests, in share order, adjacent runs merged."""
    out: Share = []
    for share in shares:
        for lo, hi in skip(share, position):
            if out and out[-1][1] == lo:
                out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
    return out


def split_equal(runs: Share, count: int) -> list[Share]:
    """``runs`` cut into ``count`` consecutive shares of ``size // count`` positions."""
    each = share_size(runs) // count
    return [take(runs, i * each, each) for i in range(count)]


def elastic_share(
    length: int, history: Sequence[tuple[int, int]], count: int, index: int
) -> Share:
    """Share ``index`` of ``count`` of an epoch restarted after ``history``.

    Args:
        length: positions in the whole epoch.
        history: ``(count, position)`` of each earlier run in that epoch, oldest first:
            ``count`` processes each stood at ``position`` of their share when saved.
            The first run used :func:`block_shares`.
        count, index: the processes now, and this one.

    Example:
        >>> elastic_share(12, [(2, 3)], 3, 1)
        [(5, 6), (9, 10)]
    """
    shares = block_shares(length, history[0][0])
    for step, (saved_count, position) in enumerate(history):
        if len(shares) != saved_count:
            raise ValueError(
                f"elastic history step {step} says {saved_count} processes, but the "
                f"layout before it had {len(shares)}."
            )
        after = history[step + 1][0] if step + 1 < len(history) else count
        shares = split_equal(remaining(shares, position), after)
    return shares[index]
