"""What must hold before the local cluster starts: the programs it runs, no other
release's cluster on its ports, the profile store's folder root's and open to all."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

from slurm_synergy import paths, slurm_release
from slurm_synergy.cluster.commands import running_pid
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.slurm_release import Release


def require_programs(release: Release) -> None:
    """SynergyError naming the programs `release`'s cluster needs that are missing: the
    host's Slurm, or what builds and enters another release's root."""
    slurm = ("slurmdbd", "slurmctld", "slurmd", "sbatch") if release.hosted else \
        ("debootstrap", "chroot", "mount")
    missing = [b for b in ("munged", "mariadbd", "unshare", *slurm) if shutil.which(b) is None]
    if missing:
        raise SynergyError(f"missing programs: {', '.join(missing)}; run `make setup` first")


def no_other_release_up(release: Release) -> None:
    """One local cluster at a time: every release's uses the same ports."""
    for other in slurm_release.RELEASES:
        if other == release:
            continue
        pid = running_pid(paths.workspace() / other.state_name / "run" / "slurmctld.pid",
                          "slurmctld")
        if pid is not None:
            raise SynergyError(
                f"the local cluster on Slurm {other.version} is up (slurmctld pid {pid}): "
                f"stop it first (SLURM_VERSION={other.version} synergy cluster down)")


def shared_store(folder: Path) -> None:
    """`folder` as a site's shared profile store: root's, mode 1777 (docs/install.md);
    SynergyError where something else has its name."""
    folder.mkdir(exist_ok=True)
    st = folder.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:
        raise SynergyError(f"{folder} is not a folder of root's: the local cluster's profile "
                           "store must be (move it aside and run `synergy cluster up` again)")
    if stat.S_IMODE(st.st_mode) != 0o1777:
        folder.chmod(0o1777)
