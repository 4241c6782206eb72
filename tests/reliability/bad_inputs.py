"""The catalogue of bad inputs: each case, the error type and message it must give.

``test_bad_inputs.py`` runs every case; ``python tests/reliability/bad_inputs.py``
regenerates ``docs/errors.md`` from the messages the cases actually produce.

A case is an action on a fresh temporary directory that must raise ``error`` with
``match`` in its message (and, for a ``StateError``, ``field`` as its ``.field``).
Cases needing an optional source (ArrayRecord, TFDS, HF) name it in ``needs``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

for _folder in (Path(__file__).resolve().parent, Path(__file__).resolve().parents[1]):
    sys.path.insert(0, str(_folder))  # the reliability helpers; tests/: int_record_files

from datarax.core.config import StructuralConfig  # noqa: E402
from datarax.core.data_source import DataSourceModule  # noqa: E402
from datarax.core.errors import (  # noqa: E402
    ConfigError,
    DataraxError,
    MissingExtraError,
    RecordError,
    SourceChangedError,
    SourceContractError,
    SpecMismatchError,
    StateError,
)
from datarax.dataset import ConversionError  # noqa: E402
from datarax.operators import ElementOperator, ElementOperatorConfig, FilterOperator  # noqa: E402
from datarax.pipeline import Pipeline  # noqa: E402
from datarax.storage import CacheFullError, RemoteObjectError  # noqa: E402
from datarax.sources import MemorySource, MemorySourceConfig  # noqa: E402
from datarax.sources.source_call import MISSING  # noqa: E402

from int_record_files import write_records  # noqa: E402
from number_sources import NumberStream  # noqa: E402
from reliability_sources import CountingStream, CountingStreamConfig, make_memory_pipeline  # noqa: E402


@dataclass(frozen=True)
class BadInput:
    id: str
    category: str
    what: str  # the bad input, in words
    action: Callable[[Path], Any]
    error: type[BaseException]
    match: str
    field: str | None = None
    needs: str | None = None  # optional module the case imports


CASES: list[BadInput] = []


def case(id: str, category: str, what: str, error: type[BaseException], match: str, *,
         field: str | None = None, needs: str | None = None):
    def register(fn: Callable[[Path], Any]) -> Callable[[Path], Any]:
        CASES.append(BadInput(id, category, what, fn, error, match, field, needs))
        return fn

    return register


def simple(id: str, category: str, what: str, error: type[BaseException], match: str,
           fn: Callable[[], Any], **kw: Any) -> None:
    case(id, category, what, error, match, **kw)(lambda _tmp: fn())


# ------------------------------------------------------------------ helpers
def data(n: int = 6) -> dict[str, np.ndarray]:
    return {"x": np.arange(n, dtype=np.int32)}


def pipe(**kw: Any) -> Pipeline:
    args: dict[str, Any] = dict(source=MemorySource(MemorySourceConfig(), data()), stages=[],
                                batch_size=2, rngs=nnx.Rngs(0), shard_index=0, shard_count=1)
    args.update(kw)
    return Pipeline(**args)


def first_batch(pipeline: Pipeline) -> Any:
    with iter(pipeline) as it:
        return next(it)


def state_of(**kw: Any) -> dict[str, Any]:
    p = make_memory_pipeline(12, 3, shard_index=0, shard_count=1, **kw)
    with iter(p) as it:
        next(it)
        return json.loads(json.dumps(it.get_state()))


def restore(state: dict[str, Any], **kw: Any) -> None:
    make_memory_pipeline(12, 3, shard_index=0, shard_count=1, **kw).set_state(state)


class Drifting(DataSourceModule):
    """A stream whose batches stop matching its element_spec at record 4."""

    def __init__(self, bad: Callable[[int], dict[str, Any]], spec: dict[str, Any] | None = None):
        super().__init__(CountingStreamConfig())
        self._bad, self._spec, self._i = bad, spec, 0

    def get_batch(self, batch_size: int) -> dict[str, Any] | None:
        if self._i >= 8:
            return None
        out = self._bad(batch_size) if self._i >= 4 else {"x": np.zeros((batch_size, 2), np.float32)}
        self._i += batch_size
        return out

    def element_spec(self) -> dict[str, Any]:
        return self._spec or {"x": jax.ShapeDtypeStruct((2,), np.float32)}


def drift(bad: Callable[[int], dict[str, Any]], spec: dict[str, Any] | None = None) -> None:
    p = Pipeline(source=Drifting(bad, spec), stages=[], batch_size=4, rngs=nnx.Rngs(0),
                 shard_index=0, shard_count=1)
    for _ in p:
        pass


class BadFromStart(Drifting):
    """Four records, every batch ``bad(n)``."""

    def get_batch(self, batch_size: int) -> dict[str, Any] | None:
        n = min(batch_size, 4 - self._i)
        self._i += n
        return self._bad(n) if n else None


def drift_in(wrap: Callable[[Any, Any], Any], bad: Callable[[int], dict[str, Any]]) -> None:
    """A stream of four records, every batch ``bad(n)``, read as the second source of
    ``wrap(first, it)`` (``first``: four good records)."""
    first = MemorySource(MemorySourceConfig(), {"x": np.zeros((4, 2), np.float32)})
    p = Pipeline(source=wrap(first, BadFromStart(bad)), stages=[], batch_size=4,
                 rngs=nnx.Rngs(0), shard_index=0, shard_count=1)
    for _ in p:
        pass


@dataclass(frozen=True)
class _EmptyConfig(StructuralConfig):
    pass


class NoContract(DataSourceModule):
    def __init__(self) -> None:
        super().__init__(_EmptyConfig())


class ConfigPassing(NoContract):
    """A custom source that hands its config to the base, with no config class of its own."""

    def __init__(self, config: Any) -> None:
        DataSourceModule.__init__(self, config)


class IndexedNoLen(DataSourceModule):
    def __init__(self) -> None:
        super().__init__(_EmptyConfig())

    def get_batch_at(self, start: Any, size: int, key: Any = None) -> dict[str, Any]:
        return {"x": jax.numpy.arange(size) + start}


class SlicingSource(DataSourceModule):
    """get_batch_at that slices with int(start): not traceable."""

    def __init__(self) -> None:
        super().__init__(_EmptyConfig())

    def __len__(self) -> int:
        return 6

    def get_batch_at(self, start: Any, size: int, key: Any = None) -> dict[str, Any]:
        return {"x": jax.numpy.arange(6)[int(start):int(start) + size]}

    def element_spec(self) -> dict[str, Any]:
        return {"x": jax.ShapeDtypeStruct((), np.int32)}


class FirstRecordOnly(DataSourceModule):
    """get_batch_at that ignores size: always the first record."""

    def __init__(self) -> None:
        super().__init__(_EmptyConfig())

    def __len__(self) -> int:
        return 6

    def get_batch_at(self, start: Any, size: int, key: Any = None) -> dict[str, Any]:
        return {"x": jax.numpy.arange(6, dtype=np.int32)[:1]}


class NoBaseInit(DataSourceModule):
    """A source whose __init__ does not call DataSourceModule.__init__."""

    def __init__(self) -> None:
        self.x = nnx.data(jax.numpy.arange(6))

    def __len__(self) -> int:
        return 6

    def get_batch_at(self, start: Any, size: int, key: Any = None) -> dict[str, Any]:
        return {"x": self.x[(jax.numpy.arange(size) + start) % 6]}


class SpecLess(DataSourceModule):
    def __init__(self) -> None:
        super().__init__(_EmptyConfig())

    def get_batch(self, batch_size: int) -> dict[str, Any]:
        return {"x": np.zeros(batch_size, np.int32)}


class SpecNotADict(SpecLess):
    """A stream whose element_spec() returns one spec, not a dict of fields."""

    def element_spec(self) -> Any:
        return jax.ShapeDtypeStruct((), np.int32)


class KeylessReads(IndexedNoLen):
    """An indexed source whose get_batch_at has no key parameter."""

    def __len__(self) -> int:
        return 6

    def get_batch_at(self, start: Any, size: int) -> dict[str, Any]:  # type: ignore[override]
        return {"x": jax.numpy.arange(size) + start}


# ------------------------------------------------------------ MemorySourceConfig
simple("memory-config-shuffle-str", "MemorySourceConfig", "shuffle='yes'", ConfigError,
       "MemorySourceConfig.shuffle must be a bool (True/False), got str 'yes'.",
       lambda: MemorySourceConfig(shuffle="yes"))
simple("memory-config-seed-negative", "MemorySourceConfig", "seed=-1", ConfigError,
       "MemorySourceConfig.seed must be >= 0, got -1.", lambda: MemorySourceConfig(seed=-1))
simple("memory-config-seed-too-big", "MemorySourceConfig", "seed=2**32", ConfigError,
       "MemorySourceConfig.seed must be < 2**32", lambda: MemorySourceConfig(seed=2**32))
simple("memory-config-seed-float", "MemorySourceConfig", "seed=1.5", ConfigError,
       "MemorySourceConfig.seed must be an int, got float 1.5.", lambda: MemorySourceConfig(seed=1.5))
simple("memory-config-seed-bool", "MemorySourceConfig", "seed=True", ConfigError,
       "MemorySourceConfig.seed must be an int, got bool True.", lambda: MemorySourceConfig(seed=True))
simple("memory-config-num-epochs-zero", "MemorySourceConfig", "num_epochs=0", ConfigError,
       "MemorySourceConfig.num_epochs must be >= 1 (or -1 for passes without end), got 0.",
       lambda: MemorySourceConfig(num_epochs=0))
simple("memory-config-track-metadata-int", "MemorySourceConfig", "track_metadata=1", ConfigError,
       "MemorySourceConfig.track_metadata must be a bool (True/False), got int 1.",
       lambda: MemorySourceConfig(track_metadata=1))

# --------------------------------------------------------------- MemorySource data
simple("memory-config-missing", "MemorySource data", "MemorySource(None, data)", ConfigError,
       "MemorySource needs a MemorySourceConfig as its first argument, got None. Call "
       "MemorySource(MemorySourceConfig(), data=...).",
       lambda: MemorySource(None, data()))
simple("memory-data-as-config", "MemorySource data", "MemorySource([...]) without a config",
       ConfigError,
       "MemorySource got list [{'x': 0}, {'x': 1}] where its MemorySourceConfig goes, and no "
       "data: the config comes first, the data second. Call "
       "MemorySource(MemorySourceConfig(), data=...).",
       lambda: MemorySource([{"x": 0}, {"x": 1}]))
simple("memory-arguments-swapped", "MemorySource data", "MemorySource(data, config)",
       ConfigError,
       "MemorySource got the data (dict {'x': array([0, 1, 2, 3, 4, 5], dtype=int32)}) first and "
       "the MemorySourceConfig second; the config comes first. Call "
       "MemorySource(MemorySourceConfig(), data=...).",
       lambda: MemorySource(data(), MemorySourceConfig()))
simple("memory-config-keyword-after-data", "MemorySource data", "MemorySource(data, config=cfg)",
       ConfigError,
       "MemorySource got dict {'x': array([0, 1, 2, 3, 4, 5], dtype=int32)} first and config= as "
       "a keyword: the config comes first, the data second. Call "
       "MemorySource(MemorySourceConfig(), data), MemorySource(config=MemorySourceConfig(), "
       "data=data) or MemorySource(data=data, shuffle=...) (settings as keywords).",
       lambda: MemorySource(data(), config=MemorySourceConfig()))
simple("memory-three-positional-arguments", "MemorySource data",
       "MemorySource(config, data, config)", ConfigError,
       "MemorySource takes at most two positional arguments, the config and then the data; got 3",
       lambda: MemorySource(MemorySourceConfig(), data(), MemorySourceConfig()))
simple("memory-records-of-float32-and-int32", "MemorySource data",
       "records of one field as float32 and int32 arrays", DataraxError,
       "MemorySource field 'x': record 1 is int32, record 0 is float32, which NumPy stacks as "
       "float64, a dtype no record has; give every record of a field one dtype",
       lambda: MemorySource(MemorySourceConfig(), [{"x": np.float32(1)}, {"x": np.int32(2)}]))
simple("memory-text-str-and-bytes", "MemorySource data",
       "a text field holding str in one record and bytes in another", DataraxError,
       "MemorySource field 't': record 1 holds bytes, record 0 str; a text field holds str in "
       "every record or bytes in every record.",
       lambda: MemorySource(MemorySourceConfig(), [{"t": "a"}, {"t": b"b"}]))
simple("memory-data-missing", "MemorySource data", "MemorySource(config) without data",
       ConfigError,
       "MemorySource needs its data after the config. Call MemorySource(MemorySourceConfig(), "
       "data=...).",
       lambda: MemorySource(MemorySourceConfig()))
simple("memory-keyword-unknown", "MemorySource data", "MemorySource(data=..., shufle=True)",
       ConfigError,
       "MemorySource got unknown setting(s) ['shufle']; its settings are ['shuffle', 'seed', "
       "'track_metadata', 'num_epochs', 'cast_float64']. Did you mean shuffle=?",
       lambda: MemorySource(data=data(), shufle=True))
simple("memory-keyword-disagrees", "MemorySource data", "a keyword the config beside it contradicts",
       ConfigError,
       "MemorySource got keyword settings that disagree with its MemorySourceConfig: seed=2 "
       "(config: 1). Give each setting once, in the config or as a keyword.",
       lambda: MemorySource(MemorySourceConfig(seed=1), data(), seed=2))
simple("memory-other-config", "MemorySource data", "another source's config", ConfigError,
       "MemorySource needs a MemorySourceConfig, got CountingStreamConfig (the config of another "
       "kind of module). Call MemorySource(MemorySourceConfig(), data=...).",
       lambda: MemorySource(CountingStreamConfig(), data()))
simple("memory-empty-list", "MemorySource data", "an empty list", DataraxError,
       "MemorySource got an empty sequence; pass at least one record.",
       lambda: MemorySource(MemorySourceConfig(), []))
simple("memory-empty-dict", "MemorySource data", "an empty dict", DataraxError,
       "MemorySource got an empty dict; pass at least one field.",
       lambda: MemorySource(MemorySourceConfig(), {}))
simple("memory-zero-records", "MemorySource data", "a dict of zero-length arrays", DataraxError,
       "MemorySource data holds no records: field 'x' has shape (0,), 0 records along axis 0; "
       "pass at least one record.",
       lambda: MemorySource(MemorySourceConfig(), {"x": np.zeros(0, np.int32)}))
simple("memory-not-a-collection", "MemorySource data", "data=5", DataraxError,
       "MemorySource data must be a dict of arrays or a sequence of records, got int.",
       lambda: MemorySource(MemorySourceConfig(), 5))
simple("memory-dataframe", "MemorySource data", "a pandas DataFrame", DataraxError,
       "MemorySource data must be a dict of arrays or a sequence of records, got DataFrame; "
       "pass dict(frame), its columns by name.",
       lambda: MemorySource(MemorySourceConfig(), _frame()), needs="pandas")


def _frame() -> Any:
    import pandas as pd

    return pd.DataFrame({"x": np.arange(3, dtype=np.int32)})


simple("memory-generator", "MemorySource data", "a generator of records", DataraxError,
       "MemorySource data must be a dict of arrays or a sequence of records, got generator; "
       "pass list(data)",
       lambda: MemorySource(MemorySourceConfig(), ({"x": i} for i in range(3))))
simple("memory-bare-array", "MemorySource data", "a bare array (no field name)", DataraxError,
       "MemorySource data must be a dict of arrays or a sequence of records, got ndarray; "
       "name the field: {'x': array}",
       lambda: MemorySource(MemorySourceConfig(), np.arange(3)))
simple("memory-record-not-dict", "MemorySource data", "a list of ints", DataraxError,
       "MemorySource records must be dicts of fields, record 0 is int.",
       lambda: MemorySource(MemorySourceConfig(), [1, 2, 3]))
simple("memory-record-keys-differ", "MemorySource data", "record 1 has other fields", DataraxError,
       "MemorySource record 1 has fields ['y'], record 0 has ['x']",
       lambda: MemorySource(MemorySourceConfig(), [{"x": 1}, {"y": 2}]))
simple("memory-record-shape-drift", "MemorySource data", "record 2 has another shape",
       DataraxError, "MemorySource field 'x': record 2 has shape (3,), record 0 has (2,)",
       lambda: MemorySource(MemorySourceConfig(), [{"x": np.zeros(2, np.float32)}] * 2
                            + [{"x": np.zeros(3, np.float32)}]))
simple("memory-objects-in-array-field", "MemorySource data", "an object array of ints",
       DataraxError, "MemorySource field 'x' is an object array holding int values (1)",
       lambda: MemorySource(MemorySourceConfig(), {"x": np.asarray([1, 2], dtype=object)}))
simple("memory-text-mixed-with-numbers", "MemorySource data", "a list of str and int",
       DataraxError, "MemorySource field 'x' mixes text with int values (2)",
       lambda: MemorySource(MemorySourceConfig(), {"x": ["a", 2]}))
simple("memory-nested-empty-dict", "MemorySource data", "a nested field that is an empty dict",
       DataraxError, "MemorySource field 'meta' is an empty dict",
       lambda: MemorySource(MemorySourceConfig(), {"x": np.zeros(3, np.int32), "meta": {}}))
simple("memory-masked-array", "MemorySource data", "a numpy masked array with an entry masked",
       DataraxError, "MemorySource field 'x' is a masked array with masked entries (first in "
       "record 1)",
       lambda: MemorySource(MemorySourceConfig(), {"x": np.ma.array([1, 2, 3], mask=[0, 1, 0])}))
simple("memory-field-lengths-differ", "MemorySource data", "fields of 3 and 4 records",
       DataraxError, "MemorySource fields have different numbers of records: {'x': 3, 'y': 4}",
       lambda: MemorySource(MemorySourceConfig(), {"x": np.zeros(3, np.int32),
                                                   "y": np.zeros(4, np.int32)}))
simple("memory-scalar-field", "MemorySource data", "a scalar in a dict of arrays", DataraxError,
       "MemorySource field 'x' is a scalar",
       lambda: MemorySource(MemorySourceConfig(), {"x": 3}))

simple("source-negative-start", "MemorySource data", "MemorySource.get_batch_at(-1, 2)", ConfigError,
       "MemorySource.get_batch_at: start=-1",
       lambda: MemorySource(MemorySourceConfig(), data()).get_batch_at(-1, 2))

# ----------------------------------------------------------- ElementOperator
simple("operator-config-stochastic-str", "ElementOperatorConfig", "stochastic='no'", ConfigError,
       "ElementOperatorConfig.stochastic must be a bool (True/False), got str 'no'.",
       lambda: ElementOperatorConfig(stochastic="no"))
simple("operator-config-stream-name", "ElementOperatorConfig", "stream_name='not valid'",
       ConfigError, "ElementOperatorConfig.stream_name must be None or an identifier string "
       "(the nnx.Rngs stream to draw from, e.g. 'augment'), got 'not valid'.", lambda: ElementOperatorConfig(stream_name="not valid"))
simple("operator-fn-not-callable", "ElementOperatorConfig", "fn=5", ConfigError,
       "ElementOperator fn must be callable, got int.",
       lambda: ElementOperator(ElementOperatorConfig(), fn=5))
simple("operator-fn-indexes-element", "ElementOperatorConfig",
       "fn reading element['x'] (an Element is not a dict)", TypeError,
       "Element is not a dict: read a field as element.data['x'] (its fields: ['x']), and return "
       "element.update_data({...}) or a dict of the fields fn changes.",
       lambda: first_batch(pipe(stages=[ElementOperator(ElementOperatorConfig(),
                                                        fn=lambda e, k: {"x": e["x"]})])))
simple("operator-fn-returns-int", "ElementOperatorConfig", "fn returning an int",
       DataraxError, "fn must return an Element (e.g. element.update_data(...)) or a dict of "
       "the fields it changes, got int.",
       lambda: first_batch(pipe(stages=[ElementOperator(ElementOperatorConfig(),
                                                        fn=lambda e, k: 1)])))


def _doubles_if_big(element: Any, key: Any) -> Any:
    if element.data["x"] > 2:  # Python `if` on a traced value
        return {"x": element.data["x"] * 2}
    return element


def _drops_x(element: Any, key: Any) -> Any:
    return {"x": None}


def _names_x(element: Any, key: Any) -> Any:
    return {"x": "a"}


def _same(element: Any, key: Any) -> Any:
    return element


simple("operator-fn-python-if", "ElementOperatorConfig",
       "fn with a Python `if` on a field (traced under jax.vmap)", ConfigError,
       "ElementOperator '_doubles_if_big': fn needs a concrete value of a traced array "
       "(TracerBoolConversionError",
       lambda: first_batch(pipe(stages=[ElementOperator(fn=_doubles_if_big)])))
simple("operator-fn-returns-none-field", "ElementOperatorConfig", "fn returning {'x': None}",
       DataraxError, "ElementOperator '_drops_x': fn returned None for field(s) ['x']; every "
       "field must be an array or a number. To drop a field, return "
       "element.replace_data({...}) with the fields to keep.",
       lambda: first_batch(pipe(stages=[ElementOperator(fn=_drops_x)])))
simple("operator-fn-returns-str-field", "ElementOperatorConfig",
       "fn returning a str field over a numeric batch (compiled step)", DataraxError,
       "ElementOperator '_names_x': fn returned field ['x'] as str 'a'; in the compiled step "
       "every field must be an array or a number. Return jnp.asarray(...) of it, or make the "
       "value a field of the source.",
       lambda: first_batch(pipe(stages=[ElementOperator(fn=_names_x)])))
simple("operator-keys-not-per-record", "ElementOperatorConfig",
       "apply_batch(batch of 4, one key) on a stochastic ElementOperator", DataraxError,
       "ElementOperator '_same': got keys of shape () for a batch of 4 records; it needs one "
       "key per record, e.g. datarax.core.keys.record_keys(key, epoch, jnp.arange(4)) (what a "
       "Pipeline passes) or jax.random.split(key, 4).",
       lambda: ElementOperator(fn=_same, stochastic=True).apply_batch(
           {"x": jax.numpy.arange(4)}, jax.random.key(0)))
simple("pipeline-rngs-without-default", "Pipeline arguments",
       "rngs=nnx.Rngs(augment=1) (no 'default' stream)", ConfigError, "Pipeline: rngs has no 'default' stream; pass nnx.Rngs(default=seed) or "
       "nnx.Rngs(seed).", lambda: pipe(rngs=nnx.Rngs(augment=1)))
simple("operator-rngs-without-stream", "ElementOperatorConfig",
       "stream_name='augment' with nnx.Rngs(params=0) (no such stream, no default)",
       ConfigError, "ElementOperator: rngs has no stream 'augment' and no 'default' stream; "
       "pass nnx.Rngs(augment=seed) or nnx.Rngs(seed).",
       lambda: ElementOperator(fn=_same, stochastic=True, stream_name="augment",
                               rngs=nnx.Rngs(params=0)))

# ---------------------------------------------------- other operators
OPERATORS = "Operators (composite, map, image, batch mix)"


def _images(dtype: Any, n: int = 4) -> MemorySource:
    return MemorySource(MemorySourceConfig(), {"image": np.zeros((n, 2, 2, 3), dtype),
                                               "label": np.arange(n, dtype=np.int32)})


def _image_pipe(dtype: Any, stage: Any) -> Any:
    return first_batch(pipe(source=_images(dtype), stages=[stage]))


def _add_one(a: Any) -> Any:
    return a + 1


def _double(a: Any) -> Any:
    return a * 2


def _route_if(record: Any) -> Any:
    return 0 if record["x"] > 2 else 1  # Python control flow on a traced field


def _route_by_half(record: Any) -> Any:
    return record["x"] / 2  # a float: 1.5 is no operator's number


def _x_only(batch: Any) -> Any:
    return batch["x"]  # one array, not the batch dict


def _two_values(record: Any) -> Any:
    return jax.numpy.stack([record["x"] > 0, record["x"] > 1])  # a vector, not one bool


def _composite(**kw: Any) -> Any:
    from datarax.operators import CompositeOperatorModule, MapOperator

    return CompositeOperatorModule(operators=[MapOperator(fn=_add_one), MapOperator(fn=_double)],
                                   name="both", **kw)


def _image_op(name: str, **kw: Any) -> Any:
    from datarax.operators import image

    return getattr(image, name)(**kw)


def _mix_int_labels(classes_per_record: int) -> None:
    from datarax.operators import BatchMixOperator

    source = MemorySource(MemorySourceConfig(), {
        "image": np.zeros((4, 2, 2, 3), np.float32),
        "label": np.zeros((4, classes_per_record), np.int32)})
    first_batch(pipe(source=source, stages=[BatchMixOperator(mode="mixup", num_classes=3)]))


_BOOL_IMAGES = ("field 'image' holds bool images; it works on uint8 images (0-255) or float "
                "images in [0, 1]. Convert them first")

simple("composite-router-python-if", OPERATORS,
       "a branching router with Python `0 if ... else 1` on a field", ConfigError,
       "CompositeOperatorModule 'both': the router needs a concrete value of a traced array "
       "(TracerBoolConversionError",
       lambda: first_batch(pipe(stages=[_composite(strategy="branching", router=_route_if)])))
simple("composite-concat-one-value-per-record", OPERATORS,
       "parallel merge='concat' over a field of one value per record", DataraxError,
       "CompositeOperatorModule 'both': parallel merge 'concat' joins each record's first "
       "axis, but field 'x' holds one value per record (shapes [(2,), (2,)]). Use "
       "merge='stack' (a new axis) or merge='dict' (the fields kept apart).",
       lambda: first_batch(pipe(stages=[_composite(strategy="parallel", merge="concat")])))
simple("composite-config-weights-not-numbers", OPERATORS,
       "CompositeOperatorConfig(weights=['a', 'b'])", ConfigError,
       "CompositeOperatorConfig.weights must be a list of numbers, one per operator, got "
       "['a', 'b'].",
       lambda: __import__("datarax.operators", fromlist=["x"]).CompositeOperatorConfig(
           strategy="weighted_parallel", weights=["a", "b"]))
simple("map-config-stream-name", OPERATORS, "MapOperatorConfig(stream_name='my stream')",
       ConfigError, "MapOperatorConfig.stream_name must be None or an identifier string (the "
       "nnx.Rngs stream to draw from, e.g. 'augment'), got 'my stream'.",
       lambda: __import__("datarax.operators", fromlist=["x"]).MapOperatorConfig(
           stream_name="my stream"))
simple("image-contrast-negative", OPERATORS, "Contrast(-1.0)", ConfigError,
       "Contrast: factor must be >= 0.0, got -1.0.", lambda: _image_op("Contrast", factor=-1.0))
simple("image-cutout-box-misses", OPERATORS, "Cutout(1, offset=(2, 0)) on 2 x 2 images",
       ConfigError, "Cutout 'Cutout': box (1, 1) at offset (2, 0) misses the images (2, 2), so "
       "it would fill nothing; give an offset whose box overlaps them (a box past an edge is "
       "clipped).", lambda: _image_pipe(np.uint8, _image_op("Cutout", size=1, offset=(2, 0))))
simple("image-flip-probability-range", OPERATORS, "HorizontalFlip((0.2, 0.8))", ConfigError,
       "HorizontalFlip: probability must be one number in [0, 1], got (0.2, 0.8).",
       lambda: _image_op("HorizontalFlip", probability=(0.2, 0.8)))
simple("image-colour-bool-images", OPERATORS, "Brightness on bool images", DataraxError,
       "Brightness 'Brightness': " + _BOOL_IMAGES,
       lambda: _image_pipe(bool, _image_op("Brightness", delta=0.1)))
simple("image-noise-bool-images", OPERATORS, "GaussianNoise on bool images", DataraxError,
       "GaussianNoise 'GaussianNoise': " + _BOOL_IMAGES,
       lambda: _image_pipe(bool, _image_op("GaussianNoise", std=0.1)))
simple("image-normalize-bool-images", OPERATORS, "Normalize on bool images", DataraxError,
       "Normalize 'Normalize': " + _BOOL_IMAGES,
       lambda: _image_pipe(bool, _image_op("Normalize", mean=0.5, std=0.5)))
simple("image-antialias-str", OPERATORS, "Resize(size=2, antialias='yes')", ConfigError,
       "Resize: antialias must be True or False, got 'yes'.",
       lambda: _image_op("Resize", size=2, antialias="yes"))
simple("image-stream-name", OPERATORS, "HorizontalFlip(stream_name='my stream')", ConfigError,
       "HorizontalFlip: stream_name must be None or an identifier string (the nnx.Rngs stream "
       "to draw from, e.g. 'augment'), got 'my stream'.",
       lambda: _image_op("HorizontalFlip", stream_name="my stream"))
simple("image-normalize-channel-count", OPERATORS,
       "Normalize with 2 mean/std values over 3-channel images", ConfigError,
       "Normalize 'Normalize': 2 mean/std values for images with 3 channels in field "
       "'image'; give one value per channel (3) or one value for all.",
       lambda: _image_pipe(np.float32, _image_op("Normalize", mean=[0.5, 0.5], std=[0.2, 0.2])))
simple("image-normalize-nan-mean", OPERATORS, "Normalize(mean=nan, std=1.0)", ConfigError,
       "Normalize: mean and std must be finite, got nan, 1.0.",
       lambda: _image_op("Normalize", mean=float("nan"), std=1.0))
simple("image-normalize-mean-0-255", OPERATORS,
       "Normalize(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375]) on uint8 images",
       ConfigError, "Normalize 'Normalize': mean [123.675, 116.28, 103.53] for the uint8 images "
       "of field 'image', which are divided by 255 first (values in [0, 1]): a mean above 1 is "
       "a 0..255 level. Give mean / 255 and std / 255 (123.675 -> 0.485).",
       lambda: _image_pipe(np.uint8, _image_op("Normalize", mean=[123.675, 116.28, 103.53],
                                               std=[58.395, 57.12, 57.375])))
simple("image-rand-augment-fill-out-of-unit", OPERATORS, "RandAugment(fill=128) (a uint8 level)",
       ConfigError, "RandAugment: fill is on the [0, 1] scale its operations work on, for uint8 "
       "images too; got 128. For a uint8 level give level / 255 (128 -> 0.502).",
       lambda: _image_op("RandAugment", fill=128))
simple("batch-mix-int-labels-bad-shape", OPERATORS,
       "BatchMixOperator over integer labels of shape (batch, 3)", DataraxError,
       "BatchMixOperator 'BatchMixOperator': integer labels in 'label' must be one class id "
       "per record, shape (batch,) or (batch, 1), got shape (2, 3). Give (batch, classes) "
       "soft labels as floats",
       lambda: _mix_int_labels(3))
def _mix_label_out_of_range() -> None:
    """Record 4's label 9 of 3 classes; its partner (record 1) comes first in the batch."""
    from datarax.operators import BatchMixOperator

    source = MemorySource(MemorySourceConfig(), {
        "image": np.zeros((8, 2, 2, 3), np.float32),
        "label": np.array([0, 1, 2, 1, 9, 0, 2, 1], np.int32)})
    first_batch(pipe(source=source, batch_size=8, check_finite=True,
                     stages=[BatchMixOperator(mode="mixup", num_classes=3)]))


