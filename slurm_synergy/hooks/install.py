"""`synergy hooks install`: the node prolog and epilog and the TaskProlog, printed, or
applied with --apply.

The wrappers go beside slurm.conf (one file each, naming this installation's Python and
the folders the hooks use); slurm.conf gets Prolog=, Epilog=, TaskProlog= and a
PrologEpilogTimeout that leaves the hooks' own deadline room. The TaskProlog runs as each
job's user and only prints the decision the prolog handed on and where the probe is
(etc/task_prolog.sh.j2). A site that runs its own prolog already keeps it: install then
says how to call ours from it instead of replacing it. The hooks run as root, so --apply
refuses an interpreter, package or policy file that another user could change
(hooks/trust.py); every job's Python loads the probe from the same package.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from slurm_synergy import paths
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.fileio import atomic_write_text
from slurm_synergy.slurmconf import ConfChange, read_conf, write_conf
from slurm_synergy.model.policy import load_policy
from slurm_synergy.paths import policy_path
from slurm_synergy.templating import environment
from slurm_synergy.hooks import taskenv
from slurm_synergy.hooks.trust import untrusted
from slurm_synergy.probe.records import BOOT

WRAPPERS = {"prolog": "synergy-prolog", "epilog": "synergy-epilog"}
TASK_PROLOG = "synergy-task-prolog"
HOOK_FILES = {**WRAPPERS, "task_prolog": TASK_PROLOG}     # as slurm.conf.j2 names them
# slurm.conf's key for each wrapper.
CONF_KEYS = {WRAPPERS["prolog"]: "Prolog", WRAPPERS["epilog"]: "Epilog",
             TASK_PROLOG: "TaskProlog"}


def kill_after_s(hook_timeout_s: float) -> int:
    """When the wrapper kills a hook that ignored its own deadline (Python hung)."""
    return math.ceil(hook_timeout_s) + 15


def needed_timeout_s(hook_timeout_s: float) -> int:
    """slurm.conf's PrologEpilogTimeout must outlast the wrapper's kill, or slurmd kills
    the hook first and drains the node with nothing in our log."""
    return max(60, kill_after_s(hook_timeout_s) + 15)


@dataclass(frozen=True)
class HookPaths:
    """Where the hooks keep things on the nodes; the stats folder must be shared with the
    host that runs `synergy report`."""

    stats_dir: Path
    log: Path
    run_dir: Path
    policy: Path

    @classmethod
    def site(cls) -> "HookPaths":
        """The hooks' usual places: the shared GPU stats, /var/log, /run and the site policy."""
        return cls(paths.gpu_stats_dir(), Path("/var/log/slurm-synergy/hooks.log"),
                   Path("/run/slurm-synergy"), policy_path())


def task_prolog_text(run_dir: Path, python: Path = Path(sys.executable),
                     boot: Path = BOOT) -> str:
    """The TaskProlog for nodes whose hooks keep their files in `run_dir`."""
    return environment(paths.ETC).get_template("task_prolog.sh.j2").render(
        boot=boot, python=python, tasks=taskenv.folder(run_dir), names=taskenv.NAMES)


def render_wrappers(conf_dir: Path, where: HookPaths,
                    python: Path = Path(sys.executable)) -> list[ConfChange]:
    """Write the prolog, epilog and TaskProlog wrappers into `conf_dir` (0755) where they
    differ; returns what was written and what was current."""
    env = environment(paths.ETC)
    timeout = load_policy(where.policy).hook_timeout_s
    texts = {name: env.get_template("node_hook.sh.j2").render(
        hook=hook, key=CONF_KEYS[name], python=python, policy=where.policy,
        stats_dir=where.stats_dir, log=where.log, run_dir=where.run_dir,
        kill_after_s=kill_after_s(timeout)) for hook, name in WRAPPERS.items()}
    texts[TASK_PROLOG] = task_prolog_text(where.run_dir, python)
    changes = []
    for name, text in texts.items():
        target = conf_dir / name
        if target.is_file() and target.read_text() == text:
            changes.append(ConfChange(f"{target} is current", True))
            continue
        atomic_write_text(target, text, 0o755)
        changes.append(ConfChange(f"{target} written", False))
    return changes


