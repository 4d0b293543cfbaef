"""One exception hierarchy for logstore, named after Kafka's error codes.

Every error a user can act on is a :class:`LogstoreError` subclass carrying
Kafka's numeric ``code``, its ``name`` (``OFFSET_OUT_OF_RANGE``, …) and a
``retriable`` flag: a retriable error may succeed if the same request is sent
again unchanged (a lost commit race, a full buffer); a non-retriable one needs
the request or the configuration changed first.

Foreign errors (delta-rs, ZooKeeper, the file system) are translated at the
boundary with ``raise … from e``. HTTP status codes live in ``ingest_api/``,
never here.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "ERRORS_BY_NAME",
    "ClusterAuthorizationFailedError",
    "ConcurrentTransactionsError",
    "CorruptMessageError",
    "FencedInstanceIdError",
    "FencedLeaderEpochError",
    "GroupAuthorizationFailedError",
    "GroupIdNotFoundError",
    "GroupSubscribedToTopicError",
    "IllegalGenerationError",
    "IllegalSaslStateError",
    "InconsistentGroupProtocolError",
    "InconsistentTopicIdError",
    "InvalidConfigError",
    "InvalidGroupIdError",
    "InvalidPartitionsError",
    "InvalidRequestError",
    "InvalidSessionTimeoutError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "KafkaStorageError",
    "LogstoreError",
    "MemberIdRequiredError",
    "MessageTooLargeError",
    "NetworkExceptionError",
    "NonEmptyGroupError",
    "NotCoordinatorError",
    "NotLeaderOrFollowerError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceNumberError",
    "ProducerFencedError",
    "RebalanceInProgressError",
    "RecordListTooLargeError",
    "RequestTimedOutError",
    "SaslAuthenticationFailedError",
    "SecurityDisabledError",
    "ThrottlingQuotaExceededError",
    "TopicAlreadyExistsError",
    "TopicAuthorizationFailedError",
    "TransactionalIdAuthorizationFailedError",
    "TransactionalIdNotFoundError",
    "UnknownMemberIdError",
    "UnknownServerError",
    "UnknownTopicOrPartitionError",
    "UnsupportedSaslMechanismError",
    "UnsupportedVersionError",
]


class LogstoreError(Exception):
    """Root of every logstore error.

    Attributes:
        code: Kafka's numeric error code.
        name: Kafka's error name, e.g. ``UNKNOWN_TOPIC_OR_PARTITION``.
        retriable: whether resending the same request unchanged may succeed.
        message: a sentence for the user, naming the setting or input to change.
    """

    code: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """The error as the HTTP API and CLI show it."""
        return {"error_code": self.name, "message": self.message}


class UnknownServerError(LogstoreError):
    """An unexpected failure; the message says what went wrong."""


class OffsetOutOfRangeError(LogstoreError):
    """A fetch or seek offset outside [log start offset, high watermark]."""

    code = 1
    name = "OFFSET_OUT_OF_RANGE"


class CorruptMessageError(LogstoreError):
    """A record batch failed its CRC check or does not parse: nothing of it is written."""

    code = 2
    name = "CORRUPT_MESSAGE"
    retriable = True


class UnknownTopicOrPartitionError(LogstoreError):
    """The topic does not exist, or the partition is outside 0..partitions-1."""

    code = 3
    name = "UNKNOWN_TOPIC_OR_PARTITION"
    retriable = True


class NotLeaderOrFollowerError(LogstoreError):
    """This node is not the committer of the partition; retry on its leader."""

    code = 6
    name = "NOT_LEADER_OR_FOLLOWER"
    retriable = True

    def __init__(self, message: str, *, leader: tuple[int, str] | None = None) -> None:
        super().__init__(message)
        self.leader = leader
        """(node id, URL) of the partition's leader when known (cluster mode), for the client to go to."""

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.leader is not None:
            out["leader"] = {"node_id": self.leader[0], "url": self.leader[1]}
        return out


