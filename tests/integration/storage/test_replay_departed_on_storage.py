"""Cluster mode's replay of departed nodes' write-ahead logs on every root (this folder's ``config``): a new leader
lists ``<root>/_wal/`` in the bucket or container, as in a directory, and replays the frames of every node not
live, once, at their promised offsets."""

from __future__ import annotations

from tests.unit.node import test_replay_departed as unit

test_a_new_leader_replays_the_departed_nodes_frames_of_its_topic_once = (
    unit.test_a_new_leader_replays_the_departed_nodes_frames_of_its_topic_once
)
