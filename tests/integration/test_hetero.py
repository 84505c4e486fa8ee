"""A job over two GPU types from the job list: a real Slurm heterogeneous job on the
local cluster, one component per type, each with the planner's share and power limit
in its tasks' environment, its comment and sacct, and on its GPUs."""

import json
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurm_synergy.model.comment import decision, marks

from .conftest import ROOT, epilogs_done, fake_gpus, finish, gpu, submitted_ids, synergy

ZEUS2 = ROOT / "data" / "zeus2"


@dataclass(frozen=True)
class HetRun:
    name: str
    job: str
    out: Path
    recs: dict           # sacct's record of each component, by its id
    raw: list[str]       # the components' own job ids
    hooks: str           # the node hooks' log of them
    limits: list[int]    # the stand-in's GPUs' limits (mW) once the job ended


@pytest.fixture(scope="module")
def het(box, slurm, tmp_path_factory) -> HetRun:
    """One two-type row, run with the stand-in NVML under slurmd's hooks (the batch
    script plans the same with or without it): what the job says and what its GPUs
    were set to are read from the same run."""
    tmp = tmp_path_factory.mktemp("het")
    name = f"het-{uuid.uuid4().hex[:8]}"
    csv = tmp / "het.csv"
    csv.write_text(
        "name,arch,depth,batch,workers,cpus,mem,time,iterations,partition,hetero,args\n"
        f"{name},resnet,8,1024,1,1,3G,00:10:00,5,multi,"
        f"local4g:1={ZEUS2 / 'cifar_a10.json'} local1g:1={ZEUS2 / 'cifar_t4.json'},"
        "--image-size 64 --crop 32 --dataset-size 2048\n")
    with fake_gpus(box, tmp, [gpu(m) for m in range(4)]) as state:
        job = submitted_ids(synergy("submit", str(csv), "--out", str(tmp / "out")))[name]
        recs = finish(slurm, [job])
        raw = slurm.run(["sacct", "-j", job, "--allocations", "--noheader", "--parsable2",
                         "--format=JobIDRaw"]).split()
        hooks = epilogs_done(box, *raw)
        limits = [g["limit_mw"] for g in json.loads(state.read_text())["gpus"]]
    return HetRun(name, job, tmp / "out", recs, raw, hooks, limits)


def test_a_two_type_row_runs_as_a_heterogeneous_job(slurm, het):
    job, recs = het.job, het.recs
    assert sorted(recs) == [f"{job}+0", f"{job}+1"], recs
    assert all(r.state == "COMPLETED" for r in recs.values()), recs
    # Each component holds its own type and carries the planner's share and limit.
    rows = {r.split("|")[0]: r.split("|")[1:] for r in slurm.run(
        ["sacct", "-j", job, "--allocations", "--noheader", "--parsable2",
         "--format=JobID,AllocTRES,Comment"]).splitlines()}
    shares = {}
    for offset, gpu_type, limit in ((0, "local4g", 150), (1, "local1g", 70)):
        tres, comment = rows[f"{job}+{offset}"]
        assert f"gres/gpu:{gpu_type}=1" in tres, rows
        assert decision(comment).power_w == limit and decision(comment).gpu_type == gpu_type
        het_mark = marks(comment)["het"].split(",")
        assert het_mark[0] == str(offset)
        shares[gpu_type] = int(het_mark[1][1:])
    assert sum(shares.values()) == 1024 and shares["local4g"] > shares["local1g"]
    # One step over both components: two ranks, each with its share in its environment.
    log = next((het.out / "logs").glob(f"{het.name}-*.out")).read_text()
    lines = [line for line in log.splitlines() if line.startswith("slurm-synergy: component")]
    assert len(lines) == 2, log
    for gpu_type, limit in (("local4g", 150), ("local1g", 70)):
        line = next(x for x in lines if f"{gpu_type} GPU(s)" in x)
        assert f"batch {shares[gpu_type]} = {shares[gpu_type]} x 1" in line, line
        assert f"power limit {limit} W" in line and "of 2," in line, line
    assert sorted(x.split("rank ")[1].split()[0] for x in lines) == ["0", "1"], lines
    # Each trained on its own share (the built-in trainer, one process per component).
    for gpu_type, batch in shares.items():
        summary = json.loads((het.out / het.name / gpu_type / "summary.json").read_text())
        assert summary["batch"] == batch, summary
    # The node hooks ran for each component, a job of its own to them.
    assert len(het.raw) == 2, het.raw
    assert all(f"prolog job={j} " in het.hooks for j in het.raw), het.raw


def test_each_component_runs_at_its_own_power_limit(het):
    """With the stand-in NVML under slurmd's hooks, each component's prolog sets its own
    GPUs to its planned limit (held within the device's range) and the epilogs put them
    back to the ceiling."""
    assert all(r.state == "COMPLETED" for r in het.recs.values()), het.recs
    (first, second), hooks = het.raw, het.hooks
    # (The stand-in's GPUs go by minor number, which nodes repeat: the limit a prolog
    # finds may be the other component's.)
    assert re.search(rf"prolog job={first} gpu GPU-\S+ limit \d+ W -> 150 W \(decision 150 W",
                     hooks), hooks
    # The T4's trace plans 70 W; the stand-in goes no lower than 100 W.
    assert re.search(rf"prolog job={second} gpu GPU-\S+ limit \d+ W -> 100 W \(decision 70 W "
                     r"is below the device's minimum", hooks), hooks
    assert het.limits == [300_000] * 4                # every GPU back to the ceiling


def test_a_partition_without_two_nodes_for_the_types_is_refused(box, slurm, tmp_path, tag):
    # The default partition is one node holding both types: Slurm would leave the job
    # pending for ever, since it gives each component nodes of its own.
    csv = tmp_path / "het.csv"
    csv.write_text("name,arch,depth,batch,cpus,mem,iterations,hetero\n"
                   f"hetn-{tag},resnet,8,1024,1,3G,5,"
                   f"local4g:1={ZEUS2 / 'cifar_a10.json'} local1g:1={ZEUS2 / 'cifar_t4.json'}\n")
    proc = synergy("submit", str(csv), "--out", str(tmp_path / "out"))
    assert proc.returncode == 1
    assert "the default partition has no two nodes holding local4g and local1g" in proc.stderr
    assert "nothing was submitted" in proc.stderr
    assert slurm.run(["squeue", "--noheader", f"--name=hetn-{tag}", "--states=all"]).strip() == ""
