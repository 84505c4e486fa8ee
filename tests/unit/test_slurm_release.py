"""Which Slurm the local cluster runs, and how a Debian root's Slurm is run: the release
chosen by SLURM_VERSION, the commands' scripts, a daemon's namespace."""

import os
import subprocess

import pytest

from slurm_synergy.cluster import rootfs
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.cli import main
from slurm_synergy.slurm_release import HOST, RELEASES, chosen, installable, mem_update, untested


def test_unset_is_the_hosts_release_and_a_version_or_suite_names_another():
    assert chosen("") is HOST and HOST.hosted and HOST.state_name == "state"
    assert chosen("24.11") == chosen("trixie") and chosen("24.11").suite == "trixie"
    assert chosen("26.05").state_name == "state-26.05"


def test_an_unknown_release_is_named_with_the_ones_there_are():
    with pytest.raises(SynergyError) as e:
        chosen("23.02")
    assert "SLURM_VERSION=23.02" in str(e.value)
    assert all(r.version in str(e.value) for r in RELEASES)


def test_a_command_runs_the_roots_program_with_the_roots_loader_and_libraries(tmp_path):
    root = tmp_path / "root"
    (root / "usr/bin").mkdir(parents=True)
    for name in ("sbatch", "sacct"):
        (root / "usr/bin" / name).write_text("")
    written = rootfs.write_clients(root, tmp_path / "bin", chosen("24.11"))
    assert written == ["sbatch", "sacct"]
    text = (tmp_path / "bin/sbatch").read_text()
    assert f"exec {root}/usr/lib64/ld-linux-x86-64.so.2 --argv0 sbatch" in text
    assert f"--library-path {root}/usr/lib/x86_64-linux-gnu/slurm-wlm:" in text
    assert text.rstrip().endswith(f'{root}/usr/bin/sbatch "$@"')
    assert (tmp_path / "bin/sbatch").stat().st_mode & 0o111


def test_a_daemon_binds_each_folder_once_and_runs_in_the_root(tmp_path, monkeypatch):
    shared, root, inner = tmp_path / "shared", tmp_path / "root", tmp_path / "work"
    shared.mkdir()
    monkeypatch.setattr(rootfs, "SHARED", (shared,))    # not /tmp: tmp_path is in it
    (inner / "state").mkdir(parents=True)
    argv = rootfs.daemon_argv(root, ["slurmd", "-f", "x.conf"], [inner, inner / "state"],
                              hostname="node2")
    assert argv[:3] == ["unshare", "--mount", "--uts"]
    script = argv[argv.index("-c") + 1]
    assert argv[-3:] == ["slurmd", "-f", "x.conf"]
    assert "echo node2 > /proc/sys/kernel/hostname" in script
    assert f"mount --bind {inner} {root}{inner}" in script
    assert f"mount --bind {shared} {root}{shared}" in script
    assert f"mount --bind /etc {root}/.host-etc" in script      # its passwd, group, hosts
    assert f"mount --rbind /proc {root}/proc" in script
    assert f"{inner}/state" not in script            # inside a folder already bound
    assert script.rstrip().endswith(f'exec chroot {root} "$@"')


def test_the_daemon_script_is_valid_shell(tmp_path):
    argv = rootfs.daemon_argv(tmp_path / "r oot", ["slurmctld"], [tmp_path / "a'b"])
    script = argv[argv.index("-c") + 1]
    assert subprocess.run(["sh", "-n", "-c", script]).returncode == 0


def test_a_root_is_built_again_when_its_recipe_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(rootfs, "ROOTS", tmp_path)
    release = chosen("26.05")
    assert rootfs._built_from(rootfs.root_of(release)) is None
    recipe = rootfs.recipe(release)
    assert recipe["suite"] == "sid" and "slurmctld" in recipe["packages"]
    assert rootfs.recipe(chosen("24.11")) != recipe


@pytest.mark.parametrize("line", ["slurm 22.05.8", "slurm-wlm 24.11.5", "slurm-wlm 26.05.5"])
def test_the_plugin_installs_into_a_tested_release(line):
    assert "a release slurm-synergy is tested on" in installable(line)


def test_an_untested_release_is_refused_with_the_tested_ones_named_unless_forced():
    with pytest.raises(SynergyError) as e:
        installable("slurm 23.02.7")
    assert "Slurm 23.02.7 is not a release" in str(e.value) and "--force" in str(e.value)
    assert all(r.version in str(e.value) for r in RELEASES)
    assert "going on as --force asks" in installable("slurm 23.02.7", force=True)
    with pytest.raises(SynergyError):
        installable("")


@pytest.mark.parametrize("line", ["slurm 22.05.8", "slurm-wlm 24.11.5", "slurm 26.05.0-rc1"])
def test_a_tested_release_is_read_without_a_word(line):
    assert untested(line) is None


@pytest.mark.parametrize("line, named", [("slurm 23.11.4", "Slurm 23.11.4"),
                                         ("slurm-wlm 25.05.3", "Slurm 25.05.3"),
                                         ("", "Slurm of unknown release")])
def test_another_release_is_named_with_the_tested_ones(line, named):
    note = untested(line)
    assert note is not None and note.startswith(f"{named} is not a release slurm-synergy is "
                                                "tested on (22.05, 24.11, 26.05")
    assert "read as theirs" in note


def _scontrol(tmp_path, monkeypatch, line: str) -> None:
    """Slurm's commands on PATH: `scontrol --version` prints `line`, anything else fails."""
    exe = tmp_path / "scontrol"
    exe.write_text(f'#!/bin/sh\n[ "$1" = --version ] && echo "{line}" && exit 0\nexit 1\n')
    exe.chmod(0o755)
    for other in ("sacct", "squeue", "sbatch"):
        (tmp_path / other).symlink_to(exe)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")


@pytest.mark.parametrize("line, said", [("slurm 23.11.4", True), ("slurm-wlm 24.11.5", False)])
def test_a_command_on_a_cluster_says_first_where_its_release_is_untested(
        tmp_path, monkeypatch, capsys, line, said):
    _scontrol(tmp_path, monkeypatch, line)
    main(["jobs", "1"])         # fails on this scontrol's cluster; the note comes first
    err = capsys.readouterr().err
    assert ("synergy: note: Slurm 23.11.4 is not a release" in err) == said, err
    assert err.count("synergy: note:") == int(said)


def test_only_26_05_on_has_mem_update_and_only_its_local_cluster_a_step_manager(monkeypatch,
                                                                                 tmp_path):
    assert [mem_update(f"slurm {v}.1") for v in ("22.05", "24.11", "26.05")] == \
        [False, False, True]
    from slurm_synergy.cluster.localbox import LocalCluster
    monkeypatch.delenv("SLURM_VERSION", raising=False)
    monkeypatch.setenv("PATH", os.environ["PATH"])      # another release's puts its bin/ first
    assert LocalCluster(tmp_path, step_manager=True).step_manager is False   # the host's 22.05
    monkeypatch.setenv("SLURM_VERSION", "26.05")
    assert LocalCluster(tmp_path / "b", step_manager=True).step_manager is True
    assert LocalCluster(tmp_path / "c").step_manager is False
