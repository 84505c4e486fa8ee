"""The table compiled from a site's shared store (decisions/sync.py): whatever users put
there, sync ends within its bounds, names what it left out, keeps every user's turn, and
writes a table the shim can read. Run as root (as make test is), which owns files as any
uid it names."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from slurm_synergy.decisions import rounds as rounds_module
from slurm_synergy.decisions.sync import compile_decisions, sync
from slurm_synergy.decisions.table import Held, TableEntry, read
from slurm_synergy.model.engine import NodeShape
from slurm_synergy.model.profile import (Allocation, GpuReadings, Point, Profile,
                                         ThroughputModel, combine)
from slurm_synergy.profiles import HOLD_S, ProfileStore, Unmeasured, user_stores
from slurm_synergy.slurm import user_name

from tests.helpers import make_profile, offline_service

SHAPE = NodeShape(16, 64000, 4)
VICTIM, ATTACKER = 1000, 1001
FP = "0123456789abcdef"


@pytest.fixture(autouse=True)
def as_root():
    assert os.geteuid() == 0, "run the tests as root, as make test does"


def folder(site: Path, name: str, uid: int) -> Path:
    path = site / name
    path.mkdir(mode=0o700)
    os.chown(path, uid, 0)
    return path


def file_as(path: Path, uid: int, text: str | bytes) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    os.chown(path, uid, 0)
    return path


def saved(site: Path, uid: int, profile: Profile) -> Path:
    where = site / str(uid)
    if not where.exists():
        folder(site, str(uid), uid)
    return file_as(where / f"{profile.fingerprint}.json", uid, profile.to_json())


class Clock:
    """A clock that moves only as the test says: each profile read costs `step` s."""

    def __init__(self, step: float = 0.0):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_a_profile_too_noisy_to_decide_is_left_out_with_its_reason(tmp_path):
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
    done = compile_decisions([store], offline_service(NodeShape(2, 8000, 1)))
    assert [(o.uid, o.decision.fingerprint) for o in done.owned] == [(0, "000000000000000a")]
    assert len(done.skipped) == 1 and done.skipped[0].startswith("000000000000000b (uid 0): ")
    assert "max_spread" in done.skipped[0]


def assoc(user: str, cpus: int = 0, qos: str = "normal") -> list[str]:
    """An association row as sacctmgr prints it (limits.ASSOC_FIELDS)."""
    return ["users", user, "", qos, "", f"cpu={cpus}" if cpus else "", "", ""]


def test_a_decision_past_its_users_association_or_qos_limit_is_refused_naming_it(tmp_path):
    saved(tmp_path, VICTIM, make_profile())
    stores, _ = user_stores(tmp_path)
    free = compile_decisions(stores, offline_service(SHAPE))
    cpus = free.owned[0].decision.cpus
    me = user_name(VICTIM)
    for assocs, qos in (([assoc(me, cpus - 1)], None),
                        ([assoc(me, qos="tight")], [["tight", f"cpu={cpus - 1}", "", "", ""]]),
                        ([assoc(me, qos="tight")], [["tight", "", "", f"cpu={cpus - 1}", ""]]),
                        ([assoc(me, qos="tight")], [["tight", "", "", "", f"cpu={cpus - 1}"]])):
        done = compile_decisions(stores, offline_service(SHAPE, assocs=assocs, qos=qos))
        assert done.owned == [], (assocs, qos)
        assert f"{cpus} cores, over {cpus - 1}, the most one job of {me} may have" in \
            done.skipped[0] and "Slurm would hold the job for ever" in done.skipped[0]
    # Another user's limit changes nothing; a user accounting does not know gets none.
    done = compile_decisions(stores, offline_service(SHAPE, assocs=[assoc(me), assoc("x", 1)]))
    assert [o.decision.cpus for o in done.owned] == [cpus]
    done = compile_decisions(stores, offline_service(SHAPE, assocs=[assoc("x")]))
    assert done.owned == [] and f"accounting has no association of {me}" in done.skipped[0]


def test_users_are_read_in_turns_so_a_flood_delays_no_one_past_a_turn(tmp_path):
    # The attacker's uid sorts first and holds 300 valid profiles; each read costs a
    # second of the sync's 20: the victim's one profile is still read in the first turn.
    for n in range(300):
        saved(tmp_path, 999, replace(make_profile(), fingerprint=f"{n:016x}"))
    saved(tmp_path, VICTIM, make_profile())
    stores, _ = user_stores(tmp_path)
    done = compile_decisions(stores, offline_service(SHAPE), budget_s=20.0,
                             user_budget_s=1e9, clock=Clock(0.5))
    assert (VICTIM, FP) in {(o.uid, o.decision.fingerprint) for o in done.owned}
    assert any("profile(s) not reached within the sync's 20 s" in s and "/999:" in s
               for s in done.skipped), done.skipped


def test_a_users_own_share_of_time_and_bytes_bounds_them_alone(tmp_path):
    for n in range(50):
        saved(tmp_path, ATTACKER, replace(make_profile(), fingerprint=f"{n:016x}"))
    saved(tmp_path, VICTIM, make_profile())
    stores, _ = user_stores(tmp_path)
    done = compile_decisions(stores, offline_service(SHAPE), user_budget_s=3.0,
                             clock=Clock(0.5))
    assert (VICTIM, FP) in {(o.uid, o.decision.fingerprint) for o in done.owned}
    assert sum(o.uid == ATTACKER for o in done.owned) < 50
    assert any("past the 3 s a user's profiles may take" in s for s in done.skipped)
    size = (tmp_path / str(VICTIM) / f"{FP}.json").stat().st_size
    done = compile_decisions(stores, offline_service(SHAPE), user_bytes=10 * size)
    assert sum(o.uid == ATTACKER for o in done.owned) == 10
    assert any("past the 0 MiB a user's profiles may take" in s for s in done.skipped)


@pytest.mark.parametrize("name", ["¹", "０" + str(VICTIM)[1:], f"0{VICTIM}", f"00{VICTIM}",
                                  f"+{VICTIM}", f" {VICTIM}", f"{VICTIM}\n", "99999999999",
                                  "٣"])
def test_only_a_canonical_decimal_uid_names_a_users_folder(tmp_path, name):
    """A superscript one made sync raise (int("¹") fails though "¹".isdigit()), and zero-
    padded or other-script digits were extra stores of one user, each with caps of its
    own, sorted before every real uid."""
    saved(tmp_path, VICTIM, make_profile())
    alias = folder(tmp_path, name, ATTACKER)
    file_as(alias / f"{FP}.json", ATTACKER, replace(make_profile(), job_name="forged").to_json())
    stores, skipped = user_stores(tmp_path)
    assert [s.owner for s in stores] == [VICTIM]
    assert len(skipped) == 1 and "not a user's folder" in skipped[0]
    assert "\n" not in skipped[0] and all(c.isascii() for c in skipped[0])
    line = sync(stores, path=tmp_path / "t.tbl", partition="gpu",
                service=offline_service(SHAPE))
    assert read(tmp_path / "t.tbl")[1][VICTIM, FP].cpus > 0, line


@pytest.mark.parametrize("field, value, why", [
    (("allocation", "procs"), int("9" * 4299), "allocation.procs: 9999999999999999999"),
    (("gpu", "power_sweep", 0, "limit_w"), 1e308, "limit_w: 1e+308 is more than"),
    (("points",), [asdict(make_profile().points[0])] * 1025, "1025 items, more than"),
])
def test_values_no_node_has_are_refused_at_reading_never_written(tmp_path, field, value, why):
    data = json.loads(make_profile().to_json())
    where = data
    for key in field[:-1]:
        where = where[key]
    where[field[-1]] = value
    folder(tmp_path, str(VICTIM), VICTIM)
    file_as(tmp_path / str(VICTIM) / f"{FP}.json", VICTIM, json.dumps(data))
    stores, _ = user_stores(tmp_path)
    done = compile_decisions(stores, offline_service(SHAPE))
    assert done.owned == [] and why in done.skipped[0], done.skipped


# --- whatever users write: sync ends, names it, and writes a table the shim reads -------

NAMES = st.text(min_size=1, max_size=40).filter(lambda n: "/" not in n and "\0" not in n
                                                 and n not in (".", ".."))
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=20)
# A real profile with one field replaced by anything JSON can hold.
PROFILE_KEYS = sorted(json.loads(make_profile().to_json()))


def mutated(key: str, value) -> str:
    data = json.loads(make_profile().to_json())
    data[key] = value
    return json.dumps(data)


CONTENT = st.one_of(st.binary(max_size=300), JSON.map(json.dumps),
                    st.tuples(st.sampled_from(PROFILE_KEYS), JSON).map(lambda kv: mutated(*kv)))


@seed(56)
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(folders=st.lists(st.tuples(NAMES, st.sampled_from([VICTIM, ATTACKER, 0])),
                        max_size=4),
       files=st.lists(st.tuples(st.sampled_from(["own", "alias"]), NAMES, CONTENT),
                      max_size=6))
def test_sync_never_raises_on_what_users_wrote(folders, files):
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        saved(site, VICTIM, make_profile())
        made = []
        for name, uid in folders:
            try:
                made.append(folder(site, name, uid))
            except (FileExistsError, OSError):
                continue
        for where, name, content in files:
            target = (site / str(VICTIM)) if where == "own" or not made else made[0]
            for candidate in (name, f"{name}.json", f"{FP[:-1]}{len(name) % 10}.json"):
                try:
                    file_as(target / candidate, VICTIM if where == "own" else ATTACKER, content)
                except OSError:
                    continue
        stores, _ = user_stores(site)
        line = sync(stores, path=site / "t.tbl", partition="gpu",
                    service=offline_service(SHAPE))
        _, entries = read(site / "t.tbl")
        # The victim's own untouched profile keeps its decision, whatever else is there.
        assert entries[VICTIM, FP].cpus > 0, line
        # Every name is shown escaped: no line of sync's output is a user's own text.
        assert line.isascii() and all(s.startswith("  ") for s in line.splitlines()[1:])


def test_the_timer_logs_each_change_once_and_outlives_a_failed_round(monkeypatch):
    from slurm_synergy.decisions import sync as syncmod
    from slurm_synergy.model.errors import SynergyError
    said = iter(["table: 0", "table: 0", SynergyError("slurmctld down"), "table: 1"])

    def one_round(**_):
        line = next(said)
        if isinstance(line, Exception):
            raise line
        return line

    class Done(Exception):
        pass

    rounds = []

    def sleep(seconds):
        rounds.append(seconds)
        if len(rounds) == 4:
            raise Done

    monkeypatch.setattr(syncmod, "sync", one_round)
    monkeypatch.setattr(rounds_module.time, "sleep", sleep)
    logged: list[str] = []
    with pytest.raises(Done):
        syncmod.keep_syncing(7.5, log=logged.append)
    assert rounds == [7.5] * 4
    assert [line.split(" ", 1)[1] for line in logged] == [
        "table: 0", "round failed: SynergyError: slurmctld down", "table: 1"]


def test_a_workload_whose_marked_run_measured_nothing_is_held_in_its_users_name(tmp_path):
    # The victim's hold, as the supervisor files it (as that user), and what an attacker
    # puts in the victim's name or their own: a link, a FIFO, a file of another uid, a
    # name that is no fingerprint, a hold of a workload the attacker has a decision for.
    victim = folder(tmp_path, str(VICTIM), VICTIM)
    attacker = folder(tmp_path, str(ATTACKER), ATTACKER)
    held = "00000000000000aa"
    file_as(victim / f"{held}.unmeasured.json", VICTIM,
            Unmeasured(held, "no training step seen in 300s", "7", "t").to_json())
    file_as(victim / f"{'b' * 16}.unmeasured.json", ATTACKER, "{}")       # not the victim's
    (victim / f"{'c' * 16}.unmeasured.json").symlink_to(victim / f"{held}.unmeasured.json")
    os.mkfifo(attacker / f"{'d' * 16}.unmeasured.json")
    file_as(attacker / "x.unmeasured.json", ATTACKER, "")
    file_as(attacker / f"{FP}.unmeasured.json", ATTACKER, b"\xff" * 10_000)
    saved(tmp_path, ATTACKER, make_profile())           # decided: the hold is dropped
    stores, _ = user_stores(tmp_path)
    done = compile_decisions(stores, offline_service(SHAPE))
    assert [(h.uid, h.fingerprint) for h in done.held] == [(VICTIM, held)]
    table = tmp_path / "t.tbl"
    line = sync(stores, service=offline_service(SHAPE), path=table, partition="p")
    assert "1 workload(s) held" in line, line
    _, entries = read(table)
    assert entries[VICTIM, held] == Held(VICTIM, held)
    assert isinstance(entries[ATTACKER, FP], TableEntry)
    # A hold lasts HOLD_S from when it was written; a saved profile ends it at once.
    store = ProfileStore(victim, VICTIM)
    assert store.is_held(held) and not store.is_held(held, now=time.time() + HOLD_S)
    assert store.held(now=time.time() + HOLD_S) == []
    assert [(fp, r.why if r else None) for fp, r in store.holds()] == [
        (held, "no training step seen in 300s")]
    store.save(replace(make_profile(), fingerprint=held))
    assert not store.is_held(held) and store.held() == []


def test_a_hold_file_that_is_not_a_hold_is_shown_as_unreadable(tmp_path):
    store = ProfileStore(tmp_path)
    (tmp_path / f"{FP}.unmeasured.json").write_text('{"fingerprint": "x"}')
    assert store.holds() == [(FP, None)]
    assert store.forget(FP) and not store.forget(FP) and store.holds() == []
