"""Jobs of every shape with known memory and CPU use, for the report's integration test
and its comparison with reportseff (bench/bench_report_shapes.py).

Each task runs HOLDER: it holds a given number of MB (written, so resident) and keeps a
core busy, or sleeps, for a given time, then writes what the kernel counted for it (its
peak resident memory and CPU time, getrusage) to a record. The truth a report line is
held to comes from those records: per node, the tasks of a step there together, the
worst node's over the 2 GB a node each shape asks; and the tasks' CPU seconds over the
line's cores times its run time. Cores shared with other jobs (the local cluster's nodes
share the machine's) change the CPU a task gets, not the truth, which is what it got; so
every shape runs in the partition of every node (MULTI_PARTITION), side by side.
"""

from __future__ import annotations

import json
import re
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_synergy.cluster.localbox import MULTI_PARTITION
from slurm_synergy.hooks.records import stats_path
from slurm_synergy.report.memory import expand_nodes

HOLDER = textwrap.dedent("""\
    import json, os, resource, socket, sys, time
    mb, seconds, busy = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "1"
    label = sys.argv[4] if len(sys.argv) > 4 else ""      # +N: a hetjob's component
    block = b"\\x01" * (mb << 20)      # written, so every page is resident
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not busy:
            time.sleep(0.2)
    use = resource.getrusage(resource.RUSAGE_SELF)
    env = {k: v for k, v in os.environ.items() if k.startswith("SLURM_")}
    line = (env["SLURM_JOB_ID"] + label if label else
            f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
            if "SLURM_ARRAY_TASK_ID" in env else env["SLURM_JOB_ID"])
    step = env.get("SLURM_STEP_ID", "batch")
    record = {"line": line, "step": step, "node": socket.gethostname(),
              "maxrss_mb": use.ru_maxrss / 1024, "cpu_s": use.ru_utime + use.ru_stime,
              "held_mb": len(block) >> 20}
    name = f"{line}.{step}.{env.get('SLURM_PROCID', '0')}.json"
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "records", name),
              "w") as fh:
        json.dump(record, fh)
    """)
ALLOWED_MB = 2048               # every shape asks --mem=2G a node


@dataclass(frozen=True)
class Shape:
    """A job to submit, and the report lines it makes (a job, an array task, a hetjob
    component)."""

    name: str
    options: tuple[str, ...]     # #SBATCH lines' options
    body: str                    # the batch script after them; $HOLD runs the holder
    lines: int = 1
    hetjob: tuple[str, ...] = field(default=())   # a second component's options
    sampled: bool = True         # False: a step shorter than sacct's sampling interval


SHAPES = (
    Shape("multi-node", ("--nodes=2", "--ntasks-per-node=1",
                         "--cpus-per-task=1", "--mem=2G"),
          "srun $HOLD 1000 25 1"),
    Shape("tasks-per-node", ("--nodes=1", "--ntasks=2", "--cpus-per-task=1", "--mem=2G"),
          "srun --ntasks=2 $HOLD 600 25 1\nsrun --ntasks=1 $HOLD 300 10 0"),
    Shape("steps", ("--nodes=1", "--ntasks=1", "--cpus-per-task=2", "--mem=2G"),
          "srun $HOLD 500 15 1\nsrun $HOLD 1200 15 1"),
    Shape("array", ("--array=0-2", "--cpus-per-task=1", "--mem=2G"),
          "$HOLD $((400 + 400 * SLURM_ARRAY_TASK_ID)) 15 1", lines=3),
    # Slurm gives each component nodes of its own.
    Shape("hetjob", ("--cpus-per-task=1", "--mem=2G"),
          "srun --het-group=0 $HOLD 500 15 1 +0 &\nsrun --het-group=1 $HOLD 900 15 1 +1 &\nwait",
          lines=2, hetjob=("--cpus-per-task=1", "--mem=2G")),
    Shape("short-step", ("--cpus-per-task=1", "--mem=2G"), "srun $HOLD 800 1 1\nsleep 12",
          sampled=False),
    # Its work in a step on one of its two cores, as srun without -c runs where it does
    # not take the job's cores a task: the report's advice says so.
    Shape("narrow-step", ("--nodes=1", "--ntasks=1", "--cpus-per-task=2", "--mem=2G"),
          "srun -c 1 $HOLD 300 15 1"),
)


