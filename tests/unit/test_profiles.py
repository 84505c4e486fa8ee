"""The profile record: round trip through the store, and strict refusal of bad files."""

import dataclasses
import json

import pytest

from slurm_synergy.model.profile import PROFILE_VERSION, ProfileError
from slurm_synergy.cli import main
from slurm_synergy.profiles import ProfileStore, Unmeasured
from slurm_synergy.profile_table import rows
from tests.helpers import FP, make_profile



def test_round_trip_keeps_every_field(tmp_path):
    store = ProfileStore(tmp_path)
    profile = make_profile()
    path = store.save(profile)
    assert path == tmp_path / f"{FP}.json"
    assert store.load(FP) == profile
    assert store.fingerprints() == [FP] and list(store) == [profile]
    assert profile.model.mean_error == pytest.approx((0.05 + 0.1) / 2)
    assert profile.model.max_error == pytest.approx(0.1)
    assert [p.cores for p in profile.train_points()] == [1, 2]
    # The median absolute deviation of 100, 96, 103 (3) over their median.
    assert [p.spread for p in profile.train_points()] == [None, pytest.approx(0.03)]


def test_a_profile_from_before_repeats_is_read(tmp_path):
    data = json.loads(make_profile().to_json())
    for point in data["points"]:
        del point["repeats"]
    (tmp_path / f"{FP}.json").write_text(json.dumps(data))
    assert all(p.repeats == () for p in ProfileStore(tmp_path).load(FP).points)


def test_profiles_without_optional_fields_still_load(tmp_path):
    data = json.loads(make_profile().to_json())
    del data["notes"]
    del data["gpu"]["power_sweep"]
    del data["points"][0]["anon_mb"]        # profiles from before it was measured
    del data["model"]["anon_mb"]
    (tmp_path / f"{FP}.json").write_text(json.dumps(data))
    loaded = ProfileStore(tmp_path).load(FP)
    assert loaded.notes == () and loaded.points[0].anon_mb is None
    assert loaded.model.resident_mb == loaded.model.footprint_mb


def test_a_profile_of_version_1_reads_and_is_saved_as_this_version(tmp_path):
    # Version 1 had no raised=, command_files= or slowed=; a reader of 1 alone refuses a
    # saved one by its number, not as corrupt.
    data = json.loads(make_profile().to_json())
    del data["raised"], data["command_files"], data["slowed"]
    data["version"] = 1
    (tmp_path / f"{FP}.json").write_text(json.dumps(data))
    store = ProfileStore(tmp_path)
    loaded = store.load(FP)
    assert loaded.raised == () and loaded.command_files == () and loaded.slowed == ()
    assert loaded.version == PROFILE_VERSION == 3
    store.save(loaded)
    assert json.loads((tmp_path / f"{FP}.json").read_text())["version"] == 3


def corrupt(data: dict, how: str) -> dict:
    if how == "version":
        data["version"] = 99
    elif how == "negative":
        data["points"][0]["samples_per_s"] = -1
    elif how == "nan":
        data["model"]["prep_core_s"] = float("nan")
    elif how == "missing":
        del data["allocation"]["cores"]
    elif how == "unknown":
        data["model"]["evil"] = 1
    elif how == "type":
        data["points"][0]["cores"] = "2; rm -rf /"
    elif how == "fingerprint":
        data["fingerprint"] = "../../etc/passwd"
    return data


@pytest.mark.parametrize("how,words", [
    ("version", ["version 99"]), ("negative", ["points[0].samples_per_s", "negative"]),
    ("nan", ["prep_core_s", "finite"]), ("missing", ["allocation.cores", "missing"]),
    ("unknown", ["evil"]), ("type", ["points[0].cores"]), ("fingerprint", ["16 hex"]),
])
def test_corrupt_profiles_are_refused_naming_file_and_field(tmp_path, how, words):
    data = corrupt(json.loads(make_profile().to_json()), how)
    path = tmp_path / f"{FP}.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError) as e:
        ProfileStore(tmp_path).load(FP)
    assert str(path) in str(e.value)
    for word in words:
        assert word in str(e.value)


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", "\x00\xff"])
def test_garbage_files_are_refused(tmp_path, text):
    (tmp_path / f"{FP}.json").write_text(text, errors="surrogateescape")
    with pytest.raises(ProfileError, match=FP):
        ProfileStore(tmp_path).load(FP)


