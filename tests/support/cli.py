"""The ``logstore`` command run as a child process over a local root, for the CLI tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.server import LOGSTORE


def cli(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``logstore --root <root> <args>`` with no ``LOGSTORE_*`` variable of this process but ``env``'s."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTORE_")}
    return subprocess.run(
        [*LOGSTORE, "--root", str(root), *args], capture_output=True, text=True, env=base | env, timeout=120
    )
