"""Right-sizing a workload's pending jobs in place (pending.py): which jobs, what their
comments say after, and what a refused update leaves. The queue is a fixture here; the
real scontrol update runs in tests/integration/test_inrun.py."""

import getpass

from slurm_synergy.model import comment as comment_format
from slurm_synergy.model.engine import Decision
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.policy import Policy
from slurm_synergy.decisions.pending import rightsize_pending, undo_pending
from slurm_synergy.decisions.service import DecisionRequest
from slurm_synergy.slurm import Slurm, QueuedJob
from tests.helpers import make_profile

FP = "0123456789abcdef"


def queued(job_id: str, state: str = "PENDING", cpus: int = 2, mem_mb: int = 3072,
           tasks: int = 1) -> QueuedJob:
    return QueuedJob(job_id, getpass.getuser(), state, "", cpus, tasks, mem_mb, 1, 1, "gpu",
                     "gres:gpu:1", "", False)


class Queue:
    """squeue, the comments and scontrol update of a few jobs; `refuse` names jobs whose
    update Slurm refuses."""

    def __init__(self, jobs: dict[str, tuple[QueuedJob, str]], refuse: tuple[str, ...] = ()):
        self.jobs, self.refuse = jobs, refuse
        self.updates: list[tuple[str, dict[str, str]]] = []

    def queue(self, users=()):
        return [job for job, _ in self.jobs.values()]

    def comment(self, job_id):
        return self.jobs[job_id][1]

    def memory_per_cpu(self, job_id):
        return False

    mark = Slurm.mark      # the one comment writer, over this fake's comment and update

    def update_job(self, job_id, settings):
        if job_id in self.refuse:
            raise SynergyError("scontrol update: Access/permission denied")
        self.updates.append((job_id, settings))
        job, comment = self.jobs[job_id]
        cpus = int(settings.get("CPUsPerTask", job.cpus_per_task))
        mem = int(settings.get("MinMemoryNode", job.mem_mb))
        self.jobs[job_id] = (QueuedJob(job.job_id, job.user, job.state, job.reason, cpus,
                                       job.tasks, mem, job.gpus,
                                       job.nodes, job.partition, job.gres, job.features,
                                       job.array), settings["Comment"])


class Service:
    """The decision service as pending.py asks it: one decision for the workload, the
    queue as its Slurm; records what each job was decided for."""

    def __init__(self, slurm: Queue, cpus: int, mem_mb: int):
        self.slurm, self.policy = slurm, Policy()
        self.cpus, self.mem_mb = cpus, mem_mb
        self.asked: list[DecisionRequest] = []
        self.judged: list[tuple] = []

    def decide(self, req: DecisionRequest):
        self.asked.append(req)
        return Decision(req.fingerprint, "job", self.cpus, self.mem_mb, 1, "", 1, 0,
                        100.0, 100.0, 2, 8000, ("because",))

    def judge(self, req: DecisionRequest, profile):
        self.judged.append((req, profile))
        return Decision(req.fingerprint, "job", 3, self.mem_mb, 1, "", 1, 0,
                        100.0, 100.0, 2, 8000, ("from the profile handed down",))


def marked(extra: str = "") -> str:
    return (comment_format.job_comment(FP) + " profile=1 " + extra).strip()


def test_only_this_workloads_marked_pending_jobs_are_updated():
    other = "fedcba9876543210"
    q = Queue({"10": (queued("10", "RUNNING"), marked()),
               "11": (queued("11"), marked()),
               "12": (queued("12"), comment_format.job_comment(FP)),       # decided already
               "13": (queued("13"), comment_format.job_comment(other) + " profile=1"),
               "14": (queued("14"), "a comment of the user's own")})
    done = rightsize_pending(FP, "10", Service(q, 1, 1280), lambda line: None)
    assert [j for j, _ in done.updated] == ["11"] and done.left == []
    job, comment = q.jobs["11"]
    assert (job.cpus_per_task, job.mem_mb) == (1, 1280)
    marks = comment_format.marks(comment)
    assert marks["asked"] == "c2,m3072,g1" and marks["decision"] == "c1,m1280,g1,w1"
    assert marks["by"] == "10" and "profile" not in marks


def test_a_profile_handed_down_is_judged_not_read_back_from_the_store():
    q = Queue({"11": (queued("11"), marked()), "12": (queued("12"), marked())})
    service, held = Service(q, 1, 1280), make_profile(FP)
    done = rightsize_pending(FP, "10", service, lambda line: None, held)
    assert [j for j, _ in done.updated] == ["11", "12"] and service.asked == []
    assert [p for _, p in service.judged] == [held, held] and q.jobs["11"][0].cpus_per_task == 3


def test_a_later_peak_updates_the_same_jobs_again_and_keeps_what_they_asked():
    q = Queue({"11": (queued("11"), marked())})
    rightsize_pending(FP, "10", Service(q, 1, 1280), lambda line: None)
    # The run's memory peaked later: a second decision, from the same run.
    done = rightsize_pending(FP, "10", Service(q, 1, 2048), lambda line: None)
    assert [j for j, _ in done.updated] == ["11"]
    job, comment = q.jobs["11"]
    assert job.mem_mb == 2048
    marks = comment_format.marks(comment)
    assert marks["asked"] == "c2,m3072,g1" and marks["decision"] == "c1,m2048,g1,w1"
    # Another run's decision does not touch a job this one sized.
    done = rightsize_pending(FP, "20", Service(q, 2, 4096), lambda line: None)
    assert done.updated == [] and q.jobs["11"][0].mem_mb == 2048


