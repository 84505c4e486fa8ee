"""Who applies decisions: the cluster's job_submit shim, or `synergy submit` (user mode).

User mode lets a researcher without admin rights get the same right-sizing: the same
decision service (decisions/service.py), the same profile store, applied to the sbatch
script before it is submitted.
"""

from __future__ import annotations


from slurm_synergy.model.errors import SlurmUnreachable, SynergyError
from slurm_synergy.slurm import Slurm
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
    """"shim" or "user" for a --mode; "auto" is the shim where the cluster runs it."""
    if mode not in MODES:
        raise SynergyError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    if mode == "auto":
        return "shim" if shim_installed(slurm) else "user"
    return mode
