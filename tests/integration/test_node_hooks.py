"""The node prolog and epilog inside the real slurmd.

On this machine there is no GPU, so the hooks run on the none backend and say so. The
power-cap paths run inside slurmd too: for those tests the wrappers also put a stand-in
pynvml (tests/fakes/nvml) on the path, so slurmd's prolog and epilog drive GPUs through
the package's NVML backend, and a GPU that will not obey drains the node for real.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from slurm_synergy import paths

from .conftest import (EXPECTED_DRAINS, cluster_up, epilogs_done, executable, fake_gpus,
                       finish, gpu, synergy)

def report(*job_ids: str) -> dict[str, dict]:
    proc = synergy("report", "--jobs", ",".join(job_ids), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return {r["job_id"]: r for r in json.loads(proc.stdout)["jobs"]}


def test_without_gpus_the_hooks_say_so_and_the_report_shows_why(box, slurm, tmp_path):
    gpu_job = slurm.sbatch(executable(tmp_path / "g.sh", "#!/bin/sh\nsleep 1\n"),
                           ["--gres=gpu:2", "--output=/dev/null",
                            "--comment=fp=0123456789abcdef decision=c1,m512,g2,w0,p200"])
    cpu_job = slurm.sbatch(tmp_path / "g.sh", ["--output=/dev/null"])
    finish(slurm, [gpu_job, cpu_job])
    log = epilogs_done(box, gpu_job, cpu_job)
    assert f"prolog job={gpu_job} no GPUs on this node" in log
    assert f"epilog job={gpu_job} no GPUs on this node" in log
    assert f"epilog job={cpu_job} no GPUs allocated to this job" in log
    rows = report(gpu_job, cpu_job)
    assert rows[gpu_job]["gpus"] == 2 and rows[gpu_job]["gpu_energy_j"] is None
    assert rows[gpu_job]["gpu_note"].startswith("no GPUs on this node")
    assert rows[cpu_job]["gpus"] == 0 and rows[cpu_job]["gpu_note"] == ""


def test_an_ordinary_users_short_job_gets_its_exact_peak_from_its_cgroup(box, slurm, tenants):
    """A job of a second holding 600 MB: sacct (sampling every 5 s here) never reads it;
    the sampler the prolog started followed the job's cgroup, under its user's uid, until
    Slurm removed it, and the report shows that peak."""
    script = executable(tenants.shared / f"short-{os.urandom(3).hex()}.sh",
                        "#!/bin/sh\n/usr/bin/python3 -c 'import time; b = b\"\\x01\" * "
                        "(600 << 20); time.sleep(1)'\n")
    ran = tenants.run(tenants.alice, ["sbatch", "--parsable", "--mem=1G", "--output=/dev/null",
                                      str(script)])
    assert ran.returncode == 0, ran.stderr
    job = ran.stdout.strip().split(";")[0]
    finish(slurm, [job])
    log = epilogs_done(box, job)
    assert re.search(rf"prolog job={job} sampler started \(pid \d+: the job's cgroup\)", log)
    row = report(job)[job]
    assert row["user"] == tenants.alice.name and row["usage_from"] == "cgroup", row
    # The bytes it wrote, and the interpreter and its shell beside them.
    assert 600 <= row["max_rss_mb"] <= 660 and row["mem_note"] == "", row
    assert row["mem_eff"] == pytest.approx(row["max_rss_mb"] / 1024)


def test_a_decided_jobs_tasks_get_its_workers_from_its_comment(box, slurm, tenants):
    """The one route of a decision's loader workers: the prolog reads the job's comment
    and the TaskProlog exports them to the batch script and to every srun task, whatever
    the environment the job was submitted with said; the epilog removes the file."""
    script = executable(tenants.shared / f"workers-{os.urandom(3).hex()}.sh",
                        "#!/bin/sh\necho \"batch ${SYNERGY_WORKERS:-none}\"\n"
                        "srun sh -c 'echo \"step ${SYNERGY_WORKERS:-none}\"'\n")
    outs, jobs = {}, {}
    for name, comment in (("decided", "decision=c1,m256,g0,w3"), ("none", "")):
        outs[name] = script.with_suffix(f".{name}.out")
        ran = tenants.run(tenants.alice, ["sbatch", "--parsable", "--mem=256M",
                                          f"--output={outs[name]}",
                                          *([f"--comment={comment}"] if comment else []),
                                          str(script)], env={"SYNERGY_WORKERS": "7"})
        assert ran.returncode == 0, ran.stderr
        jobs[name] = ran.stdout.strip().split(";")[0]
    finish(slurm, jobs.values())
    log = epilogs_done(box, *jobs.values())
    assert f"prolog job={jobs['decided']} tasks get SYNERGY_WORKERS=3" in log
    assert outs["decided"].read_text().split("\n")[:2] == ["batch 3", "step 3"]
    assert outs["none"].read_text().split("\n")[:2] == ["batch none", "step none"]
    tasks = box.hook_paths.run_dir / "tasks"
    deadline = time.monotonic() + 10
    while (tasks / jobs["decided"]).exists():
        assert time.monotonic() < deadline, "the epilog left the job's file"
        time.sleep(0.2)


def test_the_epilog_removes_records_past_the_sites_keep(box, slurm, tmp_path):
    """A record older than stats_keep_days (365, as etc/policy.toml ships it) is removed by
    the first epilog past the folder's day; a recent one stays. Ids no job here reaches."""
    stats = paths.cluster_folder(box.hook_paths.stats_dir, slurm.cluster_name())
    old, recent = stats / "900000001.node1.json", stats / "900000002.node1.json"
    for path, age_days in ((old, 800), (recent, 10)):
        path.write_text("{}")
        os.utime(path, (time.time() - age_days * 86400,) * 2)
    (stats / ".pruned").unlink(missing_ok=True)     # earlier tests' epilogs took today's
    try:
        job = slurm.sbatch(executable(tmp_path / "t.sh", "#!/bin/sh\ntrue\n"),
                           ["--output=/dev/null"])
        finish(slurm, [job])
        epilogs_done(box, job)
        deadline = time.monotonic() + 60
        while not re.search(rf"epilog job={job} stats folder {stats}: \d+ records older "
                            "than 365 days removed", (box.state / "log" / "hooks.log").read_text()):
            assert time.monotonic() < deadline, "no epilog pruned the stats folder"
            time.sleep(0.3)
        assert not old.exists() and recent.exists()
    finally:
        old.unlink(missing_ok=True)
        recent.unlink(missing_ok=True)


