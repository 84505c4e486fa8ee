"""Rescue of right-sized jobs that ran out of memory or GPU memory: a pass of root's timer
(`synergy plugin timelimits`), and what the decision learns from it.

A decision is a bet that a workload's next job needs what its measured run needed; a
config edited under the same script, a bigger dataset or a later peak can make it wrong.
When a job the shim gave less memory than it asked ends out of memory (its batch script or
one of its steps), or a job it gave fewer GPUs, or GPUs of a type with less memory, than it
asked fails with a GPU's memory full, the product took that risk, so it carries it: root
puts the job back in the queue under its own id with what its user asked, once, and no one
has to do anything.

GPU memory full is what root measured itself: the node epilog's stats of the job (its
sampler's NVML peak of each GPU against the board's memory, hooks/records.py), in the
cluster's stats folder that only root writes. A run at the decided type was sent there
because its measured peak fit with room to spare (model/gpufit.py), so a failed run that
filled a GPU (GPU_FULL of its memory) outgrew what was measured; a job that fails with its
GPUs far from full failed on its own, and one whose asked type has no more memory than the
decided one (the site's catalog) would have failed at its asked size too: both are left
alone. The rule cannot see a single allocation that fails before the GPU fills: such a job
is not put back, and its user resubmits it (`synergy jobs` says it failed).

Nothing a user wrote is read as structure. The jobs come from sacct without any text of a
user's (Accounting.lost_runs); what the job asked and what was decided come from its
admin comment, which only the shim (as slurmctld) and admins write, read by job id from
sacct --json, never from the comment (a client's asked= there is its user's text). Before
root changes the job it reads it again by id (squeue, text-free) and acts only where its
uid and finished state agree. The order keeps one job from being rescued twice, whatever
fails in between: root's ledger first (22.05 and 24.11 rewrite the out-of-memory record as
REQUEUED), then `requeuehold`, an admin hold, the asked size, the begin time Slurm pushed
two minutes out set back to now, and release. Its user's jobs that depended on it
(afterok), whose dependency failed when it ran out, get that dependency again.

A job its user submitted with --no-requeue (or on a site with JobRequeue=0) is not put
back: Slurm refuses it, the ledger and the job's admin comment say so, and its user sees
in `synergy jobs` what to resubmit. A job that ran out at what it asked, or was never
lowered, is its own: left alone.

The workload learns: the table's sync (decisions/sync.py) leaves its memory as asked,
marking its next job to be measured, until a profile newer than the rescue exists (the
rescued run's own follow raises the profile where it sees a higher peak:
measure/inrun/follow.py).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from slurm_synergy import paths
from slurm_synergy.fileio import atomic_write_text, read_untrusted
from slurm_synergy.hooks.records import stats_for
from slurm_synergy.model import comment as comment_format
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.policy import site_catalog
from slurm_synergy.paths import policy_path
from slurm_synergy.slurm import LostRun, Slurm

# Root's ledger of the jobs it rescued (or could not), beside the decision table: sync
# reads it to leave a rescued workload's memory as asked.
LEDGER_NAME = "synergy-rescues.json"
LEDGER_BYTES = 16 << 20
# How far back a round looks: slurmctld holds a finished job MinJobAge (300 s by default)
# and up to a minute more; a requeue is possible only while it does.
LOOK_BACK = "now-15minutes"
RESCUES_PER_ROUND = 20       # jobs put back in one round, whatever users submit
LOOKED_PER_ROUND = 500       # lost runs whose admin comments one round reads
KEEP_S = 30 * 86400          # ledger entries kept this long (a month of reports)
MAX_KEPT = 20000
# The mark root adds to the job's admin comment (and its comment, for the user's reports).
MARK = "rescued"
# A failed run whose GPU held this share of the board's memory at its peak filled it: NVML
# counts the allocator's cache and the CUDA context, so a run that asked for more than was
# left reads near the top, while a run decided onto a type was measured to fit well below.
GPU_FULL = 0.9
FINISHED = ("OUT_OF_MEMORY", "FAILED", "COMPLETED", "CANCELLED", "NODE_FAIL", "TIMEOUT")
# A dependency as squeue prints it, every part of it Slurm's: kind, job (an array's task
# or all of them, a delay), state; joined by , (all) or ? (any).
_PART = r"(?:after(?:ok|any|notok|corr|burstbuffer)?:\d+(?:_\d+|_\*)?(?:\+\d+)?|singleton)" \
        r"(?:\((?:failed|unfulfilled)\))?"
_DEPENDENCY = re.compile(rf"{_PART}(?:[,?]{_PART})*")


@dataclass(frozen=True)
class Sized:
    """What the shim saw a job ask and what it decided, from the job's admin comment."""

    fingerprint: str
    asked: comment_format.Resources
    decided: comment_format.Resources

    def lowered_memory(self) -> bool:
        """The decision gave it less memory than it asked (or than Slurm's default, where
        it asked none): the risk the product took."""
        d = self.decided.mem_mb
        return d is not None and (self.asked.mem_mb is None or d < self.asked.mem_mb)

    def lowered_gpus(self, memory_mib: Mapping[str, int]) -> bool:
        """The decision gave it fewer GPUs than it asked, or another type than it asked
        whose memory is less (`memory_mib`: the site's catalog; a type it does not know,
        or no type asked, counts as more)."""
        asked, decided = self.asked, self.decided
        if decided.gpus < asked.gpus:
            return True
        if not decided.gpus or not decided.gpu_type or decided.gpu_type == asked.gpu_type:
            return False
        return memory_mib.get(asked.gpu_type, 1 << 30) > memory_mib.get(decided.gpu_type, 0)