def conf_edit(text: str, conf_dir: Path, hook_timeout_s: float = 20.0) -> tuple[str, list[ConfChange]]:
    """slurm.conf with our Prolog/Epilog/TaskProlog and a long enough
    PrologEpilogTimeout."""
    changes = []
    need = needed_timeout_s(hook_timeout_s)
    for name, key in CONF_KEYS.items():
        ours = str(conf_dir / name)
        m = re.search(rf"^(\s*{key}\s*=\s*)(\S+)(.*)$", text, re.IGNORECASE | re.MULTILINE)
        if m and m.group(2) == ours:
            changes.append(ConfChange(f"slurm.conf: {key}={ours}", True))
        elif m:
            how = ("(what it prints goes to slurmstepd with the rest)" if name == TASK_PROLOG
                   else f"(it exits as our {key.lower()} does)")
            call = ours if name == TASK_PROLOG else f"{ours} || exit $?"
            raise SynergyError(
                f"slurm.conf already runs {key}={m.group(2)}; keep it and add this line to "
                f"it {how}:\n    {call}")
        else:
            text = text.rstrip("\n") + f"\n# added by synergy hooks install\n{key}={ours}\n"
            changes.append(ConfChange(f"slurm.conf: {key}={ours}", False))
    m = re.search(r"^(\s*PrologEpilogTimeout\s*=\s*)(\d+)(.*)$", text, re.IGNORECASE | re.MULTILINE)
    if m and int(m.group(2)) >= need:
        changes.append(ConfChange(f"slurm.conf: PrologEpilogTimeout={m.group(2)}", True))
    elif m:
        text = text[:m.start()] + f"{m.group(1)}{need}{m.group(3)}" + text[m.end():]
        changes.append(ConfChange(f"slurm.conf: PrologEpilogTimeout={need}", False))
    else:
        text = text.rstrip("\n") + f"\nPrologEpilogTimeout={need}\n"
        changes.append(ConfChange(f"slurm.conf: PrologEpilogTimeout={need}", False))
    return text, changes


def plan_text(conf: Path, where: HookPaths, python: Path = Path(sys.executable)) -> str:
    """What --apply would do to `conf` and the nodes, as shell comments and the slurm.conf
    lines to add; writes nothing."""
    _, changes = conf_edit(read_conf(conf), conf.parent, load_policy(where.policy).hook_timeout_s)
    lines = [f"# slurm-synergy node hooks for the cluster of {conf}"]
    found = untrusted(python, where.policy)
    if found:
        lines += ["# 0. --apply refuses: a user other than root could change what the hooks",
                  "#    would run or read as root (docs/install.md: a root-owned install)",
                  *(f"#    {why}" for why in found)]
    lines += ["# 1. slurm.conf on every node (then: scontrol reconfigure)"]
    lines += [c.planned for c in changes]
    lines += [
        "# 2. the wrappers, beside slurm.conf on every node that runs slurmd (root-owned,",
        "#    mode 0755, on local disk: slurmstepd fails a task whose TaskProlog is missing",
        "#    and waits for it without a limit):",
        *(f"#    {conf.parent / n}" for n in CONF_KEYS),
        f"# 3. per-job GPU stats in {where.stats_dir}: storage the report host shares",
        "#    (SYNERGY_GPU_STATS names another); node log "
        f"{where.log}; site cap: power_cap_w in {where.policy}",
        "# synergy hooks install --apply does 1-2 on this host.",
    ]
    return "\n".join(lines)


def refuse_untrusted(python: Path, policy: Path) -> None:
    """SynergyError naming what the hooks would run or read as root that another user
    can change; nothing is written then."""
    found = untrusted(python, policy)
    if found:
        raise SynergyError("refused: the node hooks run as root, and a user other than root "
                           "could change what they would run or read:\n  "
                           + "\n  ".join(found) + "\ninstall slurm-synergy root-owned "
                           "(docs/install.md, \"Node hooks: a root-owned install\") and run "
                           "this from there")


def apply(conf: Path, where: HookPaths, python: Path = Path(sys.executable)) -> list[str]:
    """Install the hooks beside `conf` and reconfigure slurmctld where slurm.conf changed;
    returns a line per change. Refuses files another user could change."""
    from slurm_synergy.slurm import Slurm
    refuse_untrusted(python, where.policy)
    text = read_conf(conf)
    new, changes = conf_edit(text, conf.parent, load_policy(where.policy).hook_timeout_s)
    changes += render_wrappers(conf.parent, where, python)   # before slurm.conf names them
    changed = write_conf(conf, text, new)
    out = [c.applied for c in changes]
    if changed:
        Slurm(conf).reconfigure()
        out.append("done scontrol reconfigure")
    return out
