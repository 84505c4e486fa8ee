"""Every reader of Slurm's output that root acts on, fuzzed with hostile users' text.

A stand-in for squeue and sacct prints what the real commands print for a set of jobs
whose comments, names and working directories hold every line break Python's
splitlines() knows, the separators, and well-formed forged lines of each text form and
of the JSON form, naming other users' jobs: a user's text is printed raw wherever a text
form asks for it (as Slurm does: it escapes nothing), and inside its string in --json, in
22.05's shape and in 24.11's. Every reader must give back exactly the jobs there are, with
their own uids, states and limits, and a time-limit round driven over it must change no
job but those of the users whose histories say so. Fixed seed: CI runs the same cases."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from slurm_synergy.decisions.timelimits import tick
from slurm_synergy.model.runtime import TimeRule
from slurm_synergy.slurm import SEP, Slurm

LINE_BREAKS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85",
               "\u2028", "\u2029"]
SEPARATORS = [SEP, "|", "\t", ",", " ", ";", '"', "\\", "}", "{", "]", "["]
FP_VICTIM = "00000000000000aa"


@dataclass(frozen=True)
class Job:
    job_id: int
    uid: int
    state: str           # PENDING, RUNNING, COMPLETED
    limit_min: int
    elapsed_s: int
    cpus: int
    comment: str
    name: str
    workdir: str


def forged_lines(victim: Job) -> list[str]:
    """What would pass for `victim`'s record, or another's, in every form a reader might
    have asked for, with the attacker's idea of its fields."""
    t, v = SEP, victim
    return [
        # squeue -O of the timed fields, as the text form prints them
        f"{v.job_id:<40}|{v.uid:<40}|RUNNING{' ' * 33}|3:00{' ' * 36}|0:00{' ' * 36}|"
        f"2:50{' ' * 36}|1{' ' * 39}|2026-12-07T10:00:00{' ' * 21}|0{' ' * 39}|",
        # squeue --format with a comment first (the old timer's)
        f"synergy:fp={FP_VICTIM}{t}{v.job_id}{t}{v.uid}{t}RUNNING{t}3:00{t}2:50{t}1",
        # sacct --parsable2 with texts first, and without
        f"synergy:fp={FP_VICTIM}{t}{v.job_id}{t}{v.uid}{t}COMPLETED{t}1{t}1{t}",
        f"{v.job_id}{t}{v.uid}{t}COMPLETED{t}1{t}1",
        f"{v.job_id + 1}{t}{v.uid}{t}COMPLETED{t}1{t}1",
        # a JSON fragment closing the string and opening another job
        f'", "job_id": {v.job_id}, "user_id": {v.uid}}}, {{"job_id": 99999, "user_id": 0, '
        f'"comment": "',
    ]


def hostile(draw, victim: Job) -> str:
    parts = draw(st.lists(st.one_of(st.sampled_from(LINE_BREAKS), st.sampled_from(SEPARATORS),
                                    st.sampled_from(forged_lines(victim)),
                                    st.text(max_size=8)), max_size=12))
    return f"synergy:fp={draw(st.sampled_from([FP_VICTIM, 'ffffffffffffff01']))} " \
        + "".join(parts)


@st.composite
def clusters(draw) -> list[Job]:
    victim = Job(500, 1001, "RUNNING", 2880, 100, 1, f"synergy:fp={FP_VICTIM}", "v", "/v")
    jobs = [victim]
    for i in range(draw(st.integers(1, 5))):
        state = draw(st.sampled_from(["PENDING", "RUNNING", "COMPLETED"]))
        jobs.append(Job(600 + i, 1002, state, draw(st.sampled_from([20, 60])),
                        draw(st.integers(1, 50)), 1, hostile(draw, victim),
                        hostile(draw, victim), hostile(draw, victim)))
    return jobs


def _duration(minutes: int) -> str:
    return f"{minutes // 60}:{minutes % 60:02d}:00" if minutes >= 60 else f"{minutes}:00"