class RequestTimedOutError(LogstoreError):
    """A request did not arrive in full, or a produce was not committed, within ``request.timeout.ms``.

    A produce answered with it may still be committed later (its commit is retried): Kafka's contract.
    """

    code = 7
    name = "REQUEST_TIMED_OUT"
    retriable = True


class MessageTooLargeError(LogstoreError):
    """A record is larger than the topic's ``message.max.bytes``."""

    code = 10
    name = "MESSAGE_TOO_LARGE"


class InvalidTopicError(LogstoreError):
    """A topic name breaks Kafka's rules (legal characters, length, ``.``/``..``)."""

    code = 17
    name = "INVALID_TOPIC_EXCEPTION"


class RecordListTooLargeError(LogstoreError):
    """A produce request is larger than ``max.request.size``."""

    code = 18
    name = "RECORD_LIST_TOO_LARGE"


class TopicAuthorizationFailedError(LogstoreError):
    """The principal lacks the ACL the operation needs on the topic (or, for a create, on the cluster)."""

    code = 29
    name = "TOPIC_AUTHORIZATION_FAILED"


class GroupAuthorizationFailedError(LogstoreError):
    """The principal lacks the ACL the operation needs on the consumer group."""

    code = 30
    name = "GROUP_AUTHORIZATION_FAILED"


class ClusterAuthorizationFailedError(LogstoreError):
    """The principal lacks the ACL the operation needs on the cluster resource (``kafka-cluster``)."""

    code = 31
    name = "CLUSTER_AUTHORIZATION_FAILED"


class InvalidTimestampError(LogstoreError):
    """A record timestamp is negative or not a number of milliseconds."""

    code = 32
    name = "INVALID_TIMESTAMP"


class TopicAlreadyExistsError(LogstoreError):
    """``topics create`` of a name that is taken."""

    code = 36
    name = "TOPIC_ALREADY_EXISTS"


class UnsupportedVersionError(LogstoreError):
    """A Kafka protocol request of an API or version this node does not serve."""

    code = 35
    name = "UNSUPPORTED_VERSION"


class InvalidPartitionsError(LogstoreError):
    """A partition count below 1, or an attempt to decrease it."""

    code = 37
    name = "INVALID_PARTITIONS"


class InvalidConfigError(LogstoreError):
    """An unknown configuration key, or a value of the wrong type or range."""

    code = 40
    name = "INVALID_CONFIG"


class SaslAuthenticationFailedError(LogstoreError):
    """Missing, malformed, unknown or revoked credentials (an API key, with ``security.enabled=true``).

    Create a key with ``logstore keys create --principal User:NAME`` and send it
    as ``Authorization: Bearer <key>`` (clients: ``--api-key`` or ``LOGSTORE_API_KEY``).
    """

    code = 58
    name = "SASL_AUTHENTICATION_FAILED"


class UnsupportedSaslMechanismError(LogstoreError):
    """A Kafka client asked for a SASL mechanism the listener does not offer (it offers ``PLAIN``)."""

    code = 33
    name = "UNSUPPORTED_SASL_MECHANISM"


class IllegalSaslStateError(LogstoreError):
    """A Kafka request out of the SASL sequence: an API other than ApiVersions before authenticating on a
    ``SASL_*`` listener, SaslAuthenticate before SaslHandshake, or either on a ``PLAINTEXT`` listener."""

    code = 34
    name = "ILLEGAL_SASL_STATE"


class InvalidRequestError(LogstoreError):
    """A malformed request: bad JSON, missing or mistyped fields."""

    code = 42
    name = "INVALID_REQUEST"


class OutOfOrderSequenceNumberError(LogstoreError):
    """An idempotent producer's sequence is at or below the last one committed on a partition, and not a retry.

    Sequences are checked per (producer, partition): above the partition's
    last one is new (gaps are fine), and a retry of one of the producer's last
    few batches on the partition is answered with the original offsets instead.
    """

    code = 45
    name = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class ConcurrentTransactionsError(LogstoreError):
    """Another committer won the race for the same partitions; retry."""

    code = 51
    name = "CONCURRENT_TRANSACTIONS"
    retriable = True


