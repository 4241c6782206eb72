"""W10: W1 (shuffle, /255, random flip, batch 256) with a filter keeping half the records.

The predicate is on the label (W1's labels are the record ids: even ones are kept).
Contenders: datarax (``FilterOperator`` as the first stage), Grain (``filter``),
tf.data (``filter``), a torch ``IterableDataset`` with a ``DataLoader`` and the numpy
floor (:mod:`benchmarks.contenders.filter_floor`); ``jax_floor`` is a plain ``jax.jit`` of
the same work (:mod:`benchmarks.contenders.filter_jit`), warmed up as datarax is, and
``jax_floor_owned`` the same with its own copy of the images made before it returns (the
guarantee datarax gives: the caller's buffer stays theirs). ``jax_two_phase`` is plain JAX
doing what a library must (:mod:`benchmarks.contenders.filter_two_phase`): a traced
predicate over the epoch's whole order in one program (the host packs the kept rows from
its mask), then a batch step per batch, its copies owned. Each runs in a fresh process and is
measured as the suite measures W1 (:mod:`benchmarks.worker`): its libraries are
imported and the data made before the clock starts; ``whole`` is the first epoch from
building the loader to its last batch, ``steady`` the second epoch; both as kept records
per second. datarax, as in the suite, first runs once untimed with JAX's persistent
compilation cache on, every program stored (as ``datarax.enable_compilation_cache``
sets it: a user's second run). Every contender's first epoch is checked to
hold exactly the even records, once each.

With ``--repeats N`` the contenders run N rounds, one contender after the other in each,
every other round in reverse order (datarax's warm-up only before the first): each row
is the contender's median, and the ratios are of medians; on a shared machine whose
load drifts within a minute, one round put the same code at 0.52–1.58x the best peer's
whole epoch.

With ``--before SRC`` a sixth contender, ``datarax_before``, runs datarax from another
source tree (e.g. the main checkout's ``src``) in every round beside the others (its own
warm-up and store), so that a change is measured against the same load; ``--contenders``
runs only those named (e.g. ``datarax datarax_before torch``: the best peer at 50,000
records, without the slow imports of Grain and tf.data).

Run: ``python -m benchmarks.w10_filter [--records 10000] [--repeats 3] [--before SRC]
[--contenders ...] [--out results/w10.json]``
"""

from __future__ import annotations

import importlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from benchmarks.harness import emit, parser, run_worker, worker_env
CONTENDERS = ("datarax", "grain", "tf_data", "torch", "numpy_floor", "jax_floor",
              "jax_floor_owned", "jax_two_phase")
#: the plain-JAX loaders datarax is compared with
FLOORS = ("jax_floor", "jax_floor_owned", "jax_two_phase")
#: datarax from the ``--before`` tree, measured as ``datarax`` is
BEFORE = "datarax_before"
Epoch = Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]


def datarax_epochs(images: np.ndarray, labels: np.ndarray, batch: int, seed: int) -> Epoch:
    import jax
    import jax.numpy as jnp

    from datarax.operators import ElementOperator, FilterOperator
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    def flip(el, key):
        image = el.data["image"]
        return {"image": jnp.where(jax.random.bernoulli(key), image[:, ::-1, :], image)}

    source = MemorySource(MemorySourceConfig(shuffle=True, seed=seed),
                          {"image": images, "label": labels})
    stages = [FilterOperator(predicate=lambda el: el.data["label"] % 2 == 0),
              ElementOperator(fn=lambda el, key=None: {"image": el.data["image"] / 255.0}),
              ElementOperator(fn=flip, stochastic=True)]
    pipeline = Pipeline(source, stages=stages, batch_size=batch, seed=seed)

    def epoch() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for b in pipeline:
            yield np.asarray(b["image"]), np.asarray(b["label"])

    return epoch


def grain_epochs(images: np.ndarray, labels: np.ndarray, batch: int, seed: int) -> Epoch:
    import grain

    class Records:
        def __len__(self) -> int:
            return images.shape[0]

        def __getitem__(self, i: int) -> dict:
            return {"image": images[i], "label": labels[i]}

    def normalize(r: dict) -> dict:
        return {"image": r["image"].astype(np.float32) / np.float32(255), "label": r["label"]}

    def flip(r: dict, rng: np.random.Generator) -> dict:
        return {"image": r["image"][:, ::-1], "label": r["label"]} if rng.random() < 0.5 else r

    dataset = (grain.MapDataset.source(Records()).shuffle(seed=seed)
               .filter(lambda r: r["label"] % 2 == 0)
               .to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=4))
               .map(normalize).random_map(flip, seed=seed).batch(batch))

    def epoch() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for b in dataset:
            yield b["image"], b["label"]

    return epoch


