"""The decision table (what the shim reads) and the site policy file."""

import os
from dataclasses import replace

import pytest

from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.engine import NodeShape
from slurm_synergy.model.policy import Policy, load_policy
from slurm_synergy.decisions.limits import Cap
from slurm_synergy.decisions.table import (MAX_BYTES, MAX_POWER_W, MAX_PROCS, MAX_WORKERS, Held,
                                           Owned, entries_of, fit, read, render, write)
from slurm_synergy import paths
from tests.shim import decision


FP = "0123456789abcdef"


def test_render_and_read_round_trip(tmp_path):
    ds = [Owned(1000, decision()),
          Owned(1000, decision("fedcba9876543210", 1, 512, 0, "", 1, 250)),
          Owned(1000, decision("00000000000000aa", 4, 2048, 2, "a100", 3, 0)),
          Owned(1001, decision(cpus=6)), Owned(1002, decision(cpus=3), shared=True)]
    path = tmp_path / "t.tbl"
    write(path, render(ds, Policy(user_request_wins=True), NodeShape(8, 32000, 4),
                       qos={"normal": Cap(), "short": Cap(4, 16000, 1)}))
    header, entries = read(path)
    assert header["user_wins"] == "1" and header["entries"] == "5"
    assert header["max_cpus"] == "8" and header["max_mem_mb"] == "32000"
    assert header["limits"] == "1" and header["qos"] == "normal:c0:m0:g0,short:c4:m16000:g1"
    assert entries[1000, "00000000000000aa"].gpu_type == "a100"
    assert entries[1000, "fedcba9876543210"].power_limit_w == 250
    # One workload, two users: each user's line sizes that user's jobs alone.
    assert entries[1000, "0123456789abcdef"].cpus == 2
    assert entries[1001, "0123456789abcdef"].cpus == 6
    assert entries[1002, "0123456789abcdef"].shared and not entries[1001, FP].shared
    assert set(entries_of(entries, 1001)) == {"0123456789abcdef"}
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    # Sorted by uid, then fingerprint: the shim finds a line by halving.
    lines = path.read_text().splitlines()[1:-1]
    assert lines == sorted(lines, key=lambda line: (int(line.split()[0]), line.split()[1]))
    assert render(ds, Policy(), NodeShape(8, 32000, 4)).splitlines()[0].count(" limits=0 ")


def test_every_value_is_clamped_to_the_shims_hard_bounds():
    wild = replace(decision(workers=10 ** 6, power_limit_w=10 ** 9), procs=10 ** 5)
    line = render([Owned(7, wild)], Policy(), NodeShape(8, 32000, 4)).splitlines()[1]
    assert line.split()[6:9] == [str(MAX_WORKERS), str(MAX_POWER_W), str(MAX_PROCS)]


def test_generation_changes_with_the_content():
    shape = NodeShape(8, 32000, 4)
    a = render([Owned(0, decision())], Policy(), shape).splitlines()[0]
    b = render([Owned(0, decision(cpus=3))], Policy(), shape).splitlines()[0]
    assert a != b and a.split()[2] != b.split()[2]


def test_reading_a_tampered_or_cut_table_names_the_fault(tmp_path):
    path = tmp_path / "t.tbl"
    text = render([Owned(0, decision())], Policy(), NodeShape(8, 32000, 4))
    head, line, end = text.splitlines()
    path.write_text("\n".join([head, line, "0 0123456789abcdef 2 1024 1 a;b 1 0 1 0", end, ""]))
    with pytest.raises(SynergyError, match="line 3"):
        read(path)
    path.write_text("\n".join([head, line, ""]))
    with pytest.raises(SynergyError, match="not whole"):
        read(path)


def test_a_held_workload_is_a_none_line_that_sizes_nothing(tmp_path):
    rows = [Owned(1000, decision()), Held(1000, "00000000000000aa"), Held(999, FP)]
    path = tmp_path / "t.tbl"
    write(path, render(rows, Policy(), NodeShape(8, 32000, 4)))
    header, entries = read(path)
    assert header["entries"] == "3" and "1000 00000000000000aa none" in path.read_text()
    assert entries[1000, "00000000000000aa"] == Held(1000, "00000000000000aa")
    assert set(entries_of(entries, 1000)) == {FP} and entries_of(entries, 999) == {}
    lines = path.read_text().splitlines()[1:-1]
    assert lines == sorted(lines, key=lambda line: (int(line.split()[0]), line.split()[1]))
    # A user's holds count toward the limits as their decisions do.
    flood = [Held(1, f"{i:016x}") for i in range(1, 31)] + [Owned(2, decision())]
    kept, cut = fit(flood, max_entries=11)
    assert cut == {1: 20} and Owned(2, decision()) in kept


