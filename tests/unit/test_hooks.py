"""The node prolog and epilog driven through the GPU interface with GPUs in memory:
clamping a job's limit under the site cap, restoring it, and the one case the epilog
fails (a GPU left above the cap)."""

import os
import subprocess
import sys

from dataclasses import replace

import pytest

from slurm_synergy.gpu import PowerRange
from slurm_synergy.gpu.device import Backend, job_gpu_ids
from slurm_synergy.gpu.sampler import Totals
from slurm_synergy.hooks import epilog, prolog
from slurm_synergy.hooks.context import context
from slurm_synergy.hooks.power import asked_power_w, ceiling_mw, job_target
from slurm_synergy.hooks.records import read_prolog, read_stats, stats_for, stats_path
from slurm_synergy.hooks.sampling import write_totals
from slurm_synergy.model.errors import SynergyError
from tests.fakes.gpus import FakeGpu, backend
from tests.helpers import hook_ctx

W = 1000   # mW per W


def no_sampler(c, gpus):
    return None


def test_the_ceiling_is_the_cap_or_the_default_inside_the_device_range():
    rng = PowerRange(100 * W, 400 * W, 300 * W)
    assert ceiling_mw(rng, 0) == 300 * W                 # no cap: default limit
    assert ceiling_mw(rng, 250) == 250 * W
    assert ceiling_mw(rng, 50) == 100 * W                # below the minimum: the minimum
    assert ceiling_mw(rng, 900) == 400 * W               # above the maximum: the maximum
    assert job_target(rng, 250, 200).mw == 200 * W
    assert job_target(rng, 250, 350).mw == 250 * W       # a decision never beats the cap
    assert job_target(rng, 250, 20).mw == 100 * W
    assert job_target(rng, 0, None).mw == 300 * W


def test_the_limit_comes_from_the_shims_decision_in_the_comment():
    assert asked_power_w("fp=0123456789abcdef decision=c2,m1024,g1,w1,p250") == 250
    assert asked_power_w("fp=x decision=c2,m1024,g1,w1") is None
    assert asked_power_w("") is None
    assert asked_power_w("decision=c1,m1,g1,w0,p0") is None
    # The user may write a comment too; the shim's decision is appended last and counts.
    assert asked_power_w("decision=c1,m1,g1,w0,p9999 fp=x decision=c2,m2,g1,w1,p180") == 180


def test_gpus_are_found_by_minor_number_uuid_or_pci_bus_id():
    a, b = FakeGpu(0), FakeGpu(3)
    be = backend(a, b)
    assert be.find(["3"]) == ([b], [])                      # minor, not NVML index 1
    assert be.find(["1"]) == ([], ["1"])
    assert be.find(["GPU-FAKE-0", "0000:13:00.0"]) == ([a, b], [])
    assert be.find(["nonsense:bus"]) == ([], ["nonsense:bus"])
    assert job_gpu_ids({"SLURM_JOB_GPUS": "0,3", "CUDA_VISIBLE_DEVICES": "0,1"}) == ["0", "3"]


def test_prolog_applies_the_decided_limit_and_epilog_restores_the_cap(tmp_path):
    gpu = FakeGpu(0, limit_w=300)
    c = hook_ctx(tmp_path, comment="fp=a decision=c2,m1024,g1,w1,p200", cap_w=280)
    assert prolog.run(c, backend(gpu), no_sampler) == 0
    assert gpu.limit_mw == 200 * W
    rec = read_prolog(c.prolog_path)
    assert rec.gpus[0].energy_start_mj == 1_000_000 and rec.gpus[0].limit_set_mw == 200 * W
    gpu.run_for(10)                                          # 250 W for 10 s
    assert epilog.run(c, backend(gpu)) == 0
    assert gpu.limit_mw == 280 * W
    stats = read_stats(stats_path(c.stats_dir, "101", "n1"))
    assert stats.energy_j == pytest.approx(2500.0) and stats.gpus[0].energy_source == "counter"
    assert stats.gpus[0].power_limit_w == 200 and stats.gpus[0].limit_after_w == 280
    assert not c.prolog_path.exists()
    log = (tmp_path / "hooks.log").read_text()
    assert "limit 300 W -> 200 W (decision 200 W (site cap 280 W))" in log
    assert "limit 200 W -> 280 W (ceiling)" in log


