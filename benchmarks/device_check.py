"""Device check: host→device throughput, data/train overlap, W1 and fused steps on a device.

``python -m benchmarks.device_check [--tiny] [--out results/device_check.json]``

A short prepared script for a machine with an accelerator (it runs on CPU too; ``--tiny``
is the smoke size a test runs). Every number is a ratio to a floor or a peer measured
in the same run, and every section checks that the work was the same:

* ``h2d`` — ``jax.device_put`` of a float32 array (to the default device, and split over
  every device when there are several) against ``numpy.copyto`` of the same bytes;
  the copy is checked by a checksum read back.
* ``overlap`` — steady time per step (after each epoch's first) of data alone, train
  alone and both in one loop;
  ``hidden`` is the share of the data time the loop does not pay (1.0: fully
  overlapped). ``simulated``: a train step of known cost during which the host waits
  (as when the loop reads each step's loss), for an indexed source (W1: shuffle, /255,
  random flip; batch 256), W7's augmentation chain, and a host one (W2's ArrayRecord
  files, same stages; ``host_decode_batch``: the records decoded a chunk at a time;
  ``host_processes``: decoded record by record in worker processes, ``decode_processes``
  = the cores less one, 1 to 4);
  ``compute``: a jitted train step of chained matmuls (on CPU, the data's own cores).
* ``w1`` — one W1 epoch through datarax on the default device against the numpy floor
  (``benchmarks/contenders/numpy_floor.py``), both verified by ``vision_data.verify``.
* ``fused`` — the demo's digits classifier trained ``steps`` steps with a Python loop
  (``pipeline.step()`` + a jitted train step) against ``Pipeline.scan`` chunks of the
  same steps; both must see the same batches (a per-step digest of the labels) and
  agree on the first losses. ``fused_nnx_conv``: the same classifier calling
  ``nnx.Conv`` (XLA:CPU runs a convolution's kernel gradient inside a loop body about
  3.6x slower than alone, jax-ml/jax#12868; the demo's computes it as a matrix
  product); ``fused_mlp``: a convolution-free model.
"""

from __future__ import annotations

import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from benchmarks.harness import emit, sized_parser

SIZES = {
    "tiny": {"mib": 1, "reps": 1, "records": 1024, "batch": 256, "matmuls": 2, "width": 256,
             "steps": 8, "chunk": 4, "overlap_reps": 1},
    # overlap: the fastest of 5 epochs per side (a step's data part is under 1 ms for
    # W1, and a VM's wake-ups spread single epochs by more than that)
    "full": {"mib": 256, "reps": 3, "records": 50_000, "batch": 256, "matmuls": 4, "width": 256,
             "steps": 400, "chunk": 50, "overlap_reps": 5},
}


def _best(fn: Any, reps: int) -> float:
    """Fastest of ``reps`` timed calls (seconds)."""
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return min(times)


