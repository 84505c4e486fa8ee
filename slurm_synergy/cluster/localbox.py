"""The embedded default: a three-node Slurm cluster with accounting, started by hand.

`up` renders etc/*.j2 into the state folder and starts munge, MariaDB, slurmdbd,
slurmctld and a slurmd per node (cluster/node.py) in that order, each only if it is not
already healthy, so it is idempotent and restarts whatever died. A daemon that will not
start gets the tail of its log in the error.

It is run as a site runs its cluster: a shared profile store (state/profiles, mode 1777)
that every user's jobs write to, and two timers of root's, as a site's cron runs them:
`synergy plugin sync --every`, which compiles the store into the decision table, so a
user's next job of a measured workload is right-sized at submission without anyone
running sync by hand, and `synergy plugin timelimits --every`, which gives pending jobs
a --time-min backfill can use (its record in state/lib).

One class starts, checks and stops every daemon of the cluster (each a few lines over
the same state folder and pid files); the node sizing (node.py), the accounting database
(mariadb.py) and what the state keeps (kept.py) are modules of their own.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

from slurm_synergy import paths, slurm_release
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.fileio import atomic_write_text, locked
from slurm_synergy.hooks.install import HOOK_FILES, HookPaths, needed_timeout_s, render_wrappers
from slurm_synergy.plugin.install import install_shim
from slurm_synergy.model.policy import load_policy
from slurm_synergy.paths import policy_path
from slurm_synergy.decisions.sync import TIMER_EVERY_S, TIMER_NAME, sync
from slurm_synergy.decisions.table import TABLE_NAME
from slurm_synergy.decisions.timelimits import TIMER_NAME as LIMITS_NAME
from slurm_synergy.templating import environment
from slurm_synergy.slurm import Slurm
from slurm_synergy.cluster import kept, mariadb, node as nodemod, preflight, rootfs, timers
from slurm_synergy.cluster.commands import checked, running_pid, tail

TIMER = "sync-timer"
LIMITS_TIMER = "limits-timer"
PARTITION = "gpu"
MULTI_PARTITION = "multi"     # every node: jobs over several nodes or GPU types
PORTS = {"slurmctld": 6817, "slurmd": 6818, "slurmdbd": 6819, "mariadb": 6820}
START_TIMEOUT_S = 60
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")


@dataclass(frozen=True)
class Daemon:
    name: str
    pidfile: Path
    log: Path
    program: str = ""            # what /proc/PID/comm starts with, when not the name
    node: str = ""               # a slurmd's node

    @property
    def comm(self) -> str:
        """What /proc/<pid>/comm starts with for this daemon: a pid file is trusted only then."""
        return self.program or self.name


class LocalCluster:
    def __init__(self, state: Path | None = None, job_submit: bool = True,
                 sync_every_s: float = TIMER_EVERY_S, step_manager: bool = False):
        self.state = state or paths.state_dir()
        self.release = slurm_release.chosen()
        # Another release's daemons run from a root of its Debian release (rootfs.py), and
        # its commands from the state folder's bin/: first on PATH for this process and
        # everything it starts, as SLURM_CONF is.
        self.root = None if self.release.hosted else rootfs.root_of(self.release)
        if self.root is not None:
            self.clients = self.state / paths.SLURM_COMMANDS
            path = os.environ.get("PATH", "").split(os.pathsep)
            if str(self.clients) not in path:
                os.environ["PATH"] = os.pathsep.join([str(self.clients), *path])
        self.job_submit = job_submit     # off only to measure the shim's cost (make bench)
        # slurmstepd's step management (SlurmctldParameters=enable_stepmgr), which 26.05's
        # --mem-update needs: on only for bench_rescue's arm of it.
        self.step_manager = step_manager and slurm_release.mem_update(self.release.version)
        # 0: no timer (the integration tests compile tables from stores of their own)
        self.sync_every_s = sync_every_s
        self.etc = self.state / "etc"
        self.conf = self.etc / "slurm.conf"
        self.slurm = Slurm(self.conf, retry_s=0)
        run, log = self.state / "run", self.state / "log"
        self.daemons = {
            "munged": Daemon("munged", run / "munged.pid", Path("/var/log/munge/munged.log")),
            "mariadbd": Daemon("mariadbd", run / "mariadb.pid", log / "mariadb.log"),
            "slurmdbd": Daemon("slurmdbd", run / "slurmdbd.pid", log / "slurmdbd.log"),
            "slurmctld": Daemon("slurmctld", run / "slurmctld.pid", log / "slurmctld.log"),
            TIMER: Daemon(TIMER, run / "sync-timer.pid", log / "sync.log", program=TIMER_NAME),
            LIMITS_TIMER: Daemon(LIMITS_TIMER, run / "limits-timer.pid", log / "time-limits.log",
                                 program=LIMITS_NAME),
        }
        self._name_slurmds()

    def _name_slurmds(self) -> None:
        """A slurmd per node slurm.conf names, with the files it gives them (a state folder
        from before the nodes had %n in their names keeps one of each)."""
        for d in self.slurmds:
            del self.daemons[d.name]
        keys = {"SlurmdPidFile": str(self.state / "run" / "slurmd-%n.pid"),
                "SlurmdLogFile": str(self.state / "log" / "slurmd-%n.log")}
        for name, settings in nodemod.configured_nodes(self.conf).items():
            files = {k: Path(settings.get(k, v).replace("%n", name)) for k, v in keys.items()}
            self.daemons[f"slurmd@{name}"] = Daemon(
                f"slurmd@{name}", files["SlurmdPidFile"], files["SlurmdLogFile"],
                program="slurmd", node=name)

    @property
    def slurmds(self) -> list[Daemon]:
        """One slurmd per node of the layout."""
        return [d for d in self.daemons.values() if d.node]

    # --- configuration -----------------------------------------------------------
    def render(self) -> tuple[nodemod.Layout, str, bool]:
        """Write the config files; returns (layout, cgroup mode, whether anything changed)."""
        layout = nodemod.detect(self.state)
        mode = nodemod.cgroup_mode()
        for sub in ("etc", "run", "log", "spool/ctld", "spool/d", "dev"):
            (self.state / sub).mkdir(parents=True, exist_ok=True)
        preflight.shared_store(paths.local_profile_store(self.state))
        for node in layout.nodes:
            (self.state / "spool" / "d" / node.name).mkdir(exist_ok=True)
            if not node.gpus_real:
                for dev in node.gpu_files:
                    Path(dev).parent.mkdir(exist_ok=True)
                    nodemod.make_fake_gpu(Path(dev))
        env = environment(paths.ETC)
        context = {
            "cluster_name": self.cluster_name(), "partition": PARTITION,
            "multi_partition": MULTI_PARTITION, "ports": PORTS,
            "state": str(self.state), "layout": layout, "cgroup_mode": mode,
            "job_submit": self.job_submit, "slurm_version": self.release.version,
            "soft_time_min": slurm_release.soft_time_min(self.release.version),
            "step_manager": self.step_manager,
            "plugin_dir": str(rootfs.plugin_dir(self.root)) if self.root else "",
            "db": {"user": "slurm", "password": self._db_password(), "name": "slurm_acct_db"},
            **{hook: str(self.etc / name) for hook, name in HOOK_FILES.items()},
            "hook_timeout_s": needed_timeout_s(load_policy(policy_path()).hook_timeout_s),
        }
        changed = False
        for name, mode_bits in (("slurm.conf", 0o644), ("gres.conf", 0o644),
                                ("cgroup.conf", 0o644), ("slurmdbd.conf", 0o600)):
            text = env.get_template(name + ".j2").render(context)
            target = self.etc / name
            if not target.exists() or target.read_text() != text:
                atomic_write_text(target, text, mode_bits)
                changed = True
        # The plugin goes in as on any cluster (synergy plugin install): the shim beside
        # slurm.conf; the decision table once slurmctld can size it (see up).
        install_shim(self.etc)
        render_wrappers(self.etc, self.hook_paths)
        atomic_write_text(self.state / "mode", mode + "\n")
        return layout, mode, changed

    @property
    def hook_paths(self) -> HookPaths:
        """Where the node hooks' wrappers, log, records and run folder are in the state folder."""
        return HookPaths(stats_dir=self.state / "gpustats", log=self.state / "log" / "hooks.log",
                         run_dir=self.state / "run" / "hooks", policy=policy_path())

    def cluster_name(self) -> str:
        """The cluster's name, made anew with each state folder (kept.py)."""
        return kept.cluster_name(self.etc)

    def _db_password(self) -> str:
        return kept.db_password(self.etc)

    # --- lifecycle ---------------------------------------------------------------
    def up(self, log: Callable[[str], None] = print) -> None:
        """Start whatever is not already healthy, in order; idempotent. This process and
        what it starts then use this cluster (SLURM_CONF): bringing it up says so."""
        os.environ["SLURM_CONF"] = str(self.conf)
        preflight.require_programs(self.release)
        preflight.no_other_release_up(self.release)
        with locked(self.state / ".lock", wait_s=900):  # another up or down: minutes
            if self.root is not None:
                rootfs.ensure(self.release, log)
                rootfs.write_clients(self.root, self.clients, self.release)
            layout, mode, changed = self.render()
            nodemod.add_hosts([n.name for n in layout.nodes])
            # The slurmds of the configuration before this one: a changed layout stops them.
            slurmds = [d.name for d in self.slurmds]
            if changed and any(self._alive(name) for name in ["slurmctld", *slurmds]):
                log("configuration changed: restarting slurmctld and slurmd")
                for name in slurmds:
                    self._stop(name)
                self._stop("slurmctld")
            self._name_slurmds()
            self._ensure("munged", self._munge_ok, self._start_munge, log)
            self._ensure("mariadbd", self._mariadb_ok, self._start_mariadb, log)
            self._ensure("slurmdbd", self._slurmdbd_ok, self._start_slurmdbd, log)
            self._register_cluster()
            self._ensure("slurmctld", self.slurm.ping, self._start_slurmctld, log)
            for node in layout.nodes:
                self._ensure(f"slurmd@{node.name}", partial(self._node_ok, node.name),
                             partial(self._start_slurmd, node.name), log)
            for n in self.slurm.nodes(""):
                if _drained(n.state):
                    # The epilog (or an admin) took it out of service for a reason; only
                    # a person puts it back.
                    log(f"node {n.name} is {n.state} ({n.reason or 'no reason given'}) and "
                        "stays so: jobs will not start on it until you resume it with "
                        f"`scontrol update nodename={n.name} state=resume`")
            log(sync(slurm=self.slurm, path=self.etc / TABLE_NAME))
            for timer, action, what in ((TIMER, ["sync"], "sync timer"), (LIMITS_TIMER, [
                    "timelimits", "--state", str(self.limits_state)], "time-limit timer")):
                if self.sync_every_s > 0:
                    if self._alive(timer) and not self._timer_as_now(timer):
                        log(f"restarting the {what}: it ran with other settings than these "
                            "(SYNERGY_*: a store or policy of a bench's, say)")
                    self._ensure(timer, partial(self._timer_as_now, timer),
                                 partial(self._start_root_timer, timer, action), log)
                elif self._stop(timer):
                    log(f"stopped the {what}")
            where = ("this host's packages" if self.root is None
                     else f"Debian {self.release.suite}'s packages in {self.root}")
            log(f"cluster up: Slurm {self.release.version} ({where}), cgroup enforcement: "
                f"{describe_mode(mode)}")
            for node in layout.nodes:
                parts = [f"{PARTITION} (default)"] if node == layout.default else []
                parts += [MULTI_PARTITION] if len(layout.nodes) > 1 else []
                log(f"  {node.describe()}; partition {', '.join(parts)}")
            log(f"SLURM_CONF={self.conf}")
            if self.root is not None:
                log(f"PATH={self.clients}:$PATH   (Slurm {self.release.version}'s commands)")

    def down(self, log: Callable[[str], None] = print) -> None:
        """Cancel every job, then stop the timer and every daemon, last started first."""
        with locked(self.state / ".lock", wait_s=900):  # another up or down: minutes
            # A running job's slurmstepd outlives its slurmd: the jobs are cancelled first.
            if self.conf.exists() and self.slurm.ping():
                try:
                    if cancelled := self.slurm.cancel_all():
                        log(f"cancelled {cancelled} job(s)")
                except SynergyError as e:
                    log(f"jobs not cancelled: {e}")
            for name in [TIMER, LIMITS_TIMER, *(d.name for d in self.slurmds), "slurmctld", "slurmdbd",
                         "mariadbd", "munged"]:
                if self._stop(name):
                    log(f"stopped {name}")

    def status(self) -> tuple[bool, list[str]]:
        """Whether every daemon is healthy, and one line per daemon and node saying how it is."""
        lines, healthy = [], True
        checks: dict[str, Callable[[], bool]] = {
            "munged": self._munge_ok, "mariadbd": self._mariadb_ok,
            "slurmdbd": self._slurmdbd_ok, "slurmctld": self.slurm.ping}
        checks.update({d.name: partial(self._node_ok, d.node) for d in self.slurmds})
        for name, check in checks.items():
            ok = self.conf.exists() and check()
            healthy &= ok
            pid = self._pid(name)
            lines.append(f"{name:<13} {'up' if ok else 'DOWN':<5} pid {pid or '-'}")
        # Not counted in health: a cluster may run without them (cluster up --sync-every 0).
        for timer, what in ((TIMER, "the decision table's sync"),
                            (LIMITS_TIMER, "--time-min for backfill")):
            d = self.daemons[timer]
            lines += timers.status_lines(timer, self._pid(timer), what, d.log,
                                         self.etc / TABLE_NAME, d.comm)
        mode_file = self.state / "mode"
        mode = mode_file.read_text().strip() if mode_file.exists() else "unknown"
        lines.append(f"cgroup enforcement: {describe_mode(mode)}")
        if healthy:
            for n in self.slurm.nodes(""):
                why = f" ({n.reason})" if n.reason else ""
                lines.append(f"node {n.name}: {n.state}{why}, {n.cpus} CPUs, {n.mem_mb} MB, "
                             f"gres {n.gres}")
        lines.append(f"SLURM_CONF={self.conf}")
        return healthy, lines

    # --- health checks -----------------------------------------------------------
    def _munge_ok(self) -> bool:
        if not MUNGE_SOCKET.exists():
            return False
        cred = subprocess.run(["munge", "-n"], capture_output=True)
        if cred.returncode != 0:
            return False
        return subprocess.run(["unmunge"], input=cred.stdout, capture_output=True).returncode == 0

    def _mariadb_ok(self) -> bool:
        return mariadb.answers(self._db_socket)

    def _slurmdbd_ok(self) -> bool:
        if not self._alive("slurmdbd"):
            return False
        try:
            self.slurm.clusters(timeout=15)
            return True
        except SynergyError:
            return False

    def _node_ok(self, node: str) -> bool:
        """The node's slurmd runs and the node answers slurmctld. A drained node counts:
        slurmd is up, the node is only out of service (cluster status shows it)."""
        if not self._alive(f"slurmd@{node}"):
            return False
        try:
            states = [n.state for n in self.slurm.nodes("") if n.name == node]
        except SynergyError:
            return False
        bad = ("down", "fail", "unknown", "not_responding")
        return bool(states) and not any(
            s.endswith("*") or s.rstrip("~#").startswith(bad) for s in states)

    @property
    def _db_socket(self) -> Path:
        return self.state / "run" / "mysqld.sock"

    # --- starting ----------------------------------------------------------------
    def _ensure(self, name: str, healthy: Callable[[], bool], start: Callable[[], None],
                log: Callable[[str], None]) -> None:
        if healthy():
            return
        if self._alive(name):
            # Running but not answering: a stuck daemon is restarted, not waited on forever.
            self._stop(name)
        log(f"starting {name}")
        start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if healthy():
                return
            node = self.daemons[name].node
            if node and self._alive(name):
                self._resume_node(node)
            time.sleep(0.5)
        raise SynergyError(f"{name} did not come up within {START_TIMEOUT_S}s; "
                           f"last lines of {self.daemons[name].log}:\n{tail(self.daemons[name].log)}")

    def _start_munge(self) -> None:
        run = Path("/run/munge")
        run.mkdir(parents=True, exist_ok=True)
        shutil.chown(run, "munge", "munge")
        if not Path("/etc/munge/munge.key").exists():
            checked(["runuser", "-u", "munge", "--", "mungekey", "--create"], "mungekey")
        checked(["runuser", "-u", "munge", "--", "munged"], "munged")
        out = subprocess.run(["pgrep", "-n", "-x", "munged"], capture_output=True, text=True)
        if out.stdout.strip():
            atomic_write_text(self.daemons["munged"].pidfile, out.stdout)

    def _start_mariadb(self) -> None:
        mariadb.start(self.state / "mysql", self._db_socket, PORTS["mariadb"],
                      self.daemons["mariadbd"].pidfile, self.daemons["mariadbd"].log,
                      self._db_password(), START_TIMEOUT_S)

    def _start_slurmdbd(self) -> None:
        env = dict(os.environ, SLURM_CONF=str(self.conf))
        checked(self._daemon(["slurmdbd"]), "slurmdbd", env=env)

    def _daemon(self, argv: list[str], hostname: str = "") -> list[str]:
        """How one of Slurm's daemons is started on this cluster's release: the host's
        program, or the root's inside it (under `hostname`, given one)."""
        if self.root is not None:
            also = [paths.ROOT, paths.workspace(), self.state, Path(sys.prefix),
                    policy_path().parent, paths.home_dir()]
            return rootfs.daemon_argv(self.root, argv, also, hostname)
        if hostname:
            script = 'echo "$1" > /proc/sys/kernel/hostname && shift && exec "$@"'
            return ["unshare", "--uts", "--", "sh", "-c", script, "sh", hostname, *argv]
        return argv

    def _timer_as_now(self, name: str) -> bool:
        """The timer runs with this process's settings: `up` starts it again where not."""
        return self._alive(name) and timers.runs_as_now(self.daemons[name].pidfile)

    def _start_root_timer(self, name: str, action: list[str]) -> None:
        daemon = self.daemons[name]
        timers.start(action, self.sync_every_s, self.etc / TABLE_NAME, self.conf,
                     daemon.pidfile, daemon.log)

    @property
    def limits_state(self) -> Path:
        """The time-limit timer's record of the jobs it set."""
        return self.state / "lib" / "time-limits.json"

    def _start_slurmctld(self) -> None:
        checked(self._daemon(["slurmctld", "-f", str(self.conf)]), "slurmctld",
                env=dict(os.environ, SLURM_CONF=str(self.conf)))

    def _start_slurmd(self, node: str) -> None:
        """slurmd under a hostname of its own (a UTS namespace): that is how it finds its
        NodeName, and what its jobs see as their host."""
        checked(self._daemon(["slurmd", "-f", str(self.conf)], hostname=node),
                f"slurmd of {node}", env=dict(os.environ, SLURM_CONF=str(self.conf)))

    def _register_cluster(self) -> None:
        name = self.cluster_name()
        if name not in self.slurm.clusters():
            self.slurm.add_cluster(name)

    def _resume_node(self, node: str) -> None:
        """A node left down by an earlier run (its slurmd stopped) is put back in service;
        a drained one is not: somebody drained it on purpose."""
        try:
            for n in self.slurm.nodes(""):
                if n.name == node and n.state.rstrip("*~#").startswith("down") \
                        and not _drained(n.state):
                    self.slurm.resume_node(n.name)
        except SynergyError:
            pass  # slurmctld not answering yet; the caller's loop tries again

    # --- processes -----------------------------------------------------------------
    def _pid(self, name: str) -> int | None:
        return running_pid(self.daemons[name].pidfile, self.daemons[name].comm)

    def timer_running(self) -> bool:
        """Whether the sync timer runs (a cluster brought up with one)."""
        return self._alive(TIMER)

    def _alive(self, name: str) -> bool:
        return self._pid(name) is not None

    def _stop(self, name: str) -> bool:
        pid = self._pid(name)
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)
        self.daemons[name].pidfile.unlink(missing_ok=True)
        return True


def describe_mode(mode: str) -> str:
    """The cluster's cgroup mode in words, for `cluster status`."""
    return {"v1": "cgroup v1 (cores and memory confined)",
            "none": "none (no writable cgroup v1 hierarchy; jobs are not confined)"}.get(mode, mode)


def _drained(state: str) -> bool:
    """sinfo's long state of a node taken out of service (drained, draining, down+drain)."""
    return "drain" in state
