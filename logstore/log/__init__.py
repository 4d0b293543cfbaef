"""The partition log: a topic's Delta table and everything that reads or appends to it.

Kafka keeps this in ``storage/…/log`` (``UnifiedLog`` and its collaborators); here:

* :mod:`~logstore.log.schema` — the topic table's columns; :mod:`~logstore.log.partitioner` — which
  partition a record goes to; :mod:`~logstore.log.catalog` — topics as tables (create, describe, delete);
  :mod:`~logstore.log.topic_id` — a topic's ID, which tells a re-created topic from the one deleted.
* :mod:`~logstore.log.writer` — :class:`~logstore.log.writer.TopicWriter`, the one committer of a topic,
  given its collaborators: :mod:`~logstore.log.validator` (records checked and stamped before append),
  :mod:`~logstore.log.producer_state` (idempotent producers' sequences),
  :mod:`~logstore.log.epochs` (leader epochs and the fence), :mod:`~logstore.log.writer_lock`
  (writers of one host take turns) and :mod:`~logstore.log.promises` (a dead node's acks=1 records first).
* :mod:`~logstore.log.reader` — slices of a partition by offset; :mod:`~logstore.log.files` — the data
  files the Delta log describes; :mod:`~logstore.log.tables` — the Delta conventions for callers above
  the core.
* :mod:`~logstore.log.append` — data files plus one put-if-absent commit (the writer's and the
  ``_offsets`` table's commit path); :mod:`~logstore.log.log_state` — what a writer knows of its table.
* :mod:`~logstore.log.wal` — the node's write-ahead log behind ``acks=1``.
* Internals: ``_tail`` (a snapshot brought forward commit by commit) and ``_delta`` (what logstore
  keeps in the Delta log).
"""
