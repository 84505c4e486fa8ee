"""A job's cgroup on this node: its memory high-water mark and CPU time, read while it
lives.

Slurm removes the job's cgroup when its last step ends, before the node epilog runs, so
the peak cannot be read there: the prolog's sampler reads it every `POLL_S` and keeps the
last reading. The memory peak is the kernel's (every task and step on the node together,
page cache included, as the cgroup's limit counts it), so it is exact where sacct's
sampled RSS misses a short step; it only grows, so a reading after the peak has it. CPU
time also only grows: the last reading misses at most one poll's worth.

cgroup v1 (Slurm's cgroup/v1): memory/ and cpuacct/ under slurm[_<node>]/uid_<uid>/job_<id>
(memory.max_usage_in_bytes, cpuacct.usage in ns). cgroup v2 (cgroup/v2): job_<id> under
slurmstepd's scope (memory.peak, Linux 5.19 and later; cpu.stat's usage_usec). Slurm's
cgroup_v2.c (22.05 to 26.05) puts that scope at <slice>/slurmstepd.scope, or
<slice>/<node>_slurmstepd.scope where one host runs several slurmd; the slice is
system.slice, or from 26.05 cgroup.conf's CgroupSlice.
"""

from __future__ import annotations

import glob
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

CGROUP_ROOT = Path("/sys/fs/cgroup")
POLL_S = 0.5
# Until the cgroup appears: a job of a fraction of a second may come and go between two
# readings at POLL_S, and looking for a folder costs a few stat calls.
FIND_POLL_S = 0.05
# A job whose cgroup has not appeared by then has none here (no cgroup plugin, or one
# this does not know): the watch ends with a note.
FIND_WITHIN_S = 60.0


@dataclass(frozen=True)
class CgroupFiles:
    """Where one job's readings are on this node."""

    mem_peak: Path          # bytes
    cpu: Path               # v1: ns in cpuacct.usage; v2: usage_usec in cpu.stat
    v2: bool

    def gone(self) -> bool:
        """Whether the job's cgroup folder has been removed (Slurm does once its last step ends)."""
        return not self.mem_peak.parent.is_dir()


@dataclass(frozen=True)
class CgroupUse:
    """The job's use on one node, as its cgroup counted it."""

    mem_peak_mb: float | None
    cpu_s: float | None
    note: str = ""


def find(job_id: str, uid: str, node: str, root: Path = CGROUP_ROOT) -> CgroupFiles | None:
    """The job's cgroup files here, or None while there are none (yet)."""
    job = f"job_{job_id}"
    # One slurmd per host names its tree "slurm"; several on one host, "slurm_<node>".
    for top in (f"slurm_{node}", "slurm"):
        mem = root / "memory" / top / f"uid_{uid}" / job
        cpu = root / "cpuacct" / top / f"uid_{uid}" / job
        if mem.is_dir() and cpu.is_dir():
            return CgroupFiles(mem / "memory.max_usage_in_bytes", cpu / "cpuacct.usage", False)
    # This node's scope first: with several slurmd on a host, a job on two of its nodes
    # has a cgroup under each node's scope.
    for scope in (f"{glob.escape(node)}_slurmstepd.scope", "slurmstepd.scope"):
        for folder in sorted(root.glob(f"*.slice/{scope}/{job}")):
            if (folder / "memory.peak").exists():
                return CgroupFiles(folder / "memory.peak", folder / "cpu.stat", True)
    return None


def read(files: CgroupFiles) -> CgroupUse | None:
    """One reading; None once the cgroup is gone (or a file of it unreadable)."""
    try:
        peak = int(files.mem_peak.read_text().split()[0])
        text = files.cpu.read_text()
        if files.v2:
            usec = next(int(v) for k, v in (line.split()[:2] for line in text.splitlines()
                                             if line.strip()) if k == "usage_usec")
            cpu_s = usec / 1e6
        else:
            cpu_s = int(text.split()[0]) / 1e9
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return CgroupUse(peak / (1 << 20), cpu_s)


class Watch:
    """A job's cgroup followed from the prolog until it goes: `poll` every POLL_S, and
    `use` the last reading."""

    def __init__(self, job_id: str, uid: str, node: str, root: Path = CGROUP_ROOT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.job_id, self.uid, self.node, self.root, self.clock = job_id, uid, node, root, clock
        self.since = clock()
        self.files: CgroupFiles | None = None
        self.last: CgroupUse | None = None
        self.done = False
        self.note = ""

    def interval(self) -> float:
        """Seconds to the next poll (none once the watch is over)."""
        if self.done:
            return math.inf
        return FIND_POLL_S if self.files is None else POLL_S

    def poll(self) -> None:
        """Look for the cgroup, or take one reading, keeping each figure's highest so far; ends
        the watch once the cgroup is gone or never appeared within FIND_WITHIN_S."""
        if self.done:
            return
        if self.files is None:
            self.files = find(self.job_id, self.uid, self.node, self.root)
            if self.files is None:
                if self.clock() - self.since > FIND_WITHIN_S:
                    self.done = True
                    self.note = f"no cgroup of the job on this node within {FIND_WITHIN_S:g} s"
                return
        reading = read(self.files)
        if reading is None:
            self.done = self.files.gone()
            return
        # Both only grow; a reading taken while the cgroup was torn down may not.
        prev = self.last
        self.last = reading if prev is None else CgroupUse(
            max(prev.mem_peak_mb or 0.0, reading.mem_peak_mb or 0.0),
            max(prev.cpu_s or 0.0, reading.cpu_s or 0.0))

    def use(self) -> CgroupUse:
        """The last reading; without one, a CgroupUse of nothing whose note says why."""
        if self.last is not None:
            return self.last
        return CgroupUse(None, None, self.note or "the job's cgroup was never read")
