"""Submit a job list: validate every row, render every script, then sbatch.

Submission is all-or-nothing. Slurm is first asked (`sbatch --test-only`, once per
distinct resource shape) whether it would take every job; then every row goes into
the ledger, jobs go in held and are released only once every sbatch has succeeded;
if one still fails, the ones already queued are cancelled. A controller that dies
part-way leaves ledger entries that `synergy reconcile`, or the next submit of the
same file, sets right against Slurm (see reconcile.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from tqdm import tqdm

from slurm_synergy.submission.csvjobs import load_jobs
from slurm_synergy.model.errors import SlurmError, SlurmUnreachable, SynergyError
from slurm_synergy.fileio import atomic_write_text, private_folder
from slurm_synergy.model.jobspec import JobSpec
from slurm_synergy.submission.ledger import LedgerEntry, Ledger, ledger_path, new_tag, row_key
from slurm_synergy.decisions.decider import resolve_mode
from slurm_synergy.decisions.service import (NO_PROFILE, DecisionRequest, DecisionService,
                                              Refusal, own_store)
from slurm_synergy.model.rightsize import Asked, Rightsized, rightsize
from slurm_synergy.model.units import gpu_types
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.submission.reconcile import reconcile
from slurm_synergy.submission.render import Task, check_out_dir, render, render_hetero, task_for
from slurm_synergy.slurm import Slurm
from slurm_synergy.site import Site


DEFAULT_MAX_ARRAY = 1001  # Slurm's default MaxArraySize
PROFILE_CHOICES = ("auto", "always", "never", "only")


@dataclass(frozen=True)
class SubmitOptions:
    out: Path
    dry_run: bool = False
    sequential: bool = False      # chain rows with afterany dependencies
    force: bool = False           # submit rows the ledger says are already submitted
    arrays: bool = False          # rows with identical resources and workload as job arrays
    hold: bool = False            # leave the jobs held (release with scontrol release)
    profile: str = "auto"         # auto: as the site policy says; always; never; only
                                  # (profile, then end without training)
    mode: str = "auto"            # who applies decisions: auto, shim (slurmctld), user (here)
    on_profiled: str | None = None    # continue or resubmit; None: each row's, else the policy's


@dataclass(frozen=True)
class Unit:
    """One sbatch call: one row, or several rows as one array job."""

    name: str
    tasks: tuple[Task, ...]
    script: Path
    begin_s: float

    @property
    def array(self) -> str:
        """The unit's --array range ("0-N"), "" for a single row."""
        return f"0-{len(self.tasks) - 1}" if len(self.tasks) > 1 else ""

    def task_id(self, job_id: str, task: Task) -> str:
        """A row's own job id: the array task (12_3) when this unit is an array."""
        return f"{job_id}_{task.index}" if self.array else job_id


@dataclass
class SubmitResult:
    units: list[Unit] = field(default_factory=list)
    job_ids: dict[str, str] = field(default_factory=dict)     # job name -> job id
    skipped: list[tuple[JobSpec, LedgerEntry]] = field(default_factory=list)


def plan_units(specs: Sequence[JobSpec], opts: SubmitOptions, max_array: int) -> list[Unit]:
    """The rows as sbatch calls: alike rows as array jobs (with --arrays, at most `max_array`
    each), each with its script's path and its delay from the first (s)."""
    out = check_out_dir(opts.out)
    groups: dict[tuple, list[JobSpec]] = {}
    offset = 0.0
    begins: dict[str, float] = {}
    for spec in specs:
        # torchloader's submit_interval: this row starts that long after the one before.
        offset += spec.submit_interval_s
        begins[spec.name] = offset
        if opts.arrays and not opts.sequential and not spec.hetero:
            # Rows share an array when Slurm allocates them alike, they are one workload
            # and their script runs alike (watch mode, the workers the probe sets): one
            # rendered script serves the whole array.
            key = (*spec.resources, spec.fingerprint, spec.script, spec.watch,
                   spec.probe_workers, spec.on_profiled, offset)
        else:
            key = (spec.name,)
        groups.setdefault(key, []).append(spec)
    units = []
    for members in groups.values():
        for start in range(0, len(members), max_array):
            chunk = members[start:start + max_array]
            name = chunk[0].name if len(chunk) == 1 else f"{chunk[0].name}-array{len(chunk)}"
            tasks = tuple(task_for(spec, i, out) for i, spec in enumerate(chunk))
            units.append(Unit(name, tasks, out / "scripts" / f"{name}.sbatch",
                              begins[chunk[0].name]))
    return units