def test_a_refused_update_leaves_the_job_and_its_comment_as_they_were():
    lines: list[str] = []
    q = Queue({"11": (queued("11"), marked()), "12": (queued("12"), marked())},
              refuse=("11",))
    done = rightsize_pending(FP, "10", Service(q, 1, 1280), lines.append)
    assert [j for j, _ in done.updated] == ["12"]
    assert done.left == [("11", "Slurm refused the update (scontrol update: "
                                "Access/permission denied)")]
    assert q.jobs["11"] == (queued("11"), marked())
    assert lines == ["slurm-synergy: job 11 left as asked: Slurm refused the update "
                     "(scontrol update: Access/permission denied)"]


def test_a_job_of_several_tasks_is_left_as_asked():
    q = Queue({"11": (queued("11", tasks=4), marked())})
    done = rightsize_pending(FP, "10", Service(q, 1, 1280), lambda line: None)
    assert done.updated == [] and done.left == [("11", "more than one task or node: "
                                                       "left as asked")]
    assert q.updates == []


def decided(asked: str, decision: str, by: str = "", plain: bool = True, extra: str = "") -> str:
    head = comment_format.job_comment(FP) + (" plain=1" if plain else "") + extra
    return comment_format.with_marks(head, asked=asked, decision=decision,
                                     **({"by": by} if by else {}))


def test_a_dropped_decision_sends_the_jobs_it_sized_back_to_what_they_asked():
    lines: list[str] = []
    other = comment_format.job_comment("fedcba9876543210") + " asked=c4,m8192,g1 " \
        "decision=c1,m1024,g1,w1"
    q = Queue({"11": (queued("11", cpus=1, mem_mb=1280),               # sized in place
                      decided("c2,m3072,g1", "c1,m1280,g1,w1", by="10")),
               "12": (queued("12", cpus=2, mem_mb=2048),               # a job list's, tuned
                      decided("c4,m8192,g1", "c2,m2048,g1,w1", plain=False,
                              extra=" tuned=c2,m2048")),
               "13": (queued("13"), marked()),                        # never decided
               "14": (queued("14", cpus=1, mem_mb=1024), other),      # another workload
               "15": (queued("15", "RUNNING", cpus=1), decided("c2,m3072,g1", "c1,m1280,g1,w1")),
               "16": (queued("16", cpus=1, mem_mb=1280),               # left to Slurm
                      decided("c-,m-,g1", "c1,m1280,g1,w1"))})
    done = undo_pending(FP, "30", q, lines.append)
    assert done.asked == [("11", "c2,m3072,g1"), ("12", "c4,m8192,g1"), ("16", "c-,m-,g1")]
    assert done.left == []
    assert [j for j, _ in q.updates] == ["11", "12", "16"]
    assert (q.jobs["11"][0].cpus_per_task, q.jobs["11"][0].mem_mb) == (2, 3072)
    assert (q.jobs["12"][0].cpus_per_task, q.jobs["12"][0].mem_mb) == (4, 8192)
    assert (q.jobs["16"][0].cpus_per_task, q.jobs["16"][0].mem_mb) == (1, 1280)
    for job in ("11", "12", "16"):
        marks = comment_format.marks(q.jobs[job][1])
        assert not {"asked", "decision", "by", "tuned"} & set(marks)
        assert comment_format.fingerprint(q.jobs[job][1]) == FP
        # A plain script's run is measured (its supervisor reads the comment); a job
        # list's script decides from the environment it was submitted with: as asked.
        assert (marks.get("profile") == "1") is (job != "12")
    assert q.jobs["13"][1] == marked() and q.jobs["14"][1] == other
    assert lines[0].endswith("(c2,m3072,g1); its run is measured")
    assert lines[1].endswith("(c4,m8192,g1); it runs as asked, unmeasured")
    assert "cores and memory, left to Slurm at submission, keep the dropped decision's" \
        in lines[-1]


def test_a_refused_undo_leaves_the_job_with_the_dropped_decision_and_says_so():
    lines: list[str] = []
    comment = decided("c2,m3072,g1", "c1,m1280,g1,w1", by="10")
    q = Queue({"11": (queued("11", cpus=1, mem_mb=1280), comment)}, refuse=("11",))
    done = undo_pending(FP, "30", q, lines.append)
    assert done.asked == [] and q.jobs["11"][1] == comment
    assert lines == ["slurm-synergy: job 11 keeps the dropped decision: Slurm refused the "
                     "update (scontrol update: Access/permission denied)"]


def test_each_job_is_decided_for_its_own_partition_and_qos():
    """The service holds each job to the limits of the QOS Slurm gave it."""
    job = QueuedJob("11", getpass.getuser(), "PENDING", "", 2, 1, 3072, 1, 1, "short",
                    "gres:gpu:1", "", False, "debug")
    service = Service(Queue({"11": (job, marked())}), 1, 1280)
    rightsize_pending(FP, "10", service, lambda line: None)
    assert [(r.partition, r.qos) for r in service.asked] == [("short", "debug")]
