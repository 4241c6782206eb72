"""Custom sources written the way users vary the guide's CSV example: what works (values,
orders, resume) and the clear error each common slip gets, naming the class."""

import json
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from datarax.core.config import StructuralConfig
from datarax.core.data_source import DataSourceModule
from datarax.core.errors import ConfigError, SourceContractError, SpecMismatchError, StateError
from datarax.core.spec import TextSpec, array_to_spec_strip_leading
from datarax.pipeline import Pipeline


@dataclass(frozen=True)
class RowsConfig(StructuralConfig):
    pass


class Rows(DataSourceModule):
    """Indexed, over a Python list of dicts (the guide's CSV source fed from memory)."""

    def __init__(self, config, records, *, rngs=None, name=None):
        super().__init__(config, rngs=rngs, name=name)
        self.x = nnx.data(jnp.asarray([r["x"] for r in records], jnp.int32))

    def __len__(self):
        return int(self.x.shape[0])

    def get_batch_at(self, start, size, key=None):
        return {"x": self.x[(jnp.arange(size) + start) % len(self)]}

    def element_spec(self):
        return {"x": array_to_spec_strip_leading(self.x)}


class Position(nnx.Variable):
    pass


class Place(DataSourceModule):
    """A stream of 0 .. n-1 that keeps its place in an nnx.Variable (saved with
    nnx.state) and does not implement restart(epoch)."""

    def __init__(self, config, n=10):
        super().__init__(config)
        self.n, self.place = n, Position(0)

    def get_batch(self, batch_size):
        at = int(self.place.value)
        if at >= self.n:
            return None
        out = np.arange(at, min(self.n, at + batch_size), dtype=np.int32)
        self.place.value = at + len(out)
        return {"x": out}

    def element_spec(self):
        return {"x": jax.ShapeDtypeStruct((), np.int32)}


class Counting(Place):
    """``Place`` that goes back to its first record in restart."""

    def restart(self, epoch):
        self.place.value = 0


def batches(pipeline):
    return [b["x"].tolist() for b in pipeline]


def test_list_of_dicts_source_serves_every_record_once_per_pass_and_again_on_iter():
    pipeline = Pipeline(source=Rows(RowsConfig(), [{"x": i} for i in range(10)]), stages=[],
                        batch_size=4, rngs=nnx.Rngs(0))
    assert batches(pipeline) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches(pipeline) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


@pytest.mark.parametrize("restore", ["set_state", "nnx.update"])
def test_stream_keeping_its_place_in_a_variable_resumes_where_it_stood(restore):
    pipeline = Pipeline(source=Counting(RowsConfig()), stages=[], batch_size=3, rngs=nnx.Rngs(0))
    it = iter(pipeline)
    assert [next(it)["x"].tolist() for _ in range(2)] == [[0, 1, 2], [3, 4, 5]]
    saved = (json.loads(json.dumps(pipeline.get_state())) if restore == "set_state"
             else nnx.clone(nnx.state(pipeline)))
    fresh = Pipeline(source=Counting(RowsConfig()), stages=[], batch_size=3, rngs=nnx.Rngs(0))
    fresh.set_state(saved) if restore == "set_state" else nnx.update(fresh, saved)
    assert batches(fresh) == [[6, 7, 8], [9]]


def test_stream_variable_restored_without_restart_names_restart():
    pipeline = Pipeline(source=Place(RowsConfig()), stages=[], batch_size=3, rngs=nnx.Rngs(0))
    it = iter(pipeline)
    next(it), next(it)
    saved = nnx.clone(nnx.state(pipeline))  # the Variable says 6, and so does the position
    fresh = Pipeline(source=Place(RowsConfig()), stages=[], batch_size=3, rngs=nnx.Rngs(0))
    nnx.update(fresh, saved)
    with pytest.raises(StateError, match=r"Place was not started over: .* must implement "
                                         r"restart\(self, epoch\)"):
        batches(fresh)


class Text(DataSourceModule):
    def __init__(self, spec):
        super().__init__(RowsConfig())
        self.spec, self.at = spec, 0

    def restart(self, epoch):
        self.at = 0

    def get_batch(self, batch_size):
        texts = ["a", "b", "c"][self.at:self.at + batch_size]
        self.at += len(texts)
        return {"t": texts} if texts else None

    def element_spec(self):
        return {"t": self.spec}


def test_stream_of_strings_declared_with_textspec_serves_them():
    assert [b["t"] for b in Pipeline(source=Text(TextSpec()), stages=[], batch_size=2)] == [
        ["a", "b"], ["c"]]


def test_strings_declared_as_an_array_dtype_point_to_textspec():
    pipeline = Pipeline(source=Text(jax.ShapeDtypeStruct((), np.dtype("<U1"))), stages=[],
                        batch_size=2)
    with pytest.raises(SpecMismatchError, match=r"field 't' is declared str32\(\) but holds "
                                                r"strings \(declare a text field as TextSpec\(\)"):
        batches(pipeline)


class Ragged(DataSourceModule):
    def __init__(self):
        super().__init__(RowsConfig())

    def get_batch(self, batch_size):
        return {"v": [np.arange(n + 1, dtype=np.int32) for n in range(batch_size)]}

    def element_spec(self):
        return {"v": jax.ShapeDtypeStruct((1,), np.int32)}


def test_records_of_different_shapes_are_named_not_a_numpy_error():
    with pytest.raises(SpecMismatchError, match="Ragged batch .* field 'v' holds records of "
                                                "different shapes") as info:
        next(iter(Pipeline(source=Ragged(), stages=[], batch_size=2)))
    assert info.value.fields == ["v"]


