"""What a node hook is told: its job (from slurmd's environment), the site's settings,
where it keeps its files, and its log."""

from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from ..errors import SynergyError
from ..gpu.backend import job_gpu_ids
from ..plugin.policy import Policy, load_policy
from .records import JOB_ID, NODE


DEFAULT_LOG = Path("/var/log/slurm-synergy/hooks.log")
DEFAULT_RUN = Path("/run/slurm-synergy")


def log_path(env: dict[str, str]) -> Path:
    return Path(env["SYNERGY_HOOK_LOG"]) if env.get("SYNERGY_HOOK_LOG") else DEFAULT_LOG


class HookLog:
    """One line per action, appended to SYNERGY_HOOK_LOG; stderr when it cannot be opened
    (slurmd keeps neither, so the file is what an admin reads)."""

    def __init__(self, path: Path, hook: str, job_id: str) -> None:
        self.path, self.prefix = path, f"{hook} job={job_id}"
        self.lines: list[str] = []

    def __call__(self, message: str) -> None:
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {self.prefix} {message}"
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
    gpu_ids: tuple[str, ...]       # SLURM_JOB_GPUS: device (minor) numbers
    comment: str
    policy: Policy
    policy_error: str              # '' when the site policy was read
    run_dir: Path                  # node-local: the prolog's records, the sampler's totals
    stats_dir: Path                # shared with the report host: per-job GPU stats
    log: HookLog

    @property
    def prolog_path(self) -> Path:
        return self.run_dir / f"{self.job_id}.prolog.json"

    @property
    def totals_path(self) -> Path:
        return self.run_dir / f"{self.job_id}.samples.json"


def context(hook: str, env: dict[str, str] | None = None) -> HookContext:
    """The hook's context from slurmd's environment. A job id or node name that is not
    what Slurm writes is refused: both end up in file names."""
    env = dict(os.environ) if env is None else env
    job_id = env.get("SLURM_JOB_ID", "")
    node = env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    log = HookLog(log_path(env), hook, job_id or "?")
    if not JOB_ID.match(job_id):
        raise SynergyError(f"SLURM_JOB_ID {job_id!r} is not a job id (is this run by slurmd?)")
    if not NODE.match(node):
        raise SynergyError(f"node name {node!r} is not one Slurm would give")
    try:
        policy = load_policy(Path(env["SYNERGY_POLICY"]) if env.get("SYNERGY_POLICY") else None)
        problem = ""
    except SynergyError as e:
        # Unknown cap: the default limit is the ceiling until the policy is fixed. Draining
        # every node over a typo in one file would be worse.
        policy, problem = Policy(), str(e)
    return HookContext(
        job_id=job_id, node=node, gpu_ids=tuple(job_gpu_ids(env)),
        comment=env.get("SLURM_JOB_COMMENT", ""), policy=policy, policy_error=problem,
        run_dir=Path(env["SYNERGY_HOOK_RUN"]) if env.get("SYNERGY_HOOK_RUN") else DEFAULT_RUN,
        stats_dir=paths.gpu_stats_dir(env), log=log)
