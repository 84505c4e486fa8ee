"""The Slurm release the local cluster runs: the host's own packages (Debian 12's 22.05)
or a later Debian release's, run from a root of that release (cluster/rootfs.py).

`SLURM_VERSION` chooses (`make demo SLURM_VERSION=24.11`); unset, the host's. Each
release keeps a state folder of its own: a controller's saved state and an accounting
database are not carried across four releases (Slurm upgrades two at a time)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from slurm_synergy.model.errors import SynergyError

VARIABLE = "SLURM_VERSION"


@dataclass(frozen=True)
class Release:
    version: str        # Slurm's major release, as "24.11"
    suite: str          # the Debian suite whose packages hold it; "" = the host's own

    @property
    def hosted(self) -> bool:
        """Whether the host's own packages run it (no root to build)."""
        return not self.suite

    @property
    def state_name(self) -> str:
        """The name of its state folder in the workspace."""
        return "state" if self.hosted else f"state-{self.version}"


HOST = Release("22.05", "")
RELEASES = (HOST, Release("24.11", "trixie"), Release("26.05", "sid"))


def chosen(value: str | None = None) -> Release:
    """The release `value` (default: $SLURM_VERSION) names; the host's where it is unset.
    SynergyError naming the releases the local cluster runs, for any other."""
    value = (os.environ.get(VARIABLE, "") if value is None else value).strip()
    if not value:
        return HOST
    for release in RELEASES:
        if value in (release.version, release.suite):
            return release
    known = ", ".join(f"{r.version} ({'this host' if r.hosted else 'Debian ' + r.suite})"
                      for r in RELEASES)
    raise SynergyError(f"{VARIABLE}={value}: the local cluster runs Slurm {known}")


def _read(version_line: str) -> tuple[str, bool]:
    """The release `scontrol --version` printed ("slurm-wlm 24.11.5" -> "24.11.5"), and
    whether its major is one slurm-synergy is tested on."""
    found = re.search(r"(\d+)\.(\d+)(?:\.\d+)?", version_line)
    if found is None:
        return version_line.strip() or "of unknown release", False
    return found.group(0), f"{found.group(1)}.{found.group(2)}" in {r.version for r in RELEASES}


# The first release whose backfill takes --time-min as a soft limit where slurm.conf's
# SchedulerParameters says time_min_as_soft_limit: it plans with it and lets the job run
# to its --time, so no limit is ever lowered (earlier releases ignore the option).
SOFT_TIME_MIN = (23, 11)
# The first release whose sbatch takes --mem-update=<margin>@<delay> (the job's memory
# lowered once, to its RSS then plus the margin): bench_rescue's arm beside the rescue.
MEM_UPDATE = (26, 5)
SOFT_TIME_MIN_OPTION = "time_min_as_soft_limit"


def major_minor(version_line: str) -> tuple[int, int] | None:
    """(24, 11) from any version line ("slurm-wlm 24.11.5", "24.11"); None where none."""
    found = re.search(r"(\d+)\.(\d+)", version_line)
    return (int(found.group(1)), int(found.group(2))) if found else None


def _since(version_line: str, first: tuple[int, int]) -> bool:
    found = major_minor(version_line)
    return found is not None and found >= first


def soft_time_min(version_line: str) -> bool:
    """Whether this release honours time_min_as_soft_limit."""
    return _since(version_line, SOFT_TIME_MIN)


def mem_update(version_line: str) -> bool:
    """Whether this release's sbatch has --mem-update."""
    return _since(version_line, MEM_UPDATE)


def _tested() -> str:
    return ", ".join(r.version for r in RELEASES)


def _not_tested(full: str) -> str:
    return (f"Slurm {full} is not a release slurm-synergy is tested on ({_tested()}; "
            "docs/install.md says what each was checked for)")


def untested(version_line: str) -> str | None:
    """What to tell whoever runs the product against the cluster whose `scontrol
    --version` printed `version_line`, where it is not a release it was tested on; None
    where it is. Its commands' output is read as the tested releases' (they agree:
    tests/golden/slurm-output)."""
    full, tested = _read(version_line)
    return None if tested else f"{_not_tested(full)}: its commands' output is read as theirs"


def installable(version_line: str, force: bool = False) -> str:
    """Whether the plugin and the hooks may go into the cluster whose `scontrol --version`
    printed `version_line` ("slurm-wlm 24.11.5"): a line saying so for a release they were
    tested on, or with `force`; SynergyError naming the tested ones otherwise."""
    full, tested = _read(version_line)
    if tested:
        return f"Slurm {full}: a release slurm-synergy is tested on ({_tested()})"
    if force:
        return (f"Slurm {full}: not a release slurm-synergy is tested on ({_tested()}); "
                "going on as --force asks")
    raise SynergyError(f"{_not_tested(full)}: pass --force to install into it anyway")
