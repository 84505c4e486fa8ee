"""Time limits backfill can use, on the real cluster, with users attacking it: root's
time-limit timer (`synergy plugin timelimits`, one round per call, as a site's cron runs
it) sets a pending job's --time-min from its workload's completed jobs, and Slurm's
backfill starts it in a gap its --time does not fit. On 22.05 Slurm lowers its limit to
that time_min and the timer gives its --time back before it would end the job; from 23.11
(time_min_as_soft_limit) the limit is never lowered, and a job ten times longer than its
history runs to its end with the timer stopped.

Meanwhile another user writes, into their own jobs' comments, well-formed lines of every
text form root could have read (squeue's and sacct's), each behind another line-break
class, naming the victim's running job and forging the victim's history: none of it may
change the victim's jobs or predictions, or raise any limit past a job's own --time."""

from __future__ import annotations

import time

import pytest

from slurm_synergy.model import comment as comment_format
from slurm_synergy.slurm import SEP
from slurm_synergy.slurm_release import soft_time_min

from tests.helpers import site_policy_with

from .conftest import executable, finish, synergy

pytestmark = pytest.mark.cluster

# The same script (so the same workload key) naps as long as its job's environment says;
# its tag is in a command, since a plain script's key leaves its comments out.
NAP = "#!/bin/bash\n: time-limits {tag}\nsleep ${{NAP:-20}}\n"
HISTORY_S, RUN_S = 7, 70              # the prediction's history, a tenth of the real run
# Every line break Python's splitlines() knows: root's old readers split on each.
LINE_BREAKS = {"LF": "\n", "CR": "\r", "CRLF": "\r\n", "VT": "\x0b", "FF": "\x0c",
               "FS": "\x1c", "GS": "\x1d", "RS": "\x1e", "NEL": "\x85", "LS": "\u2028",
               "PS": "\u2029"}


def sbatch(tenants, who, script, *options: str) -> str:
    ran = tenants.run(who, ["sbatch", "--parsable", "--cpus-per-task=1", "--mem=200M",
                            f"--output={tenants.shared}/%j.out", *options, str(script)])
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.strip()


def timer_round(policy, state) -> str:
    """One round of root's timer, as cron runs it."""
    done = synergy("plugin", "timelimits", "--state", str(state),
                   env={"SYNERGY_POLICY": str(policy)})
    assert done.returncode == 0, done.stderr
    return done.stdout


def forged_queue_line(job: str, uid: int, state: str, limit: str, used: str) -> str:
    """A line of root's old squeue form (its comment first), naming `job`."""
    return SEP.join(("synergy:fp=0000000000000000", job, str(uid), state, limit, used, "1"))


def forged_history_lines(fp: str, uid: int, job: str) -> str:
    """Lines of root's sacct forms: the old one (texts first), a run of `fp` that ran out
    of time, which would block every prediction of it; and today's texts bracketed by job
    ids, giving `job` (a run of `fp`) another workload's key, which would leave `fp` with
    no history."""
    return "\n".join((SEP.join((f"synergy:fp={fp}", "", "999999", str(uid), "TIMEOUT", "5",
                                "1")),
                      SEP.join((job, "synergy:fp=ffffffffffffffff", "", job))))