# The job reads its GPU's limit while it runs (proof the prolog came first), then "uses"
# 900 J by advancing the stand-in's energy counter.
JOB = """#!/usr/bin/env python3
import json, os, time
path = os.environ["STATE"]
mine = os.environ["SLURM_JOB_GPUS"].split(",")
gpus = [g for g in json.load(open(path))["gpus"] if str(g["minor"]) in mine]
print("limits", [g["limit_mw"] for g in gpus], flush=True)
time.sleep(3)
for minor in mine:
    used = path + f".energy{minor}"
    before = int(open(used).read()) if os.path.exists(used) else 0
    with open(used, "w") as fh:
        fh.write(str(before + 900_000))
time.sleep(float(os.environ.get("LINGER", "0")))
"""


def test_power_limits_and_energy_through_slurmd(box, slurm, tmp_path):
    script = executable(tmp_path / "job.py", JOB)
    with fake_gpus(box, tmp_path, [gpu(m) for m in range(4)]) as state:
        env = f"--export=ALL,STATE={state}"
        decided = slurm.sbatch(script, ["--gres=gpu:1", env, f"--output={tmp_path}/a.out",
                                        "--comment=fp=0123456789abcdef "
                                        "decision=c1,m512,g1,w0,p200"])
        plain = slurm.sbatch(script, ["--gres=gpu:1", env, f"--output={tmp_path}/b.out"])
        killed = slurm.sbatch(script, ["--gres=gpu:1", f"{env},LINGER=60",
                                       f"--output={tmp_path}/c.out",
                                       "--comment=decision=c1,m512,g1,w0,p150"])
        deadline = time.monotonic() + 120
        while "limits" not in _text(tmp_path / "c.out") and time.monotonic() < deadline:
            time.sleep(0.5)
        slurm.run(["scancel", "--signal=KILL", "--full", killed])
        recs = finish(slurm, [decided, plain, killed])
        log = epilogs_done(box, decided, plain, killed)
        limits = [g["limit_mw"] for g in json.loads(state.read_text())["gpus"]]
    assert recs[decided].state == "COMPLETED" and recs[plain].state == "COMPLETED"
    assert recs[killed].state.startswith(("CANCELLED", "FAILED")), recs[killed].state
    assert _text(tmp_path / "a.out").startswith("limits [200000]")   # the decision, applied
    assert _text(tmp_path / "b.out").startswith("limits [300000]")   # no decision: ceiling
    assert _text(tmp_path / "c.out").startswith("limits [150000]")
    assert limits == [300_000] * 4                # every GPU back to the ceiling
    rows = report(decided, plain, killed)
    assert rows[decided]["gpu_energy_j"] == pytest.approx(900.0)
    assert rows[decided]["gpu_power_limit_w"] == 200
    assert rows[decided]["gpu_util_pct"] == 60 and rows[decided]["gpu_mem_peak_mb"] == 5000
    assert rows[plain]["gpu_power_limit_w"] == 300
    # Killed before it used any: the counter says 0 J, which is a measurement, not a gap.
    assert rows[killed]["gpu_power_limit_w"] == 150 and rows[killed]["gpu_energy_j"] == 0
    assert f"prolog job={decided} gpu GPU-" in log and "-> 200 W (decision 200 W" in log
    assert f"epilog job={killed} gpu GPU-" in log


