"""The report reads the epilogs' stats folder partly ahead, while sacct still answers:
what it finally returns must be what a plain read after sacct returns, whatever was read
ahead, and whatever the folder holds."""
import os

from slurm_synergy.hooks.records import JobGpuStats, StatsFolder, stats_for, write_json


def _write(folder, job, node="n1", peak=100.0):
    write_json(folder / f"{job}.{node}.json",
               JobGpuStats(job, node, None, "2026-11-28T10:00:00Z", cgroup_mem_peak_mb=peak,
                           cgroup_cpu_s=1.0))


def _folder(tmp_path):
    d = tmp_path / "stats"
    d.mkdir(mode=0o755)
    return d


def test_read_ahead_or_not_the_records_are_the_same(tmp_path):
    d = _folder(tmp_path)
    for job in ("3", "5", "7", "40"):
        _write(d, job)
    ahead = StatsFolder(d)
    ahead.read_ahead(5, lambda: False)
    assert ahead.of({"3", "7", "40"}) == stats_for(d, {"3", "7", "40"})
    found, problems = ahead.of({"3", "7", "40"})
    assert sorted(found) == ["3", "40", "7"] and not problems


def test_an_epilog_that_ends_after_the_read_ahead_is_still_read(tmp_path):
    d = _folder(tmp_path)
    _write(d, "5", "n1", 100.0)
    folder = StatsFolder(d)
    folder.read_ahead(None, lambda: False)
    _write(d, "5", "n2", 300.0)                 # the job's other node, done a moment later
    found, _ = folder.of({"5"})
    assert {s.node: s.cgroup_mem_peak_mb for s in found["5"]} == {"n1": 100.0, "n2": 300.0}


def test_the_read_ahead_starts_from_the_first_job_asked_and_stops_when_told(tmp_path):
    d = _folder(tmp_path)
    for job in ("3", "5", "7"):
        _write(d, job)
    asked = []
    StatsFolder(d).read_ahead(5, lambda: bool(asked.append(1)))
    assert len(asked) == 2                      # 5 and 7; job 3 is older than any asked
    asked.clear()
    StatsFolder(d).read_ahead(None, lambda: bool(asked.append(1)) or len(asked) > 1)
    assert len(asked) == 2                      # told to stop before its second read
    asked.clear()
    StatsFolder(d).read_ahead(None, lambda: bool(asked.append(1)), most=1)
    assert len(asked) == 1                      # no more than it may hold


def test_a_bad_file_read_ahead_is_reported_only_for_a_job_asked_for(tmp_path):
    d = _folder(tmp_path)
    _write(d, "5")
    (d / "6.n1.json").write_text("{not json")
    os.mkfifo(d / "8.n1.json")                  # a FIFO would hold a blocking reader
    folder = StatsFolder(d)
    folder.read_ahead(None, lambda: False)
    found, problems = folder.of({"5"})
    assert list(found) == ["5"] and problems == []
    found, problems = folder.of({"6", "8"})
    assert found == {} and len(problems) == 2
    assert "not a regular file" in " ".join(problems)


def test_a_folder_others_can_write_is_not_read_ahead_or_after(tmp_path):
    d = _folder(tmp_path)
    _write(d, "5")
    d.chmod(0o777)
    folder = StatsFolder(d)
    folder.read_ahead(None, _never)
    found, problems = folder.of({"5"})
    assert found == {} and "is not one only its owner writes" in problems[0]


def _never() -> bool:
    raise AssertionError("read ahead in a folder others write")


def test_a_folder_whose_parent_others_can_write_is_not_read(tmp_path):
    """The folder itself may be the epilogs', but one above it that others can write lets
    them swap in a folder of records of their own."""
    d = _folder(tmp_path)
    _write(d, "5")
    d.parent.chmod(0o777)
    found, problems = StatsFolder(d).of({"5"})
    assert found == {} and "a folder above it, is writable by others" in problems[0]