simple("batch-mix-label-out-of-range", OPERATORS,
       "BatchMixOperator(num_classes=3) over a label 9, under check_finite=True",
       SpecMismatchError, "MemorySource: field 'label' of the record at position 4 of epoch 0 "
       "(stable index 4) holds NaN or inf (check_finite=True).",
       _mix_label_out_of_range)
simple("batch-mix-alpha-inf", OPERATORS, "BatchMixOperator(alpha=inf)", ConfigError,
       "BatchMixOperator alpha must be a finite number > 0, got inf.",
       lambda: __import__("datarax.operators", fromlist=["x"]).BatchMixOperator(
           alpha=float("inf")))

# ------------------------------------------------------------------- Pipeline
simple("pipeline-source-not-module", "Pipeline arguments", "source=a list", SourceContractError,
       "Pipeline source must be a DataSourceModule (e.g. MemorySource), got list.",
       lambda: Pipeline(source=[1, 2], stages=[], batch_size=2))
simple("pipeline-more-shards-than-records", "Pipeline arguments",
       "shard_count=4 over 3 records", ConfigError,
       "Pipeline shard_count=4 over MemorySource's 3 records: each process's share is "
       "3 // 4 = 0 records, so no process would serve any. Pass pad_remainder=True",
       lambda: pipe(source=MemorySource(MemorySourceConfig(), data(3)), shard_count=4))
simple("pipeline-stream-shorter-than-a-round", "Pipeline arguments",
       "shard_count=4 over a stream (no length) of 3 records", ConfigError,
       "NumberStream is read by 4 processes (shard_count=4) but its pass holds 3 records: a "
       "stream is shared in whole rounds of 4 records, one per process, so no process would "
       "serve any. Use at most 3 processes (shard_count), or a stream of at least 4 records.",
       lambda: list(pipe(source=NumberStream(0, 3), shard_count=4)))
simple("pipeline-batch-size-zero", "Pipeline arguments", "batch_size=0", ConfigError,
       "Pipeline batch_size must be an int >= 1, got 0.", lambda: pipe(batch_size=0))
simple("pipeline-batch-size-float", "Pipeline arguments", "batch_size=2.0", ConfigError,
       "Pipeline batch_size must be an int >= 1, got 2.0.", lambda: pipe(batch_size=2.0))
simple("pipeline-batch-size-bool", "Pipeline arguments", "batch_size=True", ConfigError,
       "Pipeline batch_size must be an int >= 1, got True.", lambda: pipe(batch_size=True))
simple("pipeline-drop-remainder-str", "Pipeline arguments", "drop_remainder='no'", ConfigError,
       "Pipeline drop_remainder must be a bool, got str.", lambda: pipe(drop_remainder="no"))
simple("pipeline-prefetch-negative", "Pipeline arguments", "prefetch=-1", ConfigError,
       "Pipeline prefetch must be an int >= 0, got -1.", lambda: pipe(prefetch=-1))
simple("pipeline-stages-not-list", "Pipeline arguments", "stages=op (not a list)",
       SourceContractError, "Pipeline stages must be a list of operators, got ElementOperator; "
       "wrap a single stage in a list: stages=[op].",
       lambda: pipe(stages=ElementOperator(ElementOperatorConfig(), fn=lambda e, k: e)))
simple("pipeline-stage-int", "Pipeline arguments", "stages=[5]", SourceContractError,
       "Pipeline stage 0 is int, which is neither an operator module",
       lambda: pipe(stages=[5]))


def _element_and_key(element: Any, key: Any) -> Any:
    return element


simple("pipeline-stage-function-of-element-and-key", "Pipeline arguments",
       "stages=[fn] with fn(element, key) (a plain callable gets the batch alone)", ConfigError,
       "Pipeline stage 0 (_element_and_key) is a plain callable, which the pipeline calls with "
       "the batch dict alone, fn(batch), but _element_and_key cannot take that (missing a "
       "required argument: 'key'). A function of one record and its key, fn(element, key), "
       "goes in an operator: ElementOperator(ElementOperatorConfig(stochastic=True), fn=fn) "
       "(stochastic=False when it ignores the key).",
       lambda: pipe(stages=[_element_and_key]))
simple("pipeline-stage-is-source", "Pipeline arguments", "a source among the stages",
       SourceContractError, "Pipeline stage 0 is MemorySource, which is neither",
       lambda: pipe(stages=[MemorySource(MemorySourceConfig(), data())]))
simple("pipeline-shard-index-out-of-range", "Pipeline arguments", "shard_index=2, shard_count=2",
       ConfigError, "Pipeline shard_index must be an int with 0 <= shard_index < shard_count (this "
       "process's share), got shard_index=2 (shard_count=2).",
       lambda: pipe(shard_index=2, shard_count=2))
simple("pipeline-shard-count-without-index", "Pipeline arguments",
       "shard_count=2 without shard_index (one process)", ConfigError,
       "Pipeline shard_count=2 without shard_index: the share would default to "
       "jax.process_index() = 0, but jax.process_count() = 1, so some shares would never be "
       "read. Pass shard_index= (this reader's share) as well.",
       lambda: Pipeline(source=MemorySource(MemorySourceConfig(), data()), stages=[],
                        batch_size=2, shard_count=2))
simple("pipeline-stage-is-class", "Pipeline arguments", "stages=[ElementOperator] (the class)",
       SourceContractError, "Pipeline stage 0 is the class ElementOperator, not an operator: "
       "build it first", lambda: pipe(stages=[ElementOperator]))
simple("pipeline-shard-count-zero", "Pipeline arguments", "shard_count=0", ConfigError,
       "Pipeline shard_count must be an int >= 1 (the number of processes reading the data), "
       "got 0.",
       lambda: pipe(shard_index=0, shard_count=0))
simple("pipeline-source-without-contract", "Pipeline arguments",
       "a source implementing neither get_batch_at nor get_batch", SourceContractError,
       "NoContract implements neither get_batch_at(start, size, key)",
       lambda: first_batch(pipe(source=NoContract())))
simple("pipeline-indexed-source-without-len", "Pipeline arguments",
       "an indexed source without __len__", SourceContractError,
       "IndexedNoLen implements get_batch_at but not __len__",
       lambda: pipe(source=IndexedNoLen()))
simple("pipeline-indexed-source-untraceable", "Pipeline arguments",
       "an indexed source whose get_batch_at calls int(start)", ConfigError,
       "SlicingSource.get_batch_at needs a concrete value of a traced array",
       lambda: first_batch(pipe(source=SlicingSource())))
simple("pipeline-indexed-source-ignores-size", "Pipeline arguments",
       "an indexed source whose get_batch_at returns one record whatever size asks",
       SpecMismatchError,
       "FirstRecordOnly.get_batch_at(0, size=2, key=None) (traced) returned 1 record; "
       "get_batch_at must return exactly size records, those at positions start .. start + "
       "size - 1 (a short batch would leave records out and repeat others). Index with "
       "(jnp.arange(size) + start) % len(self).",
       lambda: first_batch(pipe(source=FirstRecordOnly())))
simple("pipeline-source-without-base-init", "Pipeline arguments",
       "a source whose __init__ skips super().__init__(config)", SourceContractError,
       "Pipeline source NoBaseInit was built without DataSourceModule.__init__, which gives a "
       "source its position: call super().__init__(config, rngs=rngs, name=name) first in "
       "its __init__.",
       lambda: pipe(source=NoBaseInit()))

# --------------------------------------------------- streams vs element_spec
simple("stream-shape-drift", "Stream batches vs element_spec",
       "per-record shape changes mid-stream", SpecMismatchError,
       "Drifting batch at record 4 of epoch 0 does not match element_spec(): field 'x' has "
       "per-record shape (3,), declared (2,)",
       lambda: drift(lambda n: {"x": np.zeros((n, 3), np.float32)}))
simple("stream-dtype-drift", "Stream batches vs element_spec", "dtype changes mid-stream",
       SpecMismatchError, "field 'x' has dtype int32, declared float32",
       lambda: drift(lambda n: {"x": np.zeros((n, 2), np.int32)}))
simple("stream-dtype-drift-in-an-interleave", "Stream batches vs element_spec",
       "dtype changes mid-stream in a source of an InterleaveSource", SpecMismatchError,
       "InterleaveSource source 1 (BadFromStart) batch at position 0 of pass 0 does not match "
       "element_spec(): field 'x' has dtype int32, declared float32",
       lambda: drift_in(lambda a, b: __import__("datarax.sources", fromlist=["x"])
                        .InterleaveSource([a, b], cycle_length=1),
                        lambda n: {"x": np.zeros((n, 2), np.int32)}))
simple("stream-field-drift-in-a-concat-part", "Stream batches vs element_spec",
       "a field renamed mid-stream in a part of a ConcatSource", SpecMismatchError,
       "ConcatSource part 1 (BadFromStart) batch at position 0 of pass 0 does not match "
       "element_spec(): field 'x' is declared in element_spec() but missing; field 'y' is not "
       "declared in element_spec()",
       lambda: drift_in(lambda a, b: __import__("datarax.sources", fromlist=["x"])
                        .ConcatSource([a, b]), lambda n: {"y": np.zeros((n, 2), np.float32)}))
simple("stream-big-endian", "Stream batches vs element_spec",
       "a big-endian float32 batch ('>f4') where float32 is declared", SpecMismatchError,
       "field 'x' has dtype float32 in non-native byte order ('>f4'), declared float32; emit "
       "native byte order (x.astype(x.dtype.newbyteorder('=')))",
       lambda: drift(lambda n: {"x": np.zeros((n, 2), ">f4")}))
simple("stream-strings-for-array", "Stream batches vs element_spec",
       "strings where an array is declared", SpecMismatchError,
       "field 'x' is declared float32(2,) but holds strings (declare a text field as "
       "TextSpec(), from datarax.core.spec)",
       lambda: drift(lambda n: {"x": ["a"] * n}))
simple("stream-scalar-field", "Stream batches vs element_spec",
       "get_batch returns a field as one number, not a batch", SourceContractError,
       "Drifting.get_batch returned field 'x' as one value (float), not a batch of records: "
       "give each field the records along its first axis, e.g. {'x': np.asarray([value])} "
       "for a batch of one.",
       lambda: drift(lambda n: {"x": 1.0}))
simple("stream-batch-not-dict", "Stream batches vs element_spec",
       "get_batch returns a list of records, not a dict of fields", SourceContractError,
       "Drifting.get_batch returned list, not a batch: return a dict of fields, each with the "
       "records along its first axis (or None at the pass's end).",
       lambda: drift(lambda n: [{"x": np.zeros(2, np.float32)}] * n))
simple("stream-missing-field", "Stream batches vs element_spec", "a declared field goes missing",
       SpecMismatchError, "field 'x' is declared in element_spec() but missing",
       lambda: drift(lambda n: {"y": np.zeros((n, 2), np.float32)}))
simple("stream-extra-field", "Stream batches vs element_spec", "an undeclared field appears",
       SpecMismatchError, "field 'z' is not declared in element_spec()",
       lambda: drift(lambda n: {"x": np.zeros((n, 2), np.float32), "z": np.zeros(n, np.int32)}))
simple("stream-batch-too-big", "Stream batches vs element_spec",
       "get_batch returns more records than asked", SpecMismatchError,
       "batch holds 9 records, more than batch_size=4",
       lambda: drift(lambda n: {"x": np.zeros((9, 2), np.float32)}))
simple("stream-declares-float64", "Stream batches vs element_spec",
       "element_spec declares float64 while x64 is off", SpecMismatchError,
       "Drifting.element_spec() declares 64-bit field(s) 'x' (float64) but jax_enable_x64 is off",
       lambda: drift(lambda n: {}, {"x": jax.ShapeDtypeStruct((2,), np.float64)}))
simple("stream-without-element-spec", "Stream batches vs element_spec",
       "a stream that does not implement element_spec()", SourceContractError,
       "SpecLess implements get_batch but not element_spec(); a streaming source must "
       "declare what its batches carry (a dict of jax.ShapeDtypeStruct per record, or "
       "TextSpec for strings) so Pipeline can check every batch.",
       lambda: pipe(source=SpecLess()))


def twice(source: DataSourceModule, pipeline: bool) -> None:
    """Two passes over ``source``: through a Pipeline, or by direct iteration."""
    reader: Any = (Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0),
                            shard_index=0, shard_count=1) if pipeline else source)
    for _ in range(2):
        for _ in reader:
            pass


def _valid(n: int) -> dict[str, Any]:
    return {"x": np.zeros((n, 2), np.float32)}


simple("stream-not-rewound", "Stream batches vs element_spec",
       "a stream without restart(epoch) read for a second epoch", SourceContractError,
       "Drifting served 8 records in pass 0 and none in pass 1: a forward-only stream must be "
       "rewound between passes. Implement restart(self, epoch) to start the stream over",
       lambda: twice(Drifting(_valid), pipeline=True))
simple("stream-not-rewound-direct", "Stream batches vs element_spec",
       "a stream without restart(epoch) iterated directly a second time", SourceContractError,
       "Drifting served 8 records in pass 0 and none when pass 0 was read again: a "
       "forward-only stream must be rewound between passes.",
       lambda: twice(Drifting(_valid), pipeline=False))

# ------------------------------------------------------------------- states
simple("state-not-a-dict", "Pipeline state", "set_state('abc')", StateError,
       "Pipeline.set_state expects the dict get_state() returned, got str.",
       lambda: pipe().set_state("abc"))
simple("state-other-batch-size", "Pipeline state", "a state from a pipeline with batch_size=3",
       StateError, "Pipeline state was saved with batch_size=3 but this pipeline has "
       "batch_size=2 (each process's; to keep the global batch on another process count, "
       "build it with the saved batch_size and join or cut its batches with "
       "datarax.pipeline.Rebatch(pipeline, group=k or split=k)); restore it into an "
       "identically configured pipeline.",
       lambda: pipe().set_state(state_of()), field="batch_size")
simple("state-other-seed", "Pipeline state", "a state from a source with another seed",
       StateError, "Pipeline state was saved with source.seed=7 but this pipeline has source.seed=8",
       lambda: restore(state_of(shuffle=True), shuffle=True, seed=8), field="source.seed")
simple("state-other-shuffle", "Pipeline state", "a state from an unshuffled source",
       StateError, "Pipeline state was saved with source.shuffle=False but this pipeline has "
       "source.shuffle=True", lambda: restore(state_of(), shuffle=True), field="source.shuffle")
simple("state-other-dataset", "Pipeline state", "a state from a 12-record dataset into 6",
       StateError, "Pipeline state was saved with num_records=12 but this pipeline has "
       "num_records=6", lambda: pipe(batch_size=3).set_state(state_of()), field="num_records")
simple("state-data-grew", "Pipeline state", "a mid-epoch state restored after the data grew "
       "from 12 to 16 records", StateError, "Pipeline state was saved with num_records=12 but "
       "this pipeline has num_records=16 (the records its source holds: the data gained or lost "
       "records since the state was saved",
       lambda: make_memory_pipeline(16, 3, shard_index=0, shard_count=1).set_state(state_of()),
       field="num_records")
def _nnx_into_other_length() -> None:
    saved = make_memory_pipeline(12, 3, shuffle=True, shard_index=0, shard_count=1)
    next(iter(saved))
    fresh = make_memory_pipeline(13, 3, shuffle=True, shard_index=0, shard_count=1)
    nnx.update(fresh, jax.tree.map(np.array, nnx.state(saved)))
    next(iter(fresh))


simple("state-nnx-other-dataset", "Pipeline state", "an nnx.state of a 12-record dataset "
       "restored with nnx.update into 13", StateError, "MemorySource: the position restored "
       "into it (nnx.update, or an Orbax restore of nnx.state) was saved from a source built "
       "with other settings: records=13 differs (this source's values).",
       _nnx_into_other_length, field="records")
def _nnx_into_other_process_count() -> None:
    saved = make_memory_pipeline(12, 3, shuffle=True, shard_index=0, shard_count=2)
    next(iter(saved))
    fresh = make_memory_pipeline(12, 3, shuffle=True, shard_index=0, shard_count=1)
    nnx.update(fresh, jax.tree.map(np.array, nnx.state(saved)))
    next(iter(fresh))


simple("state-nnx-other-shard", "Pipeline state", "an nnx.state of shard 0 of 2 restored "
       "with nnx.update into a pipeline of one process", StateError, "MemorySource: the "
       "position restored into it (nnx.update, or an Orbax restore of nnx.state) was saved "
       "from a source built with other settings: shard='0 of 1' differs (this source's "
       "values).", _nnx_into_other_process_count, field="shard")


def _source_state_into_other_process_count() -> None:
    saved = make_memory_pipeline(12, 3, shuffle=True, shard_index=0, shard_count=2)
    next(iter(saved))
    fresh = make_memory_pipeline(12, 3, shuffle=True, shard_index=0, shard_count=1)
    fresh.source.set_state(saved.source.get_state())


simple("source-state-other-shard", "Pipeline state", "a source's own state (source.get_state()"
       ") of shard 0 of 2 restored with source.set_state on one process", StateError,
       "MemorySource state was saved with shard='0 of 2' but this source has shard='0 of 1'; "
       "restore it into an identically built source. Its position counts that share's "
       "records: here it would serve some records twice and others never. To continue on "
       "another process count, restore the pipeline's state (pipeline.set_state, or "
       "datarax.checkpoint.restore of the pipeline): it re-splits the rest of the epoch.",
       _source_state_into_other_process_count, field="shard")
simple("state-other-source-kind", "Pipeline state", "a MemorySource state into a stream",
       StateError, "Pipeline state was saved with source='MemorySource' but this pipeline has "
       "source='CountingStream'",
       lambda: Pipeline(source=CountingStream(CountingStreamConfig()), stages=[], batch_size=3,
                        shard_index=0, shard_count=1).set_state(state_of()), field="source")
simple("state-other-shard", "Pipeline state", "a stream's state from shard 0 of 2 into shard "
       "1 of 2 (an indexed or random-access source takes it as its own share's)",
       StateError, "Pipeline over CountingStream (shard 1 of 2) was given the state of shard 0 "
       "of 2; a stream source's position is its own share's (it reads its records in order): "
       "only indexed and random-access sources take another process's state. Save and "
       "restore each process's own state (e.g. a JSON file named by jax.process_index()).",
       lambda: _stream_of_shard(1).set_state(_stream_state_of_shard(0)), field="shard")


def _stream_of_shard(index: int) -> Pipeline:
    return Pipeline(source=CountingStream(CountingStreamConfig(num_records=12)), stages=[],
                    batch_size=3, shard_index=index, shard_count=2)


def _stream_state_of_shard(index: int) -> dict[str, Any]:
    with iter(_stream_of_shard(index)) as it:
        next(it)
        return it.get_state()


def _state_stochastic() -> dict[str, Any]:
    return state_of(stochastic=True)


simple("state-other-stages", "Pipeline state", "a state from a pipeline with other stages",
       StateError, "(a digest of the stages, in order: their classes, names and configs, their "
       "functions' source (comments and spacing aside) and the closure and default values that "
       "are plain data (numbers, "
       "strings, arrays, containers of these), and the stages nested in them; the values of "
       "module globals a function reads and other objects it holds count by name or type only; "
       "build the same stages)", lambda: restore(_state_stochastic()), field="stages")


def _filtered(divisor: int) -> Pipeline:
    return pipe(stages=[FilterOperator(predicate=lambda el: el.data["x"] % divisor == 0)])


simple("state-other-stages-edited-function", "Pipeline state",
       "a state from a filter keeping x % 2 == 0 into one keeping x % 3 == 0", StateError,
       "but this pipeline has stages=", lambda: _filtered(3).set_state(_filtered(2).get_state()),
       field="stages")
simple("state-other-rngs", "Pipeline state", "a state from a pipeline built with nnx.Rngs(0) "
       "into one built with nnx.Rngs(1)", StateError,
       "(digests of the keys the pipeline and its stages draw from; build it with the same "
       "rngs seed)",
       lambda: _restore_other_rngs(_state_stochastic()), field="rngs")


def _draw_version_1_state() -> dict[str, Any]:
    """A state of a pipeline that draws, as datarax before draw version 2 saved it."""
    state = _state_stochastic()
    del state["settings"]["draw"]
    return state


simple("state-other-draw-version", "Pipeline state", "a state of a stochastic pipeline saved "
       "by a datarax of random draw version 1", StateError,
       "Pipeline state was saved with random draw version 1, but this datarax draws with "
       "version 2", lambda: restore(_draw_version_1_state(), stochastic=True), field="draw")


def _concat_over_mixture(stochastic: bool) -> Pipeline:
    from datarax.mixing import MixSource
    from datarax.sources import ConcatSource

    def memory(n: int) -> MemorySource:
        return MemorySource(MemorySourceConfig(), data(n))

    source = ConcatSource([MixSource([memory(4), memory(2)], [2, 1]), memory(3)])
    stages = [ElementOperator(ElementOperatorConfig(stochastic=True), fn=_element_and_key)]
    return pipe(source=source, stages=stages if stochastic else [])


def _stable_index_version_1(stochastic: bool) -> dict[str, Any]:
    """A state of a concatenation over a mixture, as datarax before stable index version 2
    saved it (the pipeline's, or the source's own)."""
    if stochastic:
        state = json.loads(json.dumps(_concat_over_mixture(True).get_state()))
        del state["settings"]["source.stable_index_version"]
        return state
    state = json.loads(json.dumps(_concat_over_mixture(False).source.get_state()))
    del state["settings"]["stable_index_version"]
    return state


simple("state-stable-index-version-1", "Pipeline state", "a state of a stochastic pipeline "
       "over a concatenation over a mixture, saved by a datarax of stable index version 1",
       StateError, "Pipeline state was saved with stable index version 1 "
       "(source.stable_index_version absent), but this pipeline's concatenation over a mixture "
       "numbers its records by version 2",
       lambda: _concat_over_mixture(True).set_state(_stable_index_version_1(True)),
       field="source.stable_index_version")
simple("source-state-stable-index-version-1", "Source state", "a ConcatSource state of a "
       "concatenation over a mixture saved by a datarax of stable index version 1", StateError,
       "ConcatSource state was saved with stable index version 1",
       lambda: _concat_over_mixture(False).source.set_state(_stable_index_version_1(False)),
       field="stable_index_version")


def _restore_other_rngs(state: dict[str, Any]) -> None:
    p = make_memory_pipeline(12, 3, stochastic=True, shard_index=0, shard_count=1)
    Pipeline(source=p.source, stages=list(p.stages), batch_size=3, rngs=nnx.Rngs(1),
             shard_index=0, shard_count=1).set_state(state)


simple("state-negative-position", "Pipeline state", "position=-3", StateError,
       "Pipeline state 'position' must be an int >= 0, got -3; pass the dict "
       "Pipeline.get_state() returned.",
       lambda: restore(dict(state_of(), position=-3)), field="position")
simple("state-source-not-a-dict", "Pipeline state", "source=3 (edited by hand)", StateError,
       "Pipeline state 'source' must be the source's state (a dict), got int 3; the state was "
       "tampered with.", lambda: restore(dict(state_of(), source=3)), field="source")
simple("state-float-epoch", "Pipeline state", "epoch=1.5", StateError,
       "Pipeline state 'epoch' must be an int >= 0, got 1.5", lambda: restore(dict(state_of(), epoch=1.5)),
       field="epoch")
