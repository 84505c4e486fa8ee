"""One workload profiled: the plan checked, the lock taken, the steps run and swept, the
throughput model fitted to the components, the profile stored, the table recompiled."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

from slurm_synergy import __version__
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.noise import unsettled
from slurm_synergy.model.gpus import Catalog
from slurm_synergy.model.policy import Policy, load_site
from slurm_synergy.model.profile import Allocation, Point, Profile, ProfileError, combine
from slurm_synergy.model.throughput import fit_components, fit_steps
from slurm_synergy.paths import policy_path
from slurm_synergy.measure.errors import PROG, Busy, NothingToMeasure, UsageError
from slurm_synergy.measure.offline.fetch import fetch_rates_for
from slurm_synergy.model.jobspec import BUILTIN_SCRIPT
from slurm_synergy.measure.offline.gpu import open_gpus
from slurm_synergy.measure.offline.gpumem import estimate_gpu_memory, measure_script_memory
from slurm_synergy.measure.offline.gpuroom import MoveGpu, check_room, write_move
from slurm_synergy.measure.offline.plan import Plan, ProfileRequest, plan_profiling
from slurm_synergy.measure.offline.session import (FIRST_ITERATIONS, LEAST_MEASURE_S, MOST_ITERATIONS,
                                            Session)
from slurm_synergy.measure.offline.steps import Runner, Step
from slurm_synergy.measure.lock import profiling_lock, sync_decisions
from slurm_synergy.measure.offline.sweep import core_sweep, gpu_readings, power_sweep, repeat_sweep
from slurm_synergy.profiles import Unmeasured, hold_note
from slurm_synergy.slurm import Slurm


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def profile_workload(req: ProfileRequest, log: Callable[[str], None]) -> Profile | None:
    """Profile and store; None when it was profiled already; Busy when another job is
    profiling it now."""
    p = plan_profiling(req)
    with profiling_lock(p.store, p.fingerprint) as mine:
        if not mine:
            raise Busy(f"{p.fingerprint} is being profiled by another job now; not again")
        if p.store.has(p.fingerprint) and not req.force:
            try:
                p.store.load(p.fingerprint)
                log(f"{PROG}: {p.fingerprint} is already profiled "
                    f"({p.store.path(p.fingerprint)}); --force measures again")
                return None
            except ProfileError as e:
                log(f"{PROG}: {e}; measuring again")
        # Checked after the store: a right-sized job on one core may still ask, and is
        # told it is profiled already.
        if p.top < 2:
            raise UsageError(f"the allocation has {p.top} core(s); a CPU sweep needs at "
                             "least 2 (submit the profiling job with --cpus-per-task=2 or "
                             "more)")
        try:
            profile = _profile(req, p, log)
        except NothingToMeasure as e:
            _hold(p, str(e).splitlines()[0], log)
            raise
        if p.limits.job_id:
            sync_decisions(log)
        return profile


def _hold(plan: Plan, why: str, log: Callable[[str], None]) -> None:
    """File the workload's hold: a run of it measures nothing, so its jobs are not
    marked for measuring while the hold lasts (profiles.py)."""
    fp = plan.fingerprint
    try:
        plan.store.hold(Unmeasured(fp, why, plan.limits.job_id, _now()))
    except (OSError, ProfileError) as e:
        log(f"{PROG}: {fp}: no hold filed ({e})")
        return
    log(f"{PROG}: {fp}: {hold_note(fp)}")


def _profile(req: ProfileRequest, plan: Plan, log: Callable[[str], None]) -> Profile:
    workdir = (req.workdir or Path.cwd() / f"synergy-profile-{plan.fingerprint}").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    runner = Runner(command=plan.command, script_args=plan.script_args,
                    workers_option=plan.workers_option,
                    iterations_option=plan.iterations_option, procs=plan.procs,
                    # The first step's rate sets the later steps' window; it measures
                    # no more than FIRST_ITERATIONS, since a slow workload's 20 would
                    # cost more than the window saves.
                    iterations=min(req.max_iterations or MOST_ITERATIONS, FIRST_ITERATIONS),
                    warmup=req.warmup,
                    first_batch_s=req.first_batch_timeout_s, mem_mb=plan.mem_mb,
                    gpus=plan.gpus, launcher=plan.launcher, workdir=workdir,
                    # The script reads what it reads relative to the job's folder (a
                    # dataset in ./data, say) in every step, as in the job itself.
                    cwd=Path.cwd(),
                    timeout_s=req.step_timeout_s, name=f"profile-{plan.fingerprint}",
                    slurm=Slurm(), warm_cores=0 if req.fresh_steps else plan.top)
    try:
        return _measure(req, plan, runner, log)
    finally:
        runner.close()


def _measure(req: ProfileRequest, plan: Plan, runner: Runner,
             log: Callable[[str], None]) -> Profile:
    fp, store, limits, top, mem_mb = (plan.fingerprint, plan.store, plan.limits, plan.top,
                                      plan.mem_mb)
    launcher, ngpus, procs = plan.launcher, plan.gpus, plan.procs
    workdir = runner.workdir
    started, t0 = _now(), time.perf_counter()
    where = f"job {limits.job_id}" if limits.job_id else socket.gethostname()
    log(f"{PROG}: profiling {fp} ({req.job_name or req.script}) on {where}: up to {top} "
        f"cores, {mem_mb}M, {ngpus} GPU(s), {procs} process(es), up to "
        + (f"{req.max_iterations} iterations" if req.max_iterations else
           f"{MOST_ITERATIONS} iterations (more to fill {LEAST_MEASURE_S:g}s)")
        + f" or about {req.window_s:g}s per step, {launcher} steps; logs in {workdir}")
    runner.start()      # its imports overlap the GPU memory estimate
    site = _read_site()
    # Before any step: a step that would not fit the GPU should be known not to.
    gpu_memory = (estimate_gpu_memory(plan.script_args, plan.record_batch)
                  if req.script == BUILTIN_SCRIPT else
                  measure_script_memory(runner, top, procs, plan.record_batch,
                                        workers=plan.workers_at(top)))
    log(f"{PROG}: GPU memory: " + (
        ", ".join(f"batch {p.batch} {p.peak_mib:.0f} MiB" for p in gpu_memory.peaks)
        + f" (estimated in {gpu_memory.seconds:.1f}s)" if gpu_memory.method
        else f"no estimate: {gpu_memory.reason}"))
    if ngpus and limits.job_id and gpu_memory.method:
        if isinstance(site, SynergyError):
            why = f"the check could not be made ({site})"
        else:
            move, why = check_room(gpu_memory, limits.job_id,
                                   os.environ.get("SLURM_JOB_PARTITION", ""), Slurm(), *site)
            if move is not None:
                write_move(workdir, move)
                raise MoveGpu(move)
        log(f"{PROG}: GPU memory: steps run here: {why}")
    gpus, gpu_reason = open_gpus() if ngpus else ([], "the job has no GPU")
    gpus = gpus[:ngpus]
    # The least a profile takes: log2(top) + 1 counts, each run --repeats times, two
    # component steps, the one-core pair's two and one step on a single GPU.
    run = Session(runner, top=top, procs=procs, mem_mb=mem_mb, gpus=gpus,
                  workers_at=plan.workers_at, window_s=req.window_s,
                  max_iterations=req.max_iterations or MOST_ITERATIONS,
                  least_s=0.0 if req.max_iterations else LEAST_MEASURE_S, budget_s=req.budget_s,
                  steps=top.bit_length() * req.repeats + 2 + 2 * (procs == 1) + (ngpus >= 2),
                  desc=f"profile {fp[:8]}", log=log, t0=t0)
    points: list[Point] = []
    try:
        swept = core_sweep(top, run.measure, req.plateau, step=max(1, ngpus))
        first = run.measured[top]
        fetch, notes = fetch_rates_for(first, plan.script_args)
        # A script that slices its own tensors runs nothing apart from its step: neither
        # component step has a loader to drain or a batch to replay, so the training
        # steps alone set the model.
        from_loader = first.get("from_loader") is not False
        if not from_loader:
            notes.append("no data loader (its steps counted at its optimizer steps or "
                         "backward passes): no input-only or compute-only step, the model "
                         "is the training steps'")
        # Each component as the training steps run it: one loader worker with a core of
        # its own (the training process on the other), and the training process on one
        # core, as the rule leaves it. Measured on more threads, its CPU time per
        # sample would count the threads' spinning too.
        # One loader worker in the compute-only step too: it takes the first batch, which
        # is then replayed; none would break a script's worker_init_fn or a DataLoader
        # given a multiprocessing_context, which need workers.
        loader, compute = Step("loader", min(top, 2 * procs), 1), Step("compute", procs, 1)
        components = [run.component(loader), run.component(compute)] if from_loader else []
        # At one core the loader's worker and the trainer take turns on it, which the
        # components, each on a core of its own, cannot see (torchrun ranks share
        # differently, and are not paired).
        shared = run.shared_core() if procs == 1 and from_loader else None

        def components_again() -> None:
            """Run each component a second time where the budget allows, combined with its first."""
            # Every prediction rests on the two components, so once the measured counts
            # are settled the budget buys a second run of each, apart from the first:
            # their noise is then known too, and a held-out point's error can be read
            # against it. Compute-only first, which compute-bound predictions rest on.
            if not from_loader:
                return
            for i, step in ((1, compute), (0, loader)):
                if run.fits(components[i].step_s):
                    components[i] = combine([components[i], run.component(step)])
        # The repeats come after the components, so that other steps separate a count's
        # first run from its second; extra ones go where the decision's noise rule
        # cannot yet tell the counts apart.
        repeat_sweep(swept, run.rates, run.measure, run.counts_fit, req.repeats,
                     max(req.repeats, req.max_repeats), unclear=_noise_test(site, log),
                     after=components_again)
        train = run.train_points(swept)
        points.extend(train)
        if ngpus >= 2:
            # Would fewer GPUs do? The best core count again, on one GPU.
            best = max(train, key=lambda pt: pt.samples_per_s)
            run.bar.set_postfix_str("1 GPU")
            pt = run.run(Step("train", best.cores, best.workers // procs, gpus=1))
            points.append(pt)
            run.advance(f"{best.cores} cores on 1 of {ngpus} GPUs: {pt.samples_per_s:.1f} "
                        f"samples/s ({pt.step_s:.0f}s)")
        model = fit_components(components[0], components[1], train, on_gpu=bool(gpus),
                               fetch=fetch, shared=shared) if from_loader else \
            fit_steps(train, on_gpu=bool(gpus))
        readings = gpu_readings(run.sampler, gpu_reason, gpus, first)
        if gpus and req.power_sweep:
            run.bar.set_postfix_str("power limits")
            readings = (replace(readings, power_sweep_note=f"no power sweep: {site}")
                        if isinstance(site, SynergyError) else
                        power_sweep(runner, Step("train", top, plan.workers_at(top)), gpus,
                                    readings, site[0].power_cap_w))
    finally:
        run.close()
    profile = Profile(
        fingerprint=fp, job_name=req.job_name,
        command=tuple([req.script, *plan.script_args]), batch=plan.record_batch,
        allocation=Allocation(top, mem_mb, ngpus, socket.gethostname(), launcher,
                              limits.job_id, procs),
        points=tuple(points + components + list(shared or ())), model=model, gpu=readings,
        started=started,
        finished=_now(), profiling_s=round(run.spent_s(), 2),
        profiler_version=__version__, gpu_memory=gpu_memory,
        notes=tuple(notes) + ((runner.note,) if runner.note else ()))
    path = store.save(profile)
    log(f"{PROG}: {fp}: {profile.summary()}; {profile.profiling_s:.0f}s; saved {path}")
    return profile


def _read_site() -> tuple[Policy, Catalog] | SynergyError:
    """The site's policy and GPU catalog, read once for the whole profile; the fault
    where they cannot be read, which each use of them handles its own way."""
    try:
        return load_site(policy_path())
    except SynergyError as e:
        return e


def _noise_test(site: tuple[Policy, Catalog] | SynergyError, log: Callable[[str], None]
                ) -> Callable[[dict[int, Sequence[float]]], set[int]]:
    """The decision's noise test under the site policy; under the defaults where the
    policy cannot be read (it only aims the extra repeats, and the decision reads the
    policy again)."""
    if isinstance(site, SynergyError):
        log(f"{PROG}: extra repeats aimed by the default policy: {site}")
        policy = Policy()
    else:
        policy = site[0]
    return lambda runs: unsettled(runs, policy.noise)
