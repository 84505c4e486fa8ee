"""A decision is held to its user's association and QOS limits on every path that applies
one, on the real cluster with limits that sacctmgr sets: the table the shim reads, the
in-place update of pending jobs, user-mode submission and resubmission. A decision past
a limit is never applied (Slurm would hold the job for ever); the job runs as asked."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Iterator

import pytest

from slurm_synergy.model.profile_read import profile_from_json
from slurm_synergy.measure.errors import NOTHING_TO_GAIN_EXIT
from slurm_synergy.submission.csvjobs import load_jobs

from .conftest import (FP, TENANT_ACCOUNT, TENANT_PYTHON, accounted, decision_table, finish,
                       profile_file, save_as, sbatch_as, synergy)

pytestmark = pytest.mark.cluster

TIGHT = "synergy-tight"          # one core a job
ROW = ("name,arch,batch,workers,gpus,cpus,mem,time,iterations\n"
       "qos-row,transformer,32,1,1,1,500M,00:05:00,10\n")
# alice's pending jobs of the workload right-sized in place, as her profiled job does.
IN_PLACE = ("from slurm_synergy.decisions.pending import rightsize_pending\n"
            "from slurm_synergy.decisions.service import DecisionService, own_store\n"
            "from slurm_synergy.profiles import ProfileStore\n"
            "from slurm_synergy.site import Site\n"
            "service = DecisionService.for_site(Site.load(), own_store(ProfileStore.default()))\n"
            "done = rightsize_pending(" + repr(FP) + ", '0', service, print)\n"
            "print('UPDATED', ' '.join(j for j, _ in done.updated))\n")


@pytest.fixture(scope="module")
def tight(slurm, tenants) -> Iterator[str]:
    """A QOS of one core a job, which alice may use; she gets it by default where a test
    says so. Both put back after."""
    slurm.add_qos(TIGHT, {"MaxTRESPerJob": "cpu=1"})
    try:
        yield TIGHT
    finally:
        slurm.set_user_qos(tenants.alice.name, TENANT_ACCOUNT, ["normal"], "normal")
        slurm.remove_qos(TIGHT)


def default_qos(slurm, tenants, qos: str) -> None:
    slurm.set_user_qos(tenants.alice.name, TENANT_ACCOUNT, ["normal", TIGHT], qos)


def test_the_table_holds_each_decision_to_the_qos_its_jobs_run_under(box, slurm, tenants,
                                                                    site, tight):
    alice = tenants.alice
    # Her own profile: two cores clearly faster than one.
    save_as(tenants, alice, site, profile_file(tenants, "own", 50.0))
    default_qos(slurm, tenants, TIGHT)
    ran = synergy("plugin", "sync")
    assert ran.returncode == 0, ran.stderr
    assert f"{FP} (uid {alice.uid}): 2 cores, over 1, the most one job of {alice.name} may " \
        "have" in ran.stdout, ran.stdout
    assert (alice.uid, FP) not in decision_table(box)
    under_tight = sbatch_as(tenants, alice, "-c1", "--mem=500", f"--comment=synergy:fp={FP}")
    # With no limit by default, the decision is in the table, and the QOS's caps in its
    # header: a job that names the tight QOS is left as asked by the shim.
    default_qos(slurm, tenants, "normal")
    ran = synergy("plugin", "sync")
    assert ran.returncode == 0, ran.stderr
    assert decision_table(box)[(alice.uid, FP)].cpus == 2
    named = sbatch_as(tenants, alice, f"--qos={TIGHT}", "-c1", "--mem=500",
                      f"--comment=synergy:fp={FP}")
    free = sbatch_as(tenants, alice, "-c1", "--mem=500", f"--comment=synergy:fp={FP}")
    finish(slurm, [under_tight, named, free], timeout=300)
    acct = accounted(slurm, [under_tight, named, free])
    assert [(acct[j]["State"], acct[j]["AllocCPUS"]) for j in (under_tight, named, free)] == \
        [("COMPLETED", "1"), ("COMPLETED", "1"), ("COMPLETED", "2")], acct
    log = (box.state / "log" / "slurmctld.log").read_text(errors="replace")
    assert f"decision c2,m1280,g0 is past QOS {TIGHT}'s limits for one job" in log


def test_pending_jobs_are_right_sized_in_place_within_their_own_qos(slurm, tenants, site,
                                                                    tight):
    alice = tenants.alice
    save_as(tenants, alice, site, profile_file(tenants, "own", 50.0))
    default_qos(slurm, tenants, "normal")
    marked = f"--comment=synergy:fp={FP} profile=1"
    under_tight = sbatch_as(tenants, alice, "--hold", f"--qos={TIGHT}", "-c1", "--mem=500",
                            marked)
    free = sbatch_as(tenants, alice, "--hold", "-c1", "--mem=500", marked)
    try:
        ran = tenants.run(alice, [TENANT_PYTHON, "-c", IN_PLACE],
                          env={"SYNERGY_PROFILES": str(site)})
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.splitlines()[-1] == f"UPDATED {free}", ran.stdout
        assert f"job {under_tight} left as asked: 2 cores, over 1" in ran.stdout, ran.stdout
        jobs = {j.job_id: j for j in slurm.queue()}
        assert (jobs[under_tight].cpus_per_task, jobs[free].cpus_per_task) == (1, 2)
    finally:
        slurm.cancel([under_tight, free])


def test_user_mode_submission_decides_within_the_users_qos(slurm, tenants, site, tight,
                                                           tmp_path):
    alice = tenants.alice
    csv = tenants.shared / "qos-row.csv"
    csv.write_text(ROW)
    csv.chmod(0o644)
    fp = load_jobs(csv)[0].fingerprint
    mine = tenants.shared / "qos-row-profile.json"
    profile = profile_from_json(profile_file(tenants, "own", 50.0).read_text(), "own")
    mine.write_text(replace(profile, fingerprint=fp).to_json())
    mine.chmod(0o644)
    save_as(tenants, alice, site, mine)
    sized = {}
    for qos in (TIGHT, "normal"):
        default_qos(slurm, tenants, qos)
        out = tenants.shared / f"qos-row-{qos}"
        ran = tenants.synergy(alice, "submit", str(csv), "--mode", "user", "--dry-run",
                              "--out", str(out), env={"SYNERGY_PROFILES": str(site)})
        assert ran.returncode == 0, ran.stderr
        script = next((out / "scripts").glob("*.sbatch")).read_text()
        sized[qos] = re.search(r"^#SBATCH --cpus-per-task=(\d+)$", script, re.M).group(1)
        if qos == TIGHT:
            assert "2 cores, over 1" in ran.stdout + ran.stderr, (ran.stdout, ran.stderr)
    assert sized == {TIGHT: "1", "normal": "2"}


def test_a_resubmission_decides_within_the_qos_of_the_job_it_follows(slurm, tenants, site,
                                                                     tight):
    alice = tenants.alice
    save_as(tenants, alice, site, profile_file(tenants, "own", 50.0))
    default_qos(slurm, tenants, "normal")
    script = tenants.shared / "resubmit.sh"
    script.write_text("#!/bin/bash\n#SBATCH --time=1\ntrue\n")
    script.chmod(0o755)
    under_tight = sbatch_as(tenants, alice, "--hold", f"--qos={TIGHT}", "-c1", "--mem=500")
    free = sbatch_as(tenants, alice, "--hold", "-c1", "--mem=500")
    again = []
    try:
        for job, code in ((under_tight, NOTHING_TO_GAIN_EXIT), (free, 0)):
            # As the profiled job runs it: inside its allocation, Slurm's variables set.
            env = {"SYNERGY_PROFILES": str(site), "SLURM_JOB_ID": job,
                   "SLURM_JOB_PARTITION": "gpu", "SLURM_CPUS_PER_TASK": "1",
                   "SLURM_MEM_PER_NODE": "500"}
            ran = tenants.synergy(alice, "plugin", "resubmit", "--job", job, "--script",
                                  str(script), "--comment", f"synergy:fp={FP}", "--mode",
                                  "user", env=env)
            assert ran.returncode == code, (job, ran.stdout, ran.stderr)
            if code:
                assert "not resubmitted: 2 cores, over 1" in ran.stderr, ran.stderr
            else:
                new = re.search(r"resubmitted as job (\d+)", ran.stderr).group(1)
                again.append(new)
                assert {j.job_id: j for j in slurm.queue()}[new].cpus_per_task == 2
    finally:
        slurm.cancel([under_tight, free, *again])


def test_limits_reach_explain(tenants, site, tight, slurm):
    alice = tenants.alice
    save_as(tenants, alice, site, profile_file(tenants, "own", 50.0))
    default_qos(slurm, tenants, TIGHT)
    ran = tenants.synergy(alice, "plugin", "explain", FP, env={"SYNERGY_PROFILES": str(site)})
    assert ran.returncode == 0, ran.stderr
    assert "decision: none; its jobs run as asked" in ran.stdout
    assert f"2 cores, over 1, the most one job of {alice.name} may have" in ran.stdout
