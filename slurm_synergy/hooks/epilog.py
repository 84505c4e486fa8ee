"""Node epilog: every GPU of the job back to its ceiling, and what the job used on this
node (its GPUs, and its cgroup's memory peak and CPU time, from the prolog's sampler).

Exit status 1 only when a GPU of the job may still be above its ceiling (the limit was
refused and reads back higher, or cannot be read at all): Slurm then drains the node,
which is right for a GPU that will not obey. Anything else (no prolog record, a dead or
missing sampler, unreadable totals) is logged and the epilog succeeds.
"""

from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path
from typing import Callable

from slurm_synergy.gpu import Backend, Gpu, GpuError
from slurm_synergy.gpu.sampler import Totals
from slurm_synergy.hooks import expiry
from slurm_synergy.hooks.context import HookContext, utc_now
from slurm_synergy.hooks.power import ceiling_mw
from slurm_synergy.hooks.records import (GpuStart, GpuUse, JobGpuStats, PrologRecord, RecordError,
                                          read_prolog, stats_path,
                                          write_json, not_this_accounts_alone)
from slurm_synergy.hooks.jobcgroup import CgroupUse
from slurm_synergy.hooks.sampling import SamplerTotals, read_totals

STOP_WAIT_S = 3.0


def stop_sampler(ctx: HookContext, pid: int | None) -> None:
    """SIGTERM to the job's sampler (only if that pid is still our sampler of this job),
    a short wait for its last totals, then SIGKILL."""
    if pid is None:
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        cmdline = []
    # A sampler that ended on its own (its job's cgroup gone) may linger as a zombie.
    if not cmdline or _zombie(pid):
        ctx.log(f"sampler (pid {pid}) had already ended")
        return
    if b"slurm_synergy.hooks" not in cmdline or ctx.job_id.encode() not in cmdline:
        ctx.log(f"pid {pid} is no longer this job's sampler: left alone")
        return
    if not _signal(pid, signal.SIGTERM):
        ctx.log(f"sampler (pid {pid}) had already ended")
        return
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or _zombie(pid):
            ctx.log(f"sampler (pid {pid}) stopped")
            return
        time.sleep(0.05)
    _signal(pid, signal.SIGKILL)
    ctx.log(f"sampler (pid {pid}) killed after {STOP_WAIT_S:g} s; its last totals are used")


def _signal(pid: int, sig: int) -> bool:
    """False when the process ended in between (it may, at any moment)."""
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


def restore(ctx: HookContext, gpu: Gpu) -> tuple[bool, float | None]:
    """Put one GPU back to its ceiling. (enforced, limit it was left at in W)."""
    uuid, log = gpu.info.uuid, ctx.log
    try:
        rng, now = gpu.power_range(), gpu.power_limit_mw()
    except GpuError as e:
        log(f"gpu {uuid}: CANNOT READ its power limit ({e}): cap not enforced")
        return False, None
    cap_w = ctx.cap_w
    try:
        top = ceiling_mw(rng, cap_w or 0.0)
    except GpuError as e:
        log(f"gpu {uuid}: NO CEILING ({e}): cap not enforced")
        return False, now / 1000
    if cap_w is None:
        top = min(top, now)     # the cap is unknown: lower to the default, never raise
    elif cap_w > 0 and top > cap_w * 1000:
        log(f"gpu {uuid}: site cap {cap_w:g} W is below the device's "
            f"minimum {rng.min_mw / 1000:g} W; held at the minimum")
    if now != top:
        try:
            gpu.set_power_limit_mw(top)
            log(f"gpu {uuid}: limit {now / 1000:g} W -> {top / 1000:g} W (ceiling)")
        except GpuError as e:
            log(f"gpu {uuid}: refused the ceiling {top / 1000:g} W ({e})")
        try:
            now = gpu.power_limit_mw()
        except GpuError as e:
            log(f"gpu {uuid}: CANNOT READ its power limit back ({e}): cap not enforced")
            return False, None
    else:
        log(f"gpu {uuid}: limit {now / 1000:g} W is the ceiling already")
    if now > top:
        log(f"gpu {uuid}: STILL AT {now / 1000:g} W, above the ceiling {top / 1000:g} W: "
            f"cap not enforced")
        return False, now / 1000
    return True, now / 1000


def _use(gpu: Gpu, start: GpuStart | None, totals: Totals | None,
         limit_after_w: float | None) -> GpuUse:
    energy, source, notes = None, "", []
    end = gpu.energy_mj()
    if start and start.energy_start_mj is not None and end is not None \
            and end >= start.energy_start_mj:
        energy, source = (end - start.energy_start_mj) / 1000, "counter"
    elif totals and totals.samples >= 2:
        energy, source = totals.energy_mj / 1000, "power"
    else:
        notes.append("energy unknown: no counter at both ends and too few power samples")
    if totals is None:
        notes.append("no samples: the sampler did not run or left no totals")
    limit = (start.limit_set_mw if start.limit_set_mw is not None
             else start.limit_before_mw) if start else None
    info = gpu.info
    return GpuUse(
        uuid=info.uuid, pci_bus_id=info.pci_bus_id, name=info.name,
        power_limit_w=limit / 1000 if limit is not None else None,
        energy_j=energy, energy_source=source,
        util_mean_pct=totals.util_mean if totals else None,
        sm_active_mean_pct=totals.sm_active_mean if totals else None,
        mem_peak_mb=totals.mem_peak_mb if totals and totals.samples else None,
        samples=totals.samples if totals else 0, limit_after_w=limit_after_w,
        note="; ".join(notes), mem_total_mb=info.memory_mb)


