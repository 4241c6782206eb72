"""Pipelines: a source, stages and a batch size, iterated one epoch per ``iter()``."""

from datarax.pipeline.iterator import PipelineIterator
from datarax.pipeline.pipeline import Pipeline

__all__ = ["Pipeline", "PipelineIterator"]
