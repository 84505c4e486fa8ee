"""The local cluster: healthy, idempotent, sized from the machine, self-healing."""

import os
import signal
import time

from slurm_synergy import paths
from slurm_synergy.model.units import gpu_count, gpu_types

from .conftest import cluster_up, epilogs_done, executable, finish, submitted_ids, synergy


def test_status_reports_every_daemon_and_the_mode(box):
    proc = synergy("cluster", "status")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    daemons = ["munged", "mariadbd", "slurmdbd", "slurmctld"] + [d.name for d in box.slurmds]
    assert len(daemons) >= 5
    for daemon in daemons:
        assert f"{daemon:<13} up" in proc.stdout
    assert "cgroup enforcement: " in proc.stdout


def test_node_is_sized_from_the_machine(slurm):
    (node,) = slurm.nodes()                     # the default partition is one node
    assert node.cpus == os.cpu_count()
    meminfo_mb = int(open("/proc/meminfo").read().split()[1]) // 1024
    assert 0 < node.mem_mb < meminfo_mb
    # Real GPUs, one type; without hardware, two file-backed types of two each.
    assert node.gres == "gpu:local1g:2,gpu:local4g:2" or (
        len(gpu_types(node.gres)) == 1 and gpu_count(node.gres) >= 1)


def test_up_is_idempotent(box):
    pids = {name: box._pid(name) for name in box.daemons}
    proc = cluster_up()
    assert proc.returncode == 0, proc.stderr
    assert "starting" not in proc.stdout
    assert {name: box._pid(name) for name in box.daemons} == pids


def status_once(passes, timeout_s: float = 60) -> str:
    """`synergy cluster status` once `passes` its text (a timer's first round takes a
    moment after it starts), else the assertion with the last text."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = synergy("cluster", "status").stdout
        if passes(text):
            return text
        assert time.monotonic() < deadline, text
        time.sleep(1)


def test_up_starts_roots_timers_and_up_without_them_stops_them(box, tmp_path):
    try:
        proc = synergy("cluster", "up")
        assert proc.returncode == 0, proc.stderr
        assert "starting sync-timer" in proc.stdout and "starting limits-timer" in proc.stdout
        pid, limits = box._pid("sync-timer"), box._pid("limits-timer")
        assert pid is not None and os.stat(f"/proc/{pid}").st_uid == 0
        assert open(f"/proc/{pid}/cmdline").read().split("\0")[-6:-2] == [
            "sync", "--every", "15.0", "--table"]
        # The time-limit timer, a process of its own, with its record in the state folder.
        assert limits is not None and os.stat(f"/proc/{limits}").st_uid == 0
        argv = open(f"/proc/{limits}/cmdline").read().split("\0")
        assert argv[4:7] == ["timelimits", "--state", str(box.limits_state)], argv
        status = synergy("cluster", "status").stdout
        assert f"{'sync-timer':<13} up    pid {pid}" in status
        assert f"{'limits-timer':<13} up    pid {limits}" in status
        # Brought up again with a policy of its own (as a bench does), which is then
        # removed: the timers run with that policy, so their rounds fail, and status says
        # so; up with the cluster's own settings starts them again, and their rounds pass.
        bench = tmp_path / "bench"
        bench.mkdir()
        (bench / "policy.toml").write_text((paths.ETC / "policy.toml").read_text())
        proc = synergy("cluster", "up", env={"SYNERGY_POLICY": str(bench / "policy.toml")})
        assert proc.returncode == 0, proc.stderr
        assert "restarting the sync timer" in proc.stdout, proc.stdout
        assert box._pid("sync-timer") not in (None, pid)
        (bench / "policy.toml").unlink()
        bench.rmdir()
        failing = status_once(lambda text: text.count("FAILED: ") == 2)
        assert "FAILED: round failed: SynergyError: no site policy at" in failing, failing
        assert "FAILED: pending jobs not looked at: no site policy at" in failing, failing
        proc = synergy("cluster", "up")
        assert proc.returncode == 0, proc.stderr
        assert "restarting the sync timer" in proc.stdout and \
            "restarting the time-limit timer" in proc.stdout, proc.stdout
        status_once(lambda text: text.count("ran through") == 2 and "FAILED" not in text)
    finally:
        proc = cluster_up()
    assert "stopped the sync timer" in proc.stdout
    assert "stopped the time-limit timer" in proc.stdout
    assert not box.timer_running() and box._pid("limits-timer") is None
    status = synergy("cluster", "status")
    assert status.returncode == 0 and f"{'sync-timer':<13} off" in status.stdout
    assert f"{'limits-timer':<13} off" in status.stdout


def test_up_restarts_a_dead_daemon(box, slurm):
    name = box.slurmds[-1].name                 # a node outside the default partition
    old = box._pid(name)
    others = {d.name: box._pid(d.name) for d in box.slurmds if d.name != name}
    os.kill(old, signal.SIGKILL)
    while os.path.exists(f"/proc/{old}"):
        time.sleep(0.1)
    proc = cluster_up()
    assert proc.returncode == 0, proc.stderr
    assert f"starting {name}" in proc.stdout and proc.stdout.count("starting") == 1
    assert box._pid(name) not in (None, old)
    assert {d: box._pid(d) for d in others} == others
    states = {n.name: n.state for n in slurm.nodes("")}
    assert all(s in ("idle", "mixed", "allocated") for s in states.values()), states


def test_three_nodes_two_gpu_types_and_a_job_over_two_nodes(box, slurm, tmp_path):
    nodes = slurm.nodes("")
    assert len(nodes) >= 3, nodes
    types = set().union(*(gpu_types(n.gres) for n in nodes))
    assert {"local1g", "local4g"} <= types
    script = executable(tmp_path / "two.sh", f"""#!/bin/bash
