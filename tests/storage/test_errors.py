"""Storage errors cross process boundaries (a decode worker's error is pickled back)
with their message, type and keyword fields."""

from __future__ import annotations

import pickle

import pytest

from datarax.core.errors import RecordError
from datarax.storage.errors import CacheFullError, RemoteObjectError, RemoteStoreError


@pytest.mark.parametrize(
    "error,fields",
    [
        (RemoteObjectError("'s3://b/a' changed since it was listed", url="s3://b/a"),
         {"url": "s3://b/a", "path": "s3://b/a", "index": None}),
        (RemoteStoreError("cannot read 's3://b/a': still failing", url="s3://b/a"),
         {"url": "s3://b/a"}),
        (CacheFullError("cache '/c' is full (10 of 10 bytes)", disk_full=True),
         {"disk_full": True}),
        (CacheFullError("cache '/c' is full (10 of 10 bytes)"), {"disk_full": False}),
    ],
    ids=["object", "store", "cache-disk-full", "cache-limit"],
)
def test_a_pickled_storage_error_keeps_type_message_and_fields(error, fields):
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error)
    assert {name: getattr(back, name) for name in fields} == fields
    assert isinstance(back, RecordError) == isinstance(error, RemoteObjectError)
