"""Node prolog: the job's GPUs at its decided power limit, under the site's ceiling, their
energy counters noted, and the sampler started (GPUs, and the job's cgroup) so the epilog
can tell what the job used.

Always succeeds: a failed prolog drains the node and requeues the job, and nothing here
is worth that. The GPUs are already at their ceiling (the last epilog saw to it), so a
limit that cannot be applied only costs the job's energy saving. A job's own limit is set
only on a board it holds whole (hooks/sharing.py): the check and the record that tells
later prologs of this node which boards the job holds are made under one lock.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable, Sequence

from slurm_synergy.fileio import locked
from slurm_synergy.gpu import Backend, Gpu, GpuError
from slurm_synergy.hooks.context import HookContext, utc_now
from slurm_synergy.hooks.power import Target, asked_power_w, job_target
from slurm_synergy.hooks.records import GpuStart, PrologRecord, read_prolog, RecordError, write_json
from slurm_synergy.hooks.sharing import other_holders
from slurm_synergy.model.errors import SynergyError

# How long a prolog waits for another of this node's to finish looking at the boards.
BOARDS_WAIT_S = 5.0

StartSampler = Callable[[HookContext, Sequence[Gpu]], "int | None"]


def start_sampler(ctx: HookContext, gpus: Sequence[Gpu]) -> int | None:
    """A detached sampler for the job's life, outside the job's cgroup so its memory and
    CPU are not the job's (a new session: slurmd kills the prolog's process group)."""
    argv = [sys.executable, "-m", "slurm_synergy.hooks", "sample", "--job", ctx.job_id,
            "--gpus", ",".join(g.info.uuid for g in gpus)]
    if ctx.watches_cgroup:
        argv += ["--uid", ctx.uid]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True,
                            cwd="/",
                            env={**os.environ, "SLURM_JOB_ID": ctx.job_id})
    return proc.pid


def _apply(ctx: HookContext, gpu: Gpu, asked_w: int | None, shared: str) -> GpuStart:
    info, log = gpu.info, ctx.log
    energy = gpu.energy_mj()
    shared = info.shared or shared
    if shared and asked_w is not None:
        # The limit is the board's: the job's own would throttle its other tenants. The
        # board goes to its ceiling (a lone tenant before may have lowered it).
        log(f"gpu {info.uuid}: {shared}: the job's {asked_w} W limit is not set")
        asked_w = None
    try:
        rng, before = gpu.power_range(), gpu.power_limit_mw()
    except GpuError as e:
        log(f"gpu {info.uuid}: cannot read its power limits ({e}); left as it is")
        return GpuStart(info.uuid, info.pci_bus_id, info.name, None, None, energy, str(e))
    try:
        target = job_target(rng, ctx.cap_w or 0.0, asked_w)
    except GpuError as e:
        log(f"gpu {info.uuid}: no ceiling ({e}); left at {before / 1000:g} W")
        return GpuStart(info.uuid, info.pci_bus_id, info.name, before, None, energy, str(e))
    if ctx.cap_w is None and target.mw > before:
        target = Target(before, "site cap unknown: never raised")
    if target.mw == before:
        log(f"gpu {info.uuid}: limit {before / 1000:g} W kept ({target.why})")
        return GpuStart(info.uuid, info.pci_bus_id, info.name, before, before, energy)
    try:
        gpu.set_power_limit_mw(target.mw)
    except GpuError as e:
        log(f"gpu {info.uuid}: refused limit {target.mw / 1000:g} W ({e}); "
            f"runs at {before / 1000:g} W")
        return GpuStart(info.uuid, info.pci_bus_id, info.name, before, None, energy, str(e))
    log(f"gpu {info.uuid}: limit {before / 1000:g} W -> {target.mw / 1000:g} W ({target.why})")
    return GpuStart(info.uuid, info.pci_bus_id, info.name, before, target.mw, energy)


def _gpus(ctx: HookContext, backend: Backend) -> tuple[list[Gpu], list[GpuStart]]:
    """The job's GPUs at their limits: those found, and how each was left."""
    if not ctx.has_gpus():
        return [], []
    if not backend.gpus:
        ctx.log(f"{backend.reason}; nothing to do for GPUs {','.join(ctx.gpu_ids)}")
        return [], []   # a broken NVML too: the GPUs keep the limit the last epilog confirmed
    gpus, missing = backend.find(ctx.gpu_ids)
    if missing:
        ctx.log(f"GPU(s) {','.join(missing)} of SLURM_JOB_GPUS not found by {backend.name} "
                f"(gres.conf File= numbers should be the devices' minor numbers)")
    asked = asked_power_w(ctx.comment)
    held = other_holders(ctx.run_dir, ctx.job_id, ctx.node, [g.info.uuid for g in gpus])
    return gpus, [_apply(ctx, g, asked, ctx.shared or (f"held by job {held[g.info.uuid]} "
                                                        "too" if g.info.uuid in held else ""))
                  for g in gpus]


def run(ctx: HookContext, backend: Backend, sampler: StartSampler = start_sampler) -> int:
    """Set the job's GPUs to their limits, note their energy counters and start the sampler;
    returns 0 always (a failed prolog would drain the node)."""
    log = ctx.log
    if ctx.prolog_path.exists():
        # Run twice for one job (slurmd retries, an admin by hand): the first record holds
        # the energy counters at the job's real start and stays.
        try:
            read_prolog(ctx.prolog_path)
            log("prolog record exists already: kept, with its start counters")
            return 0
        except RecordError as e:
            log(f"replacing an unreadable prolog record ({e})")
    try:
        ctx.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with locked(ctx.run_dir / f".{ctx.node}.boards.lock", BOARDS_WAIT_S):
            gpus, starts = _gpus(ctx, backend)
            started = utc_now()
            if gpus or ctx.watches_cgroup:   # written before the sampler looks for it
                write_json(ctx.prolog_path, PrologRecord(ctx.job_id, started, tuple(starts)),
                           0o600)
    except (SynergyError, OSError) as e:
        # Who else is on the boards is unknown: they stay at the ceiling the last epilog
        # left them at, and the job keeps its energy counters unread.
        log(f"boards not looked at ({e}); the job's GPUs keep their limits")
        return 0
    if not gpus and not ctx.watches_cgroup:
        return 0
    pid = None
    try:
        pid = sampler(ctx, gpus)
        what = ([f"GPUs every {ctx.policy.gpu_sample_period_s:g} s"] if gpus else []) + \
            (["the job's cgroup"] if ctx.watches_cgroup else [])
        log(f"sampler started (pid {pid}: {' and '.join(what)})")
    except OSError as e:
        log(f"sampler could not start ({e}); the epilog has the energy counters only")
    if pid is not None:
        write_json(ctx.prolog_path, PrologRecord(ctx.job_id, started, tuple(starts), pid), 0o600)
    return 0
