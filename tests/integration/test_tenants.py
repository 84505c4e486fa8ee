"""Two ordinary users of the real cluster sharing a site's profile store (mode 1777, as
docs/install.md makes it), one of them hostile: what the other writes never sizes your
jobs, stalls the table's compiling or keeps your job from running as you asked; and a
decision is held to your association's limits like anything else you submit."""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_synergy.decisions.table import TABLE_NAME, read

from tests.helpers import make_profile

from .conftest import (TENANT_ACCOUNT, TENANT_PYTHON, Tenant, finish, submitted_ids,
                       synergy)

pytestmark = pytest.mark.cluster

FP = "5e1f5e1f5e1f5e1f"
HOSTILE = {"fifo": "5e1f00000000000a", "deep": "5e1f00000000000b",
           "sparse": "5e1f00000000000c", "zero": "5e1f00000000000d"}
ACCT = ("JobID", "User", "State", "AllocCPUS", "ReqMem", "Comment")
# Saves the profile file it is given into the caller's own folder of the site's store,
# through the package, as a user's profiling job does.
SAVE = ("import sys\n"
        "from slurm_synergy.model.profile import profile_from_json\n"
        "from slurm_synergy.profiles import ProfileStore\n"
        "print(ProfileStore.default().save(profile_from_json(open(sys.argv[1]).read(), "
        "sys.argv[1])))\n")
# What a hostile user does by hand in their own folder, beside their profiles.
PLANT = ("import os, sys\n"
         "d = sys.argv[1]\n"
         "os.mkfifo(f'{d}/{sys.argv[2]}.json')\n"
         "open(f'{d}/{sys.argv[3]}.json', 'w').write('[' * 200000)\n"
         "with open(f'{d}/{sys.argv[4]}.json', 'w') as f:\n"
         "    f.truncate(50 << 30)\n"
         "os.symlink('/dev/zero', f'{d}/{sys.argv[5]}.json')\n")


def _profile_file(tenants, name: str, one_core_rate: float, fp: str = FP) -> Path:
    """make_profile's workload (2 cores at 100 samples/s), its one core at `one_core_rate`."""
    p = make_profile(fp)
    points = tuple(replace(pt, samples_per_s=one_core_rate,
                           repeats=(one_core_rate,) * 3) if pt.cores == 1 and
                   pt.measure == "train" else pt for pt in p.points)
    path = tenants.shared / f"{name}-{fp}.json"
    path.write_text(replace(p, points=points).to_json())
    path.chmod(0o644)
    return path


def _save_as(tenants, who, site: Path, source: Path) -> Path:
    ran = tenants.run(who, [TENANT_PYTHON, "-c", SAVE, str(source)],
                      env={"SYNERGY_PROFILES": str(site)})
    assert ran.returncode == 0, ran.stderr
    return Path(ran.stdout.strip())


def _sbatch(tenants, who, *options: str) -> str:
    ran = tenants.run(who, ["sbatch", "--parsable", f"--output={tenants.shared}/%j.out",
                            "--time=5", *options, "--wrap", "sleep 1"])
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.strip()


def _accounted(slurm, ids) -> dict[str, dict[str, str]]:
    """sacct's records of ended jobs, once accounting has their sizes (once, a record read
    right at the end showed ReqMem "16?")."""
    deadline = time.monotonic() + 30
    while True:
        acct = {r["JobID"]: r for r in slurm.sacct(list(ids), ACCT)}
        if all(re.fullmatch(r"\d+[MG]", acct.get(j, {}).get("ReqMem", "")) for j in ids) \
                or time.monotonic() > deadline:
            return acct
        time.sleep(1)


def _table(box) -> dict:
    return read(box.etc / TABLE_NAME)[1]


def test_a_hostile_users_files_size_nobody_elses_jobs_and_stall_nothing(box, slurm, tenants,
                                                                       site):
    alice, bob = tenants.alice, tenants.bob
    # bob's forgery of alice's workload (one core as fast as two), filed as his own ...
    forged = _profile_file(tenants, "forged", 100.0)
    assert _save_as(tenants, bob, site, forged) == site / str(bob.uid) / f"{FP}.json"
    # ... planted where alice's folder would be, before her first job ...
    squat = tenants.run(bob, ["sh", "-c", f'mkdir "$1" && cp "$2" "$1/{FP}.json"', "sh",
                              str(site / str(alice.uid)), str(forged)])
    assert squat.returncode == 0, squat.stderr
    # ... and files that would stall or exhaust a reader that trusted them.
    plant = tenants.run(bob, [TENANT_PYTHON, "-c", PLANT, str(site / str(bob.uid)),
                              *HOSTILE.values()])
    assert plant.returncode == 0, plant.stderr

    started = time.monotonic()
    ran = synergy("plugin", "sync")
    took = time.monotonic() - started
    assert ran.returncode == 0, ran.stderr
    print(f"sync with bob's files in the store: {took:.1f}s\n{ran.stdout}")
    for fp in HOSTILE.values():
        assert fp in ran.stdout, f"{fp} not named as left out:\n{ran.stdout}"
    assert str(site / str(alice.uid)) in ran.stdout, ran.stdout
    entries = _table(box)
    assert (bob.uid, FP) in entries and entries[(bob.uid, FP)].cpus == 1
    assert not [k for k in entries if k[0] == alice.uid], entries

    # Both submit the workload asking two cores: only bob's own job takes his decision;
    # alice's runs as she asked, neither refused nor held.
    asked = ("-c2", "--mem=2000", f"--comment=synergy:fp={FP}")
    mine, his = _sbatch(tenants, alice, *asked), _sbatch(tenants, bob, *asked)
    finish(slurm, [mine, his], timeout=300)
    acct = _accounted(slurm, [mine, his])
    assert (acct[mine]["User"], acct[mine]["State"], acct[mine]["AllocCPUS"]) == \
        (alice.name, "COMPLETED", "2"), acct[mine]
    assert "decision=" not in acct[mine]["Comment"], acct[mine]
    assert acct[mine]["ReqMem"] == "2000M", acct[mine]
    assert (acct[his]["User"], acct[his]["State"], acct[his]["AllocCPUS"]) == \
        (bob.name, "COMPLETED", "1"), acct[his]
    assert "decision=c1" in acct[his]["Comment"]


