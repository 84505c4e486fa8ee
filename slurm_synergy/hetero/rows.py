"""A job list's `hetero` cell planned into the job's two parts, or the problems that stop it.

The cell names each GPU type, its GPUs and its trace: `a10:1=a10.json t4:1=t4.json`
(trace paths relative to the job list). The plan is made when the list is read, so a
trace that cannot be read or a batch that cannot be split stops the whole submission,
with the row and column named, before anything reaches Slurm.
"""

from __future__ import annotations

import re
from pathlib import Path

from slurm_synergy.hetero.plan import Group, PlanError, best_plan
from slurm_synergy.hetero.traces import read_trace
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.jobspec import HetPart
from slurm_synergy.model.policy import load_site
from slurm_synergy.paths import policy_path

ENTRY_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,31}):(\d{1,2})=(\S+)$")
FORMAT = "TYPE:GPUS=TRACE for each of two GPU types, e.g. a10:1=a10.json t4:1=t4.json"


def _trace_path(text: str, base: Path) -> Path | None:
    path = Path(text) if Path(text).is_absolute() else base / text
    return path.resolve() if path.is_file() else None


def plan_cell(cell: str, global_batch: int, base: Path) -> tuple[tuple[HetPart, ...], list[str]]:
    """The parts of a job over two GPU types, or the problems (each a sentence)."""
    entries = cell.split()
    matches = [ENTRY_RE.match(e) for e in entries]
    if len(entries) != 2 or not all(matches):
        return (), [f"{cell!r} is not {FORMAT}"]
    problems: list[str] = []
    named: list[tuple[str, int, Path]] = []
    for m in matches:
        assert m is not None
        gpu_type, gpus, text = m.group(1), int(m.group(2)), m.group(3)
        path = _trace_path(text, base)
        if gpus < 1:
            problems.append(f"{gpu_type}: at least 1 GPU, not {gpus}")
        if path is None:
            problems.append(f"{gpu_type}'s trace {text} is not a file (paths are relative "
                            "to the job list)")
        else:
            named.append((gpu_type, gpus, path))
    types = [m.group(1) for m in matches if m]
    if types[0] == types[1]:
        problems.append(f"{types[0]} is named twice; give two different GPU types")
    if problems:
        return (), problems
    try:
        policy, catalog = load_site(policy_path())
        groups = []
        for gpu_type, gpus, path in named:
            if gpu_type not in catalog.types:
                raise PlanError(f"the site catalog has no {gpu_type} to take its idle power "
                                f"from ({catalog.problem or 'add a [gpu.' + gpu_type + '] table'})")
            groups.append(Group(read_trace(path, gpu_type), gpus, catalog.types[gpu_type].idle_w))
        plan = best_plan(groups, global_batch, policy.zeus_eta)
    except SynergyError as e:
        return (), [str(e)]
    idle = [s.gpu_type for s in plan.shares if s.batch == 0]
    if idle:
        return (), [f"the plan gives {idle[0]} no samples (it is better left out): submit "
                    f"the job on the other type alone"]
    return tuple(HetPart(s.gpu_type, s.gpus, s.batch, s.micro_batch, s.accumulation,
                         int(round(s.power_limit_w)), str(path))
                 for s, (_, _, path) in zip(plan.shares, named)), []
