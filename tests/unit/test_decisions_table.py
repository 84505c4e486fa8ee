"""The decision table (what the shim reads) and the site policy file."""

import os

import pytest

from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.engine import Decision, NodeShape
from slurm_synergy.model.policy import Policy, load_policy
from slurm_synergy.decisions.table import entries_of, read, render, write
from slurm_synergy import paths


def decision(fp="0123456789abcdef", cpus=2, mem_mb=1024, gpus=1, gpu_type="", workers=1,
             power_limit_w=0) -> Decision:
    return Decision(fp, "job", cpus, mem_mb, gpus, gpu_type, workers, power_limit_w, 100.0,
                    100.0, 4, 16000, ("because",))


def test_render_and_read_round_trip(tmp_path):
    ds = [(1000, decision()), (1000, decision("fedcba9876543210", 1, 512, 0, "", 1, 250)),
          (1000, decision("00000000000000aa", 4, 2048, 2, "a100", 3, 0)),
          (1001, decision(cpus=6))]
    path = tmp_path / "t.tbl"
    write(path, render(ds, Policy(user_request_wins=True), NodeShape(8, 32000, 4)))
    header, entries = read(path)
    assert header["user_wins"] == "1" and header["entries"] == "4"
    assert header["max_cpus"] == "8" and header["max_mem_mb"] == "32000"
    assert entries[1000, "00000000000000aa"].gpu_type == "a100"
    assert entries[1000, "fedcba9876543210"].power_limit_w == 250
    # One workload, two users: each user's line sizes that user's jobs alone.
    assert entries[1000, "0123456789abcdef"].cpus == 2
    assert entries[1001, "0123456789abcdef"].cpus == 6
    assert set(entries_of(entries, 1001)) == {"0123456789abcdef"}
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_generation_changes_with_the_content():
    shape = NodeShape(8, 32000, 4)
    a = render([(0, decision())], Policy(), shape).splitlines()[0]
    b = render([(0, decision(cpus=3))], Policy(), shape).splitlines()[0]
    assert a != b and a.split()[2] != b.split()[2]


def test_reading_a_tampered_table_names_the_line(tmp_path):
    path = tmp_path / "t.tbl"
    path.write_text(render([(0, decision())], Policy(), NodeShape(8, 32000, 4))
                    + "0 0123456789abcdef 2 1024 1 a;b 1 0\n")
    with pytest.raises(SynergyError, match="line 3"):
        read(path)


def test_root_keeps_the_tables_owner(tmp_path):
    # make test runs as root (the local cluster needs it), so this runs wherever CI does.
    assert os.geteuid() == 0, "run the tests as root, as make test does"
    path = tmp_path / "t.tbl"
    path.write_text("old")
    os.chown(path, 4242, 4242)
    write(path, "new\n")
    assert path.stat().st_uid == 4242 and path.read_text() == "new\n"


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
    new, changes = conf_edit(text)
    assert "JobSubmitPlugins=require_timelimit,lua  # site's own" in new
    assert "\nAccountingStoreFlags=job_comment\n" in new
    assert [c.done for c in changes] == [False, False]
    again, changes = conf_edit(new)
    assert again == new and all(c.done for c in changes)


def test_a_profile_too_noisy_to_decide_is_left_out_of_the_table_with_its_reason(tmp_path):
    from slurm_synergy.model.profile import (Allocation, GpuReadings, Point, Profile,
                                             ThroughputModel, combine)
    from slurm_synergy.profiles import ProfileStore
    from slurm_synergy.decisions.table import compile_decisions

    def profile(fp, runs_1c):
        train = (combine([Point("train", 2, 1, 4096, v, 0.1, 0.001, 900.0, 10.0)
                          for v in (100.0, 101.0)]),
                 combine([Point("train", 1, 1, 4096, v, 0.1, 0.001, 900.0, 10.0)
                          for v in runs_1c]))
        return Profile(fp, "job", ("builtin:train",), 32,
                       Allocation(2, 4096, 1, "n1", "srun", "7"), train,
                       ThroughputModel("components", 0.0005, 0.001, 100.0, 900.0, None),
                       GpuReadings(False), "t0", "t1", 40.0, "0.1.0")
    store = ProfileStore(tmp_path)
    store.save(profile("000000000000000a", (99.0, 100.0)))
    store.save(profile("000000000000000b", (70.0, 130.0)))       # as fast, but ±30%
    decisions, skipped = compile_decisions([store], NodeShape(2, 8000, 1), Policy())
    assert [(uid, d.fingerprint) for uid, d in decisions] == [(0, "000000000000000a")]
    assert len(skipped) == 1 and skipped[0].startswith("000000000000000b: no decision: ")
    assert "max_spread" in skipped[0]


def test_per_job_limits_are_each_users_least_over_their_associations():
    from slurm_synergy.slurm import JobLimit, parse_job_limits

    text = ("root||\n"
            "root|root|\n"
            "small||cpu=4,mem=8G\n"
            "small|alice|cpu=2\n"
            "big|alice|gres/gpu=1\n"
            "big|bob|\n"
            "small|carol|mem=2000M\n")
    assert parse_job_limits(text) == {"alice": JobLimit(2, 8192, 1),
                                      "carol": JobLimit(4, 2000, 0)}


def test_a_decision_past_its_users_per_job_limit_is_left_out_naming_it(tmp_path):
    from slurm_synergy.model.engine import NodeShape
    from slurm_synergy.profiles import ProfileStore
    from slurm_synergy.decisions.table import compile_decisions
    from slurm_synergy.slurm import JobLimit

    from .test_profiles import FP, make_profile

    store = ProfileStore(tmp_path)
    store.save(make_profile())
    shape = NodeShape(16, 64000, 4)
    made, skipped = compile_decisions([store], shape, Policy())
    cpus = made[0][1].cpus
    made, skipped = compile_decisions([store], shape, Policy(),
                                      limits={store.owner: JobLimit(cpus=cpus - 1)})
    assert made == [] and skipped == [
        f"{FP}: {cpus} cores, over its user's per-job limit of {cpus - 1} (MaxTRESPerJob): "
        "Slurm would hold the job for ever, so the jobs run as asked"]
    made, _ = compile_decisions([store], shape, Policy(),
                                limits={store.owner + 1: JobLimit(cpus=1)})
    assert [d.cpus for _, d in made] == [cpus], "another user's limit changes nothing"
