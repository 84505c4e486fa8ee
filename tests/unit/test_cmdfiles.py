"""The files a run's command reads as its program (probe/cmdfiles.py), and a later run
of a workload that reads another content there dropping its decision (measure/inrun/follow.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
import time

import psutil
import pytest

from slurm_synergy.model.profile import CommandFile
from slurm_synergy.probe import cmdfiles
from slurm_synergy.profiles import SUPERSEDED, ProfileStore
from slurm_synergy.measure.inrun.supervisor import InRunRequest, run_job

from tests.helpers import FAST_INRUN as FAST, make_profile, site

FP = "00000000000000f1"

LONG_AGO = time.time() - 600


def write(path, text):
    path.write_text(text)
    os.utime(path, (LONG_AGO, LONG_AGO))
    return str(path)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_command_line_names_its_script_module_configs_and_the_code_beside_it(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    for name in ("train.py", "model.py", "cfg.yaml", "pkg/run.py"):
        write(tmp_path / name, name)
    argv = ["python", "-u", "train.py", "--config=cfg.yaml", "--out", "ckpt", "-m", "pkg.run"]
    named = cmdfiles.candidates(argv, str(tmp_path))
    for name in ("train.py", "model.py", "cfg.yaml", "pkg/run.py", "ckpt"):
        assert str(tmp_path / name) in named, name
    assert str(tmp_path / "python") not in named, "argv[0] is the interpreter"


def test_only_regular_files_read_before_the_run_are_its_program(tmp_path, monkeypatch):
    monkeypatch.setattr(cmdfiles, "MAX_FILE_BYTES", 1000)
    train = write(tmp_path / "train.py", "print(1)")
    cfg = write(tmp_path / "cfg.yaml", "lr: 0.1")
    write(tmp_path / "data.bin", "x" * 2000)            # data, not program
    os.mkfifo(tmp_path / "pipe")                         # never opened: it could block
    log = tmp_path / "run.log"
    log.write_text("written by the run as it started")
    seen = cmdfiles.read(["python", "train.py", "cfg.yaml", "data.bin", "pipe", "run.log"],
                         str(tmp_path), since=time.time() - 60)
    assert seen.read == (CommandFile(train, sha("print(1)")), CommandFile(cfg, sha("lr: 0.1")))
    # Written before the run ends: an output, left out.
    (tmp_path / "cfg.yaml").write_text("lr: 0.1 # saved by the run")
    assert seen.unchanged() == (CommandFile(train, sha("print(1)")),)


def test_only_files_both_runs_read_and_found_different_count():
    a, b, c = CommandFile("/a", "1"), CommandFile("/b", "2"), CommandFile("/c", "3")
    assert cmdfiles.changed((a, b), (a, b, c)) == []
    assert cmdfiles.changed((a, b), (a,)) == []
    assert cmdfiles.changed((a, b), (a, CommandFile("/b", "9"))) == ["/b"]


def test_a_running_process_is_read_from_its_own_folder_and_command_line(tmp_path):
    write(tmp_path / "train.py", "import time; time.sleep(30)")
    write(tmp_path / "cfg.yaml", "lr: 0.1")
    proc = subprocess.Popen([sys.executable, "train.py", "--config=cfg.yaml"], cwd=tmp_path)
    try:
        time.sleep(0.3)
        seen = cmdfiles.of_process(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert seen is not None
    assert {f.path for f in seen.read} == {str(tmp_path / "train.py"), str(tmp_path / "cfg.yaml")}
    assert cmdfiles.of_process(proc.pid) is None, "a process gone reads as nothing"


def read_as_started(train: str, cwd) -> list[str] | None:
    """The files a process running `train` names, read as soon as Popen returns."""
    proc = subprocess.Popen([sys.executable, train], cwd=cwd)
    try:
        seen = cmdfiles.of_process(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    return None if seen is None else [f.path for f in seen.read]


def test_a_process_read_as_soon_as_it_is_started_names_its_script(tmp_path, monkeypatch):
    # The in-run supervisor reads the files right after Popen returns, when /proc may
    # still show no command line: 2 to 11 starts in 300 on the 2-core VM. Here the
    # process shows none for its first three looks, as such a start does.
    train = write(tmp_path / "train.py", "import time; time.sleep(30)")

    class JustStarted(psutil.Process):
        looks = 0

        def cmdline(self):
            JustStarted.looks += 1
            return [] if JustStarted.looks <= 3 else super().cmdline()

    monkeypatch.setattr(cmdfiles.psutil, "Process", JustStarted)
    assert read_as_started(train, tmp_path) == [train]


def test_real_starts_read_at_once_name_their_script(tmp_path):
    train = write(tmp_path / "train.py", "import time; time.sleep(30)")
    missed = sum(read_as_started(train, tmp_path) != [train] for _ in range(300))
    assert missed == 0, f"{missed} of 300 starts read without their script"


@pytest.mark.parametrize("edited", [False, True])
def test_a_later_run_that_reads_an_edited_config_drops_its_workloads_decision(
        home, tmp_path, edited):
    script = write(tmp_path / "train.py", "import sys, time; time.sleep(1); sys.exit(3)")
    cfg = write(tmp_path / "cfg.yaml", "layers: 12" if edited else "layers: 4")
    store = ProfileStore.default()
    measured = (CommandFile(script, sha("import sys, time; time.sleep(1); sys.exit(3)")),
                CommandFile(cfg, sha("layers: 4")))
    store.save(dataclasses.replace(make_profile(FP), command_files=measured))
    lines: list[str] = []
    req = InRunRequest(FP, "t", (sys.executable, script, cfg), tmp_path / "probe.json")
    assert run_job(req, site(FAST), lines.append) == 3, "the job's status is its script's"
    dropped = [line for line in lines if "the decision is dropped" in line]
    if edited:
        assert not store.has(FP) and (store.root / f"{FP}{SUPERSEDED}").is_file()
        assert len(dropped) == 1 and cfg in dropped[0] and script not in dropped[0], lines
    else:
        assert store.has(FP) and store.load(FP).command_files == measured
        assert not dropped, lines
