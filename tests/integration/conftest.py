"""Integration tests run against the real local Slurm cluster; nothing here is mocked.

The session fixture brings the cluster up (as `make cluster` does). If it cannot,
every test here errors with the daemon's log: they fail loudly, never skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

import pytest

from slurm_synergy import paths
from slurm_synergy.cluster.localbox import LocalCluster
from slurm_synergy.cluster.users import ensure_user, reachable
from slurm_synergy.hooks.install import WRAPPERS, render_wrappers
from slurm_synergy.jobs import records, wait
from slurm_synergy.chains import read_chains
from slurm_synergy.slurm import Slurm
from slurm_synergy.decisions.table import TABLE_NAME, read

from tests.helpers import make_profile

ROOT = Path(__file__).resolve().parents[2]
SYNERGY = [sys.executable, "-m", "slurm_synergy.cli"]


# Jobs whose epilog a test makes fail on purpose; any other failing epilog is a defect.
EXPECTED_DRAINS: set[str] = set()


@pytest.fixture(scope="session")
def box(tmp_path_factory) -> Iterator[LocalCluster]:
    os.environ.pop("SLURM_CONF", None)
    home = tmp_path_factory.mktemp("synergy-home")
    os.environ["SYNERGY_HOME"] = str(home)
    # One generated dataset for the whole session, shared by every training job.
    os.environ["SYNERGY_DATA"] = str(home / "data")
    # No sync timer: tests compile the table from stores of their own (the demo's
    # fixture turns it on while the demo runs).
    cluster = LocalCluster(sync_every_s=0)
    was_up, _ = cluster.status()
    timer_was_on = cluster.timer_running()
    # `up` also compiles the decision table from this session's (empty) profile store,
    # so no decision from an earlier run rewrites this session's jobs.
    cluster.up(log=lambda line: print(line, file=sys.stderr))
    hooks_log = cluster.state / "log" / "hooks.log"
    start = hooks_log.stat().st_size if hooks_log.exists() else 0
    try:
        yield cluster
        # The suite's ordinary jobs must never drain the node: an epilog fails only when
        # it cannot enforce the power cap, which only test_node_hooks provokes.
        with open(hooks_log, encoding="utf-8") as fh:
            fh.seek(start)
            failed = {line.split("job=")[1].split()[0] for line in fh
                      if line.split()[1:2] == ["epilog"] and "node will drain" in line}
        assert failed <= EXPECTED_DRAINS, \
            f"epilogs failed for jobs {sorted(failed - EXPECTED_DRAINS)}"
        states = [n.state for n in cluster.slurm.nodes("")]
        assert not any("drain" in s for s in states), f"node left {states}"
    finally:
        # A cluster the suite started is stopped with it (a clean clone's CI leaves no
        # daemon behind); one that was up before stays up.
        if not was_up:
            cluster.down(log=lambda line: None)
        elif timer_was_on:
            LocalCluster().up(log=lambda line: None)


@pytest.fixture(scope="session")
def slurm(box) -> Slurm:
    return box.slurm


# Ordinary users of the local cluster: Unix accounts made for the suite (and removed
# after it, where it made them) with Slurm associations under one account.
TENANTS = ("synergy-alice", "synergy-bob")
TENANT_ACCOUNT = "synergy-tenants"
# What ordinary users run: the venv, made from Debian's interpreter (Makefile).
TENANT_PYTHON = str(ROOT / ".venv" / "bin" / "python")


@dataclass(frozen=True)
class Tenant:
    name: str
    uid: int


@dataclass(frozen=True)
class Tenants:
    """Two ordinary users and a folder both can write (mode 1777, as /tmp)."""

    alice: Tenant
    bob: Tenant
    shared: Path

    def run(self, who: Tenant, args, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
        """`args` run as `who`, in the shared folder, with Slurm's and our environment."""
        base = {"PATH": os.environ["PATH"], "SLURM_CONF": str(paths.local_slurm_conf()),
                "SYNERGY_HOME": str(self.shared / who.name), "HOME": str(self.shared),
                "SYNERGY_PROFILES": ""}
        return subprocess.run(["runuser", "-u", who.name, "--", *args], capture_output=True,
                              text=True, env={**base, **(env or {})}, cwd=self.shared,
                              timeout=timeout)

    def synergy(self, who: Tenant, *args: str, env: dict[str, str] | None = None):
        return self.run(who, [str(ROOT / ".venv" / "bin" / "synergy"), *args], env)


