"""Make the shared helpers of the operator tests (operator_helpers.py) importable."""

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