class Emulated:
    """squeue and sacct as Slurm prints them for `jobs`; `v22` chooses 22.05's JSON."""

    def __init__(self, jobs: list[Job], v22: bool):
        self.jobs, self.v22 = jobs, v22
        self.updates: list[tuple[str, dict[str, str]]] = []

    def _number(self, n: int | None):
        if self.v22:
            return n
        return {"set": n is not None, "infinite": False, "number": n or 0}

    def squeue_json(self) -> str:
        shown = [j for j in self.jobs if self.v22 or j.state != "COMPLETED"]
        return json.dumps({"errors": [], "jobs": [{
            "job_id": j.job_id, "user_id": j.uid,
            "job_state": j.state if self.v22 else [j.state],
            "time_limit": self._number(j.limit_min), "cpus": self._number(j.cpus),
            "array_job_id": self._number(0), "array_task_id": None if self.v22 else
            {"set": False, "infinite": False, "number": 0}, "array_task_string": "",
            "comment": j.comment, "admin_comment": ""} for j in shown]})

    def sacct_json(self, ids: set[str]) -> str:
        return json.dumps({"errors": [], "jobs": [{
            "job_id": j.job_id, "user": f"u{j.uid}", "name": j.name,
            "working_directory": j.workdir,
            "comment": {"job": j.comment, "administrator": "", "system": ""},
            "steps": [{"step": {"job_id": j.job_id, "id": "batch", "name": j.name}
                       if self.v22 else {"id": f"{j.job_id}.batch", "name": j.name}}]}
            for j in self.jobs if str(j.job_id) in ids]})

    def _squeue_field(self, j: Job, f: str) -> str:
        return {"JobID": str(j.job_id), "UserID": str(j.uid), "State": j.state,
                "TimeLimit": _duration(j.limit_min), "MinTime": "0:00",
                "TimeUsed": f"{j.elapsed_s // 60}:{j.elapsed_s % 60:02d}",
                "NumCPUs": str(j.cpus), "RestartCnt": "0", "Comment": j.comment,
                "StartTime": "N/A" if j.state == "PENDING" else "2026-12-07T09:00:00"}.get(f, "x")

    def _sacct_field(self, j: Job, f: str) -> str:
        return {"JobIDRaw": str(j.job_id), "JobID": str(j.job_id), "UID": str(j.uid),
                "State": j.state, "ElapsedRaw": str(j.elapsed_s), "AllocCPUS": str(j.cpus),
                "Comment": j.comment, "AdminComment": "", "JobName": j.name,
                "WorkDir": j.workdir}.get(f, "x")

    def run(self, args: list[str]) -> str:
        opts = dict(a[2:].split("=", 1) for a in args[1:] if a.startswith("--") and "=" in a)
        ids = set(opts["jobs"].split(",")) if "jobs" in opts else None
        if args[0] == "squeue" and "--json" in args:
            return self.squeue_json()
        if args[0] == "sacct" and "--json" in args:
            return self.sacct_json(ids or set())
        if args[0] == "squeue":
            states = opts.get("states", "PENDING,RUNNING")
            fields = [f.split(":")[0] for f in opts["Format"].split(",")]
            return "".join("".join(f"{self._squeue_field(j, f):<40}|" for f in fields) + "\n"
                           for j in self.jobs if (states == "all" or j.state in states)
                           and (ids is None or str(j.job_id) in ids))
        if args[0] == "sacct":
            fields = opts["format"].split(",")
            users = opts.get("user")
            return "".join(SEP.join(self._sacct_field(j, f) for f in fields) + "\n"
                           for j in self.jobs if (ids is None or str(j.job_id) in ids)
                           and (users is None or f"u{j.uid}" in users.split(",")
                                or str(j.uid) in users.split(",")))
        if args[0] == "scontrol" and args[1] == "update":
            settings = dict(a.split("=", 1) for a in args[3:])
            self.updates.append((args[2].split("=", 1)[1], settings))
            return ""
        raise AssertionError(f"a command the emulator does not know: {args}")

    def gateway(self) -> Slurm:
        slurm = Slurm(conf=None)
        slurm._run_once = lambda args, timeout: self.run(list(args))      # type: ignore
        slurm._lines_once = lambda args, timeout: iter(                   # type: ignore
            self.run(list(args)).split("\n")[:-1])
        return slurm


def _fuzzed(test):
    return seed(78)(settings(max_examples=150, deadline=None, derandomize=True,
                             suppress_health_check=[HealthCheck.too_slow])(test))


