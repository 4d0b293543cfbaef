"""What a maintenance run did: per partition (:class:`~logstore.log.file_changes.PartitionReport`), summed per run."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from logstore.log.file_changes import PartitionReport, Progress, print_progress

__all__ = ["PartitionReport", "Progress", "RunReport", "print_progress"]


@dataclass
class RunReport:
    """A job run over one or more topics."""

    job: str
    partitions: list[PartitionReport] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    """Topic → error of a topic the job could not finish (others still ran)."""
    seconds: float = 0.0

    @property
    def files_removed(self) -> int:
        return sum(p.files_removed for p in self.partitions)

    @property
    def bytes_removed(self) -> int:
        return sum(p.bytes_removed for p in self.partitions)

    @property
    def files_added(self) -> int:
        return sum(p.files_added for p in self.partitions)

    @property
    def bytes_added(self) -> int:
        return sum(p.bytes_added for p in self.partitions)

    @property
    def records_removed(self) -> int:
        return sum(p.records_removed for p in self.partitions)

    def log_start_offsets(self) -> dict[str, dict[int, int]]:
        """Topic → partition → log start offset after the run."""
        out: dict[str, dict[int, int]] = {}
        for p in self.partitions:
            out.setdefault(p.topic, {})[p.partition] = p.log_start_offset
        return out

    def summary(self) -> str:
        """A short human summary: files and bytes removed and written, new log start offsets."""
        starts = "; ".join(
            f"{t}: " + ", ".join(f"{p}→{o}" for p, o in sorted(parts.items()))
            for t, parts in sorted(self.log_start_offsets().items())
        )
        line = (
            f"{self.job}: removed {self.files_removed} files ({self.bytes_removed} bytes, "
            f"{self.records_removed} records), wrote {self.files_added} files ({self.bytes_added} bytes) "
            f"in {self.seconds:.2f}s; log start offsets: {starts or '-'}"
        )
        if self.errors:
            line += "; failed: " + "; ".join(f"{t}: {e}" for t, e in sorted(self.errors.items()))
        return line

    def to_dict(self) -> dict[str, object]:
        return {
            "job": self.job,
            "files_removed": self.files_removed,
            "bytes_removed": self.bytes_removed,
            "files_added": self.files_added,
            "bytes_added": self.bytes_added,
            "records_removed": self.records_removed,
            "seconds": round(self.seconds, 3),
            "log_start_offsets": {t: {str(p): o for p, o in v.items()} for t, v in self.log_start_offsets().items()},
            "errors": self.errors,
            "partitions": [asdict(p) for p in self.partitions],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())
