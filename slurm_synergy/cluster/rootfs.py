"""A Debian release's Slurm for the local cluster: a root of that release built once with
debootstrap and kept, its daemons run inside it, its commands run from the host.

The root lives under ROOTS and is built again only when what it is built from changes
(FORMAT: the suite, the packages, this module's preparation). Inside it, the host's
users, hosts, munge socket, /tmp, /home and the checkout are where they are on the host,
and so is the host's Python 3.11 (the venv's interpreter, the one torch's file on disk is
for): the jobs run in the root with the host's venv, as the hooks do.

A daemon runs in a mount namespace of its own (`unshare --mount`), which holds the bind
mounts and ends with it: nothing is left mounted on the host. The commands (sbatch,
sacct, scontrol, ...) are small scripts in the state folder's `bin/` that run the root's
program with the root's loader and libraries, so that any user runs them without
privileges; the root holds a link from its own path to `/`, so that a path into the root
(its plugin folder, in slurm.conf) means the same file inside it and outside.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Iterable, Sequence

from slurm_synergy.cluster.commands import checked
from slurm_synergy.fileio import atomic_write_text, locked
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.slurm_release import Release

ROOTS = Path("/var/cache/slurm-synergy/roots")
DEBS = Path("/var/cache/slurm-synergy/debs")
MIRROR = "http://deb.debian.org/debian"
# lua-posix: the shim opens the decision table with it (without, jobs pass unchanged).
PACKAGES = ("slurmctld", "slurmd", "slurmdbd", "slurm-client", "slurm-wlm-basic-plugins",
            "slurm-wlm-mysql-plugin", "lua-posix", "procps", "libstdc++6")
FORMAT = 3                  # this module's preparation of a root; a change rebuilds it
MARK = ".slurm-synergy-root.json"
LIB = "usr/lib/x86_64-linux-gnu"
PLUGINS = f"{LIB}/slurm-wlm"
LOADER = "usr/lib64/ld-linux-x86-64.so.2"
# The host's interpreter the venv is made from (Makefile's BASE_PYTHON), and its library.
PYTHON = Path("/usr/bin/python3.11")
PYTHON_LIB = Path("/usr/lib/python3.11")
HOST_LIBS = "usr/local/lib/slurm-synergy-host"     # what the root lacks of the host's
CLIENTS = ("sbatch", "srun", "salloc", "squeue", "sacct", "scontrol", "sinfo", "sacctmgr",
           "scancel", "sstat", "sprio", "sshare", "sreport", "sdiag", "sattach")
# Bound whole, recursively: what the kernel and the devices show.
SYSTEM = (Path("/proc"), Path("/sys"), Path("/dev"))
# The host's, at the same paths: munge's socket, the folders jobs run in, the Python.
SHARED = (Path("/run/munge"), Path("/tmp"), Path("/var/tmp"), Path("/home"), PYTHON, PYTHON_LIB)
# The host's /etc is bound whole at /HOST_ETC, and these files of the root's /etc lead
# there: who the users are, with their shadow entries, and the node names. (A file bound
# alone keeps the file a later useradd replaces, and slurmctld would not know a user made
# after it started.) Without the host's shadow, PAM 1.7 (Debian sid) refuses root's `su -
# user`, which slurmd runs to load a job's environment (--export=ALL,VAR=..., --get-user-
# env): the job fails to launch and is requeued.
HOST_ETC = ".host-etc"
FROM_HOST_ETC = ("passwd", "shadow", "group", "gshadow", "hosts")


def root_of(release: Release) -> Path:
    """Where `release`'s root is kept."""
    return ROOTS / release.suite


def recipe(release: Release) -> dict:
    """What a root is built from: a root whose mark differs is built again."""
    return {"suite": release.suite, "slurm": release.version, "packages": list(PACKAGES),
            "mirror": MIRROR, "format": FORMAT}


def ensure(release: Release, log: Callable[[str], None] = print) -> Path:
    """`release`'s root, built first where it is missing or was built from another recipe.
    A build that fails leaves nothing behind but the message."""
    root = root_of(release)
    ROOTS.mkdir(parents=True, exist_ok=True)
    with locked(ROOTS / f".{release.suite}.lock", wait_s=3600):
        if _built_from(root) == recipe(release):
            return root
        log(f"building a Debian {release.suite} root for Slurm {release.version} in {root} "
            "(once; minutes)")
        if shutil.which("debootstrap") is None:
            raise SynergyError("debootstrap is missing: run `make setup` first")
        work = root.with_name(root.name + ".building")
        shutil.rmtree(work, ignore_errors=True)
        try:
            version = _build(release, work, root)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        shutil.rmtree(root, ignore_errors=True)
        work.rename(root)
        log(f"root ready: Slurm {version}")
        return root


def _build(release: Release, work: Path, root: Path) -> str:
    """`release`'s root built in `work`, to be moved to `root`, marked with its recipe;
    returns its Slurm version."""
    debs = DEBS / release.suite          # kept: a rebuild downloads nothing again
    debs.mkdir(parents=True, exist_ok=True)
    checked(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
             f"--cache-dir={debs}", release.suite, str(work), MIRROR],
            f"debootstrap of Debian {release.suite}")
    _prepare(work, root)
    version = _slurm_version(work)
    if not version.startswith(release.version):
        raise SynergyError(f"Debian {release.suite} holds Slurm {version}, not "
                           f"{release.version}: the local cluster's release table "
                           "(slurm_release.py) needs its suite changed")
    atomic_write_text(work / MARK, json.dumps(recipe(release)) + "\n")
    return version


