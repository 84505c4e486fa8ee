"""The submission ledger: which CSV row became which Slurm job.

A row is identified by its file, position and cells, so submitting the same file
again skips rows already submitted, while an edited row counts as a new job.

An entry is written before its sbatch is sent, so a crash at any moment leaves a
trace: `sending` (sbatch not answered), `queued` (Slurm gave a job id) or
`cancelling` (the submission failed and the job must go). Each sbatch call carries
its own tag in the job's comment (`sub=<tag>`): reconciling with Slurm finds the
job by that tag, never by an id Slurm may have reused after losing its state.
"""

from __future__ import annotations

import json
import secrets
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterator

from slurm_synergy import paths
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.fileio import PRIVATE, atomic_write_text, locked, private_folder
from slurm_synergy.model.jobspec import JobSpec

VERSION = 2
STATES = ("sending", "queued", "cancelling")


@dataclass(frozen=True)
class LedgerEntry:
    job_id: str           # "" until sbatch answers; array tasks as 12_3
    name: str
    fingerprint: str
    script: str
    submitted_at: float   # when the sbatch was about to be sent
    tag: str = ""         # this sbatch call's mark in the job comment ("" before version 2)
    state: str = "queued"
    task: int = -1        # the row's index in its array job, -1 when not an array


def row_key(spec: JobSpec) -> str:
    """A row's key in the ledger: its file, row number and the digest of its cells."""
    return f"{Path(spec.source.file).resolve()}#{spec.source.row}#{spec.row_digest}"


def new_tag() -> str:
    """A tag no other sbatch call has: 12 random hex digits."""
    return secrets.token_hex(6)


def ledger_path(cluster: str) -> Path:
    """One ledger per cluster: its job ids are that cluster's (paths.cluster_dir)."""
    return paths.cluster_dir(cluster) / "ledger.json"


class Ledger:
    def __init__(self, path: Path):
        self.path = path
        self.entries: dict[str, LedgerEntry] = {}

    @contextmanager
    def transaction(self) -> Iterator["Ledger"]:
        """Hold the ledger for a whole submission, so two at once cannot both submit a row."""
        with locked(self.path.with_suffix(".lock")):
            self.entries = self._read()
            yield self

    def _read(self) -> dict[str, LedgerEntry]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
            if data.get("version") not in (1, VERSION):
                raise ValueError(f"version {data.get('version')!r}, expected {VERSION}")
            entries = {k: LedgerEntry(**v) for k, v in data["rows"].items()}
            bad = [e for e in entries.values() if e.state not in STATES]
            if bad:
                raise ValueError(f"state {bad[0].state!r} of row {bad[0].name}")
            return entries
        except (ValueError, KeyError, TypeError) as exc:
            raise SynergyError(f"the submission ledger {self.path} is corrupt ({exc}); move it "
                               "aside to start a new one") from exc

    def get(self, spec: JobSpec) -> LedgerEntry | None:
        """The row's entry, None where it was never submitted (or has been forgotten)."""
        return self.entries.get(row_key(spec))

    def intend(self, spec: JobSpec, script: Path, tag: str, task: int = -1) -> None:
        """Note a row about to be sent, before its sbatch."""
        self.entries[row_key(spec)] = LedgerEntry("", spec.name, spec.fingerprint, str(script),
                                            time.time(), tag, "sending", task)

    def record(self, spec: JobSpec, job_id: str, script: Path) -> None:
        """Note a row Slurm answered for."""
        key = row_key(spec)
        entry = self.entries.get(key)
        if entry is None:
            entry = LedgerEntry("", spec.name, spec.fingerprint, str(script), time.time())
        self.entries[key] = replace(entry, job_id=job_id, state="queued")

    def mark(self, key: str, state: str, job_id: str | None = None) -> None:
        """Set an entry's state, and its job id where given."""
        entry = self.entries[key]
        self.entries[key] = replace(entry, state=state,
                                    job_id=entry.job_id if job_id is None else job_id)

    def forget(self, key: str) -> None:
        """Drop an entry, so that its row may be submitted again."""
        self.entries.pop(key, None)

    def save(self) -> None:
        """Write the ledger (0600), whole."""
        data = {"version": VERSION, "rows": {k: asdict(v) for k, v in self.entries.items()}}
        private_folder(self.path.parent)
        atomic_write_text(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n",
                          PRIVATE)
