"""Make tests/cli's helper module importable (pytest runs with --import-mode=importlib)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