class DeclaredAs(Rows):
    declared = None

    def element_spec(self):
        return self.declared


@pytest.mark.parametrize("declared, match", [
    (jax.ShapeDtypeStruct((), np.int32), "returned ShapeDtypeStruct, not a dict of fields"),
    (None, "returned NoneType, not a dict of fields"),
    ({"x": ((), np.int32)}, "declares field 'x' as tuple"),
])
def test_element_spec_that_is_not_a_dict_of_specs_is_refused_naming_the_class(declared, match):
    source = DeclaredAs(RowsConfig(), [{"x": 1}, {"x": 2}])
    source.declared = declared
    with pytest.raises(SourceContractError, match=rf"DeclaredAs\.element_spec\(\) {match}"):
        batches(Pipeline(source=source, stages=[], batch_size=2))


class NoKey(Rows):
    def get_batch_at(self, start, size):
        return {"x": self.x[(jnp.arange(size) + start) % len(self)]}


def test_read_method_datarax_cannot_call_is_named_with_the_signature_to_use():
    source = NoKey(RowsConfig(), [{"x": 1}, {"x": 2}])
    expected = r"NoKey\.get_batch_at\(self, start, size\) cannot be called .* get_batch_at\(self, start, size, key=None\)"
    with pytest.raises(SourceContractError, match=expected):
        batches(Pipeline(source=source, stages=[], batch_size=2))
    with pytest.raises(SourceContractError, match=expected):
        list(source)


class NoBaseInit(Rows):
    def __init__(self):  # forgets super().__init__
        self.x = nnx.data(jnp.arange(3))


def test_direct_iteration_without_base_init_names_super_init():
    with pytest.raises(SourceContractError, match=r"NoBaseInit was built without "
                                                  r"DataSourceModule.__init__.*super\(\).__init__"):
        list(NoBaseInit())


class FailsOnce(Counting):
    """``Counting`` whose read at record 4 raises once (a dropped connection)."""

    failed = False

    def get_batch(self, batch_size):
        if int(self.place.value) == 4 and not self.failed:
            self.failed = True
            raise OSError("connection dropped")
        return super().get_batch(batch_size)


def test_error_raised_by_get_batch_reaches_the_caller_and_the_pass_continues_after_it():
    pipeline = Pipeline(source=FailsOnce(RowsConfig(), n=8), stages=[], batch_size=2,
                        rngs=nnx.Rngs(0))
    it, served = iter(pipeline), []
    with pytest.raises(OSError, match="connection dropped"):
        for batch in it:
            served.append(batch["x"].tolist())
    assert served == [[0, 1], [2, 3]]
    saved = json.loads(json.dumps(pipeline.get_state()))
    assert [b["x"].tolist() for b in it] == [[4, 5], [6, 7]]
    again = FailsOnce(RowsConfig(), n=8)
    again.failed = True  # the connection is back
    fresh = Pipeline(source=again, stages=[], batch_size=2, rngs=nnx.Rngs(0))
    fresh.set_state(saved)
    assert batches(fresh) == [[4, 5], [6, 7]]


class Lengthless(DataSourceModule):
    def __init__(self):
        super().__init__(RowsConfig())
        self.x = nnx.data(jnp.arange(4, dtype=jnp.int32))

    def get_batch_at(self, start, size, key=None):
        return {"x": self.x[(jnp.arange(size) + start) % 4]}


def test_indexed_source_without_len_says_to_define_it_when_iterated_directly():
    with pytest.raises(TypeError, match=r"Lengthless implements get_batch_at but not __len__: "
                                        r"define __len__\(self\)"):
        list(Lengthless())


def test_source_of_ones_own_given_no_config_is_told_how_to_define_one():
    class Bare(DataSourceModule):  # no BareConfig beside it
        def __init__(self, config):
            super().__init__(config)

    with pytest.raises(ConfigError, match=r"Bare needs a StructuralConfig instance as its first "
                                        r"argument, got dict\. Define its config as a frozen "
                                        r"dataclass deriving from StructuralConfig .*"
                                        r"super\(\)\.__init__\(config, rngs=rngs, name=name\)"):
        Bare({"path": "rows.csv"})


def test_source_of_ones_own_given_no_config_is_told_its_config_class_beside_it():
    with pytest.raises(ConfigError, match=r"Rows needs a StructuralConfig instance as its first "
                                        r"argument, got dict\. Build one, e\.g\. "
                                        r"Rows\(RowsConfig\(\), \.\.\.\)\.$"):
        Rows({"path": "rows.csv"}, [{"x": 1}])


def test_own_epoch_counter_named_epoch_is_refused_clearly():
    # `epoch` / `index` are the source's position; a stream counting its own passes in
    # self.epoch got Python's bare "property 'epoch' ... has no setter"
    class Passes(DataSourceModule):
        def __init__(self, config):
            super().__init__(config)
            self.epoch = 0

    with pytest.raises(AttributeError, match=r"^Passes\.epoch = 0: 'epoch' is the source's "
                       r"position, read-only .* another name .* seek\(epoch, index\)"):
        Passes(RowsConfig())
    rows = Rows(RowsConfig(), [{"x": 1}, {"x": 2}])
    with pytest.raises(AttributeError, match=r"^Rows\.index = 1: 'index' is the source's"):
        rows.index = 1
    assert (rows.epoch, rows.index) == (0, 0)
