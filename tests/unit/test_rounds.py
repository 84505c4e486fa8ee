"""Root's timers' rounds (decisions/rounds.py): a failed round never stops the timer, and
each round's outcome is left beside the table for `synergy cluster status`."""

import pytest

from slurm_synergy.decisions import rounds
from slurm_synergy.decisions.rounds import (FAILED, keep_running, last_round_path,
                                            read_last_round)


class Stop(BaseException):
    """Ends the timer's loop in a test (a round's Exception never would)."""


def run(outcomes, record, monkeypatch):
    """keep_running over `outcomes` (a line, or an exception a round raises), then stopped;
    the lines it logged and the record after each round."""
    todo, logged, seen = list(outcomes), [], []

    def round_():
        if not todo:
            raise Stop
        what = todo.pop(0)
        if isinstance(what, Exception):
            raise what
        return what if isinstance(what, tuple) else (what, True)

    def sleep(_s):
        seen.append(read_last_round(record))
    monkeypatch.setattr(rounds.time, "sleep", sleep)
    with pytest.raises(Stop):
        keep_running(round_, 15.0, logged.append, record)
    return logged, seen


def test_each_round_is_left_beside_the_table_failed_or_not(tmp_path, monkeypatch):
    record = last_round_path(tmp_path / "synergy-decisions.tbl", "synergy-sync")
    assert record.parent == tmp_path
    logged, seen = run(["wrote 3 entries", RuntimeError("no site policy at /tmp/gone"),
                        RuntimeError("no site policy at /tmp/gone"), "wrote 3 entries",
                        ("pending jobs not looked at: x", False)], record, monkeypatch)
    assert [(r.ok, r.line) for r in seen] == [
        (True, "wrote 3 entries"),
        (False, f"{FAILED}RuntimeError: no site policy at /tmp/gone"),
        (False, f"{FAILED}RuntimeError: no site policy at /tmp/gone"),
        (True, "wrote 3 entries"),
        (False, "pending jobs not looked at: x")]       # ran, but not through
    # The log says a line once, until it changes.
    assert [line.split(" ", 1)[1] for line in logged] == [
        "wrote 3 entries", f"{FAILED}RuntimeError: no site policy at /tmp/gone",
        "wrote 3 entries", "pending jobs not looked at: x"]
    assert record.stat().st_mode & 0o777 == 0o644


def test_a_record_that_cannot_be_written_is_said_once_and_the_rounds_go_on(tmp_path,
                                                                           monkeypatch):
    (tmp_path / "a-file").write_text("")
    record = tmp_path / "a-file" / "last"          # under a file: no folder can be made
    logged, seen = run(["a", "a", "a"], record, monkeypatch)
    assert seen == [None, None, None]
    assert sum("outcome not left" in line for line in logged) == 1


@pytest.mark.parametrize("text", ["", "{", "[]", '{"at": "x", "ok": true, "line": ""}',
                                  '{"ok": true}'])
def test_a_record_that_does_not_read_is_none(tmp_path, text):
    path = tmp_path / "last"
    path.write_text(text)
    assert read_last_round(path) is None
