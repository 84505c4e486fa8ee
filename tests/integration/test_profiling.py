"""Profiling inside real Slurm allocations: srun steps confined by Slurm's cgroups, the
profile store, and the bad cases (a crash mid-sweep, a hang, an allocation too small)."""

import json
import subprocess
import sys
import textwrap

import pytest

from slurm_synergy.submission.csvjobs import load_jobs
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.chains import read_chains

from .conftest import ROOT, executable, finish, resubmitted, submitted_ids, synergy

PROFILER = ROOT / "profiler" / "offline_profiler.py"
STEP_FIELDS = ("JobID", "JobName", "State", "AllocCPUS", "ExitCode")


def store() -> ProfileStore:
    return ProfileStore.default()


@pytest.fixture(scope="module")
def profiled(slurm, tmp_path_factory):
    """One built-in workload submitted with --profile: profiled in its job, then trained."""
    out = tmp_path_factory.mktemp("profiled")
    csv = out / "jobs.csv"
    # The session's shared generated dataset, as every other test job reads it: other
    # generation settings would make those jobs refuse the folder.
    csv.write_text("name,arch,depth,batch,workers,cpus,mem,time,iterations\n"
                   "prof-resnet8,resnet,8,16,1,2,3G,00:10:00,4\n")
    ids = submitted_ids(synergy("submit", str(csv), "--out", str(out), "--profile",
                                  "--on-profiled", "resubmit"))
    job = ids["prof-resnet8"]
    recs = finish(slurm, [job], timeout=900)
    spec = load_jobs(csv)[0]
    # After profiling, the job submitted itself again and ended; that job trains.
    again = resubmitted(job)
    recs.update(finish(slurm, [again], timeout=900))
    return job, recs[job], spec, out, recs[again]


def test_profiling_prolog_stores_a_profile_measured_in_srun_steps(slurm, profiled):
    job, rec, spec, out, _ = profiled
    assert rec.state == "COMPLETED"
    profile = store().load(spec.fingerprint)
    assert profile.allocation.launcher == "srun" and profile.allocation.job_id == job
    assert profile.allocation.cores == 2 and profile.job_name == "prof-resnet8"
    assert [(p.measure, p.cores) for p in profile.points] == [
        ("train", 2), ("train", 1), ("loader", 2), ("compute", 1), ("loader", 1),
        ("shared", 1)]
    assert profile.model.shared_core_s is not None and profile.model.shared_core_s > 0
    assert all(p.samples_per_s > 0 and p.peak_rss_mb > 0 for p in profile.points)
    assert profile.model.basis == "components" and len(profile.model.held_out) == 2
    assert profile.model.fetch is not None and profile.model.fetch.dataset_mb > 0
    assert not profile.gpu.available and profile.gpu.reason
    # One srun step, the warm interpreter, held the allocation's cores for every step;
    # accounting says so.
    steps = [r for r in slurm.sacct([job], STEP_FIELDS, allocations_only=False)
             if r["JobName"] == f"profile-{spec.fingerprint}"]
    assert [(s["AllocCPUS"], s["State"]) for s in steps] == [("2", "COMPLETED")]
    # Each step's script ran on the cores asked for: the sweep, the two components, the
    # one-core pair (the input-only step alone, then beside the compute-only step, each
    # half in a folder of its own), then the sweep's counts again in the same order;
    # each count's first run started anew, the rest were forks.
    # A first run that measured under a second runs again, a fork, for its rate.
    log = next((out / "logs").glob(f"*-{job}.out")).read_text()
    again = int("its rate is a second run's" in log)
    folders = sorted((out / spec.name / "profile").glob("step*"))
    runs_of = [[f] if (f / "probe.json").exists() else [f / "compute", f / "loader"]
               for f in folders]
    cpus = [[json.loads((r / "probe.json").read_text())["processes"][0]["cpus"] for r in rs]
            for rs in runs_of]
    assert cpus[:8 + again] == [[2]] * (1 + again) + [[1], [2], [1], [1], [1, 1], [2], [1]]
    assert [int(f.name.split("-")[-1].rstrip("c")) for f in folders] == [c[0] for c in cpus]
    heads = [(r / "step.log").read_text().splitlines()[0] for rs in runs_of for r in rs]
    anew = (0, 1 + again)
    assert all("started anew from the warm interpreter" in heads[i] for i in anew)
    assert all("a fork of the warm interpreter" in h for i, h in enumerate(heads)
               if i not in anew)
    # Each count ran twice at least; each component once, or twice where the budget
    # allowed; only the runs started anew gave the memory.
    runs = [len(p.repeats) for p in profile.train_points()]
    components = [len(p.repeats) for p in profile.points[2:4]]
    assert min(runs) >= 2 and set(components) <= {0, 2}
    assert len(folders) == sum(max(1, n) for n in components) + 2 + sum(runs) + again
    assert all(not p.forked and len(p.peaks_mb) == 1 for p in profile.train_points())
    # The resubmitted job then trained.
    assert (out / spec.name / "summary.json").exists()


