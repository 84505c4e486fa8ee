"""The gateway's readers against what each release's commands really printed: the same
records from Slurm 22.05's, 24.11's and 26.05's output (recorded on the local cluster of
each by tests/integration/test_slurm_output.py; see tests/slurm_outputs.py)."""

import re

import pytest

from slurm_synergy.slurm_release import RELEASES
from tests.slurm_outputs import GOLDEN, check_queries, replayed


@pytest.mark.parametrize("release", [r.version for r in RELEASES])
def test_every_query_reads_each_release_alike(release):
    slurm, ids = replayed(GOLDEN / f"{release}.json")
    assert re.search(rf"\b{re.escape(release)}\.\d+$", slurm.version().strip())
    check_queries(slurm, ids)


def test_a_query_the_recording_lacks_is_not_answered():
    slurm, _ = replayed(GOLDEN / "22.05.json")
    with pytest.raises(KeyError):
        slurm.run(["squeue", "--me"])
