"""The default flow on the real local cluster, under the shim: the first job of a new
workload is measured while it trains, to its end; its decision right-sizes the same
user's pending jobs of the workload in place (scontrol update: same job ids, so their
dependencies hold); nothing is resubmitted, nothing trains twice."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest

from slurm_synergy.submission.csvjobs import load_jobs
from slurm_synergy.decisions.table import TABLE_NAME, entries_of, read

from tests.helpers import flow_policy

from .conftest import finish, submitted_ids, synergy

ROWS = 8
FIRST_ITERATIONS = 110          # long enough for the sweep's seven windows of 1 s
LATER_ITERATIONS = 24
ACCT = ("JobID", "JobName", "State", "Start", "End", "AllocCPUS", "ReqMem", "Comment")


def mem_mb(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([MG])", text)
    assert m, text
    return int(float(m.group(1)) * (1024 if m.group(2) == "G" else 1))


def trained(out: Path, name: str) -> int:
    """Iterations a row's job trained, from the trainer's own per-iteration record."""
    lines = (out / name / "iterations.csv").read_text().splitlines()
    return len(lines) - 1


@pytest.fixture(scope="module")
def sweep(slurm, box, tmp_path_factory, request):
    """An 8-row sweep of a workload nobody has measured (a Transformer on a data set of
    its own size), and a plain job that runs only after row 1 succeeded. The module
    checks the flow, not the figures (flow_policy); the policy reaches the jobs and
    `explain` through the module's environment."""
    out = tmp_path_factory.mktemp("sweep")
    policy = out / "policy.toml"
    policy.write_text(flow_policy())
    os.environ["SYNERGY_POLICY"] = str(policy)
    # Names of this run's own: sacct keeps earlier runs' jobs (another clone's test run
    # an hour ago has a sweep0 folder too).
    tag = uuid.uuid4().hex[:8]
    names = [f"sweep{tag}-{i}" for i in range(1, ROWS + 1)]
    csv = out / "sweep.csv"
    csv.write_text("name,arch,batch,workers,gpus,cpus,mem,time,iterations,args\n" + "".join(
        f"{n},transformer,32,1,1,2,3G,00:20:00,"
        f"{FIRST_ITERATIONS if i == 0 else LATER_ITERATIONS},"
        f"--dataset-size 1536 --lr 0.0{i + 1}\n" for i, n in enumerate(names)))
    ids = submitted_ids(synergy("submit", str(csv), "--out", str(out)))
    dependent = slurm.run(["sbatch", "--parsable", f"--dependency=afterok:{ids[names[0]]}",
                           "--cpus-per-task=1", "--mem=100M", f"--output={out}/dep-%j.out",
                           "--wrap", "true"]).strip()
    recs = finish(slurm, [*ids.values(), dependent], timeout=1500)
    acct = {r["JobID"]: r for r in slurm.sacct([*ids.values(), dependent], ACCT)}
    fp = load_jobs(csv)[0].fingerprint
    yield out, names, ids, recs, acct, dependent, fp
    del os.environ["SYNERGY_POLICY"]


def test_every_row_is_one_job_that_trains_in_full(slurm, sweep):
    out, names, ids, recs, acct, _, _ = sweep
    known = slurm.run(["sacct", "--noheader", "--parsable2", "-X", "--format=JobName",
                       "--starttime=now-2hours"]).split()
    assert sorted(n for n in known if n in names) == sorted(names), "exactly one job a row"
    assert all(recs[ids[n]].state == "COMPLETED" for n in names), \
        {n: recs[ids[n]].state for n in names}
    assert trained(out, names[0]) == FIRST_ITERATIONS, "the measured job trained to its end"
    for n in names[1:]:
        assert trained(out, n) == LATER_ITERATIONS


def test_the_first_job_is_measured_and_the_pending_ones_right_sized_in_place(box, sweep):
    out, names, ids, _, acct, _, fp = sweep
    first = ids[names[0]]
    assert "measured=run" in acct[first]["Comment"]
    assert int(acct[first]["AllocCPUS"]) == 2, "it trained at the size it asked for"
    d = entries_of(read(box.etc / TABLE_NAME)[1])[fp]
    log = next((out / "logs").glob(f"{names[0]}-{first}.out")).read_text()
    assert f"inrun: measuring {fp}" in log and "right-sized in place:" in log
    sized = [n for n in names[1:] if f"by={first}" in acct[ids[n]]["Comment"]]
    # node1's two cores ran row 1 alone: every later row was pending when it decided.
    assert sized == names[1:]
    for n in sized:
        row = acct[ids[n]]
        assert int(row["AllocCPUS"]) == d.cpus and mem_mb(row["ReqMem"]) == d.mem_mb
        assert f"asked=c2,m3072,g1 decision=c{d.cpus},m{d.mem_mb},g{d.gpus},w{d.workers}" \
            in row["Comment"]
        assert "profile=1" not in row["Comment"]
        # Its workers came from the comment, through the prolog and the TaskProlog: the
        # job's environment was fixed before there was a decision.
        log = (out / "logs" / f"{n}-{ids[n]}.out").read_text()
        assert f"workers={d.workers} (decided)" in log and "trains as decided" in log


def test_a_dependent_of_row_one_starts_only_after_row_one_trained(sweep):
    _, names, ids, recs, acct, dependent, _ = sweep
    assert recs[dependent].state == "COMPLETED"
    assert acct[dependent]["Start"] >= acct[ids[names[0]]]["End"]


def test_explain_names_the_run_that_measured_it(sweep):
    _, names, ids, _, _, _, fp = sweep
    proc = synergy("plugin", "explain", fp)
    assert proc.returncode == 0, proc.stderr
    assert f"measured in job {ids[names[0]]}" in proc.stdout
    assert "model fitted to in-run" in proc.stdout
    assert re.search(rf"cost: measured while job {ids[names[0]]} trained: \d+ s of training "
                     r"at fewer cores; no second queue wait", proc.stdout), proc.stdout