def submit_csv(csv_path: Path, opts: SubmitOptions, slurm: Slurm | None = None,
               ledger: Ledger | None = None, log: Callable[[str], None] = print) -> SubmitResult:
    """Submit the job list's rows the ledger has not seen (all with force), or write their
    scripts only on a dry run; returns the units, job ids and rows skipped."""
    specs = load_jobs(csv_path)
    # Read once, before anything is written: a policy that cannot be read stops it all.
    site = Site.load(slurm)
    slurm, policy = site.slurm, site.policy
    if ledger is None:
        # A dry run may have no cluster to ask: it reads the ledger of no cluster.
        try:
            ledger = Ledger(ledger_path("" if opts.dry_run else slurm.cluster_name()))
        except SlurmUnreachable as exc:
            raise SynergyError(f"{exc}\nnothing was submitted") from exc
    result = SubmitResult()
    with ledger.transaction():
        if not opts.dry_run:
            _settle(csv_path, specs, slurm, ledger, log)
        todo = []
        for spec in specs:
            entry = ledger.get(spec)
            if entry and not opts.force:
                result.skipped.append((spec, entry))
            else:
                todo.append(spec)
        if result.skipped:
            log(f"{len(result.skipped)} row(s) already submitted (first: {result.skipped[0][0].name} "
                f"as job {result.skipped[0][1].job_id}); --force submits them again")
        if not todo:
            return result
        # A dry run may have no cluster to ask, so it plans with Slurm's default limit.
        max_array = max_array_size(slurm) if opts.arrays and not opts.dry_run else DEFAULT_MAX_ARRAY
        result.units = plan_units(todo, opts, max_array)
        out = check_out_dir(opts.out)
        mode, choices = _decisions(result.units, opts, site, log)
        tags = {unit.name: new_tag() for unit in result.units}
        for unit in result.units:
            decision, profile = choices[unit.name]
            text = (render_hetero(unit.name, unit.tasks[0], out, unit.script, tags[unit.name])
                    if unit.tasks[0].spec.hetero else
                    render(unit.name, unit.tasks, out, unit.script, policy, unit.array,
                           profile, decision, opts.profile == "only", mode, tags[unit.name],
                           offline=opts.profile in ("always", "only"),
                           on_profiled=opts.on_profiled, sequential=opts.sequential))
            # Its own user's alone: it holds the rows' command lines.
            private_folder(unit.script.parent)
            atomic_write_text(unit.script, text, 0o700)
        private_folder(out / "logs")
        if opts.dry_run:
            log(f"dry run: {len(result.units)} script(s) written to {opts.out / 'scripts'}, "
                "nothing submitted")
            return result
        _preflight(result.units, slurm)
        # Every row is in the ledger before its sbatch goes: a crash from here on leaves
        # a trace that `synergy reconcile` (or the next submit) can settle.
        for unit in result.units:
            for task in unit.tasks:
                ledger.intend(task.spec, unit.script, tags[unit.name],
                              task.index if unit.array else -1)
        ledger.save()
        ids = _submit_units(result.units, opts, slurm, ledger, csv_path)
        for unit, job_id in zip(result.units, ids):
            for task in unit.tasks:
                result.job_ids[task.spec.name] = unit.task_id(job_id, task)
    return result


