"""``python -m datarax``: the command-line entry point."""

from datarax.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
