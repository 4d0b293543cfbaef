"""The ``logstore`` command line: an entry point, above every layer (it may import the core and all its callers).

:func:`main` is the ``logstore`` console script; ``python -m logstore_cli`` runs the same.

One module per command group, each owning its commands' handlers and their arguments: ``topics``,
``records`` (produce, consume), ``groups``, ``transactions``, ``serve``, ``security`` (keys, acls, quotas),
``zookeeper``, ``maintain``, ``demo``. ``cli`` holds :func:`main` (errors print as ``ERROR_NAME: message``,
status 1) and the top-level parser; ``_common`` what the groups share (config, store or ``--server`` client,
``key=value``).

To add a command group: write ``logstore_cli/<group>.py`` with ``register(sub, common)``, which calls
``sub.add_parser(name, help=…, parents=[common])`` (``common``: ``--root``, ``--server``, ``--api-key``,
``--ca-file``; pass it to nested subparsers too) and ``set_defaults(func=handler)`` on each command, where
``handler(args, config)`` returns the exit status (``None`` means 0) and raises ``LogstoreError`` for the user's
errors; then append its ``register`` to :data:`logstore_cli.cli.COMMAND_GROUPS`, whose order is the order
``logstore --help`` lists commands in. A new command of an existing group goes in that group's ``register``.
"""

from logstore_cli.cli import main

__all__ = ["main"]