def _settle(csv_path: Path, specs: Sequence[JobSpec], slurm: Slurm, ledger: Ledger,
            log: Callable[[str], None]) -> None:
    """Set the ledger's entries for these rows right against Slurm before deciding what
    to submit: rows Slurm lost go again, a failed submission's leftovers are cancelled."""
    keys = [row_key(s) for s in specs if ledger.get(s)]
    if not keys:
        return
    names = {row_key(s): s.name for s in specs}
    try:
        done = reconcile(ledger, keys, slurm)
    except SlurmUnreachable as exc:
        raise SynergyError(f"{exc}\ncannot check the {len(keys)} row(s) of {csv_path} "
                           "submitted before against Slurm; nothing was submitted") from exc
    ledger.save()
    if done.cancelled:
        log(f"cancelled the {len(done.cancelled)} job(s) left by an earlier failed submission")
    if done.unreached:
        first = next(iter(done.unreached.values()))
        raise SynergyError(f"{len(done.unreached)} job(s) of an earlier failed submission are "
                           f"still in Slurm and could not be cancelled (first: job {first}); "
                           "nothing was submitted")
    if done.lost:
        log(f"{len(done.lost)} row(s) submitted before are not in Slurm (first: "
            f"{names[done.lost[0]]}); submitting them again")


def _decisions(units: Sequence[Unit], opts: SubmitOptions, site: Site,
               log: Callable[[str], None]
               ) -> tuple[str, dict[str, tuple[Rightsized | None, bool]]]:
    """The mode, and per unit: the decision to apply here (user mode only) and whether
    to profile first.

    Under the shim, slurmctld decides and marks; here only --profile forces profiling.
    In user mode this command does both, with the same engine and policy. A dry run
    cannot ask the cluster, so `auto` renders as under the shim.
    """
    if opts.profile not in PROFILE_CHOICES:
        raise SynergyError(f"profile {opts.profile!r} is not one of {', '.join(PROFILE_CHOICES)}")
    planned = [u for u in units if u.tasks[0].spec.hetero]
    if planned and opts.profile == "only":
        raise SynergyError(f"{_rows(planned[0])}: a job over two GPU types is planned from "
                           "its traces, not profiled; leave it out of --profile-only")
    mode = "user" if opts.mode == "user" else (
        "shim" if opts.dry_run and opts.mode == "auto" else resolve_mode(opts.mode, site.slurm))
    # A job over two GPU types is neither profiled nor given a decision here.
    choices: dict[str, tuple[Rightsized | None, bool]] = {u.name: (None, False)
                                                           for u in planned}
    units = [u for u in units if not u.tasks[0].spec.hetero]
    if mode == "shim":
        return mode, {**choices,
                      **{u.name: (None, opts.profile in ("always", "only")) for u in units}}
    store = ProfileStore.default()
    service = DecisionService.for_site(site, own_store(store))
    for unit in units:
        head = unit.tasks[0].spec
        answer = service.decide(DecisionRequest(os.geteuid(), head.fingerprint, head.partition))
        decision = None if isinstance(answer, Refusal) else answer
        if isinstance(answer, Refusal) and answer.why != NO_PROFILE:
            log(f"{answer}; submitted as written")
        sized = None if decision is None else rightsize(
            Asked(head.cpus, head.mem_mb, head.gpus, head.gpu_type, pinned=head.pinned),
            decision, site.policy.user_request_wins)
        # A workload whose marked run measured nothing lately is not marked (profiles.py).
        profile = opts.profile in ("always", "only") or (
            opts.profile == "auto" and decision is None and site.policy.profile_new
            and not store.is_held(head.fingerprint))
        choices[unit.name] = (sized, profile)
    decided = sum(d is not None for d, _ in choices.values())
    marked = sum(p for _, p in choices.values())
    log(f"user mode: {decided} job(s) sized from their profiles, {marked} to be profiled first")
    return mode, choices


def _preflight(units: Sequence[Unit], slurm: Slurm) -> None:
    seen: set[tuple] = set()
    for unit in units:
        if unit.tasks[0].spec.hetero:
            _check_distinct_nodes(unit, slurm)
        shape = unit.tasks[0].spec.resources
        if shape in seen:
            continue
        seen.add(shape)
        try:
            slurm.test_only(unit.script)
        except SlurmUnreachable as exc:
            raise SynergyError(f"{exc}\nnothing was submitted") from exc
        except SlurmError as exc:
            raise SynergyError(f"{_rows(unit)}: Slurm would refuse the job: {exc}\n"
                               "nothing was submitted") from exc


