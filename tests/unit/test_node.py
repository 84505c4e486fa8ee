"""Sizing the local cluster's node from the machine."""

from slurm_synergy.cluster.node import cgroup_mode, memory_mb


def test_memory_keeps_headroom():
    assert memory_mb("MemTotal:       25165824 kB\nMemFree: 1 kB\n") == 24576 - 2457
    # Small machines keep at least 1 GiB back.
    assert memory_mb("MemTotal:        4194304 kB\n") == 4096 - 1024


def test_cgroup_mode_needs_writable_v1_controllers(tmp_path):
    assert cgroup_mode(tmp_path) == "none"
    for ctl in ("cpuset", "memory", "freezer"):
        (tmp_path / ctl).mkdir()
    assert cgroup_mode(tmp_path) == "v1"