def test_an_epilog_that_cannot_enforce_the_cap_drains_the_node(box, slurm, tmp_path):
    """The one case the epilog fails: a GPU above the cap that refuses to come down."""
    stuck = [gpu(0, limit_mw=400_000, refuse=True)] + [gpu(m) for m in (1, 2, 3)]
    job = ""
    try:
        with fake_gpus(box, tmp_path, stuck):
            job = slurm.sbatch(executable(tmp_path / "s.sh", "#!/bin/sh\ntrue\n"),
                               ["--gres=gpu:1", "--output=/dev/null"])
            EXPECTED_DRAINS.add(job)
            finish(slurm, [job])
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not _drained(slurm):
                time.sleep(0.5)
        assert _drained(slurm)
        reason = " ".join(n.reason for n in slurm.nodes("") if "drain" in n.state)
        assert "epilog" in reason.lower(), reason
        assert f"epilog job={job} exit 1: node will drain" in \
            (box.state / "log" / "hooks.log").read_text()
        # Drained on purpose: `cluster up` neither resumes it nor hides it, and status
        # tells slurmd (running) apart from the node (out of service, and why).
        up = cluster_up()
        assert up.returncode == 0, up.stderr
        assert "stays so: jobs will not start on it until you resume it" in up.stdout
        assert "starting slurmd" not in up.stdout
        assert _drained(slurm)
        status = synergy("cluster", "status")
        assert status.returncode == 0, status.stdout
        assert re.search(r"^slurmd@node1\s+up\s", status.stdout, re.M), status.stdout
        assert re.search(r"^node \S+: drain\w* \(.*[Ee]pilog", status.stdout, re.M), status.stdout
    finally:
        for n in slurm.nodes(""):
            if "drain" in n.state:
                slurm.run(["scontrol", "update", f"nodename={n.name}", "state=resume"])
        # Resumed is not yet usable: the node re-registers first (not responding, "idle*"),
        # and a job submitted in between is refused. The next tests need it usable.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _usable(slurm):
            time.sleep(0.5)
    assert _usable(slurm), slurm.nodes("")


def _usable(slurm) -> bool:
    return all(n.state in ("idle", "mixed", "allocated") for n in slurm.nodes(""))


def _drained(slurm) -> bool:
    return any("drain" in n.state for n in slurm.nodes(""))


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""