def test_a_jobs_stats_are_readable_by_its_group_and_no_one_else(tmp_path):
    c = hook_ctx(tmp_path, gid=4242)
    assert prolog.run(c, backend(FakeGpu(0)), no_sampler) == 0
    assert epilog.run(c, backend(FakeGpu(0))) == 0
    st = stats_path(c.stats_dir, "101", "n1").stat()
    assert (st.st_uid, st.st_gid, oct(st.st_mode & 0o777)) == (0, 4242, "0o640")


def test_a_board_the_job_does_not_hold_whole_keeps_the_site_cap_not_the_jobs_limit(tmp_path):
    """A MIG board's limit is the board's: the job's own would throttle its other
    instances' jobs. It is held to the site cap, as every board is."""
    gpu = FakeGpu(0, limit_w=300)
    gpu.info = replace(gpu.info, shared="in MIG mode (its instances may be other jobs')")
    c = hook_ctx(tmp_path, comment="fp=a decision=c2,m1024,g1,w1,p200", cap_w=280)
    assert prolog.run(c, backend(gpu), no_sampler) == 0
    assert gpu.limit_mw == 280 * W
    log = (tmp_path / "hooks.log").read_text()
    assert "in MIG mode (its instances may be other jobs'): the job's 200 W limit is not set" \
        in log


def test_a_board_another_job_of_this_node_holds_goes_to_its_ceiling(tmp_path):
    """Shards of one board (gres/shard) are told apart by nothing in a prolog's
    environment: a job's own limit is set on a board no other job of the node holds, and
    a second tenant's prolog puts the board back to its ceiling."""
    gpu = FakeGpu(0, limit_w=300)
    first = hook_ctx(tmp_path, job="101", comment="decision=c1,m512,g1,w0,p150", cap_w=280)
    assert prolog.run(first, backend(gpu), no_sampler) == 0
    assert gpu.limit_mw == 150 * W                           # alone on it
    second = hook_ctx(tmp_path, job="102", comment="decision=c1,m512,g1,w0,p120", cap_w=280)
    assert prolog.run(second, backend(gpu), no_sampler) == 0
    assert gpu.limit_mw == 280 * W                           # two tenants: the ceiling
    assert "held by job 101 too: the job's 120 W limit is not set" in \
        (tmp_path / "hooks.log").read_text()
    assert epilog.run(first, backend(gpu)) == 0 and gpu.limit_mw == 280 * W


