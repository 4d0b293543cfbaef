"""A consume-transform-produce application for the transaction crash tests, run as a child process.

``python -m tests.support.txn_app URL INPUT PARTITIONS OUT_A OUT_B ATTEMPT [HOLD]`` reads ``INPUT`` in the group
``txn-app`` with a read_committed :class:`~logstore.client.Consumer` and, per batch, in one transaction of
the transactional id ``txn-app-0``: writes each record to ``OUT_A`` and ``OUT_B`` (keyed as the input, value
``a:<input value>:<ATTEMPT>:<txn>`` / ``b:…``) and sends the group's positions past the batch with
``send_offsets_to_transaction``. Only the public client is used, as an application would.

It says where it is on stdout, one line each, flushed before it goes on (the test kills it at these points):
``B <txn>`` a transaction began and its batch was consumed, ``F <txn> <records>`` its records are staged on
the node (produced and flushed), ``P <txn>`` its offsets were sent and ``commit_transaction`` is called next,
``C <txn>`` the commit returned, ``DONE`` every input partition's committed offset reached its end (exit 0).
``HOLD`` (``<phase>:<txn>``, e.g. ``F:2``) makes it stop after writing that line until a line comes on stdin:
the test then kills it (or the node) at exactly that point, where a timer could miss it.
Any error ends it with a traceback on stderr and a non-zero status, as a crash: the test starts it again,
and the new one's ``init_transactions`` aborts what the old one left open.
"""

from __future__ import annotations

import sys

from logstore.client import Consumer, Producer, TopicPartition

GROUP = "txn-app"
TRANSACTIONAL_ID = "txn-app-0"
BATCH = 100
"""Most input records per transaction."""


def say(line: str, hold: str) -> None:
    """Write ``line``; if its phase and transaction are ``hold``'s, wait for a line on stdin."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    if ":".join(line.split()[:2]) == hold:
        sys.stdin.readline()


def finished(consumer: Consumer, topic: str, partitions: int) -> bool:
    """Whether the group's committed offset of every partition of ``topic`` is its high watermark."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    committed = consumer.committed(tps)
    return all(c.offset == consumer.get_watermark_offsets(tp)[1] for c, tp in zip(committed, tps, strict=True))


def main(url: str, topic: str, partitions: int, out_a: str, out_b: str, attempt: int, hold: str) -> None:
    producer = Producer(url, transactional_id=TRANSACTIONAL_ID, delivery_timeout_ms=20_000)
    # First: completes or aborts what an earlier instance left, so the committed offsets read next are final.
    producer.init_transactions()
    consumer = Consumer(
        {"bootstrap.servers": url, "group.id": GROUP, "auto.offset.reset": "earliest"},
        enable_auto_commit=False,
        isolation_level="read_committed",
        session_timeout_ms=1_500,  # a killed instance's partitions go to the next one soon
        heartbeat_interval_ms=250,
    )
    consumer.subscribe([topic])
    txn = 0
    while True:
        batch = consumer.consume(BATCH, timeout=0.5)
        if not batch:
            if finished(consumer, topic, partitions):
                break
            continue
        producer.begin_transaction()
        say(f"B {txn}", hold)
        for m in batch:
            value = (m.value() or b"").decode()
            producer.produce(out_a, f"a:{value}:{attempt}:{txn}", key=m.key())
            producer.produce(out_b, f"b:{value}:{attempt}:{txn}", key=m.key())
        assert producer.flush(30) == 0, "records of the transaction were not delivered in 30 s"
        say(f"F {txn} {len(batch)}", hold)
        positions: dict[int, int] = {}
        for m in batch:
            positions[m.partition()] = max(positions.get(m.partition(), 0), m.offset() + 1)
        offsets = [TopicPartition(topic, p, o) for p, o in sorted(positions.items())]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata())
        say(f"P {txn}", hold)
        producer.commit_transaction()
        say(f"C {txn}", hold)
        txn += 1
    say("DONE", hold)
    producer.close()
    consumer.close()


if __name__ == "__main__":
    url, topic, partitions, out_a, out_b, attempt = sys.argv[1:7]
    main(url, topic, int(partitions), out_a, out_b, int(attempt), sys.argv[7] if len(sys.argv) > 7 else "")
