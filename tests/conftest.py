"""Every test starts from users' own profile stores: the local cluster's shared store
(state/profiles, which its sync timer compiles) is the demo's and its users', not the
tests'. A test that wants a shared store names one (SYNERGY_PROFILES=<folder>)."""

import os

import pytest

os.environ["SYNERGY_PROFILES"] = ""


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A user's home of the product's own (profiles, decision table) in tmp_path, outside
    any job."""
    monkeypatch.setenv("SYNERGY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SYNERGY_DECISIONS", str(tmp_path / "table.tbl"))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    return tmp_path
