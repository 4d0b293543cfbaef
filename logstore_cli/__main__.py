"""``python -m logstore_cli …``: the ``logstore`` command without the console script."""

import sys

from logstore_cli.commands import main

sys.exit(main())
