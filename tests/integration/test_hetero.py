"""A job over two GPU types from the job list: a real Slurm heterogeneous job on the
local cluster, one component per type, each with the planner's share and power limit
in its tasks' environment, its comment and sacct."""

import json

from slurm_synergy.model.comment import decision, marks

from .conftest import ROOT, epilogs_done, finish, submitted_ids, synergy

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
