"""The installed wrappers end to end, as slurmd runs them, on the NVML backend: a stand-in
pynvml (tests/fakes/nvml) plays the driver, so the same code that talks to real GPUs
sets limits, and a real detached sampler process samples the job."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from slurm_synergy.hooks.install import HookPaths, conf_edit, render_wrappers
from slurm_synergy.hooks.records import read_prolog, read_stats, stats_path
from slurm_synergy.model.errors import SynergyError

FAKE_NVML = Path(__file__).resolve().parent.parent / "fakes" / "nvml"


def gpu(minor, **kw):
    g = {"uuid": f"GPU-0000000{minor}-aaaa", "pci": f"00000000:{0x17 + minor:02X}:00.0",
         "name": "NVIDIA Fake", "minor": minor, "limit_mw": 300_000, "min_mw": 100_000,
         "max_mw": 400_000, "default_mw": 300_000, "energy_mj": 5_000_000,
         "power_mw": 200_000, "util": 75, "mem_used_mb": 3000, "mem_total_mb": 40960,
         "refuse": False}
    return {**g, **kw}


@pytest.fixture
def node(tmp_path):
    (tmp_path / "policy.toml").write_text("power_cap_w = 250\ngpu_sample_period_s = 0.1\n")
    where = HookPaths(stats_dir=tmp_path / "stats", log=tmp_path / "hooks.log",
                      run_dir=tmp_path / "run", policy=tmp_path / "policy.toml")
    render_wrappers(tmp_path, where)
    state = tmp_path / "nvml.json"

    def hook(name, job, gpus="0", comment=""):
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(FAKE_NVML),
               "FAKE_NVML_STATE": str(state), "SLURM_JOB_ID": job, "SLURMD_NODENAME": "n1",
               "SLURM_JOB_GPUS": gpus, "SLURM_JOB_COMMENT": comment}
        return subprocess.run(["/bin/sh", str(tmp_path / f"synergy-{name}")], env=env,
                              timeout=60).returncode

    def gpus():
        return json.loads(state.read_text())["gpus"]

    def set_gpus(items):
        state.write_text(json.dumps({"gpus": items}))

    return tmp_path, where, hook, gpus, set_gpus


def test_prolog_sampler_epilog_on_the_nvml_backend(node):
    tmp, where, hook, gpus, set_gpus = node
    set_gpus([gpu(0), gpu(1)])
    assert hook("prolog", "301", "1", "fp=a decision=c1,m512,g1,w0,p180") == 0
    assert [g["limit_mw"] for g in gpus()] == [300_000, 180_000]   # minor 1 only
    rec = read_prolog(where.run_dir / "301.n1.prolog.json")
    assert rec.gpus[0].uuid == "GPU-00000001-aaaa" and rec.sampler_pid
    cmdline = Path(f"/proc/{rec.sampler_pid}/cmdline").read_bytes()
    assert b"slurm_synergy.hooks" in cmdline and b"301" in cmdline
    # The sampler's first totals appear after Python has started (slow on a busy machine),
    # then it samples every 0.1 s.
    deadline = time.monotonic() + 60
    while not (where.run_dir / "301.n1.samples.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    items = gpus()
    items[1]["energy_mj"] += 900_000                  # the job used 900 J
    set_gpus(items)
    assert hook("epilog", "301", "1") == 0
    assert [g["limit_mw"] for g in gpus()] == [300_000, 250_000]   # back to the site cap
    assert not Path(f"/proc/{rec.sampler_pid}").exists() or \
        b"slurm_synergy" not in Path(f"/proc/{rec.sampler_pid}/cmdline").read_bytes()
    use = read_stats(stats_path(where.stats_dir, "301", "n1")).gpus[0]
    assert use.energy_j == pytest.approx(900.0) and use.energy_source == "counter"
    assert use.samples >= 2 and use.util_mean_pct == 75 and use.mem_peak_mb == 3000
    # The board's memory from NVML beside the peak: what root's rescue holds a failed run to.
    assert use.mem_total_mb == 40960
    assert use.power_limit_w == 180 and use.limit_after_w == 250
    log = where.log.read_text()
    assert "sampler (pid" in log and "stopped" in log


def test_the_epilog_wrapper_fails_when_the_cap_cannot_be_enforced(node):
    tmp, where, hook, gpus, set_gpus = node
    set_gpus([gpu(0, limit_mw=400_000, refuse=True)])
    assert hook("prolog", "302") == 0                 # refused: the prolog still succeeds
    assert hook("epilog", "302") == 1
    assert "epilog job=302 exit 1: node will drain" in where.log.read_text()


def test_no_driver_means_no_gpus_and_success(node):
    tmp, where, hook, gpus, set_gpus = node
    (tmp / "nvml.json").write_text(json.dumps({"gpus": [], "init_error": "DriverNotLoaded"}))
    assert hook("prolog", "303") == 0 and hook("epilog", "303") == 0
    assert "no GPUs on this node (NVML: DriverNotLoaded)" in where.log.read_text()


def test_nvml_failing_for_another_reason_drains_only_through_the_epilog(node):
    tmp, where, hook, gpus, set_gpus = node
    (tmp / "nvml.json").write_text(json.dumps({"gpus": [], "init_error": "Unknown"}))
    assert hook("prolog", "304") == 0 and hook("epilog", "304") == 1
    assert "CANNOT REACH the GPUs (NVML failed to start: Unknown)" in where.log.read_text()


def test_sm_activity_where_the_gpu_has_gpm(node):
    tmp, where, hook, gpus, set_gpus = node
    set_gpus([gpu(0, gpm=True, sm_active=35.0)])
    assert hook("prolog", "305") == 0
    deadline = time.monotonic() + 60
    while not (where.run_dir / "305.n1.samples.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)                                    # GPM needs two samples 0.1 s apart
    assert hook("epilog", "305") == 0
    use = read_stats(stats_path(where.stats_dir, "305", "n1")).gpus[0]
    assert use.sm_active_mean_pct == 35.0 and use.util_mean_pct == 75


def test_install_adds_prolog_epilog_and_a_timeout_but_keeps_a_sites_own(tmp_path):
    text, changes = conf_edit("ClusterName=x\nPrologEpilogTimeout=10\n", tmp_path)
    assert f"Prolog={tmp_path}/synergy-prolog" in text and "PrologEpilogTimeout=60" in text
    longer, _ = conf_edit(text, tmp_path, hook_timeout_s=90)
    assert "PrologEpilogTimeout=120" in longer       # outlasts the wrapper's kill at 105 s
    again, changes = conf_edit(text, tmp_path)
    assert again == text and all(c.done for c in changes)
    with pytest.raises(SynergyError, match="already runs Epilog=/etc/slurm/epilog.sh"):
        conf_edit("Epilog=/etc/slurm/epilog.sh\n", tmp_path)