def test_backfill_on_a_predicted_time_min_against_forged_lines(slurm, tenants, tag, tmp_path):
    alice, bob = tenants.alice, tenants.bob
    soft = soft_time_min(slurm.version())
    policy = tenants.shared / f"policy-{tag}.toml"
    policy.write_text(site_policy_with(time_min_floor_min="1"))
    policy.chmod(0o644)
    state = tmp_path / "time-limits.json"
    script = executable(tenants.shared / f"nap-{tag}.sh", NAP.format(tag=tag))
    other = executable(tenants.shared / f"other-{tag}.sh", NAP.format(tag=tag + "-other"))
    victim_script = executable(tenants.shared / f"victim-{tag}.sh",
                               NAP.format(tag=tag + "-victim"))
    # bob's blockers have a workload of their own: the long one's 100 s run, once ended,
    # is history that rightly predicts his later jobs of its script.
    blocker = executable(tenants.shared / f"blocker-{tag}.sh", NAP.format(tag=tag + "-block"))
    ids: list[str] = []
    try:
        # alice's workload: one completed run of HISTORY_S; her victim job asks two days
        # on node2 (not the cores backfill is tested on).
        first = sbatch(tenants, alice, script, "--partition=gpu", "--time=20",
                       f"--export=ALL,NAP={HISTORY_S}")
        victim = sbatch(tenants, alice, victim_script, "--partition=multi", "--nodelist=node2",
                        "--time=2-0", "--export=ALL,NAP=40")
        ids += [first, victim]
        assert finish(slurm, [first])[first].state == "COMPLETED"
        fp = comment_format.fingerprint(slurm.comment(first))
        # bob's forged history of alice's workload, one completed job per line break.
        forged = forged_history_lines(fp, alice.uid, first)
        forgers = [sbatch(tenants, bob, other, "--partition=multi", "--time=5",
                          f"--comment=x{lb}{forged}{lb}y", "--export=ALL,NAP=0")
                   for lb in LINE_BREAKS.values()]
        ids += forgers
        # bob's held jobs, whose comments forge alice's running job as pending.
        as_pending = forged_queue_line(victim, alice.uid, "PENDING", "3:00", "0:00")
        held = [sbatch(tenants, bob, other, "--partition=gpu", "--time=5", "--hold",
                       f"--comment=x{lb}{as_pending}{lb}y") for lb in LINE_BREAKS.values()]
        ids += held
        finish(slurm, forgers)

        # bob holds one of node1's two cores (limit 3 minutes) and his two-core job waits
        # for it at the top of the queue: backfill may start a one-core job only where
        # its limit (or time_min) ends before that reservation.
        long = sbatch(tenants, bob, blocker, "--partition=gpu", "--time=3", "--export=ALL,NAP=100")
        wide = sbatch(tenants, bob, blocker, "--partition=gpu", "--time=10", "--cpus-per-task=2")
        nap = sbatch(tenants, alice, script, "--partition=gpu", "--time=20",
                     f"--export=ALL,NAP={RUN_S}")
        unknown = sbatch(tenants, alice, other, "--partition=gpu", "--time=20")
        ids += [long, wide, nap, unknown]

        line = timer_round(policy, state)
        assert f"time_min set on job(s) {nap}" in line, line
        minutes, predicted, jobs = comment_format.time_min(slurm.comment(nap))
        # alice's own 7 s run alone (n1: none of bob's forged rows), x2 -> the 1-minute floor
        assert (minutes, jobs) == (1, 1) and HISTORY_S <= predicted <= HISTORY_S + 9
        # bob's forgeries now say alice's job runs on a lowered limit near its end.
        for lb, job in zip(LINE_BREAKS.values(), held):
            forged = forged_queue_line(victim, alice.uid, "RUNNING", "2:00", "1:59")
            ran = tenants.run(bob, ["scontrol", "update", f"JobId={job}",
                                    f"Comment=x{lb}{forged}{lb}y"])
            assert ran.returncode == 0, ran.stderr
        if not soft:
            timer_round(policy, state)

        # Backfill (every 30 s) starts the predicted job in the gap; the job without
        # history, asking the same --time, stays behind the wide one.
        deadline = time.monotonic() + 120
        while (started := slurm.timed_job(nap)).state != "RUNNING":
            assert time.monotonic() < deadline, "backfill did not start the predicted job"
            time.sleep(2)
        assert slurm.timed_job(wide).state == "PENDING"
        assert slurm.timed_job(unknown).state == "PENDING"
        if soft:
            # Planned with its time_min, it keeps its --time: nothing to put back, and no
            # round runs from here (the timer stopped).
            assert started.limit_min == 20, started
        else:
            # Slurm lowered its limit to fit before the wide job's start; the timer's
            # rounds give its --time back before that limit would end it.
            assert started.limit_min is not None and 1 <= started.limit_min <= 3, started
            raised = ""
            while slurm.timed_job(nap).state == "RUNNING":
                raised += timer_round(policy, state)
                time.sleep(5)
            assert f"limit put back to --time on job(s) {nap}" in raised, raised
        ended = finish(slurm, [nap, victim])
        assert ended[nap].state == "COMPLETED" and ended[victim].state == "COMPLETED", ended
        rows = {r["JobID"]: r for r in slurm.sacct(
            [nap, victim, long], ("JobID", "TimelimitRaw", "ElapsedRaw", "Comment"))}
        assert rows[nap]["TimelimitRaw"] == "20" and int(rows[nap]["ElapsedRaw"]) >= RUN_S
        assert comment_format.time_back(rows[nap]["Comment"]) == (None if soft else 20)
        # alice's victim ran to its own end on its own two days, untouched by the timer;
        # bob's long job kept its own 3 minutes.
        assert rows[victim]["TimelimitRaw"] == str(2 * 24 * 60), rows[victim]
        assert comment_format.time_min(rows[victim]["Comment"]) is None
        assert comment_format.time_back(rows[victim]["Comment"]) is None
        assert rows[long]["TimelimitRaw"] == "3"
        for job in held:
            again = slurm.timed_job(job)
            assert again is not None and (again.limit_min, again.time_min_min) == (5, 0), again
    finally:
        slurm.cancel(ids)
