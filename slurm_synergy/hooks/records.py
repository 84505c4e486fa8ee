"""What the node hooks keep: the prolog's record of a running job (node-local), the
sampler's running totals, and the per-job stats (GPUs, cgroup peaks) the epilog leaves
for reports.

All are JSON written whole (temporary file + rename); readers treat a file they cannot
parse as absent and say so, never as zeros. Reports read the stats as the epilogs' only
from a folder no one but its owner writes, and only files that owner wrote.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from slurm_synergy.fileio import UntrustedFile, atomic_write_text, read_untrusted
from slurm_synergy.hooks.trust import kept_by

JOB_ID = re.compile(r"^\d{1,12}$")
NODE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_RECORD_BYTES = 1 << 20


@dataclass(frozen=True)
class GpuStart:
    """One GPU as the prolog found and left it."""

    uuid: str
    pci_bus_id: str
    name: str
    limit_before_mw: int | None
    limit_set_mw: int | None       # None: the GPU refused or could not be read
    energy_start_mj: int | None    # None: no hardware energy counter
    note: str = ""


@dataclass(frozen=True)
class PrologRecord:
    job_id: str
    started: str                   # ISO time, UTC
    gpus: tuple[GpuStart, ...]
    sampler_pid: int | None = None


@dataclass(frozen=True)
class GpuUse:
    """One GPU over one job, as the epilog measured it."""

    uuid: str
    pci_bus_id: str
    name: str
    power_limit_w: float | None    # what the job ran at (set by the prolog)
    energy_j: float | None
    energy_source: str             # "counter" (NVML total energy), "power" (integrated), ""
    util_mean_pct: float | None
    sm_active_mean_pct: float | None
    mem_peak_mb: float | None
    samples: int
    limit_after_w: float | None    # what the epilog left it at
    note: str = ""
    mem_total_mb: float | None = None  # the board's memory (MiB), where the driver said


@dataclass(frozen=True)
class JobGpuStats:
    """One job on one node, as its epilog left it: its GPUs, and what its cgroup there
    counted (None where the sampler did not watch it or never read it; cgroup_note why)."""

    job_id: str
    node: str
    started: str | None
    ended: str
    gpus: tuple[GpuUse, ...] = field(default_factory=tuple)
    note: str = ""
    cgroup_mem_peak_mb: float | None = None
    cgroup_cpu_s: float | None = None
    cgroup_note: str = ""

    @property
    def energy_j(self) -> float | None:
        """The job's energy on this node (J): None unless every GPU's is known."""
        values = [g.energy_j for g in self.gpus]
        return sum(values) if values and None not in values else None  # type: ignore[arg-type]

    @property
    def util_mean_pct(self) -> float | None:
        """Mean utilisation (%) over the GPUs that have one."""
        values = [g.util_mean_pct for g in self.gpus if g.util_mean_pct is not None]
        return sum(values) / len(values) if values else None

    @property
    def sm_active_mean_pct(self) -> float | None:
        """Mean share of SMs busy (%) over the GPUs that have one."""
        values = [g.sm_active_mean_pct for g in self.gpus if g.sm_active_mean_pct is not None]
        return sum(values) / len(values) if values else None

    @property
    def mem_peak_mb(self) -> float | None:
        """The highest memory peak of any of its GPUs (MB)."""
        values = [g.mem_peak_mb for g in self.gpus if g.mem_peak_mb is not None]
        return max(values) if values else None

    @property
    def mem_full_share(self) -> float | None:
        """The largest share of its board's memory any of its GPUs held at its peak."""
        values = [g.mem_peak_mb / g.mem_total_mb for g in self.gpus
                  if g.mem_peak_mb is not None and g.mem_total_mb]
        return max(values) if values else None

    @property
    def power_limit_w(self) -> float | None:
        """The lowest limit any of its GPUs ran at."""
        values = [g.power_limit_w for g in self.gpus if g.power_limit_w is not None]
        return min(values) if values else None

    @classmethod
    def of_job(cls, parts: list["JobGpuStats"]) -> "JobGpuStats":
        """One job's records (one per node and run) as one, over all their GPUs."""
        first = parts[0]
        return cls(first.job_id, ",".join(sorted({p.node for p in parts})), first.started,
                   parts[-1].ended, tuple(g for p in parts for g in p.gpus),
                   "; ".join(sorted({p.note for p in parts if p.note})))


class RecordError(Exception):
    """A hook file that exists but cannot be read back."""


def _load(path: Path, owner: int | None = None) -> dict[str, Any]:
    try:
        data = json.loads(read_untrusted(path, MAX_RECORD_BYTES, owner))
    except UntrustedFile as e:
        raise RecordError(str(e)) from None
    except (OSError, ValueError, RecursionError) as e:
        raise RecordError(f"{path}: {e}") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: not a JSON object")
    return data


def _build(cls: type, data: dict[str, Any], path: Path) -> Any:
    try:
        return cls(**data)
    except TypeError as e:
        raise RecordError(f"{path}: {e}") from None


