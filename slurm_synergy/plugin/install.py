"""`synergy plugin install`: what slurmctld needs, printed, or applied with --apply.

Three things: the job_submit/lua plugin and job comments in accounting (slurm.conf; from
Slurm 23.11 also time_min_as_soft_limit, so that no --time-min the time-limit timer sets
can end a job), the shim beside slurm.conf (where slurmctld looks for job_submit.lua), and
a decision table beside it. Applying is idempotent: lines and files already right are
left alone.
"""

from __future__ import annotations

import re
from pathlib import Path

from slurm_synergy import paths
from slurm_synergy.slurm_release import SOFT_TIME_MIN_OPTION, soft_time_min
from slurm_synergy.slurmconf import ConfChange, read_conf, write_conf
from slurm_synergy.fileio import atomic_write_text
from slurm_synergy.decisions.table import TABLE_NAME
from slurm_synergy.decisions.timelimits import DEFAULT_STATE
from slurm_synergy.plugin import contract

SHIM = paths.ETC / "job_submit.lua"
# slurm.conf keys and the value each must include.
CONF_NEEDS = (("JobSubmitPlugins", "lua"), ("AccountingStoreFlags", "job_comment"))


def needs(release: str) -> tuple[tuple[str, str], ...]:
    """The slurm.conf values the cluster of `release` (its version line) must have."""
    soft = (("SchedulerParameters", SOFT_TIME_MIN_OPTION),) if soft_time_min(release) else ()
    return CONF_NEEDS + soft


def conf_edit(text: str, release: str) -> tuple[str, list[ConfChange]]:
    """slurm.conf with every value `needs` present; the changes it took."""
    changes = []
    for key, value in needs(release):
        pattern = re.compile(rf"^(\s*{key}\s*=\s*)(\S+)(.*)$", re.IGNORECASE | re.MULTILINE)
        m = pattern.search(text)
        if m and value in m.group(2).lower().split(","):
            changes.append(ConfChange(f"slurm.conf: {key} includes {value}", True))
        elif m:
            text = text[:m.start()] + f"{m.group(1)}{m.group(2)},{value}{m.group(3)}" \
                + text[m.end():]
            changes.append(ConfChange(f"slurm.conf: {key}={m.group(2)},{value}", False))
        else:
            text = text.rstrip("\n") + f"\n# added by synergy plugin install\n{key}={value}\n"
            changes.append(ConfChange(f"slurm.conf: {key}={value}", False))
    return text, changes


def install_shim(conf_dir: Path) -> ConfChange:
    """Write the shim beside slurm.conf, its CONTRACT block rendered from Python (a file of
    its own, not a link: slurmctld's)."""
    target = conf_dir / "job_submit.lua"
    text = contract.rendered(SHIM.read_text())
    if target.is_file() and not target.is_symlink() and target.read_text() == text:
        return ConfChange(f"{target} is current", True)
    if target.is_symlink():
        target.unlink()
    atomic_write_text(target, text, 0o644)
    return ConfChange(f"{target} <- {SHIM}", False)


def time_limits_note(release: str) -> list[str]:
    """What the time-limit timer risks on the cluster of `release`, in the plan's words."""
    if soft_time_min(release):
        return ["#    On this release Slurm takes --time-min as a soft limit (slurm.conf above):",
                "#    backfill plans with it and every job runs to its own --time, so a",
                "#    stopped timer costs backfill starts, never a job."]
    return ["#    RISK on this release (before 23.11): Slurm lowers a backfilled job's limit",
            "#    to its --time-min and the timer puts it back before it ends. If the timer",
            "#    stops (cron off, the host down), such a job is killed at the lowered",
            "#    limit: watch it, or set time_min = false in the site policy."]


def plan_text(conf: Path, release: str) -> str:
    """What --apply would do for the cluster of `conf` (Slurm `release`, its version
    line), as shell comments and the slurm.conf lines to add; writes nothing."""
    _, changes = conf_edit(read_conf(conf), release)
    lines = [f"# slurm-synergy for the cluster of {conf}",
             "# 1. slurm.conf (then: scontrol reconfigure)"]
    lines += [c.planned for c in changes]
    lines += [
        "# 2. files beside slurm.conf, readable by slurmctld",
        f"#    {conf.parent / 'job_submit.lua'}  <- {SHIM}",
        f"#    {conf.parent / TABLE_NAME}  <- synergy plugin sync (mode 0644, written only "
        "by the account that runs it)",
        "# 3. keep the table current: run `synergy plugin sync` from cron every minute as",
        "#    that account (a profiling job also syncs the table when its user may write it)",
        "# 4. time limits backfill can use: run `synergy plugin timelimits` from cron every",
        "#    minute as root or a Slurm operator (--time-min on every user's pending jobs;",
        f"#    its record in {DEFAULT_STATE})",
        *time_limits_note(release),
        "# 5. site policy: etc/policy.toml, or SYNERGY_POLICY=<file>",
        "# synergy plugin install --apply does 1 and 2 now, and compiles the table once.",
    ]
    return "\n".join(lines)


def apply(conf: Path, release: str, reconfigure: bool = True) -> list[str]:
    """Install into the cluster of `conf` (Slurm `release`, its version line); returns one
    line per change or check."""
    from slurm_synergy.slurm import Slurm
    from slurm_synergy.decisions.sync import sync

    text = read_conf(conf)
    new, changes = conf_edit(text, release)
    changed = write_conf(conf, text, new)
    changes.append(install_shim(conf.parent))
    slurm = Slurm(conf)
    out = [c.applied for c in changes]
    out.append("done " + sync(slurm=slurm, path=conf.parent / TABLE_NAME))
    if reconfigure and changed:
        slurm.reconfigure()
        out.append("done scontrol reconfigure")
    return out
