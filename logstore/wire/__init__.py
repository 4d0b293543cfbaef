"""What travels between clients and a node, with no transport: body formats and codecs.

* :mod:`~logstore.wire.json_produce` — a JSON produce body into :class:`~logstore.wire.json_produce.ParsedRecords`.
* :mod:`~logstore.wire.arrow_produce` / :mod:`~logstore.wire.arrow_fetch` — the Arrow IPC forms of produce and fetch.
* :mod:`~logstore.wire.json_bytes` — bytes in JSON (a UTF-8 string, ``{"b64": …}`` or null).
"""
