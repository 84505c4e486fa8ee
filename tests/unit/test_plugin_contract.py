"""The shim's CONTRACT block (slurm_synergy/plugin/contract.py): the constants the Lua
shares with the Python come from the Python, at install and in the checked-in file."""

import pytest

from slurm_synergy.decisions import table
from slurm_synergy.model.errors import SynergyError
from slurm_synergy.plugin import contract
from slurm_synergy.plugin.install import SHIM, install_shim
from tests.shim import FP, decision, run
from tests.shim import table as decision_table


def test_the_checked_in_shim_carries_the_block_python_renders():
    assert contract.block() in SHIM.read_text()
    assert contract.rendered(SHIM.read_text()) == SHIM.read_text()


def test_install_writes_what_python_says_whatever_the_file_held(tmp_path, monkeypatch):
    stale = SHIM.read_text().replace("local MAX_ENTRIES = 200000", "local MAX_ENTRIES = 3")
    source = tmp_path / "source.lua"
    source.write_text(stale)
    monkeypatch.setattr("slurm_synergy.plugin.install.SHIM", source)
    install_shim(tmp_path)
    assert (tmp_path / "job_submit.lua").read_text() == SHIM.read_text()


def test_a_text_without_the_block_is_not_our_shim():
    with pytest.raises(SynergyError, match="no CONTRACT block"):
        contract.rendered("function slurm_job_submit() return slurm.SUCCESS end\n")


def test_the_shim_enforces_the_bound_python_renders(tmp_path, monkeypatch):
    # A table of more entries than the rendered MAX_ENTRIES is refused: jobs pass as asked.
    monkeypatch.setattr(table, "MAX_ENTRIES", 1)
    two = decision_table(decision(FP, cpus=1), decision("fedcba9876543210", cpus=1))
    ours = {"name": "j", "comment": f"synergy:fp={FP}", "cpus_per_task": "2",
            "min_cpus": "2", "pn_min_cpus": "2", "pn_min_memory": "3072",
            "tres_per_node": "gres:gpu:1"}
    (job,), logs = run(tmp_path, [ours], two)
    assert job["cpus_per_task"] == "2" and any("range entries" in line for line in logs), logs
    monkeypatch.undo()
    (job,), _ = run(tmp_path, [ours], two)
    assert job["cpus_per_task"] == "1"
