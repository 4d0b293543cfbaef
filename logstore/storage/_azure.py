"""The object-store form of :class:`~logstore.storage.Storage` for Azure Blob Storage (``az://container/prefix``).

Configured as Azure's tools and delta-rs are, from the environment, the first of these that is set:

* ``AZURE_STORAGE_CONNECTION_STRING`` — ``AccountName=…;AccountKey=…`` with an optional ``BlobEndpoint``
  (or ``UseDevelopmentStorage=true`` for the emulator);
* ``AZURE_STORAGE_USE_EMULATOR=true`` — Azurite: account ``devstoreaccount1`` with its published key (unless
  ``AZURE_STORAGE_ACCOUNT_NAME`` / ``AZURE_STORAGE_ACCOUNT_KEY`` say otherwise) at ``AZURITE_BLOB_STORAGE_URL``
  (default ``http://127.0.0.1:10000``), as delta-rs reads them;
* ``AZURE_STORAGE_ACCOUNT_NAME`` and ``AZURE_STORAGE_ACCOUNT_KEY`` (shared key), with ``AZURE_STORAGE_ENDPOINT``
  for a blob endpoint other than ``https://<account>.blob.core.windows.net``.

Put-if-absent is a PUT with ``If-None-Match: *`` (Blob answers 409 ``BlobAlreadyExists``) and a conditional
replace a PUT with ``If-Match: <etag>`` (412 when the condition fails): the mutual exclusion delta-rs uses for
its Azure commits, so logstore's own commits and delta-rs writers share a table without a lock. The client
retries a PUT whose reply was lost (it counts the attempts here); a failed condition after a retry may be the PUT
meeting its own first attempt, which :class:`~logstore.storage._object.ObjectStore` (what this form shares with
the S3 one) resolves by reading the object back. A PUT whose retries all fail to reach the store raises
:class:`~logstore.storage.StorageUnreachable`: its outcome is unknown. Blobs are deleted one by one (a tree's
too). Parquet data files go through pyarrow's Azure file system (the Blob endpoint; no hierarchical namespace
needed). Every write is durable when Azure acknowledges it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs
from azure.core import MatchConditions
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import BlobServiceClient, ContainerClient, LinearRetry

from logstore.errors import KafkaStorageError
from logstore.storage._base import ObjectExists, PreconditionFailed, StorageUnreachable, split_location
from logstore.storage._object import ConditionFailed, ObjectStore

__all__ = ["AzureStorage", "parse_az"]

EMULATOR_ACCOUNT = "devstoreaccount1"
EMULATOR_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
"""Azurite's account and key, published by Microsoft (not a secret)."""

_CREDENTIALS = "AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY (or AZURE_STORAGE_CONNECTION_STRING)"
_DENIED = {
    "AuthenticationFailed",
    "AuthorizationFailure",
    "AuthorizationPermissionMismatch",
    "InvalidAuthenticationInfo",
}


def parse_az(location: str) -> tuple[str, str]:
    """(container, key) of ``az://container/key``.

    Raises:
        InvalidConfigError: no container named.
    """
    return split_location(location, "az", "container")