#SBATCH --partition=multi --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --mem=200M
#SBATCH --gres=gpu:1 --time=5 --output={tmp_path}/%j.out
srun bash -c 'echo "task $SLURM_PROCID on $(hostname) node=$SLURMD_NODENAME \
 resolves=$(getent hosts $(hostname) | cut -d" " -f1)"; sleep 2'
""")
    job = slurm.run(["sbatch", "--parsable", str(script)]).strip()
    (rec,) = finish(slurm, [job]).values()
    assert rec.state == "COMPLETED"
    out = (tmp_path / f"{job}.out").read_text().splitlines()
    # Each task ran on a node of its own, under that node's hostname.
    hosts = sorted(line.split(" on ")[1].split()[0] for line in out if line.startswith("task"))
    assert len(set(hosts)) == 2 and all(f"node={h}" in "\n".join(out) for h in hosts), out
    # A job's hostname resolves, as torchrun's rendezvous needs it to.
    assert all("resolves=127.0.0.1" in line for line in out if line.startswith("task")), out
    # Accounted per node: the allocation and the step over both, the batch step on one.
    rows = {r.split("|")[0]: r.split("|")[1:] for r in slurm.run(
        ["sacct", "-j", job, "--noheader", "--parsable2",
         "--format=JobID,NNodes,NTasks,NodeList,AllocTRES"]).splitlines()}
    assert rows[job][0] == "2" and "gres/gpu=2" in rows[job][3], rows
    assert rows[f"{job}.0"][:2] == ["2", "2"] and rows[f"{job}.batch"][0] == "1", rows
    assert set(slurm.run(["scontrol", "show", "hostnames", rows[job][2]]).split()) == set(hosts)
    # Each node's epilog kept the job's GPU stats apart, in its cluster's own folder.
    epilogs_done(box, job)
    stats = paths.cluster_folder(box.hook_paths.stats_dir, slurm.cluster_name())
    deadline = time.monotonic() + 60
    while len(list(stats.glob(f"{job}.*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert sorted(p.name for p in stats.glob(f"{job}.*.json")) == sorted(
        f"{job}.{h}.json" for h in hosts)


def test_submit_with_dead_controller_fails_clearly_and_queues_nothing(box, slurm, tmp_path):
    csv = tmp_path / "one.csv"
    csv.write_text("name,arch,batch,iterations\ndeadctl-1,resnet,8,1\n")
    os.kill(box._pid("slurmctld"), signal.SIGTERM)
    try:
        while slurm.ping():
            time.sleep(0.2)
        proc = synergy("submit", "--no-profile", str(csv), "--out", str(tmp_path / "out"))
        assert proc.returncode != 0
        # Said as it is: not "Slurm would refuse the job", no quiet switch to user mode.
        assert "slurmctld unreachable" in proc.stderr and "is the cluster up?" in proc.stderr
        assert "nothing was submitted" in proc.stderr
        assert "refuse" not in proc.stderr and "user mode" not in proc.stderr
        assert proc.stderr.count("\n") <= 3, proc.stderr  # one clear message, no traceback
    finally:
        assert cluster_up().returncode == 0
    assert slurm.run(["squeue", "--noheader", "--name=deadctl-1", "--states=all"]).strip() == ""


def test_jobs_are_confined_and_hooks_run(box, slurm, tmp_path):
    script = executable(tmp_path / "probe.sh",
                        "#!/bin/bash\nnproc\necho \"gpus=$CUDA_VISIBLE_DEVICES\"\n")
    csv = tmp_path / "probe.csv"
    csv.write_text(f"name,script,cpus,gpus,mem\nprobe,{script},1,3,100M\n")
    ids = submitted_ids(synergy("submit", "--no-profile", str(csv), "--out", str(tmp_path / "out"))).values()
    recs = finish(slurm, ids)
    (rec,) = recs.values()
    assert rec.state == "COMPLETED" and rec.cpus == 1 and rec.gpus == 3 and rec.mem == "100M"
    log = (tmp_path / "out" / "logs" / f"probe-{rec.job_id}.out").read_text().splitlines()
    if (box.state / "mode").read_text().strip() == "v1":
        assert log[-2] == "1"  # the cgroup's cpuset holds one core
    assert log[-1] == "gpus=0,1,2"
    hooks = epilogs_done(box, rec.job_id)     # sacct can say COMPLETED before the epilog ends
    assert f"prolog job={rec.job_id} no GPUs on this node" in hooks
    assert f"epilog job={rec.job_id} stats -> " in hooks
