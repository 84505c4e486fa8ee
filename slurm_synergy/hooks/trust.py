"""What the node hooks run as root must be root's alone: their interpreter, its
site-packages, this package and the policy file they read. A file or folder that any
other user can change (or a folder above it they can swap) gives that user root on every
node, so `synergy hooks install` refuses it and says which and why."""

from __future__ import annotations

import os
import site
import stat
import sys
from pathlib import Path

import slurm_synergy

WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


def _why(path: Path, st: os.stat_result, is_ancestor: bool) -> str | None:
    if st.st_uid != 0:
        return f"{path} belongs to uid {st.st_uid}, not root"
    if stat.S_ISLNK(st.st_mode) or not st.st_mode & WRITABLE_BY_OTHERS:
        return None
    # A sticky folder of root's (/tmp) lets others add names, not replace root's own.
    if is_ancestor and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
        return None
    return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"


def _chain(path: Path) -> list[Path]:
    """The path and every folder above it, as named and as links resolve them."""
    named = Path(os.path.abspath(path))
    real = Path(os.path.realpath(path))
    return list(dict.fromkeys([named, *named.parents, real, *real.parents]))


def kept_by(path: Path, owner: int) -> str:
    """Why an account other than `owner` (and root) could change the folder `path` or
    swap one above it ("" when none can): the folder is `owner`'s and written by no one
    else, and each folder above it is root's or `owner`'s, written by no one else unless
    it is a sticky folder of root's (/tmp). Links above it are judged where they lead."""
    named = Path(os.path.abspath(path))
    try:
        st = named.lstat()
    except OSError as e:
        return f"{named}: {e.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{named} is not a folder"
    if st.st_uid != owner or st.st_mode & WRITABLE_BY_OTHERS:
        return (f"{named} is not uid {owner}'s alone (uid {st.st_uid}, mode "
                f"{stat.S_IMODE(st.st_mode):04o})")
    for above in dict.fromkeys([*named.parents, *Path(os.path.realpath(named)).parents]):
        try:
            st = above.stat()
        except OSError as e:
            return f"{above}: {e.strerror}"
        if st.st_uid not in (0, owner):
            return f"{above}, a folder above it, belongs to uid {st.st_uid}"
        if st.st_mode & WRITABLE_BY_OTHERS and not (st.st_uid == 0 and
                                                    st.st_mode & stat.S_ISVTX):
            return (f"{above}, a folder above it, is writable by others (mode "
                    f"{stat.S_IMODE(st.st_mode):04o}): it could be swapped")
    return ""


def problems(path: Path, tree: bool = False) -> list[str]:
    """Why a non-root user could change `path` (and, with `tree`, anything under it)."""
    out = []
    itself = {Path(os.path.abspath(path)), Path(os.path.realpath(path))}
    for p in _chain(path):
        try:
            why = _why(p, p.lstat(), p not in itself)
        except OSError as e:
            why = f"{p}: {e.strerror}"
        if why:
            out.append(why)
    if tree and Path(path).is_dir():
        for folder, dirs, files in os.walk(path):
            for name in [*dirs, *files]:
                p = Path(folder) / name
                why = _why(p, p.lstat(), False)
                if why:
                    out.append(why)
    return out


def untrusted(python: Path, policy: Path) -> list[str]:
    """Everything the hooks would run or read as root that another user could change."""
    found = [*problems(python), *problems(Path(sys.prefix))]
    for folder in site.getsitepackages():
        if Path(folder).is_dir():
            found += problems(Path(folder))
    found += problems(Path(slurm_synergy.__file__).parent, tree=True)
    found += problems(policy)
    return list(dict.fromkeys(found))