def sized(admin_comment: str) -> Sized | None:
    """The shim's asked= and decision= in an admin comment (its part begins at its key,
    after anything an admin wrote), read as a job comment's; None where there are none."""
    at = admin_comment.find(comment_format.PREFIX)
    ours = admin_comment[at:] if at >= 0 else ""
    fp = comment_format.fingerprint(ours)
    asked, decided = comment_format.asked(ours), comment_format.decision(ours)
    return Sized(fp, asked, decided) if fp and asked and decided else None


@dataclass
class Rescue:
    """One job root looked at: whose, which workload, what it asked and was given, the run
    it lost (s), when, and what came of it."""

    uid: int
    fingerprint: str
    asked: str
    decided: str
    lost_s: int
    at: float
    outcome: str        # "requeued" | "not requeued: <why>"
    kind: str = "oom"   # what it ran out of: a key of comment_format.RAN_OUT_OF


@dataclass
class Ledger:
    jobs: dict[str, Rescue] = field(default_factory=dict)


def ledger_path(table: Path) -> Path:
    """Where the ledger lives: beside the decision table, which its readers know."""
    return table.with_name(LEDGER_NAME)


def load_ledger(path: Path) -> Ledger:
    """Root's ledger; empty where there is none or it is not root's own (then no workload
    is held back, and a job is looked at again only while sacct still says it ran out)."""
    try:
        data = json.loads(read_untrusted(path, LEDGER_BYTES, owner=os.geteuid()))
        return Ledger({str(k): Rescue(**v) for k, v in data["jobs"].items()})
    except (OSError, SynergyError, ValueError, TypeError, KeyError, AttributeError):
        return Ledger()


def _save(path: Path, ledger: Ledger, now: float) -> None:
    kept = sorted(((k, r) for k, r in ledger.jobs.items() if now - r.at < KEEP_S),
                  key=lambda kr: kr[1].at)[-MAX_KEPT:]
    # Root's alone: it names users' workloads and sizes.
    atomic_write_text(path, json.dumps({"jobs": {k: asdict(r) for k, r in kept}},
                                       sort_keys=True), 0o600)


def rescued_workloads(path: Path) -> dict[tuple[int, str], tuple[float, str, str]]:
    """(uid, workload) -> when its latest job ran out of memory or GPU memory at the decided
    size (put back or not), that job's id and what it ran out of: sync leaves the workload
    as asked until a profile newer than that exists."""
    out: dict[tuple[int, str], tuple[float, str, str]] = {}
    for job, r in load_ledger(path).jobs.items():
        if r.at > out.get((r.uid, r.fingerprint), (0.0, "", ""))[0]:
            out[(r.uid, r.fingerprint)] = (r.at, job, comment_format.RAN_OUT_OF.get(r.kind, ""))
    return out


