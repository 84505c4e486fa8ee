"""Two ordinary users of the real cluster sharing a site's profile store (mode 1777, as
docs/install.md makes it), one of them hostile: what the other writes never sizes your
jobs, stalls the table's compiling or keeps your job from running as you asked; and a
decision is held to your association's limits like anything else you submit."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers import flow_policy, make_profile, site_policy_with

from .conftest import (FP, ROOT, TENANT_ACCOUNT, TENANT_PYTHON, Tenant, accounted,
                       decision_table, finish, profile_file, save_as, sbatch_as, submitted_ids,
                       synergy)

pytestmark = pytest.mark.cluster

HOSTILE = {"fifo": "5e1f00000000000a", "deep": "5e1f00000000000b",
           "sparse": "5e1f00000000000c", "zero": "5e1f00000000000d"}
# What a hostile user does by hand in their own folder, beside their profiles.
PLANT = ("import os, sys\n"
         "d = sys.argv[1]\n"
         "os.mkfifo(f'{d}/{sys.argv[2]}.json')\n"
         "open(f'{d}/{sys.argv[3]}.json', 'w').write('[' * 200000)\n"
         "with open(f'{d}/{sys.argv[4]}.json', 'w') as f:\n"
         "    f.truncate(50 << 30)\n"
         "os.symlink('/dev/zero', f'{d}/{sys.argv[5]}.json')\n")


def test_a_hostile_users_files_size_nobody_elses_jobs_and_stall_nothing(box, slurm, tenants,
                                                                       site):
    alice, bob = tenants.alice, tenants.bob
    # bob's forgery of alice's workload (one core as fast as two), filed as his own ...
    forged = profile_file(tenants, "forged", 100.0)
    assert save_as(tenants, bob, site, forged) == site / str(bob.uid) / f"{FP}.json"
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
    entries = decision_table(box)
    assert (bob.uid, FP) in entries and entries[(bob.uid, FP)].cpus == 1
    assert not [k for k in entries if k[0] == alice.uid], entries

    # Both submit the workload asking two cores: only bob's own job takes his decision;
    # alice's runs as she asked, neither refused nor held.
    asked = ("-c2", "--mem=2000", f"--comment=synergy:fp={FP}")
    mine, his = sbatch_as(tenants, alice, *asked), sbatch_as(tenants, bob, *asked)
    finish(slurm, [mine, his], timeout=300)
    acct = accounted(slurm, [mine, his])
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
    save_as(tenants, alice, site, profile_file(tenants, "own", 50.0))
    ran = synergy("plugin", "sync")
    assert ran.returncode == 0, ran.stderr
    assert decision_table(box)[(alice.uid, FP)].cpus == 2
    slurm.add_user(alice.name, TENANT_ACCOUNT, {"MaxTRESPerJob": "cpu=1"})
    asks = ("-c1", "--mem=500", f"--comment=synergy:fp={FP}")
    job = ""
    try:
        # A table compiled before her limit: the shim raises her one core to the
        # decision's two, and Slurm, which checks limits after job_submit, holds the job
        # to her association's one.
        job = sbatch_as(tenants, alice, *asks)
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
        assert f"{FP} (uid {alice.uid}): 2 cores, over 1, the most one job of {alice.name} " \
            "may have (association and default QOS limits)" in ran.stdout, ran.stdout
        assert (alice.uid, FP) not in decision_table(box)
        job = sbatch_as(tenants, alice, *asks)
        finish(slurm, [job], timeout=300)
        row = accounted(slurm, [job])[job]
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


def test_an_ordinary_user_measures_and_right_sizes_her_own_sweep(box, slurm, tenants, site,
                                                               tmp_path):
    """The default flow as an ordinary user: her first job is measured while it trains,
    the profile is hers alone, her pending rows are right-sized in place by her own job,
    and the table (root's) takes her decision at the site's next sync. The flow is
    checked here, not the figures (flow_policy): her jobs read that policy from her
    environment, root's sync from a root-owned copy (it refuses a policy file a user
    can write)."""
    alice = tenants.alice
    text = flow_policy()
    policy = tenants.shared / f"policy-{os.urandom(3).hex()}.toml"
    policy.write_text(text)
    policy.chmod(0o644)
    root_policy = tmp_path / "policy.toml"
    root_policy.write_text(text)
    out = tenants.shared / "alice-sweep"
    names = [f"alice{os.urandom(3).hex()}-{i}" for i in range(1, 4)]
    csv = tenants.shared / "alice-sweep.csv"
    csv.write_text("name,arch,batch,workers,gpus,cpus,mem,time,iterations,args\n" + "".join(
        f"{n},transformer,32,1,1,2,3G,00:20:00,{110 if i == 0 else 24},"
        f"--dataset-size 1536 --lr 0.0{i + 1}\n" for i, n in enumerate(names)))
    csv.chmod(0o644)
    env = {"SYNERGY_PROFILES": str(site), "SYNERGY_DATA": str(tenants.shared / "alice-data"),
           "SYNERGY_POLICY": str(policy)}
    sub = tenants.synergy(alice, "submit", str(csv), "--out", str(out), env=env)
    ids = submitted_ids(sub)
    finish(slurm, ids.values(), timeout=1200)
    acct = accounted(slurm, ids.values())
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
    ran = synergy("plugin", "sync", env={"SYNERGY_POLICY": str(root_policy)})
    assert ran.returncode == 0, ran.stderr
    d = decision_table(box)[(alice.uid, fp)]
    assert all(int(acct[ids[n]]["AllocCPUS"]) == d.cpus for n in names[1:])


# What bob writes by hand into the site's store (argv: the store, alice's workload, his
# forged profile, an oversized one, a heavy valid one, his uid, how many heavy ones):
# folders whose names pass for uids (a superscript one, zero-padded ones, other scripts'
# digits), each with a forgery of alice's workload and a profile of absurd values, and
# in his own folder a flood of heavy but valid profiles.
FLOOD = ("import os, sys\n"
         "site, fp, forged, wild, heavy, uid, count = sys.argv[1:]\n"
         "aliases = ['\\u00b9', '0' + uid, '00' + uid,\n"
         "           ''.join(chr(0xff10 + int(c)) for c in uid), uid + '\\n']\n"
         "for name in aliases:\n"
         "    os.mkdir(os.path.join(site, name), 0o700)\n"
         "    for fname, src in ((fp, forged), ('fedcba9876543210', wild)):\n"
         "        open(os.path.join(site, name, fname + '.json'), 'w').write(open(src).read())\n"
         "own = os.path.join(site, uid)\n"
         "os.mkdir(own, 0o700)\n"
         "text = open(heavy).read()\n"
         "for n in range(int(count)):\n"
         "    name = f'{n:016x}'\n"
         "    open(os.path.join(own, name + '.json'), 'w').write(text.replace('HEAVYFINGERPRINT', name))\n"
         "open(os.path.join(own, 'fedcba9876543210.json'), 'w').write(open(wild).read())\n"
         "print(' '.join(ascii(a) for a in aliases))\n")
HEAVY_PROFILES = 2000


def _heavyprofile_file(tenants) -> Path:
    """A valid profile of 256 points (what costs sync's time to read and decide), its
    fingerprint HEAVYFINGERPRINT for bob's script to number."""
    p = make_profile("00" * 8)
    point = next(pt for pt in p.points if pt.cores == 2 and pt.measure == "train")
    heavy = replace(p, points=tuple(replace(point, cores=1 + i % 2) for i in range(256)))
    path = tenants.shared / "heavy.json"
    path.write_text(json.dumps(json.loads(heavy.to_json())).replace(
        '"fingerprint": "0000000000000000"', '"fingerprint": "HEAVYFINGERPRINT"'))
    path.chmod(0o644)
    return path


def _wildprofile_file(tenants) -> Path:
    """A profile whose values no node has: a 4,300-digit process count, a 1e308 W limit."""
    data = json.loads(make_profile("fedcba9876543210").to_json())
    data["allocation"]["procs"] = int("9" * 4299)
    data["gpu"]["power_sweep"][0]["limit_w"] = 1e308
    path = tenants.shared / "wild.json"
    path.write_text(json.dumps(data))
    path.chmod(0o644)
    return path


def test_no_name_or_value_in_the_store_stops_the_sync_or_crowds_anyone_out(box, slurm,
                                                                          tenants, site):
    alice, bob = tenants.alice, tenants.bob
    # alice's own profile: two cores clearly faster than one.
    save_as(tenants, alice, site, profile_file(tenants, "alices", 50.0))
    forged = profile_file(tenants, "forged", 100.0)
    made = tenants.run(bob, [TENANT_PYTHON, "-c", FLOOD, str(site), FP, str(forged),
                             str(_wildprofile_file(tenants)), str(_heavyprofile_file(tenants)),
                             str(bob.uid), str(HEAVY_PROFILES)], timeout=600)
    assert made.returncode == 0, made.stderr
    started = time.monotonic()
    ran = synergy("plugin", "sync")
    took = time.monotonic() - started
    assert ran.returncode == 0, ran.stderr
    print(f"sync with bob's {HEAVY_PROFILES} heavy profiles and alias folders: {took:.1f} s\n"
          f"{ran.stdout[:3000]}")
    # It stopped reading bob's folder at his own share (USER_BUDGET_S), and named each
    # alias folder, escaped (no line of its output is bob's text).
    for alias in made.stdout.split():
        shown = alias.strip("'")
        assert f"{site}/{shown}: not a user's folder" in ran.stdout, (alias, ran.stdout)
    assert f"{site}/{bob.uid}: " in ran.stdout and "a user's profiles may take in one sync" \
        in ran.stdout
    assert ran.stdout.isascii()
    entries = decision_table(box)
    assert entries[(alice.uid, FP)].cpus == 2, entries.get((alice.uid, FP))
    assert sum(uid == bob.uid for uid, _ in entries) < HEAVY_PROFILES
    assert (bob.uid, "fedcba9876543210") not in entries
    # alice's job takes her own decision, and runs.
    job = sbatch_as(tenants, alice, "-c1", "--mem=500", f"--comment=synergy:fp={FP}")
    finish(slurm, [job], timeout=300)
    row = accounted(slurm, [job])[job]
    assert (row["State"], row["AllocCPUS"]) == ("COMPLETED", "2"), row


def test_an_argv_of_any_size_is_left_alone_within_the_shims_budget(box, slurm, tenants,
                                                                  site, tmp_path):
    """sbatch's own command line is capped at 1 MiB, a job's argv nowhere: a client of
    libslurm may send 32 MiB. The shim hashes at most 64 KiB of script, arguments and
    folder; past that the job passes unkeyed, with one log line, and no one waits."""
    alice, bob = tenants.alice, tenants.bob
    client = tenants.shared / "submit_argv"
    built = subprocess.run(["gcc", "-O2", "-o", str(client),
                            str(ROOT / "tests" / "clients" / "submit_argv.c"), "-lslurm"],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    client.chmod(0o755)
    script = tenants.shared / "argv.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    script.chmod(0o755)
    held = []
    for size, parts in ((0, 0), (32 << 20, 1), (32 << 20, 256)):
        ran = tenants.run(bob, [str(client), str(script), str(tenants.shared), "gpu",
                                str(size), str(parts), "1"])
        assert ran.returncode == 0, ran.stderr
        job, seconds = ran.stdout.split()
        held.append(job)
        print(f"libslurm submit of {size} bytes of argv in {parts} argument(s): "
              f"{float(seconds) * 1000:.1f} ms")
    # Through sbatch: 960 KB of arguments (eight of 120 KB: Linux takes 128 KiB an
    # argument), under its 1 MiB command line.
    ran = tenants.run(bob, ["sbatch", "--parsable", "--hold", "--time=1", "-o", "/dev/null",
                            str(script), *["a" * (120 << 10)] * 8])
    assert ran.returncode == 0, ran.stderr
    held.append(ran.stdout.strip())
    try:
        log = (box.state / "log" / "slurmctld.log").read_text(errors="replace")
        for job in held[1:]:
            comment = slurm.comment(job)
            assert "synergy:fp=" not in comment, (job, comment)
            rpc = re.search(rf"lua: slurm-synergy: job (\S+) \(uid {bob.uid}\): "
                            rf"(?:folder and \d+ )?arguments over 65536 bytes: not keyed\n"
                            rf"[^\n]*_slurm_rpc_submit_batch_job: JobId={job} ", log)
            assert rpc, f"no 'not keyed' line for job {job}"
        assert slurm.comment(held[0]).startswith("synergy:fp=")     # a plain job is keyed
        # Meanwhile alice's job is neither refused nor held up.
        job = sbatch_as(tenants, alice, "-c1", "--mem=500")
        finish(slurm, [job], timeout=300)
        assert accounted(slurm, [job])[job]["State"] == "COMPLETED"
    finally:
        slurm.cancel(held)


LAB = "synergy-lab"


def test_a_shared_decision_never_shrinks_a_colleagues_job(box, slurm, tenants, site):
    """With share_group, a member's profile also sizes the other members' jobs: bob, a
    member, files a forgery of alice's workload (one core as fast as two, the least
    memory). It may grow her jobs, never shrink them, and her own run is measured."""
    alice, bob = tenants.alice, tenants.bob
    subprocess.run(["groupadd", "--force", LAB], check=True)
    for who in (alice, bob):
        subprocess.run(["gpasswd", "--add", who.name, LAB], check=True, capture_output=True)
    policy = tenants.shared / "policy-lab.toml"
    policy.write_text(site_policy_with(share_group=f'"{LAB}"'))
    policy.chmod(0o644)
    os.environ["SYNERGY_POLICY"] = str(policy)
    try:
        save_as(tenants, bob, site, profile_file(tenants, "forged", 100.0))
        ran = synergy("plugin", "sync")
        assert ran.returncode == 0, ran.stderr
        entries = decision_table(box)
        shared, his = entries[(alice.uid, FP)], entries[(bob.uid, FP)]
        assert shared.shared and not his.shared and shared.cpus == his.cpus == 1
        # She asks more than the forgery: left as asked, and measured as her own.
        asked = sbatch_as(tenants, alice, "-c2", "--mem=2000", f"--comment=synergy:fp={FP}")
        # She asks less memory than it: that grows, her one core stays.
        less = sbatch_as(tenants, alice, "-c1", "--mem=200", f"--comment=synergy:fp={FP}")
        finish(slurm, [asked, less], timeout=300)
        acct = accounted(slurm, [asked, less])
        assert (acct[asked]["State"], acct[asked]["AllocCPUS"], acct[asked]["ReqMem"]) == \
            ("COMPLETED", "2", "2000M"), acct[asked]
        assert acct[asked]["Comment"].endswith(" profile=1"), acct[asked]
        assert (acct[less]["State"], acct[less]["AllocCPUS"]) == ("COMPLETED", "1")
        assert acct[less]["ReqMem"] == f"{his.mem_mb}M" and \
            f"decision=c1,m{his.mem_mb}," in acct[less]["Comment"], acct[less]
    finally:
        del os.environ["SYNERGY_POLICY"]
        subprocess.run(["groupdel", LAB], check=False)
