"""``python -m logstore_cli …``: the ``logstore`` command without the console script."""

import sys

from logstore_cli.cli import main

sys.exit(main())
