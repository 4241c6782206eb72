"""Reading datasets from a real S3 server (moto, behind a fault-injecting proxy) the way a
user does: ``s3fs`` with the standard ``AWS_*`` environment."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.storage.conftest import S3


def test_the_local_server_serves_through_the_proxy_with_faults(s3: S3) -> None:
    import boto3
    import botocore.config
    import s3fs

    data = bytes(range(256)) * 40
    s3.put("probe/a.bin", data)
    fs = s3fs.S3FileSystem()  # endpoint and credentials from the environment
    assert fs.ls(s3.url("probe")) == [f"{s3.bucket}/probe/a.bin"]
    once = boto3.client("s3", config=botocore.config.Config(retries={"total_max_attempts": 1}))
    s3.proxy.throttle("probe/a.bin", 1)
    with pytest.raises(Exception, match="SlowDown"):
        once.get_object(Bucket=s3.bucket, Key="probe/a.bin")["Body"].read()
    assert once.get_object(Bucket=s3.bucket, Key="probe/a.bin")["Body"].read() == data
    s3.proxy.reset_mid_body("probe/a.bin")
    with pytest.raises(Exception, match="(?i)connection|incomplete|read"):
        once.get_object(Bucket=s3.bucket, Key="probe/a.bin")["Body"].read()
    assert fs.cat(s3.url("probe/a.bin")) == data
    assert s3.proxy.count("GET", "probe/a.bin") == 4
