"""``python -m maintenance retention compact clean vacuum [--root DIR] [--topic T]``."""

import sys

from maintenance.job import main

sys.exit(main())
