"""Every Slurm command the product runs, by what it is for: submission, steps, queries of
the queue and the nodes, updates of a job (accounting's: accounting.py). Each parses its
command's output into records.py's records; what root acts on is read in a form where no
text a user wrote can make a record (text without it, or --json: json_output.py)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from slurm_synergy.model.comment import Marks
from slurm_synergy.model.engine import NodeShape, shape_of
from slurm_synergy.model.errors import SlurmError, SynergyError
from slurm_synergy.model.units import duration_s, gpu_count
from slurm_synergy.slurm import json_output
from slurm_synergy.slurm.accounting import Accounting
from slurm_synergy.slurm.records import (SEP, JobText, Node, NodeUse, QueuedJob, TimedJob,
                                         comment_text, mb, unset, user_name)


# scontrol update's name for a job's comment: written by Slurm.mark alone.
COMMENT = "Comment"


class Slurm(Accounting):
    """The cluster as its commands show it and change it (the runner: runner.py)."""

    _cluster: str | None = None      # slurm.conf's ClusterName, once asked
    _version: str | None = None      # scontrol --version's line, once asked

    # --- submission ---------------------------------------------------------
    def sbatch(self, script: Path, options: Iterable[str] = ()) -> str:
        """Submit a batch script; returns the job id."""
        out = self.run(["sbatch", "--parsable", *options, str(script)], retry=False)
        # --parsable prints "jobid" or "jobid;cluster".
        return out.strip().split(";")[0]

    def test_only(self, script: Path) -> None:
        """Ask Slurm whether it would accept the script, without queueing it.

        A held job skips some of these checks and would sit pending forever.
        """
        self.run(["sbatch", "--test-only", str(script)])

    def release(self, job_ids: Sequence[str]) -> None:
        """Release held jobs."""
        if job_ids:
            self.run(["scontrol", "release", ",".join(job_ids)])

    def requeue_held(self, job_id: str) -> None:
        """Put a job that ended back in the queue under its own id, held (Slurm refuses a
        job submitted with --no-requeue, or one it no longer holds)."""
        self.run(["scontrol", "requeuehold", job_id], retry=False)

    def hold(self, job_id: str) -> None:
        """Hold a pending job; root's hold is an admin's, which its user cannot release."""
        self.run(["scontrol", "hold", job_id])

    def cancel(self, job_ids: Sequence[str]) -> None:
        """Cancel jobs."""
        if job_ids:
            self.run(["scancel", *job_ids])

    # --- steps inside an allocation ---------------------------------------------
    def step_argv(self, argv: Sequence[str], cores: int, mem_mb: int, gpus: int,
                  name: str) -> list[str]:
        """An srun command that runs `argv` as one step of the current allocation, held
        by Slurm's cgroups to `cores` cores, `mem_mb` of memory and `gpus` GPUs.

        Run it with Popen (not `run`): the caller streams the output and may stop it.
        --exact keeps the step to the cores it asked for, not the whole allocation.
        """
        exe = shutil.which("srun")
        if exe is None:
            raise SlurmError("srun not found on PATH: install the Slurm client (make setup)")
        gres = f"--gres=gpu:{gpus}" if gpus else "--gres=none"
        return [exe, "--exact", "--nodes=1", "--ntasks=1", f"--cpus-per-task={cores}",
                f"--mem={mem_mb}M", gres, f"--job-name={name}", "--kill-on-bad-exit=1",
                "--quiet", "--", *argv]

    # --- queries -------------------------------------------------------------
    def ping(self) -> bool:
        """Whether slurmctld answers, asked once."""
        try:
            return "UP" in self.run(["scontrol", "ping"], timeout=15, retry=False)
        except SlurmError:
            return False

    def version(self) -> str:
        """What `scontrol --version` prints: "slurm-wlm 24.11.5" (Debian), "slurm 23.11.4".
        Read once: every release's output is read alike (tests/golden/slurm-output)."""
        if self._version is None:
            self._version = self.run(["scontrol", "--version"], timeout=15).strip()
        return self._version

    def config(self) -> dict[str, str]:
        """`scontrol show config` as a dict."""
        conf: dict[str, str] = {}
        for line in self.run(["scontrol", "show", "config"]).splitlines():
            key, sep, value = line.partition("=")
            if sep:
                conf[key.strip()] = value.strip()
        return conf

    def cluster_name(self) -> str:
        """slurm.conf's ClusterName: what names this cluster's job ids apart."""
        if self._cluster is None:
            self._cluster = self.config().get("ClusterName", "")
        return self._cluster

    def nodes(self, partition: str | None = None) -> list[Node]:
        """The nodes of `partition` (default: the default partition; "" = all)."""
        args = ["sinfo", "--Node", "--noheader", "--format=%N|%T|%c|%m|%G|%E"]
        if partition is None:
            partition = self.default_partition()
        if partition:
            args.append(f"--partition={partition}")
        out = self.run(args)
        nodes = {}
        for line in out.splitlines():
            name, state, cpus, mem, gres, reason = line.split("|", 5)
            nodes[name] = Node(name, state, int(cpus), int(mem), gres,
                               "" if reason in ("none", "(null)") else reason)
        return list(nodes.values())

    def default_partition(self) -> str:
        """The partition a job without --partition goes to ("" when none is marked)."""
        out = self.run(["sinfo", "--noheader", "--format=%P"])
        return next((p.rstrip("*") for p in out.split() if p.endswith("*")), "")

    def active_states(self, job_ids: Sequence[str]) -> dict[str, str]:
        """State of each job still known to slurmctld (pending, running, ...)."""
        if not job_ids:
            return {}
        out = self.run(["squeue", "--noheader", "--array", "--states=all",
                        "--format=%i|%T", "--jobs=" + ",".join(job_ids)])
        return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)

    def queue(self, users: Sequence[str] = ()) -> list[QueuedJob]:
        """Pending and running jobs, highest priority first (squeue's order). No free
        text is asked for: a comment holding a newline could pass for another job's line
        (read one job's comment with `comment`)."""
        fields = ("JobID", "ArrayTaskID", "UserName", "State", "Reason", "cpus-per-task",
                  "NumTasks", "MinMemory", "tres-per-node", "NumNodes", "Partition",
                  "Feature", "QOS")
        args = ["squeue", "--noheader", "--states=PENDING,RUNNING", "--sort=-p,i",
                "--Format=" + ",".join(f"{f}:200|" for f in fields)]
        if users:
            args.append("--user=" + ",".join(users))
        jobs: dict[str, QueuedJob] = {}
        for line in self.run(args).splitlines():
            v = [x.strip() for x in line.split("|")]
            if len(v) < len(fields):
                continue
            try:
                job = QueuedJob(v[0], v[2], v[3], v[4], int(v[5]), int(v[6]), mb(v[7]),
                                gpu_count(v[8]), int(v[9]), v[10], unset(v[8]),
                                unset(v[11]), unset(v[1]) != "", unset(v[12]))
            except ValueError:
                raise SlurmError(f"squeue printed a line this cannot read: {line!r}") \
                    from None
            if job.job_id in jobs:
                raise SlurmError(f"squeue listed job {job.job_id} twice; not trusting "
                                   "this queue")
            jobs[job.job_id] = job
        return list(jobs.values())

    def own_jobs(self) -> list[dict[str, str]]:
        """Every job of this user slurmctld still holds, finished ones included (array
        tasks one by one): JobID, ArrayJobID, State, JobName, Comment."""
        fmt = SEP.join(("%i", "%F", "%T", "%j", "%k"))
        out = self.run(["squeue", "--noheader", "--array", "--states=all",
                        f"--user={user_name()}", f"--format={fmt}"])
        keys = ("JobID", "ArrayJobID", "State", "JobName", "Comment")
        rows = [dict(zip(keys, line.split(SEP, 4))) for line in out.splitlines()
                if line.count(SEP) >= 4]
        for row in rows:
            row["Comment"] = comment_text(row["Comment"])
        return rows

    # squeue -O's fields of a job's limits: none holds a text of its user's, so every line
    # is one job's (a line that does not read is Slurm's fault, and fails the call).
    _TIMED = ("JobID", "UserID", "State", "TimeLimit", "MinTime", "TimeUsed", "NumCPUs",
              "StartTime", "RestartCnt")

    def timed_jobs(self, job_ids: Sequence[str] = (),
                   states: str = "PENDING,RUNNING") -> list[TimedJob]:
        """Jobs' limits and time used (array tasks and heterogeneous jobs left out), of
        `job_ids` (every job where none) in `states`, read without any text a user wrote:
        the form root reads before it changes a job's limit."""
        args = ["squeue", "--noheader", f"--states={states}",
                "--Format=" + ",".join(f"{f}:40|" for f in self._TIMED)]
        if job_ids:
            args.append("--jobs=" + ",".join(job_ids))
        jobs = []
        for line in self.run(args).splitlines():
            v = [x.strip() for x in line.split("|")]
            if len(v) < len(self._TIMED) or any(v[len(self._TIMED):]):
                raise SlurmError(f"squeue printed a line this cannot read: {line[:200]!r}")
            if not v[0].isdigit():          # 12_3, 12_[4-9], 14+0: arrays, het jobs
                continue
            try:
                limit, used = duration_s(v[3]), duration_s(v[5])
                tmin = duration_s(v[4])
                jobs.append(TimedJob(v[0], int(v[1]), v[2],
                                     None if limit is None else int(limit) // 60,
                                     int(tmin or 0) // 60, int(used or 0), int(v[6]),
                                     unset(v[7]) if v[2] != "PENDING" else "", int(v[8])))
            except ValueError:
                raise SlurmError(f"squeue printed a line this cannot read: {line[:200]!r}") \
                    from None
        return jobs

    def dependencies(self) -> list[tuple[str, int, str]]:
        """Every pending job that depends on others: its id, uid and dependency as squeue
        prints it (afterok:12(failed),afterany:13(unfulfilled)), which Slurm writes from
        its own record: no text of a user's."""
        out = []
        for line in self.run(["squeue", "--noheader", "--states=PENDING",
                              "--Format=JobID:40|,UserID:40|,Dependency:4000|"]).splitlines():
            v = [x.strip() for x in line.split("|")]
            if len(v) >= 3 and v[0].isdigit() and v[1].isdigit() and v[2] not in ("", "(null)"):
                out.append((v[0], int(v[1]), v[2]))
        return out

    def timed_job(self, job_id: str) -> TimedJob | None:
        """One job's limits read again by its id, in any state, without text of its user's;
        None where slurmctld no longer holds it."""
        if not job_id.isdigit():
            return None
        try:
            found = self.timed_jobs([job_id], states="all")
        except SlurmError as e:
            if "Invalid job id" in str(e):
                return None
            raise
        return next((j for j in found if j.job_id == job_id), None)

    def queued_texts(self) -> list[JobText]:
        """Every pending and running job with its user's comment and its admin comment, from
        squeue --json (22.05's lists every job held: the states are picked here)."""
        jobs = json_output.queued(json_output.document(
            self.run(["squeue", "--json"], timeout=120), "squeue"))
        return [j for j in jobs if j.state in ("PENDING", "RUNNING")]

    def comment(self, job_id: str) -> str:
        """One job's comment, whole (squeue cuts it at 4000 characters, as sacct)."""
        out = self.run(["squeue", "--noheader", f"--jobs={job_id}", "--states=all",
                        "--Format=Comment:4000"])
        return comment_text(out.rstrip("\n").rstrip())

    def qos_of(self, job_id: str) -> str:
        """The QOS Slurm gave a job ("" where accounting has none)."""
        return unset(self.run(["squeue", "--noheader", f"--jobs={job_id}", "--states=all",
                                "--format=%q"]).strip())

    def gres(self, job_id: str) -> str:
        """The GPUs a job asked for per node, as squeue writes them (gres:gpu:a10:1)."""
        return self.run(["squeue", "--noheader", f"--jobs={job_id}", "--states=all",
                         "--Format=tres-per-node:400"]).strip()

    def memory_per_cpu(self, job_id: str) -> bool:
        """Whether the job's memory is per CPU (--mem-per-cpu, DefMemPerCPU): squeue's
        MinMemory does not tell it from memory per node."""
        return "MinMemoryCPU=" in self.run(["scontrol", "show", "job", "-o", job_id])

    def node_use(self, partition: str | None = None) -> list[NodeUse]:
        """Every node of `partition` (default: the default one) with what is held of it."""
        args = ["sinfo", "--Node", "--noheader",
                "--Format=NodeList:200|,StateLong:200|,CPUsState:200|,Memory:200|,"
                "AllocMem:200|,Gres:200|,GresUsed:200|"]
        if partition is None:
            partition = self.default_partition()
        if partition:
            args.append(f"--partition={partition}")
        nodes: dict[str, NodeUse] = {}
        for line in self.run(args).splitlines():
            v = [x.strip() for x in line.split("|")]
            if len(v) < 7:
                continue
            alloc, _, _, total = (int(x) for x in v[2].split("/"))
            nodes[v[0]] = NodeUse(v[0], v[1], total, alloc, mb(v[3]), mb(v[4]),
                                  gpu_count(v[5]), gpu_count(v[6]))
        return list(nodes.values())

    def cancel_all(self, wait_s: float = 30) -> int:
        """Cancel every job of the cluster, then wait up to `wait_s` seconds for them to
        end (their epilogs run); how many there were. For stopping a cluster of one's own."""
        ids = self.run(["squeue", "--noheader", "--format=%i"]).split()
        if ids:
            self.cancel(ids)
        deadline = time.monotonic() + wait_s
        while ids and time.monotonic() < deadline and self.run(
                ["squeue", "--noheader", "--states=PENDING,RUNNING,COMPLETING",
                 "--format=%i"]).strip():
            time.sleep(0.5)
        return len(ids)

    def update_job(self, job_id: str, settings: Mapping[str, str]) -> None:
        """`scontrol update` of one job; Slurm itself refuses what the caller may not do.
        Its comment is changed through `mark` alone."""
        self.run(["scontrol", "update", f"JobId={job_id}",
                  *(f"{k}={v}" for k, v in settings.items())])

    def mark(self, job_id: str, marks: Marks, settings: Mapping[str, str] | None = None,
             read_from: str | None = None) -> str:
        """Change one job's comment by `marks`, with `settings` in the same update: the
        one read-modify-write of a comment after submission. The comment is read whole
        from `read_from` (a pending array task, where `job_id` is its array) or the job
        itself; returns what was written."""
        text = marks.applied(self.comment(read_from or job_id))
        self.update_job(job_id, {**(settings or {}), COMMENT: text})
        return text

    def resume_node(self, name: str) -> None:
        """Put a node back in service."""
        self.run(["scontrol", "update", f"nodename={name}", "state=resume"])

    def association_rows(self, fields: Sequence[str]) -> list[list[str]]:
        """This cluster's associations from accounting, one row of `fields` each (as
        sacctmgr names them; a list such as qos= keeps its commas)."""
        out = self.run(["sacctmgr", "--noheader", "--parsable2", "show", "associations",
                        f"cluster={self.cluster_name()}", f"format={','.join(fields)}"])
        return [line.split("|") for line in out.splitlines() if line]

    def reconfigure(self) -> None:
        """Have slurmctld and every slurmd read slurm.conf (and the shim) again."""
        self.run(["scontrol", "reconfigure"])



def node_shape(slurm: Slurm, partition: str | None = None) -> NodeShape:
    """The shape of `partition`'s nodes (all nodes where None), as the engine sizes jobs for."""
    nodes = slurm.nodes(partition)
    if not nodes:
        raise SynergyError(f"sinfo lists no nodes{f' in partition {partition}' if partition else ''}")
    return shape_of(nodes)
