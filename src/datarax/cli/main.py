"""Argument parsing for ``python -m datarax``."""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    """Run a datarax command; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="datarax", description="Data pipelines for JAX.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="train a small classifier on scikit-learn's digits through a datarax pipeline"
    )
    demo.add_argument("--epochs", type=int, default=8, help="training epochs (default 8)")
    demo.add_argument("--batch-size", type=int, default=64, help="records per batch (default 64)")
    demo.add_argument("--seed", type=int, default=0, help="shuffle/model seed (default 0)")
    demo.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from datarax.cli.demo import run_demo

        run_demo(
            epochs=args.epochs,
            batch_size=args.batch_size,
            seed=args.seed,
            progress=not args.no_progress,
        )
    return 0
