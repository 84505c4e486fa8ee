"""Hold a running job's processes to fewer of its cores, and give them all back.

Slurm cannot shrink a running job's cgroup, but every thread's CPU affinity can be
narrowed within it: a window of the run at k cores is every thread of every process of
the job held to the same k of the allocation's CPUs. Threads, not processes: Linux keeps
an affinity per thread, and a thread started before the change keeps its own. A process
forked during a window inherits its parent's narrow set, so a window's processes are
looked at again while it lasts, and once more when the cores are given back.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import psutil

SetAffinity = Callable[[int, set[int]], None]


@dataclass
class Pinned:
    """What one pass over the job's threads did."""

    threads: int = 0                                  # threads now on the asked CPUs
    failed: list[str] = field(default_factory=list)   # "pid/tid: why", for the profile


def job_pids(top: int) -> list[int]:
    """The process `top` and every process beneath it, as they are now."""
    try:
        root = psutil.Process(top)
        return [top, *(p.pid for p in root.children(recursive=True))]
    except psutil.Error:
        return []


def threads_of(pid: int) -> list[int]:
    """The thread ids of process `pid` now; none once it has ended."""
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []                   # ended meanwhile


def pin(pids: Iterable[int], cpus: set[int],
        set_affinity: SetAffinity = os.sched_setaffinity) -> Pinned:
    """Every thread of `pids` onto `cpus`. A thread that ends meanwhile is no fault; one
    that refuses (another user's, a CPU outside its cgroup) is named in `failed`."""
    done = Pinned()
    for pid in pids:
        for tid in threads_of(pid):
            try:
                set_affinity(tid, cpus)
            except ProcessLookupError:
                continue
            except OSError as e:
                done.failed.append(f"{pid}/{tid}: {e.strerror or e}")
                continue
            done.threads += 1
    return done


def first_cpus(allowed: set[int], k: int) -> set[int]:
    """The k lowest of the allocation's CPUs: the same k for every window of that size."""
    return set(sorted(allowed)[:k])


def job_cores_here(env: Mapping[str, str]) -> int | None:
    """The cores the job holds on this node, from Slurm's SLURM_JOB_CPUS_PER_NODE ("4",
    "72(x2),36": a count per node, in node order) at SLURM_NODEID; None where unset or
    malformed. A step inherits it from the job, whatever cores the step itself has."""
    counts: list[int] = []
    for part in env.get("SLURM_JOB_CPUS_PER_NODE", "").split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if m is None:
            return None
        counts += [int(m[1])] * int(m[2] or 1)
        if len(counts) > 100000:
            return None
    node = env.get("SLURM_NODEID", "0")
    return counts[int(node)] if node.isdigit() and int(node) < len(counts) else None


def confined_line(env: Mapping[str, str], cpus: int) -> str:
    """What to say where this process has `cpus`, fewer than the job holds here (srun
    without -c in a job of several cores a task); "" where it has them all."""
    held = job_cores_here(env)
    if held is None or cpus >= held:
        return ""
    return (f"this step runs on {cpus} of the job's {held} cores here (srun without -c in a "
            "job of several cores a task): the job pays for cores its training never has; "
            "`srun -c $SLURM_CPUS_PER_TASK`, or export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK "
            "before srun")
