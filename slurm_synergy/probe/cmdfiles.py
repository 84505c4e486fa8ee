"""The files a running command reads as its program: what a workload's key cannot see.

A plain batch script's key is its text and arguments as submitted; a config file edited,
or the training script changed, under the same batch script keeps the key. The in-run
supervisor reads, once the command runs, the files its command line names (the script,
`-m`'s module in the run's folder, `--config=cfg.yaml`), and the Python files beside
its script (the model it imports), by content. Files the run itself writes are outputs,
not program: one written since the process started, or changed before the run ends, is
left out, so that a checkpoint or a log named on the command line does not make every
run look new.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import psutil

from slurm_synergy.fileio import UntrustedFile, read_untrusted_bytes
from slurm_synergy.model.profile import CommandFile

MAX_FILE_BYTES = 4 << 20        # a larger file is data, not program
MAX_TOTAL_BYTES = 16 << 20      # hashed at most, all files together
MAX_FILES = 64
# A process's start time is known to about a second (the boot time is whole seconds):
# files written this close before it count as written by the run.
START_SLACK_S = 2.0
# How long a process just started may show no command line (see _command_line).
EXEC_WAIT_S = 1.0


@dataclass(frozen=True)
class Seen:
    """Files as read at one moment, each with the (mtime_ns, size) it had then."""

    files: tuple[tuple[CommandFile, int, int], ...]

    @property
    def read(self) -> tuple[CommandFile, ...]:
        """The files, without the mtime and size each had when read."""
        return tuple(f for f, _, _ in self.files)

    def unchanged(self) -> tuple[CommandFile, ...]:
        """The files still as they were read: one changed since was written by the run."""
        kept = []
        for f, mtime_ns, size in self.files:
            try:
                st = os.stat(f.path)
            except OSError:
                continue
            if (st.st_mtime_ns, st.st_size) == (mtime_ns, size):
                kept.append(f)
        return tuple(kept)


def changed(measured: Sequence[CommandFile], now: Sequence[CommandFile]) -> list[str]:
    """The paths both runs read whose contents differ. A file only one of them read
    (an output the other wrote, a file made later) says nothing either way."""
    then = {f.path: f.sha256 for f in measured}
    return sorted(f.path for f in now if then.get(f.path, f.sha256) != f.sha256)


def candidates(argv: Sequence[str], cwd: str) -> list[str]:
    """The paths a command line names, resolved in `cwd`: each argument and each
    `--option=value`'s value, `-m`'s module, and the .py files beside a .py it names."""
    names: list[str] = []
    args = list(argv[1:])           # argv[0]: the interpreter
    for i, arg in enumerate(args):
        if arg.startswith("-"):
            if "=" in arg:
                names.append(arg.split("=", 1)[1])
            if arg == "-m" and i + 1 < len(args):
                module = args[i + 1].replace(".", "/")
                names += [module + ".py", module + "/__main__.py"]
            continue
        names.append(arg)
    paths = [os.path.normpath(os.path.join(cwd, n)) for n in names if n]
    for p in list(paths):
        if p.endswith(".py"):
            try:
                paths += sorted(str(s) for s in Path(p).parent.glob("*.py"))
            except OSError:
                pass
    return list(dict.fromkeys(paths))[:MAX_FILES * 4]


def read(argv: Sequence[str], cwd: str, since: float) -> Seen:
    """Hash the regular files among `candidates` not modified since `since` (seconds,
    the epoch): later ones the run has written already."""
    out: list[tuple[CommandFile, int, int]] = []
    budget = MAX_TOTAL_BYTES
    for path in candidates(argv, cwd):
        if len(out) >= MAX_FILES:
            break
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size > min(MAX_FILE_BYTES, budget) \
                or st.st_mtime >= since:
            continue
        digest = _sha256(path, st, min(MAX_FILE_BYTES, budget))
        if digest is not None:
            budget -= st.st_size
            out.append((CommandFile(path, digest), st.st_mtime_ns, st.st_size))
    return Seen(tuple(out))


def of_process(pid: int) -> Seen | None:
    """The files process `pid`'s command names, or None when it cannot be read."""
    try:
        proc = psutil.Process(pid)
        argv = _command_line(proc)
        if not argv:
            return None
        return read(argv, proc.cwd(), proc.create_time() - START_SLACK_S)
    except (psutil.Error, OSError):
        return None


def _command_line(proc: psutil.Process) -> list[str]:
    """The command line of a process, waited for while it is being set up: Popen returns
    once the new program has replaced the old, but the kernel gives the new program its
    arguments a moment later, and until then /proc shows none (2 to 11 of 300
    interpreters read as soon as Popen returned, on the 2-core VM)."""
    deadline = time.monotonic() + EXEC_WAIT_S
    while not (argv := proc.cmdline()) and time.monotonic() < deadline:
        time.sleep(0.005)
    return argv


def _sha256(path: str, st: os.stat_result, limit: int) -> str | None:
    try:
        data = read_untrusted_bytes(Path(path), limit, follow_links=True)
    except (OSError, UntrustedFile):
        return None
    # The (mtime, size) kept beside the digest must be this content's.
    return hashlib.sha256(data).hexdigest() if len(data) == st.st_size else None
