"""`synergy hooks install --apply` refuses what root's hooks would run or read when a
user other than root could change it, and writes nothing then. Run as root (as make test
is), which can give files to any uid."""

import os
import shutil
import sys
from pathlib import Path

import pytest

from slurm_synergy.hooks.install import HookPaths, apply, plan_text
from slurm_synergy.hooks.trust import problems
from slurm_synergy.model.errors import SynergyError

USER = 1000
CONF = "ClusterName=t\nSlurmctldHost=localhost\n"


@pytest.fixture
def site(tmp_path):
    assert os.geteuid() == 0, "run the tests as root, as make test does"
    tmp_path.chmod(0o755)
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text(CONF)
    policy = tmp_path / "policy.toml"
    policy.write_text("power_cap_w = 250\n")
    where = HookPaths(stats_dir=tmp_path / "stats", log=tmp_path / "hooks.log",
                      run_dir=tmp_path / "run", policy=policy)
    return etc / "slurm.conf", where


def refused(conf: Path, where: HookPaths, python: Path, why: str) -> None:
    with pytest.raises(SynergyError, match="refused") as e:
        apply(conf, where, python)
    assert why in str(e.value), str(e.value)
    assert conf.read_text() == CONF and not (conf.parent / "synergy-prolog").exists()
    assert why in plan_text(conf, where, python)


def test_a_policy_any_user_can_write_is_refused(site):
    conf, where = site
    where.policy.chmod(0o666)
    refused(conf, where, Path(sys.executable), f"{where.policy} is writable by group or others")


def test_a_policy_a_user_owns_is_refused(site):
    conf, where = site
    os.chown(where.policy, USER, USER)
    refused(conf, where, Path(sys.executable), f"{where.policy} belongs to uid {USER}")


def test_an_interpreter_a_user_owns_is_refused(site, tmp_path):
    conf, where = site
    python = tmp_path / "python3"
    shutil.copy(sys.executable, python)
    os.chown(python, USER, USER)
    refused(conf, where, python, f"{python} belongs to uid {USER}")


def test_an_interpreter_in_a_folder_others_can_write_is_refused(site, tmp_path):
    conf, where = site
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)                 # not sticky: anyone can swap the file in it
    (shared / "python3").symlink_to(sys.executable)
    refused(conf, where, shared / "python3", f"{shared} is writable by group or others")


def test_root_owned_files_under_a_sticky_folder_like_tmp_are_trusted(tmp_path):
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    mine = sticky / "policy.toml"
    mine.write_text("")
    mine.chmod(0o644)
    tmp_path.chmod(0o755)
    assert problems(mine) == []
    assert problems(sticky) != []       # the sticky folder itself is not a trusted file


def test_a_folder_is_kept_by_its_owner_only_where_no_folder_above_it_can_be_swapped(tmp_path):
    from slurm_synergy.hooks.trust import kept_by
    tmp_path.chmod(0o755)
    stats = tmp_path / "a" / "stats"
    stats.mkdir(parents=True)
    assert kept_by(stats, 0) == ""
    (tmp_path / "a").chmod(0o777)       # a writable ancestor: stats could be swapped
    assert "a folder above it, is writable by others" in kept_by(stats, 0)
    (tmp_path / "a").chmod(0o755)
    os.chown(tmp_path / "a", USER, USER)    # a user's folder above root's stats
    assert f"a folder above it, belongs to uid {USER}" in kept_by(stats, 0)
    os.chown(tmp_path / "a", 0, 0)
    stats.chmod(0o775)
    assert "is not uid 0's alone" in kept_by(stats, 0)
