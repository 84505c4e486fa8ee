"""The decision's loader workers, from the node prolog (told the job's comment) to the
TaskProlog (which exports them to every task): hooks/taskenv.py and etc/task_prolog.sh.j2
run as they run on a node, the TaskProlog as the job's user and as another user. The
file is the job's user's alone, a job without a decision gets none, and nothing but the
one name set to a whole number reaches a task, whatever the file holds."""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_synergy.hooks import taskenv
from slurm_synergy.hooks.install import task_prolog_text
from tests.helpers import hook_ctx

OWNER, OTHER = 4242, 4243          # the job's user, and another user of the node
DECIDED = ("synergy:fp=0123456789abcdef asked=c4,m3072,g1 "
           "decision=c2,m768,g1,w3,p250 by=41")
NONE_YET = "unset SYNERGY_WORKERS\n"


@pytest.fixture
def node(short_tmp: Path) -> Path:
    """A node's folder that other users may enter (tmp_path's parents are root's alone)."""
    if os.geteuid() != 0:
        pytest.fail("runs as root, as the hooks do: it hands files to other users")
    short_tmp.chmod(0o711)
    return short_tmp


def task_prolog(node: Path, job_id: str, uid: int | None = None) -> str:
    """What the TaskProlog prints for a task of `job_id`, run as `uid` (root: None)."""
    script = node / "task_prolog"
    script.write_text(task_prolog_text(node / "run"))
    script.chmod(0o755)
    who = [] if uid is None else ["setpriv", f"--reuid={uid}", f"--regid={uid}",
                                  "--clear-groups"]
    out = subprocess.run([*who, str(script)], env={"SLURM_JOB_ID": job_id, "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0 and out.stderr == "", out
    return out.stdout


def test_a_decided_jobs_workers_reach_its_own_tasks_alone(node):
    ctx = hook_ctx(node, job="77", gpus="", comment=DECIDED, uid=str(OWNER))
    taskenv.hand_over(ctx)
    f = taskenv.path(ctx.run_dir, "77")
    st = f.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (OWNER, 0o400)
    assert f.read_text() == "SYNERGY_WORKERS=3\n"
    assert stat.S_IMODE(taskenv.folder(ctx.run_dir).stat().st_mode) == 0o711
    assert task_prolog(node, "77", OWNER) == NONE_YET + "export SYNERGY_WORKERS=3\n"
    # Another user can neither read it nor list the folder for the names of others'.
    assert task_prolog(node, "77", OTHER) == NONE_YET
    listed = subprocess.run(["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}",
                             "--clear-groups", "ls", str(taskenv.folder(ctx.run_dir))],
                            capture_output=True, text=True, timeout=10)
    assert listed.returncode != 0 and "77" not in listed.stdout
    # Requeued (same id) after its decision was dropped: its tasks get none.
    taskenv.hand_over(replace(ctx, comment="synergy:fp=0123456789abcdef profile=1"))
    assert not f.exists() and task_prolog(node, "77", OWNER) == NONE_YET
    taskenv.hand_over(ctx)
    taskenv.take_back(ctx)
    assert not f.exists()


def test_the_task_prolog_exports_nothing_but_whole_workers(node):
    folder = taskenv.folder(node / "run")
    folder.mkdir(parents=True)
    # The file is the user's to write: nothing in it may set another name or run code.
    (folder / "78").write_text("PATH=/evil\nLD_PRELOAD=/x.so\nSYNERGY_WORKERS=3; id\n"
                               "SYNERGY_WORKERS=$(id)\nSYNERGY_WORKERS=\nSYNERGY_WORKERS=5\n")
    assert task_prolog(node, "78") == NONE_YET + "export SYNERGY_WORKERS=5\n"
    os.mkfifo(folder / "79")            # never opened: a task is never held up
    for job_id in ("79", "../run/tasks/78", "78/", "", "7 8"):
        assert task_prolog(node, job_id) == NONE_YET, job_id


def test_a_job_without_a_decision_or_a_user_gets_no_file(node):
    for ctx in (hook_ctx(node, job="80", gpus="", comment="synergy:fp=0123456789abcdef",
                         uid=str(OWNER)),
                hook_ctx(node, job="81", gpus="", comment=DECIDED, uid="")):
        taskenv.hand_over(ctx)
        assert not taskenv.path(ctx.run_dir, ctx.job_id).exists()


def test_a_private_run_folder_is_opened_to_enter_and_a_shared_one_refused(node):
    run = node / "run"
    run.mkdir(mode=0o700)
    ctx = hook_ctx(node, job="82", gpus="", comment=DECIDED, uid=str(OWNER))
    taskenv.hand_over(ctx)
    assert stat.S_IMODE(run.stat().st_mode) == 0o711
    assert task_prolog(node, "82", OWNER) == NONE_YET + "export SYNERGY_WORKERS=3\n"
    # One that others may write could have the file swapped under root: nothing written.
    run.chmod(0o777)
    taskenv.take_back(ctx)
    taskenv.hand_over(ctx)
    assert not taskenv.path(run, "82").exists()
    assert "the decision is not handed to the tasks" in (node / "hooks.log").read_text()


@pytest.mark.parametrize("comment, text", [
    (DECIDED, "SYNERGY_WORKERS=3\n"),
    ("decision=c1,m1,g1,w0", "SYNERGY_WORKERS=0\n"),
    # The user may write a decision too; the one the plugin appended last counts.
    ("decision=c1,m1,g1,w64 synergy:fp=0123456789abcdef decision=c2,m768,g1,w1",
     "SYNERGY_WORKERS=1\n"),
    ("synergy:fp=0123456789abcdef asked=c4,m3072,g1", ""),
    ("decision=junk", ""),
    ("", ""),
])
def test_the_file_holds_the_comments_decision(comment, text):
    assert taskenv.lines(comment) == text
