"""A site's shared profile store holds files any user may have written: each user's
profiles size that user's jobs alone, and no file (a forgery, a FIFO, a deep JSON, a
sparse giant, a link, a flood) can stall the table's compiling or change another user's
decision. Run as root (as make test is), which owns files as any uid it names."""

import os
import shutil
import signal
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_synergy.fileio import locked
from slurm_synergy.model.engine import NodeShape
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.policy import Policy
from slurm_synergy.model.profile import ProfileError
from slurm_synergy.profiles import MAX_NAMES_LISTED, MAX_PROFILE_BYTES, ProfileStore, user_stores
from slurm_synergy.decisions.service import group_members
from slurm_synergy.decisions.sync import compile_decisions
from slurm_synergy.decisions.table import MAX_PER_USER
from slurm_synergy.slurm import user_name

from tests.helpers import make_profile, offline_service

ROOT = Path(__file__).resolve().parents[2]
VICTIM, ATTACKER = 1000, 1001
FP = "0123456789abcdef"
SHAPE = NodeShape(16, 64000, 4)


@pytest.fixture(autouse=True)
def as_root():
    assert os.geteuid() == 0, "run the tests as root, as make test does"
    # Whatever a test leaves open, a blocked read fails it instead of hanging the suite.
    signal.alarm(60)
    yield
    signal.alarm(0)


def user_folder(site, uid, owner=None):
    folder = site / str(uid)
    folder.mkdir(mode=0o700)
    os.chown(folder, owner if owner is not None else uid, 0)
    return folder


def saved(folder, uid, profile):
    path = ProfileStore(folder, 0).save(profile)
    os.chown(path, uid, 0)
    return path


def compiled(stores, policy=None, **caps):
    """compile_decisions over `stores` as (uid, decision) pairs, and what it left out."""
    done = compile_decisions(stores, offline_service(SHAPE, policy), **caps)
    return [(o.uid, o.decision) for o in done.owned], done.skipped


def decisions(site):
    stores, skipped = user_stores(site)
    made, left_out = compiled(stores)
    return {(uid, d.fingerprint): d for uid, d in made}, skipped + left_out


def test_each_users_profile_sizes_that_users_jobs_alone(tmp_path):
    victim = user_folder(tmp_path, VICTIM)
    attacker = user_folder(tmp_path, ATTACKER)
    saved(victim, VICTIM, make_profile())
    # The attacker's forgery of the victim's workload: same fingerprint, one core
    # ten times faster. Filed under the attacker, it sizes the attacker's jobs only.
    honest = make_profile()
    forged = replace(honest, points=tuple(
        replace(p, samples_per_s=p.samples_per_s * 10) if p.cores == 1 else p
        for p in honest.points))
    saved(attacker, ATTACKER, forged)
    made, skipped = decisions(tmp_path)
    assert set(made) == {(VICTIM, FP), (ATTACKER, FP)} and not skipped
    alone = decisions_of_victim_alone(tmp_path)
    assert made[VICTIM, FP] == alone


def decisions_of_victim_alone(site):
    folder = site / str(VICTIM)
    made, _ = compiled([ProfileStore(folder, VICTIM)])
    return made[0][1]


def test_a_forgery_in_the_victims_folder_is_left_out_and_named(tmp_path):
    victim = user_folder(tmp_path, VICTIM)
    victim.chmod(0o777)                  # a careless user's folder
    saved(victim, ATTACKER, make_profile())
    made, skipped = decisions(tmp_path)
    assert made == {} and f"owned by uid {ATTACKER}, not uid {VICTIM}" in skipped[0]


def test_a_folder_squatted_or_linked_under_the_victims_uid_counts_for_nobody(tmp_path):
    squat = user_folder(tmp_path, VICTIM, owner=ATTACKER)
    saved(squat, ATTACKER, make_profile())
    elsewhere = user_folder(tmp_path, ATTACKER)
    (tmp_path / "1002").symlink_to(elsewhere)
    (tmp_path / "notes").mkdir()
    stores, skipped = user_stores(tmp_path)
    assert [s.owner for s in stores] == [ATTACKER]
    assert any(f"{squat}: owned by uid {ATTACKER}, not uid {VICTIM}" in s for s in skipped)
    assert any("1002: not a user's folder" in s for s in skipped)
    assert any("notes: not a user's folder" in s for s in skipped)


