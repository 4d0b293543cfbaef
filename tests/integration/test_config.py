"""Configuration in a process confined to one core: one committer thread, and no parser process (it parses
itself). A child process, so that its CPU affinity is its own."""

import os
import subprocess
import sys

import pytest


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_a_process_confined_to_one_core_commits_on_one_thread_and_parses_itself() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from logstore.config import LogstoreConfig; c = LogstoreConfig(); "
            "print(c.num_io_threads, c.num_parser_processes)",
        ],
        preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "1 0"
