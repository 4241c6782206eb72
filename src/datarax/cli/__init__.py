"""Command-line interface: ``python -m datarax demo``."""