simple("state-position-past-end", "Pipeline state", "position=99 in a 12-record epoch",
       StateError, "Pipeline state position=99 is past the end of the epoch (12 records).",
       lambda: restore(dict(state_of(), position=99)), field="position")
simple("state-missing-key", "Pipeline state", "a state without 'settings'", StateError,
       "Pipeline state is missing 'settings'; pass the dict that get_state() returned",
       lambda: restore({k: v for k, v in state_of().items() if k != "settings"}), field="settings")
simple("state-wrong-version", "Pipeline state", "version=3 (an earlier release's state)",
       StateError, "Pipeline state version 3 is not 4, the only version this datarax restores "
       "(2 and 3 are earlier releases' states); restore it with the datarax release that saved "
       "it, or start the epoch again with a fresh pipeline.",
       lambda: restore(dict(state_of(), version=3)), field="version")
simple("state-position-not-the-source-s", "Pipeline state",
       "position=6 while its 'source' says current_index=3", StateError,
       "Pipeline state position=6 but its 'source' says current_index=3; the state was "
       "tampered with.", lambda: restore(dict(state_of(), position=6)), field="position")
simple("state-settings-not-dict", "Pipeline state", "settings='x'", StateError,
       "Pipeline state 'settings' must be the dict get_state() wrote, got str; the state was "
       "tampered with.",
       lambda: restore(dict(state_of(), settings="x")), field="settings")
simple("state-iterator-other-pipeline", "Pipeline state",
       "iterator.set_state with another pipeline's state", StateError,
       "Pipeline state was saved with batch_size=3 but this pipeline has batch_size=2",
       lambda: iter(pipe()).set_state(state_of()), field="batch_size")
simple("state-pipeline-given-source-state", "Pipeline state",
       "pipeline.set_state given a source's state", StateError,
       "Pipeline.set_state got a source's state",
       lambda: restore({"current_index": 3, "current_epoch": 0}))
simple("state-pipeline-given-take-state", "Pipeline state",
       "pipeline.set_state given the state of pipeline.take(n)", StateError,
       "Pipeline.set_state got the state of pipeline.take(...)",
       lambda: pipe().set_state(pipe().take(2).get_state()), field="version")
simple("state-pipeline-given-rebatch-state", "Pipeline state",
       "pipeline.set_state given the state of a Rebatch", StateError,
       "Pipeline.set_state got the state of a Rebatch (keys ['parent', 'part', 'rebatch'])",
       lambda: pipe().set_state(_rebatch_state()), field="version")


def _rebatch_state() -> dict[str, Any]:
    from datarax.pipeline import Rebatch

    it = iter(Rebatch(pipe(), split=2))
    next(it)
    return json.loads(json.dumps(it.get_state()))


def _stream_state() -> dict[str, Any]:
    p = Pipeline(source=CountingStream(CountingStreamConfig(num_records=10)), stages=[],
                 batch_size=3, shard_index=0, shard_count=1)
    with iter(p) as it:
        next(it)
        return json.loads(json.dumps(it.get_state()))


def _restore_stream(state: dict[str, Any], num_records: int = 10) -> None:
    p = Pipeline(source=CountingStream(CountingStreamConfig(num_records=num_records)), stages=[],
                 batch_size=3, shard_index=0, shard_count=1)
    p.set_state(state)
    first_batch(p)


def _stream_state_at_9_of_5() -> dict[str, Any]:
    """A stream state claiming 9 records handed out, relabelled for a 5-record stream."""
    state = _stream_state()
    settings = dict(state["settings"], **{"source.num_records": 5})
    return dict(state, position=9, settings=settings, source={"current_index": 9, "current_epoch": 0})


simple("state-stream-missing-source", "Pipeline state", "a stream state without 'source'",
       StateError, "Pipeline state is missing 'source' (the source's position).",
       lambda: _restore_stream({k: v for k, v in _stream_state().items() if k != "source"}),
       field="source")
simple("state-stream-negative-index", "Pipeline state", "source current_index=-1", StateError,
       "CountingStream state 'current_index' must be an int >= 0, got -1; pass the dict "
       "CountingStream.get_state() returned.",
       lambda: _restore_stream(dict(_stream_state(), source={"current_index": -1, "current_epoch": 0})),
       field="current_index")
simple("state-stream-wrong-keys", "Pipeline state", "source state with wrong keys", StateError,
       "CountingStream state is missing 'current_index'; pass the dict "
       "CountingStream.get_state() returned (got keys ['index'])",
       lambda: _restore_stream(dict(_stream_state(), source={"index": 3})), field="current_index")
simple("state-stream-past-its-end", "Pipeline state",
       "a stream state handing out more records than the stream holds", StateError,
       "CountingStream: the restored position says 9 records of pass 0 were handed out, but "
       "the pass ends before that; the state comes from a different stream.",
       lambda: _restore_stream(_stream_state_at_9_of_5(), 5),
       field="current_index")
simple("state-source-past-end", "Source state", "source.set_state index past the data",
       StateError, "MemorySource state 'current_index' must be an int in [0, 6] "
       "(records handed out of a pass of 6), got 50; pass the dict MemorySource.get_state() "
       "returned.",
       lambda: MemorySource(MemorySourceConfig(), data()).set_state(
           {"current_index": 50, "current_epoch": 0}), field="current_index")


def _shuffled_source_state(seed: int) -> dict[str, Any]:
    source = MemorySource(MemorySourceConfig(shuffle=True, seed=seed), data())
    first_batch(Pipeline(source=source, stages=[], batch_size=2, rngs=nnx.Rngs(0)))
    return json.loads(json.dumps(source.get_state()))


simple("state-source-other-seed", "Source state",
       "source.set_state with a state saved under another seed", StateError,
       "MemorySource state was saved with seed=1 but this source has seed=2; restore it into "
       "an identically built source.",
       lambda: MemorySource(MemorySourceConfig(shuffle=True, seed=2), data()).set_state(
           _shuffled_source_state(1)), field="seed")
simple("state-source-other-record-count", "Source state",
       "source.set_state of a shuffled 6-record source's state into one of 7 records",
       StateError,
       "MemorySource state was saved with records=6 but this source holds 7 records; its "
       "shuffled order is a permutation of its records",
       lambda: MemorySource(MemorySourceConfig(shuffle=True, seed=1), data(7)).set_state(
           _shuffled_source_state(1)), field="records")
simple("state-source-given-pipeline-state", "Source state",
       "source.set_state given a pipeline's state", StateError,
       "MemorySource.set_state got a Pipeline's state",
       lambda: MemorySource(MemorySourceConfig(), data()).set_state(state_of()))


# --------------------------------------------------------- sharding / checkpoint
def _global_batch(axis: str | None, batch: dict[str, Any]) -> Any:
    from datarax.sharding import data_mesh, global_batch

    return global_batch(batch, data_mesh(), axis=axis)


simple("global-batch-unknown-axis", "Sharding and checkpoints", "global_batch(axis='model')",
       ConfigError, "global_batch: mesh has axes ['data'], not 'model'.",
       lambda: _global_batch("model", {"x": np.zeros(4)}))
simple("global-batch-scalar-field", "Sharding and checkpoints", "a scalar field", ConfigError,
       "global_batch: field 'x' is a scalar; it needs a batch axis.",
       lambda: _global_batch(None, {"x": np.float32(1)}))
simple("global-batch-int64-past-int32", "Sharding and checkpoints", "an int64 field holding "
       "2**40 (x64 off)", RecordError, "global_batch: field 'x' is int64 and record 1 holds "
       "1099511627776, outside the int32 range, so it cannot be cast to int32 without loss "
       "while jax_enable_x64 is off.",
       lambda: _global_batch(None, {"x": np.asarray([0, 2**40], np.int64)}))
simple("global-batch-float64", "Sharding and checkpoints", "a float64 field (x64 off)",
       ConfigError, "global_batch: field 'x' is float64 but jax_enable_x64 is off, and "
       "datarax never narrows silently. Cast it yourself (value.astype(np.float32)), or "
       "enable x64 with jax.config.update('jax_enable_x64', True).",
       lambda: _global_batch(None, {"x": np.zeros(4)}))
simple("checkpoint-data-not-dict", "Sharding and checkpoints",
       "a checkpoint whose data item is not a state dict", StateError,
       "the checkpoint's 'data' item holds list, not the state dict get_state() returned",
       lambda: __import__("datarax.checkpoint").checkpoint.restore_data(pipe(), [1]),
       field="data")


def _relative_checkpoint_folder() -> None:
    import orbax.checkpoint as ocp

    import datarax.checkpoint

    options = ocp.CheckpointManagerOptions(create=False)
    with ocp.CheckpointManager("ckpt", options=options) as manager:
        datarax.checkpoint.save(manager, 1, pipe(), model=ocp.args.JsonSave({"w": 1}))


simple("checkpoint-relative-folder", "Sharding and checkpoints",
       "ocp.CheckpointManager('ckpt') (a relative folder) and a model item", ConfigError,
       "Orbax saves and restores arrays only in an absolute folder, and this "
       "CheckpointManager's is 'ckpt'. Build it with datarax.checkpoint.checkpoint_manager("
       "'ckpt', ...), which resolves the folder", _relative_checkpoint_folder,
       needs="orbax.checkpoint")
simple("checkpoint-process-states-malformed", "Sharding and checkpoints",
       "a checkpoint whose data item's 'process_states' is a dict, not a list", StateError,
       "the checkpoint's 'data' item has 'process_states' dict, not the list of every "
       "process's state dict datarax.checkpoint.save wrote; the checkpoint was tampered with.",
       lambda: __import__("datarax.checkpoint").checkpoint.restore_data(
           pipe(), {"process_states": {"0": state_of()}}),
       field="data", needs="orbax.checkpoint")

simple("pipeline-stages-on-unknown", "Sharding and checkpoints",
       "Pipeline(stages_on='cpu')", ConfigError,
       "Pipeline stages_on must be 'device' (the stages run on JAX's default device, the "
       "accelerator) or 'host'", lambda: pipe(stages_on="cpu"))
simple("pipeline-stages-on-host-scan", "Sharding and checkpoints",
       "Pipeline.scan over a pipeline built with stages_on='host'", ConfigError,
       "Pipeline.scan runs the data and the train step as one compiled program on the device, "
       "but this pipeline was built with stages_on='host'",
       lambda: pipe(stages_on="host").scan(lambda b: None, 1))
simple("pipeline-step-under-trace", "Sharding and checkpoints",
       "pipeline.step() called inside a jax.jit train step", ConfigError,
       "Pipeline.step() was called while JAX traces a function (inside jax.jit, nnx.jit, "
       "jax.lax.scan, ...)", lambda: (lambda p: jax.jit(lambda: p.step()["x"])())(pipe()))
simple("pipeline-next-under-trace", "Sharding and checkpoints",
       "next(iterator) called inside a jax.jit train step", ConfigError,
       "next() of a Pipeline iterator was called while JAX traces a function",
       lambda: (lambda it: jax.jit(lambda: next(it)["x"])())(iter(pipe(prefetch=0))))


# ----------------------------------------------------------------- ArrayRecord
def _ar_file(path: Path, n: int = 8, width: int = 2) -> str:
    return write_records(path, (np.full(width, i, np.float32).tobytes() for i in range(n)))


def _ar(paths: Any, decode: Any = None, **config: Any) -> Any:
    from datarax.sources.array_record import ArrayRecordSourceConfig, ArrayRecordSourceModule

    dec = decode or (lambda r: {"x": np.frombuffer(r, np.float32)})
    return ArrayRecordSourceModule(ArrayRecordSourceConfig(**config), paths, decode=dec)


def _ar_read_all(source: Any) -> None:
    with source:
        for _ in Pipeline(source=source, stages=[], batch_size=4, shard_index=0, shard_count=1):
            pass


def _ar_config(**kw: Any) -> Any:
    from datarax.sources.array_record import ArrayRecordSourceConfig

    return ArrayRecordSourceConfig(**kw)


AR = "datarax.sources.array_record"
case("arrayrecord-missing-file", "ArrayRecord", "a path that does not exist", RecordError,
     "the file '{tmp}/nope.array_record' does not exist", needs=AR)(
    lambda tmp: _ar(str(tmp / "nope.array_record")))
case("arrayrecord-directory", "ArrayRecord", "a directory as path", RecordError,
     "is a directory, not a file", needs=AR)(lambda tmp: _ar(str(tmp)))
case("arrayrecord-empty-glob", "ArrayRecord", "a glob matching nothing", RecordError,
     "the glob pattern '{tmp}/data-*.array_record' matches no files", needs=AR)(
    lambda tmp: _ar(str(tmp / "data-*.array_record")))
simple("arrayrecord-empty-list", "ArrayRecord", "paths=[]", ConfigError,
       "ArrayRecordSourceModule paths is an empty list; name at least one file.",
       lambda: _ar([]), needs=AR)
simple("arrayrecord-paths-int", "ArrayRecord", "paths=3", ConfigError,
       "ArrayRecordSourceModule paths must be a path, a glob pattern or a list of them (str or "
       "os.PathLike), got int 3.",
       lambda: _ar(3), needs=AR)


def _ar_path_keyword() -> Any:
    from datarax.sources.array_record import ArrayRecordSourceConfig, ArrayRecordSourceModule

    return ArrayRecordSourceModule(ArrayRecordSourceConfig(), path="data.array_record")


simple("arrayrecord-keyword-near-miss", "ArrayRecord", "path= (a near miss of paths=)",
       ConfigError,
       "ArrayRecordSourceModule got unknown setting(s) ['path']; its settings are ['seed', "
       "'num_epochs', 'shuffle_files', 'shuffle_window', 'shuffle_block', 'on_error', "
       "'max_skipped', 'max_skipped_fraction', 'cast_float64']. Did you mean paths=, a keyword "
       "argument of ArrayRecordSourceModule (not a setting of its config)?",
       _ar_path_keyword, needs=AR)


def _corrupt(tmp: Path) -> Any:
    path = tmp / "corrupt.array_record"
    path.write_bytes(np.random.default_rng(0).bytes(4096))  # the same bytes every run
    return _ar(str(path))


def _truncated(tmp: Path) -> Any:
    path = Path(_ar_file(tmp / "trunc.array_record", n=64, width=64))
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    return _ar_read_all(_ar(str(path)))


def _empty_file(tmp: Path) -> Any:
    path = tmp / "empty.array_record"
    path.write_bytes(b"")
    return _ar(str(path))


case("arrayrecord-corrupt-file", "ArrayRecord", "a file of random bytes", RecordError,
     "is not a readable ArrayRecord file", needs=AR)(_corrupt)
case("arrayrecord-truncated-file", "ArrayRecord", "a file cut in half (interrupted write)",
     RecordError, "is not a readable ArrayRecord file", needs=AR)(_truncated)
case("arrayrecord-empty-file", "ArrayRecord", "a zero-byte file", RecordError,
     "is not a readable ArrayRecord file", needs=AR)(_empty_file)
case("arrayrecord-no-records", "ArrayRecord", "files written with no records", RecordError,
     "ArrayRecordSourceModule: the files ['{tmp}/none.array_record'] hold no records; name files "
     "that hold some (or write records into them).", needs=AR)(
    lambda tmp: _ar(write_records(tmp / "none.array_record", [])))
case("arrayrecord-glob-of-folders", "ArrayRecord", "a '**' glob matching only folders",
     RecordError, "the glob pattern '{tmp}/**/' matches no files", needs=AR)(
    lambda tmp: ((tmp / "sub").mkdir(), _ar(str(tmp / "**") + "/")))
case("arrayrecord-num-threads-float", "ArrayRecord", "num_threads=np.float64(2)", ConfigError,
     "ArrayRecordSourceModule num_threads must be an int >= 1, got np.float64(2.0).", needs=AR)(
    lambda tmp: _ar_num_threads(tmp, np.float64(2)))


def _ar_num_threads(tmp: Path, num_threads: Any) -> Any:
    from datarax.sources.array_record import ArrayRecordSourceConfig, ArrayRecordSourceModule

    return ArrayRecordSourceModule(ArrayRecordSourceConfig(), _ar_file(tmp / "a.array_record"),
                                   decode=lambda r: {"x": r}, num_threads=num_threads)


def _decode_error(tmp: Path) -> Any:
    path = _ar_file(tmp / "d.array_record")

    def decode(raw: bytes) -> dict[str, Any]:
        value = np.frombuffer(raw, np.float32)
        if value[0] == 5:
            raise ValueError("bad record 5")
        return {"x": value}

    _ar_read_all(_ar(path, decode))


def _ar_shape_drift(tmp: Path) -> Any:
    path = _ar_file(tmp / "s.array_record")

    def decode(raw: bytes) -> dict[str, Any]:
        value = np.frombuffer(raw, np.float32)
        return {"x": value if value[0] < 6 else np.concatenate([value, value])}

    _ar_read_all(_ar(path, decode))


def _ar_dtype_drift(tmp: Path) -> Any:
    path = _ar_file(tmp / "t.array_record")

    def decode(raw: bytes) -> dict[str, Any]:
        value = np.frombuffer(raw, np.float32)
        return {"x": value if value[0] < 6 else value.astype(np.int32)}

    _ar_read_all(_ar(path, decode))


def _ar_budget(tmp: Path) -> Any:
    path = _ar_file(tmp / "b.array_record")

    def decode(raw: bytes) -> dict[str, Any]:
        value = np.frombuffer(raw, np.float32)
        if value[0] in (1, 2, 3):
            raise ValueError("bad")
        return {"x": value}

    _ar_read_all(_ar(path, decode, on_error="skip", max_skipped=2))


case("arrayrecord-decode-error", "ArrayRecord", "decode raises on record 5", RecordError,
     "cannot read record 5 of file '{tmp}/d.array_record' (epoch 0): ValueError: bad record 5",
     needs=AR)(_decode_error)
case("arrayrecord-shape-drift", "ArrayRecord", "decode changes shape at record 6", RecordError,
     "cannot read record 6 of file '{tmp}/s.array_record' (epoch 0): field 'x' decodes to "
     "float32(4,), the first record's is float32(2,)", needs=AR)(_ar_shape_drift)
case("arrayrecord-dtype-drift", "ArrayRecord", "decode changes dtype at record 6", RecordError,
     "cannot read record 6 of file '{tmp}/t.array_record' (epoch 0): field 'x' decodes to "
     "int32(2,), the first record's is float32(2,)", needs=AR)(_ar_dtype_drift)
case("arrayrecord-skip-budget", "ArrayRecord", "3 bad records with on_error='skip', max_skipped=2",
     RecordError, "skipped 3 bad records in epoch 0, over the budget of 2", needs=AR)(_ar_budget)
simple("arrayrecord-config-on-error", "ArrayRecord", "on_error='ignore'", ConfigError,
       "ArrayRecordSourceConfig: ", lambda: _ar_config(on_error="ignore"), needs=AR)
simple("arrayrecord-config-max-skipped", "ArrayRecord", "max_skipped=-1", ConfigError,
       "max_skipped must be an int >= 0 or None, got -1.",
       lambda: _ar_config(on_error="skip", max_skipped=-1), needs=AR)
simple("arrayrecord-config-fraction", "ArrayRecord", "max_skipped_fraction=1.5", ConfigError,
       "max_skipped_fraction", lambda: _ar_config(on_error="skip", max_skipped_fraction=1.5),
       needs=AR)
simple("arrayrecord-config-shuffle-files", "ArrayRecord", "shuffle_files='yes'", ConfigError,
       "ArrayRecordSourceConfig.shuffle_files must be a bool (True/False), got str 'yes'.",
       lambda: _ar_config(shuffle_files="yes"), needs=AR)
simple("arrayrecord-config-num-epochs", "ArrayRecord", "num_epochs=0", ConfigError,
       "ArrayRecordSourceConfig.num_epochs must be >= 1 (or -1 for passes without end), got 0.",
       lambda: _ar_config(num_epochs=0), needs=AR)
simple("arrayrecord-config-unknown-option", "ArrayRecord", "ArrayRecordSourceConfig(shuffle=True)",
       TypeError, "ArrayRecordSourceConfig got an unexpected keyword argument 'shuffle' (did you "
       "mean 'shuffle_files'?); its options are: seed, num_epochs, shuffle_files, "
       "shuffle_window, shuffle_block, on_error, max_skipped, max_skipped_fraction, cast_float64.",
       lambda: _ar_config(shuffle=True), needs=AR)
simple("arrayrecord-shuffle-block-without-window", "ArrayRecord",
       "ArrayRecordSourceConfig(shuffle_files=True, shuffle_block='8M') (no shuffle_window)",
       ConfigError, "ArrayRecordSourceConfig.shuffle_block='8M' cuts files into blocks for a "
       "window shuffle and needs shuffle_window=W (blocks per window) and shuffle_files=True; "
       "set them, or drop shuffle_block.",
       lambda: _ar_config(shuffle_files=True, shuffle_block="8M"), needs=AR)
simple("arrayrecord-shuffle-block-too-small", "ArrayRecord",
       "ArrayRecordSourceConfig(shuffle_files=True, shuffle_window=4, shuffle_block=1000)",
       ConfigError, "ArrayRecordSourceConfig.shuffle_block=1000 is smaller than 65536 bytes: a "
       "block costs a request to download; use blocks of a few MB (e.g. '8M').",
       lambda: _ar_config(shuffle_files=True, shuffle_window=4, shuffle_block=1000), needs=AR)
simple("arrayrecord-wrong-config", "ArrayRecord", "a MemorySourceConfig", ConfigError,
       "ArrayRecordSourceModule needs an ArrayRecordSourceConfig, got MemorySourceConfig (the "
       "config of another kind of module). Call ArrayRecordSourceModule(ArrayRecordSourceConfig(), "
       "paths='data-*.array_record').",
       lambda: __import__(AR, fromlist=["x"]).ArrayRecordSourceModule(MemorySourceConfig(), "x"),
       needs=AR)
simple("arrayrecord-paths-as-config", "ArrayRecord", "ArrayRecordSourceModule('x.array_record')",
       ConfigError,
       "ArrayRecordSourceModule got str 'x.array_record' where its ArrayRecordSourceConfig goes, "
       "and no paths: the config comes first, the paths second. Call "
       "ArrayRecordSourceModule(ArrayRecordSourceConfig(), paths='data-*.array_record').",
       lambda: __import__(AR, fromlist=["x"]).ArrayRecordSourceModule("x.array_record"),
       needs=AR)

def _ar_deleted(tmp: Path) -> Any:
    path = _ar_file(tmp / "gone.array_record")
    source = _ar(path)
    os.remove(path)
    _ar_read_all(source)  # closes it while the error propagates


case("arrayrecord-file-deleted", "ArrayRecord", "the file deleted after construction",
     RecordError, "cannot read record 0 of file '{tmp}/gone.array_record': OSError: "
     "cannot open the file: open() failed: No such file or directory", needs=AR)(_ar_deleted)


def _ar_float64_by_index(tmp: Path) -> Any:
    source = _ar(_ar_file(tmp / "f64.array_record"),
                 decode=lambda r: {"x": np.frombuffer(r, np.float32).astype(np.float64)})
    with source:
        return source[3]


case("arrayrecord-float64-by-index", "ArrayRecord",
     "source[i] of a decode returning float64, without cast_float64", ConfigError,
     "field 'x' is float64 but jax_enable_x64 is off, and datarax never narrows silently. "
     "Set cast_float64=True in the config", needs=AR)(_ar_float64_by_index)


def _ar_tampered(tmp: Path, **change: Any) -> Any:
    path = _ar_file(tmp / "st.array_record")
    src = _ar(path, shuffle_files=True)
    state = dict(src.get_state(), **change)
    with src:
        src.set_state(state)


case("arrayrecord-state-skipped-tampered", "ArrayRecord", "state skipped > current_index",
     StateError, "state 'skipped' must be an int in [0, 1] (records skipped as bad before "
     "position 1), got 5; pass the dict", field="skipped", needs=AR)(
    lambda tmp: _ar_tampered(tmp, current_index=1, skipped=5))
case("arrayrecord-state-other-seed", "ArrayRecord", "state shuffled with another seed",
     StateError, "(shuffled_indices.seed)", field="seed", needs=AR)(
    lambda tmp: _ar_tampered(tmp, shuffled_indices={"seed": 1, "epoch": 0, "n": 8}))
case("arrayrecord-state-unshuffled", "ArrayRecord", "a state saved without shuffle_files",
     StateError, "was saved with shuffle_files=False but this source has shuffle_files=True",
     field="shuffle_files", needs=AR)(lambda tmp: _ar_tampered(tmp, shuffled_indices=None))


def _ar_state_other_files(tmp: Path) -> None:
    paths = [_ar_file(tmp / "a.array_record"), _ar_file(tmp / "b.array_record")]
    with _ar(paths) as saved, _ar(paths[::-1]) as swapped:
        swapped.set_state(saved.get_state())


case("arrayrecord-state-other-files", "ArrayRecord",
     "a state restored over the same files listed in another order", StateError,
     "ArrayRecordSourceModule state was saved over other files (files='", field="files",
     needs=AR)(_ar_state_other_files)


def _ar_concat_state_other_files(tmp: Path) -> None:
    from datarax.sources import ConcatSource

    paths = [_ar_file(tmp / "a.array_record"), _ar_file(tmp / "b.array_record")]

    def concat(files: list[str]) -> Pipeline:
        return Pipeline(source=ConcatSource([_ar(f) for f in files]), stages=[], batch_size=4)

    saved = concat(paths)
    next(iter(saved))
    concat(paths[::-1]).set_state(saved.get_state())


case("arrayrecord-concat-state-other-files", "ArrayRecord",
     "a ConcatSource's state restored over its ArrayRecord parts' files in another order",
     StateError, "(a digest of an ArrayRecord source's files' names and record counts, in "
     "order: it reads other files, or the same files in another order",
     field="source.parts[0].files", needs=AR)(_ar_concat_state_other_files)
case("arrayrecord-decode-nested-dict", "ArrayRecord", "decode returning {'a': {'b': array}}",
     ConfigError, "decode returned a nested dict (field 'a/b' is inside the dict under 'a')",
     needs=AR)(lambda tmp: _ar_read_all(_ar(
         _ar_file(tmp / "n.array_record"),
         decode=lambda r: {"a": {"b": np.frombuffer(r, np.float32)}})))


def _ar_decode_batch_only(tmp: Path, decode_batch: Callable[[list[bytes]], Any]) -> None:
    from datarax.sources.array_record import ArrayRecordSourceConfig, ArrayRecordSourceModule

    _ar_read_all(ArrayRecordSourceModule(ArrayRecordSourceConfig(), _ar_file(tmp / "b.array_record"),
                                         decode_batch=decode_batch))


def _ar_state_into_memory(tmp: Path) -> None:
    with _ar(_ar_file(tmp / "s.array_record")) as src:
        next(iter(src))
        MemorySource(MemorySourceConfig(), data()).set_state(src.get_state())


case("arrayrecord-state-into-memory-source", "ArrayRecord",
     "an ArrayRecord source's state given to MemorySource.set_state", StateError,
     "MemorySource state was saved by a source of other settings: the state's are "
     "['shuffle_files', 'on_error', 'files'], this source's ['shuffle']", field="shuffle",
     needs=AR)(_ar_state_into_memory)
def _ar_skip_nothing_decodes(tmp: Path) -> None:
    def refuse(record: bytes) -> Any:
        raise ValueError("decode cannot read this layout")

    _ar_read_all(_ar(_ar_file(tmp / "k.array_record"), decode=refuse, on_error="skip"))