def restore_settings(asked: comment_format.Resources,
                     config: Mapping[str, str]) -> dict[str, str]:
    """`scontrol update` settings that give a pending job back what it asked: its cores a
    task, its memory (Slurm's default where it asked none) and its GPUs."""
    cpus = asked.cpus or 1
    out = {"NumCPUs": str(cpus), "MinCPUsNode": str(cpus), "CPUsPerTask": str(cpus)}
    if asked.mem_mb:
        out["MinMemoryNode"] = str(asked.mem_mb)
    elif (config.get("DefMemPerCPU") or "").isdigit():
        out["MinMemoryCPU"] = config["DefMemPerCPU"]
    else:
        node = config.get("DefMemPerNode") or ""
        out["MinMemoryNode"] = node if node.isdigit() else "0"    # 0: all of a node's
    if asked.gpus:
        out["TresPerNode"] = f"gres/gpu:{asked.gpu_type + ':' if asked.gpu_type else ''}" \
                             f"{asked.gpus}"
    return out


@dataclass
class Rescued:
    """What one round did, for the timer's log line."""

    requeued: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)     # "job (why)"
    renewed: list[str] = field(default_factory=list)     # their dependents, waiting again
    on_gpu: list[str] = field(default_factory=list)      # those of them that filled a GPU

    def line(self) -> str:
        """One line saying what was done ("" where nothing)."""
        parts = []
        if self.requeued:
            jobs = ", ".join(f"{j} (GPU memory)" if j in self.on_gpu else j
                             for j in self.requeued)
            parts.append("ran out of memory at the decided size, put back with what they "
                         f"asked: job(s) {jobs}")
        if self.renewed:
            parts.append(f"their dependents wait for them again: job(s) "
                         f"{', '.join(self.renewed)}")
        if self.refused:
            parts.append(f"not put back: {', '.join(self.refused)}")
        return "; ".join(parts)


def _text(size: comment_format.Resources) -> str:
    return comment_format.asked_text(size.cpus, size.mem_mb, size.gpus, size.gpu_type)


def _admin_marked(admin_comment: str, mark: str) -> str:
    return f"{admin_comment} {MARK}={mark}".strip()


def _one(slurm: Slurm, run: LostRun, kind: str, s: Sized, ledger: Ledger,
         save: Callable[[], None], config: Mapping[str, str], admin_comment: str,
         clock: Callable[[], float], done: Rescued) -> bool:
    """Put one job back with what it asked, or record why not; whether it was. `kind`:
    what it ran out of (a key of comment_format.RAN_OUT_OF)."""
    entry = Rescue(run.uid, s.fingerprint, _text(s.asked), _text(s.decided), run.elapsed_s,
                   clock(), "requeued", kind)
    mark = comment_format.rescue_mark(kind, run.elapsed_s)
    again = slurm.timed_job(run.job_id)
    if again is None or again.uid != run.uid or again.state not in FINISHED:
        entry.outcome = ("not requeued: slurmctld no longer holds it (past MinJobAge); "
                         "resubmit its script" if again is None
                         else "not requeued: it changed since it was read")
        ledger.jobs[run.job_id] = entry
        done.refused.append(f"{run.job_id} ({entry.outcome[14:]})")
        return False
    # Root's ledger first: one job is never put back twice, whatever fails below.
    ledger.jobs[run.job_id] = entry
    save()
    try:
        slurm.requeue_held(run.job_id)
    except SynergyError as e:
        why = str(e).splitlines()[0]
        entry.outcome = ("not requeued: submitted with --no-requeue (or the site's "
                         "JobRequeue=0); resubmit its script" if "disabled" in why.lower()
                         else f"not requeued: Slurm refused: {why}")
        try:
            slurm.update_job(run.job_id, {"AdminComment": _admin_marked(admin_comment,
                                                                        "no-requeue")})
        except SynergyError:
            pass        # the ledger says it
        done.refused.append(f"{run.job_id} ({entry.outcome[14:]})")
        return False
    try:
        slurm.hold(run.job_id)
        slurm.mark(run.job_id, comment_format.Marks({MARK: mark}),
                   {**restore_settings(s.asked, config),
                    "AdminComment": _admin_marked(admin_comment, mark)})
        # Requeue pushes its begin time out two minutes: a rescued job waits no longer.
        slurm.update_job(run.job_id, {"StartTime": "now"})
    except SynergyError as e:
        entry.outcome = f"requeued, its size not restored: {str(e).splitlines()[0]}"
    finally:
        # Released whatever happened: a job left held would wait for ever.
        try:
            slurm.release([run.job_id])
        except SynergyError as e:
            entry.outcome += f"; not released: {str(e).splitlines()[0]}"
    if entry.outcome == "requeued":
        done.requeued.append(run.job_id)
        if kind == "gpu-oom":
            done.on_gpu.append(run.job_id)
        return True
    done.refused.append(f"{run.job_id} ({entry.outcome})")
    return False


