"""A job's cgroup followed from the prolog to its end: found where Slurm's cgroup plugins
put it, read while it lives, its last reading kept once Slurm removes it; and the
epilog's record of it for a job with no GPUs. Cgroup trees are folders in tmp_path."""

import dataclasses
import shutil
import threading
from pathlib import Path

from slurm_synergy.hooks import epilog, jobcgroup, prolog
from slurm_synergy.hooks.jobcgroup import CgroupUse, Watch, find, read
from slurm_synergy.hooks.records import read_prolog, read_stats, stats_path
from slurm_synergy.hooks.sampling import read_totals, sample_job, write_totals
from slurm_synergy.gpu.device import Backend
from slurm_synergy.model.policy import Policy
from tests.helpers import hook_ctx

MB = 1 << 20


def v1_job(root: Path, top: str, job="101", uid="1000", peak_mb=300, cpu_s=2.5) -> Path:
    mem = root / "memory" / top / f"uid_{uid}" / f"job_{job}"
    cpu = root / "cpuacct" / top / f"uid_{uid}" / f"job_{job}"
    mem.mkdir(parents=True)
    cpu.mkdir(parents=True)
    (mem / "memory.max_usage_in_bytes").write_text(f"{peak_mb * MB}\n")
    (cpu / "cpuacct.usage").write_text(f"{int(cpu_s * 1e9)}\n")
    return mem


def test_the_job_is_found_under_either_v1_tree_and_read_in_mb_and_s(tmp_path):
    v1_job(tmp_path, "slurm_n1")
    files = find("101", "1000", "n1", tmp_path)
    assert files is not None and read(files) == CgroupUse(300.0, 2.5)
    assert find("101", "1001", "n1", tmp_path) is None        # another user's uid
    assert find("102", "1000", "n1", tmp_path) is None
    other = tmp_path / "one"
    v1_job(other, "slurm", peak_mb=64)
    assert read(find("101", "1000", "n1", other)).mem_peak_mb == 64.0


def v2_job(root: Path, scope: str, job="101", peak_mb=512, cpu_s=4.0) -> Path:
    folder = root / scope / f"job_{job}"
    folder.mkdir(parents=True)
    (folder / "memory.peak").write_text(f"{peak_mb * MB}\n")
    (folder / "cpu.stat").write_text(f"usage_usec {int(cpu_s * 1e6)}\nuser_usec 3000000\n"
                                     "system_usec 1000000\n")
    return folder


def test_a_v2_job_is_read_from_memory_peak_and_cpu_stat(tmp_path):
    job = v2_job(tmp_path, "system.slice/slurmstepd.scope")
    assert read(find("101", "1000", "n1", tmp_path)) == CgroupUse(512.0, 4.0)
    (job / "cpu.stat").write_text("garbage\n")
    assert read(find("101", "1000", "n1", tmp_path)) is None


def test_a_v2_job_is_found_where_each_slurm_release_puts_its_scope(tmp_path):
    # Slurm's cgroup_v2.c: <slice>/slurmstepd.scope; <slice>/<node>_slurmstepd.scope with
    # several slurmd on one host; the slice is cgroup.conf's CgroupSlice from 26.05.
    v2_job(tmp_path / "a", "system.slice/slurmstepd.scope", peak_mb=1)
    v2_job(tmp_path / "b", "slurm.slice/slurmstepd.scope", peak_mb=2)
    v2_job(tmp_path / "c", "system.slice/n2_slurmstepd.scope", peak_mb=3)
    v2_job(tmp_path / "c", "system.slice/n1_slurmstepd.scope", peak_mb=4)
    assert [read(find("101", "1000", "n1", tmp_path / t)).mem_peak_mb for t in "abc"] == \
        [1.0, 2.0, 4.0]                  # this node's scope, not another node's on the host
    v2_job(tmp_path / "d", "system.slice/other.scope")
    assert find("101", "1000", "n1", tmp_path / "d") is None


