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


def test_without_hardware_the_node_has_two_catalogued_gpu_types(tmp_path, monkeypatch):
    from slurm_synergy import paths
    from slurm_synergy.cluster import node
    from slurm_synergy.model.policy import load_catalog
    from slurm_synergy.render import environment
    monkeypatch.setattr(node, "real_gpus", lambda: (0, ""))
    spec = node.detect(tmp_path)
    assert spec.gres == "gpu:local1g:2,gpu:local4g:2" and len(spec.gpu_files) == 4
    catalog = load_catalog(paths.ETC / "policy.toml")
    assert catalog["local1g"].memory_mib < catalog["local4g"].memory_mib
    # gres.conf names each file's type, as slurm.conf's Gres= counts them.
    gres = environment(paths.ETC).get_template("gres.conf.j2").render(node=spec)
    lines = [line for line in gres.splitlines() if line.startswith("NodeName")]
    assert [line.split("Type=")[1].split()[0] for line in lines] == ["local1g"] * 2 + ["local4g"] * 2


def test_real_gpus_are_one_type_and_untyped_ones_stay_untyped():
    from slurm_synergy.cluster.node import NodeSpec
    real = NodeSpec("n", "127.0.0.1", 16, 1000, 2, True, ("/dev/nvidia0", "/dev/nvidia1"),
                    ("h100", "h100"))
    assert real.gres == "gpu:h100:2"
    assert NodeSpec("n", "127.0.0.1", 16, 1000, 3, False).gres == "gpu:3"


def test_the_rendered_configs_name_and_account_each_gpu_type(tmp_path, monkeypatch):
    from slurm_synergy.cluster import node
    from slurm_synergy.cluster.localbox import LocalCluster
    monkeypatch.setattr(node, "real_gpus", lambda: (0, ""))
    spec, _, _ = LocalCluster(state=tmp_path).render()
    conf = (tmp_path / "etc" / "slurm.conf").read_text()
    # sacct shows gres/gpu:TYPE only for types the accounting is told to track.
    assert "AccountingStorageTRES=gres/gpu,gres/gpu:local1g,gres/gpu:local4g\n" in conf
    assert f"Gres={spec.gres} " in conf