def test_an_mps_job_or_a_node_of_shards_never_sets_a_boards_limit(tmp_path):
    from slurm_synergy.hooks.sharing import hostnames, shared_by_setting
    conf = tmp_path / "slurm.conf"
    (tmp_path / "nodes.conf").write_text(
        "NodeName=gpu[01-03],big Gres=gpu:a100:4,shard:32 CPUs=64\nNodeName=n1 Gres=gpu:2\n")
    conf.write_text("ClusterName=x\nInclude nodes.conf\n")
    assert hostnames("gpu[01-03],big") == ["gpu01", "gpu02", "gpu03", "big"]
    env = {"SLURM_CONF": str(conf)}
    assert "shard:32" in shared_by_setting(env, "gpu02")
    assert shared_by_setting(env, "n1") == ""
    assert "MPS job" in shared_by_setting({**env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"},
                                          "n1")
    gpu = FakeGpu(0, limit_w=300)
    c = hook_ctx(tmp_path, comment="decision=c1,m512,g1,w0,p150", cap_w=280,
                 shared=shared_by_setting(env, "gpu02"))
    assert prolog.run(c, backend(gpu), no_sampler) == 0
    assert gpu.limit_mw == 280 * W


def test_a_job_that_raised_its_gpu_above_the_cap_is_put_back(tmp_path):
    gpu = FakeGpu(0, limit_w=250, max_w=400)
    c = hook_ctx(tmp_path, cap_w=250)
    prolog.run(c, backend(gpu), no_sampler)
    gpu.limit_mw = 400 * W                                   # e.g. nvidia-smi -pl as root
    assert epilog.run(c, backend(gpu)) == 0
    assert gpu.limit_mw == 250 * W


def test_a_prolog_with_no_decision_runs_the_job_at_the_ceiling(tmp_path):
    gpu = FakeGpu(0, limit_w=400, max_w=400, default_w=300)
    c = hook_ctx(tmp_path, comment="fp=0123456789abcdef")
    assert prolog.run(c, backend(gpu), no_sampler) == 0
    assert gpu.limit_mw == 300 * W                           # no cap: the default limit
    assert "no decision: the ceiling (default 300 W)" in (tmp_path / "hooks.log").read_text()


def test_a_job_killed_with_sigkill_is_still_restored_and_accounted(tmp_path):
    """SIGKILL takes the job's processes, and the sampler may be gone too: the epilog
    works from the prolog's counters and the sampler's last totals."""
    gpu = FakeGpu(0, limit_w=300)
    c = hook_ctx(tmp_path, comment="decision=c1,m512,g1,w0,p150")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    prolog.run(c, backend(gpu), lambda c_, g: dead.pid)
    t = Totals(gpu.info.uuid)
    for i in range(5):
        t.add(float(i), 90.0, None, 2048.0, 150_000)
    write_totals(c.totals_path, c.job_id, [t])
    gpu.run_for(4)
    assert epilog.run(c, backend(gpu)) == 0
    assert gpu.limit_mw == 300 * W
    use = read_stats(stats_path(c.stats_dir, "101", "n1")).gpus[0]
    assert use.util_mean_pct == 90.0 and use.samples == 5 and use.mem_peak_mb == 2048.0
    # The board's memory beside its peak: what root's rescue holds a failed run against.
    assert use.mem_total_mb == 24576.0
    assert use.energy_j == pytest.approx(1000.0)
    assert f"sampler (pid {dead.pid}) had already ended" in (tmp_path / "hooks.log").read_text()


def test_without_counters_energy_is_integrated_from_the_samplers_power(tmp_path):
    gpu = FakeGpu(0, energy_j=None)
    c = hook_ctx(tmp_path)
    prolog.run(c, backend(gpu), no_sampler)
    t = Totals(gpu.info.uuid)
    for i in range(11):                                      # 200 W for 10 s
        t.add(float(i), 50.0, 40.0, 1.0, 200_000)
    write_totals(c.totals_path, c.job_id, [t])
    epilog.run(c, backend(gpu))
    use = read_stats(stats_path(c.stats_dir, "101", "n1")).gpus[0]
    assert use.energy_source == "power" and use.energy_j == pytest.approx(2000.0)
    assert use.sm_active_mean_pct == 40.0


def test_a_gpu_that_refuses_the_limit(tmp_path):
    gpu = FakeGpu(0, limit_w=300, refuse=True)
    c = hook_ctx(tmp_path, comment="decision=c1,m512,g1,w0,p200")
    assert prolog.run(c, backend(gpu), no_sampler) == 0      # the job runs at 300 W
    assert read_prolog(c.prolog_path).gpus[0].limit_set_mw is None
    assert epilog.run(c, backend(gpu)) == 0                  # 300 W is the ceiling: enforced
    log = (tmp_path / "hooks.log").read_text()
    assert "refused limit 200 W" in log and "Insufficient Permissions" in log


def test_the_epilog_fails_only_when_a_gpu_stays_above_the_cap(tmp_path):
    above = FakeGpu(0, limit_w=400, refuse=True)
    c = hook_ctx(tmp_path, cap_w=250)
    assert prolog.run(c, backend(above), no_sampler) == 0
    assert epilog.run(c, backend(above)) == 1
    assert "STILL AT 400 W, above the ceiling 250 W" in (tmp_path / "hooks.log").read_text()
    lost = FakeGpu(0, unreadable=True)
    assert epilog.run(hook_ctx(tmp_path, job="102"), backend(lost)) == 1
    assert epilog.run(hook_ctx(tmp_path, job="103", gpus="0,7"), backend(FakeGpu(0))) == 1


def test_two_jobs_sharing_a_node_touch_only_their_own_gpus(tmp_path):
    g0, g1 = FakeGpu(0), FakeGpu(1)
    node = backend(g0, g1)
    a = hook_ctx(tmp_path, job="201", gpus="0", comment="decision=c1,m1,g1,w0,p200")
    b = hook_ctx(tmp_path, job="202", gpus="1", comment="decision=c1,m1,g1,w0,p250")
    prolog.run(a, node, no_sampler)
    prolog.run(b, node, no_sampler)
    g0.run_for(2)
    g1.run_for(6)
    assert epilog.run(a, node) == 0
    assert (g0.limit_mw, g1.limit_mw) == (300 * W, 250 * W)  # b still runs at its limit
    g1.run_for(4)
    assert epilog.run(b, node) == 0
    assert g1.limit_mw == 300 * W
    found, problems = stats_for(tmp_path / "stats", {"201", "202"})
    assert not problems
    assert found["201"][0].energy_j == pytest.approx(500.0)
    assert found["202"][0].energy_j == pytest.approx(2500.0)
    assert [g.uuid for g in found["202"][0].gpus] == ["GPU-fake-1"]


@pytest.mark.parametrize("cap_w, expect_w", [(50, 100), (900, 400)])
def test_a_cap_outside_the_devices_range(tmp_path, cap_w, expect_w):
    gpu = FakeGpu(0, limit_w=300, min_w=100, max_w=400)
    c = hook_ctx(tmp_path, cap_w=cap_w)
    assert prolog.run(c, backend(gpu), no_sampler) == 0
    assert gpu.limit_mw == expect_w * W
    assert epilog.run(c, backend(gpu)) == 0                  # held at the nearest end
    assert gpu.limit_mw == expect_w * W
    if cap_w < 100:
        assert "below the device's minimum 100 W" in (tmp_path / "hooks.log").read_text()


def test_hooks_are_idempotent(tmp_path):
    gpu = FakeGpu(0)
    c = hook_ctx(tmp_path, comment="decision=c1,m1,g1,w0,p200")
    prolog.run(c, backend(gpu), no_sampler)
    gpu.run_for(10)
    prolog.run(c, backend(gpu), no_sampler)                  # run again: first counters kept
    assert read_prolog(c.prolog_path).gpus[0].energy_start_mj == 1_000_000
    assert gpu.limit_mw == 200 * W
    assert epilog.run(c, backend(gpu)) == 0
    first = stats_path(c.stats_dir, "101", "n1").read_text()
    gpu.limit_mw = 400 * W                                   # raised again in between
    assert epilog.run(c, backend(gpu)) == 0
    assert stats_path(c.stats_dir, "101", "n1").read_text() == first
    assert gpu.limit_mw == 300 * W


def test_without_gpus_everything_runs_and_says_so(tmp_path):
    none = Backend("none", reason="no GPUs on this node (NVML: Shared Library Not Found)")
    c = hook_ctx(tmp_path, gpus="0,1")
    assert prolog.run(c, none, no_sampler) == 0
    assert epilog.run(c, none) == 0
    stats = read_stats(stats_path(c.stats_dir, "101", "n1"))
    assert stats.gpus == () and stats.note.startswith("no GPUs on this node")
    log = (tmp_path / "hooks.log").read_text()
    assert log.count("no GPUs on this node") >= 2
    assert epilog.run(hook_ctx(tmp_path, job="7", gpus=""), none) == 0
    assert not stats_path(c.stats_dir, "7", "n1").exists()   # a CPU job leaves no record


def test_unreadable_records_are_reported_not_read_as_zeros(tmp_path):
    d = tmp_path / "stats"
    d.mkdir()
    (d / "5.n1.json").write_text("{not json")
    found, problems = stats_for(d, {"5"})
    assert found == {} and "5.n1.json" in problems[0]


def test_the_context_refuses_what_slurmd_would_not_send(tmp_path):
    env = {"SYNERGY_HOOK_LOG": str(tmp_path / "log")}
    with pytest.raises(SynergyError, match="is not a job id"):
        context("prolog", {**env, "SLURM_JOB_ID": "1; rm -rf /"})
    env["SYNERGY_HOOK_RUN"] = str(tmp_path / "run")
    assert context("prolog", {**env, "SLURM_JOB_ID": "1",
                              "SLURMD_NODENAME": "../x"}).node == ".._x"  # no "/" in a name
    c = context("prolog", {**env, "SLURM_JOB_ID": "12", "SLURMD_NODENAME": "n1",
                           "SLURM_JOB_GPUS": "0,1", "SLURM_JOB_COMMENT": "decision=c1,m1,g1,w0,p99",
                           "SLURM_JOB_RESTART_COUNT": "2",
                           "SYNERGY_POLICY": str(tmp_path / "missing.toml")})
    assert c.gpu_ids == ("0", "1") and asked_power_w(c.comment) == 99 and c.restart == 2
    # The first call read the real policy (no cap) and remembered it for this one.
    assert "no site policy" in c.policy_error and c.cap_w == 0.0


def test_a_hung_gpu_cannot_hold_the_epilog_past_its_deadline(tmp_path):
    """NVML stuck on a failing GPU: the epilog gives up at hook_timeout_s and fails (the
    cap is unconfirmed), the prolog gives up and succeeds."""
    policy = tmp_path / "policy.toml"
    policy.write_text("hook_timeout_s = 1\n")
    code = ("import time, slurm_synergy.hooks.__main__ as m\n"
            "m.open_backend = lambda: time.sleep(60)\n"
            "import sys; sys.exit(m.main([sys.argv[1]]))\n")
    env = {**os.environ, "SLURM_JOB_ID": "9", "SLURM_JOB_GPUS": "0",
           "SYNERGY_POLICY": str(policy), "SYNERGY_HOOK_LOG": str(tmp_path / "hooks.log"),
           "SYNERGY_HOOK_RUN": str(tmp_path / "run"), "SYNERGY_GPU_STATS": str(tmp_path / "s")}
    for hook, expect in (("epilog", 1), ("prolog", 0)):
        # Without the deadline the hook would sleep 60 s and the run would time out.
        proc = subprocess.run([sys.executable, "-c", code, hook], env=env, timeout=45)
        assert proc.returncode == expect
    assert (tmp_path / "hooks.log").read_text().count("did not finish in 1 s") == 2


def test_an_unreadable_policy_never_lets_a_gpu_above_the_last_cap(tmp_path):
    """A typo in the policy must not lift the cap: the hooks hold the last cap they read
    on this node, and with none known they lower limits but never raise them."""
    policy = tmp_path / "policy.toml"
    policy.write_text("power_cap_w = 250\n")
    env = {"SYNERGY_HOOK_LOG": str(tmp_path / "log"), "SYNERGY_HOOK_RUN": str(tmp_path / "run"),
           "SYNERGY_POLICY": str(policy), "SLURM_JOB_ID": "1", "SLURM_JOB_GPUS": "0",
           "SLURM_JOB_COMMENT": "decision=c1,m1,g1,w0,p400"}
    assert context("prolog", env).cap_w == 250
    policy.write_text("power_cap_w = 250\ntypo = 1\n")
    c = context("prolog", env)
    assert c.cap_w == 250 and "holding the last cap read, 250 W" in c.policy_error
    gpu = FakeGpu(0, limit_w=250, max_w=400, default_w=350)
    prolog.run(c, backend(gpu), no_sampler)
    assert gpu.limit_mw == 250 * W
    (tmp_path / "run" / "site-cap").unlink()
    unknown = context("prolog", env)
    assert unknown.cap_w is None
    assert prolog.run(unknown, backend(gpu), no_sampler) == 0
    assert gpu.limit_mw == 250 * W                           # p400 asked: not raised
    assert epilog.run(unknown, backend(gpu)) == 0
    assert gpu.limit_mw == 250 * W                           # default 350: not raised either


def test_the_gpus_are_restored_before_anything_that_can_fail(tmp_path, monkeypatch):
    gpu = FakeGpu(0)
    c = hook_ctx(tmp_path, comment="decision=c1,m1,g1,w0,p200")
    prolog.run(c, backend(gpu), no_sampler)

    def broken(*a):
        raise RuntimeError("stats folder hung")
    monkeypatch.setattr(epilog, "stop_sampler", broken)
    settled = []
    with pytest.raises(RuntimeError):
        epilog.run(c, backend(gpu), settled.append)
    assert gpu.limit_mw == 300 * W and settled == [0]


def test_a_sampler_that_ends_as_it_is_stopped_is_no_error(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert epilog._signal(proc.pid, 15) is False
    epilog.stop_sampler(hook_ctx(tmp_path), proc.pid)             # logs, does not raise


def test_a_broken_nvml_with_job_gpus_fails_the_epilog(tmp_path):
    broken = Backend("nvml", reason="NVML failed to start: Unknown Error", broken=True)
    assert prolog.run(hook_ctx(tmp_path), broken, no_sampler) == 0
    assert epilog.run(hook_ctx(tmp_path), broken) == 1
    assert epilog.run(hook_ctx(tmp_path, job="5", gpus=""), broken) == 0   # no GPUs in the job


def test_a_requeued_job_gets_a_record_per_run_and_a_planted_one_is_replaced(tmp_path):
    gpu = FakeGpu(0)
    for restart in (0, 1):
        c = hook_ctx(tmp_path, restart=restart)
        prolog.run(c, backend(gpu), no_sampler)
        gpu.run_for(2)
        epilog.run(c, backend(gpu))
    found, _ = stats_for(tmp_path / "stats", {"101"})
    assert [s.energy_j for s in found["101"]] == [500.0, 500.0]
    planted = stats_path(tmp_path / "stats", "102", "n1")
    planted.write_text("{}")
    os.chown(planted, 65534, 65534)
    c = hook_ctx(tmp_path, job="102")
    prolog.run(c, backend(gpu), no_sampler)
    epilog.run(c, backend(gpu))
    assert read_stats(planted).job_id == "102"
    assert "which the epilog did not write" in (tmp_path / "hooks.log").read_text()


def test_reports_read_only_the_records_the_epilogs_account_wrote(tmp_path):
    gpu = FakeGpu(0)
    c = hook_ctx(tmp_path)
    prolog.run(c, backend(gpu), no_sampler)
    gpu.run_for(2)
    epilog.run(c, backend(gpu))
    # Another user's record for a job of theirs (say, to show it used no energy).
    forged = stats_path(tmp_path / "stats", "103", "n1")
    forged.write_text(stats_path(tmp_path / "stats", "101", "n1").read_text()
                      .replace('"101"', '"103"'))
    os.chown(forged, 1000, 1000)
    found, problems = stats_for(tmp_path / "stats", {"101", "103"})
    assert set(found) == {"101"}
    assert problems == [f"GPU stats {forged}: not read: owned by uid 1000, not uid 0"]
    # A folder others may write: none of its records is the epilogs'.
    (tmp_path / "stats").chmod(0o777)
    found, problems = stats_for(tmp_path / "stats", {"101", "103"})
    assert found == {} and "its records are ignored" in problems[0]


@pytest.mark.parametrize("how", ["another user's", "writable by others"])
def test_the_epilog_writes_no_stats_into_a_folder_not_its_own(tmp_path, how):
    gpu = FakeGpu(0)
    c = hook_ctx(tmp_path)
    (tmp_path / "stats").mkdir(mode=0o755)
    if how == "another user's":
        os.chown(tmp_path / "stats", 1000, 1000)
    else:
        (tmp_path / "stats").chmod(0o777)
    prolog.run(c, backend(gpu), no_sampler)
    assert epilog.run(c, backend(gpu)) == 0           # the GPU is restored all the same
    assert not stats_path(tmp_path / "stats", "101", "n1").exists()
    assert "is not this account's alone" in (tmp_path / "hooks.log").read_text()
