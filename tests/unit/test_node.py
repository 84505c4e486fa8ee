"""Sizing the local cluster's node from the machine."""

import stat

import pytest

from slurm_synergy.cluster.node import cgroup_mode, meminfo_mb


def test_memory_keeps_headroom():
    assert meminfo_mb("MemTotal:       25165824 kB\nMemFree: 1 kB\n") == 24576 - 2457
    # Small machines keep at least 1 GiB back.
    assert meminfo_mb("MemTotal:        4194304 kB\n") == 4096 - 1024


def test_cgroup_mode_needs_writable_v1_controllers(tmp_path):
    assert cgroup_mode(tmp_path) == "none"
    for ctl in ("cpuset", "memory", "freezer"):
        (tmp_path / ctl).mkdir()
    assert cgroup_mode(tmp_path) == "v1"


def test_without_hardware_three_nodes_carry_two_catalogued_gpu_types(tmp_path, monkeypatch):
    from slurm_synergy import paths
    from slurm_synergy.cluster import node
    from slurm_synergy.model.policy import load_catalog
    from slurm_synergy.templating import environment
    monkeypatch.setattr(node, "real_gpus", lambda: (0, ""))
    layout = node.detect(tmp_path)
    assert [(n.name, n.gres) for n in layout.nodes] == [
        ("node1", "gpu:local1g:2,gpu:local4g:2"), ("node2", "gpu:local1g:2"),
        ("node3", "gpu:local4g:2")]
    # A slurmd each: a port each, and files of their own.
    assert len({n.port for n in layout.nodes}) == 3 and 6819 not in {n.port for n in layout.nodes}
    files = [f for n in layout.nodes for f in n.gpu_files]
    assert len(set(files)) == len(files) == 8
    catalog = load_catalog(paths.ETC / "policy.toml")
    assert catalog["local1g"].memory_mib < catalog["local4g"].memory_mib
    # gres.conf names each file's node and type, as slurm.conf's Gres= counts them.
    gres = environment(paths.ETC).get_template("gres.conf.j2").render(layout=layout)
    lines = [line for line in gres.splitlines() if line.startswith("NodeName")]
    assert [(line.split()[0], line.split("Type=")[1].split()[0]) for line in lines] == (
        [("NodeName=node1", "local1g")] * 2 + [("NodeName=node1", "local4g")] * 2
        + [("NodeName=node2", "local1g")] * 2 + [("NodeName=node3", "local4g")] * 2)


def test_real_gpus_are_one_node_of_one_type(tmp_path, monkeypatch):
    from slurm_synergy.cluster import node
    monkeypatch.setattr(node, "real_gpus", lambda: (2, "h100"))
    layout = node.detect(tmp_path)
    assert [(n.name, n.gres, n.gpu_files) for n in layout.nodes] == [
        ("node1", "gpu:h100:2", ("/dev/nvidia0", "/dev/nvidia1"))]
    assert layout.gpu_tres == "gres/gpu,gres/gpu:h100"
    assert node.NodeSpec("n", "127.0.0.1", 6818, 16, 1000, 3, False).gres == "gpu:3"


def test_the_rendered_configs_name_every_node_and_account_each_gpu_type(tmp_path, monkeypatch):
    from slurm_synergy.cluster import node
    from slurm_synergy.cluster.localbox import LocalCluster
    from slurm_synergy.cluster.node import configured_nodes
    monkeypatch.setattr(node, "real_gpus", lambda: (0, ""))
    box = LocalCluster(state=tmp_path)
    layout, _, _ = box.render()
    conf = (tmp_path / "etc" / "slurm.conf").read_text()
    # sacct shows gres/gpu:TYPE only for types the accounting is told to track.
    assert "AccountingStorageTRES=gres/gpu,gres/gpu:local1g,gres/gpu:local4g\n" in conf
    for n in layout.nodes:
        assert f"NodeName={n.name} NodeAddr=127.0.0.1 Port={n.port} " in conf
        assert f"Gres={n.gres} " in conf
    assert "PartitionName=gpu Nodes=node1 Default=YES" in conf
    assert "PartitionName=multi Nodes=node1,node2,node3 " in conf
    # The shared profile store its timer compiles, made as a site makes one.
    st = (tmp_path / "profiles").lstat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode), stat.S_ISDIR(st.st_mode)) == (0, 0o1777, True)
    # Every slurmd is known by name, so that `down` stops each one.
    assert list(configured_nodes(box.conf)) == ["node1", "node2", "node3"]
    slurmds = LocalCluster(state=tmp_path).slurmds
    assert [(d.name, d.pidfile.name, d.log.name) for d in slurmds] == [
        (f"slurmd@{n}", f"slurmd-{n}.pid", f"slurmd-{n}.log") for n in ("node1", "node2", "node3")]
    # A state folder from the one-node box: its slurmd is still found, to be stopped.
    box.conf.write_text(f"SlurmdPidFile={tmp_path}/run/slurmd.pid\nNodeName=vm CPUs=2\n")
    (old,) = LocalCluster(state=tmp_path).slurmds
    assert (old.name, old.pidfile) == ("slurmd@vm", tmp_path / "run" / "slurmd.pid")


def test_the_node_names_resolve_through_one_marked_hosts_line(tmp_path):
    from slurm_synergy.cluster.node import HOSTS_MARK, add_hosts
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n::1 localhost ip6-localhost\n")
    add_hosts(["node1", "node2", "node3"], hosts)
    add_hosts(["node1", "node2", "node3"], hosts)        # idempotent
    lines = hosts.read_text().splitlines()
    assert lines == ["127.0.0.1 localhost", "::1 localhost ip6-localhost",
                     f"127.0.0.1 node1 node2 node3 {HOSTS_MARK}"]
    add_hosts(["node1"], hosts)                          # a layout that changed
    assert hosts.read_text().splitlines()[2:] == [f"127.0.0.1 node1 {HOSTS_MARK}"]


def test_a_profile_store_that_is_not_roots_folder_stops_the_cluster(tmp_path, monkeypatch):
    from slurm_synergy.cluster import node
    from slurm_synergy.cluster.localbox import LocalCluster
    from slurm_synergy.model.errors import SynergyError
    monkeypatch.setattr(node, "real_gpus", lambda: (0, ""))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "profiles").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SynergyError, match="profiles is not a folder of root's"):
        LocalCluster(state=tmp_path).render()


def test_from_23_11_the_local_cluster_plans_with_time_min_as_a_soft_limit(tmp_path,
                                                                           monkeypatch):
    from slurm_synergy import slurm_release
    from slurm_synergy.cluster import localbox, node
    monkeypatch.setattr(node, "real_gpus", lambda: (0, ""))
    # (the roots are not needed to render: only the release's version is read)
    monkeypatch.setattr(localbox.rootfs, "root_of", lambda release: tmp_path / "root")
    chosen = slurm_release.chosen
    for version, soft in (("22.05", False), ("24.11", True), ("26.05", True)):
        monkeypatch.setattr(slurm_release, "chosen", lambda v=version: chosen(v))
        localbox.LocalCluster(state=tmp_path / version).render()
        lines = (tmp_path / version / "etc" / "slurm.conf").read_text().splitlines()
        sched = next(line for line in lines if line.startswith("SchedulerParameters="))
        assert sched.endswith(",time_min_as_soft_limit") == soft, sched
        assert "PriorityType=priority/basic" in lines      # its own line, whatever the release
