"""Batch scripts as users write them, submitted with plain `sbatch` by an ordinary user of
the real local cluster, each twice: the shim keys the first and marks it, the node's
TaskProlog puts the probe on its tasks' path, it trains to its end while it is measured
and yields a profile; the site's sync compiles it; the second starts right-sized (sacct).
A job that runs no Python, and one its user opted out, are left as they were asked.
A config edited under the same script to need more memory than was decided: the job runs
out of memory, root's timer puts it back with what it asked, it completes, and the
workload is measured again before it is right-sized again. A job right-sized to fewer cores
that trains far slower than its decision predicted sends its workload's later jobs to more
cores."""

from __future__ import annotations

import json
import os
import pwd
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from slurm_synergy.cluster.localbox import MULTI_PARTITION
from slurm_synergy.jobs import FINAL_STATES
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.decisions.table import TABLE_NAME, Held, read

from tests.helpers import flow_policy

from .conftest import ROOT, TENANT_PYTHON, Tenant, finish, synergy

pytestmark = pytest.mark.cluster

VENV = ROOT / ".venv"
ACCT = ("JobID", "JobIDRaw", "JobName", "Partition", "State", "ExitCode", "AllocCPUS", "ReqMem",
        "Comment", "AdminComment")
# A user's training script: a DataLoader over squares of numbers (or, with --manual,
# slices of one tensor and no loader), for --seconds (TRAIN_SECONDS in its environment
# wins: a rerun that need not be measured is kept short; each step waits TRAIN_SLOW
# seconds more, as on a slower or busier node); it prints what it trained.
TRAIN = """\
import argparse, os, time, torch
from torch.utils.data import DataLoader, Dataset
p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=15)
p.add_argument("--lr", type=float, default=0.01)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--manual", action="store_true")
p.add_argument("--config", default="")
a = p.parse_args()
held = b""
if a.config:
    conf = dict(line.split(":") for line in open(a.config).read().splitlines() if ":" in line)
    a.lr = float(conf["lr"])
    # A config may make the run hold more memory (a larger batch or model), touched.
    held = bytearray(int(conf.get("hold_mb", 0)) << 20)
    for i in range(0, len(held), 4096): held[i] = 1
torch.manual_seed(a.seed)
class Squares(Dataset):
    def __len__(self): return 256
    def __getitem__(self, i):
        x = torch.full((64,), float(i))
        for _ in range(40): x = (x * 1.0001).sin()
        return x
model = torch.nn.Linear(64, 1)
opt = torch.optim.SGD(model.parameters(), lr=a.lr)
data = torch.randn(4096, 64)
end, steps = time.monotonic() + float(os.environ.get("TRAIN_SECONDS") or a.seconds), 0
slow = float(os.environ.get("TRAIN_SLOW") or 0)
while time.monotonic() < end:
    batches = (data[i:i + 32] for i in range(0, 4096, 32)) if a.manual else \\
        DataLoader(Squares(), batch_size=16, num_workers=1)
    for x in batches:
        loss = model(x).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step(); steps += 1
        time.sleep(slow)
        if time.monotonic() >= end: break
print(f"trained {steps} steps", flush=True)
"""
# A user's evaluation by hand (no loader, no optimizer, no backward pass): nothing to
# measure, for --seconds (TRAIN_SECONDS wins, as above).
INFER = """\
import argparse, os, time, torch
p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=40)
a = p.parse_args()
model = torch.nn.Linear(64, 1)
end, n = time.monotonic() + float(os.environ.get("TRAIN_SECONDS") or a.seconds), 0
with torch.no_grad():
    while time.monotonic() < end:
        model(torch.randn(32, 64)); n += 1
        time.sleep(0.01)
print(f"inferred {n} batches", flush=True)
"""
HEADER = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --cpus-per-task=2
#SBATCH --mem=3G
#SBATCH --gres=gpu:1
#SBATCH --time=10
#SBATCH --output={out}/{name}-%j.out
#SBATCH --chdir={out}
{extra}
"""
PY = TENANT_PYTHON
# Each style's body; {py} is the venv's interpreter, {dir} the user's folder.
STYLES = {
    "srun": "srun {py} train.py --seconds 22\n",
    "torchrun": "{venv}/bin/torchrun --standalone --nproc_per_node=1 train.py --seconds 22\n",
    "module": "cd {dir}/project\n{py} -m trainpkg.main --seconds 22\n",
    "activated": "source {venv}/bin/activate\nexport OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK\n"
                 "python train.py --seconds 22\n",
    "array": "{py} train.py --seconds 22 --seed $SLURM_ARRAY_TASK_ID\n",
    "two-in-a-row": "{py} train.py --seconds 20\n{py} train.py --seconds 6 --lr 0.1\n",
    "manual": "{py} train.py --seconds 22 --manual\n",
    "configured": "srun {py} train.py --seconds 22 --config cfg.yaml\n",
    # Each step waits 10 ms besides its compute (TRAIN_SLOW, unless its job's environment
    # sets it), so one core trains it as fast as two: decided 1 core, then run slowed
    # (the `slowed` fixture).
    "paced": "TRAIN_SLOW=${{TRAIN_SLOW:-0.01}} {py} train.py --seconds 30 --manual\n",
    "no-python": "sleep 2\necho done\n",
    "opted-out": "{py} train.py --seconds 4\n",
    # Its step on one of the job's two cores, as srun without -c runs where it does not
    # take the job's cores a task: not swept, and told.
    "narrow": "srun -n 1 -c 1 {py} train.py --seconds 12\n",
    # A helper first (ends at once), then a Python that never steps: the job says so in
    # one line and its workload is held (the module's policy waits WAIT_S for a step).
    "forward-only": "{py} -c 'import torch'\n{py} infer.py --seconds 40\n",
}
EXTRA = {"array": "#SBATCH --array=0-1", "opted-out": "#SBATCH --comment=synergy:off"}
PYTHON_STYLES = [s for s in STYLES if s not in ("no-python", "opted-out", "narrow",
                                                 "forward-only")]
# How long the module's policy waits for a first step: the in-run supervisor of a style
# that trains starts at its first batch and sees steps long before; forward-only runs
# 40 s, past it.
WAIT_S = "30"


def write_scripts(folder: Path, tag: str, owner: int) -> dict[str, Path]:
    """Each style's batch script in the user's folder (`owner`'s, where Slurm writes the
    jobs' logs as that user), with train.py beside them."""
    (folder / "train.py").write_text(TRAIN)
    (folder / "infer.py").write_text(INFER)
    pkg = folder / "project" / "trainpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "main.py").write_text(TRAIN)
    (folder / "cfg.yaml").write_text("lr: 0.01\n")
    scripts = {}
    for style, body in STYLES.items():
        path = folder / f"{style}.sh"
        path.write_text(HEADER.format(name=f"plain{tag}-{style}", out=folder,
                                      extra=EXTRA.get(style, "")) +
                        body.format(py=PY, venv=VENV, dir=folder))
        scripts[style] = path
    gid = pwd.getpwuid(owner).pw_gid
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, owner, gid)
        # Written well before their jobs, as users' files are: a file written as a run
        # starts is its output, not its program (probe/cmdfiles.py).
        os.utime(path, (time.time() - 600,) * 2)
    return scripts


