"""A light S3-compatible server for the storage benchmarks: folders on local disk served as a
bucket, read-only, by the counting proxy itself (no second server behind it).

Why: moto's S3 server (Python, full S3 semantics) spends ~6 ms of CPU a request on the
benchmark's machine, the same 2 cores the client under test runs on, so a first batch of
a few hundred ranged requests measured against it is bounded by the server's CPU, which
a real bucket never takes from its users. :class:`LightS3` answers the few calls a reader
of a bucket makes, as S3 does — ``GetObject`` (with ``Range``: 206 and ``Content-Range``;
with ``If-Match``: 412 ``PreconditionFailed`` on another ETag), ``HeadObject``,
``ListObjectsV2`` (``prefix``, ``delimiter``, ``max-keys``, ``continuation-token``),
``HeadBucket`` and ``GetBucketLocation`` — in path-style URLs, with no signature check,
and keeps what :class:`~benchmarks.counting_proxy.CountingProxy` gives (``latency``
seconds added to every request; requests and body bytes counted per port). The ETag is
each file's MD5, as S3's for an object written in one part. A client speaks to it exactly
as to S3 (boto3, s3fs, datarax through ``AWS_ENDPOINT_URL``).

Example:
    >>> import os, tempfile, boto3
    >>> scratch = tempfile.TemporaryDirectory(); folder = scratch.name
    >>> with open(os.path.join(folder, "a.bin"), "wb") as f:
    ...     _ = f.write(b"hello world")
    >>> server = LightS3({"b": [(folder, "ds")]})
    >>> s3 = boto3.client("s3", endpoint_url=server.urls["h0"], region_name="us-east-1",
    ...                   aws_access_key_id="x", aws_secret_access_key="x")
    >>> s3.get_object(Bucket="b", Key="ds/a.bin", Range="bytes=6-10")["Body"].read()
    b'world'
    >>> [o["Key"] for o in s3.list_objects_v2(Bucket="b", Prefix="ds/")["Contents"]]
    ['ds/a.bin']
    >>> server.stats()["h0"]["requests"]
    2
    >>> server.close(); scratch.cleanup()
"""

from __future__ import annotations

import email.utils
import hashlib
import html
import http.server
import io
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from benchmarks.counting_proxy import Answer, CountingProxy

__all__ = ["LightS3"]

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
_XML = '<?xml version="1.0" encoding="UTF-8"?>\n'


class _Object:
    def __init__(self, path: str) -> None:
        self.path = path
        self.size = os.path.getsize(path)
        with open(path, "rb") as f:
            self.etag = '"%s"' % hashlib.file_digest(f, "md5").hexdigest()
        mtime = os.path.getmtime(path)
        self.modified = email.utils.formatdate(mtime, usegmt=True)
        self.iso = email.utils.parsedate_to_datetime(self.modified).strftime(
            "%Y-%m-%dT%H:%M:%S.000Z")


