"""``copy.deepcopy(pipeline)`` over a file source gives the copy a reader and files of its
own: closing the copy's source left the original's closed too (they shared them), and
its next batch raised "ArrayRecordSourceModule is closed"."""

from __future__ import annotations

import copy

from int_record_files import int_source, write_int_parts

from datarax.pipeline import Pipeline


def test_closing_a_copied_pipelines_source_leaves_the_original_reading(tmp_path) -> None:
    source = int_source(write_int_parts(tmp_path, [5, 9]), shuffle_files=True, seed=3,
                        num_threads=2)
    original = Pipeline(source=source, batch_size=3)
    batches = iter(original)
    first = next(batches)["x"].tolist()
    twin = copy.deepcopy(original)
    copied = [x for b in twin for x in b["x"].tolist()]  # the copy goes on after it
    twin.source.close()
    rest = [x for b in batches for x in b["x"].tolist()]
    assert rest == copied and sorted(first + rest) == list(range(9))
    source.close()
