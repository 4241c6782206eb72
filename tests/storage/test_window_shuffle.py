"""Window shuffle (``shuffle_window``): a permutation of shards, records shuffled within
windows of W shards — a pure function of (seed, epoch), exact resume, global indices."""

from __future__ import annotations

import numpy as np
import pytest

from datarax.core.errors import ConfigError, StateError
from datarax.samplers.shard_window import ShardWindows, shard_windows
from datarax.sources.epoch_order import EpochOrder


def shard_of(counts: tuple[int, ...], index: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.cumsum(counts), index, side="right")


def window_stats(counts: tuple[int, ...], window: int | None, seed: int, batch: int = 32) -> dict[str, float]:
    """How an epoch's order mixes records: P(neighbours from one shard), median distance
    between neighbours' file-order indices (fraction of the data set), mean distinct
    shards per batch of ``batch``. ``window=None``: the global Feistel shuffle."""
    n = sum(counts)
    if window is None:
        order = EpochOrder(n, seed, 0).indices(0, n)
    else:
        order = ShardWindows(counts, window, seed).indices(np.arange(n))
    shards = shard_of(counts, order)
    usable = n - n % batch
    per_batch = shards[:usable].reshape(-1, batch)
    distinct = np.mean([len(np.unique(row)) for row in per_batch])
    return {
        "same_shard": float(np.mean(shards[1:] == shards[:-1])),
        "median_gap": float(np.median(np.abs(np.diff(order))) / n),
        "shards_per_batch": float(distinct),
    }


@pytest.mark.parametrize("counts,window", [((5, 0, 7, 3, 9), 2), ((4,) * 9, 4), ((1, 2, 3), 1), ((6, 6), 5)])
def test_every_record_once_and_windows_hold_their_shards(counts: tuple[int, ...], window: int) -> None:
    order = ShardWindows(counts, window, seed=11)
    got = order.indices(np.arange(order.length))
    assert sorted(got.tolist()) == list(range(sum(counts)))
    for w in range(order.num_windows):
        lo, hi = order.window_bounds[w], order.window_bounds[w + 1]
        assert set(shard_of(counts, got[lo:hi]).tolist()) <= set(order.window_shards(w))
    assert sorted(order.shard_order.tolist()) == list(range(len(counts)))


def test_pure_function_of_seed_and_positions_in_any_chunks() -> None:
    counts = (10, 7, 13, 10)
    whole = ShardWindows(counts, 2, seed=5).indices(np.arange(40))
    pieces = np.concatenate([ShardWindows(counts, 2, seed=5).indices(np.arange(a, b))
                             for a, b in ((0, 3), (3, 21), (21, 40))])
    assert whole.tolist() == pieces.tolist()
    assert shard_windows(counts, 2, 5).indices(np.arange(40)).tolist() == whole.tolist()
    assert ShardWindows(counts, 2, seed=6).indices(np.arange(40)).tolist() != whole.tolist()


def test_bad_window_and_positions_are_refused() -> None:
    with pytest.raises(ValueError, match="window must be an int >= 1"):
        ShardWindows((3,), 0, 1)
    with pytest.raises(IndexError, match=r"\[0, 3\)"):
        ShardWindows((3,), 1, 1).indices(np.asarray([3]))


def test_window_mixing_sits_between_file_order_and_global() -> None:
    counts = (200,) * 32
    stats = {w: window_stats(counts, w, seed=0) for w in (1, 4)}
    glob = window_stats(counts, None, seed=0)
    # a window of W equal shards puts two neighbours in one shard with probability ~1/W
    assert stats[1]["same_shard"] == 1 - 31 / 6399  # all but the 31 shard changes
    assert abs(stats[4]["same_shard"] - 0.25) < 0.03
    assert glob["same_shard"] < 0.06
    assert stats[1]["shards_per_batch"] <= 2 and stats[4]["shards_per_batch"] <= 5
    assert glob["shards_per_batch"] > 12


@pytest.mark.slow
def test_print_mixing_table() -> None:
    """The table in docs/object-storage.md (64 shards x 1,000 records, seed 0)."""
    counts = (1000,) * 64
    rows = [(str(w), window_stats(counts, w, 0)) for w in (1, 2, 4, 8)]
    rows.append(("global", window_stats(counts, None, 0)))
    for name, s in rows:
        print(f"| {name} | {s['same_shard']:.3f} | {s['median_gap']:.4f} | {s['shards_per_batch']:.1f} |")
    assert rows[-1][1]["same_shard"] < rows[-2][1]["same_shard"] < rows[0][1]["same_shard"]


# ---------------------------------------------------------------- on a source
@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    pytest.importorskip("array_record")
    from datarax.dataset import write_dataset

    folder = tmp_path_factory.mktemp("windowed") / "ds"
    write_dataset([{"i": np.int32(i)} for i in range(60)], folder, shards=6)
    return str(folder)


def _source(dataset: str, **config: object):  # type: ignore[no-untyped-def]
    from datarax.sources.array_record import ArrayRecordSourceConfig, ArrayRecordSourceModule

    return ArrayRecordSourceModule(ArrayRecordSourceConfig(**config), dataset)  # type: ignore[arg-type]


def _read(source, batches: int | None = None) -> tuple[list[int], list[int]]:  # type: ignore[no-untyped-def]
    ids: list[int] = []
    stable: list[int] = []
    while batches is None or batches > 0:
        batch, indices = source.get_batch_with_indices(7)
        if batch is None:
            break
        ids += np.asarray(batch["i"]).tolist()
        stable += np.asarray(indices).tolist()
        batches = None if batches is None else batches - 1
    return ids, stable


def test_source_serves_windows_with_global_indices_and_resumes_exactly(dataset: str) -> None:
    with _source(dataset, shuffle_files=True, shuffle_window=2, seed=3) as src:
        counts = (10,) * 6
        ids, stable = _read(src)
        assert ids == stable  # the stable index is the record's global index
        expected = ShardWindows(counts, 2, seed=3).indices(np.arange(60)).tolist()
        assert ids == expected
        for w in range(3):  # each 20 records come from 2 shards
            assert len(set(i // 10 for i in ids[w * 20 : (w + 1) * 20])) == 2
        src.seek(1)
        next_epoch = _read(src)[0]
        assert next_epoch == ShardWindows(counts, 2, seed=4).indices(np.arange(60)).tolist()
    with _source(dataset, shuffle_files=True, shuffle_window=2, seed=3) as src:
        head, _ = _read(src, batches=3)
        state = src.get_state()
        assert state["shuffled_indices"] == {"seed": 3, "epoch": 0, "n": 60, "window": 2}
    with _source(dataset, shuffle_files=True, shuffle_window=2, seed=3) as again:
        again.set_state(state)
        assert head + _read(again)[0] == expected


def test_source_refuses_window_without_shuffle_and_a_state_of_another_window(dataset: str) -> None:
    from datarax.sources.array_record import ArrayRecordSourceConfig

    with pytest.raises(ConfigError, match="needs shuffle_files=True"):
        ArrayRecordSourceConfig(shuffle_window=2)
    with _source(dataset, shuffle_files=True, shuffle_window=2, seed=3) as src:
        state = src.get_state()
    with _source(dataset, shuffle_files=True, shuffle_window=3, seed=3) as other:
        with pytest.raises(StateError, match="shuffle_window=2 but this source has shuffle_window=3"):
            other.set_state(state)
    with _source(dataset, shuffle_files=True, seed=3) as glob:
        with pytest.raises(StateError, match="shuffle_window"):
            glob.set_state(state)
