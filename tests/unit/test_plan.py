"""Planning sbatch calls: intervals, arrays within MaxArraySize."""

from pathlib import Path

from slurm_synergy.submission.csvjobs import load_jobs
from slurm_synergy.submission.submit import SubmitOptions, plan_units


def specs(tmp_path: Path, text: str):
    path = tmp_path / "jobs.csv"
    path.write_text(text)
    return load_jobs(path)


def test_intervals_accumulate_like_torchloader(tmp_path):
    jobs = specs(tmp_path, "arch,batch,submit_interval\nresnet,8,10\nresnet,16,20\nresnet,32,30\n")
    units = plan_units(jobs, SubmitOptions(out=tmp_path / "o"), max_array=1001)
    assert [u.begin_s for u in units] == [10, 30, 60]


def test_identical_rows_become_arrays_within_the_limit(tmp_path):
    rows = "".join(f"resnet,32,--seed {i}\n" for i in range(7)) + "mobilenet,32,\n"
    jobs = specs(tmp_path, "arch,batch,args\n" + rows)
    units = plan_units(jobs, SubmitOptions(out=tmp_path / "o", arrays=True), max_array=3)
    assert [len(u.tasks) for u in units] == [3, 3, 1, 1]
    assert [u.array for u in units] == ["0-2", "0-2", "", ""]
    assert units[0].name.endswith("-array3")
    assert [t.spec.args for t in units[1].tasks] == [("--seed", "3"), ("--seed", "4"), ("--seed", "5")]


def test_no_arrays_unless_asked_or_when_sequential(tmp_path):
    jobs = specs(tmp_path, "arch,batch\nresnet,32\nresnet,32\n")
    assert len(plan_units(jobs, SubmitOptions(out=tmp_path / "o"), 1001)) == 2
    assert len(plan_units(jobs, SubmitOptions(out=tmp_path / "o", arrays=True, sequential=True), 1001)) == 2
    assert len(plan_units(jobs, SubmitOptions(out=tmp_path / "o", arrays=True), 1001)) == 1