def test_the_profiled_job_resubmits_itself_never_to_be_profiled_again(slurm, profiled):
    job, _, spec, out, again = profiled
    assert again.state == "COMPLETED"
    assert f"synergy:fp={spec.fingerprint}" in again.comment and f"from={job}" in again.comment
    log = next((out / "logs").glob(f"*-{again.job_id}.out")).read_text()
    assert "offline_profiler" not in log and "workers=" in log


def test_a_profiled_workload_is_not_profiled_again(slurm, profiled, tmp_path):
    _, _, spec, out, _ = profiled
    before = store().path(spec.fingerprint).stat().st_mtime_ns
    ids = submitted_ids(synergy("submit", str(out / "jobs.csv"), "--out", str(tmp_path),
                                "--profile", "--force",
                                "--on-profiled", "resubmit"))
    job = ids["prof-resnet8"]
    assert finish(slurm, [job])[job].state == "COMPLETED"
    log = next((tmp_path / "logs").glob(f"*-{job}.out")).read_text()
    assert "already profiled" in log
    # Nothing was measured, and the shim sized the job by the decision at submission: it
    # trains in place rather than wait in the queue again at the same size.
    assert "not resubmitted: the job runs as decided already" in log, log
    assert "profiled in job" not in log
    assert not [c for c in read_chains(slurm.cluster_name()) if c.profiled_job == job]
    assert (tmp_path / spec.name / "summary.json").exists()
    assert store().path(spec.fingerprint).stat().st_mtime_ns == before


def test_the_profiles_command_shows_the_table(profiled):
    _, _, spec, _, _ = profiled
    proc = synergy("profiles", spec.fingerprint)
    assert proc.returncode == 0 and "prof-resnet8" in proc.stdout and "2c:" in proc.stdout


BAD_SCRIPT = textwrap.dedent("""\
    import os, sys, time
    if os.environ.get("MODE") == "hang":
        time.sleep(3600)
    if len(os.sched_getaffinity(0)) == 1:
        sys.exit("loader crashed: cannot allocate memory")
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    for epoch in range(100):
        for batch in DataLoader(TensorDataset(torch.zeros(64, 2)), batch_size=4):
            pass
    """)


@pytest.fixture(scope="module")
def bad_jobs(slurm, tmp_path_factory):
    """Three profiling jobs that must fail cleanly, run at once."""
    out = tmp_path_factory.mktemp("bad-profiles")
    script = out / "bad_train.py"
    script.write_text(BAD_SCRIPT)
    cases = {"crash": ("2", "", []), "hang": ("2", "hang", ["--step-timeout", "8"]),
             "small": ("1", "", [])}
    ids = {}
    for n, (name, (cpus, mode, extra)) in enumerate(cases.items()):
        fp = f"{n + 1:016x}"
        job = executable(out / f"{name}.sh", textwrap.dedent(f"""\
            #!/bin/bash
            #SBATCH --job-name=bad-{name}
            #SBATCH --cpus-per-task={cpus}
            #SBATCH --mem=1G
            #SBATCH --time=00:05:00
            #SBATCH --output={out}/{name}.out
            export MODE={mode}
            cd {out}
            exec {sys.executable} {PROFILER} --fingerprint {fp} {' '.join(extra)} {script}
            """))
        ids[name] = (slurm.sbatch(job), fp)
    recs = finish(slurm, [j for j, _ in ids.values()], timeout=300)
    return {name: (recs[job], fp, (out / f"{name}.out").read_text(), job)
            for name, (job, fp) in ids.items()}


@pytest.mark.parametrize("name,exit_code,words", [
    ("crash", "1:0", ["training 1-core step measured nothing",
                      "bad_train.py exited with status 1 before its first batch",
                      "loader crashed: cannot allocate memory", "nothing was stored"]),
    ("hang", "1:0", ["past its 8s limit", "--max-iterations", "nothing was stored"]),
    ("small", "2:0", ["the allocation has 1 core(s); a CPU sweep needs at least 2"]),
])
def test_failed_profiling_exits_non_zero_and_stores_nothing(bad_jobs, name, exit_code, words):
    rec, fp, log, _ = bad_jobs[name]
    assert rec.state == "FAILED" and rec.exit_code == exit_code, log
    for word in words:
        assert word in log
    assert not store().has(fp)
    assert not any(store().root.glob(f"{fp}*.json"))


def test_a_hung_step_is_stopped_not_left_running(slurm, bad_jobs):
    _, fp, _, job = bad_jobs["hang"]
    steps = [r for r in slurm.sacct([job], STEP_FIELDS, allocations_only=False)
             if r["JobName"] == f"profile-{fp}"]
    assert steps and all(s["State"] != "RUNNING" for s in steps)
    assert subprocess.run(["pgrep", "-f", "bad_train[.]py"]).returncode == 1
