"""Put this folder on sys.path so the tests share ``dataset_helpers`` (and a spawned
writer worker can import ``killer_rows``)."""

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