def _restore_all(ctx: HookContext, backend: Backend) -> tuple[int, list[Gpu], dict[str, float | None]]:
    """Every GPU of the job to its ceiling: (exit status, the GPUs found, the limit each
    was left at in W)."""
    log = ctx.log
    if backend.broken:
        log(f"CANNOT REACH the GPUs ({backend.reason}): cap not enforced")
        log("exit 1: a GPU of this job may be above the power cap; Slurm drains the node")
        return 1, [], {}
    if not backend.gpus:
        log(f"{backend.reason}; nothing to restore for GPUs {','.join(ctx.gpu_ids)}")
        return 0, [], {}
    gpus, missing = backend.find(ctx.gpu_ids)
    enforced = not missing
    if missing:
        log(f"GPU(s) {','.join(missing)} of SLURM_JOB_GPUS NOT FOUND by {backend.name}: "
            f"cannot confirm their power cap")
    after: dict[str, float | None] = {}
    for gpu in gpus:
        ok, after[gpu.info.uuid] = restore(ctx, gpu)
        enforced &= ok
    if not enforced:
        log("exit 1: a GPU of this job may be above the power cap; Slurm drains the node")
    return (0 if enforced else 1), gpus, after


def run(ctx: HookContext, backend: Backend,
        settled: Callable[[int], None] = lambda code: None) -> int:
    """`settled` hears the exit status as soon as the GPUs are dealt with, before the
    accounting: a slow stats folder must not turn an enforced cap into a drain."""
    log = ctx.log
    has_gpus = ctx.has_gpus()
    if not has_gpus and not ctx.watches_cgroup:
        return 0
    ended = utc_now()
    out = stats_path(ctx.stats_dir, ctx.job_id, ctx.node, ctx.restart)
    # The cap first: nothing after this may stand between a GPU and its ceiling.
    code, gpus, after = _restore_all(ctx, backend) if has_gpus else (0, [], {})
    if has_gpus and backend.broken:
        return code
    settled(code)
    record: PrologRecord | None = None
    try:
        record = read_prolog(ctx.prolog_path)
    except RecordError as e:
        log(f"no usable prolog record ({e}); energy from the sampler only, if any")
    stop_sampler(ctx, record.sampler_pid if record else None)
    totals = SamplerTotals({}, None)
    if ctx.totals_path.exists():
        try:
            totals = read_totals(ctx.totals_path)
        except RecordError as e:
            log(f"sampler totals unreadable ({e})")
    starts = {s.uuid: s for s in record.gpus} if record else {}
    uses = tuple(_use(g, starts.get(g.info.uuid), totals.gpus.get(g.info.uuid),
                      after[g.info.uuid]) for g in gpus)
    cgroup = totals.cgroup or CgroupUse(None, None, "the sampler left no cgroup reading")
    note = backend.reason if has_gpus and not backend.gpus else ""
    _write_stats(ctx, out, JobGpuStats(
        ctx.job_id, ctx.node, record.started if record else None, ended, uses, note,
        cgroup.mem_peak_mb, cgroup.cpu_s, cgroup.note if ctx.watches_cgroup else
        "cgroup_peaks is off"))
    for path in (ctx.prolog_path, ctx.totals_path):
        path.unlink(missing_ok=True)
    expiry.prune(ctx.stats_dir, ctx.policy.stats_keep_days,
                 min(expiry.BUDGET_S, ctx.policy.hook_timeout_s / 4), log)
    return code


def _write_stats(ctx: HookContext, out: Path, stats: JobGpuStats) -> None:
    """Once per job run: an epilog run twice keeps the first record, but only one this
    account wrote (in a shared folder a user could plant a file for a future job)."""
    try:
        # The cluster's own folder of the stats (paths.cluster_stats_dir), never a link.
        out.parent.mkdir(mode=0o755, exist_ok=True)
        folder = out.parent.lstat()
        if stat.S_ISLNK(folder.st_mode):
            ctx.log(f"GPU stats folder {out.parent} is a link: not written")
            return
        # Reports trust a record only as the folder's owner's: a folder a user made, or
        # one others may write or swap, would let them stand in for the epilog.
        why = not_this_accounts_alone(out.parent)
        if why:
            ctx.log(f"GPU stats folder {out.parent} is not this account's alone ({why}): "
                    "not written")
            return
        if out.lstat().st_uid == os.geteuid() and not out.is_symlink():
            ctx.log(f"GPU stats {out} exist already (epilog run twice): kept")
            return
        ctx.log(f"replacing {out}, which the epilog did not write")
    except FileNotFoundError:
        pass
    except OSError as e:
        ctx.log(f"GPU stats folder unreadable ({e})")
        return
    try:
        # The job's user reads them (its group), root and the epilogs' account: not every
        # user, though the file names (job ids) are as public as squeue.
        write_json(out, stats, 0o640, group=ctx.gid if ctx.gid is not None else os.getegid())
    except OSError as e:   # a full or unmounted stats folder costs the report, not the node
        ctx.log(f"GPU stats could not be written to {out} ({e})")
        return
    used = [f"{g.uuid}: {g.energy_j:.0f} J" if g.energy_j is not None else
            f"{g.uuid}: energy unknown" for g in stats.gpus]
    if stats.note:
        used.append(stats.note)
    used.append(f"memory peak {stats.cgroup_mem_peak_mb:.0f} MB, CPU {stats.cgroup_cpu_s:.1f} s"
                if stats.cgroup_mem_peak_mb is not None and stats.cgroup_cpu_s is not None
                else f"no cgroup reading: {stats.cgroup_note}")
    ctx.log(f"stats -> {out} ({'; '.join(used)})")