def tf_epochs(images: np.ndarray, labels: np.ndarray, batch: int, seed: int) -> Epoch:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.random.set_seed(seed)

    def transform(image, label):
        image = tf.cast(image, tf.float32) / 255.0
        image = tf.cond(tf.random.uniform([]) < 0.5, lambda: tf.reverse(image, [1]),
                        lambda: image)
        return image, label

    auto = tf.data.AUTOTUNE
    dataset = (tf.data.Dataset.from_tensor_slices((images, labels))
               .shuffle(images.shape[0], seed=seed, reshuffle_each_iteration=True)
               .filter(lambda image, label: label % 2 == 0)
               .map(transform, num_parallel_calls=auto)
               .batch(batch, num_parallel_calls=auto).prefetch(auto))

    def epoch() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for image, label in dataset:
            yield image.numpy(), label.numpy()

    return epoch


def torch_epochs(images: np.ndarray, labels: np.ndarray, batch: int, seed: int) -> Epoch:
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    class Kept(IterableDataset):
        def __init__(self) -> None:
            self.epoch = 0

        def __iter__(self):
            rng = np.random.default_rng(seed + self.epoch)
            self.epoch += 1
            for i in rng.permutation(images.shape[0]):
                if labels[i] % 2 != 0:
                    continue
                image = torch.from_numpy(images[i]).float() / 255
                if rng.random() < 0.5:
                    image = image.flip(1)
                yield image, int(labels[i])

    loader = DataLoader(Kept(), batch_size=batch, num_workers=0)

    def epoch() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for image, label in loader:
            yield image.numpy(), label.numpy()

    return epoch


def floor_epochs(images: np.ndarray, labels: np.ndarray, batch: int, seed: int) -> Epoch:
    from benchmarks.contenders.filter_floor import filter_epoch

    count = iter(range(1 << 30))
    return lambda: filter_epoch(images, labels, batch, seed + next(count))


def jit_floor_epochs(images: np.ndarray, labels: np.ndarray, batch: int, seed: int) -> Epoch:
    from benchmarks.contenders.filter_jit import jit_epochs

    return jit_epochs(images, labels, batch, seed)


def owned_floor_epochs(images: np.ndarray, labels: np.ndarray, batch: int, seed: int) -> Epoch:
    from benchmarks.contenders.filter_jit import jit_epochs

    return jit_epochs(images, labels, batch, seed, owned=True)


def two_phase_epochs(images: np.ndarray, labels: np.ndarray, batch: int, seed: int) -> Epoch:
    from benchmarks.contenders.filter_two_phase import two_phase_epochs as epochs

    return epochs(images, labels, batch, seed)


#: imported before the clock starts, as the suite's contender modules are
IMPORTS = {"datarax": ("jax", "jax.numpy", "flax.nnx", "datarax.operators", "datarax.pipeline",
                       "datarax.sources"),
           "grain": ("grain",), "tf_data": ("tensorflow",),
           "torch": ("torch", "torch.utils.data"),
           "numpy_floor": ("benchmarks.contenders.filter_floor",),
           "jax_floor": ("jax", "jax.numpy", "benchmarks.contenders.filter_jit"),
           "jax_floor_owned": ("jax", "jax.numpy", "benchmarks.contenders.filter_jit",
                               "datarax.core.owned"),
           "jax_two_phase": ("jax", "jax.numpy", "benchmarks.contenders.filter_two_phase",
                             "datarax.core.owned")}
#: contenders that run once untimed first, with JAX's persistent compilation cache
WARM_UP = ("datarax", BEFORE, *FLOORS)

BUILDERS = {"datarax": datarax_epochs, "grain": grain_epochs, "tf_data": tf_epochs,
            "torch": torch_epochs, "numpy_floor": floor_epochs, "jax_floor": jit_floor_epochs,
            "jax_floor_owned": owned_floor_epochs, "jax_two_phase": two_phase_epochs}
IMPORTS[BEFORE], BUILDERS[BEFORE] = IMPORTS["datarax"], datarax_epochs


def run_one(name: str, records: int, batch: int, seed: int) -> dict:
    """One contender in this process: first epoch (with the build) and second epoch."""
    from benchmarks.vision_data import make_data

    for module in IMPORTS[name]:
        importlib.import_module(module)
    images, labels = make_data(records, seed)
    began = time.perf_counter()
    epoch = BUILDERS[name](images, labels, batch, seed)
    seen, sizes, first = [], [], None
    for image, label in epoch():
        image.sum()  # touch the rows, as a consumer would
        seen.append(label)
        sizes.append(len(label))
        first = first or time.perf_counter() - began
    whole = time.perf_counter() - began
    got = np.sort(np.concatenate(seen))
    ok = got.tolist() == list(range(0, records, 2)) and all(s == batch for s in sizes[:-1])
    began = time.perf_counter()
    kept = sum(len(label) for image, label in epoch() if image.sum() is not None)
    steady = time.perf_counter() - began
    return {"contender": name, "ok": bool(ok), "kept": int(got.size),
            "whole_rps": got.size / whole, "steady_rps": kept / steady,
            "first_batch_s": first}


