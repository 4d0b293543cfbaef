"""Which Parquet codec a topic's new data files get: ``compression.type`` resolved to a codec.

Kafka's topic config ``compression.type`` names a codec (``uncompressed``,
``gzip``, ``snappy``, ``lz4``, ``zstd``) or ``producer``: keep the codec the
producer's batch came in. Here a codec is that of the Parquet column chunks of
the files a commit or a compaction writes; files already written keep theirs
(as Kafka's segments do), so changing the config affects new files only.

``producer`` needs a producer's codec, and only a Kafka client's batch carries
one (:attr:`~logstore.structs.ProducerBatch.compression`); HTTP bodies carry
none. Without it — and for compaction, which merges files of any codec — the
node's own ``compression.type`` applies, and when that is ``producer`` too,
:data:`NODE_CODEC`. Kafka's ``lz4`` is Parquet's ``LZ4_RAW`` (Parquet's older
``LZ4`` is the Hadoop framing, which pyarrow no longer writes).

Runs wherever files are written: the node's committer, maintenance jobs, Spark executors.
"""

from __future__ import annotations

from collections.abc import Iterable

from logstore.config import CompressionType

__all__ = ["NODE_CODEC", "file_suffix", "parquet_codec"]

NODE_CODEC: CompressionType = "snappy"
"""The codec of ``producer`` when no producer's codec is known and the node's ``compression.type`` is ``producer``.

Snappy, as every logstore data file had before ``compression.type`` existed: cheap to
write and read, about half the size of uncompressed records of text."""

_PARQUET = {"uncompressed": "none", "gzip": "gzip", "snappy": "snappy", "lz4": "lz4", "zstd": "zstd"}
"""Kafka's codec name → pyarrow's ``compression`` (pyarrow's ``lz4`` writes ``LZ4_RAW``)."""
# Spark's names for the same codecs in its data-file names (part-…-c000.<suffix>parquet).
_SUFFIX = {"uncompressed": "", "gzip": "gz.", "snappy": "snappy.", "lz4": "lz4raw.", "zstd": "zstd."}


def parquet_codec(
    topic: CompressionType, node: CompressionType, producers: Iterable[CompressionType | None] = ()
) -> str:
    """The pyarrow ``compression`` of new files of a topic whose ``compression.type`` is ``topic``.

    Args:
        topic: the topic's effective ``compression.type``.
        node: the node's ``compression.type`` (the service default), for ``producer`` without a producer's codec.
        producers: the codecs of the batches going into the file (None: unknown, an HTTP body);
            used only when ``topic`` is ``producer``, and only when all of them name the same codec.
    """
    return _PARQUET[_resolve(topic, node, producers)]


def file_suffix(codec: str) -> str:
    """The codec's part of a data file's name, Spark's way (``snappy.`` in ``part-…-c000.snappy.parquet``)."""
    return next((_SUFFIX[k] for k, v in _PARQUET.items() if v == codec), "")


def _resolve(
    topic: CompressionType, node: CompressionType, producers: Iterable[CompressionType | None]
) -> CompressionType:
    if topic != "producer":
        return topic
    sent = set(producers)
    codec = sent.pop() if len(sent) == 1 else None
    if codec is not None and codec != "producer":
        return codec  # every batch came in this one codec
    return NODE_CODEC if node == "producer" else node