def test_the_watch_keeps_the_last_reading_after_the_cgroup_goes(tmp_path):
    w = Watch("101", "1000", "n1", tmp_path)
    w.poll()
    assert w.files is None and not w.done                    # the prolog runs before it
    mem = v1_job(tmp_path, "slurm_n1", peak_mb=100, cpu_s=1.0)
    w.poll()
    (mem / "memory.max_usage_in_bytes").write_text(f"{700 * MB}\n")
    w.poll()
    shutil.rmtree(tmp_path / "memory")                       # the job ended
    w.poll()
    assert w.done and w.use() == CgroupUse(700.0, 1.0)


def test_a_job_without_a_cgroup_ends_the_watch_with_a_reason(tmp_path):
    now = [0.0]
    w = Watch("101", "1000", "n1", tmp_path, clock=lambda: now[0])
    w.poll()
    now[0] = jobcgroup.FIND_WITHIN_S + 1
    w.poll()
    assert w.done and w.use().mem_peak_mb is None and w.interval() == float("inf")
    assert "no cgroup of the job on this node" in w.use().note


def test_the_sampler_of_a_job_without_gpus_ends_with_its_cgroup(tmp_path):
    mem = v1_job(tmp_path / "cg", "slurm_n1", peak_mb=250, cpu_s=3.0)
    out, alive = tmp_path / "totals.json", tmp_path / "prolog.json"
    alive.write_text("{}")
    watch = Watch("101", "1000", "n1", tmp_path / "cg")
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(
        sample_job(None, "101", [], 0.01, out, alive, threading.Event(), watch)))
    t.start()
    while watch.last is None:
        t.join(0.01)
    shutil.rmtree(mem.parent.parent.parent.parent)           # memory/ and its job
    t.join(10)
    assert done == [0]
    assert read_totals(out).cgroup == CgroupUse(250.0, 3.0)


def test_a_job_without_gpus_gets_its_cgroup_peak_recorded_by_the_epilog(tmp_path):
    c = hook_ctx(tmp_path, gpus="", uid="1000")
    none = Backend("none", reason="no GPUs on this node")
    started: list[str] = []
    assert prolog.run(c, none, lambda c_, g: started.append("sampler") or None) == 0
    assert started == ["sampler"] and read_prolog(c.prolog_path).gpus == ()
    write_totals(c.totals_path, c.job_id, [], CgroupUse(812.5, 41.0))
    assert epilog.run(c, none) == 0
    stats = read_stats(stats_path(c.stats_dir, "101", "n1"))
    assert (stats.cgroup_mem_peak_mb, stats.cgroup_cpu_s, stats.gpus) == (812.5, 41.0, ())
    assert not c.prolog_path.exists() and not c.totals_path.exists()
    assert "memory peak 812 MB, CPU 41.0 s" in (tmp_path / "hooks.log").read_text()


def test_a_lost_sampler_leaves_a_reason_not_a_zero(tmp_path):
    c = hook_ctx(tmp_path, gpus="", uid="1000")
    none = Backend("none", reason="no GPUs on this node")
    prolog.run(c, none, lambda c_, g: None)
    assert epilog.run(c, none) == 0
    stats = read_stats(stats_path(c.stats_dir, "101", "n1"))
    assert stats.cgroup_mem_peak_mb is None and "no cgroup reading" in stats.cgroup_note


def test_with_cgroup_peaks_off_a_job_without_gpus_is_left_alone(tmp_path):
    c = hook_ctx(tmp_path, gpus="", uid="1000")
    c = dataclasses.replace(c, policy=Policy(cgroup_peaks=False))
    none = Backend("none", reason="no GPUs on this node")
    assert prolog.run(c, none, lambda c_, g: 1 / 0) == 0     # no sampler started
    assert epilog.run(c, none) == 0
    assert not c.prolog_path.exists() and not stats_path(c.stats_dir, "101", "n1").exists()
