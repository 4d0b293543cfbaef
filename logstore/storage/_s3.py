"""The object-store form of :class:`~logstore.storage.Storage` for S3 and S3-compatible stores.

Configured as the AWS tools are, from the environment: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY`` (``AWS_SESSION_TOKEN``), ``AWS_REGION`` (or
``AWS_DEFAULT_REGION``; default ``us-east-1``) and ``AWS_ENDPOINT_URL`` for an
S3-compatible store (an ``http://`` endpoint is allowed for delta-rs too).

Put-if-absent is a PUT with ``If-None-Match: *`` and a conditional replace a
PUT with ``If-Match: <etag>`` (S3 answers 412 when the condition fails): the
same mutual exclusion delta-rs uses for its commits, so logstore's own commits
and delta-rs writers share a table without a lock. boto3 retries a PUT whose
reply was lost (up to 4 attempts); a 412 answered to a retry may be the PUT
meeting its own first attempt, which :class:`~logstore.storage._object.ObjectStore`
(what this form shares with the Azure one) resolves by reading the object back.
A PUT whose retries all fail to reach S3 raises
:class:`~logstore.storage.StorageUnreachable`: its outcome is unknown. Reads, ranged reads,
listings and deletes are plain S3 calls (boto3), a tree's data deleted 1000 keys
a request; Parquet data files go through pyarrow's S3 file system. Every write
is durable when S3 acknowledges it.
"""

from __future__ import annotations

import os
from typing import Any

import boto3
import botocore.config
import botocore.exceptions
import pyarrow.fs as pafs

from logstore.errors import KafkaStorageError
from logstore.storage._base import StorageUnreachable, split_location
from logstore.storage._object import ConditionFailed, ObjectStore

__all__ = ["S3Storage", "parse_s3"]

_DENIED = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken", "403"}
_MISSING = {"NoSuchKey", "404", "NotFound"}


def parse_s3(location: str) -> tuple[str, str]:
    """(bucket, key) of ``s3://bucket/key``.

    Raises:
        InvalidConfigError: no bucket named.
    """
    return split_location(location, "s3", "bucket")


class S3Storage(ObjectStore):
    """One bucket (see the module docstring); thread-safe (boto3 clients are)."""

    scheme = "s3"
    holder = "bucket"

    def __init__(self, bucket: str) -> None:
        super().__init__(bucket)
        self.bucket = bucket
        self.endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
        self.region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        self._client: Any = boto3.session.Session().client(
            "s3",
            region_name=self.region,
            endpoint_url=self.endpoint,
            config=botocore.config.Config(retries={"max_attempts": 4, "mode": "standard"}),
        )
        options = {"AWS_REGION": self.region}
        if self.endpoint:
            options["AWS_ENDPOINT_URL"] = self.endpoint
            if self.endpoint.startswith("http://"):
                options["AWS_ALLOW_HTTP"] = "true"
        self.delta_options: dict[str, str] = options
        self._fs: pafs.S3FileSystem | None = None

    # -- the interface ----------------------------------------------------------

    def check(self, location: str) -> None:
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except botocore.exceptions.ClientError as e:
            raise self._error(e, location, "reach") from e
        except botocore.exceptions.BotoCoreError as e:
            raise self._unreachable(e, location) from e

    def read(self, location: str) -> bytes:
        return self._get(location)

    def read_range(self, location: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        return self._get(location, Range=f"bytes={start}-{start + length - 1}")

    def read_versioned(self, location: str) -> tuple[bytes, str]:
        reply = self._call("get_object", location, Key=self._key(location))
        return reply["Body"].read(), reply["ETag"]

    def put(self, location: str, data: bytes) -> None:
        self._call("put_object", location, Key=self._key(location), Body=data)

    def delete(self, location: str) -> None:
        self._delete_key(location, self._key(location))

    def arrow(self, location: str) -> tuple[pafs.FileSystem, str]:
        if self._fs is None:
            self._fs = pafs.S3FileSystem(
                region=self.region,
                endpoint_override=self.endpoint,
                access_key=os.environ.get("AWS_ACCESS_KEY_ID"),
                secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY"),
                session_token=os.environ.get("AWS_SESSION_TOKEN"),
            )
        return self._fs, f"{self.bucket}/{self._key(location)}"

    # -- the primitives of ObjectStore ------------------------------------------

    def _is_object(self, location: str) -> bool:
        try:
            self._call("head_object", location, Key=self._key(location))
        except FileNotFoundError:
            return False
        return True

    def _put_if(self, location: str, data: bytes, *, etag: str | None) -> str:
        condition = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}
        reply = self._call("put_object", location, Key=self._key(location), Body=data, **condition)
        return str(reply["ETag"])

    def _delete_key(self, prefix: str, key: str) -> None:
        self._call("delete_object", prefix, Key=key)

    def _delete_keys(self, prefix: str, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):
            self._call(
                "delete_objects", prefix, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True}
            )

    # -- internals --------------------------------------------------------------

    def _get(self, location: str, **kwargs: Any) -> bytes:
        reply = self._call("get_object", location, Key=self._key(location), **kwargs)
        return bytes(reply["Body"].read())

    def _list(self, prefix: str, *, delimiter: bool, limit: int | None = None) -> list[str]:
        names: list[str] = []
        args: dict[str, Any] = {"Prefix": prefix}
        if delimiter:
            args["Delimiter"] = "/"
        if limit is not None:
            args["MaxKeys"] = limit
        where = f"s3://{self.bucket}/{prefix}"
        while True:
            reply = self._call("list_objects_v2", where, **args)
            names += [o["Key"] for o in reply.get("Contents", [])]
            names += [p["Prefix"] for p in reply.get("CommonPrefixes", [])]
            token = reply.get("NextContinuationToken")
            if not token or (limit is not None and len(names) >= limit):
                return names
            args["ContinuationToken"] = token

    def _call(self, op: str, location: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._client, op)(Bucket=self.bucket, **kwargs)
        except botocore.exceptions.ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                retried = e.response.get("ResponseMetadata", {}).get("RetryAttempts", 0)
                raise ConditionFailed(location, retried=bool(retried)) from None
            if code in _MISSING:
                raise FileNotFoundError(location) from None
            raise self._error(e, location, op) from e
        except (botocore.exceptions.HTTPClientError, botocore.exceptions.ConnectionError) as e:
            raise self._unreachable(e, location) from e
        except botocore.exceptions.BotoCoreError as e:  # never sent: no credentials, a bad parameter
            raise KafkaStorageError(
                f"logstore.root: S3 {op} of {location} was not sent ({e}); "
                "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN)"
            ) from e

    def _error(self, e: botocore.exceptions.ClientError, location: str, op: str) -> Exception:
        code = str(e.response.get("Error", {}).get("Code", ""))
        if code in ("NoSuchBucket",) or (op == "reach" and code in _MISSING):
            return KafkaStorageError(
                f"logstore.root: bucket '{self.bucket}' does not exist ({code}, at {location}); "
                "create it or name another in logstore.root"
            )
        if code in _DENIED:
            return KafkaStorageError(
                f"logstore.root: S3 refused the credentials for bucket '{self.bucket}' ({code}, at {location}); "
                "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN)"
            )
        return OSError(f"S3 {op} of {location} failed: {code}: {e}")

    def _unreachable(self, e: Exception, location: str) -> StorageUnreachable:
        return StorageUnreachable(
            f"logstore.root: cannot reach S3 for {location} ({e}); check AWS_ENDPOINT_URL "
            f"(now {self.endpoint or 'unset: AWS itself'}) and the network"
        )
