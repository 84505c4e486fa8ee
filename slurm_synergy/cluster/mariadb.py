"""The local cluster's accounting database: a MariaDB of its own in the state folder, on
its own socket and port, with Slurm's database user granted what slurmdbd needs."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from slurm_synergy.cluster.commands import checked


def answers(socket: Path) -> bool:
    """Whether the MariaDB on `socket` answers a ping."""
    return subprocess.run(["mariadb-admin", "--no-defaults", f"--socket={socket}", "ping"],
                          capture_output=True).returncode == 0


def start(datadir: Path, socket: Path, port: int, pidfile: Path, log: Path, password: str,
          timeout_s: float) -> None:
    """Start MariaDB on `datadir` (made the first time) and grant Slurm's user; returns
    quietly if it does not answer within `timeout_s`: the caller reports it with the log."""
    if not (datadir / "mysql").exists():
        checked(["mariadb-install-db", "--no-defaults", f"--datadir={datadir}", "--user=root",
                 "--auth-root-authentication-method=socket", "--skip-test-db"],
                "mariadb-install-db")
    with open(log, "a") as out:
        subprocess.Popen(
            ["mariadbd", "--no-defaults", f"--datadir={datadir}", "--user=root",
             f"--socket={socket}", f"--port={port}", "--bind-address=127.0.0.1",
             f"--pid-file={pidfile}", f"--log-error={log}", "--skip-name-resolve",
             "--innodb-buffer-pool-size=256M", "--innodb-lock-wait-timeout=900"],
            stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while not answers(socket):
        if time.monotonic() > deadline:
            return
        time.sleep(0.5)
    sql = "".join(
        f"CREATE USER IF NOT EXISTS 'slurm'@'{host}' IDENTIFIED BY '{password}';"
        f"ALTER USER 'slurm'@'{host}' IDENTIFIED BY '{password}';"
        f"GRANT ALL ON slurm_acct_db.* TO 'slurm'@'{host}';"
        for host in ("127.0.0.1", "localhost"))
    checked(["mariadb", "--no-defaults", f"--socket={socket}", "-u", "root", "-e", sql],
            "mariadb (creating the slurm user)")
