"""The report: one sacct call, joined with GPU stats, profiles, decisions and chains."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from slurm_synergy import paths
from slurm_synergy.hooks.records import StatsFolder
from slurm_synergy.model.engine import NodeShape
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.policy import site_catalog
from slurm_synergy.model.profile import Profile
from slurm_synergy.paths import policy_path
from slurm_synergy.slurm import Slurm, node_shape
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
        """Whether sacct had no job for the report."""
        return self.jobs.empty


def build(slurm: Slurm, job_ids: Sequence[str] = (), since: str | None = None,
          until: str | None = None, users: Sequence[str] = (),
          stats_dir: Path | None = None) -> Report:
    """The report of the jobs named, else of the period (and users): sacct's rows joined with
    the node hooks' GPU stats, profiles, decisions and chains, and summed."""
    period = (f"jobs {','.join(job_ids)}" if job_ids else
              f"{since} to {until or 'now'}") + (f", users {','.join(users)}" if users else "")
    # sacct waits on slurmdbd, then prints for a while: the lines are folded as they come
    # (in the pool), and what needs no job, then the likely node stats, are read meanwhile.
    with ThreadPoolExecutor(max_workers=1) as pool:
        folding = pool.submit(accounting.fold_sacct, slurm, job_ids, since, until, users)
        cluster = slurm.cluster_name()    # the stats, outputs and chains are kept per cluster
        try:
            shape: NodeShape | SynergyError = node_shape(slurm)
        except SynergyError as e:         # no GPU-proportional comparison; the rest stands
            shape = e
        catalog = site_catalog(policy_path())
        folder = StatsFolder(stats_dir or paths.cluster_stats_dir(cluster))
        folder.read_ahead(_first_id(job_ids), folding.done)
        fold = folding.result()
    stats, problems = folder.of(fold.job_ids)
    jobs = fold.frame()
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


def _first_id(job_ids: Sequence[str]) -> int | None:
    """The lowest job id asked for (123, 123_4, 123+1): no part of them has a lower one."""
    ids = [int(m.group()) for m in map(re.compile(r"\d+").match, job_ids) if m]
    return min(ids) if ids else None