def _account() -> tuple[str, str, str]:
    """(account name, account key, blob endpoint URL) from the environment (see the module docstring).

    Raises:
        KafkaStorageError: nothing names an account, or a connection string lacks its parts.
    """
    env = os.environ
    if conn := env.get("AZURE_STORAGE_CONNECTION_STRING"):
        parts = dict(p.split("=", 1) for p in conn.split(";") if "=" in p)
        if parts.get("UseDevelopmentStorage", "").lower() == "true":
            return EMULATOR_ACCOUNT, EMULATOR_KEY, f"http://127.0.0.1:10000/{EMULATOR_ACCOUNT}"
        name, key = parts.get("AccountName", ""), parts.get("AccountKey", "")
        if not (name and key):
            raise KafkaStorageError(
                "logstore.root: AZURE_STORAGE_CONNECTION_STRING names no AccountName and AccountKey"
            )
        scheme = parts.get("DefaultEndpointsProtocol", "https")
        suffix = parts.get("EndpointSuffix", "core.windows.net")
        return name, key, parts.get("BlobEndpoint") or f"{scheme}://{name}.blob.{suffix}"
    if env.get("AZURE_STORAGE_USE_EMULATOR", "").lower() == "true":
        name = env.get("AZURE_STORAGE_ACCOUNT_NAME") or EMULATOR_ACCOUNT
        url = (env.get("AZURITE_BLOB_STORAGE_URL") or "http://127.0.0.1:10000").rstrip("/")
        return name, env.get("AZURE_STORAGE_ACCOUNT_KEY") or EMULATOR_KEY, f"{url}/{name}"
    name, key = env.get("AZURE_STORAGE_ACCOUNT_NAME", ""), env.get("AZURE_STORAGE_ACCOUNT_KEY", "")
    if not (name and key):
        raise KafkaStorageError(
            f"logstore.root: an az:// root needs credentials: set {_CREDENTIALS}, "
            "or AZURE_STORAGE_USE_EMULATOR=true for Azurite"
        )
    return name, key, env.get("AZURE_STORAGE_ENDPOINT") or f"https://{name}.blob.core.windows.net"


