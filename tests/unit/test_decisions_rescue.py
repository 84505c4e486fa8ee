"""Root's rescue of jobs that ran out of memory or GPU memory at the decided size
(decisions/rescue.py):
which jobs it puts back and with what, in which order, what a user's text cannot make it
do, and what sync learns. Slurm is a fixture here (each call recorded); the real requeue
runs in tests/integration/test_plain_scripts.py."""

import os

import pytest

from slurm_synergy.decisions import rescue
from slurm_synergy.decisions.rescue import (GpuEvidence, ledger_path, load_ledger,
                                            rescue_round, rescued_workloads,
                                            restore_settings, sized)
from slurm_synergy.decisions.sync import _unmeasured_since_rescue
from slurm_synergy.decisions.table import Owned
from slurm_synergy.hooks.records import GpuUse, JobGpuStats, stats_path, write_json
from slurm_synergy.model.comment import Resources
from slurm_synergy.model.engine import Decision
from slurm_synergy.model.errors import SlurmError
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.slurm import LostRun, TimedJob

FP = "0123456789abcdef"
ME = 1000
ADMIN = f"synergy:fp={FP} asked=c2,m3072,g0 decision=c1,m768,g0,w1"


class Cluster:
    """sacct, squeue and scontrol as a rescue round uses them: every call in `calls`."""

    def __init__(self, ooms, admin, states=None, refuse=None):
        self.ooms, self.admin = ooms, admin
        self.states = states or {}
        self.refuse = refuse or {}
        self.calls: list[tuple] = []

    def lost_runs(self, since):
        self.calls.append(("sacct", since))
        return self.ooms

    def sacct_texts(self, ids, fields):
        self.calls.append(("sacct --json", tuple(ids)))
        return {i: {"AdminComment": self.admin[i]} for i in ids if i in self.admin}

    def config(self):
        return {"DefMemPerCPU": "1024"}

    def timed_job(self, job_id):
        self.calls.append(("squeue", job_id))
        uid, state = self.states.get(job_id, (ME, "OUT_OF_MEMORY"))
        return None if state is None else TimedJob(job_id, uid, state, 10, 0, 1, 1, "", 0)

    def _do(self, call):
        self.calls.append(call)
        if call[0] in self.refuse:
            raise SlurmError(self.refuse[call[0]])

    def dependencies(self):
        self.calls.append(("squeue dependencies",))
        return getattr(self, "depending", [])

    def requeue_held(self, job_id):
        self._do(("requeuehold", job_id))

    def hold(self, job_id):
        self._do(("hold", job_id))

    def mark(self, job_id, marks, settings=None):
        self._do(("mark", job_id, tuple(sorted(marks.set.items())),
                  tuple(sorted((settings or {}).items()))))

    def update_job(self, job_id, settings):
        self._do(("update", job_id, tuple(sorted(settings.items()))))

    def release(self, ids):
        self._do(("release", tuple(ids)))


def oom(job_id="7", uid=ME, elapsed=1):
    return LostRun(job_id, uid, "OUT_OF_MEMORY", elapsed, True)


@pytest.fixture
def ledger(tmp_path):
    return ledger_path(tmp_path / "synergy-decisions.tbl")


def test_a_job_lowered_below_what_it_asked_is_put_back_once_with_what_it_asked(ledger):
    c = Cluster([oom()], {"7": ADMIN})
    done = rescue_round(c, ledger, clock=lambda: 1000.0)
    assert done.requeued == ["7"] and not done.refused
    # Out of memory, not GPU memory: the timer's line says which.
    assert done.on_gpu == [] and "(GPU memory)" not in done.line()
    assert done.line().startswith("ran out of memory at the decided size, put back with "
                                  "what they asked: job(s) 7")
    steps = [call[0] for call in c.calls]
    # Read again by id, the ledger written, then requeued held, sized, begun now, released.
    assert steps == ["sacct", "sacct --json", "squeue", "requeuehold", "hold", "mark",
                     "update", "release", "squeue dependencies"]
    mark = next(call for call in c.calls if call[0] == "mark")
    settings = dict(mark[3])
    assert (settings["MinMemoryNode"], settings["NumCPUs"], settings["CPUsPerTask"]) == \
        ("3072", "2", "2")
    assert settings["AdminComment"] == f"{ADMIN} rescued=oom@1s"
    assert dict(mark[2]) == {"rescued": "oom@1s"}
    assert ("update", "7", (("StartTime", "now"),)) in c.calls
    r = load_ledger(ledger).jobs["7"]
    assert (r.uid, r.fingerprint, r.asked, r.decided, r.outcome) == \
        (ME, FP, "c2,m3072,g0", "c1,m768,g0", "requeued")
    assert rescued_workloads(ledger) == {(ME, FP): (1000.0, "7", "memory")}
    # Never twice: the next round finds it in the ledger (sacct still says it ran out).
    c.calls.clear()
    assert rescue_round(c, ledger).line() == "" and [x[0] for x in c.calls] == ["sacct"]


