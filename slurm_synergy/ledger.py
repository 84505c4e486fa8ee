"""The submission ledger: which CSV row became which Slurm job.

A row is identified by its file, position and cells, so submitting the same file
again skips rows already submitted, while an edited row counts as a new job.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from . import paths
from .errors import SynergyError
from .fileio import atomic_write_text, locked
from .jobspec import JobSpec

VERSION = 1


@dataclass(frozen=True)
class Entry:
    job_id: str
    name: str
    fingerprint: str
    script: str
    submitted_at: float


def row_key(spec: JobSpec) -> str:
    return f"{Path(spec.source.file).resolve()}#{spec.source.row}#{spec.row_digest}"


class Ledger:
    def __init__(self, path: Path | None = None):
        self.path = path or paths.home_dir() / "ledger.json"
        self.entries: dict[str, Entry] = {}

    @contextmanager
    def transaction(self) -> Iterator["Ledger"]:
        """Hold the ledger for a whole submission, so two at once cannot both submit a row."""
        with locked(self.path.with_suffix(".lock")):
            self.entries = self._read()
            yield self

    def _read(self) -> dict[str, Entry]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
            if data.get("version") != VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {VERSION}")
            return {k: Entry(**v) for k, v in data["rows"].items()}
        except (ValueError, KeyError, TypeError) as exc:
            raise SynergyError(f"the submission ledger {self.path} is corrupt ({exc}); move it "
                               "aside to start a new one") from exc

    def get(self, spec: JobSpec) -> Entry | None:
        return self.entries.get(row_key(spec))

    def record(self, spec: JobSpec, job_id: str, script: Path) -> None:
        self.entries[row_key(spec)] = Entry(job_id, spec.name, spec.fingerprint, str(script),
                                            time.time())

    def save(self) -> None:
        data = {"version": VERSION, "rows": {k: asdict(v) for k, v in self.entries.items()}}
        atomic_write_text(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n")
