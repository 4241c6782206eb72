"""Pipelines: a source, stages and a batch size, iterated one epoch per ``iter()``;
:class:`Rebatch` hands out a pipeline's batches grouped k into one or each split in k."""

from datarax.pipeline.iterator import PipelineIterator
from datarax.pipeline.pipeline import Pipeline
from datarax.pipeline.rebatch import Rebatch, RebatchIterator

__all__ = ["Pipeline", "PipelineIterator", "Rebatch", "RebatchIterator"]