def submit(slurm: Any, folder: Path) -> tuple[Path, dict[str, str]]:
    """Every shape submitted through `slurm` (slurm.Slurm), its script, the holder and the
    holder's records in `folder`; returns the holder and each shape's job id."""
    (folder / "records").mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    (folder / "records").chmod(0o777)        # the jobs' users write their records here
    holder = folder / "holder.py"
    holder.write_text(HOLDER)
    ids = {}
    for shape in SHAPES:
        path = folder / f"{shape.name}.sh"
        path.write_text(script(shape, holder))
        ids[shape.name] = slurm.sbatch(path)
    return holder, ids


def script(shape: Shape, holder: Path, python: str = "/usr/bin/python3") -> str:
    """The shape's batch script, running `holder` with `python`."""
    lines = ["#!/bin/bash", f"#SBATCH --job-name=shape-{shape.name}", "#SBATCH --time=5",
             "#SBATCH --output=/dev/null"]
    lines += [f"#SBATCH {o}" for o in (f"--partition={MULTI_PARTITION}", *shape.options)]
    if shape.hetjob:
        lines += ["#SBATCH hetjob",
                  *(f"#SBATCH {o}" for o in (f"--partition={MULTI_PARTITION}", *shape.hetjob))]
    lines += [f"HOLD='{python} {holder}'", shape.body, ""]
    return "\n".join(lines)


@dataclass(frozen=True)
class Truth:
    """What a report line's job used, from its tasks' own records."""

    worst_node_mb: float        # per node, a step's tasks there together; the worst node
    cpu_s: float

    def percent(self, cores: int, elapsed_s: float) -> tuple[float, float]:
        """(memory efficiency, CPU efficiency) in per cent."""
        return (100 * self.worst_node_mb / ALLOWED_MB,
                100 * self.cpu_s / (cores * elapsed_s) if cores and elapsed_s else 0.0)


def truths(holder: Path) -> dict[str, Truth]:
    """Each report line's truth, from the records the holders wrote."""
    records = [json.loads(p.read_text()) for p in (holder.parent / "records").glob("*.json")]
    out = {}
    for line in {r["line"] for r in records}:
        mine = [r for r in records if r["line"] == line]
        together: dict[tuple[str, str], float] = {}
        for r in mine:
            key = (r["node"], r["step"])
            together[key] = together.get(key, 0.0) + r["maxrss_mb"]
        out[line] = Truth(max(together.values()), sum(r["cpu_s"] for r in mine))
    return out


def lines_of(jobs: list[dict[str, Any]], job_id: str) -> list[dict[str, Any]]:
    """The report's lines (its JSON jobs) of the job `job_id` sbatch gave: the job, or its
    array tasks or hetjob components, in order."""
    return sorted((j for j in jobs if re.match(rf"^{job_id}([_+]\d+)?$", j["job_id"])),
                  key=lambda j: j["job_id"])


def node_stats_done(stats_dir: Path, lines: list[dict[str, Any]], timeout: float = 120) -> None:
    """Every node's epilog stats of these report lines (`synergy report --format json`
    jobs) in `stats_dir`, the cluster's folder of them: a job ends in sacct before the
    last of its epilogs has run."""
    want = [stats_path(stats_dir, j["raw_id"], node) for j in lines
            for node in expand_nodes(j["nodes"])]
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in want):
        if time.monotonic() > deadline:
            raise AssertionError(f"no epilog stats: {[str(p) for p in want if not p.exists()]}")
        time.sleep(0.3)
