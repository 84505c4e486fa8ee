"""The profile store: one JSON file per workload fingerprint, in a folder of the user's own.

Without a site store, that folder is profiles/ in the user's synergy home. A site shares
one store by pointing SYNERGY_PROFILES at a folder every user may create a folder in
(mode 1777, as /tmp; the local cluster has one in its state folder); each user's
profiles go to <store>/<uid>/, mode 0700, so that a profile belongs to the user who
measured it: the table sync compiles a folder's profiles for that uid's jobs alone, and
only from regular files that uid owns (docs/install.md).
Profiles are read while profilers write new ones, so they are written whole (temporary
file + rename), readable by their owner alone (they hold the user's command line).

Beside them, a hold (<fingerprint>.unmeasured.json) says that a workload's marked run had
nothing to measure (no training step, processes on cores of their own): the table sync
gives it a `none` entry, so its jobs are not marked for measuring run after run, until
HOLD_S after the hold was written, a profile of it is saved, or its user forgets it
(`synergy profiles --forget`). The sync reads only its name and times, never its text.
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from slurm_synergy import paths
from slurm_synergy.fileio import (UntrustedFile, atomic_write_text, private_folder,
                                  read_untrusted, shown)
from slurm_synergy.model.comment import FINGERPRINT_RE
from slurm_synergy.model.profile import Profile, ProfileError
from slurm_synergy.model.profile_read import profile_from_json

MAX_PROFILE_BYTES = 1 << 20      # a profile is a few kB
# A user's folder is listed up to this many names: listing a folder of millions would
# spend the sync's time on one user (a profile per workload, so a few hundred at most).
MAX_NAMES_LISTED = 20000
PROFILE_MODE = 0o600
# A profile set aside once a run of its workload read another program: kept to read,
# no longer one that decisions come from (its name is no fingerprint's).
SUPERSEDED = ".superseded.json"
USER_FOLDER_MODE = 0o700
HOLD = ".unmeasured.json"
HOLD_S = 7 * 86400.0        # a week: a script's next version, a longer run, measured then
MAX_HOLD_BYTES = 4096


@dataclass(frozen=True)
class Unmeasured:
    """Why a workload's marked run measured nothing: written by the in-run supervisor as
    the job's user, shown by `synergy profiles`."""

    fingerprint: str
    why: str
    job_id: str
    at: str                     # when, ISO 8601 UTC

    def to_json(self) -> str:
        """The hold as its file holds it."""
        return json.dumps(asdict(self), sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "Unmeasured":
        """A hold from its file's text; ValueError where it is not one."""
        data = json.loads(text)
        if not isinstance(data, dict) or set(data) != {"fingerprint", "why", "job_id", "at"} \
                or not all(isinstance(v, str) for v in data.values()):
            raise ValueError("not a hold record")
        return cls(**data)


def hold_note(fingerprint: str) -> str:
    """What a job's log says once its workload is held."""
    return (f"its next jobs are not marked for measuring for {HOLD_S / 86400:.0f} days "
            f"(`synergy profiles --forget {fingerprint}` measures the next one)")


def site_store_root() -> Path | None:
    """The site's shared store, or None when each user keeps their own: SYNERGY_PROFILES
    ("" for none), else, on the local cluster, the store its `cluster up` made."""
    env = os.environ.get("SYNERGY_PROFILES")
    if env is not None:
        return Path(env).resolve() if env else None
    if paths.on_local_cluster():
        local = paths.local_profile_store()
        return local if local.is_dir() else None
    return None


def store_dir() -> Path:
    """This user's profile folder: <uid>/ in the site's store, else profiles/ in the
    user's synergy home."""
    site = site_store_root()
    return user_folder(site) if site else paths.home_dir() / "profiles"


def user_folder(site: Path, uid: int | None = None) -> Path:
    """A user's folder (the caller's unless told) in a site's shared store."""
    return site / str(os.geteuid() if uid is None else uid)


@dataclass(frozen=True)
class ProfileStore:
    """One user's profiles: `root` holds them, and only files `owner` owns are read."""

    root: Path
    owner: int = field(default_factory=os.geteuid)

    @classmethod
    def default(cls) -> "ProfileStore":
        """This user's own store (store_dir)."""
        return cls(store_dir())

    @classmethod
    def named(cls, folder: Path) -> "ProfileStore":
        """A folder named on a command line (--store): its profiles are read as its owner's
        (an admin looking into a user's folder), never through a link."""
        folder = folder.resolve()
        try:
            return cls(folder, folder.lstat().st_uid)
        except FileNotFoundError:
            return cls(folder)

    def path(self, fingerprint: str) -> Path:
        """The profile file of `fingerprint`; ProfileError when it is not a fingerprint."""
        if not FINGERPRINT_RE.match(fingerprint):
            raise ProfileError(f"{fingerprint!r} is not a workload fingerprint "
                               "(16 hex digits, as in the job comment synergy:fp=...)")
        return self.root / f"{fingerprint}.json"

    def has(self, fingerprint: str) -> bool:
        """Whether a profile of `fingerprint` is there, as a regular file (a link is not)."""
        try:
            return stat.S_ISREG(self.path(fingerprint).lstat().st_mode)
        except FileNotFoundError:
            return False

    def load(self, fingerprint: str) -> Profile:
        """The profile of `fingerprint`; ProfileError where it is missing, not the owner's, or
        holds another fingerprint."""
        path = self.path(fingerprint)
        try:
            text = read_untrusted(path, MAX_PROFILE_BYTES, self.owner)
        except FileNotFoundError:
            raise ProfileError(f"no profile for {fingerprint} in {self.root}") from None
        except UntrustedFile as e:
            raise ProfileError(str(e)) from None
        profile = profile_from_json(text, str(path))
        if profile.fingerprint != fingerprint:
            raise ProfileError(f"profile {path} holds fingerprint {profile.fingerprint}, "
                               f"not {fingerprint}")
        return profile

    def save(self, profile: Profile) -> Path:
        """Write the profile (0600) into the store, made first where needed; returns its
        path. A hold of its workload goes: it is measured now."""
        self.claim()
        path = self.path(profile.fingerprint)
        atomic_write_text(path, profile.to_json(), PROFILE_MODE)
        self.forget(profile.fingerprint)
        return path

    def hold_path(self, fingerprint: str) -> Path:
        """The hold file of `fingerprint`; ProfileError when it is not a fingerprint."""
        return self.path(fingerprint).with_name(f"{fingerprint}{HOLD}")

    def hold(self, record: Unmeasured) -> Path:
        """File the hold of a workload whose marked run measured nothing (0600)."""
        self.claim()
        path = self.hold_path(record.fingerprint)
        atomic_write_text(path, record.to_json(), PROFILE_MODE)
        return path

    def forget(self, fingerprint: str) -> bool:
        """Remove the workload's hold; whether there was one."""
        try:
            os.unlink(self.hold_path(fingerprint))
        except FileNotFoundError:
            return False
        return True

    def _holding(self, st: os.stat_result, now: float | None) -> bool:
        """Whether a hold file's lstat makes it one that still holds: a regular file of
        the store's owner, changed less than HOLD_S ago (a time nobody sets back)."""
        return stat.S_ISREG(st.st_mode) and st.st_uid == self.owner and \
            (time.time() if now is None else now) - st.st_ctime < HOLD_S

    def held(self, most: int | None = None, now: float | None = None) -> list[str]:
        """The fingerprints of the holds filed here that still hold (`_holding`), from
        their names and times alone (the sync reads no hold's text); up to `most` names
        looked at."""
        now = time.time() if now is None else now
        out: list[str] = []
        try:
            with os.scandir(self.root) as it:
                for n, entry in enumerate(it):
                    if most is not None and n >= most:
                        break
                    fp = entry.name[:-len(HOLD)]
                    if not entry.name.endswith(HOLD) or not FINGERPRINT_RE.fullmatch(fp):
                        continue
                    if self._holding(entry.stat(follow_symlinks=False), now):
                        out.append(fp)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(out)

    def is_held(self, fingerprint: str, now: float | None = None) -> bool:
        """Whether a hold of `fingerprint` still holds (as `held` tells one)."""
        try:
            return self._holding(self.hold_path(fingerprint).lstat(), now)
        except FileNotFoundError:
            return False

    def holds(self) -> list[tuple[str, Unmeasured | None]]:
        """Each hold that still holds with its record, None where the file is not one."""
        return [(fp, self.hold_of(fp)) for fp in self.held()]

    def hold_of(self, fingerprint: str) -> Unmeasured | None:
        """The record of `fingerprint`'s hold file; None where there is none, or it is not
        one of this workload (whether it still holds is `is_held`'s to say)."""
        try:
            text = read_untrusted(self.hold_path(fingerprint), MAX_HOLD_BYTES, self.owner)
            record = Unmeasured.from_json(text)
        except (OSError, UntrustedFile, ValueError):
            return None
        return record if record.fingerprint == fingerprint else None

    def retire(self, fingerprint: str) -> Path | None:
        """Set the profile aside as <fingerprint>.superseded.json; None when it is gone
        already (another job of the workload set it aside first)."""
        aside = self.root / f"{fingerprint}{SUPERSEDED}"
        try:
            os.replace(self.path(fingerprint), aside)
        except FileNotFoundError:
            return None
        return aside

    def claim(self) -> None:
        """Make the folder (mode 0700 in a site's store), or ProfileError when a folder
        there is not this user's own: someone else's could be read or swapped by them."""
        site = site_store_root()
        if site is None or self.root.parent != site:
            private_folder(self.root)
            return
        try:
            os.mkdir(self.root, USER_FOLDER_MODE)
        except FileExistsError:
            pass
        except FileNotFoundError:
            # The site makes its store (mode 1777): a user who made it would own it, and
            # could remove the other users' folders from it.
            raise ProfileError(f"the site's profile store {site} does not exist; the site "
                               "makes it (docs/install.md)") from None
        except OSError as e:
            raise ProfileError(f"cannot make the profile folder {self.root}: {e.strerror}") \
                from None
        st = self.root.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise ProfileError(f"{self.root} is not a folder of uid {os.geteuid()} (it belongs "
                               f"to uid {st.st_uid}); no profile is kept there: ask the site "
                               "to remove it")
        if stat.S_IMODE(st.st_mode) != USER_FOLDER_MODE:
            # Opened up by hand: others could remove or read what is filed here.
            os.chmod(self.root, USER_FOLDER_MODE)

    def fingerprints(self) -> list[str]:
        """The fingerprints filed here, by name: what each file is, load() checks."""
        return self.listed()[0]

    def listed(self, most: int | None = None) -> tuple[list[str], bool]:
        """The fingerprints filed here (sorted), and whether the folder holds more names
        than the `most` looked at (listing stops there)."""
        names: list[str] = []
        more = False
        try:
            with os.scandir(self.root) as it:
                for n, entry in enumerate(it):
                    if most is not None and n >= most:
                        more = True
                        break
                    if entry.name.endswith(".json"):
                        names.append(entry.name[:-5])
        except (FileNotFoundError, NotADirectoryError):
            return [], False
        return sorted(n for n in names if FINGERPRINT_RE.fullmatch(n)), more

    def __iter__(self) -> Iterator[Profile]:
        for fp in self.fingerprints():
            yield self.load(fp)


def uid_named(name: str) -> int | None:
    """The uid a user's folder is named for: its canonical ASCII decimal form alone (no
    sign, no leading zero, no other script's digits), so that each uid has one folder and
    no name stands for another's; None for any other name."""
    if not (name.isascii() and name.isdigit()) or len(name) > 10:
        return None
    uid = int(name)
    return uid if str(uid) == name and uid < 1 << 32 else None


def user_stores(root: Path) -> tuple[list[ProfileStore], list[str]]:
    """Each user's folder in a site's store, by uid, with what was left out and why: a
    folder counts only when its name is a uid written canonically (uid_named) and it is a
    real folder (not a link) owned by that uid."""
    stores, skipped = [], []
    try:
        with os.scandir(root) as it:
            entries = list(it)
    except OSError as e:
        return [], [f"{shown(root)}: not read: {e.strerror}"]
    for entry in sorted(entries, key=lambda e: e.name):
        if entry.name.startswith("."):
            continue
        where = shown(entry.path)
        uid = uid_named(entry.name)
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError as e:
            skipped.append(f"{where}: not read: {e.strerror}")
            continue
        if uid is None or not stat.S_ISDIR(st.st_mode):
            skipped.append(f"{where}: not a user's folder (a folder named for its uid, "
                           "in decimal digits)")
        elif st.st_uid != uid:
            skipped.append(f"{where}: owned by uid {st.st_uid}, not uid {uid}")
        else:
            stores.append(ProfileStore(user_folder(root, uid), uid))
    return sorted(stores, key=lambda s: s.owner), skipped


def stores_to_compile() -> tuple[list[ProfileStore], list[str]]:
    """What the decision table is compiled from: every user's folder of the site's store,
    else the caller's own profiles."""
    site = site_store_root()
    return user_stores(site) if site else ([ProfileStore.default()], [])
