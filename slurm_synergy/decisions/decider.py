"""Who applies decisions: the cluster's job_submit shim, or `synergy submit` (user mode).

User mode lets a researcher without admin rights get the same right-sizing: the same
engine, the same profile store, applied to the sbatch script before it is submitted.
"""

from __future__ import annotations


from slurm_synergy.model.errors import SlurmUnreachable, SynergyError
from slurm_synergy.model.profile import ProfileError
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.slurm import Slurm
from slurm_synergy.model.engine import Decision, NodeShape, decide
from slurm_synergy.model.gpus import Catalog
from slurm_synergy.model.policy import Policy, site_catalog
from slurm_synergy.paths import policy_path
from slurm_synergy.slurm import node_shape
from slurm_synergy.decisions.table import table_path

MODES = ("auto", "shim", "user")


def shim_installed(slurm: Slurm) -> bool:
    """The cluster runs a job_submit/lua plugin and has our decision table beside
    slurm.conf: the shim decides, so the client must not decide again."""
    try:
        plugins = slurm.config().get("JobSubmitPlugins", "")
    except SlurmUnreachable as exc:
        # Not a "no": guessing user mode would decide twice on a cluster with the shim.
        raise SlurmUnreachable(f"{exc}\ncannot tell whether the cluster runs the "
                               "job_submit shim (--mode auto); nothing was submitted") from exc
    except SynergyError:
        return False
    names = {p.strip().rsplit("/", 1)[-1] for p in plugins.split(",")}
    return "lua" in names and table_path().is_file()


def resolve_mode(mode: str, slurm: Slurm) -> str:
    if mode not in MODES:
        raise SynergyError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    if mode == "auto":
        return "shim" if shim_installed(slurm) else "user"
    return mode


class Decider:
    """Decisions for user mode, one per fingerprint, against the partition's node shape."""

    def __init__(self, store: ProfileStore, policy: Policy, slurm: Slurm,
                 catalog: Catalog | None = None):
        self.store, self.policy, self.slurm = store, policy, slurm
        self.catalog = catalog or site_catalog(policy_path())
        self._shapes: dict[str, NodeShape] = {}
        self.problems: list[str] = []

    def shape(self, partition: str) -> NodeShape:
        """The smallest node of `partition` ("": the default partition)."""
        if partition not in self._shapes:
            self._shapes[partition] = node_shape(self.slurm, partition or None)
        return self._shapes[partition]

    def decision(self, fingerprint: str, partition: str = "") -> Decision | None:
        """The decision, or None when the workload has no usable profile (noted)."""
        if not self.store.has(fingerprint):
            return None
        try:
            return decide(self.store.load(fingerprint), self.shape(partition), self.policy,
                          self.catalog)
        except (ProfileError, ValueError, ArithmeticError) as e:
            self.problems.append(f"workload {fingerprint}: {e}; submitted as written")
            return None