def write_json(path: Path, record: object, mode: int = 0o644, group: int | None = None) -> None:
    """Write a record as JSON, atomically, with file mode `mode` (and group `group`, if given)."""
    atomic_write_text(path, json.dumps(asdict(record), indent=1) + "\n", mode,  # type: ignore[call-overload]
                      group=group)


def read_prolog(path: Path) -> PrologRecord:
    """The prolog's record; RecordError where it does not parse."""
    data = _load(path)
    gpus = tuple(_build(GpuStart, g, path) for g in data.pop("gpus", []))
    return _build(PrologRecord, {**data, "gpus": gpus}, path)


def read_stats(path: Path, owner: int | None = None) -> JobGpuStats:
    """One stats record; RecordError unless it is a regular file (owned by `owner`, when
    given) that parses."""
    data = _load(path, owner)
    gpus = tuple(_build(GpuUse, g, path) for g in data.pop("gpus", []))
    return _build(JobGpuStats, {**data, "gpus": gpus}, path)


def stats_path(stats_dir: Path, job_id: str, node: str, restart: int = 0) -> Path:
    """One file per job, node and run: a job on several nodes gets one from each epilog,
    a requeued job (same id) one per run; reports add them up."""
    return stats_dir / (f"{job_id}.{node}.json" if restart == 0
                        else f"{job_id}.{node}.r{restart}.json")


def stats_for(stats_dir: Path, job_ids: set[str]) -> tuple[dict[str, list[JobGpuStats]], list[str]]:
    """The stats of these jobs (raw job ids), and a line for each file that is unreadable."""
    return StatsFolder(stats_dir).of(job_ids)


# A long sacct (a month of a large site) must not have the report hold a folder's worth of
# records it may not need: a record is about a kilobyte.
READ_AHEAD_MOST = 20_000


class StatsFolder:
    """The epilogs' stats folder as a report reads it: the records of the jobs it asks for,
    some of them perhaps read ahead, while sacct was still answering, in the order the
    jobs asked for most likely run."""

    def __init__(self, stats_dir: Path):
        self.dir = stats_dir
        self._read: dict[str, JobGpuStats | str] = {}   # file name: its record, or why not
        self._owner: int | None = None
        self._problem = ""
        try:
            folder = stats_dir.lstat()
        except FileNotFoundError:
            return
        why = kept_by(stats_dir, folder.st_uid)
        if why:
            # Anyone could have written (or swapped in) its records: none is the epilogs'.
            self._problem = (f"GPU stats folder {stats_dir} is not one only its owner "
                             f"writes ({why}): its records are ignored")
            return
        # The epilogs write as the folder's owner; another account's file is not theirs.
        self._owner = folder.st_uid

    def _names(self) -> list[str]:
        return [n for n in os.listdir(self.dir) if n.endswith(".json")]

    def _record(self, name: str) -> JobGpuStats | str:
        if name not in self._read:
            try:
                self._read[name] = read_stats(self.dir / name, self._owner)
            except RecordError as e:
                self._read[name] = f"GPU stats {e}"
        return self._read[name]

    def read_ahead(self, from_id: int | None, stop: Callable[[], bool],
                   most: int = READ_AHEAD_MOST) -> None:
        """Read up to `most` records until `stop()`: the jobs from `from_id` on, oldest
        first (a list of jobs: their array tasks and hetjob parts have later ids), or
        without one the newest first (a period, which most often ends now)."""
        if self._owner is None:
            return
        try:
            names = self._names()
        except OSError:
            return             # of() says why
        ids = [(int(job), n) for n in names if JOB_ID.match(job := job_of(n))]
        if from_id is None:
            ids.sort(reverse=True)
        else:
            ids = sorted(i for i in ids if i[0] >= from_id)
        for _, name in ids[:most]:
            if stop():
                return
            self._record(name)

    def of(self, job_ids: set[str]) -> tuple[dict[str, list[JobGpuStats]], list[str]]:
        """The records of these jobs (raw ids), and a line for each that is unreadable;
        listed again, for the epilogs that ended after any read ahead."""
        found: dict[str, list[JobGpuStats]] = {}
        if self._problem or self._owner is None:
            return found, [self._problem] if self._problem else []
        try:
            # Names first: a report's thousands of files, matched before any is opened.
            names = sorted(n for n in self._names() if job_of(n) in job_ids)
        except OSError as e:
            return found, [f"GPU stats folder {self.dir} cannot be listed: {e}"]
        problems = []
        for name in names:
            record = self._record(name)
            if isinstance(record, str):
                problems.append(record)
            else:
                found.setdefault(job_of(name), []).append(record)
        return found, problems


def not_this_accounts_alone(folder: Path) -> str:
    """Why the epilogs may not write and prune a stats folder ("" when they may): it must
    be the account's they run as, written by no one else, nor any folder above it
    (trust.kept_by); reports trust its records as theirs."""
    return kept_by(folder, os.geteuid())


def job_of(name: str) -> str:
    """The job id a stats file is named for (stats_path)."""
    return name.split(".", 1)[0]
