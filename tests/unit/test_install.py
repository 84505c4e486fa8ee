"""An install outside a checkout works: the wheel carries templates/, etc/, data/ and
jobs_csv/, and the commands that read them run from it, far from this checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "slurm_synergy", "profiler", "templates",
           "etc", "data", "jobs_csv")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this checkout, unpacked: an install without pip's records."""
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools leaves a build/ folder in the tree it builds.
    source = out / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(out), str(source)], check=True,
                   cwd=out, capture_output=True)
    wheel, = out.glob("slurm_synergy-*.whl")
    site = out / "site"
    zipfile.ZipFile(wheel).extractall(site)
    return site


def run(site: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH comes before the checkout's editable install on the import path.
    env = {**os.environ, "PYTHONPATH": str(site), "SYNERGY_HOME": str(cwd / "home")}
    for name in ("SYNERGY_STATE", "SYNERGY_POLICY", "SLURM_CONF"):
        env.pop(name, None)
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_wheel_ships_the_top_level_folders(site: Path) -> None:
    shipped = site / "slurm_synergy"
    for path in ("templates/sbatch.sh.j2", "etc/job_submit.lua", "etc/policy.toml",
                 "etc/simulate/deployment.toml", "data/synergy/synergy_static_100job.csv",
                 "jobs_csv/rightsize.csv", "probe/boot/sitecustomize.py"):
        assert (shipped / path).is_file(), path
    assert (site / "profiler" / "train.py").is_file()
    assert not (site / "tests").exists()


def test_an_install_finds_its_files_inside_the_package(site: Path, tmp_path: Path) -> None:
    done = run(site, tmp_path, "-c", "import json; from slurm_synergy import paths; print("
               "json.dumps([str(p) for p in (paths.TEMPLATES, paths.policy_path(), "
               "paths.state_dir(), paths.TRAIN_SCRIPT)]))")
    assert done.returncode == 0, done.stderr
    templates, policy, state, trainer = map(Path, json.loads(done.stdout))
    assert templates == site / "slurm_synergy" / "templates"
    assert policy == site / "slurm_synergy" / "etc" / "policy.toml"
    # Its local cluster's state goes to the user's folder, not into site-packages.
    assert state == tmp_path / "home" / "state"
    assert trainer == site / "profiler" / "train.py"


def test_an_install_writes_job_scripts_and_simulates(site: Path, tmp_path: Path) -> None:
    csv = tmp_path / "jobs.csv"
    csv.write_text((ROOT / "jobs_csv" / "example.csv").read_text())
    done = run(site, tmp_path, "-m", "slurm_synergy.cli", "submit", "--dry-run", str(csv),
               "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    scripts = sorted((tmp_path / "out" / "scripts").glob("*.sbatch"))
    assert len(scripts) == 4
    text = scripts[0].read_text()
    assert "-m profiler.train" in text and "-m slurm_synergy.measure.inrun.supervisor" in text
    sim = run(site, tmp_path, "-m", "slurm_synergy.cli", "simulate", "--cluster",
              "deployment", "--out", str(tmp_path / "sim"))
    assert sim.returncode == 0, sim.stderr
    assert "fifo/synergy-slurm" in sim.stdout and (tmp_path / "sim" / "summary.csv").is_file()
