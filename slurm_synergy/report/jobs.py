"""Per-job report rows: one sacct call for the jobs or the period, joined with the GPU
stats the node epilogs left (energy, utilisation, memory, power limit)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .. import paths
from ..hooks.records import JobGpuStats, stats_for
from ..slurm import Slurm

FIELDS = ("JobIDRaw", "JobID", "JobName", "User", "State", "ExitCode", "Elapsed",
          "AllocCPUS", "AllocTRES", "NodeList", "Comment")
J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class JobRow:
    job_id: str                  # as sacct shows it (123_4 for an array task)
    raw_id: str                  # the id slurmd gives hooks
    name: str
    user: str
    state: str
    exit_code: str
    elapsed: str
    cpus: int
    gpus: int
    nodes: str
    gpu_energy_j: float | None
    gpu_util_pct: float | None
    gpu_sm_active_pct: float | None
    gpu_mem_peak_mb: float | None
    gpu_power_limit_w: float | None
    gpu_note: str                # why a figure is missing

    @property
    def gpu_energy_kwh(self) -> float | None:
        return None if self.gpu_energy_j is None else self.gpu_energy_j / J_PER_KWH


def _tres(alloc: str, key: str) -> str:
    match = re.search(rf"(?:^|,){re.escape(key)}=([^,]+)", alloc)
    return match.group(1) if match else ""


def _gpu_fields(gpus: int, stats: list[JobGpuStats] | None) -> dict[str, object]:
    empty: dict[str, object] = {"gpu_energy_j": None, "gpu_util_pct": None,
                                "gpu_sm_active_pct": None, "gpu_mem_peak_mb": None,
                                "gpu_power_limit_w": None}
    if not gpus:
        return {**empty, "gpu_note": ""}
    if not stats:
        return {**empty, "gpu_note": "no GPU stats (node epilog not installed, or job not ended)"}
    uses = [g for s in stats for g in s.gpus]
    if not uses:
        return {**empty, "gpu_note": "; ".join(sorted({s.note for s in stats if s.note}))}
    energies = [g.energy_j for g in uses]
    utils = [g.util_mean_pct for g in uses if g.util_mean_pct is not None]
    sms = [g.sm_active_mean_pct for g in uses if g.sm_active_mean_pct is not None]
    mems = [g.mem_peak_mb for g in uses if g.mem_peak_mb is not None]
    limits = [g.power_limit_w for g in uses if g.power_limit_w is not None]
    return {
        "gpu_energy_j": sum(energies) if None not in energies else None,  # type: ignore[arg-type]
        "gpu_util_pct": sum(utils) / len(utils) if utils else None,
        "gpu_sm_active_pct": sum(sms) / len(sms) if sms else None,
        "gpu_mem_peak_mb": max(mems) if mems else None,
        "gpu_power_limit_w": min(limits) if limits else None,
        "gpu_note": "; ".join(sorted({g.note for g in uses if g.note})),
    }


def gather(slurm: Slurm, job_ids: Sequence[str] = (), since: str | None = None,
           until: str | None = None, users: Sequence[str] = (),
           stats_dir: Path | None = None) -> tuple[list[JobRow], list[str]]:
    """The report's rows and a line for each GPU stats file that could not be read."""
    rows = slurm.sacct(job_ids, FIELDS, since=since, until=until, users=users)
    stats, problems = stats_for(stats_dir or paths.gpu_stats_dir(), {r["JobIDRaw"] for r in rows})
    out = []
    for r in rows:
        gpus = int(_tres(r["AllocTRES"], "gres/gpu") or 0)
        out.append(JobRow(
            job_id=r["JobID"], raw_id=r["JobIDRaw"], name=r["JobName"], user=r["User"],
            state=r["State"], exit_code=r["ExitCode"], elapsed=r["Elapsed"],
            cpus=int(r["AllocCPUS"] or 0), gpus=gpus, nodes=r["NodeList"],
            **_gpu_fields(gpus, stats.get(r["JobIDRaw"]))))  # type: ignore[arg-type]
    return out, problems