def test_past_the_shims_limits_the_users_with_the_most_entries_are_cut_first():
    fps = [f"{i:016x}" for i in range(1, 41)]
    owned = [Owned(1, decision(fp)) for fp in fps[:30]] + \
        [Owned(2, decision(fp)) for fp in fps[:8]] + [Owned(3, decision(fps[0]))]
    kept, cut = fit(owned, max_entries=25)
    per_user = {u: sum(o.uid == u for o in kept) for u in (1, 2, 3)}
    # Each to the same most (16: 16 + 8 + 1 = 25), the lighter users whole.
    assert per_user == {1: 16, 2: 8, 3: 1} and cut == {1: 14}
    assert fit(owned) == (owned, {})
    # Bytes count as entries do: a table is never written past MAX_BYTES.
    line = len("1 0000000000000001 2 1024 1 - 1 0 1 0\n")
    kept, cut = fit(owned, max_bytes=20 * line)
    assert len(kept) == 20 and set(cut) == {1} and MAX_BYTES > 0


def test_root_keeps_the_tables_owner(tmp_path):
    # make test runs as root (the local cluster needs it), so this runs wherever CI does.
    assert os.geteuid() == 0, "run the tests as root, as make test does"
    path = tmp_path / "t.tbl"
    path.write_text("old")
    os.chown(path, 4242, 4242)
    write(path, "new\n")
    assert path.stat().st_uid == 4242 and path.read_text() == "new\n"


def test_a_table_that_holds_the_text_already_is_left_alone(tmp_path):
    # The shim reloads a table whose file changed: a timer's sync every few seconds must
    # not make it reload an unchanged table each time.
    path = tmp_path / "t.tbl"
    assert write(path, "one\n")
    before = path.stat()
    assert not write(path, "one\n")
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert write(path, "two\n") and path.read_text() == "two\n"
    path.unlink()
    os.mkfifo(path)                      # not a table: replaced, never read (no block)
    assert write(path, "one\n") and path.read_text() == "one\n"


def test_the_shipped_policy_is_the_default_policy():
    assert load_policy(paths.ETC / "policy.toml") == Policy()
    # Its catalog is whole too: a knob written after the [gpu.*] tables would land in the
    # last of them and cost the site its catalog.
    from slurm_synergy.model.policy import site_catalog
    catalog = site_catalog(paths.ETC / "policy.toml")
    assert not catalog.faulty and {"local1g", "local4g", "h100"} <= set(catalog.types), \
        catalog.problem


@pytest.mark.parametrize("text,words", [
    ("tolerance = 0.9\n", "tolerance = 0.9 is outside"),
    ("tolerance = 'x'\n", "tolerance must be a float"),
    ("profile_new = 1\n", "profile_new must be true or false"),
    ("min_mem_mb = 1.5\n", "min_mem_mb must be a int"),
    ("tolerence = 0.1\n", "unknown setting(s) tolerence"),
    ("tolerance = \n", "cannot be read"),
    ("share_group = 7\n", "share_group must name a group, not 7"),
    ("share_group = 'a b'\n", "share_group must name a group, not 'a b'"),
])
def test_a_bad_policy_is_refused_naming_the_setting(tmp_path, text, words):
    path = tmp_path / "policy.toml"
    path.write_text(text)
    with pytest.raises(SynergyError, match=words.replace("(", r"\(").replace(")", r"\)")):
        load_policy(path)


def test_install_adds_what_slurm_conf_lacks_and_is_idempotent():
    from slurm_synergy.plugin.install import conf_edit

    text = "ClusterName=x\nJobSubmitPlugins=require_timelimit  # site's own\n"
    new, changes = conf_edit(text, "slurm-wlm 22.05.8")
    assert "JobSubmitPlugins=require_timelimit,lua  # site's own" in new
    assert "\nAccountingStoreFlags=job_comment\n" in new
    assert "time_min_as_soft_limit" not in new          # 22.05 would ignore it
    assert [c.done for c in changes] == [False, False]
    again, changes = conf_edit(new, "slurm-wlm 22.05.8")
    assert again == new and all(c.done for c in changes)


def test_install_makes_time_min_a_soft_limit_from_23_11():
    from slurm_synergy.plugin.install import conf_edit

    text = "ClusterName=x\nSchedulerParameters=bf_interval=60,bf_continue\n"
    for release in ("slurm 23.11.4", "slurm-wlm 24.11.5", "slurm-wlm 26.05.5"):
        new, changes = conf_edit(text, release)
        assert "SchedulerParameters=bf_interval=60,bf_continue,time_min_as_soft_limit\n" in new
        again, changes = conf_edit(new, release)
        assert again == new and all(c.done for c in changes)
    new, _ = conf_edit("ClusterName=x\n", "slurm-wlm 24.11.5")
    assert "\nSchedulerParameters=time_min_as_soft_limit\n" in new


def test_the_install_plan_names_the_time_limit_timers_risk_before_23_11(tmp_path):
    from slurm_synergy.plugin.install import plan_text

    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    old, new = plan_text(conf, "slurm-wlm 22.05.8"), plan_text(conf, "slurm-wlm 24.11.5")
    assert "synergy plugin timelimits" in old and "RISK on this release" in old
    assert "killed at the lowered" in old and "time_min_as_soft_limit" not in old
    assert "RISK" not in new and "never a job" in new
    assert "add  slurm.conf: SchedulerParameters=time_min_as_soft_limit" in new
