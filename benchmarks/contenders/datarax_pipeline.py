"""datarax through its public API: MemorySource, two ElementOperators, Pipeline."""

from __future__ import annotations

from collections.abc import Iterator

import flax
import jax
import jax.numpy as jnp
import numpy as np

import datarax
from datarax.operators import ElementOperator, ElementOperatorConfig
from datarax.pipeline import Pipeline
from datarax.sources import MemorySource, MemorySourceConfig


def versions() -> dict[str, str]:
    return {"datarax": datarax.__version__, "jax": jax.__version__, "flax": flax.__version__}


def normalize(element, key=None):
    return element.update_data({"image": element.data["image"] / 255.0})


def flip(element, key):
    image = element.data["image"]
    return element.update_data(
        {"image": jnp.where(jax.random.bernoulli(key), image[:, ::-1, :], image)}
    )


def w1_stages() -> list[ElementOperator]:
    """W1's stages: ``/255``, then a random left-right flip per record."""
    return [
        ElementOperator(ElementOperatorConfig(stochastic=False), fn=normalize),
        ElementOperator(ElementOperatorConfig(stochastic=True), fn=flip),
    ]


def build(images: np.ndarray, labels: np.ndarray, spec, *, shuffle: bool = True,
          stages: bool = True, **options) -> Pipeline:
    """W1's pipeline (``stages=False``: the source alone); ``options`` go to ``Pipeline``."""
    source = MemorySource(
        MemorySourceConfig(shuffle=shuffle, seed=spec.seed), {"image": images, "label": labels}
    )
    # seed= gives the batches rngs=nnx.Rngs(seed) gives, without its eager device work
    return Pipeline(source=source, stages=w1_stages() if stages else [],
                    batch_size=spec.batch_size, seed=spec.seed, **options)


_LAST: dict[str, object] = {}


def vision_epoch(images: np.ndarray, labels: np.ndarray, spec) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    pipeline = build(images, labels, spec)
    for batch in pipeline:
        batch = jax.block_until_ready(batch)
        yield np.asarray(batch["image"]), np.asarray(batch["label"])
    _LAST["pipeline"] = pipeline


def extra_result() -> dict[str, object]:
    """``pipeline.stats()`` of the last epoch, when this datarax version has it."""
    stats = getattr(_LAST.get("pipeline"), "stats", None)
    if not callable(stats):
        return {}
    try:
        return {"pipeline_stats": stats()}
    except Exception as err:  # the report notes it; timing is unaffected
        return {"pipeline_stats": {"error": f"{type(err).__name__}: {err}"}}
