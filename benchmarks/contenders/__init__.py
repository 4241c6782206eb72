"""Contenders: one module per library, each serving the same epochs as numpy arrays.

Every contender module exposes ``versions() -> dict[str, str]`` and an epoch
function ``vision_epoch(images, labels, spec, **options)`` that yields
``(images_float32, labels_int32)`` NumPy batches, materialised (device work
finished, host copy made) before each yield. The registry below names each
configuration and the packages it needs; a missing package makes the contender
"missing" in the report, never silently absent.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Contender:
    """A named configuration of one library's loader."""

    name: str
    module: str  # module under benchmarks.contenders
    requires: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)
    floor: bool = False
    note: str = ""
    env: dict[str, str] = field(default_factory=dict)  # set in the worker's environment
    warm_up: bool = False  # one untimed run per case first (fills a compilation cache)

    def missing(self) -> list[str]:
        """Packages this contender needs that are not importable here."""
        return [p for p in self.requires if importlib.util.find_spec(p) is None]


CONTENDERS: dict[str, Contender] = {
    c.name: c
    for c in (
        Contender("numpy", "numpy_floor", ("numpy",), floor=True,
                  note="plain numpy, single thread: gather, flip uint8 per channel, /255"),
        Contender("numpy-whole-flip", "numpy_floor", ("numpy",),
                  options={"per_channel": False},
                  note="the floor before: whole-record flip (NumPy's inner loop 3 long)"),
        Contender("datarax", "datarax_pipeline", ("jax", "flax", "datarax"), warm_up=True,
                  env={"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"},
                  note="MemorySource + 2 ElementOperators, Pipeline; JAX's persistent "
                  "compilation cache turned on and warm (a user's second run)"),
        Contender("datarax-cold", "datarax_pipeline", ("jax", "flax", "datarax"),
                  env={"DATARAX_COMPILE_CACHE": "0"},
                  note="the same without JAX's persistent cache and with datarax's own "
                  "store of compiled steps off (a user's first run; the store would be "
                  "warm from the other contender's runs)"),
        Contender("jax-floor", "jax_floor", ("jax",), warm_up=True,
                  env={"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"},
                  note="plain jax.jit of the work, host gather + device_put per batch, "
                  "persistent cache warm: the first batch any jitted loader pays"),
        Contender("jax-best", "jax_best", ("jax",), warm_up=True,
                  env={"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"},
                  note="plain JAX with every lever: one device copy, on-device gather, "
                  "both programs compiled ahead, persistent cache warm: the floor under a "
                  "JAX loader's whole epoch"),
        Contender("grain", "grain_loader", ("grain",), options={"workers": 0},
                  note="MapDataset.batch, to_iter_dataset(ReadOptions(num_threads=2))"),
        Contender("grain-mp", "grain_loader", ("grain",), options={"workers": 2},
                  note="same + mp_prefetch(num_workers=2)"),
        Contender("tf.data", "tf_data", ("tensorflow",),
                  note="from_tensor_slices, shuffle, map/batch/prefetch AUTOTUNE"),
        Contender("torch-0", "torch_loader", ("torch",), options={"workers": 0},
                  note="Dataset + DataLoader(num_workers=0)"),
        Contender("torch-2", "torch_loader", ("torch",), options={"workers": 2},
                  note="Dataset + DataLoader(num_workers=2)"),
    )
}
