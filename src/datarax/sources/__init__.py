"""Data sources: in memory, ArrayRecord files, TensorFlow Datasets, Hugging Face."""

from datarax.sources.memory import MemorySource, MemorySourceConfig

__all__ = ["MemorySource", "MemorySourceConfig"]
