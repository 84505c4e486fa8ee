"""`synergy plugin sync` and `install`, which a site runs as root (sync from cron): they
refuse to run where another user could change the interpreter, the package or the
policy, before they read or write anything. Run as root, as make test is."""

import os
import subprocess
import sys

import pytest

USER = 1000


@pytest.fixture
def policy(tmp_path):
    assert os.geteuid() == 0, "run the tests as root, as make test does"
    tmp_path.chmod(0o755)
    path = tmp_path / "policy.toml"
    path.write_text("power_cap_w = 250\n")
    return path


def plugin(action: str, policy, tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SYNERGY_POLICY": str(policy),
           "SYNERGY_DECISIONS": str(tmp_path / "t.tbl"),
           "SLURM_CONF": str(tmp_path / "no-cluster.conf")}
    return subprocess.run([sys.executable, "-m", "slurm_synergy.cli", "plugin", action],
                          capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("action", ["sync", "install"])
@pytest.mark.parametrize("make_unsafe, why", [
    (lambda p: p.chmod(0o666), "is writable by group or others"),
    (lambda p: os.chown(p, USER, USER), f"belongs to uid {USER}"),
    (lambda p: p.parent.chmod(0o777), "is writable by group or others"),
])
def test_root_refuses_a_policy_another_user_could_change(policy, tmp_path, action,
                                                         make_unsafe, why):
    make_unsafe(policy)
    ran = plugin(action, policy, tmp_path)
    assert ran.returncode == 1, (ran.stdout, ran.stderr)
    assert "not run as root: another user could change what it runs or reads" in ran.stderr
    assert why in ran.stderr and not (tmp_path / "t.tbl").exists()


def test_a_policy_root_alone_writes_passes_the_check(policy, monkeypatch):
    from slurm_synergy.cli.plugin import root_may_run
    monkeypatch.setenv("SYNERGY_POLICY", str(policy))
    root_may_run()
