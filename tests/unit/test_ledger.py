"""The submission ledger: rows are remembered, edits are new rows, corruption is loud."""

import json
import multiprocessing
from pathlib import Path

import pytest

from slurm_synergy.submission.csvjobs import load_jobs
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.submission.ledger import Ledger


def test_rows_are_remembered_and_edits_are_new(tmp_path):
    csv = tmp_path / "jobs.csv"
    csv.write_text("arch,batch\nresnet,32\nresnet,64\n")
    first, second = load_jobs(csv)
    ledger = Ledger(tmp_path / "ledger.json")
    with ledger.transaction():
        ledger.record(first, "17", tmp_path / "s")
        ledger.save()
    with Ledger(tmp_path / "ledger.json").transaction() as again:
        assert again.get(first).job_id == "17"
        assert again.get(second) is None
    csv.write_text("arch,batch\nresnet,48\nresnet,64\n")
    edited = load_jobs(csv)[0]
    with Ledger(tmp_path / "ledger.json").transaction() as again:
        assert again.get(edited) is None


def test_corrupt_ledger_is_reported(tmp_path):
    path = tmp_path / "ledger.json"
    path.write_text("{not json")
    with pytest.raises(SynergyError, match="ledger .* is corrupt"):
        with Ledger(path).transaction():
            pass


def _add(args):
    path, csv, job = args
    spec = load_jobs(Path(csv))[0]
    ledger = Ledger(Path(path))
    with ledger.transaction():
        ledger.record(spec, job, Path("s"))
        ledger.save()


def test_concurrent_writers_lose_nothing(tmp_path):
    csvs = []
    for i in range(6):
        csv = tmp_path / f"jobs{i}.csv"
        csv.write_text(f"arch,batch\nresnet,{i + 1}\n")
        csvs.append((str(tmp_path / "ledger.json"), str(csv), str(i)))
    with multiprocessing.Pool(3) as pool:
        pool.map(_add, csvs)
    rows = json.loads((tmp_path / "ledger.json").read_text())["rows"]
    assert sorted(e["job_id"] for e in rows.values()) == [str(i) for i in range(6)]


def test_plugin_note_reads_the_marks_in_a_comment():
    from slurm_synergy.jobs import plugin_note

    assert plugin_note("synergy:fp=0123456789abcdef req=cpus") == "-"
    assert plugin_note("synergy:fp=0123456789abcdef profile=1") == "profiling run"
    assert plugin_note("synergy:fp=0123456789abcdef from=12 decision=c1,m512,g1,w1") == \
        "decision c1,m512,g1,w1, resubmitted by 12"


def test_plugin_note_says_a_job_was_put_back_or_what_to_do():
    from slurm_synergy.jobs import plugin_note

    decided = "synergy:fp=0123456789abcdef asked=c2,m3072,g0 decision=c1,m768,g0,w1"
    assert plugin_note(f"{decided} rescued=oom@4s", "COMPLETED") == (
        "out of memory at the decided size after 4 s, put back with what it asked, "
        "decision c1,m768,g0,w1")
    assert plugin_note(f"{decided} rescued=gpu-oom@40s", "COMPLETED").startswith(
        "out of GPU memory at the decided size after 40 s, put back with what it asked")
    assert "unless submitted with --no-requeue (then resubmit it)" in plugin_note(
        decided, "OUT_OF_MEMORY")
    # A job out of memory at its own size is its own: nothing said of the plugin.
    assert plugin_note("synergy:fp=0123456789abcdef", "OUT_OF_MEMORY") == "-"