def test_the_ledger_is_written_before_the_requeue(ledger, monkeypatch):
    c = Cluster([oom()], {"7": ADMIN})
    seen = []
    real = c.requeue_held

    def requeue(job_id):
        seen.append(load_ledger(ledger).jobs.get(job_id))
        real(job_id)
    c.requeue_held = requeue
    rescue_round(c, ledger)
    assert seen and seen[0] is not None


@pytest.mark.parametrize("admin", [
    "",                                                            # not the shim's
    f"synergy:fp={FP}",                                            # keyed, not decided
    f"synergy:fp={FP} asked=c2,m3072,g0 decision=c1,m3072,g0,w1",  # its own memory
    f"synergy:fp={FP} asked=c2,m3072,g0 decision=c1,m4096,g0,w1",  # more than it asked
    f"{ADMIN} rescued=oom@3s",                                     # put back once already
])
def test_a_job_that_ran_out_at_its_own_size_is_left_alone(ledger, admin):
    c = Cluster([oom()], {"7": admin})
    assert rescue_round(c, ledger).line() == ""
    assert [x[0] for x in c.calls] == ["sacct", "sacct --json"]


def test_what_a_user_writes_in_the_comment_is_never_read(ledger):
    # Only the admin comment (the shim's, an admin's) is read: the user's comment is not
    # asked for at all, so a forged asked= there restores nothing.
    c = Cluster([oom()], {"7": ADMIN})
    rescue_round(c, ledger)
    texts = [x for x in c.calls if x[0] == "sacct --json"]
    assert texts == [("sacct --json", ("7",))]
    assert sized("asked=c64,m999999,g8 decision=c1,m1,g0,w0") is None
    assert sized(f"ticket 4 {ADMIN}").asked == Resources(2, 3072, 0)


@pytest.mark.parametrize("state,why", [
    ((ME, None), "no longer holds it"),
    ((ME + 1, "OUT_OF_MEMORY"), "changed since it was read"),
    ((ME, "RUNNING"), "changed since it was read"),
])
def test_root_acts_only_where_the_job_read_again_agrees(ledger, state, why):
    c = Cluster([oom()], {"7": ADMIN}, states={"7": state})
    done = rescue_round(c, ledger)
    assert not done.requeued and why in done.line()
    assert not any(x[0] in ("requeuehold", "mark", "release") for x in c.calls)
    # Not put back, its workload is as asked all the same until measured again.
    assert "7" in load_ledger(ledger).jobs and (ME, FP) in rescued_workloads(ledger)


def test_no_requeue_is_respected_and_said(ledger):
    c = Cluster([oom()], {"7": ADMIN},
                refuse={"requeuehold": "scontrol: error: Requeue of JobId=7 is disabled"})
    done = rescue_round(c, ledger)
    assert "--no-requeue" in done.line() and "resubmit" in done.line()
    assert ("update", "7", (("AdminComment", f"{ADMIN} rescued=no-requeue"),)) in c.calls
    assert not any(x[0] in ("hold", "mark", "release") for x in c.calls)
    assert load_ledger(ledger).jobs["7"].outcome.startswith("not requeued")


def test_a_job_requeued_whose_size_is_refused_is_still_released(ledger):
    c = Cluster([oom()], {"7": ADMIN}, refuse={"mark": "scontrol: error: Invalid ..."})
    done = rescue_round(c, ledger)
    assert ("release", ("7",)) in c.calls and "not restored" in done.line()


def test_a_round_puts_back_a_bounded_number(ledger):
    many = [oom(str(i)) for i in range(100, 100 + 3 * rescue.RESCUES_PER_ROUND)]
    c = Cluster(many, {o.job_id: ADMIN for o in many})
    assert len(rescue_round(c, ledger).requeued) == rescue.RESCUES_PER_ROUND
    assert len(rescue_round(c, ledger).requeued) == rescue.RESCUES_PER_ROUND


