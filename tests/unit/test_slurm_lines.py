"""A long Slurm output (sacct over thousands of jobs) read line by line as the command
prints it: the caller works while the command still writes, and a failure is classified
and retried as a whole call's is. A stand-in `sacct` on PATH plays each case."""
import json
import os
import stat
import time

import pytest

from slurm_synergy.slurm import runner
from slurm_synergy.model.errors import SlurmError, SlurmUnreachable
from slurm_synergy.slurm import SEP, Slurm


def _fake(tmp_path, monkeypatch, body, retry_s=0.0):
    exe = tmp_path / "sacct"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(runner, "RETRY_PAUSE_S", 0.01)
    return Slurm(tmp_path / "slurm.conf", retry_s=retry_s)


def test_lines_come_while_the_command_still_runs(tmp_path, monkeypatch):
    # The second line is printed only once the caller has seen the first: a reader that
    # waited for the command to end would wait for ever (here, until the timeout).
    go = tmp_path / "go"
    slurm = _fake(tmp_path, monkeypatch, f"echo 1{SEP}a\n"
                  f"while [ ! -e {go} ]; do sleep 0.01; done\necho 2{SEP}b\n")
    rows = []
    for row in slurm.sacct_rows(["1"], ("JobID", "State")):
        rows.append(row)
        go.touch()
    assert rows == [{"JobID": "1", "State": "a"}, {"JobID": "2", "State": "b"}]


def test_a_dbd_that_does_not_answer_is_asked_again_before_any_line(tmp_path, monkeypatch):
    tries = tmp_path / "tries"
    slurm = _fake(tmp_path, monkeypatch, f"echo x >> {tries}\n"
                  f"if [ $(wc -l < {tries}) -lt 2 ]; then\n"
                  "  echo 'sacct: error: Problem talking to the database: Connection refused' >&2\n"
                  f"  exit 1\nfi\necho 1{SEP}a\n", retry_s=5)
    assert slurm.sacct(["1"], ("JobID", "State")) == [{"JobID": "1", "State": "a"}]
    assert tries.read_text().count("x") == 2


def test_a_failure_after_some_lines_is_raised_not_retried(tmp_path, monkeypatch):
    tries = tmp_path / "tries"
    slurm = _fake(tmp_path, monkeypatch, f"echo x >> {tries}\necho 1{SEP}a\n"
                  "echo 'sacct: error: Connection reset by peer' >&2\nexit 1\n", retry_s=5)
    seen = []
    with pytest.raises(SlurmUnreachable, match="slurmdbd unreachable.*Connection reset"):
        for row in slurm.sacct_rows(["1"], ("JobID", "State")):
            seen.append(row)
    assert seen == [{"JobID": "1", "State": "a"}]      # half an answer, then the error
    assert tries.read_text().count("x") == 1


def test_a_refusal_is_an_error_with_its_message(tmp_path, monkeypatch):
    slurm = _fake(tmp_path, monkeypatch, "echo 'sacct: fatal: Invalid field requested' >&2\n"
                  "exit 1\n")
    with pytest.raises(SlurmError, match="Invalid field requested") as caught:
        slurm.sacct(["1"], ("JobID",))
    assert not isinstance(caught.value, SlurmUnreachable)


def test_a_command_that_hangs_is_stopped_at_its_timeout(tmp_path, monkeypatch):
    slurm = _fake(tmp_path, monkeypatch, "exec sleep 60\n")
    with pytest.raises(SlurmUnreachable, match="did not answer within 1s"):
        list(slurm.lines(["sacct"], timeout=1))


def test_much_on_stderr_does_not_stall_the_command(tmp_path, monkeypatch):
    # 256 KB of warnings: a stderr pipe nobody reads would fill at 64 KB and hang sacct.
    slurm = _fake(tmp_path, monkeypatch, "head -c 262144 /dev/zero | tr '\\0' w >&2\n"
                  f"echo 1{SEP}a\n")
    assert slurm.sacct(["1"], ("JobID", "State")) == [{"JobID": "1", "State": "a"}]