def _built_from(root: Path) -> dict | None:
    try:
        return json.loads((root / MARK).read_text())
    except (OSError, ValueError):
        return None


def _slurm_version(root: Path) -> str:
    out = subprocess.run(["chroot", str(root), "dpkg-query", "-W", "-f=${Version}",
                          "slurmctld"], capture_output=True, text=True)
    return out.stdout.strip()


def _prepare(work: Path, root: Path) -> None:
    """The root made ready for the cluster: its own path leads to `/` inside it, its users
    and hosts are the host's (HOST_ETC), the host's Python finds every library it links
    (the host's copy of any the root lacks), and `python3` is that Python (the venv links
    to /usr/bin/python3)."""
    inside = work / str(root).lstrip("/")
    inside.parent.mkdir(parents=True, exist_ok=True)
    inside.symlink_to("/")
    (work / HOST_ETC).mkdir()
    for name in FROM_HOST_ETC:
        (work / "etc" / name).unlink(missing_ok=True)
        (work / "etc" / name).symlink_to(f"/{HOST_ETC}/{name}")
    missing = _missing_libraries(work)
    if missing:
        folder = work / HOST_LIBS
        folder.mkdir(parents=True, exist_ok=True)
        for name, host_path in missing.items():
            shutil.copy2(host_path, folder / name)
        atomic_write_text(work / "etc/ld.so.conf.d/slurm-synergy-host.conf", f"/{HOST_LIBS}\n")
        checked(["chroot", str(work), "ldconfig"], "ldconfig in the new root")
    python3 = work / "usr/bin/python3"
    if not python3.exists() and not python3.is_symlink():
        python3.symlink_to(PYTHON.name)


def _missing_libraries(work: Path) -> dict[str, str]:
    """The shared libraries the host's Python and its extension modules link that the
    root has no file of the same name for: name -> the host's file."""
    elves = [PYTHON, *sorted((PYTHON_LIB / "lib-dynload").glob("*.so"))]
    wanted: dict[str, str] = {}
    for elf in elves:
        out = subprocess.run(["ldd", str(elf)], capture_output=True, text=True).stdout
        for line in out.splitlines():
            name, arrow, where = line.strip().partition(" => ")
            path = where.split(" (")[0].strip()
            if arrow and path.startswith("/"):
                wanted[name] = path
    lib_dirs = [work / LIB, work / "lib/x86_64-linux-gnu", work / "usr/lib", work / "lib"]
    return {name: path for name, path in wanted.items()
            if not any((d / name).exists() for d in lib_dirs)}


def write_clients(root: Path, bin_dir: Path, release: Release) -> list[str]:
    """The root's Slurm commands as scripts in `bin_dir`, each running the root's program
    with the root's loader and libraries; returns their names."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    libs = ":".join(str(root / d) for d in (PLUGINS, LIB, HOST_LIBS))
    written = []
    for name in CLIENTS:
        program = root / "usr/bin" / name
        if not program.exists():
            continue
        text = ("#!/bin/sh\n"
                f"# Slurm {release.version}'s {name}, from the Debian {release.suite} root "
                "(slurm-synergy's local cluster)\n"
                f"exec {shlex.quote(str(root / LOADER))} --argv0 {name} "
                f"--library-path {shlex.quote(libs)} {shlex.quote(str(program))} \"$@\"\n")
        atomic_write_text(bin_dir / name, text, 0o755)
        written.append(name)
    return written


def plugin_dir(root: Path) -> Path:
    """The root's plugin folder, by a path that means it inside the root and outside."""
    return root / PLUGINS


def daemon_argv(root: Path, argv: Sequence[str], also: Iterable[Path] = (),
                hostname: str = "") -> list[str]:
    """`argv` run inside `root` in a mount namespace of its own, with the host's system
    folders, SHARED and `also` bound in at their paths (and, given a `hostname`, in a UTS
    namespace under that name)."""
    lines = ["set -e"]
    if hostname:
        lines.append(f"echo {shlex.quote(hostname)} > /proc/sys/kernel/hostname")
    for path in SYSTEM:
        lines.append(f"mount --rbind {path} {shlex.quote(str(root / str(path).lstrip('/')))}")
    lines.append(f"mount --bind /etc {shlex.quote(str(root / HOST_ETC))}")
    for path in _outermost([*SHARED, *also]):
        if not path.exists():
            continue
        target = root / str(path).lstrip("/")
        make = "mkdir -p" if path.is_dir() else "touch"
        if not target.exists():
            lines.append(f"mkdir -p {shlex.quote(str(target.parent))}")
            lines.append(f"{make} {shlex.quote(str(target))}")
        lines.append(f"mount --bind {shlex.quote(str(path))} {shlex.quote(str(target))}")
    lines.append(f'exec chroot {shlex.quote(str(root))} "$@"')
    spaces = ["--mount", *(["--uts"] if hostname else [])]
    return ["unshare", *spaces, "--", "sh", "-c", "\n".join(lines), "sh", *argv]


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """`paths` resolved, without any that lies inside another (bound with it)."""
    resolved = sorted({Path(os.path.realpath(p)) for p in paths})
    kept: list[Path] = []
    for p in resolved:
        if not any(p == k or k in p.parents for k in kept):
            kept.append(p)
    return kept