@pytest.mark.parametrize("kind,why", [
    ("fifo", "not a regular file"),
    ("deep json", "nests deeper than a profile does"),
    ("sparse 50 GB", f"over the {MAX_PROFILE_BYTES} a reader takes"),
    ("link to /dev/zero", "is a link"),
    ("folder", "not a regular file"),
])
def test_a_hostile_file_is_left_out_named_and_stalls_nothing(tmp_path, kind, why):
    victim = user_folder(tmp_path, VICTIM)
    saved(victim, VICTIM, make_profile())
    attacker = user_folder(tmp_path, ATTACKER)
    path = attacker / "fedcba9876543210.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "deep json":
        path.write_text("[" * 200000 + "]" * 200000)
    elif kind == "sparse 50 GB":
        with open(path, "wb") as fh:
            fh.truncate(50 << 30)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    os.chown(path, ATTACKER, 0, follow_symlinks=False)
    start = time.monotonic()
    made, skipped = decisions(tmp_path)
    assert set(made) == {(VICTIM, FP)}
    assert len(skipped) == 1 and str(path) in skipped[0] and why in skipped[0], skipped
    assert time.monotonic() - start < 30      # the alarm's bound, never reached


def test_a_flood_of_files_is_capped_per_user_and_the_others_keep_theirs(tmp_path):
    victim = user_folder(tmp_path, VICTIM)
    saved(victim, VICTIM, make_profile())
    attacker = user_folder(tmp_path, ATTACKER)
    for n in range(200000):
        fd = os.open(attacker / f"{n:016x}.json", os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
    made, skipped = decisions(tmp_path)
    assert set(made) == {(VICTIM, FP)}
    # Listing stops at MAX_NAMES_LISTED names; of those, MAX_PER_USER are read, and each
    # is refused on its own, by its owner's check.
    assert f"{attacker}: more than {MAX_NAMES_LISTED} names; the rest not looked at" == \
        skipped[0]
    assert f"{MAX_NAMES_LISTED - MAX_PER_USER} profile(s) past the cap" in skipped[1]
    assert len(skipped) == 2 + MAX_PER_USER


def test_a_sync_past_its_budget_leaves_the_rest_out_and_says_so(tmp_path):
    victim = user_folder(tmp_path, VICTIM)
    saved(victim, VICTIM, make_profile())
    stores, _ = user_stores(tmp_path)
    made, skipped = compiled(stores, budget_s=0.0)
    assert made == [] and "1 profile(s) not reached within the sync's 0 s" in skipped[0]


def test_a_held_table_lock_is_given_up_on_not_waited_for_for_ever(tmp_path):
    lock = tmp_path / ".t.lock"
    with locked(lock):
        pid = os.fork()
        if pid == 0:
            try:
                with locked(lock, wait_s=0.5):
                    os._exit(0)
            except SynergyError as e:
                os._exit(7 if "stayed held" in str(e) else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 7
    assert oct(lock.stat().st_mode & 0o777) == "0o600"


def test_a_users_folder_someone_else_made_is_refused_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNERGY_PROFILES", str(tmp_path))
    user_folder(tmp_path, os.geteuid(), owner=ATTACKER)
    with pytest.raises(ProfileError, match=f"belongs to uid {ATTACKER}"):
        ProfileStore.default().save(make_profile())


def test_a_users_own_folder_and_profiles_are_theirs_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNERGY_PROFILES", str(tmp_path))
    store = ProfileStore.default()
    path = store.save(make_profile())
    assert store.root == tmp_path / str(os.geteuid())
    assert oct(store.root.stat().st_mode & 0o777) == "0o700"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert store.load(FP) == make_profile()


def test_a_users_folder_opened_up_by_hand_is_closed_again_at_the_next_profile(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("SYNERGY_PROFILES", str(tmp_path))
    user_folder(tmp_path, os.geteuid()).chmod(0o777)
    ProfileStore.default().save(make_profile())
    assert oct((tmp_path / str(os.geteuid())).stat().st_mode & 0o777) == "0o700"


def test_a_site_store_nobody_made_is_named_not_made_by_the_first_user(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNERGY_PROFILES", str(tmp_path / "missing"))
    with pytest.raises(ProfileError, match="does not exist; the site makes it"):
        ProfileStore.default().save(make_profile())
    assert not (tmp_path / "missing").exists()


def as_user(uid, action) -> str:
    """`action()` run in a child process as `uid` (root forks it and drops to it); what it
    returns, or the name and message of what it raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            out = str(action())
        except BaseException as e:      # the child reports everything, then exits
            out = f"{type(e).__name__}: {e}"
        os.write(write, out.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        out = fh.read()
    os.waitpid(pid, 0)
    return out


@pytest.fixture
def open_tmp():
    """A folder other users can reach (pytest's own is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="synergy-test-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


@pytest.fixture
def site_policy(open_tmp, monkeypatch) -> Path:
    """The site's policy where every user can read it, as on a cluster (a checkout, and so
    its own etc/policy.toml, may be root's alone: mktemp makes CI's clone 0700)."""
    policy = open_tmp / "policy.toml"
    shutil.copy(ROOT / "etc" / "policy.toml", policy)
    policy.chmod(0o644)
    monkeypatch.setenv("SYNERGY_POLICY", str(policy))
    return policy


@pytest.fixture
def site(open_tmp, monkeypatch):
    """A site's store as docs/install.md makes it: root's, mode 1777."""
    site = open_tmp / "profiles"
    site.mkdir()
    site.chmod(0o1777)
    monkeypatch.setenv("SYNERGY_PROFILES", str(site))
    return site


def test_as_users_each_files_their_own_and_cannot_touch_the_others(site):
    assert as_user(VICTIM, lambda: ProfileStore.default().save(make_profile())) == \
        str(site / str(VICTIM) / f"{FP}.json")
    victim = ProfileStore(site / str(VICTIM), VICTIM)

    # What a hostile user would do by hand, not through this package's checks.
    def forge():
        (victim.root / f"{FP}.json").write_text("{}")

    def hold_lock():
        return open(victim.root / f".{FP}.lock", "a")

    def squat_later():
        return os.mkdir(site / str(VICTIM))

    assert as_user(ATTACKER, forge).startswith("PermissionError")
    assert as_user(ATTACKER, hold_lock).startswith("PermissionError")
    assert as_user(ATTACKER, squat_later).startswith("FileExistsError")
    assert as_user(ATTACKER, lambda: ProfileStore.default().save(make_profile())) == \
        str(site / str(ATTACKER) / f"{FP}.json")
    made, skipped = decisions(site)
    assert set(made) == {(VICTIM, FP), (ATTACKER, FP)} and not skipped


def test_a_profiling_job_that_cannot_write_the_table_logs_it_and_goes_on(open_tmp, site_policy,
                                                                        monkeypatch):
    from slurm_synergy.measure.lock import sync_decisions
    table = open_tmp / "synergy-decisions.tbl"
    table.write_text("root's\n")
    monkeypatch.setenv("SYNERGY_DECISIONS", str(table))
    lines: list[str] = []

    def sync_as_user():
        sync_decisions(lines.append)
        return "\n".join(lines)

    out = as_user(VICTIM, sync_as_user)
    assert "decision table not updated" in out and "belongs to uid 0" in out, out
    assert table.read_text() == "root's\n"


def test_a_local_cluster_in_a_folder_the_user_cannot_enter_is_not_theirs(tmp_path, site_policy,
                                                                         monkeypatch):
    """A checkout root keeps to itself (mode 0700, as mktemp makes one) with its local
    cluster up: a user's process there finds no slurm.conf of its own, and a profiling
    job's best-effort sync says why it did nothing instead of failing the job. Once, the
    unreadable path raised PermissionError from the config lookup; now no lookup goes
    there unless SLURM_CONF names it."""
    from slurm_synergy import paths
    from slurm_synergy.measure.lock import sync_decisions
    (tmp_path / "state" / "etc").mkdir(parents=True)
    (tmp_path / "state" / "etc" / "slurm.conf").write_text("ClusterName=root-only\n")
    tmp_path.chmod(0o700)
    monkeypatch.setenv("SYNERGY_STATE", str(tmp_path / "state"))
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.delenv("SYNERGY_DECISIONS", raising=False)
    assert as_user(VICTIM, paths.slurm_conf) == "None"
    lines: list[str] = []

    def sync_as_user():
        sync_decisions(lines.append)
        return "\n".join(lines)

    out = as_user(VICTIM, sync_as_user)
    # Slurm's own default config, which this machine lacks: one line, the job goes on.
    assert out.startswith("offline_profiler: decision table not updated: sinfo failed"), out


def assoc(user: str, cpus: int = 0) -> list[str]:
    """An association row as sacctmgr prints it (sacctmgr.ASSOC_FIELDS), with a per-job
    core limit where `cpus`."""
    return ["users", user, "", "normal", "", f"cpu={cpus}" if cpus else "", "", ""]


def test_a_group_the_site_names_shares_its_members_decisions_and_no_one_elses(tmp_path):
    member, outsider, other_member = VICTIM, ATTACKER, 1002
    saved(user_folder(tmp_path, member), member, make_profile())
    saved(user_folder(tmp_path, outsider), outsider, make_profile())
    # other_member's own profile of the workload, told apart by its name.
    own = replace(make_profile(), job_name="other-members-own")
    saved(user_folder(tmp_path, other_member), other_member, own)
    stores, _ = user_stores(tmp_path)
    group = {"lab": {member, other_member, 1003}}

    def owned(policy, assocs=None):
        service = offline_service(SHAPE, policy, groups=group, assocs=assocs)
        return {o.uid: o for o in compile_decisions(stores, service).owned}

    alone = owned(Policy())
    assert set(alone) == {member, outsider, other_member} and not any(
        o.shared for o in alone.values())
    got = owned(Policy(share_group="lab"))
    # 1003 has no profile: it gets the lowest member's, marked shared (it may only grow
    # 1003's jobs); other_member keeps its own; the outsider's sizes no member.
    assert set(got) == {member, outsider, other_member, 1003}
    assert got[1003].shared and got[1003].decision == alone[member].decision
    assert got[other_member] == alone[other_member] and not got[other_member].shared
    assert got[other_member].decision.job_name == "other-members-own"
    # A site that trusts its members' profiles as their own says so.
    assert not owned(Policy(share_group="lab", shared_may_shrink=True))[1003].shared
    # A member whose per-job limit the decision is past gets no share of it.
    cpus = alone[member].decision.cpus
    limited = owned(Policy(share_group="lab"),
                    [assoc(user_name(u)) for u in (member, outsider, other_member)]
                    + [assoc(user_name(1003), cpus - 1)])
    assert 1003 not in limited and set(limited) == {member, outsider, other_member}


def test_share_group_is_off_unless_named_and_unknown_group_or_users_are_named(tmp_path):
    from slurm_synergy.decisions.sync import sync
    assert Policy().share_group == ""
    saved(user_folder(tmp_path, VICTIM), VICTIM, make_profile())
    stores, _ = user_stores(tmp_path)
    made, skipped = compiled(stores, Policy(share_group="no-such-group-x"))
    assert [uid for uid, _ in made] == [VICTIM]
    assert skipped == ["share_group 'no-such-group-x': no such group, so no decision is shared"]
    # A user to skip whom this host does not know is named, as the group is.
    line = sync(stores, path=tmp_path / "t.tbl", partition="gpu", service=offline_service(
        SHAPE, Policy(skip_users=("root", "no-such-user-x"))))
    assert line.endswith("1 left out:\n  skip_users 'no-such-user-x': no such user on this "
                         "host, so no job is skipped for that name"), line
    # root's group holds root (its primary group) whatever else it lists.
    assert 0 in group_members("root")