def submit_all(tenants, who, folder: Path, scripts: dict[str, Path],
               env: dict[str, str]) -> dict[str, str]:
    ids = {}
    for style, path in scripts.items():
        ran = tenants.run(who, ["sbatch", "--parsable", str(path)], env=env)
        assert ran.returncode == 0, ran.stderr
        ids[style] = ran.stdout.strip().split(";")[0]
    return ids


def accounted(slurm, ids: dict[str, str]) -> dict[str, list[dict[str, str]]]:
    """Each style's sacct records (an array's tasks each), once accounting has their
    sizes (a record read right at the end can show ReqMem "16?")."""
    deadline = time.monotonic() + 30
    while True:
        rows = slurm.sacct(list(ids.values()), ACCT)
        by_style = {s: [r for r in rows if r["JobID"].split("_")[0] == j]
                    for s, j in ids.items()}
        if all(re.fullmatch(r"\d+(\.\d+)?[MG]", r["ReqMem"]) for r in rows) or \
                time.monotonic() > deadline:
            return by_style
        time.sleep(1)


def key_of(record: dict[str, str]) -> str:
    m = re.match(r"synergy:fp=([0-9a-f]{16}) plain=1", record["Comment"])
    assert m, record
    return m.group(1)


def mem_mb(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([MG])", text)
    assert m, text
    return int(float(m.group(1)) * (1024 if m.group(2) == "G" else 1))


@dataclass(frozen=True)
class Rounds:
    folder: Path                            # the user's scripts and the jobs' logs
    site: Path                              # the site's profile store
    policy: Path                            # the site's policy (root's copy of hers)
    env: dict[str, str]                     # what her submissions run with
    alice: Tenant
    one: dict[str, list[dict[str, str]]]    # each style's sacct records, first round
    two: dict[str, list[dict[str, str]]]    # ... second round
    table: dict                             # the decision table after the site's sync
    synced: str                             # what the sync said


def site_sync(site: Path, policy: Path) -> str:
    """The site's cron: root compiles every user's folder of the store `site`, under
    `policy`, for the partition the jobs ran in; what it said."""
    synced = synergy("plugin", "sync", "--partition", MULTI_PARTITION,
                     env={"SYNERGY_PROFILES": str(site), "SYNERGY_POLICY": str(policy)})
    assert synced.returncode == 0, synced.stderr
    return synced.stdout


@pytest.fixture(scope="module")
def rounds(box, slurm, tenants, tmp_path_factory) -> Iterator[Rounds]:
    """Every style submitted once, the site's sync, then every style again."""
    tag = f"{time.time_ns() % 10**6:06d}"
    site = tenants.shared / f"plain-profiles-{tag}"
    site.mkdir()
    site.chmod(0o1777)
    alice = tenants.alice
    folder = tenants.shared / f"alice-plain-{tag}"
    folder.mkdir()
    scripts = write_scripts(folder, tag, alice.uid)
    # This module checks that each style is measured and right-sized, not its figures
    # (flow_policy). Every round runs on every node (sbatch's own SBATCH_PARTITION, part
    # of each key), side by side on the machine's shared cores, and the site's sync sizes
    # the decisions for that partition (the shim leaves jobs of any other alone).
    policy = folder / "policy.toml"
    policy.write_text(flow_policy(first_batch_timeout_s=WAIT_S))
    policy.chmod(0o644)
    # Root's sync reads a policy where root alone can write (it refuses hers).
    site_policy = tmp_path_factory.mktemp("plain-site") / "policy.toml"
    site_policy.write_text(policy.read_text())
    env = {"SYNERGY_PROFILES": str(site), "SYNERGY_POLICY": str(policy),
           "SBATCH_PARTITION": MULTI_PARTITION}
    first = submit_all(tenants, alice, folder, scripts, env)
    finish(slurm, first.values(), timeout=1200)
    one = accounted(slurm, first)
    synced = site_sync(site, site_policy)
    table = read(box.etc / TABLE_NAME)[1]
    # Decided already, not measured again: trained for a few seconds only (the script and
    # its arguments, which make the key, are the first round's).
    second = submit_all(tenants, alice, folder, scripts, {**env, "TRAIN_SECONDS": "4"})
    finish(slurm, second.values(), timeout=1200)
    two = accounted(slurm, second)
    yield Rounds(folder, site, site_policy, env, alice, one, two, table, synced)
    assert synergy("plugin", "sync").returncode == 0     # the session's table back


def log_of(folder: Path, record: dict[str, str]) -> str:
    path = folder / f"{record['JobName']}-{record['JobIDRaw']}.out"
    return path.read_text() if path.exists() else f"(no log at {path})"


def test_every_job_completes_and_trains_to_its_end(rounds):
    folder, one, two = rounds.folder, rounds.one, rounds.two
    for round_ in (one, two):
        for style, recs in round_.items():
            assert recs, style
            for r in recs:
                assert r["State"] == "COMPLETED" and r["ExitCode"] == "0:0", \
                    (style, r, log_of(folder, r)[-3000:])
                assert r["Partition"] == MULTI_PARTITION, r
            if style in PYTHON_STYLES:
                assert all("trained" in log_of(folder, r) for r in recs), style
    assert all(len(r["array"]) == 2 for r in (one, two))


def test_the_first_job_of_each_python_style_is_measured_in_its_run(rounds):
    folder, site, alice, one = rounds.folder, rounds.site, rounds.alice, rounds.one
    store = ProfileStore.named(site / str(alice.uid))
    for style in PYTHON_STYLES:
        rec = one[style][0]
        fp = key_of(rec)
        assert rec["AdminComment"] == f"synergy:fp={fp}", rec
        assert store.has(fp), (style, log_of(folder, rec)[-3000:])
        saved = (site / str(alice.uid) / f"{fp}.json").lstat()
        assert saved.st_uid == alice.uid and stat.S_IMODE(saved.st_mode) == 0o600
        profile = store.load(fp)
        assert profile.model.basis == "in-run" and len(profile.train_points()) >= 1, style


def test_what_a_run_records_is_its_users_alone(rounds, tenants):
    """The supervisor's record of each run holds its command line (tokens, keys, paths):
    its folder and file are alice's alone, and bob cannot read them."""
    home = tenants.shared / rounds.alice.name        # her SYNERGY_HOME
    probes = sorted(home.glob("clusters/*/runs/*/probe*.json"))
    assert probes, f"no run recorded under {home}"
    for path in probes:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700, path.parent
        assert path.stat().st_uid == rounds.alice.uid
    peek = tenants.run(tenants.bob, ["cat", str(probes[0])])
    assert peek.returncode != 0 and "Permission denied" in peek.stderr, peek


def test_the_second_job_starts_right_sized(rounds):
    alice, one, two, table = rounds.alice, rounds.one, rounds.two, rounds.table
    for style in PYTHON_STYLES:
        fp = key_of(one[style][0])
        assert key_of(two[style][0]) == fp, f"{style}: the same script, another key"
        assert (alice.uid, fp) in table, f"{style}: no decision for {fp}: {rounds.synced}"
        d = table[(alice.uid, fp)]
        for rec in two[style]:
            assert "decision=" in rec["Comment"] and "asked=c2,m3072,g1" in rec["Comment"]
            assert int(rec["AllocCPUS"]) == d.cpus and mem_mb(rec["ReqMem"]) == d.mem_mb, \
                (style, rec, d)
    assert any(mem_mb(r["ReqMem"]) != 3072 for s in PYTHON_STYLES for r in two[s]), \
        "no decision changed what the jobs asked"


def test_a_step_on_fewer_cores_than_its_job_is_told_in_the_jobs_log(rounds):
    rec = rounds.one["narrow"][0]
    log = log_of(rounds.folder, rec)
    assert "trained" in log and "this step runs on 1 of the job's 2 cores here" in log, log
    assert "no sweep, no profile" in log, log


def test_a_job_without_python_and_an_opted_out_job_are_left_as_asked(rounds):
    site, alice, one, two = rounds.site, rounds.alice, rounds.one, rounds.two
    for rec in one["no-python"] + two["no-python"]:
        assert int(rec["AllocCPUS"]) == 2 and mem_mb(rec["ReqMem"]) == 3072
        assert "decision=" not in rec["Comment"]
    assert not ProfileStore.named(site / str(alice.uid)).has(key_of(one["no-python"][0]))
    for rec in one["opted-out"] + two["opted-out"]:
        assert rec["Comment"] == "synergy:off" and rec["AdminComment"] == "", rec
        assert int(rec["AllocCPUS"]) == 2 and mem_mb(rec["ReqMem"]) == 3072


def test_a_python_that_never_steps_says_so_once_and_its_workload_is_held(rounds, tenants):
    alice, first, second = rounds.alice, rounds.one["forward-only"][0], \
        rounds.two["forward-only"][0]
    fp = key_of(first)
    log = log_of(rounds.folder, first)
    # One line, from infer.py's tree; the helper before it, gone at once, says nothing.
    said = [line for line in log.splitlines() if line.startswith("inrun:")]
    assert len(said) == 1 and re.match(
        r"inrun: no training step seen in \d+s of \S+ infer\.py --seconds 40 \(no batch "
        r"from a data loader, no optimizer step, no backward pass\); no profile; its next "
        r"jobs are not marked for measuring for 7 days", said[0]), log
    assert "inferred" in log and first["State"] == "COMPLETED"
    store = ProfileStore.named(rounds.site / str(alice.uid))
    assert store.is_held(fp) and not store.has(fp)
    assert isinstance(rounds.table[(alice.uid, fp)], Held), rounds.synced
    # Its next job is not marked for measuring, and keeps what it asked.
    assert key_of(second) == fp and "profile=1" not in second["Comment"], second
    assert int(second["AllocCPUS"]) == 2 and mem_mb(second["ReqMem"]) == 3072
    listed = tenants.synergy(alice, "profiles", env=rounds.env)
    assert listed.returncode == 0, listed.stderr
    assert f"  {fp}  job {first['JobIDRaw']} at " in listed.stdout and \
        "no training step seen in" in listed.stdout, listed.stdout


def test_the_report_shows_plain_jobs_under_their_key_with_what_their_runs_measured(rounds,
                                                                                    tenants):
    alice, one = rounds.alice, rounds.one
    ids = [r["JobIDRaw"] for s in PYTHON_STYLES for r in one[s]]
    ran = tenants.synergy(alice, "report", "--jobs", ",".join(ids), "--format", "json")
    assert ran.returncode == 0, ran.stderr
    jobs = {j["raw_id"]: j for j in json.loads(ran.stdout)["jobs"]}
    for style in PYTHON_STYLES:
        for rec in one[style]:
            job = jobs[rec["JobIDRaw"]]
            assert job["fingerprint"] == key_of(rec), (style, job)
            assert job["samples_per_s"] and job["samples_per_s"] > 0, (style, job)
            assert job["data_wait_share"] is not None, (style, job)


@dataclass(frozen=True)
class Edited:
    three: list[dict[str, str]]     # the configured style, its config edited since round two
    four: list[dict[str, str]]      # ... submitted held beside it, released after the sync
    table: dict                     # the decision table between the two


@pytest.fixture(scope="module")
def edited(rounds, box, slurm, tenants) -> Edited:
    """The configured style's config file edited under the same batch script, then two
    jobs of it submitted: both are decided at submission (their key is the same); the
    first runs, reads the new config and drops the decision, which sends the second, still
    pending (held), back to what it asked, marked to be measured; after the site's sync it
    is released and measured."""
    folder, alice = rounds.folder, rounds.alice
    cfg = folder / "cfg.yaml"
    cfg.write_text("lr: 0.05\n")
    os.utime(cfg, (time.time() - 300,) * 2)
    script = {"configured": folder / "configured.sh"}
    env = rounds.env
    third = submit_all(tenants, alice, folder, script, env)
    held = tenants.run(alice, ["sbatch", "--parsable", "--hold", str(script["configured"])],
                       env=env)
    assert held.returncode == 0, held.stderr
    fourth = {"configured": held.stdout.strip()}
    finish(slurm, third.values(), timeout=600)
    three = accounted(slurm, third)["configured"]
    site_sync(rounds.site, rounds.policy)
    table = read(box.etc / TABLE_NAME)[1]
    released = tenants.run(alice, ["scontrol", "release", fourth["configured"]])
    assert released.returncode == 0, released.stderr
    finish(slurm, fourth.values(), timeout=600)
    return Edited(three, accounted(slurm, fourth)["configured"], table)


def test_a_config_edited_under_the_same_script_drops_the_decision_until_measured(
        rounds, edited):
    folder, alice = rounds.folder, rounds.alice
    fp = key_of(rounds.one["configured"][0])
    (three,), (four,) = edited.three, edited.four
    assert key_of(three) == key_of(four) == fp, "the same batch script, the same key"
    # Decided at submission, as the key's decision stood; its run read another config.
    assert "decision=" in three["Comment"] and three["State"] == "COMPLETED", three
    log = log_of(folder, three)
    assert re.search(rf"inrun: {fp}: job {three['JobIDRaw']} reads \S*cfg\.yaml other "
                     r"than its profile's run \(job \d+\) did: its memory and cores were "
                     r"decided for what that run read; the decision is dropped", log), \
        log[-3000:]
    assert (alice.uid, fp) not in edited.table, "the site's sync dropped it"
    # Decided at submission too, then sent back while it waited: asked for as written,
    # marked, and measured again; the new profile reads the new config.
    assert re.search(rf"job {four['JobIDRaw']} asks again for what it was submitted with "
                     r"\(c2,m3072,g1\); its run is measured", log), log[-3000:]
    assert "decision=" not in four["Comment"] and "profile=1" in four["Comment"], four
    assert int(four["AllocCPUS"]) == 2 and mem_mb(four["ReqMem"]) == 3072, four
    profile = ProfileStore.named(rounds.site / str(alice.uid)).load(fp)
    assert profile.allocation.job_id == four["JobIDRaw"], log_of(folder, four)[-3000:]
    assert any(f.path == str(folder / "cfg.yaml") for f in profile.command_files), profile


# A config of the grown workload: the trainer holds this many MB more than it did when
# measured, within the 3G the script asks, past what was decided from that run.
GROWN_MB = 1200
# A script that asks less than its config needs: it runs out of memory at its own size.
OWN_SIZE = "{py} train.py --seconds 6 --config big.yaml\n"


@dataclass(frozen=True)
class Grown:
    fp: str
    decided: object                          # the table's decision from the measured run
    failed: dict[str, str]                   # the grown job's run that ran out of memory
    rescued: dict[str, str]                  # ... the same job put back with what it asked
    runs: list[dict[str, str]]               # ... both, as sacct --duplicates shows them
    own: list[dict[str, str]]                # a job that ran out at its own size, all runs
    timer: str                               # what root's timer said
    then: object                             # her job that waited for it (afterok)
    between: dict                            # the table after the rescued run
    synced: str                              # ... and what the site's sync said
    after: dict[str, str]                    # the workload's next job
    table: dict                              # the table after that job's run


def all_runs(slurm, job: str) -> list[dict[str, str]]:
    """Every record of a job, a requeued one's earlier runs first (sacct --duplicates)."""
    out = slurm.run(["sacct", "--duplicates", "--allocations", "--parsable2", "--noheader",
                     "--jobs", job, "--format=JobIDRaw,State,ReqMem,AllocCPUS"])
    return [dict(zip(("JobIDRaw", "State", "ReqMem", "AllocCPUS"), line.split("|")))
            for line in out.splitlines()]


@pytest.fixture(scope="module")
def grown(rounds, box, slurm, tenants, tmp_path_factory) -> Grown:
    """A plain script measured and decided; its config then edited to hold GROWN_MB more,
    and the script submitted again beside one that asks less than its config needs; root's
    timer (one round, as cron runs it); then the workload's next job."""
    folder, alice, env = rounds.folder, rounds.alice, rounds.env
    tag = f"{time.time_ns() % 10**6:06d}"
    cfg, big = folder / "grow.yaml", folder / "big.yaml"
    cfg.write_text("lr: 0.01\n")
    big.write_text(f"lr: 0.01\nhold_mb: {GROWN_MB}\n")
    scripts = {}
    for name, body in (("grows", "{py} train.py --seconds 22 --config grow.yaml\n"),
                       ("own-size", OWN_SIZE)):
        path = folder / f"{name}.sh"
        path.write_text(HEADER.format(name=f"plain{tag}-{name}", out=folder, extra="")
                        + body.format(py=PY))
        scripts[name] = path
    gid = pwd.getpwuid(alice.uid).pw_gid
    for path in (cfg, big, *scripts.values()):
        os.chown(path, alice.uid, gid)
        os.utime(path, (time.time() - 600,) * 2)
    first = submit_all(tenants, alice, folder, {"grows": scripts["grows"]}, env)
    finish(slurm, first.values(), timeout=600)
    fp = key_of(accounted(slurm, first)["grows"][0])
    site_sync(rounds.site, rounds.policy)
    decided = read(box.etc / TABLE_NAME)[1].get((alice.uid, fp))
    # The user edits the config (well before the job, as users do) and submits again.
    cfg.write_text(f"lr: 0.01\nhold_mb: {GROWN_MB}\n")
    os.utime(cfg, (time.time() - 300,) * 2)
    again = submit_all(tenants, alice, folder, {"grows": scripts["grows"]},
                       {**env, "TRAIN_SECONDS": "6"})
    job = again["grows"]
    own = tenants.run(alice, ["sbatch", "--parsable", "--mem=700M", str(scripts["own-size"])],
                      env=env)
    assert own.returncode == 0, own.stderr
    own_id = own.stdout.strip()
    # Her next step waits for it (afterok): the out-of-memory end fails that dependency.
    then = tenants.run(alice, ["sbatch", "--parsable", f"--dependency=afterok:{job}",
                               "--mem=100M", f"--output={folder}/then-%j.out",
                               "--wrap", "echo after"], env=env)
    assert then.returncode == 0, then.stderr
    finish(slurm, [job, own_id], timeout=600)
    failed = accounted(slurm, again)["grows"][0]
    state = tmp_path_factory.mktemp("rescue") / "time-limits.json"
    timer = synergy("plugin", "timelimits", "--state", str(state),
                    env={"SYNERGY_POLICY": str(rounds.policy)})
    assert timer.returncode == 0, timer.stderr
    # Put back: pending, then run again with what it asked, to its end.
    deadline = time.monotonic() + 300
    while not ((runs := all_runs(slurm, job)) and len(runs) >= 2
               and runs[-1]["State"].startswith(FINAL_STATES)):
        assert time.monotonic() < deadline, (timer.stdout, runs)
        time.sleep(2)
    rescued = accounted(slurm, again)["grows"][0]
    after_it = finish(slurm, [then.stdout.strip()], timeout=300)[then.stdout.strip()]
    synced = site_sync(rounds.site, rounds.policy)
    between = read(box.etc / TABLE_NAME)[1]
    after = submit_all(tenants, alice, folder, {"grows": scripts["grows"]}, env)
    finish(slurm, after.values(), timeout=600)
    site_sync(rounds.site, rounds.policy)
    return Grown(fp, decided, failed, rescued, runs, all_runs(slurm, own_id), timer.stdout,
                 after_it, between, synced, accounted(slurm, after)["grows"][0],
                 read(box.etc / TABLE_NAME)[1])


def test_a_job_whose_config_grew_past_its_decision_is_put_back_and_completes(rounds, grown):
    d, failed, rescued = grown.decided, grown.failed, grown.rescued
    assert d is not None and d.mem_mb < 1024 + GROWN_MB, d     # the bet the product made
    assert failed["State"] in ("OUT_OF_MEMORY", "FAILED") and \
        mem_mb(failed["ReqMem"]) == d.mem_mb, (failed, log_of(rounds.folder, failed)[-2000:])
    job = failed["JobIDRaw"]
    assert f"put back with what they asked: job(s) {job}" in grown.timer, grown.timer
    # The same job, run again with what its script asked, to its end; sacct keeps both runs.
    assert rescued["JobIDRaw"] == job and rescued["State"] == "COMPLETED", \
        (rescued, log_of(rounds.folder, rescued)[-2000:])
    assert mem_mb(rescued["ReqMem"]) == 3072 and int(rescued["AllocCPUS"]) == 2, rescued
    assert len(grown.runs) == 2 and grown.runs[0]["State"] in ("REQUEUED", "OUT_OF_MEMORY"), \
        grown.runs
    assert re.search(r" rescued=oom@\d+s", rescued["Comment"]), rescued
    assert re.search(r" rescued=oom@\d+s$", rescued["AdminComment"]), rescued
    assert "trained" in log_of(rounds.folder, rescued)
    # Her job that depended on it waited for the run put back, and ran after it.
    assert f"their dependents wait for them again: job(s) {grown.then.job_id}" in grown.timer
    assert grown.then.state == "COMPLETED", grown.then


def test_the_rescued_workload_is_measured_again_before_it_is_right_sized_again(rounds, grown):
    alice = rounds.alice
    assert (alice.uid, grown.fp) not in grown.between, grown.synced
    after = grown.after
    # Its next job asks what its script asks, is measured, and completes.
    assert after["State"] == "COMPLETED" and "decision=" not in after["Comment"] and \
        "profile=1" in after["Comment"], after
    assert mem_mb(after["ReqMem"]) == 3072, after
    # The decision from that run fits what the grown config holds.
    d = grown.table.get((alice.uid, grown.fp))
    assert d is not None and GROWN_MB < d.mem_mb <= 3072, (d, log_of(rounds.folder, after)[-2000:])


def test_a_job_out_of_memory_at_its_own_size_is_not_put_back_and_says_why(rounds, grown,
                                                                          tenants):
    (own,) = grown.own
    assert own["State"] == "OUT_OF_MEMORY" and own["ReqMem"] == "700M", grown.own
    ran = tenants.synergy(rounds.alice, "report", "--jobs", own["JobIDRaw"], "--format", "json")
    assert ran.returncode == 0, ran.stderr
    advice = [a["advice"] for a in json.loads(ran.stdout)["advice"]]
    assert any("the size it asked (not put back: the plugin did not lower it)" in line
               for line in advice), advice


# A script whose steps wait on something besides its cores (TRAIN_SLOW in its
# environment: I/O, a remote service), so its measured run is decided one of its 2 cores;
# run again with each step waiting ten times longer, as on a busier node.
@dataclass(frozen=True)
class Slowed:
    fp: str
    decided: object                          # the table's decision it ran at
    job: dict[str, str]                      # its slowed run
    table: dict                              # the table after the site's sync


@pytest.fixture(scope="module")
def slowed(rounds, box, slurm, tenants) -> Slowed:
    """The paced script, measured and decided 1 core in the first rounds, run again
    slowed for 45 s (pace.py judges six spans of WATCH_RECORD_S past the first); then the
    site's sync."""
    folder, alice = rounds.folder, rounds.alice
    first = rounds.one["paced"][0]
    fp = key_of(first)
    decided = rounds.table.get((alice.uid, fp))
    assert decided is not None and decided.cpus == 1, (decided, log_of(folder, first)[-3000:])
    ids = submit_all(tenants, alice, folder, {"paced": folder / "paced.sh"},
                     {**rounds.env, "TRAIN_SECONDS": "45", "TRAIN_SLOW": "0.1"})
    finish(slurm, ids.values(), timeout=600)
    job = accounted(slurm, ids)["paced"][0]
    site_sync(rounds.site, rounds.policy)
    return Slowed(fp, decided, job, read(box.etc / TABLE_NAME)[1])


def test_a_right_sized_job_slower_than_predicted_sends_later_jobs_to_more_cores(rounds,
                                                                                slowed):
    job, fp, alice = slowed.job, slowed.fp, rounds.alice
    log = log_of(rounds.folder, job)
    assert job["State"] == "COMPLETED" and int(job["AllocCPUS"]) == 1, (job, log[-2000:])
    assert re.search(rf"inrun: {fp}: job {job['JobIDRaw']} trained at [\d.]+ (?:samples|steps)/s "
                     r"\(±\d+% over its run\) on its decided 1 core\(s\), where its decision "
                     r"predicted [\d.]+: slower by more than their noise", log), log[-3000:]
    profile = ProfileStore.named(rounds.site / str(alice.uid)).load(fp)
    (slow,) = [r for r in profile.slowed if r.job_id == job["JobIDRaw"]]
    assert slow.cores == 1 and slow.factor < 0.5, slow
    assert f" pace={round(100 * slow.factor)}" in job["Comment"], job
    # Its workload's later jobs get the cores they ask.
    d = slowed.table.get((alice.uid, fp))
    assert d is not None and d.cpus == 2, (d, log[-2000:])
