"""The job comment's one Python owner (slurm_synergy.model.comment), and the contract
with the Lua shim: the same comments run through etc/job_submit.lua come out as the
Python side writes and reads them."""

from slurm_synergy.model import comment as c
from slurm_synergy.model.comment import Resources
from slurm_synergy.model.engine import NodeShape
from tests.shim import FP, OURS, decision, run, table



def test_marks_are_read_written_and_replaced():
    base = c.job_comment(FP, ("cpus", "mem"))
    assert base == f"synergy:fp={FP} req=cpus,mem"
    assert c.fingerprint(base) == FP and c.marks(base) == {"req": "cpus,mem"}
    full = c.with_marks(base, asked=c.asked_text(2, None, 1),
                        decision=c.decision_text(1, 1280, 1, 1, 250))
    assert full == f"{base} asked=c2,m-,g1 decision=c1,m1280,g1,w1,p250"
    assert c.asked(full) == Resources(2, None, 1)
    assert c.decision(full) == Resources(1, 1280, 1, 1, 250)
    again = c.with_marks(full, decision=c.decision_text(2, 1024, 1, 1))
    assert again.count("decision=") == 1 and c.decision(again).power_w is None
    assert c.without(again, *c.PROFILING_MARKS) == base


def test_foreign_and_hostile_comments():
    assert c.fingerprint("someone else's job") is None
    assert c.fingerprint("synergy:fp=0123") is None            # not 16 hex digits
    # A user's own decision= first, the shim's after it: the last one counts.
    assert c.decision("mine decision=c1,m1,g1,w0,p9999 decision=c2,m2,g1,w1,p180").power_w == 180
    assert c.decision("decision=c99999999,m1,g1,w1") == Resources(None, 1, 1, 1, None)
    assert c.tag(f"synergy:fp={FP} sub=0123456789ab") == "0123456789ab"
    assert c.tag("sub=xyz") is None
    assert c.with_marks("", tuned="c1,m1024") == "tuned=c1,m1024"
    assert c.without("tuned=c1,m1024", "tuned") == ""


def test_the_shim_writes_what_python_reads(tmp_path):
    (job,), _ = run(tmp_path, [OURS], table(decision(FP, cpus=5, mem_mb=1280, gpus=1,
                                                     workers=4, power_limit_w=250)))
    out = job["comment"]
    assert c.fingerprint(out) == FP
    assert c.asked(out) == Resources(2, 3072, 2)
    assert c.decision(out) == Resources(5, 1280, 1, 4, 250)
    # Python would have spelled the same comment.
    assert out == c.with_marks(OURS["comment"], asked=c.asked_text(2, 3072, 2),
                               decision=c.decision_text(5, 1280, 1, 4, 250))


def test_the_shim_replaces_marks_as_python_does(tmp_path):
    # A resubmission that still carries an earlier asked= and decision=.
    earlier = c.with_marks(OURS["comment"], asked="c8,m9999,g4", decision="c8,m9999,g4,w7")
    (job,), _ = run(tmp_path, [dict(OURS, comment=earlier)],
                    table(decision(FP, cpus=3, mem_mb=1024, gpus=1, workers=2)))
    assert job["comment"] == c.with_marks(earlier, asked=c.asked_text(2, 3072, 2),
                                          decision=c.decision_text(3, 1024, 1, 2))
    (marked,), _ = run(tmp_path, [OURS], table(decision("fedcba9876543210")))
    assert marked["comment"] == c.with_marks(OURS["comment"], profile="1")


def test_gpu_types_travel_in_asked_and_decision_both_ways(tmp_path):
    typed = c.with_marks("", asked=c.asked_text(2, 3072, 1, "local1g"),
                         decision=c.decision_text(2, 1024, 1, 1, 0, "local4g"))
    assert typed == "asked=c2,m3072,g1:local1g decision=c2,m1024,g1:local4g,w1"
    assert c.asked(typed).gpu_type == "local1g" and c.decision(typed).gpu_type == "local4g"
    # The shim moves a job asking a type to the decision's, and says both.
    shape = NodeShape(16, 64000, 4, ("local1g", "local4g"))
    (job,), _ = run(tmp_path, [dict(OURS, tres_per_node="gres:gpu:local1g:1")],
                    table(decision(FP, cpus=2, mem_mb=1024, gpus=1, gpu_type="local4g"),
                          shape=shape))
    assert job["tres_per_node"] == "gres:gpu:local4g:1"
    assert c.asked(job["comment"]) == Resources(2, 3072, 1, gpu_type="local1g")
    assert c.decision(job["comment"]) == Resources(2, 1024, 1, 1, None, "local4g")
