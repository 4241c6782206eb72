"""datarax's data steps compile on CPU at XLA's backend optimization level 1 with XLA's
elemental fusion emitters (``datarax.core.compiled_store.COMPILER_OPTIONS``): cheaper to
compile, and — what this pins, since XLA does not promise it — the same batches bit for
bit as XLA's default options, over epochs of a flip + scale chain, the same after a
filter, and a random resized crop + flip + brightness + contrast chain. Each set of
options runs in its own process, nothing stored.
"""

from __future__ import annotations

import pytest

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

EPOCHS = """
    import hashlib, json, sys
    import jax, numpy as np
    from flax import nnx
    from datarax.core import compiled_store
    from datarax.operators import ElementOperator, ElementOperatorConfig, FilterOperator
    from datarax.operators import image as I
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    if sys.argv[1] == "default":
        compiled_store.COMPILER_OPTIONS = {}
    options = compiled_store.compiler_options()
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (72, 40, 40, 3), dtype=np.uint8)

    def flip_scale(el, key):
        x = el.data["image"]
        x = jax.numpy.where(jax.random.bernoulli(key), x[:, ::-1], x)
        return el.update_data({"image": x.astype(np.float32) / 255})

    chains = {
        "flip-scale": [ElementOperator(ElementOperatorConfig(stochastic=True), fn=flip_scale)],
        "filter-flip-scale": [
            FilterOperator(predicate=lambda el: el.data["image"][0, 0, 0] % 2 == 0),
            ElementOperator(ElementOperatorConfig(stochastic=True), fn=flip_scale),
        ],
        "crop-flip-color": [
            I.Normalize([0.0] * 3, [1.0] * 3),
            I.RandomResizedCrop(24, scale=(0.25, 1.0), ratio=(0.75, 1.33)),
            I.HorizontalFlip(0.5), I.Brightness((0.6, 1.4)), I.Contrast((0.6, 1.4)),
        ],
    }
    digests = {}
    for name, stages in chains.items():
        source = MemorySource(MemorySourceConfig(shuffle=True, seed=2), {"image": images})
        pipeline = Pipeline(source=source, stages=stages, batch_size=16, rngs=nnx.Rngs(1))
        digest = hashlib.sha256()
        for _ in range(2):  # two epochs: two shuffles, other keys
            for batch in pipeline:
                digest.update(np.asarray(batch["image"]).tobytes())
        digests[name] = digest.hexdigest()
    print(json.dumps({"options": options, "digests": digests}))
"""


def _epochs(level: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(SRC), "JAX_PLATFORMS": "cpu",
           "DATARAX_COMPILE_CACHE": "0"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    # XLA's own default level: the suite's XLA_FLAGS (tests/conftest.py) set level 0 for
    # compile speed, which the "default" run would otherwise compile at
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(EPOCHS), level], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# two epochs of three chains compiled with two sets of options (~10 s): in the slow run
@pytest.mark.slow
def test_level_one_serves_the_batches_of_the_default_level():
    shipped, default = _epochs("shipped"), _epochs("default")
    assert shipped["options"] == {"xla_backend_optimization_level": 1,
                                  "xla_cpu_use_fusion_emitters": False}
    assert default["options"] == {}
    assert shipped["digests"] == default["digests"]
    assert len(set(shipped["digests"].values())) == 3  # three chains, two epochs each
