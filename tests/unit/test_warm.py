"""Warm steps (probe/warm.py): a script forked from the warm interpreter must see what it
would see started anew, and fail, time out and report as it would."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from slurm_synergy.probe.supervise import runs_warm
from slurm_synergy.measure.errors import ProfilingError
from slurm_synergy.measure.offline.steps import Runner, Step
from slurm_synergy.slurm import Slurm

from tests.helpers import CORPUS, LOOP

# What the script sees of its start, written where the test can read it; then the loop.
FACTS = textwrap.dedent("""\
    import json, os, sys
    import torch
    print("hello from the script")
    with open(os.environ["FACTS"], "a") as fh:
        fh.write(json.dumps({
            "name": __name__, "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
            "cpus": len(os.sched_getaffinity(0)), "threads": torch.get_num_threads(),
            "output": os.environ.get("SYNERGY_OUTPUT"), "stdin": sys.stdin.read()}) + "\\n")
    """) + LOOP


def _runner(tmp_path: Path, command: list[str], warm: bool, timeout_s: float = 300) -> Runner:
    # The job's own folder, where its script runs, apart from the profiler's outputs.
    (tmp_path / "job").mkdir(exist_ok=True)
    return Runner(command=command, script_args=[], workers_option=None,
                  iterations_option=None, procs=1, iterations=5, warmup=2,
                  first_batch_s=120, mem_mb=2048, gpus=0, launcher="local",
                  workdir=tmp_path / "work", cwd=tmp_path / "job", timeout_s=timeout_s,
                  name="t", slurm=Slurm(),
                  warm_cores=len(os.sched_getaffinity(0)) if warm else 0)


def _facts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warm: bool) -> list[dict]:
    script = tmp_path / "facts.py"
    script.write_text(FACTS)
    facts = tmp_path / f"facts-{warm}.jsonl"
    monkeypatch.setenv("FACTS", str(facts))
    runner = _runner(tmp_path, [str(script)], warm)
    try:
        for cores in (1, 2):
            measured, _ = runner.run(Step("train", cores, 1))
            assert measured["steps"] == 5 and measured["samples_per_s"] > 0
    finally:
        runner.close()
    assert "hello from the script" in (tmp_path / "work/step02-train-2c/step.log").read_text()
    return [json.loads(line) for line in facts.read_text().splitlines()]


def test_a_warm_step_sees_what_a_new_process_sees(tmp_path, monkeypatch):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("this test needs 2 cores to run a 1-core and a 2-core step")
    new, warm = _facts(tmp_path, monkeypatch, False), _facts(tmp_path, monkeypatch, True)
    assert new == warm
    assert [f["cpus"] for f in warm] == [1, 2] and [f["threads"] for f in warm] == [1, 2]
    first = warm[0]
    assert first["name"] == "__main__" and first["argv"][0] == str(tmp_path / "facts.py")
    assert first["path0"] == str(tmp_path) and first["stdin"] == ""
    # It runs in the job's folder, where a path relative to it (./data) means what it
    # means in the job; its outputs are asked for in the step's folder.
    assert first["cwd"] == str(tmp_path / "job")
    assert first["output"] == str(tmp_path / "work/step01-train-1c")


def test_a_module_runs_warm_as_python_m_runs_it(tmp_path, monkeypatch):
    (tmp_path / "mod").mkdir()
    (tmp_path / "mod/facts_module.py").write_text(FACTS)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "mod"))
    monkeypatch.setenv("FACTS", str(tmp_path / "facts.jsonl"))
    runner = _runner(tmp_path, [sys.executable, "-m", "facts_module"], True)
    try:
        runner.run(Step("train", 1, 1))
    finally:
        runner.close()
    (facts,) = [json.loads(line) for line in (tmp_path / "facts.jsonl").read_text().splitlines()]
    assert facts["name"] == "__main__"
    assert facts["argv"][0] == str(tmp_path / "mod/facts_module.py")
    assert facts["path0"] == facts["cwd"]


@pytest.mark.parametrize("warm", [False, True])
def test_a_failing_script_reports_the_same_way_warm_or_new(tmp_path, warm):
    runner = _runner(tmp_path, [str(CORPUS / "bad_import.py")], warm)
    try:
        with pytest.raises(ProfilingError, match="failed before its first batch: "
                           "ModuleNotFoundError: No module named"):
            runner.run(Step("train", 1, 1))
        # The warm interpreter survives a failed step.
        script = tmp_path / "loop.py"
        script.write_text(LOOP)
        runner.command = [str(script)]
        assert runner.run(Step("train", 1, 1))[0]["steps"] == 5
    finally:
        runner.close()


def test_a_warm_step_past_its_limit_is_stopped_and_the_next_starts_a_new_interpreter(
        tmp_path):
    script = tmp_path / "slow.py"
    script.write_text("import time\ntime.sleep(600)\n")
    runner = _runner(tmp_path, [str(script)], True, timeout_s=3)
    try:
        with pytest.raises(ProfilingError, match="ran past its 3s limit"):
            runner.run(Step("train", 1, 1))
        assert runner._warm is None
        script.write_text(LOOP)
        runner.timeout_s = 300
        assert runner.run(Step("train", 1, 1))[0]["steps"] == 5
    finally:
        runner.close()


@pytest.mark.parametrize("command,warm", [
    ([sys.executable, "train.py", "--x"], True),
    ([sys.executable, "-m", "profiler.train"], True),
    ([sys.executable, "-u", "train.py"], False),        # flags of its own
    ([sys.executable, "-m"], False),
    (["/usr/bin/bash", "run.sh"], False),
    (["/other/python", "train.py"], False),
])
def test_which_commands_run_warm(command, warm):
    assert runs_warm(command) is warm


def test_a_warm_interpreter_that_cannot_start_leaves_every_step_a_new_process(
        tmp_path, monkeypatch):
    import slurm_synergy.measure.offline.steps as steps
    monkeypatch.setattr(steps, "WARM", "slurm_synergy.no_such_module")
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    runner = _runner(tmp_path, [str(script)], True)
    try:
        measured, _ = runner.run(Step("train", 1, 1))
    finally:
        runner.close()
    assert measured["steps"] == 5 and measured["forked"] is False
    assert runner.note.startswith("every step started anew: the warm interpreter did not "
                                  "start (see ")


def test_the_first_run_is_new_and_only_new_runs_give_the_memory(tmp_path):
    from slurm_synergy.model.profile import combine
    from slurm_synergy.measure.offline.steps import to_point
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    runner = _runner(tmp_path, [str(script)], True)
    try:
        runs = [runner.run(Step("train", 1, 1), fresh) for fresh in (True, False)]
    finally:
        runner.close()
    assert [m["forked"] for m, _ in runs] == [False, True]
    points = [to_point(Step("train", 1, 1), m, wall, 2048) for m, wall in runs]
    both = combine(points)
    assert both.peak_rss_mb == points[0].peak_rss_mb and both.peaks_mb == (
        points[0].footprint_mb,)
    assert both.footprint_mb == points[0].peak_own_mb is not None
    assert both.repeats == tuple(p.samples_per_s for p in points) and not both.forked