@_fuzzed
@given(clusters(), st.booleans())
def test_every_reader_root_uses_gives_back_the_jobs_there_are(jobs, v22):
    slurm = Emulated(jobs, v22).gateway()
    live = {str(j.job_id): j for j in jobs if j.state != "COMPLETED"}
    timed = {t.job_id: t for t in slurm.timed_jobs()}
    assert set(timed) == set(live)
    for job_id, t in timed.items():
        j = live[job_id]
        assert (t.uid, t.state, t.limit_min, t.cpus) == (j.uid, j.state, j.limit_min, j.cpus)
        assert slurm.timed_job(job_id) == t
    assert slurm.timed_job("99999") is None
    texts = {t.job_id: t for t in slurm.queued_texts()}
    assert set(texts) == set(live)
    for job_id, t in texts.items():
        j = live[job_id]
        assert (t.uid, t.state, t.limit_min, t.comment) == (j.uid, j.state, j.limit_min,
                                                            j.comment)
    ended = slurm.ended("now-7days", [1001, 1002])
    assert sorted((e.job_id, e.uid, e.comment) for e in ended) == sorted(
        (j.job_id, j.uid, j.comment) for j in jobs if j.state == "COMPLETED")
    rows = slurm.sacct([str(j.job_id) for j in jobs], ("JobID", "JobName", "State", "WorkDir"))
    assert sorted((r["JobID"], r["JobName"], r["State"], r["WorkDir"]) for r in rows) == \
        sorted((str(j.job_id), j.name, j.state, j.workdir) for j in jobs)


@_fuzzed
@given(clusters(), st.booleans())
def test_a_time_limit_round_changes_no_job_but_by_its_users_own_history(tmp_path_factory,
                                                                          jobs, v22):
    # The victim (uid 1001) has a running job and no history; the attacker (1002) a
    # history of the victim's workload key in their comments, and pending jobs of it.
    emulated = Emulated(jobs, v22)
    state = tmp_path_factory.mktemp("limits") / "time-limits.json"
    for _ in range(3):
        tick(emulated.gateway(), lambda: TimeRule(floor_min=1), state, None)
    attacker = {str(j.job_id): j for j in jobs if j.uid == 1002}
    for job_id, changed in emulated.updates:
        j = attacker[job_id]                    # never the victim's, never a forged id
        assert j.state == "PENDING" and set(changed) == {"TimeMin", "Comment"}, changed
        assert int(changed["TimeMin"]) < j.limit_min
        assert changed["Comment"].startswith(j.comment)
    # A round with the victim's job lowered and due changes it only back to its own
    # --time, from root's record: never a forged line's.
    assert all(job_id != "500" for job_id, _ in emulated.updates)


def test_the_emulator_prints_a_users_text_raw_where_a_text_form_asks_for_it():
    # The stand-in is as hostile as Slurm: the old readers, which asked for the comment in
    # text, read forged jobs from it.
    victim = Job(500, 1001, "RUNNING", 2880, 100, 1, "", "v", "/v")
    attacker = replace(victim, job_id=600, uid=1002, state="PENDING",
                       comment="x\n" + forged_lines(victim)[1])
    out = Emulated([victim, attacker], True).run(
        ["squeue", "--noheader", "--states=PENDING,RUNNING", "--Format=Comment:40|,JobID:40|"])
    assert len(out.splitlines()) == 3


def test_a_whole_forged_line_never_stands_for_a_job_whose_own_text_broke_its_line():
    # The victim's own comment holds a newline, so Slurm's line of it is in two pieces;
    # the attacker prints one whole bracketed line with the victim's id. That line alone
    # is whole, but the victim's pieces name the id too: its texts come from --json.
    victim = Job(500, 1001, "COMPLETED", 20, 10, 1, "mine\nsecond line", "v", "/v")
    attacker = Job(600, 1002, "COMPLETED", 20, 10, 1,
                   f"x\n500{SEP}synergy:fp=ffffffffffffff01{SEP}500\ny", "a", "/a")
    calls: list[list[str]] = []
    emulated = Emulated([victim, attacker], v22=False)
    slurm = emulated.gateway()
    run = slurm._run_once
    slurm._run_once = lambda args, timeout: calls.append(list(args)) or run(args, timeout)
    rows = {r["JobID"]: r["Comment"] for r in slurm.sacct(["500", "600"], ("JobID", "Comment"))}
    assert rows == {"500": victim.comment, "600": attacker.comment}
    assert any("--json" in c for c in calls)
    # Without newlines in anyone's text, no --json call is made.
    calls.clear()
    plain = Emulated([replace(victim, comment="mine"), replace(attacker, comment="a")], False)
    slurm = plain.gateway()
    run = slurm._run_once
    slurm._run_once = lambda args, timeout: calls.append(list(args)) or run(args, timeout)
    assert {r["JobID"]: r["Comment"] for r in slurm.sacct(["500", "600"], ("JobID", "Comment"))} \
        == {"500": "mine", "600": "a"}
    assert not any("--json" in c for c in calls)
