"""A pipeline over a host source reads each epoch's start ahead, before the last one
ends: the batches are those of each epoch read alone, every record once per epoch, and
the next epoch's first read is the one its start takes over (never read again)."""

from __future__ import annotations

import threading

import numpy as np

from datarax.pipeline import Pipeline

from bad_rows import Rows, RowsConfig

N, BAD = 50, (5, 30)


class LoggedRows(Rows):
    """Shuffled ``Rows`` that note the stable indices of every batched read."""

    def __init__(self) -> None:
        super().__init__(RowsConfig(on_error="skip"), N, bad=BAD)
        self.reads: list[list[int]] = []
        self.lock = threading.Lock()

    def shuffle_seed(self) -> int:
        return 7

    def read_records(self, indices):
        with self.lock:
            self.reads.append([int(i) for i in indices])
        return super().read_records(indices)


def test_epochs_in_a_row_hand_out_each_epoch_as_read_alone_and_read_its_start_once():
    source = LoggedRows()
    pipeline = Pipeline(source=source, stages=[], batch_size=4)
    got = [[int(x) for batch in pipeline for x in np.asarray(batch["x"])] for _ in range(3)]
    orders = [source.epoch_order(epoch).indices(0, N).tolist() for epoch in range(3)]
    assert got == [[i for i in order if i not in BAD] for order in orders]
    assert [r.epoch for r in source.skipped_records()] == [0, 0, 1, 1, 2, 2]
    # epoch 0 starts cold: its first batch read alone, then growing reads; epochs 1 and
    # 2 were read ahead whole (one chunk) while the epoch before them was handed out
    assert orders[0][:4] in source.reads
    for order in orders[1:]:
        assert source.reads.count(order) == 1 and order[:4] not in source.reads
    source.close()
