"""The epilogs' stats folder kept to stats_keep_days (hooks/expiry.py), on real files."""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import replace

from slurm_synergy.gpu.device import Backend
from slurm_synergy.hooks import epilog, expiry

from tests.helpers import hook_ctx

NOW = time.time()
OLD = NOW - 400 * expiry.DAY_S


def folder_of_records(tmp_path):
    stats = tmp_path / "stats"
    stats.mkdir(mode=0o755)
    for name, when in [("1.node1.json", OLD), ("2.node2.r1.json", OLD), ("3.node1.json", NOW),
                       ("notes.txt", OLD), ("x.node1.json", OLD)]:
        (stats / name).write_text("{}")
        os.utime(stats / name, (when, when))
    (stats / "5.node1.json").mkdir()
    outside = tmp_path / "kept.json"
    outside.write_text("{}")
    os.utime(outside, (OLD, OLD))
    (stats / "4.node1.json").symlink_to(outside)
    return stats


def names(folder):
    return sorted(os.listdir(folder))


def test_records_past_the_keep_are_removed_and_nothing_else(tmp_path):
    stats = folder_of_records(tmp_path)
    lines: list[str] = []
    assert expiry.prune(stats, 365, 3.0, lines.append, NOW) == 2
    assert names(stats) == [".pruned", "3.node1.json", "4.node1.json", "5.node1.json",
                            "notes.txt", "x.node1.json"]
    assert (tmp_path / "kept.json").exists(), "a link is not followed"
    assert lines == [f"stats folder {stats}: 2 records older than 365 days removed"]


def test_a_folder_is_pruned_once_a_day(tmp_path):
    stats = folder_of_records(tmp_path)
    expiry.prune(stats, 365, 3.0, print, NOW)
    (stats / "6.node1.json").write_text("{}")
    os.utime(stats / "6.node1.json", (OLD, OLD))
    assert expiry.prune(stats, 365, 3.0, print, NOW + 3600) == 0
    assert (stats / "6.node1.json").exists()
    assert expiry.prune(stats, 365, 3.0, print, NOW + expiry.DAY_S + 1) == 1
    assert not (stats / "6.node1.json").exists()


def test_keep_days_0_keeps_every_record(tmp_path):
    stats = folder_of_records(tmp_path)
    before = names(stats)
    assert expiry.prune(stats, 0, 3.0, print, NOW) == 0
    assert names(stats) == before


def test_a_folder_others_can_write_is_left_alone(tmp_path):
    stats = folder_of_records(tmp_path)
    stats.chmod(0o777)
    before = names(stats)
    assert expiry.prune(stats, 365, 3.0, print, NOW) == 0
    assert names(stats) == before, "not even the day's mark is written there"


def test_a_scan_out_of_time_says_so_and_the_next_day_goes_on(tmp_path):
    stats = folder_of_records(tmp_path)
    lines: list[str] = []
    assert expiry.prune(stats, 365, 0.0, lines.append, NOW) == 0
    assert lines == [f"stats folder {stats}: 0 records older than 365 days removed; "
                     "stopped after 0 s, the rest tomorrow"]
    assert expiry.prune(stats, 365, 3.0, print, NOW + 60) == 0, "the day was claimed"
    assert expiry.prune(stats, 365, 3.0, print, NOW + expiry.DAY_S + 1) == 2


def test_an_epilog_does_not_wait_for_another_that_prunes(tmp_path):
    stats = folder_of_records(tmp_path)
    fd = os.open(stats / expiry.MARKER, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert expiry.prune(stats, 365, 3.0, print, NOW) == 0
    finally:
        os.close(fd)
    assert (stats / "1.node1.json").exists()


def test_the_epilog_prunes_after_writing_its_own_record(tmp_path):
    ctx = hook_ctx(tmp_path, job="7", gpus="", uid="0")
    ctx = replace(ctx, policy=replace(ctx.policy, stats_keep_days=30))
    ctx.stats_dir.mkdir(mode=0o755)
    old = ctx.stats_dir / "1.n1.json"
    old.write_text("{}")
    os.utime(old, (NOW - 31 * expiry.DAY_S,) * 2)
    assert epilog.run(ctx, Backend("none", reason="no GPUs on this node")) == 0
    assert names(ctx.stats_dir) == [".pruned", "7.n1.json"]
    assert "1 records older than 30 days removed" in (tmp_path / "hooks.log").read_text()
