"""Every query the gateway runs, read from this cluster's own commands (on each release
`make test` runs: SLURM_VERSION), checked against three jobs of known shape
(tests/slurm_outputs.py). With SYNERGY_RECORD_OUTPUT=<file> what each command printed
is written there: how tests/golden/slurm-output/<release>.json were made."""

import os
from pathlib import Path

from slurm_synergy.slurm import Slurm
from tests.slurm_outputs import JOBS, check_queries, recorder

from .conftest import accounted, executable, finish, wait_state


def test_every_query_reads_this_release_as_the_jobs_were_asked(slurm, tmp_path):
    ids = {}
    try:
        for name, (text, options) in JOBS.items():
            script = executable(tmp_path / f"{name}.sh", text)
            ids[name] = slurm.sbatch(script, [*options, f"--chdir={tmp_path}",
                                              f"--output={tmp_path}/{name}-%j.out"])
        finish(slurm, [ids["done"]], timeout=120)
        wait_state(slurm, ids["running"], "RUNNING", timeout=120)
        # slurmdbd records a pending or running job moments after slurmctld has it.
        accounted(slurm, list(ids.values()))
        noted, write = recorder(Slurm(slurm.conf))    # nothing asked before: all noted
        check_queries(noted, ids)
        if os.environ.get("SYNERGY_RECORD_OUTPUT"):
            write(Path(os.environ["SYNERGY_RECORD_OUTPUT"]), ids)
    finally:
        slurm.cancel(list(ids.values()))