def test_a_profile_under_another_name_is_refused(tmp_path):
    other = "fedcba9876543210"
    (tmp_path / f"{other}.json").write_text(make_profile().to_json())
    with pytest.raises(ProfileError, match="holds fingerprint"):
        ProfileStore(tmp_path).load(other)


@pytest.mark.parametrize("fp", ["", "xyz", "../" + FP, FP.upper(), FP + "0"])
def test_bad_fingerprints_never_become_paths(tmp_path, fp):
    with pytest.raises(ProfileError, match="fingerprint"):
        ProfileStore(tmp_path).path(fp)


def test_missing_profile_names_the_store(tmp_path):
    with pytest.raises(ProfileError, match=str(tmp_path)):
        ProfileStore(tmp_path).load(FP)
    assert not ProfileStore(tmp_path).has(FP)


def test_the_shared_store_is_the_environments_else_the_local_clusters(tmp_path, monkeypatch):
    from slurm_synergy import paths
    from slurm_synergy.profiles import site_store_root
    state = tmp_path / "state"
    (state / "etc").mkdir(parents=True)
    (state / "etc" / "slurm.conf").write_text("")
    (state / "profiles").mkdir()
    monkeypatch.setenv("SYNERGY_STATE", str(state))
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.delenv("SYNERGY_PROFILES")
    # Without SLURM_CONF naming it, the local cluster (up or once up) is not in use: a
    # site's commands never reach its store, table or cluster.
    from slurm_synergy.decisions.table import table_path
    monkeypatch.delenv("SYNERGY_DECISIONS", raising=False)
    assert paths.slurm_conf() is None and site_store_root() is None
    assert table_path() == paths.DEFAULT_SLURM_CONF.parent / "synergy-decisions.tbl"
    (state / "profiles").rmdir()
    monkeypatch.setenv("SLURM_CONF", str(state / "etc" / "slurm.conf"))
    assert site_store_root() is None                 # the cluster has not made it yet
    (state / "profiles").mkdir()
    assert site_store_root() == paths.local_profile_store() == state / "profiles"
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "site.conf"))   # a site's cluster
    assert site_store_root() is None
    monkeypatch.setenv("SYNERGY_PROFILES", str(tmp_path / "shared"))
    assert site_store_root() == tmp_path / "shared"
    monkeypatch.setenv("SYNERGY_PROFILES", "")       # each user their own, anywhere
    monkeypatch.delenv("SLURM_CONF")
    assert site_store_root() is None
    assert ProfileStore.default().root == paths.home_dir() / "profiles"


def test_a_profile_in_steps_says_so_and_keeps_it(tmp_path):
    store = ProfileStore(tmp_path)
    steps = dataclasses.replace(make_profile(), per_step=True)
    store.save(steps)
    assert store.load(FP).per_step and store.load(FP).rate_unit == "steps/s"
    row = rows([steps])[0]
    assert "(steps/s: no batch size seen)" in row["samples/s by cores"]
    # Its GPU read utilisation without power (NVML reads none on a MIG slice).
    assert row["gpu"] == "1x H100, 80% util, no power reading"
    data = json.loads(steps.to_json())
    data["per_step"] = "yes\nnote: forged"        # only true or false reads
    (tmp_path / f"{FP}.json").write_text(json.dumps(data))
    with pytest.raises(ProfileError, match="per_step"):
        store.load(FP)


def test_synergy_profiles_lists_held_workloads_and_forgets_them(tmp_path, capsys):
    store = ProfileStore(tmp_path)
    store.save(make_profile())
    held = "00000000000000aa"
    store.hold(Unmeasured(held, "no training step seen in 300s\n(forged line)", "41", "t"))
    assert main(["profiles", "--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert FP in out and "not measured (their jobs keep what they ask" in out
    # What the record says is shown on its own line, its control characters escaped.
    assert f"  {held}  job 41 at t: no training step seen in 300s\\n(forged line)" in out
    assert main(["profiles", "--store", str(tmp_path), "--forget", held]) == 0
    assert "hold dropped" in capsys.readouterr().out and store.holds() == []
    assert main(["profiles", "--store", str(tmp_path), "--forget", held]) == 1
    assert main(["profiles", "--store", str(tmp_path), "--forget"]) == 1
    assert "--forget takes the fingerprints" in capsys.readouterr().err
