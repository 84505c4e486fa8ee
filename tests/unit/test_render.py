"""Rendered scripts: valid bash, and CSV values reach the program as inert arguments."""

import json
import os
import subprocess
import sys
from pathlib import Path

from slurm_synergy.submission.csvjobs import load_jobs
from slurm_synergy.model.policy import load_policy
from slurm_synergy.paths import policy_path
from slurm_synergy.submission.render import render, task_for

# A user's script that declares --arch, --batch and -j/--workers (and parses nothing).
ECHO_ARGS = ("import argparse, json, sys\n"
             "p = argparse.ArgumentParser()\n"
             "p.add_argument('--arch'); p.add_argument('--batch')\n"
             "p.add_argument('-j', '--workers', type=int)\n"
             "print(json.dumps(sys.argv[1:]))\n")


def rendered(tmp_path: Path, csv_text: str, csv_name: str = "jobs.csv") -> Path:
    (tmp_path / "echo_args.py").write_text(ECHO_ARGS)
    csv = tmp_path / csv_name
    csv.write_text(csv_text)
    spec = load_jobs(csv)[0]
    out = tmp_path / "out"
    script = out / "scripts" / "job.sbatch"
    script.parent.mkdir(parents=True)
    script.write_text(render(spec.name, [task_for(spec, 0, out)], out, script,
                             load_policy(policy_path())))
    return script


def run(script: Path, tmp_path: Path) -> list[str]:
    env = dict(os.environ, SLURM_JOB_ID="1", SYNERGY_PYTHON=sys.executable, HOME=str(tmp_path))
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_shell_metacharacters_in_args_are_inert(tmp_path):
    marker = tmp_path / "pwned"
    script = rendered(tmp_path, "name,arch,batch,script,args\n"
                      f"j1,mine,8,echo_args.py,\"--x '; touch {marker}' '$(touch {marker})' "
                      f"'`touch {marker}`' --y\"\n")
    argv = run(script, tmp_path)
    assert argv == ["--arch", "mine", "--batch", "8", "--x", f"; touch {marker}",
                    f"$(touch {marker})", f"`touch {marker}`", "--y"]
    assert not marker.exists()


def test_a_newline_in_the_csv_files_name_stays_inside_its_comment_line(tmp_path):
    marker = tmp_path / "pwned"
    script = rendered(tmp_path, "name,arch,batch,script\nj1,mine,8,echo_args.py\n",
                      csv_name="jobs\ntouch pwned\n.csv")      # run() runs in tmp_path
    assert run(script, tmp_path)[:2] == ["--arch", "mine"]
    assert not marker.exists()
    assert "jobs\\ntouch pwned\\n.csv" in script.read_text().splitlines()[1]


def test_directives_and_fingerprint(tmp_path):
    script = rendered(tmp_path, "name,arch,batch,workers,gpus,cpus,mem,time,script\n"
                      "j1,mine,8,3,2,4,6G,00:20:00,echo_args.py\n")
    text = script.read_text()
    for line in ("#SBATCH --job-name=j1", "#SBATCH --cpus-per-task=4", "#SBATCH --mem=6144M",
                 "#SBATCH --time=00:20:00", "#SBATCH --gres=gpu:2", "#SBATCH --comment=\"synergy:fp="):
        assert line in text
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    spec = load_jobs(tmp_path / "jobs.csv")[0]
    # The user's script gets only the options its row sets, and the fingerprint in its env.
    assert run(script, tmp_path) == ["--arch", "mine", "--batch", "8", "--workers", "3"]
    assert f"SYNERGY_FINGERPRINT={spec.fingerprint}" in text


def test_builtin_trainer_gets_data_and_output(tmp_path):
    script = rendered(tmp_path, "name,arch,depth,batch,workers,iterations\nj1,resnet,12,16,1,5\n")
    text = script.read_text()
    assert "-m profiler.train" in text and "-m slurm_synergy.measure.inrun.supervisor" in text
    assert "--generate-data" in text and "--output" in text and "--max-iterations 5" in text
    # Measured in the run by default: no profiling steps apart, no resubmission, and the
    # job stays where it was submitted.
    assert "-m profiler.offline_profiler" not in text and "plugin resubmit" not in text
    assert 'cd "$out"' not in text


def test_a_row_may_ask_to_be_profiled_apart_and_resubmitted(tmp_path):
    script = rendered(tmp_path, "name,arch,batch,on_profiled\nj1,resnet,16,resubmit\n")
    text = script.read_text()
    assert "-m profiler.offline_profiler" in text and "plugin resubmit" in text
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


def test_a_rows_own_workers_are_what_its_offline_steps_measure(tmp_path):
    profiler = "-m profiler.offline_profiler"
    text = rendered(tmp_path, "name,arch,batch,workers,on_profiled\nj1,resnet,16,3,resubmit\n"
                    ).read_text()
    line = next(x for x in text.splitlines() if profiler in x)
    assert "--workers 3 " in line
    (tmp_path / "empty").mkdir()
    text = rendered(tmp_path / "empty", "name,arch,batch,on_profiled\nj1,resnet,16,resubmit\n"
                    ).read_text()
    line = next(x for x in text.splitlines() if profiler in x)
    assert "--workers" not in line.split("--workdir")[0]    # the rule: cores less one


def test_a_script_without_a_worker_option_gets_its_workers_from_the_probe(tmp_path):
    (tmp_path / "plain.py").write_text("print('no options here')\n")
    script = rendered(tmp_path, "name,script,workers,watch\nj1,plain.py,3,\n")
    text = script.read_text()
    assert 'workers="${SYNERGY_WORKERS:-3}"' in text
    assert "probe+=(--mode watch --workers" in text and "argv+=(" not in text
    (tmp_path / "again").mkdir()
    (tmp_path / "again" / "plain.py").write_text("print('no options here')\n")
    watched = rendered(tmp_path / "again", "name,script,watch\nj1,plain.py,yes\n").read_text()
    assert "probe=(--mode watch)" in watched
    assert "-m slurm_synergy.probe" in watched
