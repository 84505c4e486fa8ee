"""Root's time-limit timer (decisions/timelimits.py): which pending jobs get a time_min,
which running ones get their --time back, what a user cannot make it do, and how many
Slurm calls a round makes whatever users queue. The queue is a fixture here (each call
counted); the real scontrol update and backfill run in tests/integration/test_time_limits.py."""

import os

import pytest

from slurm_synergy.decisions import timelimits
from slurm_synergy.decisions.table import Owned
from slurm_synergy.decisions.timelimits import load_record, read_rates, tick, write_rates
from slurm_synergy.model import comment as comment_format
from slurm_synergy.model.engine import Decision
from slurm_synergy.model.errors import SlurmError, SynergyError
from slurm_synergy.model.runtime import TimeRule
from slurm_synergy.slurm import Ended, JobText, Slurm, TimedJob

FP = "0123456789abcdef"
ME, OTHER = 1000, 1001
KEYED = f"synergy:fp={FP} plain=1"


def owned(uid=ME, cpus=1, predicted=80.0, best=100.0, shared=False):
    return Owned(uid, Decision(FP, "job", cpus, 1024, 1, "", 0, 0, predicted, best, 2, 3072,
                               ()), shared)


class Queue:
    """squeue (text-free and --json), sacct and scontrol update as a round uses them; every
    call counted."""

    def __init__(self, texts=(), ended=(), running=()):
        self.texts = list(texts)
        self.ended_jobs = list(ended)
        self.running = list(running)           # TimedJob, as squeue's text shows them
        self.again: dict[str, TimedJob | None] = {}     # a re-read that differs
        self.updates = []
        self.calls = 0
        self.asked_users = None

    def timed_jobs(self, job_ids=(), states="PENDING,RUNNING"):
        self.calls += 1
        return [j for j in self.running if j.state in states.split(",")]

    def timed_job(self, job_id):
        self.calls += 1
        if job_id in self.again:
            return self.again[job_id]
        j = next((t for t in self.texts if t.job_id == job_id), None)
        running = next((r for r in self.running if r.job_id == job_id), None)
        if running:
            return running
        return j and TimedJob(j.job_id, j.uid, j.state, j.limit_min, 0, 0, j.cpus, "", 0)

    def queued_texts(self):
        self.calls += 1
        return self.texts

    def ended(self, since, users=(), per_user=500):
        self.calls += 1
        self.asked_users = list(users)
        return [e for e in self.ended_jobs if e.uid in users]

    def comment(self, job_id):
        self.calls += 1
        return next((t.comment for t in self.texts if t.job_id == job_id), KEYED)

    mark = Slurm.mark      # the one comment writer, over this fake's comment and update

    def update_job(self, job_id, settings):
        self.calls += 1
        self.updates.append((job_id, settings))


def pending(job_id, uid=ME, limit=20, cpus=1, comment=KEYED, admin=f"synergy:fp={FP}",
            array=False, het=False):
    return JobText(job_id, uid, "PENDING", array, limit, cpus, comment, admin, het)


def done(job_id, uid=ME, elapsed=80, cpus=2, state="COMPLETED"):
    return Ended(job_id, uid, state, elapsed, cpus, KEYED, f"synergy:fp={FP}")


def running(job_id, limit, used, uid=ME, started="2026-12-07T10:00:00", restarts=0):
    return TimedJob(job_id, uid, "RUNNING", limit, 0, used, 1, started, restarts)


def rule(r: TimeRule | None = None):
    return lambda: r or TimeRule()


@pytest.fixture
def files(tmp_path):
    table = tmp_path / "synergy-decisions.tbl"
    write_rates(table, [owned(), owned(OTHER)])
    return tmp_path / "lib" / "time-limits.json", timelimits.rates_path(table)


