"""The profile store: one JSON file per workload fingerprint, in the user's synergy home
or the folder SYNERGY_PROFILES names (a site shares one store that way). Profiles are
read by the decision engine and the reports while profilers write new ones, so they are
written whole (temporary file + rename)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from slurm_synergy import paths
from slurm_synergy.fileio import atomic_write_text
from slurm_synergy.model.profile import FINGERPRINT_RE, Profile, ProfileError, profile_from_json


def store_dir() -> Path:
    """The profile store: SYNERGY_PROFILES, else profiles/ in the user's synergy home.

    A site shares one store (on a shared filesystem) by pointing SYNERGY_PROFILES at it.
    """
    env = os.environ.get("SYNERGY_PROFILES")
    return Path(env).resolve() if env else paths.home_dir() / "profiles"


@dataclass(frozen=True)
class ProfileStore:
    root: Path

    @classmethod
    def default(cls) -> "ProfileStore":
        return cls(store_dir())

    def path(self, fingerprint: str) -> Path:
        if not FINGERPRINT_RE.match(fingerprint):
            raise ProfileError(f"{fingerprint!r} is not a workload fingerprint "
                               "(16 hex digits, as in the job comment synergy:fp=...)")
        return self.root / f"{fingerprint}.json"

    def has(self, fingerprint: str) -> bool:
        return self.path(fingerprint).is_file()

    def load(self, fingerprint: str) -> Profile:
        path = self.path(fingerprint)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ProfileError(f"no profile for {fingerprint} in {self.root}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ProfileError(f"cannot read profile {path}: {e}") from None
        profile = profile_from_json(text, str(path))
        if profile.fingerprint != fingerprint:
            raise ProfileError(f"profile {path} holds fingerprint {profile.fingerprint}, "
                               f"not {fingerprint}")
        return profile

    def save(self, profile: Profile) -> Path:
        path = self.path(profile.fingerprint)
        atomic_write_text(path, profile.to_json())
        return path

    def fingerprints(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*.json") if FINGERPRINT_RE.match(p.stem))

    def __iter__(self) -> Iterator[Profile]:
        for fp in self.fingerprints():
            yield self.load(fp)