def test_what_is_restored_where_the_job_left_memory_or_cores_to_slurm():
    assert restore_settings(Resources(None, None, 0), {"DefMemPerCPU": "1024"}) == {
        "NumCPUs": "1", "MinCPUsNode": "1", "CPUsPerTask": "1", "MinMemoryCPU": "1024"}
    assert restore_settings(Resources(4, None, 2, gpu_type="a100"),
                            {"DefMemPerNode": "UNLIMITED"}) == {
        "NumCPUs": "4", "MinCPUsNode": "4", "CPUsPerTask": "4", "MinMemoryNode": "0",
        "TresPerNode": "gres/gpu:a100:2"}


def test_a_ledger_not_roots_own_holds_nothing_back(ledger):
    ledger.write_text('{"jobs": {"7": {"uid": 1000, "fingerprint": "%s", "asked": "", '
                      '"decided": "", "lost_s": 1, "at": 1e12, "outcome": "requeued"}}}' % FP)
    assert rescued_workloads(ledger)
    os.chown(ledger, 12345, 12345)
    assert rescued_workloads(ledger) == {}


def test_sync_leaves_a_rescued_workload_as_asked_until_a_newer_profile(tmp_path):
    table = tmp_path / "synergy-decisions.tbl"
    store = ProfileStore.named(tmp_path / "store")
    store.root.mkdir()
    decision = Owned(os.geteuid(), Decision(FP, "job", 1, 768, 0, "", 0, 1, 80.0, 100.0, 1,
                                            3072, ()))
    profile = store.path(FP)
    profile.write_text("{}")
    c = Cluster([LostRun("7", os.geteuid(), "OUT_OF_MEMORY", 1, True)], {"7": ADMIN},
                states={"7": (os.geteuid(), "OUT_OF_MEMORY")})
    rescue_round(c, ledger_path(table), clock=lambda: profile.lstat().st_ctime + 1)
    kept, notes = _unmeasured_since_rescue([decision], [store], table)
    assert kept == [] and notes and "its job 7 ran out of memory" in notes[0]
    # A profile written since (the rescued run's follow, or the next measured run).
    rescue_round(c, ledger_path(table))
    ledger = load_ledger(ledger_path(table))
    ledger.jobs["7"].at = profile.lstat().st_ctime - 1
    rescue._save(ledger_path(table), ledger, ledger.jobs["7"].at)
    assert _unmeasured_since_rescue([decision], [store], table) == ([decision], [])


def test_its_users_dependents_wait_for_the_run_put_back(ledger):
    c = Cluster([oom()], {"7": ADMIN}, states={"8": (ME, "PENDING"), "9": (ME + 1, "PENDING"),
                                                "10": (ME, "PENDING")})
    c.depending = [("8", ME, "afterok:7(failed),afterany:5(unfulfilled)"),
                   ("9", ME + 1, "afterok:7(failed)"),            # another user's
                   ("10", ME, "afterok:70(failed)"),              # another job's
                   ("11", ME, "afterok:7(failed) x")]             # not Slurm's form
    done = rescue_round(c, ledger)
    assert done.renewed == ["8"] and "their dependents wait for them again: job(s) 8" in \
        done.line()
    assert ("update", "8", (("Dependency", "afterok:7,afterany:5"),)) in c.calls
    assert not any(x[0] == "update" and x[1] in ("9", "10", "11") for x in c.calls)


def test_the_ledger_is_roots_alone(ledger):
    rescue_round(Cluster([oom()], {"7": ADMIN}), ledger)
    assert ledger.stat().st_mode & 0o077 == 0


# GPU memory: a failed run on fewer or smaller GPUs than it asked, that filled one of them
# as the epilog measured it (its stats, root's), is put back with the GPUs it asked.
GPU_ADMIN = f"synergy:fp={FP} asked=c4,m8192,g1:a100 decision=c2,m4096,g1:a10,w2"
CATALOG = {"a100": 81920, "a10": 23028}


def failed(job_id="7", uid=ME, elapsed=40):
    return LostRun(job_id, uid, "FAILED", elapsed, False)


def epilog_left(stats_dir, job_id, peak_mb, total_mb=23028.0):
    stats_dir.mkdir(mode=0o755, exist_ok=True)
    use = GpuUse("GPU-1", "00000000:10:00.0", "NVIDIA A10", 150.0, 1.0, "counter", 90.0,
                 None, peak_mb, 40, 150.0, mem_total_mb=total_mb)
    write_json(stats_path(stats_dir, job_id, "n1"),
               JobGpuStats(job_id, "n1", None, "2026-12-07T20:00:00Z", (use,)))


@pytest.fixture
def gpus(tmp_path):
    return GpuEvidence(tmp_path / "gpustats", CATALOG)


