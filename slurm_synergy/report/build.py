"""The report: one sacct call, joined with GPU stats, profiles, decisions and chains."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from slurm_synergy.model.errors import SynergyError
from slurm_synergy.slurm import node_shape
from slurm_synergy.model.policy import site_catalog
from slurm_synergy.model.profile import Profile
from slurm_synergy.paths import policy_path
from slurm_synergy.slurm import Slurm
from slurm_synergy.report import accounting, advice, enrich, summary


@dataclass
class Report:
    period: str
    jobs: pd.DataFrame
    workloads: pd.DataFrame
    cluster: dict[str, Any]
    advice: list[dict[str, Any]]
    profiles: dict[str, Profile] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)   # what could not be joined, and why

    @property
    def empty(self) -> bool:
        return self.jobs.empty


def build(slurm: Slurm, job_ids: Sequence[str] = (), since: str | None = None,
          until: str | None = None, users: Sequence[str] = (),
          stats_dir: Path | None = None) -> Report:
    period = (f"jobs {','.join(job_ids)}" if job_ids else
              f"{since} to {until or 'now'}") + (f", users {','.join(users)}" if users else "")
    jobs = accounting.jobs_frame(accounting.fetch(slurm, job_ids, since, until, users))
    if jobs.empty:
        return Report(period, jobs, pd.DataFrame(), {}, [])
    cluster = slurm.cluster_name()
    stats, problems = enrich.read_stats_of(jobs, cluster, stats_dir)
    enrich.add_gpu_stats(jobs, stats)
    enrich.add_cgroup_use(jobs, stats)
    enrich.add_throughput(jobs, cluster)
    problems += enrich.add_chains(jobs, cluster)
    profiles, more = enrich.load_profiles(jobs)
    problems += more
    catalog = site_catalog(policy_path())
    if catalog.faulty:
        problems.append(catalog.problem)
    enrich.add_gpu_memory(jobs, profiles, catalog)
    try:
        shape = node_shape(slurm)
        enrich.add_counterfactual(jobs, profiles, shape)
    except SynergyError as e:    # slurmctld down: the accounting part still stands
        problems.append(f"no GPU-proportional comparison: {e}")
        enrich.add_counterfactual(jobs, {}, None)
    return Report(period, jobs, summary.workloads(jobs), summary.cluster(jobs),
                  advice.lines(jobs), profiles, problems)