def test_a_pending_job_gets_a_time_min_from_its_users_completed_jobs(files):
    state, rates = files
    q = Queue([pending("12"), pending("13", uid=OTHER)], [done(5)])
    line = tick(q, rule(), state, rates).line()
    # 80 s on 2 cores, decided 1 core at 80/100 of the best: 100 s, one job: +100%.
    assert q.updates == [("12", {"TimeMin": "4", "Comment": f"{KEYED} tmin=4,p100,n1"})]
    assert "time_min set on job(s) 12" in line
    assert q.asked_users == [ME, OTHER]          # the waiting users' histories alone
    assert load_record(state).jobs["12"].asked_min == 20
    q.updates.clear()
    tick(q, rule(), state, rates)                # set once: the next round leaves it
    assert q.updates == []


def test_nothing_is_set_opted_out_arrays_hetjobs_off_or_not_under_its_own_limit(files):
    state, rates = files
    out = f"{KEYED} {comment_format.TIME_AS_ASKED}"
    q = Queue([pending("12", comment=out), pending("14", limit=3), pending("15", limit=None),
               pending("16", array=True), pending("17", comment="synergy:off", admin=""),
               pending("19", het=True)],
              [done(5)])
    tick(q, rule(), state, rates)
    tick(Queue([pending("18")], [done(5)]), rule(TimeRule(enabled=False)), state, rates)
    assert q.updates == []


def test_a_shared_decision_does_not_bound_a_run_on_more_cores(tmp_path):
    table = tmp_path / "t.tbl"
    write_rates(table, [owned(shared=True)])
    assert read_rates(timelimits.rates_path(table)) == {}
    q = Queue([pending("13")], [done(5)])
    tick(q, rule(), tmp_path / "s.json", timelimits.rates_path(table))
    assert q.updates == []


def test_without_a_decision_runs_of_its_own_size_or_fewer_cores_predict_it(tmp_path):
    q = Queue([pending("12", cpus=2)], [done(5, cpus=2, elapsed=200)])
    tick(q, rule(), tmp_path / "s.json", None)
    assert q.updates[0][1]["TimeMin"] == "7"        # 200 s x 2 = 400 s


def started_lowered(files, used_s: int) -> Queue:
    """Job 12 given its 4-minute time_min, then started by backfill with its limit lowered
    to it, and seen by a round `used_s` into its run."""
    state, rates = files
    q = Queue([pending("12")], [done(5)])
    tick(q, rule(), state, rates)
    q.texts = [JobText("12", ME, "RUNNING", False, 4, 1, KEYED, "")]
    q.running = [running("12", 4, used_s)]
    tick(q, rule(), state, rates)
    return q


def test_running_past_a_lowered_limit_gets_its_own_time_back_once(files):
    state, rates = files
    q = started_lowered(files, 30)                  # seen at its start: nothing due yet
    q.updates.clear()
    q.running = [running("12", 4, 210)]             # 3:30 in, it still runs
    assert "limit put back to --time on job(s) 12" in tick(q, rule(), state, rates).line()
    # The comment says so for the job's report; the rest of it is kept.
    assert q.updates == [("12", {"TimeLimit": "20", "Comment": f"{KEYED} tback=20"})]
    q.running = [running("12", 20, 230)]
    q.updates.clear()
    tick(q, rule(), state, rates)
    assert q.updates == []


def test_a_limit_changed_after_its_start_is_left_alone(files):
    state, rates = files
    q = started_lowered(files, 30)
    # An admin (or its user) lowered it further while it ran: that is theirs to keep.
    q.running = [running("12", 3, 150)]
    q.updates.clear()
    tick(q, rule(), state, rates)
    assert q.updates == []


