"""Accounting's limits as they bound one job (decisions/limits.py), from rows as sacctmgr
prints them (format ASSOC_FIELDS and QOS_FIELDS, --parsable2 --noheader)."""

from slurm_synergy.decisions.limits import (NONE, Cap, Limits, associations, cap_of, enforced,
                                            qos_list)

# account|user|parentname|qos|defaultqos|maxtresperjob|maxtrespernode|grptres
ASSOCS = [
    "root|||||||",
    "root|root||normal||||",
    "lab|||high,normal||||cpu=32,gres/gpu=8",
    "lab|alice|lab|high,normal||cpu=8,mem=16G||",
    "lab|bob|lab|high,normal|high|||cpu=4",
    "solo|||solo||||",
    "solo|carol|solo|solo||||",
    "big|||normal||||",
    "big|alice|big|normal||cpu=64||",
]
# name|maxtresperjob|maxtrespernode|maxtresperuser|grptres
QOS = [
    "normal||||",
    "high|cpu=16|||gres/gpu=2",
    "solo|||cpu=2,mem=1000M|",
]


def limits(enforce: bool = True) -> Limits:
    rows = [line.split("|") for line in ASSOCS]
    return Limits(enforce, tuple(associations(rows)), qos_list([q.split("|") for q in QOS]))


def test_tres_lists_read_as_sacctmgr_prints_them():
    assert cap_of("cpu=2,gres/gpu=1,mem=1000M,node=1") == Cap(2, 1000, 1)
    assert cap_of("mem=1.50G") == Cap(0, 1536, 0)
    assert cap_of("") == NONE and cap_of("cpu=NONE") == NONE
    assert Cap(4, 0, 1) & Cap(2, 8000, 0) == Cap(2, 8000, 1)
    assert Cap(4, 0, 1).past(5, 10 ** 6, 1) == "5 cores, over 4" and not Cap().past(9, 9, 9)


def test_one_job_is_held_to_the_tightest_of_every_association_and_its_qos():
    lim = limits()
    # alice: lab (cpu=8, mem=16G; lab's GrpTRES cpu=32, gres/gpu=8; default QOS normal,
    # since two are allowed and none named) and big (cpu=64): the tightest of both.
    assert lim.for_user("alice") == Cap(8, 16384, 8)
    # Under QOS high (MaxTRESPerJob cpu=16, GrpTRES gres/gpu=2).
    assert lim.for_user("alice", "high") == Cap(8, 16384, 2)
    # bob's default QOS is high; his own GrpTRES cpu=4 bounds one job too.
    assert lim.for_user("bob") == Cap(4, 0, 2)
    # carol may use one QOS only, which is her default; its MaxTRESPerUser bounds a job.
    assert lim.for_user("carol") == Cap(2, 1000, 0)


def test_unknown_users_or_qos_are_not_guessed_at_while_limits_hold():
    lim = limits()
    assert lim.for_user("nobody") is None
    assert lim.for_user("alice", "no-such-qos") is None
    # Where Slurm does not enforce limits, nothing bounds a job.
    assert limits(enforce=False).for_user("nobody") == NONE
    assert limits(enforce=False).qos_caps() == {}
    assert limits().qos_caps() == {"normal": NONE, "high": Cap(16, 0, 2), "solo": Cap(2, 1000, 0)}


def test_enforcement_is_read_from_accounting_storage_enforce():
    assert enforced("associations,limits,qos") and enforced("safe")
    assert not enforced("associations") and not enforced("") and not enforced("qos")
