"""What a node hook is told: its job (from slurmd's environment), the site's settings,
where it keeps its files, and its log."""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from slurm_synergy import paths
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.fileio import atomic_write_text
from slurm_synergy.gpu.device import job_gpu_ids
from slurm_synergy.model.policy import Policy, load_policy
from slurm_synergy.paths import policy_path
from slurm_synergy.hooks.records import JOB_ID, NODE
from slurm_synergy.hooks.sharing import shared_by_setting


DEFAULT_LOG = Path("/var/log/slurm-synergy/hooks.log")
DEFAULT_RUN = Path("/run/slurm-synergy")


def utc_now() -> str:
    """The hooks' timestamps, in their log and records."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def log_path(env: dict[str, str]) -> Path:
    """The hooks' log: SYNERGY_HOOK_LOG, else DEFAULT_LOG."""
    return Path(env["SYNERGY_HOOK_LOG"]) if env.get("SYNERGY_HOOK_LOG") else DEFAULT_LOG


class HookLog:
    """One line per action, appended to SYNERGY_HOOK_LOG; stderr when it cannot be opened
    (slurmd keeps neither, so the file is what an admin reads)."""

    def __init__(self, path: Path, hook: str, job_id: str) -> None:
        self.path, self.prefix = path, f"{hook} job={job_id}"
        self.lines: list[str] = []

    def __call__(self, message: str) -> None:
        line = f"{utc_now()} {self.prefix} {message}"
        self.lines.append(line)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        except OSError:
            print(line, file=sys.stderr)


@dataclass(frozen=True)
class HookContext:
    job_id: str
    node: str
    uid: str                       # SLURM_JOB_UID: the job's cgroup is under uid_<uid>
    gid: int | None                # SLURM_JOB_GID: the group its stats are readable by
    gpu_ids: tuple[str, ...]       # SLURM_JOB_GPUS: device (minor) numbers
    restart: int                   # SLURM_JOB_RESTART_COUNT: a requeued job keeps its id
    comment: str
    shared: str                    # why its boards may be shared (hooks/sharing.py); '' whole
    policy: Policy
    policy_error: str              # '' when the site policy was read
    cap_w: float | None            # the site cap (0: none); None: unknown, never raise a limit
    run_dir: Path                  # node-local: the prolog's records, the sampler's totals
    stats_dir: Path                # shared with the report host: per-job GPU stats
    log: HookLog

    def has_gpus(self) -> bool:
        """Logs what every hook run starts with; False when the job has no GPUs."""
        if self.policy_error:
            self.log(f"site policy unreadable: {self.policy_error}")
        if not self.gpu_ids:
            self.log("no GPUs allocated to this job")
        return bool(self.gpu_ids)

    @property
    def watches_cgroup(self) -> bool:
        """Whether the sampler follows the job's cgroup (its memory peak and CPU time)."""
        return self.policy.cgroup_peaks and bool(self.uid)

    @property
    def prolog_path(self) -> Path:
        """The prolog's record for the epilog, in the node-local run folder."""
        # The node in the name: nodes that share a run folder (the local cluster's do)
        # keep a job's records apart.
        return self.run_dir / f"{self.job_id}.{self.node}.prolog.json"

    @property
    def totals_path(self) -> Path:
        """The sampler's running totals for the epilog, in the node-local run folder."""
        return self.run_dir / f"{self.job_id}.{self.node}.samples.json"


def context(hook: str, env: dict[str, str] | None = None) -> HookContext:
    """The hook's context from slurmd's environment. Both the job id and the node name end
    up in file names: a job id that is not one is refused, a node name is made safe."""
    env = dict(os.environ) if env is None else env
    job_id = env.get("SLURM_JOB_ID", "")
    node = env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    log = HookLog(log_path(env), hook, job_id or "?")
    if not JOB_ID.match(job_id):
        raise SynergyError(f"SLURM_JOB_ID {job_id!r} is not a job id (is this run by slurmd?)")
    if not NODE.match(node):
        node = re.sub(r"[^A-Za-z0-9_.-]", "_", node)[:64] or "node"
    run_dir = Path(env["SYNERGY_HOOK_RUN"]) if env.get("SYNERGY_HOOK_RUN") else DEFAULT_RUN
    policy, problem, cap_w = _policy(env, run_dir)
    return HookContext(
        job_id=job_id, node=node,
        uid=env.get("SLURM_JOB_UID", "") if env.get("SLURM_JOB_UID", "").isdigit() else "",
        gid=int(env["SLURM_JOB_GID"]) if env.get("SLURM_JOB_GID", "").isdigit() else None,
        gpu_ids=tuple(job_gpu_ids(env)),
        restart=int(env.get("SLURM_JOB_RESTART_COUNT", "0") or 0)
        if env.get("SLURM_JOB_RESTART_COUNT", "0").isdigit() else 0,
        comment=env.get("SLURM_JOB_COMMENT", ""), shared=shared_by_setting(env, node),
        policy=policy, policy_error=problem,
        cap_w=cap_w, run_dir=run_dir,
        stats_dir=paths.cluster_stats_dir(env.get("SLURM_CLUSTER_NAME", ""), env), log=log)


def _policy(env: dict[str, str], run_dir: Path) -> tuple[Policy, str, float | None]:
    """The site policy, and the cap to hold GPUs to. A policy that cannot be read (a typo
    in one file) must neither drain every node nor let a job above the cap, so the hooks
    go on with the last cap they read on this node, or with none known, in which case
    they lower limits but never raise them."""
    remembered = run_dir / "site-cap"
    try:
        policy = load_policy(Path(env["SYNERGY_POLICY"]) if env.get("SYNERGY_POLICY") else policy_path())
    except SynergyError as e:
        try:
            cap = float(remembered.read_text())
            return Policy(), f"{e}; holding the last cap read, {cap:g} W", cap
        except (OSError, ValueError):
            return Policy(), f"{e}; no cap known: limits are lowered, never raised", None
    try:
        if not remembered.exists() or float(remembered.read_text()) != policy.power_cap_w:
            run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            atomic_write_text(remembered, f"{policy.power_cap_w:g}\n", 0o600)
    except (OSError, ValueError):
        pass
    return policy, "", policy.power_cap_w