def test_a_requeued_job_is_followed_again(files):
    state, rates = files
    q = started_lowered(files, 10)
    q.running = [running("12", 4, 220)]
    tick(q, rule(), state, rates)
    assert load_record(state).jobs["12"].raised
    # Requeued, it starts again with its limit lowered: a new run, put back again.
    q.running = [running("12", 4, 5, started="2026-12-07T11:00:00", restarts=1)]
    tick(q, rule(), state, rates)
    q.running = [running("12", 4, 215, started="2026-12-07T11:00:00", restarts=1)]
    q.updates.clear()
    tick(q, rule(), state, rates)
    assert [u[1]["TimeLimit"] for u in q.updates] == ["20"]


def test_put_back_needs_neither_the_policy_nor_the_queues_texts(files):
    state, rates = files
    q = started_lowered(files, 10)

    def broken():
        raise SynergyError("policy.toml: time_min_margin: not a number")

    def no_json():
        raise SlurmError("squeue --json printed what is not JSON")
    q.queued_texts = no_json
    q.running = [running("12", 4, 220)]
    done_ = tick(q, broken, state, rates)
    assert done_.raised == ["12"] and "pending jobs not looked at" in done_.line()
    assert done_.faults and not done_.notes          # a fault: the timer's status says FAILED


def test_root_acts_only_where_a_job_read_again_agrees(files):
    state, rates = files
    jobs = [pending(str(i)) for i in range(12, 17)]
    q = Queue(jobs, [done(5)])
    q.again = {"12": None,                                                 # gone
               "13": TimedJob("13", OTHER, "PENDING", 20, 0, 0, 1, "", 0),  # not its uid
               "14": TimedJob("14", ME, "RUNNING", 20, 0, 5, 1, "x", 0),    # started
               "15": TimedJob("15", ME, "PENDING", 600, 0, 0, 1, "", 0)}    # other limit
    done_ = tick(q, rule(), state, rates)
    # One vanished or changed job never stops the round: the one that agrees is set.
    assert done_.set == ["16"] and len(done_.left) == 4, done_.line()
    assert set(load_record(state).jobs) == {"16"}


def test_a_round_makes_a_bounded_number_of_calls_whatever_is_queued(files):
    state, rates = files
    out = f"{KEYED} synergy:time-as-asked"
    many = [pending(str(100 + i), comment=out) for i in range(2000)]
    q = Queue([*many, pending("12")], [done(5)])
    q.again = {"12": None}                      # vanished between the reads
    tick(q, rule(), state, rates)
    # squeue --json once, the history once, the vanished job read again once.
    assert q.calls == 3 and q.updates == []
    q.calls = 0
    tick(q, rule(), state, rates)
    assert q.calls == 3
    # A flood of one user's keyed jobs: a round sets at most SET_PER_ROUND, another
    # user's job among them.
    flood = [pending(str(5000 + i)) for i in range(3000)]
    q = Queue([*flood, pending("13", uid=OTHER)], [done(5), done(6, uid=OTHER)])
    done_ = tick(q, rule(), state, rates)
    assert len(done_.set) == timelimits.SET_PER_ROUND and "13" in done_.set
    assert q.calls <= 2 + 3 * timelimits.SET_PER_ROUND


def test_each_user_is_reached_in_turn_past_the_users_a_round_reads(files):
    state, rates = files
    users = range(2000, 2000 + 3 * timelimits.USERS_PER_ROUND)
    q = Queue([pending(str(u), uid=u) for u in users], [done(u, uid=u, cpus=1) for u in users])
    for _ in range(3):
        tick(q, rule(), state, rates)
    assert len(load_record(state).jobs) == len(users)


def test_another_users_history_and_a_record_not_roots_are_not_used(files):
    state, rates = files
    q = Queue([pending("12")], [done(5, uid=OTHER)])
    tick(q, rule(), state, rates)
    assert q.updates == []
    state.parent.mkdir(exist_ok=True)
    state.write_text('{"jobs": {"12": {"uid": 1000, "asked_min": 9999, "time_min": 1}}}')
    if os.geteuid() == 0:
        os.chown(state, 65534, 65534)
        assert load_record(state).jobs == {}
    state.write_text("not json")
    assert load_record(state).jobs == {}
