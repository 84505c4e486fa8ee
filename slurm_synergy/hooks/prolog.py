"""Node prolog: the job's GPUs at its decided power limit, under the site's ceiling, their
energy counters noted, and the sampler started (GPUs, and the job's cgroup) so the epilog
can tell what the job used.

Always succeeds: a failed prolog drains the node and requeues the job, and nothing here
is worth that. The GPUs are already at their ceiling (the last epilog saw to it), so a
limit that cannot be applied only costs the job's energy saving.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable, Sequence

from slurm_synergy.gpu import Backend, Gpu, GpuError
from slurm_synergy.hooks.context import HookContext, utc_now
from slurm_synergy.hooks.power import Target, asked_power_w, job_target
from slurm_synergy.hooks.records import GpuStart, PrologRecord, read_prolog, RecordError, write_json

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


def _apply(ctx: HookContext, gpu: Gpu, asked_w: int | None) -> GpuStart:
    info, log = gpu.info, ctx.log
    energy = gpu.energy_mj()
    if info.shared and asked_w is not None:
        # The limit is the board's: the job's own would throttle its other tenants. The
        # board stays under the site cap (the epilog sees to it after every job).
        log(f"gpu {info.uuid}: {info.shared}: the job's {asked_w} W limit is not set")
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
    return gpus, [_apply(ctx, g, asked) for g in gpus]


def run(ctx: HookContext, backend: Backend, sampler: StartSampler = start_sampler) -> int:
    """Set the job's GPUs to their limits, note their energy counters and start the sampler;
    returns 0 always (a failed prolog would drain the node)."""
    log = ctx.log
    gpus, starts = _gpus(ctx, backend)
    if not gpus and not ctx.watches_cgroup:
        return 0
    if ctx.prolog_path.exists():
        # Run twice for one job (slurmd retries, an admin by hand): the first record holds
        # the energy counters at the job's real start and stays.
        try:
            read_prolog(ctx.prolog_path)
            log("prolog record exists already: kept, with its start counters")
            return 0
        except RecordError as e:
            log(f"replacing an unreadable prolog record ({e})")
    ctx.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    started = utc_now()
    record = PrologRecord(ctx.job_id, started, tuple(starts))
    write_json(ctx.prolog_path, record, 0o600)   # written before the sampler looks for it
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
