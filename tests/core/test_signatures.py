"""``inspect.signature`` — what ``help()``, notebooks and IDEs show — of the public
classes names their parameters, not the ``(*args, **kwargs)`` of their metaclasses
(the config metaclass that names unknown options, nnx's module metaclass)."""

from __future__ import annotations

import inspect

import pytest

from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def parameter_names(cls: type) -> list[str]:
    return list(inspect.signature(cls).parameters)


def test_a_config_shows_its_fields():
    assert parameter_names(MemorySourceConfig) == [
        "shuffle", "seed", "track_metadata", "num_epochs", "cast_float64"]
    assert "fn" not in parameter_names(ElementOperatorConfig)
    assert "stochastic" in parameter_names(ElementOperatorConfig)


def test_sources_operators_and_the_pipeline_show_their_init_parameters():
    assert parameter_names(MemorySource)[:2] == ["config", "data"]
    assert {"fn", "rngs", "name"} <= set(parameter_names(ElementOperator))
    assert parameter_names(Pipeline)[:3] == ["source", "stages", "batch_size"]
    assert inspect.signature(Pipeline).parameters["prefetch"].default == 2


def test_an_instance_keeps_its_own_signature():
    config = MemorySourceConfig()
    with pytest.raises(TypeError, match="not a callable object"):
        inspect.signature(config)
    assert config == MemorySourceConfig(**{name: getattr(config, name)
                                           for name in parameter_names(MemorySourceConfig)})
