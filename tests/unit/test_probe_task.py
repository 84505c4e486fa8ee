"""Task mode (probe/task.py, measure/inrun/attach.py, etc/task_prolog.sh.j2), outside Slurm:
the TaskProlog's output and its faults, and real Python training scripts started as a
plain batch script starts them, with nothing of ours around them: watched in their own
processes, measured while they train where the job is marked, their exit status and
what they compute their own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_synergy.hooks.install import task_prolog_text
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.model.policy import load_policy
from slurm_synergy.probe.affinity import confined_line
from slurm_synergy.probe.records import BOOT
from slurm_synergy.probe.task import NO_STEP_FLOOR_S
from slurm_synergy.profiles import ProfileStore
from tests.helpers import site_policy_with

FP = "00000000000000a7"
PYTHON = sys.executable
# A sweep needs two cores: fail loudly where there are fewer, never skip.
assert len(os.sched_getaffinity(0)) >= 2, "these tests hold a run to fewer cores: they need 2"

LOADER_SCRIPT = """
import json, sys, time, torch
from torch.utils.data import DataLoader, Dataset
class Squares(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        x = torch.full((64,), float(i))
        for _ in range(40): x = (x * 1.0001).sin()
        return x
total, steps, step = 0.0, int(sys.argv[2]), 0
end = time.monotonic() + 150  # a bound for a loaded machine; its steps end it first
loader = DataLoader(Squares(), batch_size=8, num_workers=1)
while step < steps and time.monotonic() < end:
    for batch in loader:
        total += float(batch.sum())
        torch.mm(torch.ones(120, 120), torch.ones(120, 120))
        step += 1
        if step >= steps or time.monotonic() >= end: break
json.dump({"total_is_finite": total == total}, open(sys.argv[1], "w"))
print("trained", flush=True)
sys.exit(int(sys.argv[3]))
"""
# pytorch/examples' word_language_model batches by hand: slices of one tensor, no loader.
MANUAL_SCRIPT = """
import sys, time, torch
data = torch.randn(4000, 16)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
end = time.monotonic() + float(sys.argv[1])
i = 0
while time.monotonic() < end:
    batch = data[i % 3900:i % 3900 + 100]
    loss = model(batch).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    i += 100
"""
ITERABLE_SCRIPT = """
import json, sys, torch
from torch.utils.data import DataLoader, IterableDataset, Dataset
class Stream(IterableDataset):
    def __iter__(self): return iter(range(12))
class Items(Dataset):
    def __len__(self): return 12
    def __getitem__(self, i): return i
stream = DataLoader(Stream(), batch_size=None, num_workers=2)
items = DataLoader(Items(), batch_size=None, num_workers=2)
json.dump({"stream": sorted(int(x) for x in stream), "stream_workers": stream.num_workers,
           "items_workers": items.num_workers}, open(sys.argv[1], "w"))
"""


@pytest.fixture
def task(tmp_path: Path, short_tmp: Path) -> dict[str, str]:
    """The environment a task of a keyed plain job has once the TaskProlog ran: the
    probe's boot folder first on PYTHONPATH, the installation's interpreter named.

    Its TMPDIR is short_tmp, not a folder under tmp_path: the DataLoader's workers hand
    tensors back through a Unix socket made under TMPDIR (the scripts hung in CI at
    pytest-105, one digit past what a fresh machine reaches)."""
    policy = tmp_path / "policy.toml"
    policy.write_text(site_policy_with(sweep_window_s="0.5", sweep_repeats="1"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SYNERGY_"))}
    env["SYNERGY_PROFILES"] = ""        # the user's own store, not the local cluster's
    env.update(PYTHONPATH=str(BOOT), SYNERGY_TASK_PYTHON=PYTHON, SYNERGY_FINGERPRINT=FP,
               SYNERGY_PLAIN=FP,
               SYNERGY_HOME=str(tmp_path / "home"), SYNERGY_POLICY=str(policy),
               SYNERGY_DECISIONS=str(tmp_path / "table.tbl"), TMPDIR=str(short_tmp))
    return env


def run(script: str, args: list[str], env: dict[str, str], tmp_path: Path,
        python: str = PYTHON) -> subprocess.CompletedProcess:
    """The script run as a job runs it: its standard error a file (the job's log), which
    the supervisor writes its lines to as well.

    The scripts train a number of steps, stopping at 90 s at the latest: beside busier
    work (these tests run at nice 19 beside the integration tests) a step slows and a
    window holds fewer of them, so a count that fits a sweep with room unloaded fits it
    loaded, where a budget of 20 s ran out (CI of 2026-12-04: a run ended inside its
    1-core window, its steps starved and its windows set aside for pauses); the 90 s
    bound a run that starves outright."""
    path = tmp_path / "train.py"
    path.write_text(script)
    log = tmp_path / "job.log"
    with open(log, "w") as err:
        proc = subprocess.run([python, str(path), *args], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=err, text=True, timeout=400)
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout,
                                       log.read_text())


def result(tmp_path: Path, task: dict[str, str], timeout_s: float = 60.0) -> dict:
    """The run's probe result once its supervisor, which outlives the script by a moment,
    has written it and gone, leaving no records folder behind in the task's TMPDIR."""
    path = tmp_path / "home" / "runs" / "unknown" / "probe.json"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (
            not path.exists() or list(Path(task["TMPDIR"]).glob("synergy-*"))):
        time.sleep(0.2)
    assert path.exists(), "no probe result"
    assert not list(Path(task["TMPDIR"]).glob("synergy-*")), "the records folder stays"
    return json.loads(path.read_text())


def test_a_plain_scripts_training_is_watched_in_its_own_processes(task, tmp_path):
    proc = run(LOADER_SCRIPT, [str(tmp_path / "out.json"), "600", "3"], task, tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "trained\n" and "slurm-synergy" not in proc.stderr
    assert json.loads((tmp_path / "out.json").read_text())["total_is_finite"]
    res = result(tmp_path, task)
    assert res["ok"] and res["mode"] == "watch" and res["exit_status"] is None
    m = res["measurement"]
    assert m["processes"] == 1 and m["samples_per_s"] > 0 and 0 <= m["data_wait_share"] <= 1
    assert res["processes"][0]["loaders"] == ["DataLoader"]


def test_a_marked_job_is_measured_while_it_trains(task, tmp_path):
    proc = run(LOADER_SCRIPT, [str(tmp_path / "out.json"), "2100", "0"],
               dict(task, SYNERGY_PROFILE="1"), tmp_path)
    assert proc.returncode == 0 and proc.stdout == "trained\n", proc.stderr
    result(tmp_path, task)
    env_home = tmp_path / "home"
    store = ProfileStore(env_home / "profiles")
    assert store.has(FP), proc.stderr
    profile = store.load(FP)
    assert {p.cores for p in profile.train_points()} == {1, 2}, profile.notes
    assert profile.model.basis == "in-run" and profile.command[-3:] == (
        str(tmp_path / "out.json"), "2100", "0")
    assert f"inrun: measuring {FP}" in proc.stderr


def test_a_script_that_batches_by_hand_is_counted_by_its_optimizer_steps(task, tmp_path):
    proc = run(MANUAL_SCRIPT, ["3"], task, tmp_path)
    assert proc.returncode == 0, proc.stderr
    res = result(tmp_path, task)
    (rec,) = res["processes"]
    assert rec["loaders"] == ["optimizer"] and not rec["batch_size_known"]
    assert res["ok"] and res["measurement"]["steps"] > 10


def test_a_marked_job_that_updates_its_weights_by_hand_is_measured_by_its_backward_passes(
        task, tmp_path):
    script = (Path(__file__).parents[1] / "corpus" / "hand_updates.py").read_text()
    proc = run(script, ["5000", "90"], dict(task, SYNERGY_PROFILE="1"), tmp_path)
    assert proc.returncode == 0 and proc.stdout.endswith("done\n"), proc.stderr
    res = result(tmp_path, task)
    assert res["processes"][0]["loaders"] == ["backward"], res["processes"]
    store = ProfileStore(tmp_path / "home" / "profiles")
    assert store.has(FP), proc.stderr
    assert {p.cores for p in store.load(FP).train_points()} == {1, 2}, store.load(FP).notes


# Each framework's own loop, as its users write one (tests/corpus), about 25 s of steps
# unloaded with one loader worker: Lightning's reads a batch ahead and validates every
# epoch, accelerate's wraps the loader, the Trainer builds its own.
@pytest.mark.parametrize("script,args", [
    ("lightning_style.py", ["1300", "1", "90"]),
    ("accelerate_style.py", ["3000", "1", "90"]),
    ("hf_trainer_style.py", ["400", "1", "90"]),
])
def test_a_marked_job_of_each_framework_is_measured_while_it_trains(task, tmp_path, script,
                                                                     args):
    source = (Path(__file__).parents[1] / "corpus" / script).read_text()
    proc = run(source, args, dict(task, SYNERGY_PROFILE="1"), tmp_path)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("done"), proc.stderr
    res = result(tmp_path, task)
    rec = res["processes"][0]
    # Samples, not steps: each yields tuples or a Hugging Face collator's BatchEncoding.
    assert rec["loaders"] == ["DataLoader"] and rec["batch_size_known"], rec
    store = ProfileStore(tmp_path / "home" / "profiles")
    assert store.has(FP), proc.stderr
    profile = store.load(FP)
    assert {p.cores for p in profile.train_points()} == {1, 2}, profile.notes
    assert all(p.samples_per_s > 0 for p in profile.train_points())


def test_an_iterable_datasets_workers_are_never_changed(task, tmp_path):
    plain = run(ITERABLE_SCRIPT, [str(tmp_path / "alone.json")],
                {k: v for k, v in task.items() if k != "PYTHONPATH"}, tmp_path)
    probed = run(ITERABLE_SCRIPT, [str(tmp_path / "probed.json")],
                 dict(task, SYNERGY_WORKERS="0"), tmp_path)
    assert plain.returncode == probed.returncode == 0, probed.stderr
    alone = json.loads((tmp_path / "alone.json").read_text())
    seen = json.loads((tmp_path / "probed.json").read_text())
    # Each of two workers runs the whole stream: 24 items either way, never 12.
    assert seen["stream"] == alone["stream"] and seen["stream_workers"] == 2
    assert seen["items_workers"] == 0, "a map-style loader takes the decision's workers"


@pytest.mark.parametrize("marked", ["", "1"])
def test_a_process_that_never_trains_starts_nothing_and_leaves_nothing(task, tmp_path, marked):
    # A helper (`python -c ...`), marked job or not: ended long before any policy's wait.
    proc = run("print('hello')", [], dict(task, SYNERGY_PROFILE=marked), tmp_path)
    assert proc.returncode == 0 and proc.stdout == "hello\n" and proc.stderr == ""
    assert not list(Path(task["TMPDIR"]).iterdir())
    assert not (tmp_path / "home" / "runs").exists()
    assert not (tmp_path / "home" / "profiles").exists()


# A forward-only loop by hand: no loader, no optimizer, no backward pass, for argv[1] s.
FORWARD_ONLY = """
import sys, time, torch
model = torch.nn.Linear(16, 4)
end, n = time.monotonic() + float(sys.argv[1]), 0
with torch.no_grad():
    while time.monotonic() < end:
        model(torch.randn(32, 16)); n += 1
print(f"inferred {n} batches", flush=True)
sys.exit(4)
"""


@pytest.mark.parametrize("marked,wait_s,held", [
    ("1", 5, True),         # ran past the policy's wait for a first step: held
    ("1", 300, False),      # ended inside it: no different from a helper
    ("", 5, False),         # not marked: nothing to hold
])
def test_a_plain_scripts_python_that_never_steps_is_held_with_one_line(task, tmp_path, marked,
                                                                         wait_s, held):
    Path(task["SYNERGY_POLICY"]).write_text(site_policy_with(
        sweep_window_s="0.5", sweep_repeats="1", first_batch_timeout_s=str(wait_s)))
    proc = run(FORWARD_ONLY, ["7"], dict(task, SYNERGY_PROFILE=marked), tmp_path)
    # The script's own: its exit status and output, whatever is said beside them.
    assert proc.returncode == 4 and proc.stdout.startswith("inferred "), proc.stderr
    store = ProfileStore(tmp_path / "home" / "profiles")
    assert not store.has(FP)
    assert not list(Path(task["TMPDIR"]).iterdir())
    if not held:
        assert proc.stderr == "" and not store.is_held(FP)
        return
    (line,) = proc.stderr.splitlines()
    # At least its 7 s (its import comes first).
    assert re.match(r"inrun: no training step seen in ([7-9]|\d\d)s of ", line) and line.endswith(
        "train.py 7 (no batch from a data loader, no optimizer step, no backward pass); no "
        "profile; its next jobs are not marked for measuring for 7 days (`synergy profiles "
        f"--forget {FP}` measures the next one)"), line
    ((fp, record),) = store.holds()
    assert fp == FP and record is not None and record.why == line[len("inrun: "):].split(
        "; its next")[0]


def test_no_policy_waits_for_a_first_step_less_than_the_anchor_looks_for(tmp_path):
    """A tree that ended sooner than NO_STEP_FLOOR_S starts nothing at its exit: no
    policy's wait for a first step may be shorter, or such a tree would never be held."""
    path = tmp_path / "policy.toml"
    path.write_text(site_policy_with(first_batch_timeout_s=str(NO_STEP_FLOOR_S)))
    assert load_policy(path).first_batch_timeout_s == NO_STEP_FLOOR_S
    path.write_text(site_policy_with(first_batch_timeout_s=str(NO_STEP_FLOOR_S - 0.5)))
    with pytest.raises(SynergyError, match="first_batch_timeout_s"):
        load_policy(path)


def test_an_interpreter_too_old_for_the_probe_runs_unwatched_with_one_line(task, tmp_path):
    # As an old interpreter: the version the boot file reads says 3.6.
    code = ("import sys; sys.version_info = (3, 6, 15, 'final', 0); "
            f"sys.path.insert(0, {str(BOOT)!r}); import sitecustomize; print('ran')")
    proc = subprocess.run([PYTHON, "-S", "-c", code], env=task, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "ran\n"
    assert proc.stderr == ("slurm-synergy probe: Python 3.6 is older than the probe needs "
                           "(3.8); this process runs unwatched\n")


def test_a_caller_reading_the_scripts_output_to_its_end_gets_the_supervisors_lines(
        task, tmp_path):
    # srun carries a task's output to the job's log through a pipe, as a driver with
    # capture_output reads it: the supervisor's lines go there too, and the pipe ends
    # with the run (the timeout only guards the test against a hang).
    (tmp_path / "train.py").write_text(LOADER_SCRIPT)
    proc = subprocess.run([PYTHON, str(tmp_path / "train.py"), str(tmp_path / "out.json"),
                           "450", "0"], env=dict(task, SYNERGY_PROFILE="1"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0 and proc.stdout == "trained\n"
    assert "inrun: " in proc.stderr, proc.stderr
    result(tmp_path, task)


def test_the_supervisor_lets_go_of_a_log_pipe_once_the_run_has_ended(tmp_path):
    # A reader of the pipe (srun, `| tee`) sees its end with the run's, while the
    # supervisor may still be writing the result: here it goes on for a minute.
    helper = ("import subprocess, sys, time\n"
              "from slurm_synergy.measure.inrun.attach import let_go_of_the_log\n"
              "run = subprocess.Popen(['sleep', '1'])\n"
              "print('watching', file=sys.stderr, flush=True)\n"
              "let_go_of_the_log(run.pid)\n"
              "print('after the run', file=sys.stderr, flush=True)\n"
              "time.sleep(60)\n")
    proc = subprocess.Popen([PYTHON, "-c", helper], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        assert proc.stderr.read() == "watching\n", "the pipe ended with the run, quietly"
        assert proc.poll() is None, "while the supervisor goes on"
    finally:
        proc.kill()
        proc.wait()


def test_processes_bound_to_cores_of_their_own_are_not_swept(task, tmp_path):
    # As numactl or a launcher that binds each rank: the sweep would hold them all to
    # the same cores and, giving cores back, undo the binding.
    bound = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
    proc = run(bound + LOADER_SCRIPT, [str(tmp_path / "out.json"), "1200", "0"],
               dict(task, SYNERGY_PROFILE="1"), tmp_path)
    assert proc.returncode == 0 and proc.stdout == "trained\n"
    result(tmp_path, task)
    assert "keep cores of their own" in proc.stderr and "no sweep" in proc.stderr
    assert not (tmp_path / "home" / "profiles" / f"{FP}.json").exists()


def test_a_supervisor_that_cannot_start_costs_the_run_nothing(task, tmp_path):
    env = dict(task, SYNERGY_TASK_PYTHON=str(tmp_path / "no-such-python"))
    proc = run(LOADER_SCRIPT, [str(tmp_path / "out.json"), "300", "5"], env, tmp_path)
    assert proc.returncode == 5 and proc.stdout == "trained\n"
    assert json.loads((tmp_path / "out.json").read_text())["total_is_finite"]


def test_a_records_folder_that_cannot_be_made_leaves_the_run_unwatched(task, tmp_path):
    env = dict(task, TMPDIR=str(tmp_path / "no-such-folder"))
    proc = run(LOADER_SCRIPT, [str(tmp_path / "out.json"), "300", "6"], env, tmp_path)
    assert proc.returncode == 6 and proc.stdout == "trained\n"
    assert proc.stderr.startswith("slurm-synergy probe: not watching this process: ")
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "home" / "runs").exists()


def test_under_our_own_supervisor_no_second_one_starts(task, tmp_path):
    # A CSV job's script runs its command under the probe: the probe's process may be a
    # task-mode anchor itself, and the command beneath it must not start another.
    (tmp_path / "train.py").write_text(LOADER_SCRIPT)
    proc = subprocess.run([PYTHON, "-m", "slurm_synergy.probe", "--mode", "watch", "--out",
                           str(tmp_path / "probe.json"), "--", PYTHON, str(tmp_path / "train.py"),
                           str(tmp_path / "out.json"), "450", "0"],
                          env=task, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "probe.json").read_text())["ok"]
    time.sleep(2)
    assert not (tmp_path / "home" / "runs").exists(), "a second supervisor wrote a result"
    assert not list(Path(task["TMPDIR"]).glob("synergy-*"))


# --- the TaskProlog --------------------------------------------------------------------

# What the TaskProlog prints for every task before anything else: no decision's workers
# where the prolog left none for the job (tests/unit/test_taskenv.py: where it did).
NO_DECISION = "unset SYNERGY_WORKERS\n"


def task_prolog(tmp_path: Path, boot: Path = BOOT, python: str = PYTHON) -> Path:
    path = tmp_path / "task_prolog"
    path.write_text(task_prolog_text(tmp_path / "run", Path(python), boot))
    path.chmod(0o755)
    return path


def prolog_output(script: Path, env: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=10,
                          **kwargs)


def test_the_task_prolog_puts_the_probe_first_on_a_keyed_jobs_path(tmp_path):
    script = task_prolog(tmp_path)
    out = prolog_output(script, {"SYNERGY_FINGERPRINT": FP, "SYNERGY_PLAIN": FP,
                                 "PYTHONPATH": "/mine"})
    assert out.returncode == 0 and out.stderr == ""
    fresh = "unset SYNERGY_PROBE_DIR\nunset SYNERGY_PROBE_CONFIG\nunset SYNERGY_TASK_ANCHOR\n"
    assert out.stdout == (NO_DECISION + f"export PYTHONPATH={BOOT}:/mine\n"
                          f"export SYNERGY_TASK_PYTHON={PYTHON}\n" + fresh)
    # An srun step inside the batch script has it already: not twice.
    again = prolog_output(script, {"SYNERGY_FINGERPRINT": FP, "SYNERGY_PLAIN": FP,
                                   "PYTHONPATH": f"{BOOT}:/mine"})
    assert again.stdout == NO_DECISION + f"export SYNERGY_TASK_PYTHON={PYTHON}\n" + fresh


@pytest.mark.parametrize("fingerprint", ["", "0123", "00000000000000A7", "00000000000$(id)",
                                         "00000000000000a7\nexport X=1"])
def test_the_task_prolog_prints_nothing_for_other_jobs(tmp_path, fingerprint):
    out = prolog_output(task_prolog(tmp_path), {"SYNERGY_FINGERPRINT": fingerprint,
                                                "SYNERGY_PLAIN": fingerprint})
    assert (out.returncode, out.stdout, out.stderr) == (0, NO_DECISION, "")


@pytest.mark.parametrize("plain", [None, "", "0000000000000001"])
def test_the_task_prolog_leaves_a_job_lists_row_to_its_own_probe(tmp_path, plain):
    # A CSV row's script exports its fingerprint and unsets SYNERGY_PLAIN; one submitted
    # from inside a plain job inherits that job's key as SYNERGY_PLAIN.
    env = {"SYNERGY_FINGERPRINT": FP, **({} if plain is None else {"SYNERGY_PLAIN": plain})}
    out = prolog_output(task_prolog(tmp_path), env)
    assert (out.returncode, out.stdout, out.stderr) == (0, NO_DECISION, "")


@pytest.mark.parametrize("fault", ["no probe folder", "no interpreter", "output closed"])
def test_a_task_prolog_that_cannot_work_never_fails_the_task(tmp_path, fault):
    script = task_prolog(tmp_path, boot=tmp_path / "gone" if fault == "no probe folder" else
                         BOOT, python=str(tmp_path / "gone") if fault == "no interpreter"
                         else PYTHON)
    env = {"SYNERGY_FINGERPRINT": FP, "SYNERGY_PLAIN": FP}
    if fault == "output closed":
        out = subprocess.run(f"{script} >&-", shell=True, env=env, capture_output=True,
                             text=True, timeout=10)
    else:
        out = prolog_output(script, env)
        assert out.stdout == NO_DECISION
    assert out.returncode == 0


@pytest.mark.parametrize("env,cpus,said", [
    ({"SLURM_JOB_CPUS_PER_NODE": "2"}, 1, "this step runs on 1 of the job's 2 cores here"),
    ({"SLURM_JOB_CPUS_PER_NODE": "72(x2),36", "SLURM_NODEID": "2"}, 4, "4 of the job's 36"),
    ({"SLURM_JOB_CPUS_PER_NODE": "2"}, 2, ""),
    ({"SLURM_JOB_CPUS_PER_NODE": "4(x2)", "SLURM_NODEID": "7"}, 1, ""),   # no such node
    ({"SLURM_JOB_CPUS_PER_NODE": "2;rm"}, 1, ""), ({}, 1, ""),
])
def test_a_step_on_fewer_cores_than_its_job_is_told(env, cpus, said):
    line = confined_line(env, cpus)
    assert (said in line and "SRUN_CPUS_PER_TASK" in line) if said else line == ""