class KafkaStorageError(LogstoreError):
    """The table or file system failed (I/O error, missing files); retry later."""

    code = 56
    name = "KAFKA_STORAGE_ERROR"
    retriable = True


class IllegalGenerationError(LogstoreError):
    """A group member acted with a generation that is no longer its own, or on a partition it does not own.

    The group rebalanced since the member last heard from it (or its session
    expired and it was replaced): its commit changes nothing. A live member
    heartbeats to learn its current generation and assignment, then retries.
    """

    code = 22
    name = "ILLEGAL_GENERATION"


class InconsistentGroupProtocolError(LogstoreError):
    """A member joined with an assignor other than the one the group's live members use.

    Every member of a group uses one ``partition.assignment.strategy``; change
    it on all of them together (once the group has no live member).
    """

    code = 23
    name = "INCONSISTENT_GROUP_PROTOCOL"


class UnknownMemberIdError(LogstoreError):
    """The group has no such member: it left, or its session expired (``session_timeout_ms`` without a heartbeat).

    The consumer joins the group again to get a new member id and assignment.
    """

    code = 25
    name = "UNKNOWN_MEMBER_ID"


class InvalidSessionTimeoutError(LogstoreError):
    """A member's ``session.timeout.ms`` is outside [group.min.session.timeout.ms, group.max.session.timeout.ms]."""

    code = 26
    name = "INVALID_SESSION_TIMEOUT"


class RebalanceInProgressError(LogstoreError):
    """The group is rebalancing: the member joins again (its next poll does) and then retries.

    A Kafka-protocol member learns of a rebalance from its heartbeat; a
    commit made while the group waits for the leader's assignment is refused
    with this error and made again after the member rejoined.
    """

    code = 27
    name = "REBALANCE_IN_PROGRESS"
    retriable = True


class FencedInstanceIdError(LogstoreError):
    """A static member (``group.instance.id``) was replaced by a newer member with the same instance id.

    Two consumers run with one ``group.instance.id``: give each its own.
    """

    code = 82
    name = "FENCED_INSTANCE_ID"


class MemberIdRequiredError(LogstoreError):
    """A new dynamic member is given its member id first and joins again with it (Kafka's KIP-394).

    So a JoinGroup the client gives up on leaves no member behind: the id
    becomes a member only when the client comes back with it.
    """

    code = 79
    name = "MEMBER_ID_REQUIRED"

    def __init__(self, message: str, *, member_id: str) -> None:
        super().__init__(message)
        self.member_id = member_id
        """The id to join with."""


class InvalidGroupIdError(LogstoreError):
    """A consumer-group name is empty or not a string."""

    code = 24
    name = "INVALID_GROUP_ID"


class GroupIdNotFoundError(LogstoreError):
    """The consumer group has never committed an offset."""

    code = 69
    name = "GROUP_ID_NOT_FOUND"


