"""`synergy plugin install`: what slurmctld needs, printed, or applied with --apply.

Three things: the job_submit/lua plugin and job comments in accounting (slurm.conf),
the shim beside slurm.conf (where slurmctld looks for job_submit.lua), and a decision
table beside it. Applying is idempotent: lines and files already right are left alone.
"""

from __future__ import annotations

import re
from pathlib import Path

from slurm_synergy import paths
from slurm_synergy.slurmconf import ConfChange, read_conf, write_conf
from slurm_synergy.fileio import atomic_write_text
from slurm_synergy.decisions.table import TABLE_NAME
from slurm_synergy.plugin import contract

SHIM = paths.ETC / "job_submit.lua"
# slurm.conf keys and the value each must include.
CONF_NEEDS = (("JobSubmitPlugins", "lua"), ("AccountingStoreFlags", "job_comment"))


def conf_edit(text: str) -> tuple[str, list[ConfChange]]:
    """slurm.conf with every CONF_NEEDS value present; the changes it took."""
    changes = []
    for key, value in CONF_NEEDS:
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


def plan_text(conf: Path) -> str:
    """What --apply would do for the cluster of `conf`, as shell comments and the slurm.conf
    lines to add; writes nothing."""
    _, changes = conf_edit(read_conf(conf))
    lines = [f"# slurm-synergy for the cluster of {conf}",
             "# 1. slurm.conf (then: scontrol reconfigure)"]
    lines += [c.planned for c in changes]
    lines += [
        "# 2. files beside slurm.conf, readable by slurmctld",
        f"#    {conf.parent / 'job_submit.lua'}  <- {SHIM}",
        f"#    {conf.parent / TABLE_NAME}  <- synergy plugin sync (mode 0644, written only "
        "by the account that runs it)",
        "# 3. keep the table current: run `synergy plugin sync --time-limits` from cron",
        "#    every minute as that account (root, or a Slurm operator, for --time-min on",
        "#    every user's pending jobs; a profiling job also syncs the table when its",
        "#    user may write it)",
        "# 4. site policy: etc/policy.toml, or SYNERGY_POLICY=<file>",
        "# synergy plugin install --apply does 1-3 now.",
    ]
    return "\n".join(lines)


def apply(conf: Path, reconfigure: bool = True) -> list[str]:
    """Install into the cluster of `conf`; returns one line per change or check."""
    from slurm_synergy.slurm import Slurm
    from slurm_synergy.decisions.sync import sync

    text = read_conf(conf)
    new, changes = conf_edit(text)
    changed = write_conf(conf, text, new)
    changes.append(install_shim(conf.parent))
    slurm = Slurm(conf)
    out = [c.applied for c in changes]
    out.append("done " + sync(slurm=slurm, path=conf.parent / TABLE_NAME))
    if reconfigure and changed:
        slurm.reconfigure()
        out.append("done scontrol reconfigure")
    return out