class LightS3(CountingProxy):
    """``buckets`` (``{bucket: [(folder, prefix), ...]}``: each folder's files under
    ``prefix/``) served read-only as S3 does, one port per label (see the module
    docstring)."""

    def __init__(self, buckets: Mapping[str, Sequence[tuple[str, str]]],
                 labels: Iterable[str] = ("h0",), latency: float = 0.0) -> None:
        self.objects: dict[str, dict[str, _Object]] = {}
        for bucket, folders in buckets.items():
            keys = self.objects.setdefault(bucket, {})
            for folder, prefix in folders:
                for name in sorted(os.listdir(folder)):
                    path = os.path.join(folder, name)
                    if os.path.isfile(path):
                        keys[f"{prefix}/{name}" if prefix else name] = _Object(path)
        super().__init__(("127.0.0.1", 0), labels, latency)

    def origin(self, req: http.server.BaseHTTPRequestHandler, body: bytes | None) -> Answer:
        url = urlsplit(req.path)
        bucket, _, key = unquote(url.path).lstrip("/").partition("/")
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        if bucket not in self.objects:
            return _error(404, "NoSuchBucket", bucket)
        if req.command not in ("GET", "HEAD"):
            return _error(405, "MethodNotAllowed", req.command)
        if not key:
            if req.command == "HEAD":
                return _bytes(200, b"", [])
            if "location" in query:
                return _bytes(200, (_XML + '<LocationConstraint xmlns="http://s3.amazonaws.com/'
                                    'doc/2006-03-01/"></LocationConstraint>').encode(), [])
            return self._list(bucket, query)
        obj = self.objects[bucket].get(key)
        if obj is None:
            return _error(404, "NoSuchKey", key, head=req.command == "HEAD")
        wanted = req.headers.get("If-Match")
        if wanted is not None and wanted.strip() not in (obj.etag, "*"):
            return _error(412, "PreconditionFailed", key, head=req.command == "HEAD")
        start, end, status = 0, obj.size, 200
        headers = [("ETag", obj.etag), ("Last-Modified", obj.modified),
                   ("Accept-Ranges", "bytes"), ("Content-Type", "binary/octet-stream")]
        match = _RANGE.match(req.headers.get("Range", "").strip())
        if match and (match.group(1) or match.group(2)):
            first, last = match.group(1), match.group(2)
            if first:
                start = int(first)
                end = min(obj.size, int(last) + 1) if last else obj.size
            else:  # the last N bytes
                start = max(0, obj.size - int(last))
            if start >= obj.size:
                return _error(416, "InvalidRange", key, head=req.command == "HEAD")
            status = 206
            headers.append(("Content-Range", f"bytes {start}-{end - 1}/{obj.size}"))
        headers.append(("Content-Length", str(end - start)))
        if req.command == "HEAD":
            return Answer(status, "", headers, lambda *_: b"", lambda: None)
        f = open(obj.path, "rb")  # noqa: SIM115 - closed by the answer's close()
        f.seek(start)
        left = [end - start]

        def read(n: int = -1) -> bytes:
            n = left[0] if n is None or n < 0 else min(n, left[0])
            data = f.read(n)
            left[0] -= len(data)
            return data

        return Answer(status, "Partial Content" if status == 206 else "OK", headers, read,
                      f.close)

    def _list(self, bucket: str, query: Mapping[str, str]) -> Answer:
        prefix, delimiter = query.get("prefix", ""), query.get("delimiter", "")
        limit = int(query.get("max-keys") or 1000)
        after = query.get("continuation-token") or query.get("start-after") or ""
        keys: list[str] = []
        prefixes: list[str] = []
        truncated = False
        for key in sorted(self.objects[bucket]):
            if not key.startswith(prefix) or key <= after:
                continue
            rest = key[len(prefix):]
            if delimiter and delimiter in rest:
                common = prefix + rest[:rest.index(delimiter) + len(delimiter)]
                if common not in prefixes and common > after:
                    if len(keys) + len(prefixes) >= limit:
                        truncated = True
                        break
                    prefixes.append(common)
                continue
            if len(keys) + len(prefixes) >= limit:
                truncated = True
                break
            keys.append(key)
        out = io.StringIO()
        out.write(_XML + '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">')
        out.write(f"<Name>{html.escape(bucket)}</Name><Prefix>{html.escape(prefix)}</Prefix>"
                  f"<KeyCount>{len(keys) + len(prefixes)}</KeyCount><MaxKeys>{limit}</MaxKeys>")
        if delimiter:
            out.write(f"<Delimiter>{html.escape(delimiter)}</Delimiter>")
        out.write(f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>")
        if truncated:
            last = max(keys[-1:] + prefixes[-1:])
            out.write(f"<NextContinuationToken>{html.escape(last)}</NextContinuationToken>")
        for key in keys:
            obj = self.objects[bucket][key]
            out.write(f"<Contents><Key>{html.escape(key)}</Key><LastModified>{obj.iso}"
                      f"</LastModified><ETag>{html.escape(obj.etag)}</ETag><Size>{obj.size}"
                      "</Size><StorageClass>STANDARD</StorageClass></Contents>")
        for common in prefixes:
            out.write(f"<CommonPrefixes><Prefix>{html.escape(common)}</Prefix></CommonPrefixes>")
        out.write("</ListBucketResult>")
        return _bytes(200, out.getvalue().encode(), [("Content-Type", "application/xml")])


def _bytes(status: int, data: bytes, headers: list[tuple[str, str]], *,
           head: bool = False) -> Answer:
    view = io.BytesIO(b"" if head else data)
    return Answer(status, http.HTTPStatus(status).phrase,
                  [*headers, ("Content-Length", str(len(data)))], view.read, view.close)


def _error(status: int, code: str, resource: str, *, head: bool = False) -> Answer:
    body = (f"{_XML}<Error><Code>{code}</Code><Message>{code}</Message>"
            f"<Resource>{html.escape(resource)}</Resource></Error>").encode()
    return _bytes(status, body, [("Content-Type", "application/xml")], head=head)

