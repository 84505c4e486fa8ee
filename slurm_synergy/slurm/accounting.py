"""Slurm's accounting as its commands show it and change it: sacct's records of jobs,
read so that no text a user wrote can make a record, and sacctmgr's clusters, users and
QOS. The base of gateway.Slurm; the runner is runner.py.

sacct escapes nothing, and a comment or job name may hold newlines and the separator, so
its records come from a query without any text of a user's; the texts from a second query
beside it, each record bracketed by its job id (`JobIDRaw|texts|JobIDRaw`). A job's texts
are taken from there only where exactly one line names its id, at either end, and that
line is whole: a user's text can add lines naming any job, never take away the one Slurm
printed, so any other job's texts are read from sacct --json by its id instead.
"""

from __future__ import annotations

import heapq
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from typing import Generator, Iterator, Mapping, Sequence

from slurm_synergy.model.errors import SlurmError
from slurm_synergy.slurm import json_output
from slurm_synergy.slurm.records import (FREE_TEXT, SACCT_FIELDS, SEP, Ended, LostRun,
                                         user_name)
from slurm_synergy.slurm.runner import Runner

# Jobs whose texts one sacct --json call reads.
TEXTS_PER_CALL = 400


class Accounting(Runner):
    """sacct and sacctmgr over one slurm.conf."""

    def ended(self, since: str, users: Sequence[int], per_user: int = 500) -> list[Ended]:
        """The jobs of `users` (uids) that ended since `since` (any time sacct takes), at
        most `per_user` of each (the latest), with their comments. Rows of any other uid
        are dropped."""
        if not users:
            return []
        wanted = set(users)
        fields = ("JobIDRaw", "UID", "State", "ElapsedRaw", "AllocCPUS", "Comment",
                  "AdminComment")
        newest: dict[int, list[tuple[int, Ended]]] = {}
        for v in self.sacct_rows((), fields, since=since,
                                 users=[user_name(u) for u in sorted(wanted)]):
            if not all(v[f].isdigit() for f in ("JobIDRaw", "UID", "ElapsedRaw", "AllocCPUS")):
                continue
            uid, state = int(v["UID"]), v["State"].split(" ")[0]
            if uid not in wanted or state in ("PENDING", "RUNNING", "REQUEUED", "SUSPENDED"):
                continue
            job = int(v["JobIDRaw"])
            kept = newest.setdefault(uid, [])
            heapq.heappush(kept, (job, Ended(job, uid, state, int(v["ElapsedRaw"]),
                                             int(v["AllocCPUS"]), v["Comment"],
                                             v["AdminComment"])))
            if len(kept) > per_user:
                heapq.heappop(kept)
        return sorted((e for kept in newest.values() for _, e in kept), key=lambda e: e.job_id)

    def lost_runs(self, since: str) -> list[LostRun]:
        """Every user's jobs that ended since `since` having run out of memory, in their
        batch script or a step (whose job may then end FAILED or COMPLETED), or FAILED,
        read without any text of a user's; array tasks and heterogeneous jobs are left out."""
        fields = ("JobIDRaw", "UID", "State", "ElapsedRaw")
        jobs: dict[str, dict[str, str]] = {}
        hit: set[str] = set()
        for v in self._plain_rows(fields, [f"--starttime={since}", "--endtime=now",
                                           "--allusers"]):
            job, _, step = v["JobIDRaw"].partition(".")
            if not job.isdigit():
                continue
            if not step:
                jobs[job] = v
            if v["State"].startswith("OUT_OF_MEMORY"):
                hit.add(job)
        out = []
        for job in sorted(jobs, key=int):
            v = jobs[job]
            state = v["State"].split(" ")[0]
            if (job in hit or state == "FAILED") and v["UID"].isdigit() \
                    and v["ElapsedRaw"].isdigit():
                out.append(LostRun(job, int(v["UID"]), state, int(v["ElapsedRaw"]), job in hit))
        return out

    def clusters(self, timeout: float = 60) -> list[str]:
        """The clusters slurmdbd accounts for (answering at all says slurmdbd is up)."""
        out = self.run(["sacctmgr", "--noheader", "--parsable2", "show", "cluster",
                        "format=cluster"], timeout=timeout)
        return out.split()

    def add_cluster(self, name: str) -> None:
        """Register a cluster with slurmdbd."""
        self.run(["sacctmgr", "-i", "add", "cluster", name])

    def associations(self) -> set[tuple[str, str]]:
        """(account, user) of every association accounting holds; a user of "" is the
        account's own."""
        out = self.run(["sacctmgr", "--noheader", "--parsable2", "show", "associations",
                        "format=account,user"])
        return {(a, u) for a, _, u in (line.partition("|") for line in out.splitlines())}

    def qos_rows(self, fields: Sequence[str]) -> list[list[str]]:
        """Every QOS accounting holds, one row of `fields` each."""
        out = self.run(["sacctmgr", "--noheader", "--parsable2", "show", "qos",
                        f"format={','.join(fields)}"])
        return [line.split("|") for line in out.splitlines() if line]

    def add_user(self, user: str, account: str, limits: Mapping[str, str] | None = None) -> None:
        """`user` may submit under `account` (each made where missing), with its
        association's `limits` set as sacctmgr names them (MaxTRESPerJob="cpu=1"; -1
        clears one). sacctmgr refuses to add what exists, so only what is missing is
        added."""
        have = self.associations()
        if (account, "") not in have:
            self.run(["sacctmgr", "-i", "add", "account", account])
        if (account, user) not in have:
            self.run(["sacctmgr", "-i", "add", "user", user, f"account={account}"])
        if limits:
            self.run(["sacctmgr", "-i", "modify", "user", "where", f"name={user}",
                      f"account={account}", "set", *(f"{k}={v}" for k, v in limits.items())])

    def add_qos(self, name: str, limits: Mapping[str, str]) -> None:
        """A QOS in accounting with its `limits` as sacctmgr names them (MaxTRESPerJob=
        "cpu=1"), made where missing."""
        if name not in self.run(["sacctmgr", "--noheader", "--parsable2", "show", "qos",
                                 "format=name"]).split():
            self.run(["sacctmgr", "-i", "add", "qos", name])
        self.run(["sacctmgr", "-i", "modify", "qos", "where", f"name={name}", "set",
                  *(f"{k}={v}" for k, v in limits.items())])

    def remove_user(self, user: str) -> None:
        """Removes every association of `user` from accounting."""
        self.run(["sacctmgr", "-i", "delete", "user", "where", f"name={user}"])

    def remove_qos(self, name: str) -> None:
        """Remove a QOS from accounting."""
        self.run(["sacctmgr", "-i", "delete", "qos", "where", f"name={name}"])

    def set_user_qos(self, user: str, account: str, allowed: Sequence[str],
                     default: str) -> None:
        """The QOS `user` may use under `account`, and the one a job gets without --qos."""
        self.run(["sacctmgr", "-i", "modify", "user", "where", f"name={user}",
                  f"account={account}", "set", f"qos={','.join(allowed)}",
                  f"defaultqos={default}"])

    def sacct(self, job_ids: Sequence[str], fields: Sequence[str] = SACCT_FIELDS,
              allocations_only: bool = True, since: str | None = None,
              until: str | None = None, users: Sequence[str] = ()) -> list[dict[str, str]]:
        """Accounting records, one dict per job (per step unless allocations_only): the
        jobs named, or without names the jobs of a period (`since`, `until`: any time
        sacct takes, e.g. 2026-11-01 or now-7days)."""
        return list(self.sacct_rows(job_ids, fields, allocations_only, since, until, users))

    def sacct_rows(self, job_ids: Sequence[str], fields: Sequence[str] = SACCT_FIELDS,
                   allocations_only: bool = True, since: str | None = None,
                   until: str | None = None, users: Sequence[str] = ()) -> Iterator[dict[str, str]]:
        """sacct's records as it prints them (see sacct), read while it prints them; the
        fields that hold users' words (FREE_TEXT) read as this module says. A job whose
        texts come from --json comes after the others, with its steps."""
        if not job_ids and since is None:
            return
        filters = [f"--jobs={','.join(job_ids)}"] if job_ids else []
        if since is not None:
            filters += [f"--starttime={since}", f"--endtime={until or 'now'}"]
        filters.append("--user=" + ",".join(users) if users else "--allusers")
        if allocations_only:
            filters.append("--allocations")
        texts = [f for f in fields if f in FREE_TEXT]
        plain = [f for f in fields if f not in FREE_TEXT]
        if not texts:
            yield from self._plain_rows(plain, filters)
            return
        asked = plain if "JobIDRaw" in plain else ["JobIDRaw", *plain]
        rows = self._plain_rows(asked, filters)
        with ThreadPoolExecutor(max_workers=1) as pool:
            beside = pool.submit(self._bracketed, texts, filters)
            try:
                first = next(rows, None)      # both queries wait on slurmdbd together
                found, doubtful = beside.result()
            except BaseException:
                rows.close()                  # sacct stopped, not left writing
                raise
        held: dict[str, list[dict[str, str]]] = {}
        for row in chain([first] if first else [], rows):
            raw = row["JobIDRaw"]
            job = raw.split(".")[0]
            if job in held or job in doubtful or raw not in found:
                held.setdefault(job, []).append(row)
            else:
                yield {f: row[f] if f in row else found[raw][f] for f in fields}
        if held:
            from_json = self.sacct_texts(sorted(held), texts)
            for job_rows in held.values():
                for row in job_rows:
                    mine = from_json.get(row["JobIDRaw"], {})
                    yield {f: row[f] if f in row else mine.get(f, "") for f in fields}

    def _plain_rows(self, fields: Sequence[str], filters: Sequence[str]
                    ) -> Generator[dict[str, str], None, None]:
        """sacct's text of `fields`, none of them a user's text: every line is a record (one
        that does not read is Slurm's fault, and fails the call)."""
        for line in self.lines(["sacct", "--parsable2", "--noheader", f"--delimiter={SEP}",
                                "--format=" + ",".join(fields), *filters]):
            values = line.split(SEP)
            if len(values) != len(fields):
                raise SlurmError(f"sacct printed a line this cannot read: {line[:200]!r}")
            yield dict(zip(fields, values))

    def _bracketed(self, texts: Sequence[str], filters: Sequence[str]
                   ) -> tuple[dict[str, dict[str, str]], set[str]]:
        """JobIDRaw -> its `texts`, where exactly one line of sacct's bracketed text names
        the id and that line is whole; and the jobs (their ids without a step) that any
        other line names at either end."""
        out = self.run(["sacct", "--parsable2", "--noheader", f"--delimiter={SEP}",
                        "--format=" + ",".join(["JobIDRaw", *texts, "JobIDRaw"]), *filters],
                       timeout=120)
        whole: dict[str, list[dict[str, str]]] = {}
        named: Counter[str] = Counter()
        for line in out.split("\n")[:-1]:
            parts = line.split(SEP)
            first, last = parts[0], parts[-1]
            named[first] += 1
            if last != first:
                named[last] += 1
            elif len(parts) == len(texts) + 2:
                whole.setdefault(first, []).append(dict(zip(texts, parts[1:-1])))
        found = {i: w[0] for i, w in whole.items() if len(w) == 1 and named[i] == 1}
        return found, {i.split(".")[0] for i in named if i not in found}

    def sacct_texts(self, job_ids: Sequence[str], fields: Sequence[str]
                    ) -> dict[str, dict[str, str]]:
        """JobIDRaw (and step, 7.batch) -> the free-text `fields` of the jobs `job_ids`, from
        sacct --json: each text inside its own string, whatever it holds."""
        out: dict[str, dict[str, str]] = {}
        ids = [j for j in job_ids if j.isdigit()]
        for at in range(0, len(ids), TEXTS_PER_CALL):
            chunk = ids[at:at + TEXTS_PER_CALL]
            jobs = json_output.document(
                self.run(["sacct", "--json", "--jobs=" + ",".join(chunk)], timeout=120), "sacct")
            asked = set(chunk)
            out.update({k: v for k, v in json_output.accounted(jobs, fields).items()
                        if k.split(".")[0] in asked})
        return out
