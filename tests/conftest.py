"""Every test starts from users' own profile stores: the local cluster's shared store
(state/profiles, which its sync timer compiles) is the demo's and its users', not the
tests'. A test that wants a shared store names one (SYNERGY_PROFILES=<folder>)."""

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A folder of the test's own under /tmp, removed after it: a TMPDIR for processes
    that make Unix sockets in it (multiprocessing's, a DataLoader's workers), whose
    paths end at 107 bytes, which tmp_path's (longer as pytest's run counter grows) can
    pass."""
    folder = Path(tempfile.mkdtemp(prefix="synergy-test-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# Where make test's time goes: each test file's setup, call and teardown summed (a
# session fixture's, the local cluster's start, falls to the first test that asks for it).
_SPENT: dict[str, float] = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    _SPENT[path] = _SPENT.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _SPENT:
        return
    out = terminalreporter
    out.write_sep("-", "time per part (s): each test file's setup, run and teardown")
    for part in ("tests/unit", "tests/integration"):
        out.write_line(f"{sum(s for p, s in _SPENT.items() if p.startswith(part)):8.1f}  {part}/")
    for path, spent in sorted(_SPENT.items(), key=lambda item: -item[1]):
        out.write_line(f"{spent:8.1f}  {path}")