case("arrayrecord-skip-nothing-decodes", "ArrayRecord",
     "on_error='skip' and a decode that raises on every record", RecordError,
     "none of the first 8 records could be read and decoded, so the fields are unknown. The "
     "first failure: ArrayRecordSourceModule: cannot read record 0 of file",
     needs=AR)(_ar_skip_nothing_decodes)
case("arrayrecord-decode-batch-not-a-dict", "ArrayRecord",
     "decode_batch (no decode) returning a list", RecordError,
     "decode_batch returned list, expected a dict of arrays with one row per record",
     needs=AR)(lambda tmp: _ar_decode_batch_only(tmp, lambda records: [b"".join(records)]))
case("arrayrecord-decode-batch-rows", "ArrayRecord",
     "decode_batch (no decode) returning two rows per record", RecordError,
     "decode_batch returned field 'x' as 2 rows for 1 record",
     needs=AR)(lambda tmp: _ar_decode_batch_only(
         tmp, lambda records: {"x": np.zeros((2 * len(records), 2), np.float32)}))



def _ar_nan_in_second_file(tmp: Path) -> None:
    """Records 0..7 in one file, 8..15 in another; record 11 (the second file's record 3)
    decodes to NaN."""
    paths = [_ar_file(tmp / "a.array_record"),
             write_records(tmp / "b.array_record",
                           (np.full(2, i, np.float32).tobytes() for i in range(8, 16)))]

    def nan_at_11(record: bytes) -> dict[str, np.ndarray]:
        x = np.frombuffer(record, np.float32)
        return {"x": np.full(2, np.nan, np.float32) if x[0] == 11 else x}

    source = _ar(paths, decode=nan_at_11)
    with source:
        for _ in Pipeline(source=source, stages=[], batch_size=4, shard_index=0, shard_count=1,
                          check_finite=True):
            pass


def _ar_index_of_another_shape(tmp: Path) -> None:
    """``source[5]`` of a record that decodes to 3 values where the first decodes to 2."""
    def wide_at_5(record: bytes) -> dict[str, np.ndarray]:
        x = np.frombuffer(record, np.float32)
        return {"x": np.resize(x, 3) if x[0] == 5 else x}

    with _ar(_ar_file(tmp / "s.array_record"), decode=wide_at_5) as source:
        source[5]


case("arrayrecord-nan-named-by-file", "ArrayRecord",
     "a record decoding to NaN under check_finite=True, in the second of two files",
     SpecMismatchError,
     "field 'x' of the record at position 11 of epoch 0 (stable index 11), record 3 of file "
     "'{tmp}/b.array_record', holds NaN or inf (check_finite=True).",
     needs=AR)(_ar_nan_in_second_file)
case("arrayrecord-index-of-another-shape", "ArrayRecord",
     "source[5] of a record of another shape than the first record's", RecordError,
     "cannot read record 5 of file '{tmp}/s.array_record': field 'x' decodes to float32(3,), "
     "the first record's is float32(2,)", needs=AR)(_ar_index_of_another_shape)


# ------------------------------------------------------------------- HF / TFDS
HF = "datarax.sources.hf"
TFDS = "datarax.sources.tfds"


def _hf(cls: str, /, *args: Any, **kw: Any) -> Any:
    return getattr(__import__(HF, fromlist=["x"]), cls)(*args, **kw)


simple("hf-config-no-name", "Hugging Face", "HFEagerConfig() without name or data_files",
       ConfigError, "HFEagerConfig needs name= (a Hub id, a local folder or file) or data_files=.",
       lambda: _hf("HFEagerConfig"), needs=HF)
simple("hf-config-empty-split", "Hugging Face", "split=''", ConfigError,
       "HFEagerConfig.split must be a non-empty str such as 'train', got ''.",
       lambda: _hf("HFEagerConfig", name="x", split=""), needs=HF)
simple("hf-config-streaming-eager", "Hugging Face", "HFEagerConfig(streaming=True)", ConfigError,
       "HFEagerConfig.streaming must be False", lambda: _hf("HFEagerConfig", name="x", streaming=True),
       needs=HF)
simple("hf-config-chunk-size", "Hugging Face", "HFStreamingConfig(chunk_size=0)", ConfigError,
       "HFStreamingConfig.chunk_size must be >= 1, got 0.",
       lambda: _hf("HFStreamingConfig", name="x", chunk_size=0), needs=HF)
simple("hf-config-data-files-empty", "Hugging Face", "data_files=[]", ConfigError,
       "HFEagerConfig.data_files (the files of split 'train') is an empty list; name at least "
       "one file.",
       lambda: _hf("HFEagerConfig", data_files=[]), needs=HF)
simple("hf-config-seed", "Hugging Face", "seed=-5", ConfigError,
       "HFStreamingConfig.seed must be >= 0, got -5.",
       lambda: _hf("HFStreamingConfig", name="x", seed=-5), needs=HF)
simple("hf-config-on-error", "Hugging Face", "HFStreamingConfig(on_error='ignore')", ConfigError,
       "HFStreamingConfig: on_error must be one of ['raise', 'skip'], got 'ignore'.",
       lambda: _hf("HFStreamingConfig", name="x", on_error="ignore"), needs=HF)
simple("hf-name-as-config", "Hugging Face", "HFEagerSource('mnist')", ConfigError,
       "HFEagerSource needs an HFEagerConfig, got str 'mnist'. Call "
       "HFEagerSource(HFEagerConfig(name='mnist')).",
       lambda: _hf("HFEagerSource", "mnist"), needs=HF)


def _hf_skip_budget(tmp: Path) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    vec = [[i, i] if i not in (2, 5) else [i] for i in range(8)]
    path = str(tmp / "train.parquet")
    pq.write_table(pa.table({"vec": pa.array(vec, pa.list_(pa.int32()))}), path)
    source = _hf("HFStreamingSource", config=_hf(
        "HFStreamingConfig", name="parquet", data_files=path, chunk_size=4, on_error="skip",
        max_skipped=1))
    while source.get_batch(4) is not None:
        pass


case("hf-stream-skip-budget", "Hugging Face",
     "streaming with on_error='skip', max_skipped=1 over 2 records of another shape", RecordError,
     "HFStreamingSource: skipped 2 bad records in epoch 0, over the budget of 1 (max_skipped=1, "
     "max_skipped_fraction=None). Latest: record 5: field 'vec' is int32 of shape (1,), but the "
     "first record's is int32 of shape (2,). Raise the skip budget or fix the data.",
     needs=HF)(_hf_skip_budget)


def _hf_bad_image(tmp: Path) -> Any:
    import datasets

    ds = datasets.Dataset.from_dict({"img": [{"bytes": b"not an image", "path": None}]},
                                    features=datasets.Features({"img": datasets.Image()}))
    ds.save_to_disk(str(tmp / "hf"))
    return _hf("HFEagerSource", _hf("HFEagerConfig", name=str(tmp / "hf")))


case("hf-image-does-not-decode", "Hugging Face",
     "an Image column holding bytes that are no image", RecordError,
     "HFEagerSource: field 'img' of record 0 of split 'train' does not decode as an image: "
     "UnidentifiedImageError: cannot identify image file",
     needs=HF)(_hf_bad_image)


def _hf_empty_jsonl(tmp: Path) -> Any:
    (tmp / "data").mkdir()
    (tmp / "data" / "train.jsonl").write_bytes(b"")
    return _hf("from_hf", str(tmp / "data"), "train", streaming=True)


case("hf-local-files-all-empty", "Hugging Face",
     "a local folder whose only data file is empty (0 bytes)", DataraxError,
     "HFStreamingSource: cannot load dataset '{tmp}/data': every data file is empty "
     "('{tmp}/data/train.jsonl'), so it holds no records. Write records into it, or point at "
     "the files that hold them.", needs=HF)(_hf_empty_jsonl)


def _tfds(cls: str, /, **kw: Any) -> Any:
    return getattr(__import__(TFDS, fromlist=["x"]), cls)(**kw)


simple("tfds-config-download-str", "TensorFlow Datasets", "download='yes'", ConfigError,
       "TFDSEagerConfig.download must be a bool (True/False), got str 'yes'.",
       lambda: _tfds("TFDSEagerConfig", name="mnist", download="yes"), needs=TFDS)
simple("tfds-config-num-threads", "TensorFlow Datasets", "num_threads=0", ConfigError,
       "TFDSStreamingConfig.num_threads must be >= 1, got 0.",
       lambda: _tfds("TFDSStreamingConfig", name="mnist", num_threads=0), needs=TFDS)
simple("tfds-config-shuffle-int", "TensorFlow Datasets", "shuffle=1", ConfigError,
       "TFDSEagerConfig.shuffle must be a bool (True/False), got int 1.",
       lambda: _tfds("TFDSEagerConfig", name="mnist", shuffle=1), needs=TFDS)
simple("tfds-config-on-error", "TensorFlow Datasets", "on_error='ignore'", ConfigError,
       "TFDSStreamingConfig: on_error must be one of ['raise', 'skip'], got 'ignore'.",
       lambda: _tfds("TFDSStreamingConfig", name="mnist", on_error="ignore"), needs=TFDS)
simple("tfds-config-budget-without-skip", "TensorFlow Datasets",
       "max_skipped=3 with on_error='raise'", ConfigError,
       "TFDSStreamingConfig: max_skipped / max_skipped_fraction only apply with on_error='skip'",
       lambda: _tfds("TFDSStreamingConfig", name="mnist", max_skipped=3), needs=TFDS)
simple("tfds-eager-skip-option", "TensorFlow Datasets",
       "from_tfds(streaming=False, on_error='skip')", ConfigError,
       "from_tfds: ['on_error'] apply only to streaming (TFDSStreamingSource)",
       lambda: _tfds("from_tfds", name="mnist", streaming=False, on_error="skip"), needs=TFDS)


# ----------------------------------------------------------- values and dtypes
VD = "Values and dtypes"
simple("memory-int64-does-not-fit", VD, "MemorySource: an int64 value outside int32 (x64 off)",
       RecordError, "MemorySource: field 'x' is int64 and record 1 holds 4294967296, outside the "
       "int32 range, so it cannot be cast to int32 without loss while jax_enable_x64 is off. "
       "Enable x64 with jax.config.update('jax_enable_x64', True), or remove the field from data.",
       lambda: MemorySource(MemorySourceConfig(), {"x": np.array([0, 2**32, 1])}))
simple("memory-nested-int64-does-not-fit", VD, "MemorySource: a nested int64 field outside int32",
       RecordError, "MemorySource: field 'meta/id' is int64 and record 0 holds -4294967296",
       lambda: MemorySource(MemorySourceConfig(), {"meta": {"id": np.array([-(2**32), 1])}}))
simple("memory-float64-without-cast", VD, "MemorySource: a float64 array (x64 off)",
       ConfigError, "MemorySource: field 'x' is float64 but jax_enable_x64 is off, and datarax "
       "never narrows silently. Set cast_float64=True in the config to cast it to float32, "
       "enable x64 with jax.config.update('jax_enable_x64', True), or remove the field from data.",
       lambda: MemorySource(MemorySourceConfig(), {"x": np.zeros(3)}))
simple("memory-config-cast-float64-int", VD, "MemorySourceConfig(cast_float64=1)", ConfigError,
       "MemorySourceConfig.cast_float64 must be a bool (True/False), got int 1.",
       lambda: MemorySourceConfig(cast_float64=1))


def _ar_decoded(tmp: Path, value: Callable[[int], Any], **config: Any) -> Any:
    path = _ar_file(tmp / "v.array_record")

    def decode(raw: bytes) -> dict[str, Any]:
        return {"x": value(int(np.frombuffer(raw, np.float32)[0]))}

    _ar_read_all(_ar(path, decode, **config))


case("decode-int-does-not-fit", VD, "ArrayRecord decode returns a Python int outside int32",
     RecordError, "ArrayRecordSourceModule: cannot read record 5 of file '{tmp}/v.array_record' "
     "(epoch 0): field 'x' is int64 and holds 8589934592, outside the int32 range, so it cannot "
     "be cast to int32 without loss while jax_enable_x64 is off. Enable x64 with "
     "jax.config.update('jax_enable_x64', True), or cast or drop the field in decode. The "
     "record is otherwise readable: do as above", needs=AR)(
    lambda tmp: _ar_decoded(tmp, lambda i: 2**33 if i == 5 else i))
case("decode-float64-without-cast", VD, "ArrayRecord decode returns float64 (x64 off)",
     ConfigError, "ArrayRecordSourceModule: decoding record 0 of file '{tmp}/v.array_record': "
     "field 'x' is float64 but jax_enable_x64 is off, and datarax never narrows silently. Set "
     "cast_float64=True in the config to cast it to float32", needs=AR)(
    lambda tmp: _ar_decoded(tmp, lambda i: np.full(2, i, np.float64)))
case("decode-none-first-record", VD, "ArrayRecord decode returns None for a field",
     RecordError, "ArrayRecordSourceModule: cannot read record 0 of file '{tmp}/v.array_record': "
     "field 'x' decodes to NoneType, which is neither numbers nor text: return a number, an "
     "array of numbers, or str / bytes (in every record) for it from decode (a missing value: "
     "a placeholder such as '' or -1)", needs=AR)(
    lambda tmp: _ar_decoded(tmp, lambda i: None))
case("decode-none-in-text-field", VD, "ArrayRecord decode returns None where record 0 had str",
     RecordError, "cannot read record 5 of file '{tmp}/v.array_record' (epoch 0): field 'x' "
     "decodes to NoneType, the first record's (record 0) is str; a text field holds str in "
     "every record", needs=AR)(
    lambda tmp: _ar_decoded(tmp, lambda i: None if i == 5 else f"caption {i}"))
simple("arrayrecord-config-cast-float64-str", VD, "ArrayRecordSourceConfig(cast_float64='yes')",
       ConfigError, "ArrayRecordSourceConfig.cast_float64 must be a bool (True/False), got str "
       "'yes'.", lambda: _ar_config(cast_float64="yes"), needs=AR)
simple("stream-nested-field-missing", VD, "a declared nested field is missing",
       SpecMismatchError, "Drifting batch at record 0 of epoch 0 does not match element_spec(): "
       "field 'meta/id' is declared in element_spec() but missing",
       lambda: drift(lambda n: {}, {"x": jax.ShapeDtypeStruct((2,), np.float32),
                                    "meta": {"id": jax.ShapeDtypeStruct((), np.int32)}}))
simple("stream-declares-nested-int64", VD, "element_spec declares a nested int64 (x64 off)",
       SpecMismatchError, "Drifting.element_spec() declares 64-bit field(s) 'meta/id' (int64) "
       "but jax_enable_x64 is off",
       lambda: drift(lambda n: {}, {"x": jax.ShapeDtypeStruct((2,), np.float32),
                                    "meta": {"id": jax.ShapeDtypeStruct((), np.int64)}}))


# ------------------------------------------------- writing sources and stages
SOURCES_AND_STAGES = "Writing sources and stages"


def _npy(tmp: Path, **arrays: Any) -> dict[str, str]:
    paths = {}
    for name, array in arrays.items():
        paths[name] = str(tmp / f"{name}.npy")
        np.save(paths[name], array)
    return paths


def _npy_source(**kw: Any) -> Any:
    from datarax.sources import NpySource, NpySourceConfig

    return NpySource(NpySourceConfig(**kw))


simple("npy-config-keyword-beside-a-path", SOURCES_AND_STAGES,
       "NpySource(path, config=config)", ConfigError,
       "NpySource got str 'x.npy' first and config= as a keyword: the config is its only "
       "positional argument. Call NpySource(NpySourceConfig(paths='x.npy')), "
       "NpySource(config=NpySourceConfig(paths='x.npy')) or NpySource(paths='x.npy') (settings "
       "as keywords).",
       lambda: __import__("datarax.sources", fromlist=["x"]).NpySource(
           "x.npy", config=__import__("datarax.sources", fromlist=["x"]).NpySourceConfig(
               paths="x.npy")))
case("npy-missing-file", SOURCES_AND_STAGES, "NpySource over a file that does not exist",
     RecordError, "NpySource: field 'data': the file '{tmp}/nope.npy' does not exist. Check the "
     "path (a glob pattern such as 'data-*.npy' is expanded).")(
    lambda tmp: _npy_source(paths=str(tmp / "nope.npy")))
case("npy-shard-shape-differs", SOURCES_AND_STAGES, "shards of (3,) and (5,) records",
     RecordError,
     "NpySource: field 'x': '{tmp}/b.npy' holds records of float32(5,), but '{tmp}/a.npy' "
     "holds float32(3,); every shard of a field must have the same per-record shape and dtype.")(
    lambda tmp: _npy_source(field="x", paths=list(_npy(
        tmp, a=np.zeros((4, 3), np.float32), b=np.zeros((2, 5), np.float32)).values())))
case("npy-bfloat16-saved-as-bytes", SOURCES_AND_STAGES,
     "a bfloat16 array saved with numpy.save (read back as |V2)", RecordError,
     "NpySource: '{tmp}/x.npy' holds raw bytes (|V2), which a batch cannot carry. "
     "Raw values of 2 bytes with no fields are most likely an ml_dtypes array (bfloat16 is "
     "|V2, float8 |V1) that numpy.save wrote as bytes: .npy cannot name its type. Save "
     "numpy.save(path, x.view(np.uint16)) (np.uint8 for float8) and turn the field back in a "
     "stage with jax.lax.bitcast_convert_type(value, jnp.bfloat16), or save "
     "x.astype(np.float32) (exact for bfloat16).")(
    lambda tmp: _npy_source(paths=_npy(tmp, x=np.zeros(4, jax.numpy.bfloat16))["x"]))
case("npy-field-lengths-differ", SOURCES_AND_STAGES, "fields of 4 and 3 records",
     RecordError,
     "NpySource: the fields hold different numbers of records: 'x' 4 ({tmp}/x.npy), 'y' 3 "
     "({tmp}/y.npy); every field needs exactly one value per record.")(
    lambda tmp: _npy_source(paths=_npy(tmp, x=np.zeros(4, np.int32), y=np.zeros(3, np.int32))))
case("npy-float64", SOURCES_AND_STAGES, "a float64 shard without cast_float64", ConfigError,
     "NpySource file '{tmp}/x.npy': field 'data' is float64 but jax_enable_x64 is off, and "
     "datarax never narrows silently. Set cast_float64=True in the config to cast it to "
     "float32, enable x64 with jax.config.update('jax_enable_x64', True), or save the shards "
     "as float32.")(lambda tmp: _npy_source(paths=_npy(tmp, x=np.zeros(3))["x"]))


def _npy_written_over(tmp: Path) -> None:
    path = _npy(tmp, x=np.arange(1000, dtype=np.int32))["x"]
    source = _npy_source(paths=path)
    try:
        np.save(path, np.zeros(5, np.int32))  # rewritten in place while the source is open
        source.get_batch(10)
    finally:
        source.close()


case("npy-file-written-over", SOURCES_AND_STAGES,
     "an .npy file rewritten in place while a source reads it", SourceChangedError,
     "NpySource: '{tmp}/x.npy' was written over while the source reads it (it is "
     "memory-mapped: 4128 bytes opened, 148 now). Write a new file beside it and "
     "os.replace() it over the old one (the source keeps reading the version it opened), or "
     "build a new source to read the new data.")(_npy_written_over)


def _npy_int64_overflow(tmp: Path) -> None:
    source = _npy_source(paths=_npy(tmp, x=np.asarray([1, 2**40], np.int64))["x"])
    try:
        while source.get_batch(2) is not None:
            pass
    finally:
        source.close()


case("npy-int64-overflow", SOURCES_AND_STAGES, "an int64 value outside the int32 range",
     RecordError,
     "NpySource: cannot read record 1 of file '{tmp}/x.npy' (epoch 0): field "
     "'data' is int64 and holds 1099511627776, outside the int32 range, so it cannot be cast "
     "to int32 without loss while jax_enable_x64 is off. Enable x64 with "
     "jax.config.update('jax_enable_x64', True), or save the shards as int32. The "
     "record is otherwise readable: do as above, or construct the source with on_error='skip' "
     "to drop such records (they are counted and reported).")(_npy_int64_overflow)
simple("npy-paths-as-config", SOURCES_AND_STAGES, "NpySource('x.npy')", ConfigError,
       "NpySource needs an NpySourceConfig, got str 'x.npy'; its files go in the config. Call "
       "NpySource(NpySourceConfig(paths='x.npy')).",
       lambda: __import__("datarax.sources.npy", fromlist=["x"]).NpySource("x.npy"))
simple("npy-settings-missing", SOURCES_AND_STAGES, "NpySource() without a config or keywords",
       ConfigError,
       "NpySource needs its settings: NpySourceConfig(...) first, or the settings as keywords "
       "(paths, field, shuffle, seed, num_epochs, cast_float64, on_error, max_skipped, "
       "max_skipped_fraction). Call NpySource(NpySourceConfig(paths='x.npy')) or "
       "NpySource(paths='x.npy').",
       lambda: __import__("datarax.sources.npy", fromlist=["x"]).NpySource())
simple("npy-config-paths-empty", SOURCES_AND_STAGES, "NpySourceConfig() without paths",
       ConfigError, "NpySourceConfig.paths is empty; name a .npy file, a list of shards or a "
       "mapping {field: files}.",
       lambda: _npy_source())
simple("npy-config-field-with-mapping", SOURCES_AND_STAGES, "field= with a mapping of paths",
       ConfigError, "NpySourceConfig: with a mapping of paths the field names are its keys; "
       "leave field unset (got field='y').",
       lambda: _npy_source(paths={"x": "x.npy"}, field="y"))


def _npy_unpadded_glob(tmp: Path) -> Any:
    for i in (2, 10):
        np.save(tmp / f"image-{i}.npy", np.zeros((2, 3), np.float32))
    np.save(tmp / "labels.npy", np.zeros(4, np.int32))
    return _npy_source(paths={"image": str(tmp / "image-*.npy"), "label": str(tmp / "labels.npy")})


case("npy-glob-unpadded-numbers", SOURCES_AND_STAGES,
     "a glob over image-2.npy, image-10.npy beside one labels.npy", ConfigError,
     "NpySource: field 'image': the glob pattern '{tmp}/image-*.npy' matches files numbered "
     "without zero padding, taken in sorted name order ('image-10.npy' before 'image-2.npy'), "
     "while field 'label' is laid out otherwise, so its records would not line up with them. "
     "Zero-pad the numbers in the file names (image-02.npy), or list the files in order.")(
    _npy_unpadded_glob)


def _cached_without_read_records() -> None:
    from datarax.dag import CachedPrefix
    from datarax.sources.random_access import RandomAccessSource

    class Rows(RandomAccessSource):
        def __len__(self) -> int:
            return 4

    CachedPrefix(Rows(MemorySourceConfig()), [], max_bytes=1 << 20)


simple("cached-prefix-without-read-records", SOURCES_AND_STAGES,
       "CachedPrefix over a source that does not implement read_records", ConfigError,
       "CachedPrefix reads records by stable index through read_records(indices), which Rows "
       "does not implement: it cannot be cached. Put its stages in the Pipeline instead.",
       _cached_without_read_records)


def _uses_key(element: Any, key: Any) -> Any:
    return element.update_data({"x": element.data["x"] + jax.random.uniform(key)})


simple("stage-key-without-stochastic", SOURCES_AND_STAGES,
       "a function drawing from its key in an ElementOperator with stochastic=False",
       ConfigError,
       "Pipeline stage 0 (ElementOperator '_uses_key') uses its random key, but it was built "
       "with stochastic=False, so its function gets key=None. Build it with "
       "ElementOperatorConfig(stochastic=True) to give each record its own key.",
       lambda: first_batch(pipe(
           source=MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.float32)}),
           stages=[ElementOperator(ElementOperatorConfig(), fn=_uses_key)])))


FILTERING = "Filter, take/skip/repeat and padded evaluation"


def _keep(el: Any) -> Any:
    return el.data["x"] % 2 == 0


def _padded_state_elsewhere() -> None:
    saved = pipe(pad_remainder=True, shard_index=0, shard_count=4).get_state()
    pipe(pad_remainder=True, shard_index=0, shard_count=2).set_state(saved)


simple("filter-predicate-not-boolean", FILTERING, "a predicate returning the record's int",
       ConfigError,
       "Pipeline stage 0 (FilterOperator '<lambda>'): the predicate must return one boolean "
       "per record, got int32[] per record.",
       lambda: pipe(stages=[FilterOperator(predicate=lambda el: el.data["x"])]))


def _forgets_return(element: Any) -> Any:
    element.data["x"] > 1  # noqa: B015 - no return statement: gives None


simple("filter-predicate-two-arguments", FILTERING, "a predicate taking (el, key)", ConfigError,
       "FilterOperator '<lambda>' calls predicate(element), but predicate(el, key) "
       "cannot take that (missing a required argument: 'key'). Give it one positional "
       "parameter, e.g. predicate=lambda element: element.data['label'] < 3 (a filter draws "
       "no key).",
       lambda: FilterOperator(predicate=lambda el, key: el.data["x"] > 1))
simple("filter-predicate-returns-none", FILTERING, "a predicate without a return statement",
       ConfigError, "Pipeline stage 0: FilterOperator '_forgets_return': the predicate "
       "returned None; it must return one boolean per record, e.g. return "
       "element.data['label'] == 1 (a function without a return statement gives None).",
       lambda: pipe(stages=[FilterOperator(predicate=_forgets_return)]))
simple("filter-two-filters", FILTERING, "two FilterOperators in one pipeline", ConfigError,
       "Pipeline stages [0, 1] are all FilterOperators; give one FilterOperator whose "
       "predicate combines the conditions",
       lambda: pipe(stages=[FilterOperator(predicate=_keep), FilterOperator(predicate=_keep)]))
simple("filter-after-a-stage-on-a-stream", FILTERING,
       "a FilterOperator after another stage over a stream", ConfigError,
       "Pipeline stage 1 (FilterOperator '_keep') comes after other stages, over a stream "
       "source (CountingStream)",
       lambda: pipe(source=CountingStream(CountingStreamConfig()),
                    stages=[ElementOperator(fn=lambda el, key=None: el),
                            FilterOperator(predicate=_keep)]))
simple("filter-scan", FILTERING, "Pipeline.scan over a filtered pipeline", ConfigError,
       "Pipeline.scan runs a fixed number of batches at positions known before it starts",
       lambda: pipe(stages=[FilterOperator(predicate=_keep)]).scan(lambda b: None, 1))
simple("take-negative", FILTERING, "Pipeline.take(-1)", ConfigError,
       "Pipeline.take must be an int >= 0, got -1.", lambda: pipe().take(-1))
simple("pad-remainder-with-drop-remainder", FILTERING,
       "pad_remainder=True with drop_remainder=True", ConfigError,
       "Pipeline pad_remainder=True pads the short last batch; it cannot be combined with "
       "drop_remainder=True",
       lambda: pipe(pad_remainder=True, drop_remainder=True))
simple("drop-remainder-stream-shorter-than-a-batch", FILTERING,
       "drop_remainder=True over a stream of 3 records, batch_size=4", ConfigError,
       "Pipeline batch_size=4 with drop_remainder=True would serve no batch: an epoch of "
       "CountingStream holds 3 records. Lower batch_size or set drop_remainder=False.",
       lambda: list(pipe(source=CountingStream(CountingStreamConfig(num_records=3)),
                         batch_size=4, drop_remainder=True)))


