"""Pipelines: a source, stages and a batch size, iterated one epoch per ``iter()``;
:class:`Rebatch` hands out a pipeline's batches grouped k into one or each split in k.

Each name is imported on first use: ``from datarax.pipeline import Pipeline`` loads no
:class:`Rebatch`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from datarax.exports import lazy_exports

if TYPE_CHECKING:
    from datarax.pipeline.iterator import PipelineIterator
    from datarax.pipeline.pipeline import Pipeline
    from datarax.pipeline.rebatch import Rebatch, RebatchIterator

_HOMES = {
    "Pipeline": "datarax.pipeline.pipeline",
    "PipelineIterator": "datarax.pipeline.iterator",
    "Rebatch": "datarax.pipeline.rebatch",
    "RebatchIterator": "datarax.pipeline.rebatch",
}

# written out (not list(_HOMES)): type checkers read a literal __all__ as the re-exports
__all__ = ["Pipeline", "PipelineIterator", "Rebatch", "RebatchIterator"]


__getattr__, __dir__ = lazy_exports(globals(), _HOMES)
