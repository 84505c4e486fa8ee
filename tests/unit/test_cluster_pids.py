"""A local cluster's pid files: a pid counts only while the daemon it names runs, so a
stale or planted file never stops another release's cluster from starting, nor a live
one goes unnoticed."""

import os
import subprocess
import time

import pytest

from slurm_synergy import paths
from slurm_synergy.cluster.commands import running_pid
from slurm_synergy.cluster.preflight import no_other_release_up
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.slurm_release import HOST, chosen


@pytest.fixture
def sleeper():
    """A running process whose comm is "sleep"."""
    proc = subprocess.Popen(["sleep", "60"])
    deadline = time.monotonic() + 10        # until it has exec'd: comm was python's
    while open(f"/proc/{proc.pid}/comm").read().strip() != "sleep":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    yield proc.pid
    proc.kill()
    proc.wait()


def test_a_pid_counts_only_while_its_program_runs(tmp_path, sleeper):
    pidfile = tmp_path / "d.pid"
    pidfile.write_text(f"{sleeper}\n")
    assert running_pid(pidfile, "sleep") == sleeper
    assert running_pid(pidfile, "slurmctld") is None       # a pid reused by another program
    for text in ("", "x", f"{2 ** 40}"):                    # garbage, a pid that cannot be
        pidfile.write_text(text)
        assert running_pid(pidfile, "sleep") is None
    assert running_pid(tmp_path / "missing.pid", "sleep") is None


def test_a_release_cannot_start_while_another_ones_controller_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "workspace", lambda: tmp_path)
    run = tmp_path / HOST.state_name / "run"
    run.mkdir(parents=True)
    (run / "slurmctld.pid").write_text(f"{os.getpid()}\n")
    no_other_release_up(chosen("24.11"))        # this pid is no slurmctld: a stale file
    monkeypatch.setattr("slurm_synergy.cluster.preflight.running_pid",
                        lambda path, name: os.getpid() if name == "slurmctld"
                        and path == run / "slurmctld.pid" else None)
    with pytest.raises(SynergyError) as e:
        no_other_release_up(chosen("24.11"))
    assert f"Slurm {HOST.version} is up" in str(e.value) and "cluster down" in str(e.value)
    no_other_release_up(HOST)                   # its own pid file is not another's