def _wait_again(slurm: Slurm, put_back: list[LostRun], done: Rescued) -> None:
    """Their users' jobs that depended on them (afterok) failed that dependency when they
    ran out, and Slurm never tests it again: each is given its dependency again,
    as Slurm wrote it, so that it waits for the run put back. One squeue for them all."""
    if not put_back:
        return
    for job_id, uid, dependency in slurm.dependencies():
        run = next((o for o in put_back if o.uid == uid
                    and f":{o.job_id}(failed)" in dependency), None)
        if run is None or not _DEPENDENCY.fullmatch(dependency):
            continue
        again = slurm.timed_job(job_id)
        if again is None or again.uid != uid or again.state != "PENDING":
            continue
        try:
            slurm.update_job(job_id, {"Dependency": re.sub(r"\((?:failed|unfulfilled)\)", "",
                                                           dependency)})
        except SynergyError as e:
            done.refused.append(f"{job_id}'s dependency on {run.job_id} not renewed "
                                f"({str(e).splitlines()[0]})")
            continue
        done.renewed.append(job_id)


@dataclass(frozen=True)
class GpuEvidence:
    """Where root reads what a failed job's GPUs held: the node epilogs' stats folder of
    this cluster (root's alone, hooks/records.py), and each GPU type's memory (MiB) in the
    site's catalog."""

    stats_dir: Path
    memory_mib: Mapping[str, int]

    @classmethod
    def of_cluster(cls, cluster: str) -> "GpuEvidence":
        """The cluster's stats folder (paths) and the site policy's catalog, read now."""
        types = site_catalog(policy_path()).types
        return cls(paths.cluster_stats_dir(cluster),
                   {name: t.memory_mib for name, t in types.items()})

    def filled(self, job_ids: set[str]) -> set[str]:
        """Those of these jobs a GPU of which the epilog measured at GPU_FULL of its board
        or more (one listing of the folder for them all)."""
        records = stats_for(self.stats_dir, job_ids)[0]
        return {job for job, runs in records.items()
                if max((r.mem_full_share or 0.0 for r in runs), default=0.0) >= GPU_FULL}


def rescue_round(slurm: Slurm, path: Path, gpus: GpuEvidence | None = None,
                 clock: Callable[[], float] = time.time) -> Rescued:
    """One round: the jobs that ran out of memory lately under a lowered --mem, or failed
    having filled a GPU of fewer or smaller ones than they asked (`gpus`: where that is
    read; None reads no GPU's), put back."""
    done = Rescued()
    ledger = load_ledger(path)
    before = len(ledger.jobs)
    # Out of memory first, then the newest: where many failed (a user's failing array),
    # a round stays bounded and the rest wait for the next.
    fresh = sorted((r for r in slurm.lost_runs(LOOK_BACK) if r.job_id not in ledger.jobs
                    and (r.out_of_memory or gpus is not None)),
                   key=lambda r: (not r.out_of_memory, -int(r.job_id)))[:LOOKED_PER_ROUND]
    if not fresh:
        return done
    texts = slurm.sacct_texts([r.job_id for r in fresh], ["AdminComment"])
    ours: list[tuple[LostRun, Sized, str]] = []
    for run in fresh:
        admin = texts.get(run.job_id, {}).get("AdminComment", "")
        s = sized(admin)
        if s is not None and f" {MARK}=" not in f" {admin}":
            ours.append((run, s, admin))        # else not ours, or put back once already
    lowered = {run.job_id for run, s, _ in ours if gpus is not None and run.state == "FAILED"
               and not run.out_of_memory and s.lowered_gpus(gpus.memory_mib)}
    filled = gpus.filled(lowered) if gpus is not None and lowered else set()
    config: dict[str, str] | None = None
    put_back: list[LostRun] = []
    n = 0
    for run, s, admin in ours:
        if run.out_of_memory and s.lowered_memory():
            kind = "oom"
        elif run.job_id in filled:
            kind = "gpu-oom"
        else:
            continue        # its own size, or it failed on its own
        if n == RESCUES_PER_ROUND:
            break           # the rest next round
        n += 1
        config = config if config is not None else slurm.config()
        if _one(slurm, run, kind, s, ledger, lambda: _save(path, ledger, clock()), config,
                admin, clock, done):
            put_back.append(run)
    # Every job looked at is in the ledger, its outcome as it ended.
    if len(ledger.jobs) != before:
        _save(path, ledger, clock())
    _wait_again(slurm, put_back, done)
    return done
