"""The report: one sacct call, joined with GPU stats, profiles, decisions and chains."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from slurm_synergy.model.engine import NodeShape
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
    # What needs no job is looked up while sacct runs (it waits on slurmdbd, not on us).
    with ThreadPoolExecutor(max_workers=1) as pool:
        query = pool.submit(accounting.fetch, slurm, job_ids, since, until, users)
        try:
            cluster = slurm.cluster_name()
            shape: NodeShape | SynergyError = node_shape(slurm)
        except SynergyError as e:    # slurmctld down: the accounting part still stands
            cluster, shape = "", e
        catalog = site_catalog(policy_path())
        rows = query.result()
        cluster = cluster or slurm.cluster_name()
        # The node stats are read (mostly waiting on files) while the lines are folded.
        reading = pool.submit(enrich.read_stats_of, accounting.job_ids(rows), cluster,
                              stats_dir)
        jobs = accounting.jobs_frame(rows)
        stats, problems = reading.result()
    if jobs.empty:
        return Report(period, jobs, pd.DataFrame(), {}, [])
    enrich.add_gpu_stats(jobs, stats)
    enrich.add_cgroup_use(jobs, stats)
    enrich.add_throughput(jobs, cluster)
    problems += enrich.add_chains(jobs, cluster)
    profiles, more = enrich.load_profiles(jobs)
    problems += more
    if catalog.faulty:
        problems.append(catalog.problem)
    enrich.add_gpu_memory(jobs, profiles, catalog)
    if isinstance(shape, SynergyError):
        problems.append(f"no GPU-proportional comparison: {shape}")
        enrich.add_counterfactual(jobs, {}, None)
    else:
        enrich.add_counterfactual(jobs, profiles, shape)
    return Report(period, jobs, summary.workloads(jobs), summary.cluster(jobs),
                  advice.lines(jobs), profiles, problems)
