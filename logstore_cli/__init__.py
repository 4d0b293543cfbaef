"""The ``logstore`` command line: an entry point, above every layer (it may import the core and all its callers).

:func:`main` is the ``logstore`` console script; ``python -m logstore_cli`` runs the same.
"""

from logstore_cli.commands import main

__all__ = ["main"]