def main() -> None:
    options = parser(__doc__, records=10_000, batch=256, seed=0)
    options.add_argument("--repeats", type=int, default=1,
                         help="rounds of every contender, one after the other (medians)")
    options.add_argument("--one", choices=(*CONTENDERS, BEFORE))
    options.add_argument("--before", help="another datarax source tree, run beside")
    options.add_argument("--contenders", nargs="+", choices=CONTENDERS,
                         help="run only these (default: all)")
    options.add_argument("--out", type=Path)
    args = options.parse_args()
    if args.one:
        emit(run_one(args.one, args.records, args.batch, args.seed), args.out, indent=None)
        return
    scratch = tempfile.TemporaryDirectory(prefix="datarax-w10-")  # removed at exit
    names = [n for n in CONTENDERS if not args.contenders or n in args.contenders]
    if args.before:
        names.insert(names.index("datarax") + 1 if "datarax" in names else 0, BEFORE)
    rounds: list[list[dict]] = []
    for round_ in range(args.repeats):
        rows = []
        # every other round in reverse order: no contender always runs first after the last
        for name in names if round_ % 2 == 0 else names[::-1]:
            # as datarax.enable_compilation_cache sets it (JAX's default, 1 s, stores no step);
            # each datarax tree its own caches
            cache = os.path.join(scratch.name, name)
            env = worker_env({"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"},
                             warm_up=True, cache_home=cache,
                             src=args.before if name == BEFORE else None,
                             ) if name in WARM_UP else worker_env()
            one = ["--one", name, "--records", str(args.records), "--batch", str(args.batch),
                   "--seed", str(args.seed)]
            if name in WARM_UP and round_ == 0:  # untimed: fills the compilation caches
                run_worker("benchmarks.w10_filter", one, env, timeout=900)
            row = run_worker("benchmarks.w10_filter", one, env, timeout=900)
            rows.append({"contender": name, **row} if "error" in row else
                        dict(row, load_avg_1m=round(os.getloadavg()[0], 2),
                             warm_up=name in WARM_UP))
        rounds.append(rows)
    rows = [_median_row([r for rs in rounds for r in rs if r["contender"] == name])
            for name in names]
    by = {r["contender"]: r for r in rows if "whole_rps" in r}
    report = {"workload": "W10 filter keep-half b%d" % args.batch, "records": args.records,
              "repeats": args.repeats, "before": args.before, "rows": rows}
    if args.repeats > 1:
        report["rounds"] = rounds
    for mine, label in (("datarax", ""), (BEFORE, "_before")):
        if mine not in by:
            continue
        for mode in ("whole_rps", "steady_rps"):
            peers = [by[p][mode] for p in ("grain", "tf_data", "torch") if p in by]
            report[mode.replace("_rps", "") + label] = {
                "vs_best_peer": round(by[mine][mode] / max(peers), 2) if peers else None,
                "vs_floor": round(by[mine][mode] / by["numpy_floor"][mode], 2)
                if "numpy_floor" in by else None,
                **{f"vs_{floor}": round(by[mine][mode] / by[floor][mode], 2)
                   if floor in by else None for floor in FLOORS},
            }
    peers = [p for p in ("grain", "tf_data", "torch") if p in by]
    for floor in FLOORS:  # what a plain jit loader reaches
        if floor in by and peers:
            report[f"{floor}_vs_best_peer"] = {
                mode.replace("_rps", ""): round(by[floor][mode] / max(by[p][mode] for p in peers), 2)
                for mode in ("whole_rps", "steady_rps")}
    emit(report, args.out, indent=1)


def _median_row(rows: list[dict]) -> dict:
    """One contender's rounds as one row: the median of each rate and first batch (the
    first row, with its error, when none measured)."""
    measured = [r for r in rows if "whole_rps" in r]
    if not measured:
        return rows[0]
    middle = {k: float(np.median([r[k] for r in measured]))
              for k in ("whole_rps", "steady_rps", "first_batch_s", "load_avg_1m")}
    return dict(measured[0], **middle, ok=all(r["ok"] for r in measured))


if __name__ == "__main__":
    main()