def _check_distinct_nodes(unit: Unit, slurm: Slurm) -> None:
    """Slurm gives a heterogeneous job's components nodes of their own (a job whose
    partition cannot stays pending; `sbatch --test-only` does not say so): refused here
    unless two distinct nodes of the partition hold the two types."""
    spec = unit.tasks[0].spec
    first, second = (p.gpu_type for p in spec.hetero)
    try:
        nodes = slurm.nodes(spec.partition or None)
    except SlurmUnreachable as exc:
        raise SynergyError(f"{exc}\nnothing was submitted") from exc
    holders = [{n.name for n in nodes if t in gpu_types(n.gres)} for t in (first, second)]
    if not any(a != b for a in holders[0] for b in holders[1]):
        where = f"partition {spec.partition}" if spec.partition else "the default partition"
        raise SynergyError(f"{_rows(unit)}: Slurm runs a heterogeneous job's components on "
                           f"nodes of their own, and {where} has no two nodes holding "
                           f"{first} and {second} (give a partition that has them)\n"
                           "nothing was submitted")


def _rows(unit: Unit) -> str:
    more = f" and {len(unit.tasks) - 3} more" if len(unit.tasks) > 3 else ""
    return ", ".join(str(t.spec.source) for t in unit.tasks[:3]) + more


def _submit_units(units: Sequence[Unit], opts: SubmitOptions, slurm: Slurm,
                  ledger: Ledger, csv_path: Path) -> list[str]:
    ids: list[str] = []
    releasing = False
    try:
        for unit in tqdm(units, desc="sbatch", unit="job", disable=None, leave=False):
            options = ["--hold"]
            if opts.profile == "never":
                # Set in the job's environment, so the shim does not mark it either.
                options.append("--export=ALL,SYNERGY_PROFILE=0")
            if unit.begin_s > 0:
                options.append(f"--begin=now+{int(round(unit.begin_s))}")
            if opts.sequential and ids:
                # afterany, as torchloader's sequential mode: the next row runs whatever
                # became of the one before.
                options.append(f"--dependency=afterany:{ids[-1]}")
            try:
                ids.append(slurm.sbatch(unit.script, options))
            except SlurmUnreachable:
                raise
            except SlurmError as exc:
                raise SynergyError(f"{_rows(unit)}: Slurm refused the job: {exc}") from exc
            for task in unit.tasks:
                ledger.record(task.spec, unit.task_id(ids[-1], task), unit.script)
            ledger.save()
        if not opts.hold:
            releasing = True
            slurm.release(ids)
    except BaseException as exc:
        err = _undo(units, ids, slurm, ledger, csv_path, exc, releasing)
        if err is exc:
            raise
        raise err from exc
    return ids


def _undo(units: Sequence[Unit], ids: Sequence[str], slurm: Slurm, ledger: Ledger,
          csv_path: Path, exc: BaseException, releasing: bool) -> BaseException:
    """All or nothing: a failed submission's jobs are cancelled. What Slurm has is
    checked rather than assumed, and the message says only what was verified; the
    exception to raise is returned (`exc` itself when it is not ours to explain)."""
    keys = [row_key(t.spec) for u in units for t in u.tasks]
    for key in keys:
        ledger.mark(key, "cancelling")
    ledger.save()
    finish = f"run `synergy reconcile {csv_path}` to finish"
    try:
        done = reconcile(ledger, keys, slurm)
        ledger.save()
    except SlurmUnreachable:
        held = "released or not" if releasing else "held"
        return exc if not isinstance(exc, SynergyError) else SynergyError(
            f"{exc}\nsbatch answered for {len(ids)} job(s) ({held}); they could not be "
            f"cancelled; the ledger keeps them: {finish} once slurmctld answers")
    if not isinstance(exc, SynergyError):
        return exc
    queued = len(done.cancelled) + len(done.unreached)
    line = f"{queued} queued, {len(done.cancelled)} cancelled"
    if done.unreached:
        first = next(iter(done.unreached.values()))
        line += f", {len(done.unreached)} could not be reached: job {first} — {finish}"
    else:
        line += "; nothing was submitted"
    return SynergyError(f"{exc}\n{line}")


def max_array_size(slurm: Slurm) -> int:
    """Tasks per array: indices run 0..MaxArraySize-1, so MaxArraySize tasks fit."""
    try:
        return max(1, int(slurm.config().get("MaxArraySize", DEFAULT_MAX_ARRAY)))
    except ValueError:
        return DEFAULT_MAX_ARRAY
