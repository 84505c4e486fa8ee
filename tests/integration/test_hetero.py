"""A job over two GPU types from the job list: a real Slurm heterogeneous job on the
local cluster, one component per type, each with the planner's share and power limit
in its tasks' environment, its comment and sacct."""

import json
import re

from slurm_synergy.model.comment import decision, marks

from .conftest import ROOT, epilogs_done, fake_gpus, finish, gpu, submitted_ids, synergy

ZEUS2 = ROOT / "data" / "zeus2"


def test_a_two_type_row_runs_as_a_heterogeneous_job(box, slurm, tmp_path, tag):
    csv = tmp_path / "het.csv"
    csv.write_text(
        "name,arch,depth,batch,workers,cpus,mem,time,iterations,partition,hetero,args\n"
        f"het-{tag},resnet,8,1024,1,1,3G,00:10:00,5,multi,"
        f"local4g:1={ZEUS2 / 'cifar_a10.json'} local1g:1={ZEUS2 / 'cifar_t4.json'},"
        "--image-size 64 --crop 32 --dataset-size 2048\n")
    proc = synergy("submit", str(csv), "--out", str(tmp_path / "out"))
    job = submitted_ids(proc)[f"het-{tag}"]
    recs = finish(slurm, [job])
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
        het = marks(comment)["het"].split(",")
        assert het[0] == str(offset)
        shares[gpu_type] = int(het[1][1:])
    assert sum(shares.values()) == 1024 and shares["local4g"] > shares["local1g"]
    # One step over both components: two ranks, each with its share in its environment.
    log = next((tmp_path / "out" / "logs").glob(f"het-{tag}-*.out")).read_text()
    lines = [line for line in log.splitlines() if line.startswith("slurm-synergy: component")]
    assert len(lines) == 2, log
    for gpu_type, limit in (("local4g", 150), ("local1g", 70)):
        line = next(x for x in lines if f"{gpu_type} GPU(s)" in x)
        assert f"batch {shares[gpu_type]} = {shares[gpu_type]} x 1" in line, line
        assert f"power limit {limit} W" in line and "of 2," in line, line
    assert sorted(x.split("rank ")[1].split()[0] for x in lines) == ["0", "1"], lines
    # Each trained on its own share (the built-in trainer, one process per component).
    for gpu_type, batch in shares.items():
        summary = json.loads((tmp_path / "out" / f"het-{tag}" / gpu_type /
                              "summary.json").read_text())
        assert summary["batch"] == batch, summary
    # The node hooks ran for each component, a job of its own to them.
    raw = slurm.run(["sacct", "-j", job, "--allocations", "--noheader", "--parsable2",
                     "--format=JobIDRaw"]).split()
    assert len(raw) == 2, raw
    hooks = epilogs_done(box, *raw)
    assert all(f"prolog job={j} " in hooks for j in raw), raw


def test_each_component_runs_at_its_own_power_limit(box, slurm, tmp_path, tag):
    """With the stand-in NVML under slurmd's hooks, each component's prolog sets its own
    GPUs to its planned limit (held within the device's range) and the epilogs put them
    back to the ceiling."""
    csv = tmp_path / "het.csv"
    csv.write_text(
        "name,arch,depth,batch,workers,cpus,mem,time,iterations,partition,hetero,args\n"
        f"hetp-{tag},resnet,8,1024,1,1,3G,00:10:00,5,multi,"
        f"local4g:1={ZEUS2 / 'cifar_a10.json'} local1g:1={ZEUS2 / 'cifar_t4.json'},"
        "--image-size 64 --crop 32 --dataset-size 2048\n")
    with fake_gpus(box, tmp_path, [gpu(m) for m in range(4)]) as state:
        job = submitted_ids(synergy("submit", str(csv), "--out",
                                    str(tmp_path / "out")))[f"hetp-{tag}"]
        recs = finish(slurm, [job])
        raw = slurm.run(["sacct", "-j", job, "--allocations", "--noheader", "--parsable2",
                         "--format=JobIDRaw"]).split()
        hooks = epilogs_done(box, *raw)
        limits = [g["limit_mw"] for g in json.loads(state.read_text())["gpus"]]
    assert all(r.state == "COMPLETED" for r in recs.values()), recs
    first, second = raw
    # (The stand-in's GPUs go by minor number, which nodes repeat: the limit a prolog
    # finds may be the other component's.)
    assert re.search(rf"prolog job={first} gpu GPU-\S+ limit \d+ W -> 150 W \(decision 150 W",
                     hooks), hooks
    # The T4's trace plans 70 W; the stand-in goes no lower than 100 W.
    assert re.search(rf"prolog job={second} gpu GPU-\S+ limit \d+ W -> 100 W \(decision 70 W "
                     r"is below the device's minimum", hooks), hooks
    assert limits == [300_000] * 4                # every GPU back to the ceiling


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
