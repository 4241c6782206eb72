"""``datarax convert SRC DST``: data on disk into a self-describing ArrayRecord dataset.

The command face of :func:`datarax.dataset.convert`; options after ``--`` go to Apache Beam.
"""

from __future__ import annotations

import argparse
import logging
import sys

_DESCRIPTION = """\
Write data on disk as a self-describing ArrayRecord dataset: shards plus
datarax_dataset.json, which ArrayRecordSourceModule reads with no decode function.
Records keep the source's order; a bad record stops the conversion naming its file,
row and field (or is skipped and listed with --on-error skip).
Exit status: 0 done, 2 a bad argument or input (one line on stderr), 130
interrupted (Ctrl-C; --resume finishes the run)."""

_EXAMPLES = """\
examples:
  datarax convert train.csv data/train
  datarax convert 'raw/*.parquet' data/train --shards 16 --workers 4
  datarax convert photos/ data/photos          (photos/<class>/<image>)
  datarax convert photos/ data/photos --resize 256   (shorter side 256, as torchvision)
  datarax convert root/val data/val --classes-from data/train   (the train split's labels)
  datarax convert hf_saved/ data/test --split test
  datarax convert raw/ data/train --resume     (finish an interrupted run)"""


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _resize(text: str) -> int | tuple[int, int]:
    from datarax.errors import ConfigError
    from datarax.dataset.resized_rows import parse_resize

    try:
        return parse_resize(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _class_names_of(dataset: str) -> dict[str, tuple[str, ...]]:
    from datarax.dataset.metadata import read_metadata
    from datarax.errors import ConfigError, DataraxError

    try:
        info = read_metadata(dataset)
    except DataraxError as err:
        raise ConfigError(f"--classes-from {dataset}: {err}") from err
    names = {f.name: f.class_names for f in info.features.fields if f.class_names is not None}
    if not names:
        raise ConfigError(
            f"--classes-from {dataset}: that dataset has no field with class names (its fields: "
            f"{', '.join(info.features.names)}); name a dataset with class names, such as an "
            "image folder converted before.")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``convert`` command's arguments."""
    from datarax.storage.urls import expand_user

    parser.description = _DESCRIPTION
    parser.epilog = _EXAMPLES
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("src", metavar="SRC", help=(
        "Parquet / JSONL / JSON / CSV / TSV file, folder or glob; a Hugging Face dataset "
        "folder (save_to_disk or load_dataset cache); a TFDS folder or tfds:NAME[:SPLIT]; an "
        "image folder (one subfolder per class); .npy / .npz"))
    parser.add_argument("dst", metavar="DST", help="the dataset folder to write")
    parser.add_argument("--shards", type=_at_least_one,
                        help="shard files (default: one per 50,000 records); shard s holds "
                             "a contiguous run of rows, in order")
    parser.add_argument("--workers", type=_at_least_one, default=1,
                        help="processes writing shards in parallel (default 1)")
    parser.add_argument("--runner", choices=("local", "beam"), default="local",
                        help="local processes, or Apache Beam (options after --)")
    parser.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                        help="stop at a bad record (default) or skip it and list it in the metadata")
    parser.add_argument("--resume", action="store_true",
                        help="finish an interrupted conversion with the same SRC and options "
                             "(finished shards are kept once checked against SRC; "
                             "--on-error may change)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a dataset, finished or not, in DST (refused otherwise); "
                             "the new one is written beside DST and replaces the old one "
                             "only once complete")
    parser.add_argument("--split", help="the split of a Hugging Face or TFDS dataset, or of table "
                                        "files named SPLIT-* / SPLIT.* or in SPLIT/ (default "
                                        "train)")
    parser.add_argument("--data-dir", type=expand_user,
                        help="tfds:NAME only: the TFDS data directory")
    parser.add_argument("--resize", metavar="N|HxW", type=_resize,
                        help="resize every image as it is written: N the shorter side (read "
                             "it with decode=datarax.decode_images(...)), HxW exactly")
    parser.add_argument("--classes-from", metavar="DATASET", type=expand_user,
                        help="label with the class names of a dataset converted before (the "
                             "train split): class folders of an image folder are labelled by "
                             "their position among them, so a split missing a class keeps the "
                             "same labels")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run_convert(args: argparse.Namespace) -> int:
    """Run the conversion; print the summary; exit status 0 (130 when interrupted)."""
    from datarax.dataset.conversion import convert
    from datarax.host.counts import count_words

    beam_args = list(getattr(args, "passthrough", []))
    if beam_args and args.runner != "beam":
        raise ValueError(f"options after -- ({' '.join(beam_args)}) go to Beam; add --runner beam.")
    # Beam logs a bad record's traceback before the error reaches here, named and short
    beam_log = logging.getLogger("apache_beam.runners.common")
    level = beam_log.level
    if args.runner == "beam":
        beam_log.setLevel(logging.CRITICAL)
    class_names = _class_names_of(args.classes_from) if args.classes_from else None
    try:
        info, summary = convert(
            args.src, args.dst, shards=args.shards, workers=args.workers, on_error=args.on_error,
            resume=args.resume, overwrite=args.overwrite, split=args.split,
            data_dir=args.data_dir, progress=not args.no_progress, runner=args.runner,
            beam_options=beam_args, resize=args.resize, class_names=class_names,
        )
    except KeyboardInterrupt:
        if args.overwrite and args.runner == "local":
            print(f"datarax convert: interrupted before the new dataset was complete; a dataset "
                  f"that was in {args.dst} is kept as it was: run the same command to start "
                  "again.", file=sys.stderr)
            return 130
        again = ("run the same command with --overwrite to start again" if args.runner == "beam"
                 else "run the same command with --resume to finish it (finished shards are kept)")
        print(f"datarax convert: interrupted; {args.dst} is not a dataset yet: {again}.",
              file=sys.stderr)
        return 130
    finally:
        beam_log.setLevel(level)
    listed = f"; skipped rows are listed in {args.dst}/datarax_dataset.json" if info.skipped else ""
    print(f"wrote {args.dst}: {summary}{listed}")
    others = info.extra.get("other_splits")
    if others:
        print(f"  split '{info.extra.get('split')}' of SRC; its other splits "
              f"({', '.join(others)}) were not converted: --split NAME converts one of them.")
    empty = info.extra.get("empty_classes")
    if empty:
        names = list(info.features["label"].class_names or ())
        labels = ", ".join(f"'{c}' (label {names.index(c)})" if c in names else f"'{c}'"
                           for c in empty[:10]) + (f" and {len(empty) - 10} more"
                                                   if len(empty) > 10 else "")
        print(f"  class folder(s) of SRC holding no images, kept as classes with no records: "
              f"{labels}.")
    left_out = info.extra.get("files_left_out")
    if left_out:
        files = sum(left_out.values())
        are = "is no image by its" if files == 1 else "are no images by their"
        print(f"  left out {count_words(files, 'file')} of SRC that {are} "
              f"suffix: {', '.join(f'{n} {k}' for k, n in left_out.items())}.")
    return 0
