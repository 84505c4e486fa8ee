"""The sync timer's time limits (decisions/timelimits.py): which pending jobs get a
time_min, which running ones get their --time back, and what a user cannot make it do.
The queue is a fixture here; the real scontrol update and backfill run in
tests/integration/test_time_limits.py."""

import os

from slurm_synergy.decisions.table import Owned
from slurm_synergy.decisions.timelimits import load_state, state_path, tick
from slurm_synergy.model import comment as comment_format
from slurm_synergy.model.engine import Decision
from slurm_synergy.model.runtime import TimeRule
from slurm_synergy.slurm import Slurm, Ended, TimedJob

FP = "0123456789abcdef"
ME, OTHER = 1000, 1001


def owned(uid=ME, cpus=1, predicted=80.0, best=100.0, shared=False):
    return Owned(uid, Decision(FP, "job", cpus, 1024, 1, "", 0, 0, predicted, best, 2, 3072,
                               ()), shared)


class Queue:
    """squeue, sacct and scontrol update as the round uses them."""

    def __init__(self, jobs, ended=(), comments=None):
        self.jobs, self.ended_jobs = list(jobs), list(ended)
        self.comments = comments or {}
        self.updates = []

    def timed_jobs(self):
        return self.jobs

    def ended(self, since, users=()):
        self.asked_users = list(users)
        return self.ended_jobs

    def comment(self, job_id):
        return self.comments.get(job_id, f"synergy:fp={FP} plain=1")

    mark = Slurm.mark      # the one comment writer, over this fake's comment and update

    def update_job(self, job_id, settings):
        self.updates.append((job_id, settings))


def pending(job_id, uid=ME, limit=20, cpus=1, comment=f"synergy:fp={FP} plain=1"):
    return TimedJob(job_id, uid, "PENDING", limit, 0, cpus, comment)


def done(job_id, uid=ME, elapsed=80, cpus=2, state="COMPLETED"):
    return Ended(job_id, uid, state, elapsed, cpus, f"synergy:fp={FP} plain=1",
                 f"synergy:fp={FP}")


def test_a_pending_job_gets_a_time_min_from_its_users_completed_jobs(tmp_path):
    table = tmp_path / "synergy-decisions.tbl"
    q = Queue([pending("12"), pending("13", uid=OTHER)], [done(5)])
    line = tick(q, [owned(), owned(OTHER)], TimeRule(), table)
    # 80 s on 2 cores, decided 1 core at 80/100 of the best: 100 s, one job: +100%.
    assert q.updates == [("12", {"TimeMin": "4", "Comment":
                                 f"synergy:fp={FP} plain=1 tmin=4,p100,n1"})]
    assert "time_min set on job(s) 12" in line
    # sacct is asked for the waiting users' jobs alone (sacct takes uids as names).
    assert q.asked_users == [str(ME), str(OTHER)]
    assert load_state(state_path(table))["12"].asked_min == 20
    # Set once: the next round leaves it.
    q.updates.clear()
    tick(q, [owned(), owned(OTHER)], TimeRule(), table)
    assert q.updates == []


def test_nothing_is_set_opted_out_shared_off_or_not_under_its_own_limit(tmp_path):
    table = tmp_path / "t.tbl"
    out = f"synergy:fp={FP} plain=1 {comment_format.TIME_AS_ASKED}"
    q = Queue([pending("12", comment=out), pending("14", limit=3), pending("15", limit=None)],
              [done(5)], comments={"12": out})
    tick(q, [owned()], TimeRule(), table)
    # A run on 2 cores bounds a 1-core job's only through a decision of that size.
    tick(Queue([pending("13")], [done(5)]), [owned(shared=True)], TimeRule(), table)
    tick(Queue([pending("16")], [done(5)]), [owned()], TimeRule(enabled=False), table)
    assert q.updates == []


def test_without_a_decision_runs_of_its_own_size_or_fewer_cores_predict_it(tmp_path):
    q = Queue([pending("12", cpus=2)], [done(5, cpus=2, elapsed=200)])
    tick(q, [], TimeRule(), tmp_path / "t.tbl")
    assert q.updates[0][1]["TimeMin"] == "7"        # 200 s x 2 = 400 s


def test_running_past_a_lowered_limit_gets_its_own_time_back_once(tmp_path):
    table = tmp_path / "t.tbl"
    q = Queue([pending("12")], [done(5)])
    tick(q, [owned()], TimeRule(), table)
    # Backfill started it with its limit lowered to 4 minutes; 3:30 in, it still runs.
    q.jobs = [TimedJob("12", ME, "RUNNING", 4, 210, 1, "")]
    q.updates.clear()
    assert "limit put back to --time on job(s) 12" in tick(q, [owned()], TimeRule(), table)
    # The comment says so for the job's report; the rest of it is kept.
    assert q.updates == [("12", {"TimeLimit": "20",
                                 "Comment": f"synergy:fp={FP} plain=1 tback=20"})]
    q.jobs = [TimedJob("12", ME, "RUNNING", 20, 230, 1, "")]
    q.updates.clear()
    tick(q, [owned()], TimeRule(), table)
    assert q.updates == []


def test_a_comment_cannot_ask_for_a_longer_limit(tmp_path):
    # A user writes the timer's mark into their own running job's comment: without
    # root's record of that job, nothing is raised.
    forged = f"synergy:fp={FP} plain=1 tmin=1,p10,n1"
    q = Queue([TimedJob("12", ME, "RUNNING", 4, 230, 1, forged)], comments={"12": forged})
    tick(q, [owned()], TimeRule(), tmp_path / "t.tbl")
    assert q.updates == []


def test_another_users_history_and_a_state_file_not_the_timers_are_not_used(tmp_path):
    table = tmp_path / "t.tbl"
    q = Queue([pending("12")], [done(5, uid=OTHER)])
    tick(q, [owned()], TimeRule(), table)
    assert q.updates == []
    path = state_path(table)
    path.write_text('{"12": {"uid": 1000, "asked_min": 9999, "time_min": 1}}')
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
        assert load_state(path) == {}
    path.write_text("not json")
    assert load_state(path) == {}