def test_a_failed_run_that_filled_a_smaller_decided_gpu_is_put_back_on_the_asked_type(
        ledger, gpus):
    epilog_left(gpus.stats_dir, "7", 22900.0)
    c = Cluster([failed()], {"7": GPU_ADMIN}, states={"7": (ME, "FAILED")})
    done = rescue_round(c, ledger, gpus, clock=lambda: 1000.0)
    assert done.requeued == ["7"] and done.on_gpu == ["7"]
    assert "job(s) 7 (GPU memory)" in done.line()
    mark = next(call for call in c.calls if call[0] == "mark")
    settings = dict(mark[3])
    assert (settings["TresPerNode"], settings["MinMemoryNode"], settings["CPUsPerTask"]) == \
        ("gres/gpu:a100:1", "8192", "4")
    assert dict(mark[2]) == {"rescued": "gpu-oom@40s"}
    assert rescued_workloads(ledger) == {(ME, FP): (1000.0, "7", "GPU memory")}
    c.calls.clear()
    assert rescue_round(c, ledger, gpus).line() == ""       # never twice


@pytest.mark.parametrize("why, admin, run, peak", [
    ("failed with its GPU far from full: its own fault", GPU_ADMIN, failed(), 9000.0),
    ("completed, whatever it held", GPU_ADMIN, LostRun("7", ME, "COMPLETED", 40, False),
     23000.0),
    ("kept the type it asked", f"synergy:fp={FP} asked=c4,m8192,g1:a10 "
     "decision=c2,m4096,g1:a10,w2", failed(), 23000.0),
    ("moved to a type with more memory: its asked one would have failed too",
     f"synergy:fp={FP} asked=c4,m8192,g1:a10 decision=c2,m4096,g1:a100,w2", failed(),
     23000.0),
    ("no epilog record", GPU_ADMIN, failed(), None),
])
def test_a_failed_run_the_decision_did_not_cause_is_left_alone(ledger, gpus, why, admin,
                                                                  run, peak):
    if peak is not None:
        epilog_left(gpus.stats_dir, "7", peak)
    c = Cluster([run], {"7": admin})
    assert rescue_round(c, ledger, gpus).line() == "", why
    assert not load_ledger(ledger).jobs


def test_fewer_gpus_than_asked_that_filled_one_is_put_back_with_all_it_asked(ledger, gpus):
    epilog_left(gpus.stats_dir, "7", 23000.0)
    admin = f"synergy:fp={FP} asked=c8,m16384,g2:a10 decision=c4,m8192,g1:a10,w2"
    c = Cluster([failed()], {"7": admin}, states={"7": (ME, "FAILED")})
    assert rescue_round(c, ledger, gpus).requeued == ["7"]
    mark = next(call for call in c.calls if call[0] == "mark")
    assert dict(mark[3])["TresPerNode"] == "gres/gpu:a10:2"


def test_gpu_stats_anyone_could_have_written_are_no_evidence(ledger, gpus):
    epilog_left(gpus.stats_dir, "7", 23000.0)
    gpus.stats_dir.chmod(0o777)
    c = Cluster([failed()], {"7": GPU_ADMIN})
    assert rescue_round(c, ledger, gpus).line() == ""


def test_without_gpu_evidence_a_failed_run_is_not_looked_at(ledger, gpus):
    epilog_left(gpus.stats_dir, "7", 23000.0)
    c = Cluster([failed()], {"7": GPU_ADMIN})
    assert rescue_round(c, ledger).line() == ""


def test_which_decisions_lowered_the_gpus():
    def s(asked, decided):
        return sized(f"synergy:fp={FP} asked={asked} decision={decided}")
    assert s("c1,m1,g2", "c1,m1,g1,w1").lowered_gpus({})
    assert not s("c1,m1,g1", "c1,m1,g1,w1").lowered_gpus({})
    assert s("c1,m1,g1", "c1,m1,g1:a10,w1").lowered_gpus(CATALOG)          # any type asked
    assert s("c1,m1,g1:h100", "c1,m1,g1:a10,w1").lowered_gpus(CATALOG)     # not in catalog
    assert not s("c1,m1,g1:a10", "c1,m1,g1:a100,w1").lowered_gpus(CATALOG)


def test_a_flood_of_failed_runs_is_read_in_bounded_rounds_out_of_memory_first(
        ledger, gpus, monkeypatch):
    monkeypatch.setattr(rescue, "LOOKED_PER_ROUND", 3)
    runs = [failed(str(i)) for i in range(10, 20)] + [oom("5")]
    c = Cluster(runs, {"5": ADMIN})
    rescue_round(c, ledger, gpus)
    read = next(call for call in c.calls if call[0] == "sacct --json")
    assert read == ("sacct --json", ("5", "19", "18"))