def _skipped_below_a_batch() -> None:
    from bad_rows import Rows, RowsConfig

    list(pipe(source=Rows(RowsConfig(on_error="skip"), 6, bad=(1, 2, 4)), batch_size=5,
              drop_remainder=True))


simple("drop-remainder-skips-leave-less-than-a-batch", FILTERING,
       "drop_remainder=True, batch_size=5 over 6 records of which on_error='skip' drops 3",
       ConfigError,
       "Pipeline batch_size=5 with drop_remainder=True would serve no batch: an epoch of "
       "Rows holds 3 records (3 more skipped as bad). Lower batch_size or set "
       "drop_remainder=False.", _skipped_below_a_batch)
simple("pad-remainder-shards-stream", FILTERING,
       "pad_remainder=True over 2 shards of a stream", ConfigError,
       "Pipeline pad_remainder=True with shard_count=2: CountingStream is a stream",
       lambda: pipe(source=CountingStream(CountingStreamConfig()), pad_remainder=True,
                    shard_count=2))
simple("pad-remainder-shards-filter", FILTERING,
       "pad_remainder=True over 2 shards with a FilterOperator", ConfigError,
       "Pipeline pad_remainder=True with shard_count=2 and a FilterOperator",
       lambda: pipe(stages=[FilterOperator(predicate=_keep)], pad_remainder=True,
                    shard_count=2))
def _padded_shards_skipping(tmp: Path) -> Any:
    source = _ar(_ar_file(tmp / "p.array_record"), lambda raw: {"x": np.frombuffer(raw, np.float32)},
                 on_error="skip")
    try:
        Pipeline(source=source, stages=[], batch_size=2, pad_remainder=True, shard_index=0,
                 shard_count=2)
    finally:
        source.close()


case("pad-remainder-shards-skipping", FILTERING,
     "pad_remainder=True over 2 shards of an ArrayRecord source with on_error='skip'",
     ConfigError, "Pipeline pad_remainder=True with shard_count=2 over ArrayRecordSourceModule "
     "with on_error='skip'", needs=AR)(_padded_shards_skipping)
simple("pad-remainder-state-other-count", FILTERING,
       "a padded 4-shard state restored on 2 shards", StateError,
       "with pad_remainder=True (shares rounded up to whole padding slots), which restores "
       "only on 4 processes", _padded_state_elsewhere, field="shard")


def _epochs_state(make: Callable[[Pipeline], Any], **change: Any) -> None:
    """``make(pipeline)`` (a take or repeat) after one batch, its state changed by
    ``change``, restored into a fresh one."""
    batches = make(pipe())
    next(batches)
    state = json.loads(json.dumps(batches.get_state()))
    make(pipe()).set_state(dict(state, **change))


simple("take-state-negative-left", FILTERING, "Take.set_state with take_left=-3", StateError,
       "Take state 'take_left' must be an int >= 0, got -3; pass the dict "
       "Take.get_state() returned.",
       lambda: _epochs_state(lambda p: p.take(2), take_left=-3), field="take_left")
def _take_state_into(batches: int) -> None:
    """The state of ``take(2)`` after one batch, restored into ``take(batches)``."""
    take = pipe().take(2)
    next(take)
    pipe().take(batches).set_state(json.loads(json.dumps(take.get_state())))


simple("take-state-other-count", FILTERING, "the state of pipeline.take(2) into pipeline.take(5)",
       StateError, "Take.set_state: the state was saved by pipeline.take(2) (1 batch left), "
       "but this is pipeline.take(5); the batches left count from the saved take. Restore it "
       "into pipeline.take(2).",
       lambda: _take_state_into(5), field="take")
simple("take-state-left-over-count", FILTERING, "Take.set_state with take_left=4 of take=2",
       StateError, "Take.set_state: 'take_left' is 4, more than the 2 batches of the take; "
       "the state was tampered with.",
       lambda: _epochs_state(lambda p: p.take(2), take_left=4), field="take_left")
simple("repeat-state-bad-epochs-left", FILTERING, "Repeat.set_state with epochs_left='two'",
       StateError, "Repeat state 'epochs_left' must be an int >= 0 or None, got 'two'; "
       "pass the dict Repeat.get_state() returned.",
       lambda: _epochs_state(lambda p: p.repeat(2), epochs_left="two"), field="epochs_left")
def _repeat_state_into(saved: int | None, into: int | None) -> None:
    """The state of ``repeat(saved)`` after one batch, restored into ``repeat(into)``."""
    repeat = pipe().repeat(saved)
    next(repeat)
    pipe().repeat(into).set_state(json.loads(json.dumps(repeat.get_state())))


simple("repeat-state-without-end-into-a-count", FILTERING,
       "the state of pipeline.repeat(None) into pipeline.repeat(2)", StateError,
       "Repeat.set_state: 'epochs_left' is None, which does not fit this pipeline.repeat(2); "
       "the state was saved by pipeline.repeat(None) (without end). Restore it into the "
       "repeat that saved it (pipeline.repeat(None)).",
       lambda: _repeat_state_into(None, 2), field="epochs_left")
simple("repeat-state-left-over-count", FILTERING,
       "the state of pipeline.repeat(3) into pipeline.repeat(2)", StateError,
       "Repeat.set_state: 'epochs_left' is 3, which does not fit this pipeline.repeat(2); "
       "the state was saved by pipeline.repeat(n) with n >= 3. Restore it into the repeat "
       "that saved it (pipeline.repeat(3) or more).",
       lambda: _repeat_state_into(3, 2), field="epochs_left")


# ------------------------------------------------------------ writing datasets
WRITING = "Writing datasets"


def _into_a_held_folder(write: Callable[[Path], Any]) -> Callable[[Path], Any]:
    """``write(dst)`` while another writer holds ``dst``'s lock (as a running conversion)."""

    def action(tmp: Path) -> Any:
        import fcntl

        from datarax.dataset.lock import LOCK_FILE

        dst = tmp / "ds"
        dst.mkdir()
        fd = os.open(dst / LOCK_FILE, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, b"4242 on otherhost")
            return write(dst)
        finally:
            os.close(fd)

    return action


def _write_dataset(dst: Path) -> Any:
    from datarax.dataset.writer import write_dataset

    return write_dataset([{"x": 1}], dst)


def _beam_convert(dst: Path) -> Any:
    from datarax.beam import convert_rows

    return convert_rows([{"x": 1}], dst)


_BUSY = ("'{tmp}/ds' is being written by another conversion (process 4242 on otherhost holds "
         "'{tmp}/ds/.datarax-lock'), so this %s was refused: two writers in one folder would "
         "mix their shards. Wait for that conversion to finish (its lock goes when its process "
         "ends), or write into another folder.")
case("write-dataset-folder-busy", WRITING, "write_dataset into a folder another process writes",
     DataraxError, _BUSY % "write", needs="array_record")(_into_a_held_folder(_write_dataset))
case("beam-convert-folder-busy", WRITING, "convert_rows (Beam) into a folder another process writes",
     DataraxError, _BUSY % "conversion", needs="apache_beam")(_into_a_held_folder(_beam_convert))


def _write(records: Any, **options: Any) -> Callable[[Path], Any]:
    def action(tmp: Path) -> Any:
        from datarax.dataset import write_dataset

        return write_dataset(records, tmp / "ds", **options)

    return action


_SKIP_ROW = ("Fix the source row, or pass on_error='skip' (--on-error skip) to leave it out and "
             "list it in the metadata.")
case("write-int-not-exact-in-float32", WRITING,
     "write_dataset: 16777217 in a field the first record made float32", ConversionError,
     "a sequence of records, row 1, field 'x': the integer 16777217 has no exact float32 value "
     "(it would be stored as 16777216); declare the field int64 (features=), or give the value "
     "as a float. " + _SKIP_ROW, needs="array_record")(_write([{"x": 0.5}, {"x": 16777217}]))
case("write-label-outside-class-names", WRITING,
     "write_dataset: label 2 with class_names ['cat', 'dog']", ConversionError,
     "a sequence of records, row 1, field 'label': the label 2 is outside its 2 class names "
     "(0..1, or -1 for no label): correct the label, or give the field every class name. "
     + _SKIP_ROW,
     needs="array_record")(
    _write([{"label": 0}, {"label": 2}], class_names={"label": ["cat", "dog"]}))
case("write-class-names-on-text", WRITING, "write_dataset: class_names for a text field",
     ConfigError, "class_names names the field 'text', which holds str utf8 values; class names "
     "go with integer labels 0..k-1. Store each label as the index of its name "
     "(names.index(value)).")(_write([{"text": "hi"}], class_names={"text": ["hi", "bye"]}))
case("write-nested-object", WRITING, "write_dataset: a field holding a dict", ConversionError,
     "a sequence of records, row 0 (the features are inferred from the first row): field 'meta' "
     "holds a nested object (keys 'source', 'lang'); a field holds numbers, an array, text, "
     "bytes or an image. Flatten it into one field per key (e.g. 'meta.source') before "
     "converting, or leave the field out.")(
    _write([{"id": 1, "meta": {"source": "web", "lang": "en"}}]))
case("write-datetime", WRITING, "write_dataset: a field holding a datetime", ConversionError,
     "a sequence of records, row 0 (the features are inferred from the first row): field 'when' "
     "holds a datetime (2024-05-01 12:00:00); a field holds numbers, an array, text, bytes or an "
     "image. Store it as text (ISO 8601, e.g. df[col].astype(str)) or a number (e.g. seconds "
     "since 1970) before converting, or leave the field out.")(
    _write([{"id": 1, "when": __import__("datetime").datetime(2024, 5, 1, 12, 0)}]))
case("write-pandas-series", WRITING, "write_dataset(a pandas Series)", ConfigError,
     "write_dataset takes records, got a pandas Series; give a DataFrame (series.to_frame()).",
     needs="pandas")(lambda tmp: _write(__import__("pandas").Series([1, 2]))(tmp))
case("write-resume-and-overwrite", WRITING, "write_dataset(resume=True, overwrite=True)",
     ConfigError, "write_dataset: pass resume=True (--resume) or overwrite=True (--overwrite), "
     "not both: resume keeps the finished shards, overwrite replaces them.")(
    _write([{"x": 1}], resume=True, overwrite=True))



def _resume_edited(change: Callable[[list[dict[str, Any]]], Any], **options: Any
                   ) -> Callable[[Path], Any]:
    """A write of 40 records into 4 shards stopped at a bad row of shard 2 (shards 0 and 1
    finished), the row fixed, ``change(records)`` applied, then resumed with ``options``."""

    def action(tmp: Path) -> Any:
        from datarax.dataset import ConversionError, write_dataset

        records = [{"x": np.full(2, i, np.float32)} for i in range(40)]
        good, records[25] = records[25], {"x": np.zeros(3, np.float32)}
        try:
            write_dataset(records, tmp / "ds", shards=4)
        except ConversionError:
            pass
        records[25] = good
        change(records)
        return write_dataset(records, tmp / "ds", **{"shards": 4, **options}, resume=True)

    return action


case("write-resume-input-edited", WRITING,
     "write_dataset(resume=True) after a row of a finished shard was edited", ConversionError,
     "'{tmp}/ds' holds an unfinished conversion whose finished shard "
     "'data-00001-of-00004.array_record' (rows 10..19) no longer matches a sequence of records: "
     "row 13 gives another record than the shard holds. The input changed since that shard was "
     "written (or the shard did), and resuming would mix records of the two. Restore the input "
     "as it was when that shard was written and resume, or pass overwrite=True (--overwrite) to "
     "convert it again from the start.", needs="array_record")(
    _resume_edited(lambda records: records.__setitem__(13, {"x": np.float32([-1, -1])})))
case("write-resume-other-options", WRITING,
     "write_dataset(resume=True) with other shards and one row fewer", ConversionError,
     "'{tmp}/ds' holds an unfinished conversion of other records or options (the input had 40 "
     "rows, now 39; shards=4 (--shards 4) then, 2 now); resume it with the input and options it was started "
     "with, or pass overwrite=True (--overwrite) to write it again.", needs="array_record")(
    _resume_edited(lambda records: records.pop(), shards=2))


def _resume_finished(tmp: Path) -> Any:
    from datarax.dataset import write_dataset

    records = [{"x": np.full(2, i, np.float32)} for i in range(40)]
    write_dataset(records, tmp / "ds", shards=4)
    return write_dataset(records, tmp / "ds", shards=2, on_error="skip", resume=True)


case("write-resume-finished-other-options", WRITING,
     "write_dataset(resume=True) of a finished dataset with other shards and on_error",
     ConversionError,
     "'{tmp}/ds' holds a finished dataset written from other records or options (on_error="
     "'raise' (--on-error raise) then, 'skip' now; shards=4 (--shards 4) then, 2 now). Run it "
     "with the input and options it was written with (the values 'then') to keep it as it is, "
     "pass overwrite=True (--overwrite) to replace it, or write into another folder.",
     needs="array_record")(_resume_finished)

# ------------------------------------------------------------ converting files
CONVERTING = "Converting files (convert, datarax convert)"
_KNOWN_INPUTS = ("Parquet / JSON Lines / CSV files (.parquet, .jsonl / .json, .csv / .tsv), a "
                 "Hugging Face dataset folder, a TFDS folder or tfds:NAME, an image folder "
                 "(<class>/<image>), .npy / .npz")
_FIX_TABLE = ("Fix the file (every row with the same columns, each of one type), or leave it "
              "out of SRC.")
_FIX_JSONL = ("Fix the file (JSON Lines: one object a line, or one JSON array of objects; every "
              "row with the same columns, each of one type), or leave it out of SRC.")


def _convert_tfds_not_prepared(tmp: Path) -> Any:
    from datarax.dataset import convert

    return convert("tfds:mnist", str(tmp / "out"), data_dir=str(tmp))


case("convert-tfds-not-prepared", CONVERTING,
     "convert('tfds:mnist', data_dir=<a folder where it is not prepared>)", ConversionError,
     "is not prepared in data_dir", needs="tensorflow_datasets")(_convert_tfds_not_prepared)


def _convert_split_of_image_folder(tmp: Path) -> Any:
    from datarax.dataset import convert

    for split in ("train", "val"):
        (tmp / "photos" / split / "cat").mkdir(parents=True)
        (tmp / "photos" / split / "cat" / "a.png").write_bytes(b"")
    return convert(str(tmp / "photos"), str(tmp / "out"), split="val")


case("convert-split-of-an-image-folder", CONVERTING,
     "convert(root, dst, split='val') of root/{train,val}/<class>/<image>", ConfigError,
     "split= (--split) 'val' picks a split of a Hugging Face / TFDS dataset or of table files; ",
     )(_convert_split_of_image_folder)


def _convert_image_folder_with_other_class_names(tmp: Path) -> Any:
    from datarax.dataset import convert

    for name in ("cat", "dog", "fox"):
        (tmp / "val" / name).mkdir(parents=True)
        (tmp / "val" / name / "a.png").write_bytes(b"")
    return convert(str(tmp / "val"), str(tmp / "out"), class_names={"label": ["cat", "dog"]})


case("convert-image-folder-class-not-named", CONVERTING,
     "convert(root/val, dst, class_names={'label': <the train split's names>}) with a class "
     "folder the train split does not have (also --classes-from DATASET)", ConversionError,
     "has the class folder(s) 'fox', which are not among the class names given for 'label' "
     "(cat, dog)")(_convert_image_folder_with_other_class_names)


def _convert_image_folder_with_loose_images(tmp: Path) -> Any:
    from datarax.dataset import convert

    (tmp / "photos" / "cat").mkdir(parents=True)
    (tmp / "photos" / "cat" / "a.png").write_bytes(b"")
    (tmp / "photos" / "b.jpg").write_bytes(b"")
    return convert(str(tmp / "photos"), str(tmp / "out"))


case("convert-image-folder-loose-images", CONVERTING,
     "convert(root) of an image folder with an image in root itself, beside root/<class>/",
     ConversionError, "holds images beside its class folders (b.jpg), which would belong to no "
     "class; move them into a class folder")(_convert_image_folder_with_loose_images)


def _convert_folder_of_split_folders(tmp: Path) -> Any:
    from datarax.dataset import convert

    for split in ("train", "val"):
        (tmp / "photos" / split / "cat").mkdir(parents=True)
        (tmp / "photos" / split / "cat" / "a.png").write_bytes(b"")
    return convert(str(tmp / "photos"), str(tmp / "out"))


case("convert-image-folder-of-splits", CONVERTING,
     "convert(root, dst) of root/{train,val}/<class>/<image> (its splits would be the classes)",
     ConversionError, "holds only the split folder(s) 'train', 'val', with class folders "
     "inside: its images would be labelled by split, not by class. Convert each split on its "
     "own")(_convert_folder_of_split_folders)


def _convert_every_image_bad_under_skip(tmp: Path) -> Any:
    from datarax.dataset import convert

    (tmp / "photos" / "cat").mkdir(parents=True)
    for name in ("a.png", "b.jpg"):
        (tmp / "photos" / "cat" / name).write_bytes(b"not an image")
    return convert(str(tmp / "photos"), str(tmp / "out"), on_error="skip")


case("convert-skip-every-row-bad", CONVERTING,
     "convert(root, dst, on_error='skip') of an image folder whose every image is bad",
     ConversionError, "all 2 rows tried for the features (with on_error='skip' the first good "
     "row gives them) are bad, so nothing describes the fields; the first, row 0 (cat/a.png)",
     )(_convert_every_image_bad_under_skip)


def _convert_image_folder_with_a_table(tmp: Path) -> Any:
    from datarax.dataset import convert

    (tmp / "photos" / "cat").mkdir(parents=True)
    (tmp / "photos" / "cat" / "a.png").write_bytes(b"")
    (tmp / "photos" / "metadata.csv").write_text("file_name,label\ncat/a.png,0\n")
    return convert(str(tmp / "photos"), str(tmp / "out"))


case("convert-image-folder-with-a-table", CONVERTING,
     "convert(root) of an image folder that also holds a table file (root/metadata.csv, a "
     "class's info.json) or a .npy", ConversionError,
     "holds 1 image (such as cat/a.png) and also metadata.csv, which convert reads as "
     "data themselves; convert one kind")(_convert_image_folder_with_a_table)


def _convert_files_of_no_split(tmp: Path) -> Any:
    from datarax.dataset import convert

    for name in ("train.csv", "test.csv", "training.csv"):
        (tmp / "data").mkdir(exist_ok=True)
        (tmp / "data" / name).write_text("x\n1\n")
    return convert(str(tmp / "data"), str(tmp / "out"))


case("convert-files-of-no-split", CONVERTING,
     "convert(folder) of train.csv, test.csv and training.csv (a file naming no split)",
     ConversionError, "holds files of the splits test, train and files of none (training.csv); "
     "pick a split with split= (--split NAME; the files of no split are then left out), or "
     "rename those files", needs="pyarrow")(_convert_files_of_no_split)


def _convert_parquet_of_other_categories(tmp: Path) -> Any:
    import pandas as pd

    from datarax.dataset import convert

    (tmp / "data").mkdir()
    for name, pets in (("a", ["cat", "dog"]), ("b", ["fish"])):
        pd.DataFrame({"pet": pd.Categorical(pets)}).to_parquet(tmp / "data" / f"{name}.parquet")
    return convert(str(tmp / "data"), str(tmp / "out"))


case("convert-parquet-category-not-in-first-file", CONVERTING,
     "convert(Parquet files) whose category column has a category the first file lacks",
     ConversionError, "parquet files {tmp}/data/a.parquet (+1 more): the category column 'pet' "
     "holds 'fish', which is not one of its categories (cat, dog, from its first file). Give the "
     "column the same categories in every file (pandas: df[col].cat.set_categories([...])) and "
     "write them again, or store it as text (df[col].astype(str)).",
     needs="pandas")(_convert_parquet_of_other_categories)


def _convert_class_label_with_other_names(tmp: Path) -> Any:
    import datasets

    from datarax.dataset import convert

    features = datasets.Features({"label": datasets.ClassLabel(names=["cat", "owl"])})
    datasets.Dataset.from_dict({"label": [0, 1]}, features=features).to_parquet(
        str(tmp / "val.parquet"))
    return convert(str(tmp / "val.parquet"), str(tmp / "out"),
                   class_names={"label": ["cat", "dog", "owl"]})


case("convert-class-label-other-names", CONVERTING,
     "convert(Parquet with a ClassLabel ['cat', 'owl'], class_names={'label': ['cat', 'dog', "
     "'owl']}) (also --classes-from DATASET)", ConfigError,
     "numbers its 'label' labels by its own class names (cat, owl); the class names given (cat, "
     "dog, owl) would name them otherwise ('owl' would be class 2, not 1)",
     needs="datasets")(_convert_class_label_with_other_names)


def _convert_resize_of_arrays(tmp: Path) -> Any:
    from datarax.dataset import convert

    (tmp / "npy").mkdir()
    np.save(tmp / "npy" / "image.npy", np.zeros((2, 8, 8, 3), np.uint8))
    return convert(str(tmp / "npy"), str(tmp / "out"), resize=4)


case("convert-resize-without-images", CONVERTING,
     "convert(.npy of pixel arrays, resize=4) (--resize of records without encoded images)",
     ConfigError, "resize= (--resize) resizes encoded images (PNG / JPEG / ... files, image "
     "columns), and the first record of numpy files")(_convert_resize_of_arrays)


def _convert(name: str, content: str | bytes | None = None) -> Callable[[Path], Any]:
    """convert(``tmp/name``) into ``tmp/out``, ``tmp/name`` first written with ``content``
    (a str ending in ``/`` names a folder; ``name`` may be a pattern or ``hf:...``)."""

    def action(tmp: Path) -> Any:
        from datarax.dataset import convert

        src = name if ":" in name else str(tmp / name)
        if isinstance(content, bytes):
            (tmp / name).write_bytes(content)
        elif content is not None:
            (tmp / name).write_text(content, encoding="utf-8")
        return convert(src, str(tmp / "out"))

    return action


def _convert_folder(files: dict[str, bytes]) -> Callable[[Path], Any]:
    """convert(``tmp/src``) into ``tmp/out``, ``tmp/src`` holding ``files`` (maybe none)."""

    def action(tmp: Path) -> Any:
        from datarax.dataset import convert

        (tmp / "src").mkdir()
        for name, data in files.items():
            (tmp / "src" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / "src" / name).write_bytes(data)
        return convert(str(tmp / "src"), str(tmp / "out"))

    return action