class FencedLeaderEpochError(LogstoreError):
    """A committer with an older leader epoch tried to commit: it is a zombie.

    A newer committer has claimed the topic's partitions; the stale one must
    stop writing. Nothing of the fenced commit reaches the table.
    """

    code = 74
    name = "FENCED_LEADER_EPOCH"

    def __init__(self, message: str, *, partitions: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.partitions = partitions
        """In cluster mode, the partitions whose leadership was lost (the others stay led); empty = the topic."""


class GroupSubscribedToTopicError(LogstoreError):
    """Another live consumer of the group already reads the topic (a second query of one group).

    Each (group, topic) has one live reader at a time, held by a lease under
    ``<root>/_groups/``; a reader that dies stops renewing it and it expires.
    """

    code = 86
    name = "GROUP_SUBSCRIBED_TO_TOPIC"


class StaleControllerEpochError(LogstoreError):
    """A controller acted with an epoch older than ``/controller_epoch``: another node was elected since.

    Its write changed nothing; it resigns and the cluster's one controller goes on.
    """

    code = 11
    name = "STALE_CONTROLLER_EPOCH"
    retriable = True


class DuplicateBrokerRegistrationError(LogstoreError):
    """A node id (``node.id``) is already registered by a live node in ZooKeeper.

    Each node of a cluster needs its own ``node.id``; a restarted node can
    register again once its old session has expired (``zookeeper.session.timeout.ms``).
    """

    code = 101
    name = "DUPLICATE_BROKER_REGISTRATION"


class InconsistentTopicIdError(LogstoreError):
    """The topic was deleted and created again since this reader, writer or query opened it.

    What it held (offsets, a writer's high watermarks and epochs) belongs to the
    old topic; the message names both topic IDs. Retriable: the topic's new
    incarnation is opened afresh on the next request.
    """

    code = 103
    name = "INCONSISTENT_TOPIC_ID"
    retriable = True


class NotCoordinatorError(LogstoreError):
    """This node does not coordinate the group (cluster mode); ask ``/v1/groups/{group}/coordinator``, retry there."""

    code = 16
    name = "NOT_COORDINATOR"
    retriable = True

    def __init__(self, message: str, *, coordinator: tuple[int, str] | None = None) -> None:
        super().__init__(message)
        self.coordinator = coordinator
        """(node id, URL) of the group's coordinator when known, for the client to go to."""


class ThrottlingQuotaExceededError(LogstoreError):
    """Buffers are full (``buffer.memory``); retry after the advertised delay."""

    code = 89
    name = "THROTTLING_QUOTA_EXCEEDED"
    retriable = True


class NetworkExceptionError(LogstoreError):
    """No server answered: the connection was refused, reset or timed out; the message names the URL and why."""

    code = 13
    name = "NETWORK_EXCEPTION"
    retriable = True


class NonEmptyGroupError(LogstoreError):
    """The group has live members or a live reader holds its lease: it cannot be deleted until they are gone."""

    code = 68
    name = "NON_EMPTY_GROUP"


class SecurityDisabledError(LogstoreError):
    """Keys, ACLs and quotas were managed on a node whose ``security.enabled`` is false: it uses none of them."""

    code = 54
    name = "SECURITY_DISABLED"


class InvalidTxnStateError(LogstoreError):
    """The transaction is not in a state that allows this call (commit with none open, produce while committing)."""

    code = 48
    name = "INVALID_TXN_STATE"


class InvalidTransactionTimeoutError(LogstoreError):
    """``transaction_timeout_ms`` is below 1 or above the node's ``transaction.max.timeout.ms``."""

    code = 50
    name = "INVALID_TRANSACTION_TIMEOUT"


class TransactionalIdAuthorizationFailedError(LogstoreError):
    """The caller may not use this ``transactional_id`` (ACL ``WRITE`` on resource ``transactional_id``)."""

    code = 53
    name = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"


class ProducerFencedError(LogstoreError):
    """A newer ``init`` of the same ``transactional_id`` (or its coordinator, after a timeout) bumped the epoch.

    The producer holding the old epoch is a zombie: nothing it sends is accepted; it must stop, or ``init`` again.
    """

    code = 90
    name = "PRODUCER_FENCED"


class InvalidProducerEpochError(LogstoreError):
    """A Kafka client's request carries an epoch of its producer id that is not the current one (older Kafka API
    versions' name for :class:`ProducerFencedError`)."""

    code = 47
    name = "INVALID_PRODUCER_EPOCH"


class InvalidProducerIdMappingError(LogstoreError):
    """A Kafka client's producer id is not the one its ``transactional_id`` holds (or it holds none)."""

    code = 49
    name = "INVALID_PRODUCER_ID_MAPPING"


class TransactionalIdNotFoundError(LogstoreError):
    """No transaction was ever initialised under this ``transactional_id`` (``init`` first)."""

    code = 105
    name = "TRANSACTIONAL_ID_NOT_FOUND"


_ALL: list[type[LogstoreError]] = [LogstoreError, *LogstoreError.__subclasses__()]
ERRORS_BY_NAME: dict[str, type[LogstoreError]] = {cls.name: cls for cls in _ALL}
"""Kafka error name → class, for clients that turn an API error back into an exception."""