@pytest.fixture(scope="session")
def tenants(slurm) -> Iterator[Tenants]:
    made = [name for name in TENANTS if ensure_user(slurm, name, TENANT_ACCOUNT)]
    shared = Path(tempfile.mkdtemp(prefix="synergy-tenants-"))     # pytest's is 0700
    shared.chmod(0o1777)
    try:
        with reachable(ROOT):
            users = Tenants(*(Tenant(n, pwd.getpwnam(n).pw_uid) for n in TENANTS), shared)
            can = users.run(users.alice, [TENANT_PYTHON, "-c", "import slurm_synergy, torch"])
            assert can.returncode == 0, \
                f"an ordinary user cannot run {TENANT_PYTHON} " \
                f"({os.path.realpath(TENANT_PYTHON)}): {can.stderr.strip()}; `make setup` " \
                "makes the venv from Debian's python3"
            yield users
    finally:
        shutil.rmtree(shared, ignore_errors=True)
        for name in made:
            subprocess.run(["userdel", name], check=False)


@pytest.fixture
def site(tenants) -> Iterator[Path]:
    """A site's shared profile store for this test (mode 1777, as docs/install.md makes
    it), which `synergy plugin sync` (root's, as a site's cron) compiles; then the
    session's table compiled back."""
    site = tenants.shared / f"profiles-{os.urandom(4).hex()}"
    site.mkdir()
    site.chmod(0o1777)
    os.environ["SYNERGY_PROFILES"] = str(site)
    try:
        yield site
    finally:
        os.environ["SYNERGY_PROFILES"] = ""
        assert synergy("plugin", "sync").returncode == 0