def test_a_reader_that_stops_early_stops_the_command(tmp_path, monkeypatch):
    # Left running, the command would write its mark 2 s on (and closing would wait).
    mark = tmp_path / "finished"
    slurm = _fake(tmp_path, monkeypatch, f"echo first\nsleep 2\necho done > {mark}\n")
    lines = slurm.lines(["sacct"])
    assert next(lines) == "first"
    lines.close()
    time.sleep(3)
    assert not mark.exists()


def _with_json(tmp_path, text_lines: str, jobs: list) -> str:
    """A stand-in sacct's body: the document of `jobs` (as json-c writes it) for its
    --json form, `text_lines` otherwise."""
    doc = tmp_path / "sacct.json"
    doc.write_text(json.dumps({"jobs": jobs, "errors": []}))
    return f"case \"$*\" in *--json*) cat {doc} ;; *) printf '{text_lines}' ;; esac\n"


def test_a_job_name_not_in_utf8_does_not_lose_the_answer(tmp_path, monkeypatch):
    # (the job name, a user's text, comes from sacct --json, which passes its bytes on)
    slurm = _fake(tmp_path, monkeypatch, _with_json(
        tmp_path, f"1{SEP}1\\n2{SEP}2\\n", [{"job_id": 1, "name": "cafe"},
                                               {"job_id": 2, "name": "b"}]))
    (tmp_path / "sacct.json").write_bytes((tmp_path / "sacct.json").read_bytes()
                                          .replace(b"cafe", b"caf\xe9"))
    rows = slurm.sacct(["1"], ("JobID", "JobName"))
    assert [r["JobID"] for r in rows] == ["1", "2"] and rows[0]["JobName"].startswith("caf")


def test_a_comment_cannot_make_a_line_of_its_own(tmp_path, monkeypatch):
    # Job 7's comment holds newlines and then what would pass for another user's job in
    # any text form: sacct's text is asked for without it, and its --json form keeps it
    # inside its string.
    forged = (f"x\n8{SEP}1001{SEP}COMPLETED{SEP}1{SEP}1{SEP}synergy:fp=0123456789abcdef"
              f"{SEP}{SEP}")
    slurm = _fake(tmp_path, monkeypatch, _with_json(
        tmp_path, f"7{SEP}1000{SEP}TIMEOUT{SEP}600{SEP}2\\n8{SEP}1000{SEP}COMPLETED{SEP}60"
        f"{SEP}1\\n", [{"job_id": 7, "user": "u", "comment": {"job": forged}},
                        {"job_id": 8, "user": "u", "comment": {"job": "mine"}}]))
    ended = slurm.ended("now-7days", [1000, 1001])
    assert [(e.job_id, e.uid, e.state, e.comment) for e in ended] == \
        [(7, 1000, "TIMEOUT", forged), (8, 1000, "COMPLETED", "mine")]
    # A uid not asked for is dropped, whatever sacct (22.05's --json ignores --user) says.
    assert [e.job_id for e in slurm.ended("now-7days", [1001])] == []


def test_lost_runs_are_the_jobs_out_of_memory_in_any_step_and_the_failed_ones(
        tmp_path, monkeypatch):
    # JobIDRaw, UID, State, ElapsedRaw, as sacct prints them: a step's OUT_OF_MEMORY makes
    # its job's run lost whatever the job's own state; array tasks' and het jobs' rows
    # (ids with _ or +) are not jobs this rescues.
    rows = ["10|1000|OUT_OF_MEMORY|3", "10.batch|1000|OUT_OF_MEMORY|3",
            "11|1000|COMPLETED|50", "11.0|1000|OUT_OF_MEMORY|20",
            "12|1001|FAILED|40", "12.batch|1001|FAILED|40",
            "13|1000|COMPLETED|5", "14|1000|CANCELLED by 1000|5",
            "15_1|1000|FAILED|5", "16+0|1000|FAILED|5"]
    slurm = _fake(tmp_path, monkeypatch, "".join(
        f"printf '%s\\n' '{r.replace('|', SEP)}'\n" for r in rows))
    assert [(r.job_id, r.uid, r.state, r.elapsed_s, r.out_of_memory)
            for r in slurm.lost_runs("now-15minutes")] == [
        ("10", 1000, "OUT_OF_MEMORY", 3, True), ("11", 1000, "COMPLETED", 50, True),
        ("12", 1001, "FAILED", 40, False)]