def _png_16_bit() -> bytes:
    """A 2x2 RGB PNG of 16 bits per channel (PIL writes none: built from its chunks)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    pixels = b"".join(b"\x00" + struct.pack(">HHH", 1000, 2000, 3000) * 2 for _ in range(2))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 16, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(pixels)) + chunk(b"IEND", b""))


case("convert-csv-column-named-twice", CONVERTING, "a CSV header naming a column twice",
     ConversionError, "cannot read the csv file '{tmp}/d.csv': the header names the column "
     "'label' twice (columns 2 and 3); one would hide the other. Give every column its own "
     "name in the first line of the file.", needs="pyarrow")(
    _convert("d.csv", "id,label,label\n1,2,3\n"))
case("convert-csv-column-without-name", CONVERTING, "a CSV header column with no name",
     ConversionError, "cannot read the csv file '{tmp}/d.csv': column 2 of the header has no "
     "name. Name every column in the first line of the file.", needs="pyarrow")(
    _convert("d.csv", "id,,label\n1,2,3\n"))
case("convert-csv-short-row", CONVERTING, "a CSV row of 2 columns under a header of 3",
     ConversionError, "cannot read the csv file '{tmp}/d.csv': row 1 ('2,b') has 2 columns "
     "where the header has 3 (rows count from 0, after the header). " + _FIX_TABLE,
     needs="pyarrow")(_convert("d.csv", "id,text,label\n1,a,0\n2,b\n"))
case("convert-jsonl-line-not-json", CONVERTING, "a JSON Lines line that is not JSON",
     ConversionError, "cannot read the json file '{tmp}/d.jsonl': line 2 is not JSON (Expecting "
     "property name enclosed in double quotes: line 1 column 9 (char 8)). " + _FIX_JSONL,
     needs="pyarrow")(_convert("d.jsonl", '{"x": 1}\n{"x": 2,}\n'))
case("convert-jsonl-line-a-list", CONVERTING, "a JSON Lines line that is a list, not an object",
     ConversionError, "cannot read the json file '{tmp}/d.jsonl': line 2 is a JSON list, not an "
     "object. " + _FIX_JSONL, needs="pyarrow")(_convert("d.jsonl", '{"x": 1}\n[1, 2]\n'))
case("convert-jsonl-null-inside-a-list", CONVERTING, "a JSON Lines list holding a null",
     ConversionError, "json files {tmp}/d.jsonl, row 1, field 'v': a list holding a null (None) "
     "at [1, 0]; every element of a list needs a value. Fill the nulls (0, NaN) or drop them "
     "before converting.", needs="pyarrow")(
    _convert("d.jsonl", '{"v": [[1], [2]]}\n{"v": [[3], [null]]}\n'))
case("convert-csv-integer-beyond-uint64", CONVERTING,
     "a CSV integer that fits neither int64 nor uint64", ConversionError,
     "cannot read the csv file '{tmp}/d.csv', row 1, column 'id': the integer "
     "123456789012345678901234567890 fits neither int64 nor uint64. Store such numbers as "
     "text, or leave the column out of SRC.", needs="pyarrow")(
    _convert("d.csv", "id\n1\n123456789012345678901234567890\n"))
case("convert-csv-not-utf8", CONVERTING, "a CSV file saved in Latin-1 (text not UTF-8)",
     ConversionError, "csv files {tmp}/d.csv, row 0, field 'name': text is not valid UTF-8 "
     "('utf-8' codec can't decode byte 0xe9 in position 3: unexpected end of data); a file in "
     "another encoding (Latin-1, Windows-1252) is saved as UTF-8 first. " + _SKIP_ROW,
     needs="pyarrow")(_convert("d.csv", "id,name\n1,caf\xe9\n".encode("latin-1")))
case("convert-image-16-bit-png", CONVERTING, "a 16-bit PNG in an image folder", ConversionError,
     "the image folder {tmp}/src, row 0 (cat/a.png), field 'image': a 16-bit PNG image; image "
     "fields hold 8 bits per channel (0..255), so storing it would lose its values. Scale the "
     "images to 8 bits first, or store the pixels as an array field (e.g. uint16, from .npy "
     "files). " + _SKIP_ROW, needs="PIL")(_convert_folder({"cat/a.png": _png_16_bit()}))
def _convert_folder_with_an_empty_image(tmp: Path) -> Any:
    from PIL import Image

    from datarax.dataset import convert

    (tmp / "src" / "cat").mkdir(parents=True)
    Image.new("RGB", (2, 2)).save(tmp / "src" / "cat" / "a.png")
    (tmp / "src" / "cat" / "b.jpg").write_bytes(b"")
    return convert(str(tmp / "src"), str(tmp / "out"))


case("convert-image-empty-file", CONVERTING, "an image file of 0 bytes in an image folder",
     ConversionError, "the image folder {tmp}/src, row 1 (cat/b.jpg), field 'image': the image "
     "is empty (0 bytes). " + _SKIP_ROW, needs="PIL")(_convert_folder_with_an_empty_image)
case("convert-empty-folder", CONVERTING, "convert SRC an empty folder", ConversionError,
     f"the folder '{{tmp}}/src' is empty; SRC is the folder or files that hold the data: "
     f"{_KNOWN_INPUTS}.")(_convert_folder({}))
case("convert-folder-of-other-files", CONVERTING, "a folder holding nothing convert reads",
     ConversionError, "the folder '{tmp}/src' holds nothing convert reads (it holds notes.txt, "
     f"sales.xlsx); it reads {_KNOWN_INPUTS}.")(
    _convert_folder({"notes.txt": b"x", "sales.xlsx": b"PK\x03\x04"}))
case("convert-xlsx-file", CONVERTING, "an .xlsx file", ConversionError,
     f"'{{tmp}}/sales.xlsx' is a .xlsx file, which convert does not read; it reads "
     f"{_KNOWN_INPUTS}, known by their suffix. Save the data as one of them.")(
    _convert("sales.xlsx", b"PK\x03\x04"))
case("convert-glob-matches-nothing", CONVERTING, "a glob pattern matching nothing",
     ConversionError, f"the pattern '{{tmp}}/data-*.csv' matches no file; convert reads {_KNOWN_INPUTS}. "
     "Check the pattern.")(_convert("data-*.csv"))
case("convert-hf-hub-name", CONVERTING, "convert('hf:imdb', ...) (a Hub name)", ConversionError,
     "convert reads a Hugging Face dataset from disk, not 'hf:imdb' (a Hub name): save it first, "
     "e.g. datasets.load_dataset('imdb', split='train').save_to_disk('imdb_train'), and convert "
     "that folder.")(_convert("hf:imdb"))


def _convert_bfloat16_npy(tmp: Path) -> Any:
    from datarax.dataset import convert

    np.save(tmp / "w.npy", np.zeros(3, "V2"))  # what numpy.save writes for a bfloat16 array
    return convert(str(tmp / "w.npy"), str(tmp / "out"))


case("convert-npy-raw-bfloat16-bytes", CONVERTING, "a bfloat16 array saved with numpy.save "
     "(read back as |V2)", ConversionError, "numpy files {tmp}/w.npy: 'w' holds raw values of 2 "
     "byte(s) (|V2), most likely an ml_dtypes array (bfloat16 is |V2, float8 |V1) that "
     "numpy.save wrote as bytes. Save x.astype(np.float32) (exact for bfloat16), or "
     "x.view(np.uint16) to keep its bits.")(_convert_bfloat16_npy)


def _read_metadata_of_a_file(tmp: Path) -> Any:
    from datarax.dataset import read_metadata

    (tmp / "train.csv").write_text("x\n1\n")
    return read_metadata(tmp / "train.csv")


case("dataset-folder-is-a-file", CONVERTING, "read_metadata (--classes-from) of a CSV file, "
     "not a dataset folder", DataraxError, "'{tmp}/train.csv' is a file, not a dataset: a "
     "dataset is the folder that convert wrote, holding datarax_dataset.json and its shards.")(
    _read_metadata_of_a_file)


# ------------------------------------------------------------------------ text
TEXT = "Text (PackedTextSource, TextTokenizer)"


def _words(text: str) -> list[int]:
    return [len(w) for w in text.split()]


def _docs(epoch: int) -> list[str]:
    return ["a bb ccc dddd", "ee ff", "g h i j k l m n"]


def _read_text(source: Any) -> None:
    for _ in Pipeline(source=source, stages=[], batch_size=2, shard_index=0, shard_count=1):
        pass


def _packed(documents: Any = _docs, tokenizer: Any = _words, **config: Any) -> Any:
    from datarax.text import PackedTextConfig, PackedTextSource

    return PackedTextSource(PackedTextConfig(**{"seq_len": 4, **config}), documents, tokenizer)


def _mixture() -> Any:
    from datarax.text import MixedDocuments

    return MixedDocuments({"web": _docs, "code": lambda epoch: ["x y"]}, {"web": 1, "code": 1},
                          documents_per_epoch=6)


simple("text-special-id-past-vocabulary", TEXT, "TextTokenizer(eos_id=2) over a vocabulary "
       "of 2", ConfigError, "TextTokenizer eos_id=2 is not an id of the tokenizer (its "
       "vocabulary holds ids 0..1), so a model's embedding table has no row for it. Add the "
       "token to the tokenizer (tokenizer.add_special_tokens(['[BOS]'])) and pass its id "
       "(tokenizer.token_to_id('[BOS]')).",
       lambda: __import__("datarax.text", fromlist=["x"]).TextTokenizer(_tokenizer(), eos_id=2),
       needs="tokenizers")
simple("text-pad-id-past-int32", TEXT, "PackedTextConfig(pad_id=2**31)", ConfigError,
       "PackedTextConfig.pad_id must fit int32 (the rows are int32), got 2147483648.",
       lambda: __import__("datarax.text", fromlist=["x"]).PackedTextConfig(seq_len=8,
                                                                            pad_id=2**31))
case("text-jsonl-folder", TEXT, "JsonlDocuments given a folder", RecordError,
     "JsonlDocuments: the path '{tmp}' is a directory, not a file. Name its files, or a glob "
     "pattern such as '{tmp}/*'.")(
    lambda tmp: __import__("datarax.text", fromlist=["x"]).JsonlDocuments(str(tmp)))
simple("text-mixture-weights-list", TEXT, "MixedDocuments weights as a list",
       ConfigError, "MixedDocuments weights must be a dict keyed by corpus name, got list "
       "[1, 1]; e.g. corpora={'web': reader, 'books': reader} and weights={'web': 0.8, "
       "'books': 0.2}.",
       lambda: __import__("datarax.text", fromlist=["x"]).MixedDocuments(
           {"web": _docs, "code": lambda epoch: ["x y"]}, [1, 1], documents_per_epoch=6))


def _restore_text(make: Callable[[], Any], change: Callable[[dict[str, Any]], Any]) -> None:
    """A state of ``make()`` after one row, changed by ``change``, restored into another."""
    source = make()
    source.get_batch(1)
    state = json.loads(json.dumps(source.get_state()))
    change(state)
    make().set_state(state)


def _tokenizer(**setting: Any) -> Any:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    tokenizer = Tokenizer(WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    if "truncation" in setting:
        tokenizer.enable_truncation(setting["truncation"])
    return tokenizer


class BertTokenizerFast:
    """A stand-in for a transformers tokenizer: a call gives a dict; ``backend_tokenizer``
    is the ``tokenizers.Tokenizer`` inside."""

    def __init__(self) -> None:
        self.backend_tokenizer = _tokenizer()

    def __call__(self, text: str) -> dict[str, list[int]]:
        return {"input_ids": [0], "attention_mask": [1]}


def _fails_on_ee(text: str) -> list[int]:
    if "ee" in text:
        raise KeyError("ee")
    return _words(text)


def _shard_documents(epoch: int, shard: int) -> list[str]:
    return []


simple("text-state-malformed-run", TEXT, "a PackedTextSource state with a run of 0 rows",
       StateError, "PackedTextSource: Packer state holds a malformed run of rows {'document': 0, "
       "'start': 0, 'rows': 0, 'row_tokens': 2}; a run is {'document', 'start', 'rows', "
       "'row_tokens'} of ints (rows and row_tokens >= 1), as get_state() returns it.",
       lambda: _restore_text(lambda: _packed(seq_len=2, open_rows=1), lambda s: s["packer"].update(
           ready=[{"document": 0, "start": 0, "rows": 0, "row_tokens": 2}])), field="packer")
simple("text-state-packer-count", TEXT, "a PackedTextSource state whose packer counts -1 tokens",
       StateError, "PackedTextSource: Packer state 'tokens_packed' must be an int >= 0, got -1; "
       "pass the dict Packer.get_state() returned.",
       lambda: _restore_text(lambda: _packed(seq_len=2, open_rows=1),
                             lambda s: s["packer"].update(tokens_packed=-1)), field="packer")
simple("text-state-corpus-documents", TEXT,
       "a mixture's state with 'corpus_documents' of 1 count for 2 corpora", StateError,
       "PackedTextSource state 'corpus_documents' must be a list of 2 ints >= 0 (documents "
       "packed per corpus of the mixture), got [1]; pass the dict PackedTextSource.get_state() "
       "returned.",
       lambda: _restore_text(lambda: _packed(_mixture()),
                             lambda s: s.update(corpus_documents=[1])),
       field="corpus_documents")
simple("text-mixture-corpus-all-bad", TEXT,
       "a mixture corpus whose every document is bad, on_error='skip'", RecordError,
       "PackedTextSource: corpus 'code' of the mixture served none of the 2 documents drawn from "
       "it in pass 0: every one was bad (the last: corpus 'code' document 1 of pass 0 is not "
       "valid UTF-8 (invalid start byte at byte 0)). Skipping them all would ignore its weight "
       "(weights {'web': 0.5, 'code': 0.5}). Check that corpus's field or column and its "
       "documents, or give it weight 0.",
       lambda: _read_text(_packed(__import__("datarax.text", fromlist=["x"]).MixedDocuments(
           {"web": _docs, "code": lambda epoch: [b"\xff\xfe", b"\xff"]}, {"web": 1, "code": 1},
           documents_per_epoch=40), on_error="skip")))
simple("text-pass-without-documents", TEXT, "a documents function returning []", RecordError,
       "PackedTextSource: pass 0 holds no documents: the reader (FunctionDocuments) gave none. "
       "Check the documents function, the files (an empty file?) and their paths.",
       lambda: _read_text(_packed(lambda epoch: [])))
simple("text-tokenizer-truncates", TEXT, "a tokenizers.Tokenizer with truncation on",
       ConfigError, "TextTokenizer: the tokenizers.Tokenizer truncates every document to 128 "
       "tokens (its truncation setting); packing would drop the rest of each longer document in "
       "silence. Call no_truncation() on the Tokenizer (for a file: "
       "tokenizers.Tokenizer.from_file(path) first) and pass max_tokens= to TextTokenizer to cut "
       "documents on purpose (it keeps the EOS last).",
       lambda: __import__("datarax.text", fromlist=["x"]).TextTokenizer(
           _tokenizer(truncation=128)), needs="tokenizers")
simple("text-transformers-tokenizer", TEXT,
       "a transformers tokenizer (returns a dict; a stand-in with .backend_tokenizer)",
       ConfigError, "TextTokenizer: BertTokenizerFast (a transformers tokenizer) returns a dict "
       "per call, not ids. Pass its .backend_tokenizer (the tokenizers.Tokenizer inside) with "
       "bos_id= / eos_id= for the special tokens, or a function returning "
       "tokenizer(text)['input_ids'].",
       lambda: __import__("datarax.text", fromlist=["x"]).TextTokenizer(BertTokenizerFast()),
       needs="tokenizers")
simple("text-tokenizer-raises", TEXT, "a custom tokenizer raising on document 1", RecordError,
       "TextTokenizer: the tokenizer function '_fails_on_ee' raised KeyError ('ee') on document 1 of pass 0; "
       "fix the tokenizer, or the document.",
       lambda: _read_text(_packed(tokenizer=_fails_on_ee)))
simple("text-documents-function-two-arguments", TEXT,
       "FunctionDocuments(fn(epoch, shard))", ConfigError,
       "FunctionDocuments: the function _shard_documents needs 2 arguments (epoch, shard); it is "
       "called as fn(epoch) or fn(). Bind the others first (functools.partial) or give them "
       "defaults.",
       lambda: __import__("datarax.text", fromlist=["x"]).FunctionDocuments(_shard_documents))
simple("text-documents-a-source", TEXT, "a datarax source given as documents",
       ConfigError, "documents is a datarax source (MemorySource), not a reader of documents: "
       "read the text field of a source read forward (a Hugging Face stream, ArrayRecord, a "
       "MixSource ...) with HFStreamDocuments(source, field='text'); an indexed source (in "
       "memory, HFEagerSource) is read forward wrapped as ShuffleBufferSource(source, "
       "buffer_size=1) (its own order); texts in a list: pass `lambda epoch: texts`.",
       lambda: _packed(MemorySource(MemorySourceConfig(), {"text": ["a b", "c"]})))
simple("text-stream-field-not-text", TEXT, "HFStreamDocuments over a numeric field",
       ConfigError, "HFStreamDocuments: the field 'n' holds int32(), not one text per record "
       "(fields: {'n': 'int32()', 'text': 'text()'}); pass field= naming the text field.",
       lambda: __import__("datarax.text", fromlist=["x"]).HFStreamDocuments(
           __import__("datarax.sources", fromlist=["x"]).ShuffleBufferSource(MemorySource(
               MemorySourceConfig(), {"text": ["a", "b"], "n": np.arange(2, dtype=np.int32)}),
               buffer_size=1), field="n"))
def _parquet_int_column(tmp: Path) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from datarax.text import ParquetDocuments

    pq.write_table(pa.table({"text": ["a", "b"], "n": [1, 2]}), tmp / "c.parquet")
    return ParquetDocuments(str(tmp / "c.parquet"), column="n")


case("text-parquet-column-not-text", TEXT, "ParquetDocuments(column=) naming an int column",
     ConfigError, "ParquetDocuments: {tmp}/c.parquet column 'n' holds int64, not text (its "
     "text columns: ['text']); pass column= naming the text column.",
     needs="pyarrow")(_parquet_int_column)
simple("text-special-token-as-text", TEXT, "TextTokenizer(bos_id='[BOS]'), the token's text",
       ConfigError, "TextTokenizer bos_id must be None or an int id >= 0, got '[BOS]' (a token; "
       "pass its id: tokenizer.token_to_id('[BOS]')).",
       lambda: __import__("datarax.text", fromlist=["x"]).TextTokenizer(_words, bos_id="[BOS]"))
simple("text-documents-records", TEXT, "a documents function yielding records (dicts)",
       RecordError, "PackedTextSource: document 0 of pass 0 is a dict (keys ['id', 'text']), "
       "not str or bytes: the reader must yield each document's text, e.g. (record['text'] "
       "for record in records).",
       lambda: _read_text(_packed(lambda epoch: [{"text": "a b", "id": 0}])))


GRAPHS = "Graphs (DagOperator, SelectFields, Merge, Pipeline.from_dag)"


def _dag(name: str, /, *args: Any, **kw: Any) -> Any:
    return getattr(__import__("datarax.dag", fromlist=["x"]), name)(*args, **kw)


def _even(el: Any) -> Any:
    return el.data["x"] % 2 == 0


simple("dag-select-rename-collides", GRAPHS, "SelectFields('x', 'y', rename={'x': 'y'})",
       ConfigError, "SelectFields: both 'x' and 'y' would be named 'y', and one would be lost; "
       "give each output field its own name.",
       lambda: _dag("SelectFields", "x", "y", rename={"x": "y"}))
simple("dag-select-field-twice", GRAPHS, "SelectFields('x', 'x')", ConfigError,
       "SelectFields selects 'x' twice; list each field once.",
       lambda: _dag("SelectFields", "x", "x"))
simple("dag-merge-naming-unknown", GRAPHS, "Merge('{nod}_{field}')", ConfigError,
       "Merge naming '{nod}_{field}' uses {nod}; it can use only {node} and {field} (write a "
       "literal brace as '{{' or '}}').",
       lambda: _dag("Merge", "{nod}_{field}"))
simple("dag-filter-node", GRAPHS, "a FilterOperator as a DagOperator node", ConfigError,
       "DagOperator node 'f' is a FilterOperator; every node of a graph maps each record to one "
       "record, so its branches stay aligned. Put the filter in the Pipeline's stages, before or "
       "after the graph: Pipeline(source, stages=[filter, DagOperator(nodes, edges, sink)]).",
       lambda: _dag("DagOperator", {"f": FilterOperator(predicate=_even)}, {"f": ["source"]}, "f"))
simple("dag-from-dag-stages", GRAPHS, "Pipeline.from_dag(..., stages=[...])", ConfigError,
       "Pipeline.from_dag makes the graph the pipeline's one stage and takes no stages=; for "
       "stages before or after the graph (a FilterOperator, say), build Pipeline(source, "
       "stages=[..., DagOperator(nodes, edges, sink), ...]).",
       lambda: Pipeline.from_dag(MemorySource(MemorySourceConfig(), data()),
                                 nodes={"a": _dag("SelectFields", "x")}, edges={"a": ["source"]},
                                 sink="a", batch_size=2, stages=[]))

MIXING = "Mixing sources (MixSource)"


def _mix_2d_weights() -> Any:
    from datarax.mixing import MixSource

    sources = [MemorySource(MemorySourceConfig(), data()) for _ in range(2)]
    return MixSource(sources, np.ones((1, 2)))


simple("mix-weights-2d-array", MIXING, "MixSource weights as an array of shape (1, 2)",
       ConfigError, "MixSource weights must be one weight per source, got an array of shape "
       "(1, 2); pass a 1-D array, a list or a dict by name.", _mix_2d_weights)


def _mix_str_and_bytes() -> Any:
    from datarax.mixing import MixSource

    def text(values: list[Any]) -> MemorySource:
        return MemorySource(MemorySourceConfig(), {"t": np.array(values, dtype=object)})

    return MixSource({"a": text(["x", "y"]), "b": text([b"x", b"y"])}, [1, 1])


simple("mix-text-str-and-bytes", MIXING, "a text field of str in one source, of bytes in "
       "the other", SpecMismatchError, "MixSource: field 't' is text of str in source 'a' but "
       "of bytes in source 'b'; decode the bytes (value.decode('utf-8'), e.g. with an "
       "operator) before mixing.", _mix_str_and_bytes)


def _mix_given_its_config() -> Any:
    from datarax.mixing import MixSource, MixSourceConfig

    sources = [MemorySource(MemorySourceConfig(), data()) for _ in range(2)]
    config = MixSourceConfig(names=("source0", "source1"), weights=(0.5, 0.5))
    return MixSource(config, sources)  # upstream's MixDataSourcesNode(config, sources)


simple("mix-given-a-config", MIXING, "MixSource(MixSourceConfig(...), sources), upstream's form",
       ConfigError, "MixSource takes the sources and their weights, not a MixSourceConfig (it "
       "builds its config from them): MixSource([a, b], [0.7, 0.3], mode='epoch', seed=0), or "
       "by name, MixSource({'a': a, 'b': b}, {'a': 0.7, 'b': 0.3}).", _mix_given_its_config)


def _mix_skipping_part() -> Any:
    from bad_rows import Rows, RowsConfig

    from datarax.mixing import MixSource
    from datarax.sources import ConcatSource

    parts = ConcatSource([Rows(RowsConfig(on_error="skip"), 4), Rows(RowsConfig(), 4)])
    return MixSource([Rows(RowsConfig(), 4), parts], [1, 1], mode="sampling")


simple("mix-part-skips-bad-records", MIXING,
       "MixSource(mode='sampling') over a ConcatSource one of whose parts has on_error='skip'",
       SourceContractError, "MixSource source 'source1' skips bad records "
       "(parts[0].on_error='skip'); sampling with replacement reads each draw's record by its "
       "number, so a record skipped as bad would leave its draw unserved. Use mode='epoch' "
       "(read in order, the bad record skipped once), or on_error='raise' and scan and fix the "
       "data first.", _mix_skipping_part)

COMBINING = "Combining sources (ConcatSource, FlatMapSource)"


def _flat_map_parent_skipped() -> None:
    from bad_rows import Rows, RowsConfig

    from datarax.sources import FlatMapSource

    def build() -> Any:
        return FlatMapSource(Rows(RowsConfig(on_error="skip"), 6, bad={1}),
                             lambda record: [record], max_outputs=1)

    source = build()
    source.get_batch_with_indices(2)
    build().set_state({**source.get_state(), "parent_skipped": 5})


simple("flat-map-parent-skipped-over-position", COMBINING,
       "a FlatMapSource state whose parent_skipped exceeds its cursor's parent position",
       StateError, "FlatMapSource state 'parent_skipped' must be an int in [0, 0] (records the "
       "parent skipped before position 0), got 5; pass the dict FlatMapSource.get_state() "
       "returned.",
       _flat_map_parent_skipped, field="parent_skipped")

def _flat_map_parent_skips() -> None:
    from bad_rows import Rows, RowsConfig

    from datarax.sources import ConcatSource, FlatMapSource

    def build() -> Any:
        parts = ConcatSource([Rows(RowsConfig(on_error="skip"), 6, bad={1}),
                              Rows(RowsConfig(on_error="skip"), 6, offset=10)])
        return FlatMapSource(parts, lambda record: [record], max_outputs=1)

    source = build()
    source.get_batch_with_indices(2)
    build().set_state({**source.get_state(), "parent_skips": {"skipped": 1}})


simple("flat-map-parent-skips-not-the-parent-s", COMBINING,
       "a FlatMapSource state whose parent_skips (a parent concatenation's counts) disagree "
       "with its parent_skipped", StateError,
       "FlatMapSource state 'parent_skips' must be the parent concatenation's skip counts, "
       "its 'skipped' equal to 'parent_skipped' (0), got {'skipped': 1}; pass the dict "
       "get_state() returned.", _flat_map_parent_skips, field="parent_skips")


def _nested_concat_part_skips() -> None:
    from bad_rows import Rows, RowsConfig

    from datarax.sources import ConcatSource

    inner = ConcatSource([Rows(RowsConfig(on_error="skip"), 4, bad={1}),
                          Rows(RowsConfig(on_error="skip"), 4, offset=10)])
    ConcatSource([inner]).set_state({
        "current_epoch": 0, "current_index": 5, "skipped": 1, "skipped_by_part": [1],
        "part_skips": {"skipped": 2, "skipped_by_part": [2, 0]}})


simple("concat-part-skips-not-the-part-s", COMBINING,
       "a ConcatSource state whose part_skips (a nested concatenation's counts) disagree "
       "with its skipped_by_part", StateError,
       "ConcatSource state 'part_skips' must be the skip counts of the concatenation part at "
       "the position, its 'skipped' equal to that part's entry of 'skipped_by_part' ([1]), got "
       "{'skipped': 2, 'skipped_by_part': [2, 0]}; pass the dict get_state() returned.",
       _nested_concat_part_skips, field="part_skips")


def _flat_map_positional_setting() -> Any:
    from datarax.sources import FlatMapSource

    return FlatMapSource(MemorySource(MemorySourceConfig(), data()), lambda r: [r], 3)


def _concat_given_its_config() -> Any:
    from datarax.sources import ConcatSource, ConcatSourceConfig

    parts = [MemorySource(MemorySourceConfig(), data()) for _ in range(2)]
    return ConcatSource(ConcatSourceConfig(num_parts=2), parts)  # the data sources' order


LOGGING = "Logging (StatsLogger)"


def _stats_logger(jsonl_path: Any) -> Any:
    from datarax.metrics import StatsLogger

    return StatsLogger(pipe(), jsonl_path=jsonl_path)


def _stats_after_close(tmp: Path) -> None:
    logger = _stats_logger(tmp / "stats.jsonl")
    logger.close()
    logger.step()


case("stats-jsonl-path-folder", LOGGING, "StatsLogger(jsonl_path=<a folder>)", ConfigError,
     "StatsLogger jsonl_path '{tmp}' is a folder; give a file in it, e.g. "
     "jsonl_path='runs/data_stats.jsonl'.")(_stats_logger)
case("stats-step-after-close", LOGGING, "StatsLogger.step() after close()", RuntimeError,
     "StatsLogger is closed (close() or the end of its with block); build a new StatsLogger to "
     "log again.")(_stats_after_close)

READING = "Reading: raw ArrayRecord records, a shared cache folder"


def _metadata_edited(tmp: Path) -> None:
    from datarax.dataset import write_dataset
    from datarax.dataset.metadata import METADATA_FILE
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    write_dataset([{"x": i} for i in range(4)], tmp / "ds")
    path = tmp / "ds" / METADATA_FILE
    meta = json.loads(path.read_text())
    for field in meta["features"]:
        field.pop("dtype")  # a hand edit that dropped a key
    path.write_text(json.dumps(meta))
    ArrayRecordSourceModule(ArrayRecordSourceConfig(), tmp / "ds")


def _ar_raw_lengths(tmp: Path) -> None:
    path = write_records(tmp / "raw.array_record", (b"ab" * (i + 1) for i in range(6)))
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    _ar_read_all(ArrayRecordSourceModule(ArrayRecordSourceConfig(), path))


def _cache_shared_in_process(tmp: Path) -> None:
    import fsspec

    from datarax.storage import RemoteShards, RetryPolicy, ShardCache, list_objects

    readers = []
    for name in ("first", "second"):
        for i in range(3):
            fsspec.filesystem("memory").pipe(f"/bad-inputs-{name}/{i}.bin", bytes([i]) * 10)
        readers.append(RemoteShards(
            list_objects(f"memory://bad-inputs-{name}/*.bin"), behind=3,
            cache=ShardCache(tmp / "cache", max_bytes=30), retry=RetryPolicy(initial_delay=0.0)))
    try:
        for reader in readers:
            for i in range(3):
                with reader.open(i, lambda path: open(path, "rb")):
                    pass
    finally:
        for reader in readers:
            reader.close()


case("dataset-metadata-malformed", READING,
     "a dataset folder whose metadata file lost a feature's 'dtype' (edited by hand)",
     DataraxError, "the metadata is malformed (KeyError: 'dtype'); it was edited or damaged "
     "since the conversion wrote it: convert the data again.", needs=AR)(_metadata_edited)
case("arrayrecord-raw-records-of-different-lengths", READING,
     "raw records of different lengths, no decode=", RecordError,
     "The file is fine: pass decode= to turn a record's bytes into fields of one shape (or "
     "text), e.g. ArrayRecordSourceModule(config, paths, decode=lambda raw: {'text': "
     "raw.decode()}); images of several sizes: decode=datarax.decode_images(...).",
     needs=AR)(_ar_raw_lengths)
def _dataset_folder_in_a_list(tmp: Path) -> None:
    from datarax.dataset import write_dataset
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    write_dataset([{"i": np.int32(i)} for i in range(4)], tmp / "ds")
    ArrayRecordSourceModule(ArrayRecordSourceConfig(), [str(tmp / "ds"), str(tmp / "ds")])


case("arrayrecord-dataset-folder-in-a-list", READING,
     "paths=[dataset_folder, dataset_folder] (two datasets read as one)", RecordError,
     "It is a datarax dataset: give its folder alone (paths='{tmp}/ds'), not in a list; to "
     "read several datasets as one, ConcatSource over a source of each.",
     needs=AR)(_dataset_folder_in_a_list)
case("cache-held-by-another-source-of-this-process", READING,
     "a second source of this process, through a cache folder the first one fills",
     CacheFullError, "held by another source in this process reading through the same "
     "folder", needs="fsspec")(_cache_shared_in_process)

STORAGE = "Object storage (s3://, gs://, https://)"


def _with_env(values: dict[str, str], call: Callable[[], Any]) -> Any:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        return call()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _cache_others_may_write(tmp: Path) -> None:
    import fsspec

    from datarax.storage import RemoteShards, ShardCache, list_objects

    fsspec.filesystem("memory").pipe("/bad-inputs-open-cache/0.bin", b"0123456789")
    (tmp / "cache").mkdir()
    os.chmod(tmp / "cache", 0o777)
    RemoteShards(list_objects("memory://bad-inputs-open-cache/0.bin"),
                 cache=ShardCache(tmp / "cache", max_bytes=100)).close()


def _cache_as_folder_path(tmp: Path) -> None:
    import io

    import fsspec

    from datarax.sources import NpySource, NpySourceConfig

    buffer = io.BytesIO()
    np.save(buffer, np.arange(4, dtype=np.int32))
    fsspec.filesystem("memory").pipe("/bad-inputs-cache-path/x.npy", buffer.getvalue())
    NpySource(NpySourceConfig(paths="memory://bad-inputs-cache-path/x.npy"), cache=str(tmp))


case("cache-given-as-a-folder-path", STORAGE, "NpySource(config, cache='/data/cache')",
     ConfigError, "NpySource: cache must be a datarax.storage.ShardCache(directory, max_bytes) "
     "or None (DATARAX_CACHE_DIR, DATARAX_CACHE_BYTES), got str '{tmp}'; for the folder: "
     "cache=ShardCache('{tmp}', max_bytes=...).", needs="fsspec")(_cache_as_folder_path)
def _retry_negative_delay() -> None:
    from datarax.storage import RetryPolicy

    RetryPolicy(initial_delay=-1)


simple("retry-policy-negative-delay", STORAGE, "RetryPolicy(initial_delay=-1)", ConfigError,
       "RetryPolicy initial_delay must be a finite number >= 0 (seconds), got -1.",
       _retry_negative_delay)
def _storage_options_a_list() -> None:
    from datarax.storage import list_objects

    list_objects("memory://bad-inputs-options/*.bin", storage_options=[("anon", True)])


simple("storage-options-not-a-dict", STORAGE, "storage_options=[('anon', True)]", ConfigError,
       "storage_options must be a dict of the filesystem's options (e.g. {'anon': True}, passed "
       "to fsspec for 'memory://bad-inputs-options/*.bin'), got list [('anon', True)].",
       _storage_options_a_list, needs="fsspec")
def _url_cut_by_pathlib() -> None:
    from datarax.sources import NpySource, NpySourceConfig

    NpySource(NpySourceConfig(paths=Path("s3://bucket/images.npy")))


simple("storage-url-cut-by-pathlib", STORAGE, "paths=Path('s3://bucket/images.npy')",
       ConfigError, "the path 's3:/bucket/images.npy' reads as a URL with one '/' after 's3:' "
       "(pathlib.Path turns 's3://' into 's3:/'); pass the URL as a str, e.g. "
       "'s3://bucket/images.npy'.", _url_cut_by_pathlib)
case("cache-folder-others-may-write", STORAGE,
     "a shard cache folder of mode 777 (DATARAX_CACHE_DIR=/tmp/shared-cache)", ConfigError,
     "the shard cache folder '{tmp}/cache' is not private to this user: group or others may "
     "write it (mode 777)", needs="fsspec")(_cache_others_may_write)


def _shard_deleted_after_build(tmp: Path) -> None:
    import fsspec

    from datarax.dataset import write_dataset
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache

    write_dataset([{"i": np.int32(i)} for i in range(8)], tmp / "ds", shards=2)
    memory = fsspec.filesystem("memory")
    for path in sorted((tmp / "ds").iterdir()):
        memory.pipe(f"/bad-inputs-deleted/ds/{path.name}", path.read_bytes())
    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(), "memory://bad-inputs-deleted/ds",
                                     cache=ShardCache(tmp / "cache", max_bytes="1M"))
    memory.rm("/bad-inputs-deleted/ds/data-00000-of-00002.array_record")
    try:
        source.get_batch(4)
    except RemoteObjectError as err:  # says what to do once: no bad record's generic advice
        if "Fix or regenerate" in str(err):
            raise AssertionError(f"two pieces of advice: {err}") from err
        raise
    finally:
        source.close()


case("storage-shard-deleted-after-build", STORAGE,
     "a dataset's shard deleted from the bucket after the source was built", RemoteObjectError,
     "cannot read record 0 of file 'memory://bad-inputs-deleted/ds/data-00000-of-00002."
     "array_record': 'memory://bad-inputs-deleted/ds/data-00000-of-00002.array_record' is "
     "missing from the store, though the dataset's metadata names it",
     needs=AR)(_shard_deleted_after_build)


def _unreachable_store() -> None:
    import s3fs

    from datarax.storage.urls import list_objects

    s3fs.S3FileSystem.clear_instance_cache()
    endpoint = "http://127.0.0.1:9"  # the discard port: nothing listens on it
    _with_env({"DATARAX_RETRY_BUDGET": "0", "AWS_ENDPOINT_URL": endpoint,
               "AWS_ENDPOINT_URL_S3": endpoint, "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"},
              lambda: list_objects("s3://bucket/data.array_record"))


def _budget_not_a_number() -> None:
    from datarax.storage import RetryPolicy

    _with_env({"DATARAX_RETRY_BUDGET": "soon"}, RetryPolicy)


simple("storage-retry-budget-not-a-number", STORAGE, "DATARAX_RETRY_BUDGET='soon'", ConfigError,
       "DATARAX_RETRY_BUDGET='soon' is not a number of seconds; set it to how long a failing "
       "request to the store may be retried, e.g. DATARAX_RETRY_BUDGET=120 (default 60).",
       _budget_not_a_number)
simple("storage-store-unreachable", STORAGE,
       "an S3 endpoint nobody listens on (DATARAX_RETRY_BUDGET=0)", DataraxError,
       "cannot read 's3://bucket/data.array_record': still failing after 1 attempt in ",
       _unreachable_store, needs="s3fs")


def _rewritten_mid_read() -> None:
    import fsspec

    from datarax.storage.fetch import Fetcher
    from datarax.storage.urls import RemoteObject

    mem = fsspec.filesystem("memory")
    mem.pipe("/bad-inputs-rewritten/a.array_record", b"old bytes")
    obj = RemoteObject("memory://bad-inputs-rewritten/a.array_record", 9, sha256="0" * 64)
    fetcher = Fetcher()
    fetcher.read_range(obj, 0, 4)  # the file's first read: its version is captured
    mem.pipe("/bad-inputs-rewritten/a.array_record", b"new bytes")  # same size
    try:
        fetcher.read_range(obj, 4, 9)
    finally:
        mem.rm("/bad-inputs-rewritten/a.array_record")


simple("storage-object-rewritten-mid-epoch", STORAGE,
       "a shard rewritten in the store (same size) after its first ranged read", RecordError,
       "changed in the store since it was first opened: a read of bytes 4-9 found version",
       _rewritten_mid_read, needs="fsspec")


def _changed_after_build(tmp: Path) -> Any:
    import fsspec

    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache

    rng = np.random.default_rng(0)  # over 1 MiB: counted from its footer at the build
    data = Path(write_records(tmp / "a.array_record",
                              [rng.bytes(30_000) for _ in range(40)])).read_bytes()
    mem = fsspec.filesystem("memory")
    mem.pipe("/bad-inputs-changed/a.array_record", data)
    try:
        source = ArrayRecordSourceModule(
            ArrayRecordSourceConfig(), "memory://bad-inputs-changed/a.array_record",
            cache=ShardCache(tmp / "cache", "10M"), decode=lambda raw: {"n": np.int32(len(raw))})
        mem.pipe("/bad-inputs-changed/a.array_record", data[:100] + bytes([data[100] ^ 1])
                 + data[101:])  # the same size, one byte changed
        source.get_batch(4)
    finally:
        mem.rm("/bad-inputs-changed/a.array_record")


case("storage-file-changed-after-build", STORAGE,
     "a plain ArrayRecord file changed in the store after the source was built",
     RemoteObjectError, "cannot read record 0 of file 'memory://bad-inputs-changed/"
     "a.array_record': 'memory://bad-inputs-changed/a.array_record' changed in the store "
     "since it was listed", needs="fsspec")(_changed_after_build)




def _inspect_image_options(**flags: Any) -> Any:
    import argparse

    from datarax.cli.targets import image_options

    return image_options(argparse.Namespace(**{"resize": None, "crop": None, "field": None,
                                               "random_resized_crop": None, **flags}))


def _decode_images(field: str = "image", **options: Any) -> Any:
    from datarax import decode_images

    return decode_images(field, **options)


def _decode_images_missing_field(tmp: Path) -> Any:
    from datarax.dataset import Features, Field, write_dataset
    from datarax.sources.array_record import ArrayRecordSourceConfig, ArrayRecordSourceModule

    features = Features((Field("image", "uint8", (None, None, 3), "png"),))
    folder = str(tmp / "ds")
    write_dataset([{"image": np.zeros((4, 5, 3), np.uint8)}], folder, features=features)
    ArrayRecordSourceModule(ArrayRecordSourceConfig(), folder,
                            decode=_decode_images("photo", resize=8, crop=8))


def _images_of_several_sizes_without_decode(tmp: Path) -> Any:
    from datarax.dataset import Features, Field, write_dataset
    from datarax.sources.array_record import ArrayRecordSourceConfig, ArrayRecordSourceModule

    features = Features((Field("image", "uint8", (None, None, 3), "png"),))
    folder = str(tmp / "ds")
    write_dataset([{"image": np.zeros((4 + i, 5, 3), np.uint8)} for i in range(2)], folder,
                  features=features)
    ArrayRecordSourceModule(ArrayRecordSourceConfig(), folder)


case("dataset-images-of-several-sizes-no-decode", "ArrayRecord: records and images of several sizes",
     "a converted image folder of several sizes read with no decode=", ConfigError,
     "the dataset's field 'image' has a variable shape (None, None, 3), and a batch needs one "
     "shape per field; read the dataset (its folder, or its shards) with "
     "decode=datarax.decode_images('image', resize=N, crop=C) (or random_resized_crop=S), "
     "which cuts every image to one size", needs=AR)(_images_of_several_sizes_without_decode)
simple("inspect-resize-alone", "ArrayRecord: records and images of several sizes",
       "datarax inspect DST --resize 256 (no --crop)", ConfigError,
       "--resize 256 alone keeps each image's aspect ratio, so the sizes vary; add --crop (e.g. "
       "--crop 256), or give --resize 256x256.",
       lambda: _inspect_image_options(resize="256"))
simple("inspect-random-crop-with-resize", "ArrayRecord: records and images of several sizes",
       "datarax inspect DST --resize 256 --random-resized-crop 224", ConfigError,
       "--random-resized-crop cuts and resizes in one step: give it alone, or --resize N "
       "--crop C.", lambda: _inspect_image_options(resize="256", random_resized_crop=224))
simple("decode-images-resize-alone", "ArrayRecord: records and images of several sizes",
       "decode_images(resize=256)", ConfigError,
       "decode_images needs an output size: a batch holds images of one shape. resize=256 alone "
       "keeps each image's aspect ratio, so sizes vary; add crop= (e.g. crop=256), or give "
       "resize=(height, width).", lambda: _decode_images(resize=256))
simple("decode-images-crop-and-random-crop", "ArrayRecord: records and images of several sizes",
       "decode_images(random_resized_crop=224, crop=224)", ConfigError,
       "decode_images: random_resized_crop= cuts and resizes in one step and cannot be combined "
       "with resize= or crop=", lambda: _decode_images(random_resized_crop=224, crop=224))
simple("decode-images-resize-zero", "ArrayRecord: records and images of several sizes",
       "decode_images(resize=0, crop=224)", ConfigError,
       "decode_images: resize must be an int >= 1 or a (height, width) pair of them, got 0.",
       lambda: _decode_images(resize=0, crop=224))
def _decode_images_without_pillow() -> Any:
    saved = {name: sys.modules.get(name) for name in ("PIL", "PIL.Image")}
    sys.modules.update(dict.fromkeys(saved))  # as if Pillow were not installed
    try:
        return _decode_images(resize=224, crop=224)
    finally:
        for name, module in saved.items():
            if module is None:
                del sys.modules[name]
            else:
                sys.modules[name] = module


simple("decode-images-no-pillow", "ArrayRecord: records and images of several sizes",
       "decode_images(...) where Pillow is not installed", MissingExtraError,
       "decode_images needs the optional package 'PIL', which is not installed. Install it "
       'with: pip install "datarax[image]"', _decode_images_without_pillow)
simple("decode-images-not-called", "ArrayRecord: records and images of several sizes",
       "decode=datarax.decode_images (not called; --decode datarax:decode_images): a record's "
       "bytes as its field", ConfigError,
       "decode_images was given a record (3 bytes) as its field: it makes the decode function "
       "and is not one itself. Pass decode=datarax.decode_images('image', resize=256, crop=224)",
       lambda: _decode_images(b"\xff\xd8\xff"))
case("decode-images-no-such-field", "ArrayRecord: records and images of several sizes",
     "decode_images('photo') on a dataset whose image field is 'image'", ConfigError,
     "decode_images: the dataset has no field 'photo'; its fields are ['image']. Pass its image "
     "field: decode_images('image', ...).", needs=AR)(_decode_images_missing_field)


def _jpeg_damaged_inside_its_scan(tmp: Path) -> None:
    """A JPEG whose compressed pixels were overwritten (its markers intact): convert keeps
    it from its structure, the read names the record (alone: not 'record 0 of the batch')."""
    import io

    from PIL import Image

    from datarax.dataset import write_dataset
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    rng = np.random.default_rng(0)
    images = []
    for i in range(3):
        out = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(out, "JPEG")
        data = bytearray(out.getvalue())
        if i == 1:
            scan = data.find(b"\xff\xda")
            data[scan + 200:scan + 600] = b"\xff" * 400
        images.append({"image": bytes(data)})
    write_dataset(images, tmp / "ds")
    _ar_read_all(ArrayRecordSourceModule(ArrayRecordSourceConfig(), tmp / "ds"))


case("dataset-jpeg-damaged-inside-its-scan", "ArrayRecord: records and images of several sizes",
     "a dataset JPEG whose compressed pixels were overwritten (found only by a decode)",
     RecordError, "ArrayRecordSourceModule: cannot read record 1 of file "
     "'{tmp}/ds/data-00000-of-00001.array_record' (epoch 0): the record, field 'image': "
     "undecodable jpeg image (OSError: broken data stream when reading image file).",
     needs=AR)(_jpeg_damaged_inside_its_scan)


REORDERING = "Interleaving and shuffle buffers (InterleaveSource, ShuffleBufferSource)"


def _interleave(children: Any = None, **kw: Any) -> Any:
    from datarax.sources import InterleaveSource

    if children is None:
        children = [MemorySource(MemorySourceConfig(), data()) for _ in range(2)]
    return InterleaveSource(children, **{"cycle_length": 2, **kw})


def _shuffle_buffer(source: Any = None, **kw: Any) -> Any:
    from datarax.sources import ShuffleBufferSource

    source = MemorySource(MemorySourceConfig(), data()) if source is None else source
    return ShuffleBufferSource(source, **{"buffer_size": 4, **kw})


def _shuffle_buffer_given_its_config() -> Any:
    from datarax.sources import ShuffleBufferSource, ShuffleBufferSourceConfig

    config = ShuffleBufferSourceConfig(buffer_size=4)
    return ShuffleBufferSource(config, MemorySource(MemorySourceConfig(), data()))


def _interleave_bad_cursor() -> None:
    source = _interleave()
    source.set_state({**source.get_state(), "cursor": [3, 0, 0, 0, 0, 1, 0]})


def _shuffle_buffer_past_the_pass() -> None:
    source = _shuffle_buffer()
    source.set_state({"current_epoch": 0, "current_index": 9})
    source.get_batch_with_indices(2)


simple("interleave-cycle-length-zero", REORDERING, "InterleaveSource(cycle_length=0)",
       ConfigError, "InterleaveSourceConfig.cycle_length must be >= 1, got 0.",
       lambda: _interleave(cycle_length=0))
simple("interleave-block-length-zero", REORDERING, "InterleaveSource(block_length=0)",
       ConfigError, "InterleaveSourceConfig.block_length must be >= 1, got 0.",
       lambda: _interleave(block_length=0))
simple("interleave-no-sources", REORDERING, "InterleaveSource([])", ConfigError,
       "InterleaveSource needs at least one source; got an empty list.", lambda: _interleave([]))
simple("interleave-child-not-a-source", REORDERING, "a list of numbers among the sources",
       SourceContractError, "InterleaveSource source 1 is list, not a data source (a "
       "DataSourceModule such as MemorySource).",
       lambda: _interleave([MemorySource(MemorySourceConfig(), data()), [1, 2]]))
simple("interleave-cursor-tampered", REORDERING, "a state whose cursor opens a child not yet "
       "reached", StateError, "InterleaveSource state 'cursor' must be [next child, slot, block "
       "records taken, then (child, position) for each of the 2 slots], as get_state() returns "
       "it for 2 children; got [3, 0, 0, 0, 0, 1, 0].", _interleave_bad_cursor, field="cursor")
simple("shuffle-buffer-size-zero", REORDERING, "ShuffleBufferSource(buffer_size=0)",
       ConfigError, "ShuffleBufferSourceConfig.buffer_size must be >= 1, got 0.",
       lambda: _shuffle_buffer(buffer_size=0))
simple("shuffle-buffer-not-a-source", REORDERING, "ShuffleBufferSource over a list",
       SourceContractError, "ShuffleBufferSource source is list, not a data source (a "
       "DataSourceModule such as MemorySource).", lambda: _shuffle_buffer([1, 2, 3]))
simple("shuffle-buffer-position-past-the-pass", REORDERING, "a position of 9 records in a pass "
       "of 6", StateError, "ShuffleBufferSource: the restored position says 9 records of "
       "pass 0 were handed out, but the pass ends before that; the state comes from another "
       "source.",
       _shuffle_buffer_past_the_pass, field="current_index")


# ------------------------------------------------ seeds and the compiled-step store
SEEDS = "Seeds and compiled steps (Pipeline seed=, DATARAX_COMPILE_CACHE_BYTES)"
simple("pipeline-seed-negative", SEEDS, "seed=-1", ConfigError,
       "Pipeline seed must be in [0, 2**32), got -1.", lambda: pipe(seed=-1, rngs=None))
simple("pipeline-seed-float", SEEDS, "seed=1.5", ConfigError,
       "Pipeline seed must be an int, got float 1.5.", lambda: pipe(seed=1.5, rngs=None))
simple("pipeline-seed-and-rngs", SEEDS, "seed=0 and rngs=nnx.Rngs(0)", ConfigError,
       "Pipeline got both rngs= and seed=; give one: seed=0 stands for rngs=nnx.Rngs(0).",
       lambda: pipe(seed=0))


def _first_batch_with_env(name: str, value: str) -> Callable[[], None]:
    # a new program, so the store is asked (not a step compiled by an earlier case)
    return lambda: _with_env({name: value}, lambda: first_batch(
        pipe(stages=[lambda batch: {"x": batch["x"] * 5 + 2}])))


simple("compile-cache-bytes-not-a-number", SEEDS, "DATARAX_COMPILE_CACHE_BYTES=lots",
       ConfigError, "DATARAX_COMPILE_CACHE_BYTES: cannot read 'lots' as a size; write e.g. 20G, "
       "512M or 1000000.",
       _first_batch_with_env("DATARAX_COMPILE_CACHE_BYTES", "lots"))


simple("compile-cache-bytes-negative", SEEDS, "DATARAX_COMPILE_CACHE_BYTES=-1", ConfigError,
       "DATARAX_COMPILE_CACHE_BYTES must be >= 0, got '-1'; 0 keeps nothing, "
       "DATARAX_COMPILE_CACHE=0 turns the store off.",
       _first_batch_with_env("DATARAX_COMPILE_CACHE_BYTES", "-1"))
simple("compile-cache-switch-garbage", SEEDS, "DATARAX_COMPILE_CACHE=disable", ConfigError,
       "DATARAX_COMPILE_CACHE='disable' is neither on nor off",
       _first_batch_with_env("DATARAX_COMPILE_CACHE", "disable"))
simple("compile-ahead-switch-garbage", SEEDS, "DATARAX_COMPILE_AHEAD=disable", ConfigError,
       "DATARAX_COMPILE_AHEAD='disable' is neither on nor off",
       _first_batch_with_env("DATARAX_COMPILE_AHEAD", "disable"))
simple("pipeline-seed-key-array", SEEDS, "seed=jax.random.key(0)", ConfigError,
       "A JAX key goes in rngs=nnx.Rngs(key) instead of seed=.",
       lambda: pipe(seed=jax.random.key(0), rngs=None))
simple("pipeline-seed-0d-array", SEEDS, "seed=np.array(3.0)", ConfigError,
       "Pipeline seed must be an int, got ndarray",
       lambda: pipe(seed=np.array(3.0), rngs=None))


# ------------------------------------------------ ranged reads of ArrayRecord files
RANGED = "Ranged reads of ArrayRecord files (datarax.storage.ArrayRecordRanges)"


def _ranged(tmp: Path, options: str) -> Any:
    from datarax.storage import ArrayRecordRanges

    path = write_records(tmp / "x.array_record", (bytes([i]) * 100 for i in range(8)), options)
    return ArrayRecordRanges.from_url(path)


def _ranged_junk(tmp: Path) -> Any:
    from datarax.storage import ArrayRecordRanges

    (tmp / "junk.array_record").write_bytes(bytes(range(256)) * 1000)
    return ArrayRecordRanges.from_url(str(tmp / "junk.array_record"))


case("ranged-transposed", RANGED, "a file written with 'transpose'", ConfigError,
     "holds transposed chunks (written with the ArrayRecordWriter option 'transpose'), which "
     "ranged reads cannot decode", needs="array_record")(lambda tmp: _ranged(tmp, "transpose"))
case("ranged-brotli", RANGED, "a file written with 'brotli'", ConfigError,
     "is compressed with brotli (the ArrayRecordWriter option 'brotli'), which ranged reads "
     "cannot decode", needs="array_record")(lambda tmp: _ranged(tmp, "brotli"))
def _ranged_negative_gap() -> Any:
    from datarax.storage import ArrayRecordRanges

    return ArrayRecordRanges(lambda offset, length: bytes(length), 1 << 17, merge_gap=-1)


simple("ranged-merge-gap-negative", RANGED, "ArrayRecordRanges(..., merge_gap=-1)",
       ConfigError, "ArrayRecordRanges merge_gap must be an int >= 0 (bytes), got -1.",
       _ranged_negative_gap, needs="array_record")
case("ranged-not-array-record", RANGED, "a file of 256,000 other bytes", RecordError,
     "is not an ArrayRecord file: it holds 256000 bytes", needs="array_record")(_ranged_junk)


# ------------------------------------------------------------ custom sources
simple("custom-source-config-not-structural", "Custom sources",
       "a custom source built with a dict for its config", ConfigError,
       "ConfigPassing needs a StructuralConfig instance as its first argument, got dict. "
       "Define its config as a frozen dataclass deriving from StructuralConfig "
       "(@dataclass(frozen=True) class ConfigPassingConfig(StructuralConfig): ...), build "
       "ConfigPassing(ConfigPassingConfig(), ...), and pass it on first: "
       "super().__init__(config, rngs=rngs, name=name).",
       lambda: ConfigPassing({"file_path": "rows.csv"}))
_NO_SUBSETS = ("Dataset configs/variants (e.g. 'sst2' within 'glue') are not supported: pass a "
               "standalone dataset's name as name= (e.g. 'stanfordnlp/sst2').")
simple("hf-config-config-name", "Hugging Face dataset configs", "HFEagerConfig(name='glue', config_name='sst2')",
       TypeError, _NO_SUBSETS,
       lambda: _hf("HFEagerConfig", name="glue", config_name="sst2"), needs=HF)
simple("hf-config-subset", "Hugging Face dataset configs", "HFStreamingConfig(name='glue', subset='sst2')",
       TypeError, _NO_SUBSETS,
       lambda: _hf("HFStreamingConfig", name="glue", subset="sst2"), needs=HF)
simple("hf-from-hf-config-name", "Hugging Face dataset configs", "from_hf('glue', 'train', config_name='sst2')",
       ConfigError, _NO_SUBSETS,
       lambda: _hf("from_hf", "glue", "train", config_name="sst2"), needs=HF)
simple("hf-source-config-name", "Hugging Face dataset configs", "HFEagerSource(name='glue', config_name='sst2')",
       ConfigError, _NO_SUBSETS,
       lambda: _hf("HFEagerSource", name="glue", split="train", config_name="sst2"), needs=HF)
simple("source-batch-method", "Sources: batch and field names", "source.batch(32), as tf.data batches",
       AttributeError, "'MemorySource' object has no attribute 'batch': sources do not batch; "
       "batching is the Pipeline's job: Pipeline(source=source, stages=[], batch_size=N, "
       "rngs=nnx.Rngs(0))",
       lambda: MemorySource(MemorySourceConfig(), data()).batch(32))
simple("memory-field-name-not-str", "Sources: batch and field names", "MemorySource data {1: [...]}",
       DataraxError, "MemorySource field names must be str; got int 1. Name the field with a "
       "str (e.g. '1'): batches are dicts keyed by str.",
       lambda: MemorySource(MemorySourceConfig(), [{1: 0, "1": 5}, {1: 1, "1": 6}]))


def _bound_too_low() -> None:
    from datarax.sources import FlatMapSource

    class NarrowFlatMap(FlatMapSource):
        def stable_index_bound(self) -> int:
            return 10  # wrong: parent 2's first output is 2 * 2**31 = 2**32

    source = NarrowFlatMap(MemorySource(MemorySourceConfig(), data(4)), lambda r: [r],
                           max_outputs=2**31)
    stage = ElementOperator(ElementOperatorConfig(stochastic=True), fn=_same)
    first_batch(Pipeline(source, [stage], batch_size=4, rngs=nnx.Rngs(0)))


simple("stable-index-past-its-bound", COMBINING,
       "a source whose stable_index_bound() says its stable indices stay below 2**32 "
       "giving one past it", DataraxError,
       "NarrowFlatMap gave a record stable index 4294967296, past 2**32, though its "
       "stable_index_bound() (or its length) says its indices stay below that: its "
       "per-record key would repeat that of the record 2**32 below it. Make "
       "NarrowFlatMap.stable_index_bound() return a bound of its indices (None: unbounded).",
       _bound_too_low)


# ----------------------------------------------- sharding (added later)
def _sharded_pipeline(spec: Any) -> Any:
    from jax.sharding import Mesh, PartitionSpec

    mesh = Mesh(np.asarray(jax.devices()[:1]), ("data",))
    return Pipeline(source=MemorySource(MemorySourceConfig(), data()), batch_size=2,
                    sharding=(mesh, PartitionSpec(*spec)))


simple("sharding-axis-twice", "Sharding",
       "sharding=(mesh, PartitionSpec('data', 'data'))", ConfigError,
       "Pipeline sharding spec ('data', 'data') names mesh axis 'data' twice; a mesh axis "
       "splits one dimension at most (the batch axis is the first entry's): name it once, "
       "or None where a dimension is not split.",
       lambda: _sharded_pipeline(("data", "data")))

# ----------------------------------------------------------- docs/errors.md
def run_case(c: BadInput, tmp: Path) -> BaseException:
    """Run a case; return the error it raised (AssertionError if none)."""
    try:
        c.action(tmp)
    except BaseException as err:  # noqa: BLE001
        return err
    raise AssertionError(f"{c.id}: no error raised")


def expected_match(c: BadInput, tmp: Path) -> str:
    return c.match.replace("{tmp}", str(tmp))


# ------------------------------------ writing a source (DataSourceModule, datasets objects)
CUSTOM = "Custom sources; Hugging Face habits (datasets objects, load_dataset arguments)"

simple("stream-element-spec-not-a-dict", CUSTOM,
       "element_spec() returning one jax.ShapeDtypeStruct", SourceContractError,
       "SpecNotADict.element_spec() returned ShapeDtypeStruct, not a dict of fields, e.g. "
       "{'image': jax.ShapeDtypeStruct((28, 28), np.float32), 'text': TextSpec()} (TextSpec "
       "from datarax.core.spec, for strings).",
       lambda: pipe(source=SpecNotADict()).__iter__().__next__())
simple("stream-ragged-records", CUSTOM,
       "a list of records of lengths 1 and 2 in one field", SpecMismatchError,
       "Drifting batch at record 4 of epoch 0 does not match element_spec(): field 'x' holds "
       "records of different shapes (a ragged list), so they do not make one array: pad or "
       "truncate them to one shape.",
       lambda: drift(lambda n: {"x": [np.zeros(i + 1, np.float32) for i in range(n)]}))
simple("source-read-method-signature", CUSTOM,
       "get_batch_at(self, start, size) without the key parameter", SourceContractError,
       "KeylessReads.get_batch_at(self, start, size) cannot be called as datarax calls it, "
       "get_batch_at(0, 1, None): define it as get_batch_at(self, start, size, key=None).",
       lambda: pipe(source=KeylessReads()).__iter__().__next__())
simple("source-direct-without-base-init", CUSTOM,
       "for record in source, whose __init__ skips super().__init__(config)",
       SourceContractError,
       "NoBaseInit was built without DataSourceModule.__init__, which gives a source its "
       "position: call super().__init__(config, rngs=rngs, name=name) first in its __init__.",
       lambda: list(NoBaseInit()))

simple("hf-dataset-object-as-config", CUSTOM, "HFEagerSource(datasets.Dataset)",
       ConfigError,
       "HFEagerSource needs an HFEagerConfig, got Dataset. A datasets object is not read from "
       "memory here: pass its columns to MemorySource(MemorySourceConfig(), "
       "ds.with_format('numpy')[:]), or save it with ds.save_to_disk(folder) and pass "
       "name=folder.",
       lambda: _hf("HFEagerSource", __import__("datasets").Dataset.from_dict({"x": [1, 2]})),
       needs=HF)
simple("hf-config-data-files-dict", CUSTOM, "data_files={'train': 'a.parquet'}", ConfigError,
       "HFEagerConfig.data_files holds the files of one split, not a dict of splits (got "
       "['train']): pass that split's files with its name, e.g. data_files=files['train'], "
       "split='train'.",
       lambda: _hf("HFEagerConfig", data_files={"train": "a.parquet"}), needs=HF)

# ------------------------------------ operators picked per record (probes22)
simple("composite-condition-not-one-value", OPERATORS,
       "a conditional_sequential condition giving a vector per record", ConfigError,
       "CompositeOperatorModule 'both': condition 0 must give one value per record (a "
       "scalar), got shape (2,).",
       lambda: first_batch(pipe(stages=[_composite(
           strategy="conditional_sequential", conditions=[_two_values, _two_values])])))
simple("composite-weights-not-weighted", OPERATORS,
       "weights= on a 'sequential' CompositeOperatorModule (they would be ignored)", ConfigError,
       "CompositeOperatorModule: weights apply only to 'weighted_parallel'; got strategy "
       "'sequential'. For one operator drawn per record by weight, use "
       "SelectorOperator(operators, weights=...).",
       lambda: _composite(strategy="sequential", weights=[1.0, 2.0]))
simple("selector-batch-level-operator", OPERATORS,
       "SelectorOperator([mixup, cutmix]): batch-level operators picked per record", ConfigError,
       "SelectorOperator: operator 0 (BatchMixOperator) works on the whole batch (its "
       "per_record is False",
       lambda: __import__("datarax.operators", fromlist=["x"]).SelectorOperator([
           __import__("datarax.operators", fromlist=["x"]).BatchMixOperator(mode=m)
           for m in ("mixup", "cutmix")]))
simple("probabilistic-apply-batch-without-keys", OPERATORS,
       "ProbabilisticOperator(op, 0.5).apply_batch(batch, None)", DataraxError,
       "ProbabilisticOperator 'Probabilistic[_add_one]' is stochastic but got no keys; run it "
       "in a Pipeline or pass one key per record.",
       lambda: __import__("datarax.operators", fromlist=["x"]).ProbabilisticOperator(
           __import__("datarax.operators", fromlist=["x"]).MapOperator(fn=_add_one), 0.5
       ).apply_batch({"x": np.zeros(2, np.float32)}, None))

simple("stages-none", OPERATORS, "Pipeline(stages=None)", SourceContractError,
       "Pipeline stages must be a list of operators, got NoneType; give stages=[] for none.",
       lambda: pipe(stages=None))
simple("stage-callable-returns-array", OPERATORS,
       "a plain callable stage returning one array, not the batch dict", TypeError,
       "Pipeline stage 0 (_x_only) returned DynamicJaxprTracer; stages must return a dict of "
       "fields: a plain callable gets the whole batch and returns it",
       lambda: first_batch(pipe(stages=[_x_only])))


# ------------------------------------ small user-facing fixes (loose24)
simple("composite-router-float", OPERATORS, "a branching router giving a float (x / 2)",
       ConfigError, "CompositeOperatorModule 'both': the router must give an integer (the index "
       "of the operator to apply), got float32; it is not truncated for you: make it an "
       "integer, e.g. jnp.floor(x).astype(jnp.int32) or jnp.argmax(...).",
       lambda: first_batch(pipe(stages=[_composite(strategy="branching",
                                                   router=_route_by_half)])))
simple("global-batch-list-of-numbers", "Sharding and checkpoints", "a field given as a plain "
       "list of numbers", ConfigError, "global_batch: field 'x' is a list of numbers (1, 2, 3, "
       "...); a list stays on the host as it is (text, records of uneven shapes), so it would "
       "not be placed. Give an array of the dtype you mean, e.g. np.asarray(batch['x'], "
       "np.int32).", lambda: _global_batch(None, {"x": [1, 2, 3, 4]}))
simple("hf-from-hf-bad-setting-mode-unset", "Hugging Face", "from_hf(name, seed=-1) with "
       "streaming= left unset", ConfigError, "from_hf seed must be >= 0, got -1.",
       lambda: _hf("from_hf", "x", seed=-1), needs=HF)
simple("hf-from-hf-streaming-option-mode-unset", "Hugging Face", "from_hf(name, chunk_size=0) "
       "with streaming= left unset", ConfigError, "from_hf chunk_size must be >= 1, got 0.",
       lambda: _hf("from_hf", "x", chunk_size=0), needs=HF)
simple("tfds-from-tfds-bad-setting-mode-unset", "TensorFlow Datasets",
       "from_tfds(name, on_error='ignore') with streaming= left unset", ConfigError,
       "from_tfds: on_error must be one of ['raise', 'skip'], got 'ignore'.",
       lambda: _tfds("from_tfds", name="mnist", on_error="ignore"), needs=TFDS)
simple("concat-given-a-config", COMBINING, "ConcatSource(ConcatSourceConfig(), parts), config "
       "first as the data sources take it", ConfigError, "ConcatSource takes its parts (a list "
       "of sources), not its config (ConcatSourceConfig): it builds the config from its "
       "arguments. Call ConcatSource([a, b, ...], num_epochs=1).", _concat_given_its_config)
simple("flat-map-max-outputs-positional", COMBINING, "FlatMapSource(source, fn, 3): a setting "
       "passed positionally", ConfigError, "FlatMapSource takes the source and fn as positional "
       "arguments, got 3; its settings are keywords. Call FlatMapSource(source, fn, "
       "max_outputs=...).", _flat_map_positional_setting)
simple("shuffle-buffer-given-a-config", REORDERING, "ShuffleBufferSource(config, source), "
       "config first as the data sources take it", ConfigError, "ShuffleBufferSource takes the "
       "source it shuffles, not its config (ShuffleBufferSourceConfig): it builds the config "
       "from its arguments. Call ShuffleBufferSource(source, buffer_size=..., seed=0).",
       _shuffle_buffer_given_its_config)
simple("interleave-no-cycle-length", REORDERING, "InterleaveSource([a, b]) without "
       "cycle_length", ConfigError, "InterleaveSource needs cycle_length=... (a keyword). Call "
       "InterleaveSource([a, b, ...], cycle_length=k).",
       lambda: _interleave(cycle_length=MISSING))

simple("flat-map-empty-parent", COMBINING, "FlatMapSource over a stream with no records",
       DataraxError, "FlatMapSource: the parent (CountingStream) holds no record in its first "
       "pass, so there is nothing to serve (and no element spec).",
       lambda: __import__("datarax.sources", fromlist=["x"]).FlatMapSource(
           CountingStream(CountingStreamConfig(num_records=0)), lambda r: [r],
           max_outputs=1).get_batch_with_indices(2))
simple("interleave-seek-negative-index", REORDERING, "InterleaveSource(...).seek(0, -1)",
       ConfigError, "InterleaveSource.seek index must be an int >= 0, got -1.",
       lambda: _interleave(cycle_length=2).seek(0, -1))
simple("interleave-batch-size-zero", REORDERING,
       "InterleaveSource(...).get_batch_with_indices(0)", ConfigError,
       "InterleaveSource batch_size must be an int >= 1, got 0.",
       lambda: _interleave(cycle_length=2).get_batch_with_indices(0))
simple("shuffle-buffer-batch-size-float", REORDERING,
       "ShuffleBufferSource(...).get_batch_with_indices(2.0)", ConfigError,
       "ShuffleBufferSource batch_size must be an int >= 1, got 2.0.",
       lambda: __import__("datarax.sources", fromlist=["x"]).ShuffleBufferSource(
           MemorySource(MemorySourceConfig(), data()), buffer_size=2).get_batch_with_indices(2.0))


def _shard_taken_over() -> Any:
    source = MemorySource(MemorySourceConfig(), data())
    first = pipe(source=source, shard_index=1, shard_count=2)
    pipe(source=first.source)  # rebuilt over the same source object, one share
    return first_batch(first)


simple("pipeline-shard-taken-over", "Pipeline arguments",
       "a Pipeline built for shard 1 of 2 whose source a later Pipeline set to shard 0 of 1",
       ConfigError, "This Pipeline was built to serve shard 1 of 2 of its MemorySource, which "
       "now serves shard 0 of 1: a Pipeline built later over the same source object set its "
       "own shard", _shard_taken_over)


# ------------------------------------ session 12 probes (seed pages, dtypes, checkpoints)
class _ReadByIndex:
    """A PyTorch-style dataset: ``__len__`` and ``__getitem__``, not a Sequence."""

    def __len__(self) -> int:
        return 3

    def __getitem__(self, i: int) -> dict[str, int]:
        return {"x": i}


def _config_without_dataclass() -> Any:
    class CSVConfig(StructuralConfig):
        file_path: str | None = None

    return CSVConfig(file_path="rows.csv")


def _decode_int_key(tmp: Path) -> Any:
    from datarax.sources import ArrayRecordSourceModule

    path = write_records(tmp / "r.array_record", [b"\x01\x02"])
    return list(ArrayRecordSourceModule(
        paths=path, decode=lambda r: {0: np.frombuffer(r, np.uint8)}))


def _path_with_whitespace(tmp: Path) -> Any:
    from datarax.sources import ArrayRecordSourceModule

    path = write_records(tmp / "r.array_record", [b"\x01"])
    return ArrayRecordSourceModule(paths=f" {path} ")


def _flat_map_wide_output() -> Any:
    from datarax.sources import FlatMapSource

    def widen(record: Any) -> list[dict[str, Any]]:
        return [{"meta": {"id": np.int64(2**40)}}]

    return list(FlatMapSource(MemorySource(MemorySourceConfig(), data(2)), widen, max_outputs=1))


def _host_stage_wide_output() -> Any:
    def widen(element: Any, key: Any = None) -> dict[str, Any]:
        return {"big": np.int64(2**40)}

    op = ElementOperator(ElementOperatorConfig(), fn=widen)
    return op.apply_batch({"text": ["a", "b"], "x": np.arange(2, dtype=np.int32)}, None)


def _npy_float64_overflow(tmp: Path) -> Any:
    from datarax.sources import NpySource, NpySourceConfig

    np.save(tmp / "f.npy", np.asarray([0.5, 1e300]))
    source = NpySource(NpySourceConfig(paths=str(tmp / "f.npy"), cast_float64=True))
    try:
        return list(source)
    finally:
        source.close()


def _checkpoint_call(tmp: Path, call: str) -> Any:
    import orbax.checkpoint as ocp

    import datarax.checkpoint

    with ocp.CheckpointManager(tmp / "ckpt") as manager:
        if call == "swapped":
            return datarax.checkpoint.save(manager, pipe(), 3)
        return datarax.checkpoint.restore(manager, "3", pipe())


CUSTOM_12 = "Habits from other libraries (PyTorch datasets, dataclasses, Orbax)"
simple("memory-data-read-by-index", CUSTOM_12,
       "MemorySource given a PyTorch-style dataset (__len__ and __getitem__, not a Sequence)",
       DataraxError, "MemorySource data must be a dict of arrays or a sequence of records, got "
       "_ReadByIndex (read by index, but not a list, tuple or collections.abc.Sequence); pass "
       "[data[i] for i in range(len(data))].",
       lambda: MemorySource(MemorySourceConfig(), _ReadByIndex()))
simple("memory-data-hf-dataset", CUSTOM_12, "MemorySource given a datasets.Dataset",
       DataraxError, "MemorySource data must be a dict of arrays or a sequence of records, got "
       "Dataset; pass its columns, data.with_format('numpy')[:] (a Hugging Face Dataset), or "
       "read a folder written by data.save_to_disk(folder) with HFEagerSource.",
       lambda: MemorySource(MemorySourceConfig(),
                            __import__("datasets").Dataset.from_dict({"x": [1, 2]})),
       needs="datasets")
simple("config-fields-without-dataclass", CUSTOM_12,
       "a source config class declaring fields without @dataclass(frozen=True)",
       SourceContractError, "CSVConfig declares fields (file_path) but is not itself a "
       "dataclass, so it takes none of them: decorate it with @dataclass(frozen=True), as "
       "StructuralConfig is.", _config_without_dataclass)
simple("source-rngs-positional", CUSTOM_12, "MemorySource(config, data, nnx.Rngs(0))",
       ConfigError, "MemorySource takes at most two positional arguments, the config and then "
       "the data; got 3: MemorySourceConfig MemorySourceConfig(shuffle=F...epochs=1, "
       "cast_float64=False), dict {'x': array([0, 1, 2, 3, 4, 5], dtype=int32)}, Rngs (rngs "
       "goes by keyword: rngs=nnx.Rngs(0)).",
       lambda: MemorySource(MemorySourceConfig(), data(), nnx.Rngs(0)))
case("checkpoint-save-arguments-swapped", CUSTOM_12,
     "datarax.checkpoint.save(manager, pipeline, 3): the step and the data swapped",
     ConfigError, "save: the data argument is int, which has no ",
     needs="orbax.checkpoint")(lambda tmp: _checkpoint_call(tmp, "swapped"))
case("checkpoint-restore-step-str", CUSTOM_12,
     "datarax.checkpoint.restore(manager, '3', pipeline): a str step", ConfigError,
     "restore: step is str '3', not an int step ",
     needs="orbax.checkpoint")(lambda tmp: _checkpoint_call(tmp, "str-step"))
case("array-record-decode-int-key", "ArrayRecord", "a decode returning {0: array}",
     RecordError, "cannot read record 0 of file '{tmp}/r.array_record': decode returned a "
     "field named by int 0; name every field with a str (e.g. '0')", needs=AR)(_decode_int_key)
case("array-record-path-whitespace", "ArrayRecord", "paths=' file.array_record ' (spaces around)",
     RecordError, "'{tmp}/r.array_record', without the whitespace around it, exists: drop the "
     "whitespace.", needs=AR)(_path_with_whitespace)
simple("flat-map-nested-int64-output", COMBINING,
       "a FlatMapSource fn giving a nested int64 outside int32 (x64 off)", DataraxError,
       "field 'meta/id' is int64 and holds 1099511627776, outside the int32 range",
       _flat_map_wide_output)
simple("host-stage-int64-output", VD,
       "an ElementOperator on the host path (text fields) giving int64 2**40 (x64 off)",
       DataraxError, "ElementOperator 'widen': field 'big' is int64 and holds 1099511627776, "
       "outside the int32 range", _host_stage_wide_output)
case("npy-float64-past-float32", VD, "NpySource(cast_float64=True) over a float64 1e300",
     RecordError, "field 'data' is float64 and holds 1e+300, beyond the float32 range")(
    _npy_float64_overflow)


def _read_closed_npy(tmp: Path) -> Any:
    from datarax.sources import NpySource, NpySourceConfig

    np.save(tmp / "x.npy", np.arange(4, dtype=np.int32))
    source = NpySource(NpySourceConfig(paths={"x": str(tmp / "x.npy")}))
    source.close()
    return source[1]


case("npy-read-after-close", "Reading: raw ArrayRecord records, a shared cache folder",
     "source[1] of an NpySource after close()", RuntimeError,
     "NpySource is closed; build a new source.")(_read_closed_npy)


def _scan_over_text() -> Any:
    data = {"x": np.arange(6, dtype=np.int32), "words": np.array([f"w{i}" for i in range(6)])}
    pipeline = Pipeline(source=MemorySource(MemorySourceConfig(), data), batch_size=2)
    return pipeline.scan(lambda batch: batch["x"], 2)


simple("scan-over-text-fields", "Pipeline arguments",
       "Pipeline.scan over a source with a text field (it stays on the host)", ConfigError,
       "MemorySource's text field(s) ['words'] stay on the host", _scan_over_text)


def _parquet_column_twice(tmp: Path) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from datarax.dataset import convert

    table = pa.Table.from_arrays([pa.array([1, 2]), pa.array([3, 4])], names=["a", "a"])
    pq.write_table(table, tmp / "t.parquet")
    return convert(str(tmp / "t.parquet"), tmp / "d")


def _crop_too_large() -> Any:
    import jax.numpy as jnp

    from datarax.operators.image import Crop

    return Crop(8, offset="center").apply_batch({"image": jnp.zeros((1, 4, 4, 1))}, None)


def _negative_token_id() -> Any:
    from datarax.text import TextTokenizer

    return TextTokenizer(lambda t: [5, -1]).encode("x")


case("convert-parquet-column-twice", CONVERTING, "a Parquet file naming the column 'a' twice",
     ConversionError, "t.parquet': it names the column 'a' twice (columns 1 and 2)",
     needs="pyarrow")(_parquet_column_twice)
simple("crop-larger-than-images", OPERATORS, "Crop(8) on 4 x 4 images", ConfigError,
       "Crop 'Crop': crop size (8, 8) is larger than the images (4, 4) of field 'image'; give "
       "a size of at most (4, 4), or put a Resize stage before it.", _crop_too_large)
simple("text-token-id-negative", TEXT, "a tokenizer giving the token id -1", RecordError,
       "(min -1, max 5); token ids must be >= 0 (an embedding row) and fit int32",
       _negative_token_id)


def _pil_image_of_a_cut_file(tmp: Path) -> Any:
    import io

    from PIL import Image

    from datarax.dataset import write_dataset

    out = io.BytesIO()
    pixels = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    cut = tmp / "cut.jpg"
    cut.write_bytes(out.getvalue()[: len(out.getvalue()) // 2])
    return write_dataset([{"image": Image.open(cut), "label": 0}], tmp / "ds")


case("write-pil-image-of-a-cut-file", WRITING,
     "write_dataset: a PIL image opened from a cut JPEG", ConversionError,
     "row 0, field 'image': undecodable image (file {tmp}/cut.jpg)",
     needs="PIL")(_pil_image_of_a_cut_file)


def _bucket_source(path: str, tmp: Path) -> Any:
    import fsspec

    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache

    fsspec.filesystem("memory").pipe("/bad-inputs-bucket-paths/ds/part-0.array_record", b"x")
    return ArrayRecordSourceModule(ArrayRecordSourceConfig(), paths=path,
                                   cache=ShardCache(tmp / "cache", max_bytes="8M"))


case("storage-bucket-folder", STORAGE, "a bucket folder (not a dataset) given as the path",
     RecordError, "ArrayRecordSourceModule: 'memory://bad-inputs-bucket-paths/ds' is a folder, "
     "not a file; name its files, or a glob pattern such as "
     "'memory://bad-inputs-bucket-paths/ds/*'.", needs=AR)(
    lambda tmp: _bucket_source("memory://bad-inputs-bucket-paths/ds", tmp))
case("storage-bucket-file-missing", STORAGE, "a bucket file that does not exist", RecordError,
     "ArrayRecordSourceModule: 'memory://bad-inputs-bucket-paths/ds/nope.array_record' does not "
     "exist; check the bucket and the key", needs=AR)(
    lambda tmp: _bucket_source("memory://bad-inputs-bucket-paths/ds/nope.array_record", tmp))


def _pipeline_read_under_jit() -> Any:
    @jax.jit
    def train_step(pipeline: Pipeline) -> Any:
        return next(iter(pipeline))["x"].sum()

    return train_step(pipe())


simple("pipeline-read-inside-jit", SOURCES_AND_STAGES,
       "a Pipeline passed into jax.jit and iterated there", ConfigError,
       "a source's position (epoch, records handed out) was read while JAX traces a function",
       _pipeline_read_under_jit)


def _one_generator() -> Any:
    from datarax.core.spec import array_to_spec_strip_leading
    from datarax.core.stream import StreamSource

    class OneGenerator(StreamSource):
        """Records 0..11 from one generator, never re-created (no restart)."""

        def __init__(self) -> None:
            super().__init__(StructuralConfig())
            self.records = iter(range(12))

        def get_batch(self, batch_size: int) -> Any:
            values = [v for _, v in zip(range(batch_size), self.records)]
            return {"x": np.asarray(values, np.float32)} if values else None

        def element_spec(self) -> Any:
            return {"x": array_to_spec_strip_leading(np.zeros(1, np.float32))}

    return OneGenerator()


def _stream_without_restart_peeked() -> Any:
    pipeline = Pipeline(source=_one_generator(), batch_size=4, prefetch=0)
    pipeline.peek()
    return next(iter(pipeline))


def _stream_without_restart_looped_again() -> Any:
    pipeline = Pipeline(source=_one_generator(), batch_size=4)
    for _ in pipeline:
        break
    for _ in pipeline:
        pass


simple("stream-no-going-back", SOURCES_AND_STAGES,
       "a stream without restart(), peeked, then iterated from its start", SourceContractError,
       "OneGenerator cannot go back to record 0 of pass 0: it already read 4 records past it",
       _stream_without_restart_peeked)
def _mixture_of_streams_looped_again() -> Any:
    from datarax.mixing import MixSource

    mix = MixSource({"a": _one_generator(), "b": _one_generator()}, [1, 1], seed=0,
                    records_per_epoch=12)
    pipeline = Pipeline(source=mix, batch_size=4)
    for _ in pipeline:
        break
    for _ in pipeline:
        pass


simple("mixture-stream-loop-after-break", SOURCES_AND_STAGES,
       "a mixture of streams without restart(), left by a break, then looped over again",
       SourceContractError,
       "the stream does not stand at that draw, so the mixture reads it again from the start "
       "of its pass 0, but OneGenerator already read into that pass and does not implement "
       "restart", _mixture_of_streams_looped_again)


def _flat_map_over_stream_without_restart() -> Any:
    from datarax.sources import FlatMapSource

    return FlatMapSource(_one_generator(), lambda r: [r], max_outputs=1)


simple("flat-map-over-stream-without-restart", SOURCES_AND_STAGES,
       "a FlatMapSource over a stream without restart()", ConfigError,
       "FlatMapSource parent OneGenerator is a stream without restart(self, epoch), so it "
       "cannot be read twice", _flat_map_over_stream_without_restart)


def _memory_source_built_with_x64() -> Any:
    with jax.enable_x64(True):  # this thread only
        source = MemorySource(MemorySourceConfig(), {"x": np.arange(6, dtype=np.int64)})
    with jax.enable_x64(False):
        return first_batch(pipe(source=source))


simple("memory-built-with-x64", SOURCES_AND_STAGES,
       "a MemorySource built with x64 on, read with it off", SpecMismatchError,
       "MemorySource took its dtypes when it was built, while x64 was on: build it again "
       "with x64 off", _memory_source_built_with_x64)
simple("stream-loop-after-break", SOURCES_AND_STAGES,
       "a stream without restart(), left by a break, then looped over again", SourceContractError,
       "OneGenerator cannot begin pass 1: it stands inside pass 0",
       _stream_without_restart_looped_again)


def render(rows: list[tuple[BadInput, BaseException | None, str]]) -> str:
    lines = [
        "# Errors datarax gives for bad input",
        "",
        "Every row is a test in `tests/reliability/test_bad_inputs.py` (case ids below);",
        "the message column is what the test run produced. Regenerate with",
        "`python tests/reliability/bad_inputs.py > docs/errors.md`.",
        "",
        "All errors derive from `datarax.core.errors.DataraxError` (a `ValueError`):",
        "`ConfigError` (a config field or argument), `SourceContractError` (also a",
        "`TypeError`: an object that is not a source or stage), `SpecMismatchError`",
        "(`.fields`: batch vs `element_spec()`), `StateError` (`.field`: a state from",
        "elsewhere or tampered), `RecordError` (`.path`, `.index`: a file or record;",
        "its `datarax.core.dtypes.NarrowingError`: a value the 32-bit types JAX uses",
        "while `jax_enable_x64` is off cannot hold, the data itself fine).",
        "Paths below show `<tmp>` for the test's temporary directory.",
        "",
    ]
    category = None
    n = 0
    for c, err, tmp in rows:
        if c.category != category:
            category = c.category
            lines += [f"## {category}", "", "| # | case | bad input | error | message |",
                      "|---|---|---|---|---|"]
        n += 1
        if err is None:
            kind, message = "—", f"(not run: needs `{c.needs}`)"
        else:
            kind = type(err).__name__
            if getattr(err, "field", None):
                kind += f" (field `{err.field}`)"
            message = re.sub(r" at 0x[0-9a-f]+>", ">", str(err).replace(tmp, "<tmp>"))
        # (a '[a][b]' in a message would read as a Markdown reference link)
        message = message.replace("|", "\\|").replace("\n", " ").replace("][", "]\\[")
        lines.append(f"| {n} | `{c.id}` | {c.what.replace('|', '/')} | {kind} | {message} |")
        if rows and (len(rows) == n or rows[n][0].category != category):
            lines.append("")
    return "\n".join(lines)


def main() -> None:
    import importlib
    import tempfile

    rows = []
    for c in CASES:
        if c.needs:
            try:
                importlib.import_module(c.needs)
            except ImportError:
                rows.append((c, None, ""))
                continue
        with tempfile.TemporaryDirectory() as tmp:
            err = run_case(c, Path(tmp))
            rows.append((c, err, tmp))
    sys.stdout.write(render(rows) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main()