def test_a_decision_is_held_to_the_users_association_limits(box, slurm, tenants, site):
    alice = tenants.alice
    # alice's own profile: two cores clearly faster than one, so her decision is 2 cores.
    _save_as(tenants, alice, site, _profile_file(tenants, "own", 50.0))
    ran = synergy("plugin", "sync")
    assert ran.returncode == 0, ran.stderr
    assert _table(box)[(alice.uid, FP)].cpus == 2
    slurm.add_user(alice.name, TENANT_ACCOUNT, {"MaxTRESPerJob": "cpu=1"})
    asks = ("-c1", "--mem=500", f"--comment=synergy:fp={FP}")
    job = ""
    try:
        # A table compiled before her limit: the shim raises her one core to the
        # decision's two, and Slurm, which checks limits after job_submit, holds the job
        # to her association's one.
        job = _sbatch(tenants, alice, *asks)
        deadline = time.monotonic() + 30
        while True:
            queued = {j.job_id: j for j in slurm.queue()}.get(job)
            assert queued is not None, f"job {job} left the queue: it ran past the limit"
            if queued.state == "PENDING" and queued.reason.startswith("Assoc"):
                break
            assert queued.state == "PENDING", queued
            assert time.monotonic() < deadline, f"job {job} pending for {queued.reason}"
            time.sleep(1)
        print(f"job {job}: {queued.state} ({queued.reason})")
        assert queued.cpus_per_task == 2, "the decision was applied"
        assert "decision=c2" in slurm.comment(job)
        slurm.cancel([job])
        # The next sync reads her limit and leaves the decision out, so her jobs run as
        # she asked instead of waiting for ever.
        ran = synergy("plugin", "sync")
        assert ran.returncode == 0, ran.stderr
        assert f"{FP}: 2 cores, over its user's per-job limit of 1" in ran.stdout, ran.stdout
        assert (alice.uid, FP) not in _table(box)
        job = _sbatch(tenants, alice, *asks)
        finish(slurm, [job], timeout=300)
        row = _accounted(slurm, [job])[job]
        assert (row["State"], row["AllocCPUS"]) == ("COMPLETED", "1"), row
        assert "decision=" not in row["Comment"]
    finally:
        if job:
            slurm.cancel([job])
        slurm.add_user(alice.name, TENANT_ACCOUNT, {"MaxTRESPerJob": "cpu=-1"})


def test_a_user_without_an_association_cannot_submit(tenants):
    """What the limits above rest on: accounting, not the shim, says who may submit."""
    nobody = Tenant("nobody", 65534)
    ran = tenants.run(nobody, ["sbatch", "--parsable", "--time=1", "--wrap", "true"])
    assert ran.returncode != 0 and "Invalid account" in ran.stderr, (ran.stdout, ran.stderr)


def test_an_ordinary_user_measures_and_right_sizes_her_own_sweep(box, slurm, tenants, site):
    """The default flow as an ordinary user: her first job is measured while it trains,
    the profile is hers alone, her pending rows are right-sized in place by her own job,
    and the table (root's) takes her decision at the site's next sync."""
    alice = tenants.alice
    out = tenants.shared / "alice-sweep"
    names = [f"alice{os.urandom(3).hex()}-{i}" for i in range(1, 4)]
    csv = tenants.shared / "alice-sweep.csv"
    csv.write_text("name,arch,batch,workers,gpus,cpus,mem,time,iterations,args\n" + "".join(
        f"{n},transformer,32,1,1,2,3G,00:20:00,{260 if i == 0 else 24},"
        f"--dataset-size 1536 --lr 0.0{i + 1}\n" for i, n in enumerate(names)))
    csv.chmod(0o644)
    env = {"SYNERGY_PROFILES": str(site), "SYNERGY_DATA": str(tenants.shared / "alice-data")}
    sub = tenants.synergy(alice, "submit", str(csv), "--out", str(out), env=env)
    ids = submitted_ids(sub)
    finish(slurm, ids.values(), timeout=1200)
    acct = _accounted(slurm, ids.values())
    first = ids[names[0]]
    assert all(acct[j]["User"] == alice.name and acct[j]["State"] == "COMPLETED"
               for j in ids.values()), acct
    fp = re.search(r"synergy:fp=([0-9a-f]{16})", acct[first]["Comment"]).group(1)
    saved = site / str(alice.uid) / f"{fp}.json"
    st = saved.lstat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (alice.uid, 0o600)
    log = (out / "logs" / f"{names[0]}-{first}.out").read_text()
    assert "right-sized in place:" in log, log[-3000:]
    # Her job may not write root's table; it says so and goes on.
    assert "decision table not updated" in log and "belongs to uid 0" in log
    for n in names[1:]:
        assert f"by={first}" in acct[ids[n]]["Comment"], acct[ids[n]]
    ran = synergy("plugin", "sync")
    assert ran.returncode == 0, ran.stderr
    d = _table(box)[(alice.uid, fp)]
    assert all(int(acct[ids[n]]["AllocCPUS"]) == d.cpus for n in names[1:])