class AzureStorage(ObjectStore):
    """One container (see the module docstring); thread-safe (the Azure clients are)."""

    scheme = "az"
    holder = "container"

    def __init__(self, container: str) -> None:
        super().__init__(container)
        self.container = container
        self.account, key, self.endpoint = _account()
        try:
            service = BlobServiceClient(
                self.endpoint,
                credential={"account_name": self.account, "account_key": key},
                # Three retries 0-2 s apart (the client's default waits 15 s before the first).
                retry_policy=LinearRetry(backoff=1, random_jitter_range=1, retry_total=3),
            )
        except ValueError as e:
            raise KafkaStorageError(f"logstore.root: the Azure endpoint {self.endpoint} is not usable ({e})") from e
        self._client: ContainerClient = service.get_container_client(container)
        self._key_b64 = key
        options = {
            "AZURE_STORAGE_ACCOUNT_NAME": self.account,
            "AZURE_STORAGE_ACCOUNT_KEY": key,
            "AZURE_STORAGE_ENDPOINT": self.endpoint,
        }
        if self.endpoint.startswith("http://"):
            options["allow_http"] = "true"
        self.delta_options: dict[str, str] = options
        self._fs: pafs.AzureFileSystem | None = None

    # -- the interface ----------------------------------------------------------

    def check(self, location: str) -> None:
        self._call(self._client.get_container_properties, location)

    def read(self, location: str) -> bytes:
        return bytes(self._call(self._blob(location).download_blob, location).readall())

    def read_range(self, location: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        reply = self._call(self._blob(location).download_blob, location, offset=start, length=length)
        return bytes(reply.readall())

    def read_versioned(self, location: str) -> tuple[bytes, str]:
        reply = self._call(self._blob(location).download_blob, location)
        return bytes(reply.readall()), str(reply.properties.etag)

    def put(self, location: str, data: bytes) -> None:
        self._call(self._blob(location).upload_blob, location, data=data, overwrite=True)

    def delete(self, location: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._call(self._blob(location).delete_blob, location)

    def arrow(self, location: str) -> tuple[pafs.FileSystem, str]:
        if self._fs is None:
            url = urlsplit(self.endpoint)
            # pyarrow puts the account in front of an authority that starts with a dot (".blob.core.windows.net"
            # gives <account>.blob.core.windows.net) and in the path after any other (Azurite's
            # 127.0.0.1:10000/<account>); the endpoint here already names the account one way or the other.
            blob = url.netloc.removeprefix(self.account)
            # Azurite has no dfs endpoint: its hierarchical-namespace probe goes to the Blob one and finds none.
            dfs = blob.replace(".blob.", ".dfs.", 1) if blob.startswith(".") else blob
            self._fs = pafs.AzureFileSystem(
                account_name=self.account,
                account_key=self._key_b64,
                blob_storage_authority=blob,
                blob_storage_scheme=url.scheme,
                dfs_storage_authority=dfs,
                dfs_storage_scheme=url.scheme,
            )
        return self._fs, f"{self.container}/{self._key(location)}"

    # -- the primitives of ObjectStore ------------------------------------------

    def _is_object(self, location: str) -> bool:
        return bool(self._call(self._blob(location).exists, location))

    def _put_if(self, location: str, data: bytes, *, etag: str | None) -> str:
        attempts = _Attempts()
        condition: dict[str, Any] = (
            {"overwrite": False}
            if etag is None
            else {"overwrite": True, "etag": etag, "match_condition": MatchConditions.IfNotModified}
        )
        # Creating, Blob answers 409 BlobAlreadyExists (or 412); replacing, 412.
        failed = (ObjectExists, PreconditionFailed) if etag is None else PreconditionFailed
        try:
            reply = self._call(self._blob(location).upload_blob, location, data=data, retry_hook=attempts, **condition)
        except failed:
            raise ConditionFailed(location, retried=attempts.count >= 2) from None
        return str(reply["etag"])

    def _delete_key(self, prefix: str, key: str) -> None:
        # The key as listed, not through a location: a name ending in "/" (a folder marker) keeps its slash.
        with contextlib.suppress(FileNotFoundError):
            self._call(self._client.get_blob_client(key).delete_blob, f"az://{self.container}/{key}")

    # -- internals --------------------------------------------------------------

    def _blob(self, location: str) -> Any:
        return self._client.get_blob_client(self._key(location))

    def _list(self, prefix: str, *, delimiter: bool, limit: int | None = None) -> list[str]:
        where = f"az://{self.container}/{prefix}"
        names: list[str] = []

        def page() -> None:
            found = (
                self._client.walk_blobs(name_starts_with=prefix, delimiter="/")
                if delimiter
                else self._client.list_blobs(name_starts_with=prefix)
            )
            for item in found:
                names.append(item.name)
                if limit is not None and len(names) >= limit:
                    return

        self._call(page, where)
        return names

    def _call(self, op: Callable[..., Any], location: str, **kwargs: Any) -> Any:
        try:
            return op(**kwargs)
        except ResourceExistsError as e:
            if _code(e) == "BlobAlreadyExists":
                raise ObjectExists(location) from None
            raise self._error(e, location) from e
        except ResourceModifiedError:
            raise PreconditionFailed(location) from None
        except ResourceNotFoundError as e:
            if _code(e) == "ContainerNotFound":
                raise self._error(e, location) from e
            raise FileNotFoundError(location) from None
        except ClientAuthenticationError as e:
            raise self._error(e, location) from e
        except (ServiceRequestError, ServiceResponseError) as e:
            raise StorageUnreachable(
                f"logstore.root: cannot reach Azure Blob Storage for {location} ({type(e).__name__}); check "
                f"the endpoint (now {self.endpoint}: AZURE_STORAGE_ENDPOINT, AZURITE_BLOB_STORAGE_URL or the "
                "connection string's BlobEndpoint) and the network"
            ) from e
        except HttpResponseError as e:
            if e.status_code == 412:
                raise PreconditionFailed(location) from None
            raise self._error(e, location) from e

    def _error(self, e: HttpResponseError, location: str) -> Exception:
        code = _code(e)
        if code == "ContainerNotFound":
            return KafkaStorageError(
                f"logstore.root: container '{self.container}' does not exist in account '{self.account}' "
                f"(at {location}); create it or name another in logstore.root"
            )
        if e.status_code == 403 or code in _DENIED:
            return KafkaStorageError(
                f"logstore.root: Azure refused the credentials for account '{self.account}' ({code}, at "
                f"{location}); check {_CREDENTIALS}"
            )
        return OSError(f"Azure Blob call on {location} failed: {code}: {e.message}")


def _code(e: HttpResponseError) -> str:
    """Azure's error code (``BlobAlreadyExists``, ``ContainerNotFound``, …), else the HTTP status."""
    code = getattr(e, "error_code", None)
    return str(getattr(code, "value", code) or e.status_code)


class _Attempts:
    """A ``retry_hook``: counts the attempts of one call (the client calls it before each retry)."""

    def __init__(self) -> None:
        self.count = 1

    def __call__(self, **_details: object) -> None:
        self.count += 1
