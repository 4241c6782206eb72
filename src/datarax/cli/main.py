"""Argument parsing for ``datarax`` / ``python -m datarax``.

Commands (docs/cli.md): ``demo``, ``inspect``, ``scan``, ``convert``, ``bench``. Bad
arguments or input end with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator

SOURCE_HELP = (
    "ArrayRecord path, glob or URL (s3://bucket/data, gs://...), hf:NAME_OR_PATH[:SPLIT], "
    "tfds:NAME[:SPLIT] or "
    "py:MODULE:FUNCTION (a function returning a source or a Pipeline)"
)


EXIT_STATUS = ("Exit status: 0 done, 2 a bad argument or input (one line on stderr), 130 "
               "interrupted (Ctrl-C).")


def _installed_version() -> str:
    """The installed distribution's version (what pip installed), as --version prints it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("datarax")
    except PackageNotFoundError:
        return "(not installed: run from a source tree)"


def build_parser() -> argparse.ArgumentParser:
    """The ``datarax`` argument parser."""
    from datarax.storage.urls import expand_user

    parser = argparse.ArgumentParser(prog="datarax", description="Data pipelines for JAX.")
    parser.add_argument("--version", action="version", version=f"datarax {_installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="train a small classifier on scikit-learn's digits through a datarax pipeline",
        description="Train a small classifier on scikit-learn's digits through a datarax "
        "pipeline, checkpoint half-way through the second epoch and check that a resumed "
        "pipeline replays the same batches. " + EXIT_STATUS,
    )
    demo.add_argument("--epochs", type=int, default=8,
                      help="training epochs, 2 or more: the resume is checked in the second "
                      "(default 8)")
    demo.add_argument("--batch-size", type=int, default=64, help="records per batch (default 64)")
    demo.add_argument("--seed", type=int, default=0, help="shuffle/model seed (default 0)")
    demo.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    demo.add_argument("--scan", action="store_true",
                      help="train with Pipeline.scan (data + train steps compiled together)")

    def source_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("source", metavar="SOURCE", help=SOURCE_HELP)
        sub.add_argument(
            "--decode",
            metavar="MODULE:FUNCTION",
            help="ArrayRecord only: bytes -> dict of arrays for one record "
            "(default: each record's size and first bytes)",
        )
        sub.add_argument("--data-dir", type=expand_user, help="tfds only: the TFDS data directory")
        sub.add_argument(
            "--exclude",
            metavar="FIELD",
            action="append",
            help="hf: and tfds: only: leave this field out (repeatable), e.g. one of "
            "variable-length lists or structs",
        )
        sub.add_argument(
            "--json", action="store_true", help="print one JSON object instead of text"
        )

    inspect = commands.add_parser(
        "inspect", help="record count, files, element spec and first records",
        description="Print a source's record count, files, element spec and first records; "
        "--grid draws a field. " + EXIT_STATUS,
    )
    source_options(inspect)
    inspect.add_argument("--records", type=int, default=3, help="records to summarise (default 3)")
    inspect.add_argument(
        "--grid",
        metavar="OUT.png",
        type=expand_user,
        help="write an image grid of an image field (or a histogram of a numeric one)",
    )
    inspect.add_argument(
        "--field",
        help="the field --grid draws (default: the first image field, else the first numeric one)",
    )
    inspect.add_argument(
        "--grid-records", type=int, default=16, help="records --grid draws (default 16)"
    )
    inspect.add_argument(
        "--no-count", action="store_true", help="do not read a stream through to count its records"
    )
    def image_options(sub: argparse.ArgumentParser, what: str) -> None:
        decoded = sub.add_argument_group(
            "decoded images", f"ArrayRecord datasets only: {what} the image field (--field, "
            "default the first) as datarax.decode_images decodes it")
        decoded.add_argument("--resize", metavar="N|HxW", help="the shorter side N, or exactly HxW")
        decoded.add_argument("--crop", type=int, metavar="C", help="then the centre CxC")
        decoded.add_argument("--random-resized-crop", type=int, metavar="S",
                             help="a random resized crop to SxS per record (as for training)")

    image_options(inspect, "show")

    scan = commands.add_parser(
        "scan", help="read every record once; list bad records; exit 1 if any",
        description="Read every record once and list each bad one (file, index, cause). "
        "Exit status: 0 all records good, 1 any bad, 2 a bad argument or input, 130 "
        "interrupted (Ctrl-C).",
    )
    source_options(scan)
    scan.add_argument("--batch-size", type=int, default=256,
                      help="records per read (default 256); a py: Pipeline keeps its own")

    from datarax.cli.convert import add_arguments as convert_arguments

    convert_arguments(commands.add_parser(
        "convert", help="write data on disk as a self-describing ArrayRecord dataset"))

    bench = commands.add_parser(
        "bench", help="time a pipeline: rec/s, time to first batch, stage breakdown",
        description="Run a pipeline, waiting for every batch, and report the time to the "
        "first batch, records/s after it and pipeline.stats() per stage. " + EXIT_STATUS,
    )
    bench.add_argument(
        "target",
        metavar="py:MODULE:FUNCTION|DATASET",
        help="a function returning a Pipeline (or a source, run with no stages), or a datarax "
             "dataset (a folder written by datarax convert), read with no stages",
    )
    bench.add_argument("--batches", type=int, default=100, help="batches to run (default 100)")
    bench.add_argument("--epochs", type=int, help="run this many passes instead of --batches")
    bench.add_argument(
        "--batch-size",
        type=int,
        default=32,
        help="batch size when the function returns a source, or of a DATASET (default 32)",
    )
    bench.add_argument(
        "--compare-floor",
        action="store_true",
        help="also time a plain read-only pass of the same source",
    )
    bench.add_argument("--png", metavar="OUT.png", type=expand_user,
                       help="write a chart of the numbers")
    bench.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    bench.add_argument("--field", help="the image field --resize / --crop decode (default: the "
                                       "first)")
    image_options(bench, "read")
    parser.set_defaults(commands=commands.choices)  # each command's parser, for its errors
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run a datarax command; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)  # what follows goes to Beam (convert)
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv[:cut])
    if unknown:
        hint = _extra_paths_hint(args.command) if not any(u.startswith("-") for u in unknown) else ""
        args.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    args.passthrough = argv[cut + 1:]
    if args.passthrough and args.command != "convert":
        args.commands[args.command].error(
            f"unrecognized arguments: -- {' '.join(args.passthrough)}")
    from datarax.errors import RecordError  # (datarax.core would import JAX and Flax)

    try:
        with _quiet_loggers(_CLIENT_LOGGERS):
            return _run(args)
    except KeyboardInterrupt:  # Ctrl-C: one line and 128 + SIGINT, no traceback
        print(f"datarax {args.command}: interrupted.", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`... | head`): end quietly, as SIGPIPE would (128 + 13)
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # stdout without a file descriptor
            pass
        return 141
    except (ValueError, ImportError, OSError) as err:
        # DataraxError is a ValueError, a missing extra an ImportError: one line, no traceback
        message = " ".join(str(err).split()) or type(err).__name__
        if args.command in ("inspect", "scan", "bench"):  # the config field, as it is spelt here
            from datarax.cli.targets import as_cli_options

            message = as_cli_options(message)
        no_record = isinstance(err, RecordError) and err.index is None
        if args.command in ("inspect", "scan") and no_record and " first (datarax" not in message:
            from datarax.cli.targets import convert_hint

            message += convert_hint(args.source)  # a file or folder convert reads
        if args.command == "inspect" and isinstance(err, RecordError) and err.index is not None:
            # a bad record, not a missing or unreadable file (which scan cannot read either)
            message += f" 'datarax scan {args.source}' lists every bad record."
        print(f"datarax {args.command}: error: {message}", file=sys.stderr)
        return 2


