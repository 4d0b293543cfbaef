"""What the source needs of pyspark that Spark 4.0 and 4.1 lack: admission control for Python streaming sources.

Spark 4.2 asks a Python stream reader ``latestOffset(start, limit)`` with a
``ReadLimit`` and, for ``Trigger.AvailableNow``, ``prepareForTriggerAvailableNow()``
first (``pyspark.sql.streaming.datasource``). Spark 4.0 and 4.1 ask
``latestOffset()`` alone, and run an ``availableNow`` query of a source without
admission control to the end offset its first ``latestOffset()`` returned.
With them, this module defines the same names, and :data:`ADMISSION_CONTROL` is
false: the reader then keeps the start of each batch itself, and options that
need a limit from Spark (``maxOffsetsPerTrigger``) are refused when the query
starts (:func:`require_admission_control`).
"""

from __future__ import annotations

from dataclasses import dataclass

from logstore.errors import InvalidConfigError

__all__ = [
    "ADMISSION_CONTROL",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxRows",
    "SupportsTriggerAvailableNow",
    "require_admission_control",
]

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
except ImportError:  # Spark 4.0, 4.1
    ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """How much one micro-batch may read (Spark 4.2's class of the same name)."""

    @dataclass(frozen=True)
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """Everything there is."""

    @dataclass(frozen=True)
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """At most ``max_rows`` records."""

        max_rows: int

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """A mixin Spark 4.0 and 4.1 never call: their availableNow runs to the first latest offset."""

        def prepareForTriggerAvailableNow(self) -> None:
            return None


def require_admission_control(option: str) -> None:
    """Refuse ``option``, which needs Spark to pass the reader a read limit, on a Spark without one.

    Raises:
        InvalidConfigError: this pyspark has no admission control for Python streaming sources (before 4.2).
    """
    if not ADMISSION_CONTROL:
        import pyspark

        raise InvalidConfigError(
            f"option {option} needs Spark 4.2 or later (admission control for Python data sources); "
            f"this is Spark {pyspark.__version__}: leave it out, or upgrade"
        )