DEMO_SUBMITTED = re.compile(r"^submitted \d+ jobs from .*: (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class Demo:
    stdout: str
    job_ids: list[str]          # the CSV's jobs
    store: Path                 # the shared profile store it ran on


@pytest.fixture(scope="session")
def demo(box, tenants) -> Iterator[Demo]:
    """`synergy demo`, once for the session, as `make demo` runs it: the cluster's sync
    timer on, on a shared profile store of its own (other tests profile the same
    workloads), a tenant as its ordinary user; then the timer off and the session's
    table back."""
    store = Path(tempfile.mkdtemp(prefix="synergy-demo-profiles-"))
    store.chmod(0o1777)
    os.environ["SYNERGY_PROFILES"] = str(store)
    try:
        proc = synergy("demo", "--user", tenants.alice.name)
    finally:
        os.environ["SYNERGY_PROFILES"] = ""
        box.up(log=lambda line: None)
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        found = DEMO_SUBMITTED.search(proc.stdout)
        assert found, proc.stdout
        yield Demo(proc.stdout, found.group(1).split(", "), store)
    finally:
        shutil.rmtree(store, ignore_errors=True)


@pytest.fixture
def tag() -> str:
    """A token that makes this test's job names its own among earlier runs in accounting."""
    return uuid.uuid4().hex[:8]


def synergy(*args: str, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real `synergy` command, as a user runs it (`env` over the suite's)."""
    return subprocess.run([*SYNERGY, *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})})


def cluster_up() -> subprocess.CompletedProcess:
    """`synergy cluster up` as `make cluster` runs it, but without the sync timer: the
    suite compiles tables from stores of its own."""
    return synergy("cluster", "up", "--sync-every", "0")


def executable(path: Path, text: str) -> Path:
    """A user's job script: written and made executable."""
    path.write_text(text)
    path.chmod(0o755)
    return path


def submitted_ids(proc: subprocess.CompletedProcess) -> dict[str, str]:
    assert proc.returncode == 0, proc.stderr
    return {name: job for job, name in (line.split("\t") for line in proc.stdout.splitlines())}


def finish(slurm: Slurm, ids, timeout: float = 600):
    recs = wait(slurm, list(ids), timeout_s=timeout)
    return {r.job_id: r for r in recs}


def epilogs_done(box, *job_ids: str, timeout: float = 60) -> str:
    """sacct shows a job ended before its epilog has run: wait for each epilog's last
    line (every job's writes its stats: the local cluster's policy has cgroup_peaks on).
    Returns the hooks' log."""
    deadline = time.monotonic() + timeout
    while True:
        log = (box.state / "log" / "hooks.log").read_text()
        if all(f"epilog job={j} stats -> " in log for j in job_ids):
            return log
        assert time.monotonic() < deadline, f"no epilog finished for some of {job_ids}"
        time.sleep(0.3)


def queued(slurm: Slurm, job: str):
    """Job `job` as squeue has it (slurm.QueuedJob), None once it left the queue."""
    return next((j for j in slurm.queue() if j.job_id == job), None)


def wait_state(slurm: Slurm, job: str, state: str, timeout: float = 60, reasons=None):
    """Job `job` once squeue shows it in `state` (for a pending one, with one of
    `reasons` if given)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        j = queued(slurm, job)
        if j is not None and j.state == state and (reasons is None or j.reason in reasons):
            return j
        time.sleep(1)
    raise AssertionError(f"job {job} never reached {state}: {queued(slurm, job)}")


def resubmitted(job: str) -> str:
    """The job that `job` submitted after profiling, from the recorded chain."""
    links = [c for c in read_chains(Slurm().cluster_name()) if c.profiled_job == job]
    assert len(links) == 1, f"job {job} did not resubmit itself once: {links}"
    return links[0].resubmitted_job


def job_names_in_queue(slurm: Slurm, names) -> list[str]:
    """Our test job names that Slurm knows at all, queued or accounted."""
    out = slurm.run(["squeue", "--noheader", "--states=all", "--format=%j"])
    acct = slurm.run(["sacct", "--noheader", "--parsable2", "--allusers", "--format=JobName",
                      "--starttime=now-1hour"])
    known = set(out.split()) | set(acct.split())
    return sorted(set(names) & known)


# A workload of make_profile's that tests of several users' jobs decide for.
FP = "5e1f5e1f5e1f5e1f"
ACCT = ("JobID", "User", "State", "AllocCPUS", "ReqMem", "Comment")
# Saves the profile file it is given into the caller's own folder of the site's store,
# through the package, as a user's profiling job does.
SAVE = ("import sys\n"
        "from slurm_synergy.model.profile_read import profile_from_json\n"
        "from slurm_synergy.profiles import ProfileStore\n"
        "print(ProfileStore.default().save(profile_from_json(open(sys.argv[1]).read(), "
        "sys.argv[1])))\n")


def profile_file(tenants, name: str, one_core_rate: float, fp: str = FP) -> Path:
    """make_profile's workload (2 cores at 100 samples/s), its one core at `one_core_rate`."""
    p = make_profile(fp)
    points = tuple(replace(pt, samples_per_s=one_core_rate,
                           repeats=(one_core_rate,) * 3) if pt.cores == 1 and
                   pt.measure == "train" else pt for pt in p.points)
    path = tenants.shared / f"{name}-{fp}.json"
    path.write_text(replace(p, points=points).to_json())
    path.chmod(0o644)
    return path


def save_as(tenants, who, site: Path, source: Path) -> Path:
    """The profile file `source` saved as `who` saves one, into their folder of `site`."""
    ran = tenants.run(who, [TENANT_PYTHON, "-c", SAVE, str(source)],
                      env={"SYNERGY_PROFILES": str(site)})
    assert ran.returncode == 0, ran.stderr
    return Path(ran.stdout.strip())


def sbatch_as(tenants, who, *options: str) -> str:
    """A one-second job of `who`'s, with these sbatch options; its id."""
    ran = tenants.run(who, ["sbatch", "--parsable", f"--output={tenants.shared}/%j.out",
                            "--time=5", *options, "--wrap", "sleep 1"])
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.strip()


def accounted(slurm, ids) -> dict[str, dict[str, str]]:
    """sacct's records of ended jobs, once accounting has their sizes (once, a record read
    right at the end showed ReqMem "16?")."""
    deadline = time.monotonic() + 30
    while True:
        acct = {r["JobID"]: r for r in slurm.sacct(list(ids), ACCT)}
        if all(re.fullmatch(r"\d+[MG]", acct.get(j, {}).get("ReqMem", "")) for j in ids) \
                or time.monotonic() > deadline:
            return acct
        time.sleep(1)


def decision_table(box) -> dict:
    """The entries of the local cluster's decision table, by (uid, fingerprint)."""
    return read(box.etc / TABLE_NAME)[1]



__all__ = ["EXPECTED_DRAINS", "Tenant", "Tenants", "epilogs_done", "synergy", "executable",
           "submitted_ids", "finish", "job_names_in_queue", "records", "resubmitted", "ROOT",
           "FP", "profile_file", "save_as", "sbatch_as", "accounted", "decision_table"]


FAKE_NVML = ROOT / "tests" / "fakes" / "nvml"


@contextlib.contextmanager
def fake_gpus(box, tmp_path: Path, gpus: list[dict]):
    """slurmd's prolog and epilog see `gpus` (minor numbers 0-3, as the local cluster's
    gres files are numbered) until the block ends; then the real wrappers come back."""
    state = tmp_path / "nvml.json"
    state.write_text(json.dumps({"gpus": gpus}))
    for name in WRAPPERS.values():
        wrapper = box.etc / name
        text = wrapper.read_text().replace(
            "export PATH\n", f"export PATH\nPYTHONPATH={FAKE_NVML}\nFAKE_NVML_STATE={state}\n"
            "export PYTHONPATH FAKE_NVML_STATE\n", 1)
        wrapper.write_text(text)
    try:
        yield state
    finally:
        render_wrappers(box.etc, box.hook_paths)


def gpu(minor: int, **kw) -> dict:
    return {"uuid": f"GPU-{minor:08d}-feed", "pci": f"00000000:{0x17 + minor:02X}:00.0",
            "name": "NVIDIA Fake", "minor": minor, "limit_mw": 300_000, "min_mw": 100_000,
            "max_mw": 400_000, "default_mw": 300_000, "energy_mj": 7_000_000,
            "power_mw": 180_000, "util": 60, "mem_used_mb": 5000, "refuse": False, **kw}