# store clients that log each failed request with its traceback: the one error line says it
_CLIENT_LOGGERS = ("gcsfs",)


@contextlib.contextmanager
def _quiet_loggers(names: tuple[str, ...]) -> Iterator[None]:
    """Only critical records of the loggers ``names`` while the command runs."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for log, level in zip(loggers, levels):
            log.setLevel(level)


def _extra_paths_hint(command: str) -> str:
    """What to do when the shell expanded an unquoted glob into several paths."""
    if command == "convert":
        return ("; convert takes one SRC and one DST: quote a glob ('data/*.csv') so the shell "
                "passes it to datarax, or give the folder")
    if command in ("inspect", "scan", "bench"):
        return (f"; {command} takes one SOURCE: quote a glob ('data/*.array_record') so the "
                "shell passes it to datarax")
    return ""


def _check_output_path(option: str, path: str) -> None:
    """Refuse an output file that cannot be written now, not after the whole run."""
    from datarax.errors import ConfigError

    folder = os.path.dirname(path) or "."
    if path == "-":
        raise ConfigError(f"{option} -: the picture is written to a file, not to stdout; give a "
                          "file path, such as out.png.")
    if os.path.isdir(path):
        raise ConfigError(f"{option} {path}: that is a folder; give a file path, such as "
                          f"{os.path.join(path, 'out.png')}.")
    if not os.path.isdir(folder):
        raise ConfigError(f"{option} {path}: the folder '{folder}' does not exist; create "
                          "it or give a path in an existing folder.")
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"{option} {path}: the folder '{folder}' is not writable; give a "
                          "path in a folder you can write to.")


def _run(args: argparse.Namespace) -> int:
    from datarax.errors import ConfigError

    if getattr(args, "batch_size", 1) < 1:  # before a source is opened or data is loaded
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}.")
    for option in ("--grid", "--png"):
        path = getattr(args, option[2:], None)
        if path:
            _check_output_path(option, path)
    if args.command == "demo":
        from datarax.cli.demo import run_demo

        run_demo(
            epochs=args.epochs,
            batch_size=args.batch_size,
            seed=args.seed,
            progress=not args.no_progress,
            scan=args.scan,
        )
        return 0
    if args.command == "convert":
        from datarax.cli.convert import run_convert

        return run_convert(args)
    if args.command == "bench":
        from datarax.cli.bench import run_bench
        from datarax.cli.targets import image_options

        return run_bench(
            args.target,
            images=image_options(args),
            batches=args.batches,
            epochs=args.epochs,
            batch_size=args.batch_size,
            compare_floor=args.compare_floor,
            png=args.png,
            as_json=args.json,
        )
    from datarax.cli.targets import image_options, open_target

    with open_target(
        args.source,
        decode=args.decode,
        data_dir=args.data_dir,
        skip_bad=args.command == "scan",
        exclude=args.exclude,
        images=image_options(args),
    ) as target:
        if args.command == "inspect":
            from datarax.cli.inspect_source import run_inspect

            return run_inspect(
                target,
                records=args.records,
                grid=args.grid,
                field=args.field,
                grid_records=args.grid_records,
                count=not args.no_count,
                as_json=args.json,
            )
        from datarax.cli.scan import run_scan

        return run_scan(target, batch_size=args.batch_size, as_json=args.json)
