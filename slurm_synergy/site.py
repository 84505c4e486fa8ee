"""The site as one entry point sees it, read once and passed down: its policy and GPU
catalog (one read of one policy file) and the Slurm it talks to.

Each process that acts for the site (a `synergy` verb, root's sync, a job's in-run
supervisor) builds one Site where it starts; the modules below it take the Site, not the
surroundings (docs/architecture.md's process map names those entry points)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.gpus import Catalog
from slurm_synergy.model.policy import Policy, load_site, site_catalog
from slurm_synergy.paths import policy_path
from slurm_synergy.slurm import Slurm


@dataclass(frozen=True)
class Site:
    """The site's policy, its GPU catalog and its Slurm."""

    policy: Policy
    catalog: Catalog
    slurm: Slurm

    @classmethod
    def load(cls, slurm: Slurm | None = None, path: Path | None = None,
             on_bad_policy: Callable[[SynergyError], None] | None = None) -> "Site":
        """The site of the policy file at `path` (SYNERGY_POLICY, else etc/policy.toml).
        A policy that cannot be read raises SynergyError, or where `on_bad_policy` is
        given is told to it and the defaults stand in (a job's own run goes on); a fault
        in the catalog alone is carried in it, never raised."""
        where = path or policy_path()
        try:
            policy, catalog = load_site(where)
        except SynergyError as e:
            if on_bad_policy is None:
                raise
            on_bad_policy(e)
            policy, catalog = Policy(), site_catalog(where)
        return cls(policy, catalog, slurm or Slurm())
