"""The snapshot a :class:`~datarax.text.source.PackedTextSource` state adds to its position:
its keys (references, never tokens) and the check of one restored from a saved state.
"""

from __future__ import annotations

from typing import Any

from datarax.core.errors import StateError
from datarax.core.position import missing_key, saved_count, saved_counts
from datarax.text.packing import Packer

__all__ = ["SNAPSHOT_KEYS", "check_snapshot"]

SNAPSHOT_KEYS = ("next_document", "skipped", "documents", "corpus_documents", "packer")


def check_snapshot(state: dict[str, Any], corpora: int, shard: int, count: int) -> None:
    """Refuse a malformed snapshot (``corpora``: 0 unless a mixture), naming the key.

    Example:
        >>> check_snapshot({"next_document": 0, "skipped": 0, "packer": Packer(1).get_state()},
        ...                0, 0, 1)
        >>> check_snapshot({"next_document": -1, "packer": {}}, 0, 0, 1)
        Traceback (most recent call last):
        ...
        datarax.core.errors.StateError: PackedTextSource state 'next_document' must be an int >= 0, got -1; pass the dict PackedTextSource.get_state() returned.
    """
    where = "PackedTextSource"
    for key in ("next_document", "skipped"):
        saved_count(state, key, where)
    saved_count(state, "documents", where, default=0)
    if "packer" not in state:
        raise missing_key(state, "packer", where)
    if state.get("corpus_documents") is not None:
        saved_counts(state["corpus_documents"], "corpus_documents", where, corpora,
                     "documents packed per corpus of the mixture")
    packer_state = state["packer"]
    try:
        needed = Packer.documents_in(packer_state)
        for key in ("tokens_packed", "rows_packed"):
            saved_count(packer_state, key, "Packer")
    except StateError as err:  # a malformed run of rows names itself
        raise StateError(f"{where}: {err}", field="packer") from None
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise StateError(
            f"{where} state 'packer' is malformed ({err!r}); pass the dict get_state() "
            "returned.",
            field="packer",
        ) from None
    next_document = state["next_document"]
    for doc in sorted(needed, key=repr):
        if not (isinstance(doc, int) and 0 <= doc < next_document and doc % count == shard):
            raise StateError(
                f"{where} state refers to document {doc!r}, which is not one of this "
                f"shard's ({shard} of {count}) documents before next_document="
                f"{next_document}; the state comes from another source or shard.",
                field="packer",
            )
