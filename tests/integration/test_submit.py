"""CSV job lists through the real `synergy submit` into the real cluster and back from sacct."""

import json
import re
from datetime import datetime
from itertools import takewhile

import pytest

from slurm_synergy.cluster.localbox import MULTI_PARTITION
from slurm_synergy.model.comment import decision
from slurm_synergy.model.units import mem_mb
from slurm_synergy.submission.csvjobs import load_jobs

from .conftest import ROOT, executable, finish, job_names_in_queue, submitted_ids, synergy

TORCHLOADER = ROOT / "jobs_csv"
TIMES = ("JobID", "JobName", "Partition", "State", "Submit", "Eligible", "Start", "End", "AllocTRES",
         "Comment")


def when(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.fixture(scope="module")
def torchloader_runs(slurm, tmp_path_factory):
    """All four torchloader README job lists, submitted unchanged at once, run to the end.
    Their user picks the partition of every node with sbatch's own SBATCH_PARTITION (no
    row names one): twelve unprofiled jobs need not queue on the default partition's one
    node."""
    out = tmp_path_factory.mktemp("torchloader")
    runs = {}
    for name, extra in (("sequential", ["--sequential"]), ("simultaneous", []),
                        ("intervals", []), ("multi_device", [])):
        csv = TORCHLOADER / f"torchloader_{name}.csv"
        ids = submitted_ids(synergy("submit", "--no-profile", str(csv), "--out", str(out / name),
                                    *extra, env={"SBATCH_PARTITION": MULTI_PARTITION}))
        runs[name] = (csv, out / name, list(ids.values()))
    every = [i for _, _, ids in runs.values() for i in ids]
    finish(slurm, every, timeout=1200)
    acct = {r["JobID"]: r for r in slurm.sacct(every, TIMES)}
    assert {r["Partition"] for r in acct.values()} == {MULTI_PARTITION}
    return {name: (csv, folder, [acct[i] for i in ids]) for name, (csv, folder, ids) in runs.items()}


@pytest.mark.parametrize("name", ["sequential", "simultaneous", "intervals", "multi_device"])
def test_torchloader_csvs_run_unchanged_and_really_train(torchloader_runs, name):
    csv, folder, rows = torchloader_runs[name]
    assert [r["State"] for r in rows] == ["COMPLETED"] * 3
    for spec, row in zip(load_jobs(csv), rows):
        # The row's comment, and the sbatch call's tag that the ledger finds it by.
        assert re.fullmatch(re.escape(spec.comment) + r" sub=[0-9a-f]{12}", row["Comment"])
        summary = json.loads((folder / "single_1workers_1device" / spec.name / "summary.json")
                             .read_text())
        assert summary["arch"] == "resnet" and summary["depth"] == spec.depth
        assert summary["batch"] == 128 and summary["samples_per_s"] > 0


def test_sequential_rows_run_one_after_another(torchloader_runs):
    rows = torchloader_runs["sequential"][2]
    for before, after in zip(rows, rows[1:]):
        assert when(after["Start"]) >= when(before["End"])


def test_intervals_delay_each_row_after_the_one_before(torchloader_runs):
    rows = torchloader_runs["intervals"][2]
    # submit_interval 10, 20, 30: eligible 10, 30 and 60 s after submission.
    for row, offset in zip(rows, (10, 30, 60)):
        delay = (when(row["Eligible"]) - when(row["Submit"])).total_seconds()
        assert offset - 2 <= delay <= offset + 5, (row, delay)


def test_cuda_device_lists_become_gpu_counts(torchloader_runs):
    rows = torchloader_runs["multi_device"][2]
    assert all("gres/gpu=2" in r["AllocTRES"] for r in rows)


MALFORMED = {
    "missing_column": ("arch,depth,workers\nresnet,12,1\n", "missing required column 'batch'"),
    "non_integer_batch": ("name,arch,batch\nbad-batch-TAG1,resnet,12\nbad-batch-TAG2,resnet,x\n",
                          "row 2 (line 3), column batch: 'x' is not an integer"),
    "unknown_column": ("name,arch,batch,gpu\nbad-col-TAG1,resnet,8,1\n",
                       "unknown column 'gpu'; did you mean 'gpus'?"),
    "empty": ("", "the file is empty"),
    "wrong_delimiter": ("name;arch;batch\nbad-delim-TAG1;resnet;8\n", "separated by semicolons"),
    "duplicate_names": ("name,arch,batch\nbad-dup-TAG1,resnet,8\nbad-dup-TAG1,resnet,16\n",
                        "'bad-dup-TAG1' is already the name of row 1"),
    "metacharacters": ("name,arch,batch\nbad-meta-TAG1,resnet,8\n\"bad; touch /tmp/x\",resnet,8\n",
                       "column name: 'bad; touch /tmp/x' is not a job name"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_csv_exits_nonzero_and_queues_nothing(slurm, tmp_path, case, tag):
    text, message = (part.replace("-TAG", f"-{tag}") for part in MALFORMED[case])
    csv = tmp_path / f"{case}.csv"
    csv.write_text(text)
    proc = synergy("submit", "--no-profile", str(csv), "--out", str(tmp_path / "out"))
    assert proc.returncode != 0
    assert message in proc.stderr and str(csv) in proc.stderr
    assert "nothing submitted" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert job_names_in_queue(slurm, [f"bad-{p}-{tag}{i}" for p in ("batch", "col", "delim", "dup",
                                                                      "meta") for i in (1, 2)]) == []


def test_row_slurm_would_refuse_stops_the_whole_list(slurm, tmp_path, tag):
    csv = tmp_path / "refused.csv"
    csv.write_text(f"name,arch,batch,iterations,gpu_type\nrefused-ok-{tag},resnet,8,1,\n"
                   f"refused-bad-{tag},resnet,8,1,nosuchgpu\n")
    proc = synergy("submit", "--no-profile", str(csv), "--out", str(tmp_path / "out"))
    assert proc.returncode != 0
    assert "refused.csv row 2 (line 3): Slurm would refuse the job" in proc.stderr
    assert "Requested node configuration is not available" in proc.stderr
    assert "nothing was submitted" in proc.stderr
    assert job_names_in_queue(slurm, [f"refused-ok-{tag}", f"refused-bad-{tag}"]) == []


def test_resubmitting_the_same_file_does_not_duplicate(slurm, tmp_path, tag):
    script = executable(tmp_path / "true.sh", "#!/bin/sh\nexit 0\n")
    csv = tmp_path / "twice.csv"
    csv.write_text(f"name,script,cpus,gpus,mem\ntwice-{tag},{script},1,0,50M\n")
    first = submitted_ids(synergy("submit", "--no-profile", str(csv), "--out", str(tmp_path / "o")))
    again = synergy("submit", "--no-profile", str(csv), "--out", str(tmp_path / "o"))
    assert again.returncode == 0 and again.stdout == ""
    assert f"as job {first[f'twice-{tag}']}" in again.stderr
    forced = submitted_ids(synergy("submit", "--no-profile", str(csv), "--out", str(tmp_path / "o"),
                                   "--force"))
    assert forced[f"twice-{tag}"] != first[f"twice-{tag}"]
    recs = finish(slurm, [first[f"twice-{tag}"], forced[f"twice-{tag}"]])
    assert {r.state for r in recs.values()} == {"COMPLETED"}


def test_identical_rows_go_in_as_one_array(slurm, tmp_path):
    script = executable(tmp_path / "seed.sh",
                        "#!/bin/bash\necho \"seed ${@: -1} task $SLURM_ARRAY_TASK_ID\"\n")
    csv = tmp_path / "sweep.csv"
    csv.write_text("name,script,cpus,gpus,mem,args\n"
                   # The same arguments: a user's script with other arguments is another
                   # workload (its fingerprint is its content and arguments).
                   + "".join(f"sweep-{i},{script},1,0,50M,--seed 7\n" for i in range(5)))
    ids = submitted_ids(synergy("submit", "--no-profile", str(csv), "--out", str(tmp_path / "o"), "--arrays"))
    (array_id,) = {i.split("_")[0] for i in ids.values()}
    assert sorted(ids.values()) == [f"{array_id}_{i}" for i in range(5)]
    recs = finish(slurm, list(ids.values()))
    assert {r.state for r in recs.values()} == {"COMPLETED"}
    logs = sorted((tmp_path / "o" / "logs").glob("*.out"))
    assert len(logs) == 5
    assert {log.read_text().splitlines()[-1] for log in logs} == {
        f"seed 7 task {i}" for i in range(5)}


def test_dry_run_writes_scripts_and_submits_nothing(slurm, tmp_path, tag):
    csv = tmp_path / "dry.csv"
    csv.write_text(f"name,arch,batch\ndry-{tag},resnet,8\n")
    proc = synergy("submit", "--no-profile", str(csv), "--out", str(tmp_path / "o"), "--dry-run")
    assert proc.returncode == 0
    assert (tmp_path / "o" / "scripts" / f"dry-{tag}.sbatch").exists()
    assert job_names_in_queue(slurm, [f"dry-{tag}"]) == []


def test_demo_ends_with_every_job_completed_and_right_sized(demo):
    lines = demo.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("JobID"))
    rows = list(takewhile(lambda line: line[:1].isdigit(), lines[header + 2:]))
    specs = load_jobs(ROOT / "jobs_csv" / "rightsize.csv")
    assert len(rows) == len(specs), demo.stdout      # nothing resubmitted: one job a row
    assert all(" COMPLETED " in row for row in rows), demo.stdout
    # Each workload's second job ran with a decision, first time or not: right-sized in
    # place while it waited, or by the shim at submission.
    for fp in {s.fingerprint for s in specs}:
        second = [s.name for s in specs if s.fingerprint == fp][1]
        assert any(row.split()[1] == second and "decision c" in row for row in rows), \
            demo.stdout


def test_an_ordinary_users_next_job_is_right_sized_with_nobody_running_sync(demo, slurm,
                                                                           tenants):
    """The demo's ordinary user (a tenant here) submits their own batch script with plain
    sbatch, twice: the first is measured while it trains, the cluster's sync timer compiles
    its profile, and the shim right-sizes the second as it is submitted."""
    out = demo.stdout
    assert f"{tenants.alice.name}, an ordinary user, submits" in out, out
    assert "the cluster's sync timer had compiled its decision" in out, out
    part = out.split("submits the same script again:")[1]
    first, second = [line.split()[0] for line in part.splitlines() if line[:1].isdigit()][:2]
    rows = {r["JobIDRaw"]: r for r in slurm.sacct(
        [first, second], ["JobIDRaw", "User", "State", "AllocCPUS", "ReqMem", "Comment"])}
    assert {r["User"] for r in rows.values()} == {tenants.alice.name}
    assert {r["State"] for r in rows.values()} == {"COMPLETED"}
    assert "profile=1" in rows[first]["Comment"] and "measured=run" in rows[first]["Comment"]
    assert (rows[first]["AllocCPUS"], rows[first]["ReqMem"]) == ("2", "3G")
    got = decision(rows[second]["Comment"])
    assert got is not None, rows[second]
    # Rewritten at submission by the shim (not in place by the measuring job: no by=).
    assert "asked=c2,m3072,g1" in rows[second]["Comment"]
    assert "by=" not in rows[second]["Comment"] and "profile=1" not in rows[second]["Comment"]
    assert int(rows[second]["AllocCPUS"]) == got.cpus
    assert mem_mb(rows[second]["ReqMem"]) == got.mem_mb
    assert (got.cpus, got.mem_mb) != (2, 3072)
