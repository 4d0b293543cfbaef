"""An import-linter contract type: a ``_``-prefixed module is private to the package holding it.

import-linter's own module expressions match whole name segments only (``logstore.*``, not
``logstore._*``), so "no private module across a package boundary" cannot be written with its
built-in ``protected`` or ``forbidden`` contracts without listing every private module by hand,
a list that goes stale the day someone adds one. This contract finds them in the import graph:
every module whose last name segment starts with one underscore (``logstore.log._delta``,
``spark_source._slices``; not ``__init__``/``__main__``) may be imported only by modules of the
package that holds it (``logstore.log.*`` for ``logstore.log._delta``), so only public modules
cross a package boundary, also between the core's own packages. Registered in ``pyproject.toml``
(``contract_types``); ``lint-imports`` puts the working directory on ``sys.path``, which is how it
finds this module.
"""

from __future__ import annotations

from typing import Any

import grimp
from importlinter import Contract, ContractCheck, output

__all__ = ["PrivateModulesContract"]


def is_private(module: str) -> bool:
    """Whether ``module``'s own name (its last segment) marks it private: ``_x``, not ``__x``."""
    tail = module.rsplit(".", 1)[-1]
    return tail.startswith("_") and not tail.startswith("__")


def home(module: str) -> str:
    """The package a private module belongs to: the one holding it (the last private segment's parent)."""
    parts = module.split(".")
    last_private = max(i for i, part in enumerate(parts) if is_private(part))
    return ".".join(parts[:last_private])


class PrivateModulesContract(Contract):
    """Only modules of the package holding a private (``_``-prefixed) module import it, directly."""

    type_name = "private_modules"

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        illegal: list[dict[str, Any]] = []
        for module in sorted(m for m in graph.modules if any(is_private(part) for part in m.split(".")[1:])):
            for importer in sorted(graph.find_modules_that_directly_import(module)):
                package = home(module)
                if importer == package or importer.startswith(package + "."):
                    continue
                details = graph.get_import_details(importer=importer, imported=module)
                illegal.append(
                    {
                        "importer": importer,
                        "imported": module,
                        "line_numbers": tuple(d["line_number"] for d in details),
                    }
                )
        return ContractCheck(kept=not illegal, metadata={"illegal_imports": illegal})

    def render_broken_contract(self, check: ContractCheck) -> None:
        output.print_error("Private modules imported from another package:", bold=False)
        output.new_line()
        for link in check.metadata["illegal_imports"]:
            lines = ", ".join(map(str, link["line_numbers"]))
            output.print_error(f"- {link['importer']} -> {link['imported']} (l.{lines})", bold=False)
        output.new_line()