def host_to_device(mib: int, reps: int) -> dict[str, Any]:
    """``device_put`` throughput (GB/s) against ``numpy.copyto`` of the same bytes."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    rows = mib * 1024 * 1024 // 4 // 1024
    host = np.random.default_rng(0).random((rows, 1024), dtype=np.float32)
    target = np.empty_like(host)
    nbytes = host.nbytes
    out: dict[str, Any] = {"bytes": nbytes, "device": str(jax.devices()[0])}
    floor = _best(lambda: np.copyto(target, host), reps)
    single = _best(lambda: jax.device_put(host).block_until_ready(), reps)
    want = float(host.sum(dtype=np.float64))
    out["checks_ok"] = bool(np.isclose(float(jnp.sum(jax.device_put(host), dtype=jnp.float32)), want,
                                       rtol=1e-3))
    out["numpy_copy_gbps"] = nbytes / floor / 1e9
    out["device_put_gbps"] = nbytes / single / 1e9
    out["device_put_vs_copy"] = floor / single
    if jax.device_count() > 1 and rows % jax.device_count() == 0:
        sharding = NamedSharding(Mesh(np.asarray(jax.devices()), ("data",)), PartitionSpec("data"))
        split = _best(lambda: jax.device_put(host, sharding).block_until_ready(), reps)
        out["sharded_gbps"] = nbytes / split / 1e9
        out["sharded_devices"] = jax.device_count()
    return out


def _w1_pipeline(images: np.ndarray, labels: np.ndarray, batch: int, prefetch: int = 2) -> Any:
    from benchmarks.contenders.datarax_pipeline import build
    from benchmarks.vision_data import VisionSpec

    pipeline = build(images, labels, VisionSpec(len(labels), batch, 0))
    pipeline.plan = type(pipeline.plan)(**{**pipeline.plan.__dict__, "prefetch": prefetch})
    return pipeline


def _per_step(make: Any, train: Any, reps: int,
              probe: bool = False) -> tuple[float, list[float], float]:
    """Fastest steady seconds per step of ``for batch in make(): train(batch)`` over
    ``reps`` epochs — timed from the end of the first step (an epoch's first batch has
    no train step before it to hide behind; its latency is W1's first-batch time) —
    the per-step outputs of the last one (to check the same work), and, with
    ``probe``, the median CPU seconds the consumer's thread spent in one ``next()``
    of the last one. Probed epochs are not timed: reading a thread's CPU clock is a
    system call (two cost ~12 µs right after a wait on this VM), which the loop
    without a data side would not pay."""
    best, outs, next_cpu = float("inf"), [], [0.0]
    for _ in range(reps):
        outs, next_cpu = [], []
        began = None
        iterator = iter(make())
        while True:
            if probe:
                cpu = time.thread_time()
            try:
                batch = next(iterator)
            except StopIteration:
                break
            if probe:
                next_cpu.append(time.thread_time() - cpu)
            outs.append(train(batch))
            if began is None:
                jax.block_until_ready(outs)
                began = time.perf_counter()
        jax.block_until_ready(outs)
        if began is not None and len(outs) > 1 and not probe:
            best = min(best, (time.perf_counter() - began) / (len(outs) - 1))
    return best, [float(o) for o in outs], float(np.median(next_cpu[1:] or [0.0]))


def _hidden(make: Any, train: Any, reps: int, data_step: Any) -> dict[str, Any]:
    """Data alone (``data_step``: what ``train`` does with a batch, without training),
    train alone and both in one loop; the share of the data time hidden.

    ``train`` is a step function, or a factory ``train(data_seconds) -> step`` for a
    simulated step whose cost is set from the data time just measured."""
    fixed = next(iter(make()))
    _, _, next_data = _per_step(make, data_step, 1, probe=True)  # also compiles, warms
    t_data, sums, _ = _per_step(make, data_step, reps)
    if getattr(train, "from_data_time", False):
        train = train(t_data)
    _, outs, next_both = _per_step(make, train, 1, probe=True)
    steps = len(sums)

    # Train alone reuses one batch (a new one per step would be cache-cold where the
    # pipeline's is warm) but gives each step labels it has not read yet: NumPy's
    # view of a jax.Array is cached, so a reused batch would skip the step's read of
    # its labels, which every real step pays. Both and train alone take turns, epoch
    # by epoch, so that a change in the machine's speed meets both the same.
    t_both = t_train = float("inf")
    for _ in range(reps):
        both, outs, _ = _per_step(make, train, 1)
        t_both = min(t_both, both)
        batches = [{**fixed, "label": jnp.array(fixed["label"])} for _ in range(steps)]
        jax.block_until_ready(batches)
        began = time.perf_counter()
        jax.block_until_ready([train(b) for b in batches])
        t_train = min(t_train, (time.perf_counter() - began) / steps)
    hidden = (t_data + t_train - t_both) / t_data if t_data > 0 else 0.0
    return {
        "steps": steps, "data_s": t_data, "train_s": t_train, "both_s": t_both,
        "hidden": max(0.0, min(1.0, hidden)), "both_vs_train": t_both / t_train,
        # the consumer's CPU time in one next(): back to back (data alone) and after
        # each train step's wait, when its caches are cold
        "next_cpu_data_us": 1e6 * next_data, "next_cpu_both_us": 1e6 * next_both,
        "checks_ok": len(outs) == steps,
    }


def overlap(records: int, batch: int, matmuls: int, width: int, reps: int,
            train_ms: float = 5.0) -> dict[str, Any]:
    """Per-step seconds of data alone, train alone and both; the data time hidden.

    ``simulated``: the train step is a wait on the host after the batch arrives (the
    loop reading a loss each step while the accelerator trains) of ``train_ms`` or twice
    the data time, the larger: the data of the next batches must be prepared meanwhile.
    ``indexed`` is W1 (MemorySource, /255, random flip); ``augmented`` W7's chain over
    ``max(records // 10, 4 * batch)`` 96x96 images; ``host`` the W2 ArrayRecord files
    through W1's stages. ``compute``: W1 with a jitted train step of ``matmuls`` chained
    matmuls — on a device it runs there; on the CPU backend on the data's own cores.
    """
    from benchmarks.vision_data import make_data

    images, labels = make_data(records)
    out: dict[str, Any] = {"train_ms": train_ms}

    def consume(b: dict[str, jax.Array]) -> Any:
        return np.asarray(b["label"]).sum()  # the step takes the batch from the device

    def simulated(data_seconds: float) -> Any:
        # a step costing the larger of train_ms and twice the data time: the loop is
        # bound by training (data slower than training can only be hidden up to it)
        wait = max(train_ms / 1000, 2 * data_seconds)

        def step(b: dict[str, jax.Array]) -> Any:
            value = consume(b)
            time.sleep(wait)  # ... and waits while the accelerator trains
            return value

        return step

    simulated.from_data_time = True  # type: ignore[attr-defined]

    out["indexed"] = _hidden(lambda: _w1_pipeline(images, labels, batch), simulated, reps, consume)
    out["augmented"] = _hidden(_augmented_pipeline(max(records // 10, 4 * batch), batch),
                               simulated, reps, consume)
    try:
        out["host"] = _hidden(_host_pipeline(records, batch), simulated, reps, consume)
        out["host_decode_batch"] = _hidden(_host_pipeline(records, batch, by_chunk=True),
                                           simulated, reps, consume)
        # decode in worker processes: one on a machine of 2 cores (a core for the loop)
        processes = max(1, min(4, (os.cpu_count() or 2) - 1))
        out["host_processes"] = {"decode_processes": processes, **_hidden(
            _host_pipeline(records, batch, processes=processes), simulated, reps, consume)}
    except ImportError as err:  # array_record missing on this machine
        out["host"] = {"skipped": str(err)}
    weight = jnp.asarray(np.random.default_rng(1).standard_normal((32 * 32 * 3, width)) / 100,
                         jnp.float32)
    square = jnp.eye(width, dtype=jnp.float32) * 0.5

    @jax.jit
    def compute(batch_: dict[str, jax.Array]) -> jax.Array:
        h = batch_["image"].reshape(batch_["image"].shape[0], -1) @ weight
        for _ in range(matmuls):
            h = jnp.tanh(h @ square)
        return h.sum() + batch_["label"].sum()

    out["compute"] = _hidden(lambda: _w1_pipeline(images, labels, batch), compute, reps,
                             lambda b: b["label"].sum())
    out["checks_ok"] = all(v.get("checks_ok", True) for v in out.values() if isinstance(v, dict))
    return out


def _augmented_pipeline(records: int, batch: int) -> Any:
    """A maker of W7's pipelines (96x96 images: random resized crop to 64x64, flip,
    brightness, contrast, normalize) — a data step of tens of milliseconds."""
    from benchmarks.augment_data import make_data as make_images
    from benchmarks.w7_contenders import _datarax_pipeline

    images, labels = make_images(records)
    return lambda: _datarax_pipeline(images, labels, batch, 0, fixed=False)


def _host_pipeline(records: int, batch: int, by_chunk: bool = False, processes: int = 0) -> Any:
    """A maker of W1-staged pipelines over W2's ArrayRecord files (a host source);
    ``by_chunk``: the records are decoded a chunk at a time (``decode_batch``);
    ``processes``: by that many worker processes (``decode_processes``)."""
    from flax import nnx as _nnx

    from benchmarks import bench_array_record as w2
    from benchmarks.contenders.datarax_pipeline import flip, normalize
    from datarax.operators import ElementOperator, ElementOperatorConfig
    from datarax.pipeline import Pipeline
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    paths = w2.make_files(records, 4)
    w2.warm(paths)

    def decode(record: bytes) -> dict[str, np.ndarray]:
        image = np.frombuffer(record, dtype=np.uint8).reshape(w2.RECORD_SHAPE)
        return {"image": image, "label": np.int32(image[0, 0, 0])}

    def decode_batch(raw: list[bytes]) -> dict[str, np.ndarray]:
        images = np.frombuffer(b"".join(raw), np.uint8).reshape(-1, *w2.RECORD_SHAPE)
        return {"image": images, "label": images[:, 0, 0, 0].astype(np.int32)}

    kept: list[Any] = []  # with processes, one source: its workers live across epochs

    def make() -> Any:
        if kept:
            source = kept[0]
        else:
            source = ArrayRecordSourceModule(
                ArrayRecordSourceConfig(seed=0, shuffle_files=True), paths, decode=decode,
                decode_batch=decode_batch if by_chunk else None, decode_processes=processes)
            if processes:
                kept.append(source)
        stages = [ElementOperator(ElementOperatorConfig(stochastic=False), fn=normalize),
                  ElementOperator(ElementOperatorConfig(stochastic=True), fn=flip)]
        return Pipeline(source=source, stages=stages, batch_size=batch, rngs=_nnx.Rngs(0))

    return make


def w1(records: int, batch: int, reps: int) -> dict[str, Any]:
    """One W1 epoch: datarax on the default device against the numpy floor."""
    from benchmarks.contenders import datarax_pipeline, numpy_floor
    from benchmarks.vision_data import VisionSpec, digest, expected_checksum, make_data, verify

    images, labels = make_data(records)
    spec = VisionSpec(records, batch, 0)
    out: dict[str, Any] = {"records": records, "device": str(jax.devices()[0])}
    checks = []
    for name, contender in (("datarax", datarax_pipeline), ("numpy_floor", numpy_floor)):
        digests: list[tuple[np.ndarray, np.ndarray]] = []

        def epoch() -> None:
            digests.clear()
            for image, label in contender.vision_epoch(images, labels, spec):
                digests.append((digest(image), label))

        epoch()  # compile / warm
        seconds = _best(epoch, reps)
        result = verify(images, digests, check_flips=records >= 1000)
        checks.append(result)
        out[f"{name}_problems"] = result["problems"]
        out[f"{name}_records_per_s"] = records / seconds
    want = expected_checksum(images)  # the same work: every record once, as /255 (flipped or not)
    out["checks_ok"] = all(c["ok"] and np.isclose(c["checksum"], want, rtol=1e-6) for c in checks)
    out["datarax_vs_floor"] = out["datarax_records_per_s"] / out["numpy_floor_records_per_s"]
    return out


class DigitsMLP(nnx.Module):
    """A convolution-free digits classifier (64 -> 256 -> 10) beside the demo's."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(64, 256, rngs=rngs)
        self.out = nnx.Linear(256, 10, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(nnx.relu(self.hidden(x.reshape(x.shape[0], -1))))


def fused(steps: int, chunk: int, reps: int, model: str = "conv") -> dict[str, Any]:
    """Digits training: Python loop vs ``Pipeline.scan``, same steps. ``model``:
    ``"conv"`` is the demo's classifier (its convolution as patches times the kernel),
    ``"nnx_conv"`` the same with ``nnx.Conv`` called directly, ``"mlp"``
    :class:`DigitsMLP`."""
    import optax

    from datarax.cli.demo import Classifier, build_pipeline, load_digits_split

    class NnxConvClassifier(Classifier):
        def __call__(self, x: jax.Array) -> jax.Array:
            x = nnx.relu(self.conv(x))
            return self.out(nnx.relu(self.hidden(x.reshape(x.shape[0], -1))))

    make_model = {"conv": Classifier, "nnx_conv": NnxConvClassifier, "mlp": DigitsMLP}[model]

    train_data, _ = load_digits_split(0)

    def loss_step(model: Any, optimizer: Any, batch: dict[str, jax.Array]) -> Any:
        def loss_fn(model: Any) -> jax.Array:
            logits = model(batch["image"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        # the batch's digest: the same labels in the same order on both sides
        digest = jnp.sum(batch["label"] * (jnp.arange(batch["label"].shape[0]) + 1))
        return loss, digest

    jitted = nnx.jit(loss_step)
    tx = optax.adam(3e-3)  # one transformation: a new one per run would be a new program

    def fresh() -> tuple[Any, Any, Any]:
        net = make_model(nnx.Rngs(0))
        return build_pipeline(train_data, 64, 0), net, nnx.Optimizer(net, tx, wrt=nnx.Param)

    results: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def loop() -> None:
        pipeline, model, optimizer = fresh()
        out = jax.block_until_ready([jitted(model, optimizer, pipeline.step()) for _ in range(steps)])
        results["loop"] = (np.asarray([o[0] for o in out]), np.asarray([o[1] for o in out]))

    def scan() -> None:
        pipeline, model, optimizer = fresh()
        out = jax.block_until_ready([
            pipeline.scan(loss_step, length=chunk, modules=(model, optimizer))
            for _ in range(steps // chunk)
        ])
        results["scan"] = (np.concatenate([o[0] for o in out]), np.concatenate([o[1] for o in out]))

    loop(), scan()  # compile
    t_loop = _best(loop, reps)
    t_scan = _best(scan, reps)
    return {
        "model": model,
        "steps": steps,
        "chunk": chunk,
        "loop_steps_per_s": steps / t_loop,
        "scan_steps_per_s": steps / t_scan,
        "scan_vs_loop": t_loop / t_scan,
        # same batches exactly; the losses agree up to float reassociation between the
        # two compiled programs (it grows over many Adam steps)
        "first_loss_diff": float(abs(results["loop"][0][0] - results["scan"][0][0])),
        "max_loss_diff": float(np.max(np.abs(results["loop"][0] - results["scan"][0]))),
        "checks_ok": bool(
            np.array_equal(results["loop"][1], results["scan"][1])
            and np.allclose(results["loop"][0][:8], results["scan"][0][:8], rtol=1e-4, atol=1e-5)
        ),
    }


def run(size: str = "tiny", sections: tuple[str, ...] = ("h2d", "overlap", "w1", "fused")) -> dict[str, Any]:
    """Every section at ``size`` ("tiny" or "full"); a JSON-able report."""
    s = SIZES[size]
    report: dict[str, Any] = {
        "size": size,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
    }
    if "h2d" in sections:
        report["h2d"] = host_to_device(s["mib"], s["reps"])
    if "overlap" in sections:
        report["overlap"] = overlap(s["records"], s["batch"], s["matmuls"], s["width"],
                                    s["overlap_reps"])
    if "w1" in sections:
        report["w1"] = w1(s["records"], s["batch"], s["reps"])
    if "fused" in sections:
        report["fused"] = fused(s["steps"], s["chunk"], s["reps"])
        report["fused_nnx_conv"] = fused(s["steps"], s["chunk"], s["reps"], model="nnx_conv")
        report["fused_mlp"] = fused(s["steps"], s["chunk"], s["reps"], model="mlp")
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = sized_parser(__doc__, "h2d,overlap,w1,fused").parse_args(argv)
    report = run("tiny" if args.tiny else "full", tuple(args.sections.split(",")))
    emit(report, args.out)
    return report


if __name__ == "__main__":
    main()
