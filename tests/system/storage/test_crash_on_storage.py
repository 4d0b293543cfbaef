"""kill -9 under load on an ``s3://`` root: nothing acknowledged is lost, with acks=all and with acks=1, whose
write-ahead log is in the bucket (the crash tests of tests/system/ingest_api, run on S3)."""

from __future__ import annotations

import pytest

from tests.system.ingest_api import test_api_crash as crash

pytestmark = pytest.mark.crash

test_kill_9_under_acks_all_load = crash.test_kill_9_under_acks_all_load
test_kill_9_under_acks_1_load_replays_the_wal = crash.test_kill_9_under_acks_1_load_replays_the_wal
test_kill_9_with_acks_1_and_acks_all_producers_side_by_side = (
    crash.test_kill_9_with_acks_1_and_acks_all_producers_side_by_side
)
test_acks_1_records_survive_kill_before_commit = crash.test_acks_1_records_survive_kill_before_commit
