"""`synergy jobs`' ids that accounting lacks: held by slurmctld (not recorded yet) or
unknown to both."""

from slurm_synergy.jobs import JobRecord, unseen
from slurm_synergy.model.errors import SlurmError


class Queue:
    """slurmctld's side only: squeue's states, or its refusal of a list of unknown ids."""

    def __init__(self, states: dict[str, str] | None):
        self.states = states

    def active_states(self, job_ids):
        if self.states is None:
            raise SlurmError("squeue: error: Invalid job id specified")
        return {j: s for j, s in self.states.items() if j in job_ids}


def rec(job_id: str) -> JobRecord:
    return JobRecord(job_id, "n", "COMPLETED", "0:0", "00:00:01", 1, "1G", 0, "")


def test_a_job_slurmctld_holds_is_not_yet_recorded_and_an_unknown_one_is_named():
    later, unknown = unseen(Queue({"12": "PENDING"}), ["11", "12", "999999"], [rec("11")])
    assert later == ["12"] and unknown == ["999999"]


def test_an_array_in_accounting_by_its_tasks_is_not_missing():
    assert unseen(Queue({}), ["12"], [rec("12_0"), rec("12_1")]) == ([], [])


def test_a_refused_list_of_ids_means_none_is_known():
    assert unseen(Queue(None), ["5", "6"], []) == ([], ["5", "6"])
