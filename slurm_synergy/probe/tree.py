"""A process tree's memory: what the probe's supervisor and the in-run wrapper read.

Each look sums the tree's processes: their resident memory; their proportional share
(Pss, each page once); and their own memory, anonymous and shared pages once plus the
file pages of the process that maps most, counted whole. Peaks are kept across looks.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import psutil

from slurm_synergy.probe.records import TreeMemory

# smaps_rollup came with Linux 4.14; without it a tree's memory is its RSS summed.
SMAPS_ROLLUP = Path("/proc/self/smaps_rollup").exists()


class PageKib(NamedTuple):
    """A process's mapped memory in KiB, from smaps_rollup and status."""

    pss: int            # every page it maps, each shared page in proportion to its mappers
    own: int | None     # Pss_Anon + Pss_Shmem: pages only the job's own processes share
    #                     (None before Linux 5.9, which does not split Pss)
    file: int           # RssFile: its resident file pages (libraries), counted whole


def page_kib(pid: int) -> PageKib:
    """A process's memory. A file page (libtorch's, say) is shared with every process on
    the node that maps the same file, other users' jobs too, so its Pss falls as they
    come; anonymous and shared memory it shares only with the processes it forked.
    OSError when the process maps nothing any more (gone, a zombie, exiting) or is not
    ours to read."""
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as fh:
        for line in fh:
            name, _, rest = line.partition(":")
            if name in ("Pss", "Pss_Anon", "Pss_Shmem"):
                fields[name] = int(rest.split()[0])
    if "Pss" not in fields:
        raise ProcessLookupError(f"process {pid} maps no memory")
    with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
        for line in fh:
            if line.startswith("RssFile:"):
                fields["RssFile"] = int(line.split()[1])
    split = "Pss_Anon" in fields and "Pss_Shmem" in fields
    return PageKib(fields["Pss"], fields["Pss_Anon"] + fields["Pss_Shmem"] if split else None,
                   fields.get("RssFile", 0))


@dataclass
class ProcessTree:
    """The processes seen beneath the probe, and their memory."""

    top: int
    # Read the proportional memory at most this often (0: at every look). smaps_rollup
    # walks a process's page tables under its memory lock: about 5 ms for a torch
    # trainer, 4% of a core at four looks a second, taken from the job it watches.
    pss_every_s: float = 0.0
    seen: dict[int, tuple[int, str]] = field(default_factory=dict)   # pid: (ppid, cmdline)
    # The tree's resident memory summed over its processes at its peak: a page that
    # loader workers share with their trainer counts once in each (twice or more the
    # job's real use with a few workers); the last fallback.
    peak_rss_mb: float = 0.0
    # The same with each page once (Pss), shared pages in proportion to all their
    # mappers on the node: lower while other jobs map the same libraries. The fallback
    # where the next is unknown; None where the kernel cannot tell it.
    peak_pss_mb: float | None = 0.0
    # The tree's own memory at its peak: its anonymous and shared memory, each page once,
    # and the file pages of the process that maps most, counted whole (a worker maps a
    # subset of its trainer's libraries, a rank the same as its siblings). What a cgroup
    # of its own is charged on a node where nothing else maps those files; whatever
    # else runs there, the same. None where the kernel does not split Pss (before 5.9).
    peak_own_mb: float | None = 0.0
    # The part of it that is anonymous or shared memory; None where unknown.
    peak_anon_mb: float | None = 0.0
    _pss_at: float = field(default=-math.inf, repr=False)

    @property
    def footprint_mb(self) -> float:
        """The tree's peak memory (TreeMemory.footprint_mb)."""
        return self.memory().footprint_mb

    def memory(self) -> TreeMemory:
        """Its peaks so far, None where unknown."""
        return TreeMemory(self.peak_rss_mb, self.peak_pss_mb or None,
                          self.peak_own_mb or None, self.peak_anon_mb or None)

    def peaks(self) -> tuple[float, float | None, float | None, float | None]:
        """Its peaks so far, as restore() takes them back."""
        return self.peak_rss_mb, self.peak_pss_mb, self.peak_own_mb, self.peak_anon_mb

    def restore(self, peaks: tuple[float, float | None, float | None, float | None]) -> None:
        """Its peaks back to `peaks` (from peaks()): the looks since are not counted."""
        self.peak_rss_mb, self.peak_pss_mb, self.peak_own_mb, self.peak_anon_mb = peaks

    def look(self, proportional: bool = False) -> None:
        """Read the tree's memory; its proportional memory too where `proportional`, or
        where pss_every_s has passed since it was last read."""
        try:
            root = psutil.Process(self.top)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        now = time.monotonic()
        proportional = proportional or now - self._pss_at >= self.pss_every_s
        if proportional:
            self._pss_at = now
        rss, pss_kib, anon_kib, file_kib, anon_known = 0, 0, 0, 0, True
        for p in procs:
            try:
                with p.oneshot():
                    rss += p.memory_info().rss
                    # A process still being started shows no command line yet
                    # (probe/cmdfiles.py): it is named at a later look.
                    if p.pid not in self.seen and (argv := p.cmdline()):
                        self.seen[p.pid] = (p.ppid(), " ".join(" ".join(argv).split()))
            except psutil.Error:
                continue
            if not (proportional and SMAPS_ROLLUP):
                continue
            try:
                pages = page_kib(p.pid)
            except OSError:
                # A loader worker that ended at its epoch's end, not yet reaped: it holds
                # no pages. Not a reason to call the tree's memory unknown.
                continue
            pss_kib += pages.pss
            file_kib = max(file_kib, pages.file)
            if pages.own is None:
                anon_known = False
            else:
                anon_kib += pages.own
        self.peak_rss_mb = max(self.peak_rss_mb, rss / 2**20)
        if not proportional:
            return
        if not SMAPS_ROLLUP:
            self.peak_pss_mb = self.peak_own_mb = self.peak_anon_mb = None
            return
        if self.peak_pss_mb is not None:
            self.peak_pss_mb = max(self.peak_pss_mb, pss_kib / 1024)
        if not anon_known:
            self.peak_own_mb = self.peak_anon_mb = None
        elif self.peak_anon_mb is not None and self.peak_own_mb is not None:
            self.peak_anon_mb = max(self.peak_anon_mb, anon_kib / 1024)
            self.peak_own_mb = max(self.peak_own_mb, (anon_kib + file_kib) / 1024)

    def unprobed(self, probed: set[int]) -> list[str]:
        """Commands started beneath the script that ran without the hooks: not probed,
        not the command itself, and not a fork of a probed process (a loader worker)."""
        out = []
        for pid, (ppid, cmd) in self.seen.items():
            if pid in probed or pid == self.top:
                continue
            if ppid in self.seen and self.seen[ppid][1] == cmd:
                continue
            out.append(cmd[:100] + ("..." if len(cmd) > 100 else ""))
        return out[:5]
