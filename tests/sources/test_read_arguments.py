"""Read arguments of the forward-read sources, called directly (a Pipeline checks its
own): a batch size under 1 or not an int, a negative place to seek, refused naming the
argument; such a batch size used to give ``(None, None)``, the pass's end, and a
negative ``seek`` stood a stream at its start.
"""

from __future__ import annotations

import pytest

from datarax.core.errors import ConfigError
from datarax.mixing import MixSource
from datarax.sources import ConcatSource, FlatMapSource, InterleaveSource, ShuffleBufferSource

from number_sources import NumberStream, numbers

SOURCES = {
    "NumberStream": lambda: NumberStream(0, 5),
    "ConcatSource": lambda: ConcatSource([numbers(0, 2), NumberStream(3, 5)]),
    "MixSource": lambda: MixSource([numbers(0, 2), numbers(3, 5)], [1, 1]),
    "InterleaveSource": lambda: InterleaveSource([numbers(0, 2), numbers(3, 5)], cycle_length=2),
    "ShuffleBufferSource": lambda: ShuffleBufferSource(numbers(0, 5), buffer_size=2),
    "FlatMapSource": lambda: FlatMapSource(numbers(0, 5), lambda r: [r], max_outputs=1),
}


@pytest.mark.parametrize("name", sorted(SOURCES))
@pytest.mark.parametrize("size", [0, -1, 2.0, None])
def test_a_batch_size_that_is_not_an_int_of_1_or_more_is_refused(name, size):
    with pytest.raises(ConfigError, match=f"^{name} batch_size must be an int >= 1, got "
                                          f"{size!r}."):
        SOURCES[name]().get_batch_with_indices(size)


@pytest.mark.parametrize("name", sorted(SOURCES))
@pytest.mark.parametrize("place, which", [((0, -1), "index"), ((-1, 0), "epoch"),
                                          ((0, 1.0), "index")])
def test_a_seek_to_a_negative_or_fractional_place_is_refused(name, place, which):
    source = SOURCES[name]()
    with pytest.raises(ConfigError, match=f"^{name}.seek {which} must be an int >= 0, got "):
        source.seek(*place)
    assert (source.epoch, source.index) == (0, 0)
    assert source.get_batch_with_indices(2)[0] is not None
