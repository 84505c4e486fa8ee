"""The gres rewrite by GPU memory on the real cluster: the local node's two file-backed
GPU types (local1g and local4g, 1 and 4 GiB in the catalog). A job asking the small type
with a step estimated not to fit it runs no step there (on a real GPU it would run out of
memory): it moves to the type that holds it and is profiled there, and its later jobs are
rewritten to that type and complete; one that fits stays; a hostile or missing catalog
changes nothing and rejects nothing."""

import json

import pytest

from slurm_synergy import paths
from slurm_synergy.submission.csvjobs import load_jobs
from slurm_synergy.model import comment as comment_format
from slurm_synergy.profiles import ProfileStore
from slurm_synergy.decisions.table import entries_of, read, table_path

from slurm_synergy.chains import read_chains
from slurm_synergy.slurm import Slurm

from .conftest import finish, resubmitted, submitted_ids, synergy

FIELDS = ("JobID", "JobName", "State", "AllocTRES", "Comment")


@pytest.fixture(scope="module")
def fitted(slurm, tmp_path_factory):
    out = tmp_path_factory.mktemp("fit")
    csv = out / "jobs.csv"
    # mobilenet at its default 64 px crop and batch 32 needs about 600 MiB a step: more
    # than local1g holds with the CUDA context (1024 MiB), well under local4g's 4096.
    # resnet8 at batch 16 needs a few tens of MiB. The session's shared dataset settings.
    csv.write_text("name,arch,depth,batch,workers,gpus,gpu_type,cpus,mem,time,iterations\n"
                   "fit-big,mobilenet,,32,1,1,local1g,2,3G,00:15:00,2\n"
                   "fit-small,resnet,8,16,1,1,local1g,2,3G,00:15:00,2\n")
    ids = submitted_ids(synergy("submit", str(csv), "--out", str(out), "--profile",
                                  "--on-profiled", "resubmit"))
    first = finish(slurm, ids.values(), timeout=900)
    # fit-big moves to local4g unprofiled, is profiled there, and resubmits itself again.
    moved = resubmitted(ids["fit-big"])
    first.update(finish(slurm, [moved], timeout=900))
    again = {"fit-big": resubmitted(moved), "fit-small": resubmitted(ids["fit-small"])}
    recs = finish(slurm, again.values(), timeout=900)
    specs = {s.name: s for s in load_jobs(csv)}
    chain = {"first": first[ids["fit-big"]], "moved": first[moved]}
    return csv, out, specs, {name: recs[job] for name, job in again.items()}, chain


def alloc_tres(slurm, job: str) -> str:
    (row,) = slurm.sacct([job], FIELDS)
    return row["AllocTRES"]


def test_a_job_too_big_for_its_gpu_type_moves_to_one_that_holds_it(slurm, fitted):
    _, out, specs, recs, chain = fitted
    big, small = recs["fit-big"], recs["fit-small"]
    assert big.state == "COMPLETED" and small.state == "COMPLETED"
    assert "gres/gpu:local4g=1" in alloc_tres(slurm, big.job_id)
    assert "gres/gpu:local1g=1" in alloc_tres(slurm, small.job_id)
    # The first job ran no step on local1g: it moved, and the move was profiled.
    first, moved = chain["first"], chain["moved"]
    assert first.state == moved.state == "COMPLETED"
    assert "gres/gpu:local1g=1" in alloc_tres(slurm, first.job_id)
    assert "gres/gpu:local4g=1" in alloc_tres(slurm, moved.job_id)
    log = (out / "logs" / f"fit-big-{first.job_id}.out").read_text()
    assert "no step run on local1g" in log and "step 1:" not in log, log
    assert f"resubmitted as job {moved.job_id} (moved from local1g to local4g)" in log
    (link,) = [c for c in read_chains(Slurm().cluster_name()) if c.profiled_job == first.job_id]
    assert link.decision == "moved from local1g to local4g"
    marks = comment_format.marks(moved.comment)
    assert marks.get("profile") == "1" and marks.get("from") == first.job_id
    assert "offline_profiler: step 1:" in \
        (out / "logs" / f"fit-big-{moved.job_id}.out").read_text()
    # The comment says what it asked and what it was given, types included.
    assert comment_format.asked(big.comment).gpu_type == "local1g"
    assert comment_format.decision(big.comment).gpu_type == "local4g"
    # The profile holds the estimate, at the batch and around it.
    mem = ProfileStore.default().load(specs["fit-big"].fingerprint).gpu_memory
    assert mem is not None and mem.method and [p.batch for p in mem.peaks] == [16, 32, 64]
    assert 465 < mem.at(32) < 3258      # over what local1g holds, under local4g
    why = synergy("plugin", "explain", specs["fit-big"].fingerprint)
    assert why.returncode == 0, why.stderr
    assert "local1g (1024 MiB) would not hold it" in why.stdout
    assert "jobs of this workload ask for local4g" in why.stdout


def test_the_report_shows_gpu_memory_asked_estimated_and_the_type(slurm, fitted):
    _, _, _, recs, chain = fitted
    big, first = recs["fit-big"], chain["first"]
    proc = synergy("report", "--jobs", f"{first.job_id},{big.job_id}", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    jobs = {j["raw_id"]: j for j in json.loads(proc.stdout)["jobs"]}
    asked, final = jobs[first.job_id], jobs[big.job_id]
    assert (asked["asked_gpu_type"], asked["gpu_type"]) == ("local1g", "local1g")
    assert asked["gpu_mem_asked_mib"] == 1024 and 465 < asked["gpu_mem_est_mib"] < 3258
    assert (final["decided_gpu_type"], final["gpu_type"]) == ("local4g", "local4g")
    assert final["gpu_mem_asked_mib"] == 1024     # the script asks local1g; the shim moves it


@pytest.mark.parametrize("catalog", ["hostile", "missing"])
def test_a_bad_catalog_changes_nothing_and_rejects_nothing(slurm, fitted, tmp_path,
                                                          monkeypatch, catalog):
    csv, out, specs, _, _ = fitted
    good = (paths.ETC / "policy.toml").read_text()
    policy = tmp_path / "policy.toml"
    if catalog == "hostile":
        policy.write_text(good.replace("[gpu.local4g]\nmemory_mib = 4096",
                                       "[gpu.local4g]\nmemory_mib = 'all of it'"))
    else:
        policy.write_text(good.split("\n[gpu.")[0] + "\n")
    monkeypatch.setenv("SYNERGY_POLICY", str(policy))
    try:
        sync = synergy("plugin", "sync")
        assert sync.returncode == 0, sync.stderr
        entries = entries_of(read(table_path())[1])
        big = entries[specs["fit-big"].fingerprint]
        assert big.gpu_type == ""       # no move: the job keeps what it asked
        one = tmp_path / "one.csv"
        one.write_text("\n".join(csv.read_text().splitlines()[:2]) + "\n")
        job = submitted_ids(synergy("submit", str(one), "--out", str(out), "--force"))["fit-big"]
        rec = finish(slurm, [job], timeout=600)[job]
        assert rec.state == "COMPLETED"
        assert "gres/gpu:local1g=1" in alloc_tres(slurm, job)
        why = synergy("plugin", "explain", specs["fit-big"].fingerprint).stdout
        assert ("the GPU catalog is not used" if catalog == "hostile" else
                "has no GPU catalog") in why
    finally:
        monkeypatch.delenv("SYNERGY_POLICY")
        assert synergy("plugin", "sync").returncode == 0
