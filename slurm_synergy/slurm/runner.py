"""How one Slurm command is run: the client found on PATH, SLURM_CONF passed on, a
controller that does not answer tried again for a while and then named, output read
whole or streamed line by line. What to run is gateway.py's."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator, Sequence

from slurm_synergy import paths
from slurm_synergy.model.errors import SlurmError, SlurmUnreachable

# What Slurm's commands print when slurmctld does not answer (down, restarting, failing over).
# A controller killed mid-request resets the connection instead of refusing it, or leaves
# the socket unconnected (ENOTCONN) when it dies between accept and reply, or closed
# (Slurm's SLURM_COMMUNICATIONS_MISSING_SOCKET_ERROR, seen with slurmctld SIGKILLed
# during a 300-row submission).
_UNREACHABLE = ("Unable to contact slurm controller", "Connection refused",
                "Connection reset by peer", "Broken pipe", "Socket timed out",
                "Zero Bytes were transmitted", "Connection timed out",
                "Transport endpoint is not connected", "Unexpected missing socket error")
# How long an idempotent call keeps trying a controller that does not answer; Slurm's
# own client already waits several seconds per try.
RETRY_S = 15.0
RETRY_PAUSE_S = 2.0


class Runner:
    """Runs Slurm's client commands against one slurm.conf."""

    def __init__(self, conf: Path | None = None, retry_s: float = RETRY_S):
        self.conf = conf if conf is not None else paths.slurm_conf()
        # Health checks pass 0: they poll on their own and want a quick no.
        self.retry_s = retry_s

    def env(self) -> dict[str, str]:
        """This environment with SLURM_CONF set to the runner's slurm.conf."""
        env = dict(os.environ)
        if self.conf is not None:
            env["SLURM_CONF"] = str(self.conf)
        return env

    def run(self, args: Sequence[str], timeout: float = 60, retry: bool = True) -> str:
        """Run one Slurm command and return its output. A controller that does not answer
        is tried again for `retry_s`, then reported as SlurmUnreachable; `retry=False`
        for calls that must not be repeated blindly (sbatch: the first try may have queued
        the job)."""
        first = time.monotonic()
        while True:
            try:
                return self._run_once(args, timeout)
            except SlurmUnreachable:
                if not retry or not self._pause_to_retry(first):
                    raise

    def _pause_to_retry(self, first: float) -> bool:
        """Wait before trying again a controller that did not answer; False once the
        `retry_s` since the first try would run out."""
        if time.monotonic() - first + RETRY_PAUSE_S > self.retry_s:
            return False
        time.sleep(RETRY_PAUSE_S)
        return True

    def _where(self) -> str:
        return f"SLURM_CONF={self.conf}" if self.conf else "Slurm's default config"

    def _exe(self, args: Sequence[str]) -> list[str]:
        exe = shutil.which(args[0])
        if exe is None:
            raise SlurmError(f"{args[0]} not found on PATH: install the Slurm client (make setup)")
        return [exe, *args[1:]]

    def _failed(self, args: Sequence[str], err: str) -> SlurmError:
        """What a non-zero exit means: a daemon that did not answer, or a refusal."""
        last = err.splitlines()[-1] if err else "no message"
        if any(marker in err for marker in _UNREACHABLE):
            daemon = "slurmdbd" if args[0] in ("sacct", "sacctmgr") else "slurmctld"
            return SlurmUnreachable(
                f"{daemon} unreachable: {args[0]} failed ({self._where()}): {last}; is the "
                "cluster up? (make cluster, or point SLURM_CONF at your site's slurm.conf)")
        return SlurmError(f"{args[0]} failed ({self._where()}): {last}")

    def _timed_out(self, args: Sequence[str], timeout: float) -> SlurmUnreachable:
        return SlurmUnreachable(f"{args[0]} did not answer within {timeout:.0f}s "
                                f"({self._where()})")

    def _run_once(self, args: Sequence[str], timeout: float) -> str:
        try:
            # Text a user wrote (a job name, a comment) may be any bytes: replaced where it
            # is not UTF-8, never a reason to lose the whole answer.
            proc = subprocess.run(self._exe(args), capture_output=True, encoding="utf-8",
                                  errors="replace", env=self.env(), timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise self._timed_out(args, timeout) from exc
        if proc.returncode != 0:
            raise self._failed(args, (proc.stderr or proc.stdout).strip())
        return proc.stdout

    def lines(self, args: Sequence[str], timeout: float = 60) -> Iterator[str]:
        """The lines of one Slurm command's output as it prints them, for long output
        (sacct over thousands of jobs) that the caller works through while the command is
        still writing. Tried again like run() while it has printed nothing; a failure
        after its first line raises once the output ends."""
        first = time.monotonic()
        while True:
            printed = False
            try:
                for line in self._lines_once(args, timeout):
                    printed = True
                    yield line
                return
            except SlurmUnreachable:
                if printed or not self._pause_to_retry(first):
                    raise

    def _lines_once(self, args: Sequence[str], timeout: float) -> Iterator[str]:
        # stderr goes to a file: a pipe nobody reads could fill and stall the command. A job
        # name in another encoding is replaced, not a reason to lose the whole answer.
        with tempfile.TemporaryFile() as err, subprocess.Popen(
                self._exe(args), stdout=subprocess.PIPE, stderr=err, encoding="utf-8",
                errors="replace", env=self.env()) as proc:
            killed = threading.Event()

            def kill() -> None:
                """Stop the command that ran past its timeout."""
                killed.set()
                proc.kill()

            watchdog = threading.Timer(timeout, kill)
            watchdog.start()
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    yield line.rstrip("\n")
                code = proc.wait()
            finally:
                watchdog.cancel()
                if proc.poll() is None:    # the caller stopped reading: stop the command
                    proc.kill()
            if killed.is_set():
                raise self._timed_out(args, timeout)
            if code != 0:
                err.seek(0)
                raise self._failed(args, err.read().decode(errors="replace").strip())
