"""Who applies decisions: the cluster's job_submit shim, or `synergy submit` (user mode).

User mode lets a researcher without admin rights get the same right-sizing: the same
engine, the same profile store, applied to the sbatch script before it is submitted.
"""

from __future__ import annotations

from ..errors import SynergyError
from ..profile import ProfileError, ProfileStore
from ..slurm import Slurm
from .engine import Decision, NodeShape, decide
from .policy import Policy
from .table import node_shape, table_path

MODES = ("auto", "shim", "user")


def shim_installed(slurm: Slurm) -> bool:
    """The cluster runs a job_submit/lua plugin and has our decision table beside
    slurm.conf: the shim decides, so the client must not decide again."""
    try:
        plugins = slurm.config().get("JobSubmitPlugins", "")
    except SynergyError:
        return False
    return "lua" in plugins.split(",") and table_path().is_file()


def resolve_mode(mode: str, slurm: Slurm) -> str:
    if mode not in MODES:
        raise SynergyError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    if mode == "auto":
        return "shim" if shim_installed(slurm) else "user"
    return mode


class Decider:
    """Decisions for user mode, one per fingerprint, against the partition's node shape."""

    def __init__(self, store: ProfileStore, policy: Policy, slurm: Slurm):
        self.store, self.policy, self.slurm = store, policy, slurm
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
            return decide(self.store.load(fingerprint), self.shape(partition), self.policy)
        except ProfileError as e:
            self.problems.append(f"{e}; submitted as written")
            return None
