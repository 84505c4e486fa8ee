"""Finding a ledger's rows in what squeue and sacct show: by tag, never by a reused id."""

from slurm_synergy.submission.ledger import LedgerEntry
from slurm_synergy.submission.reconcile import find

TAG, OTHER = "a1b2c3d4e5f6", "0123456789ab"


def entry(job_id="", tag=TAG, task=-1, name="row-1", state="queued"):
    return LedgerEntry(job_id, name, "f" * 16, "s.sbatch", 0.0, tag, state, task)


def queued(job_id, comment, name="row-1", state="PENDING", array=""):
    return {"JobID": job_id, "ArrayJobID": array or job_id.split("_")[0], "State": state,
            "JobName": name, "Comment": comment}


def acct(job_id, comment, name="row-1", state="COMPLETED"):
    return {"JobID": job_id, "JobName": name, "State": state, "Comment": comment}


def test_a_job_is_found_by_its_tag_even_when_the_ledger_never_heard_its_id():
    # sbatch timed out, yet the controller had queued it.
    seen = find({"k": entry()}, [queued("311", f"synergy:fp={'f' * 16} sub={TAG}")], [])
    assert seen["k"].job_id == "311" and seen["k"].state == "PENDING"


def test_a_reused_id_is_not_taken_for_ours():
    # Slurm lost job 311 and gave the id to somebody else's job, with another tag.
    ours = entry(job_id="311")
    assert find({"k": ours}, [queued("311", f"synergy:fp={'e' * 16} sub={OTHER}")], []) == {}
    assert find({"k": ours}, [queued("311", "", name="someone-else")], []) == {}


def test_finished_jobs_are_found_in_accounting_and_array_tasks_keep_their_index():
    rows = [acct("40_0", f"x sub={TAG}"), acct("40_1", f"x sub={TAG}", state="FAILED")]
    seen = find({"a": entry(task=0), "b": entry(task=1, name="row-2")}, [], rows)
    assert seen["a"].job_id == "40_0" and seen["a"].state == "COMPLETED"
    assert seen["b"].job_id == "40_1" and seen["b"].state == "FAILED"


def test_a_site_without_comments_in_accounting_matches_by_id_and_name():
    seen = find({"k": entry(job_id="77")}, [], [acct("77", "")])
    assert seen["k"].job_id == "77"
    assert find({"k": entry(job_id="77")}, [], [acct("77", "", name="other")]) == {}


def test_a_resubmission_under_the_same_tag_does_not_replace_the_row_s_job():
    rows = [queued("52", f"c sub={TAG} from=50"), acct("50", f"c sub={TAG} profile=1")]
    assert find({"k": entry(job_id="50")}, rows[:1], rows[1:])["k"].job_id == "50"


def test_rows_from_before_tags_are_matched_by_id_and_name():
    old = entry(job_id="9", tag="")
    assert find({"k": old}, [], [acct("9", "synergy:fp=x")])["k"].job_id == "9"
    assert find({"k": old}, [], []) == {}
