"""A reservation's stored network plan, read once per stored mapping, is what reading it
again gives.

Why: every GPU pod of a gang reads the plan stored with the gang's reservation, and the
placement step remembers the parsed plan per stored mapping object (a reservation's
mapping is never modified; a changed plan comes as a new mapping). A new mapping must be
read anew, whatever the old one said, and a mapping that is no plan (an older reservation)
must still give the plan the gang would get now.
"""

from __future__ import annotations

from webhook.placement import network
from webhook.placement.network import GangNetwork, Needs, Plan, _stored_plan

STORED = [
    {"plan": "host", "why": "host networking; one rendezvous port per job", "role": "pytorch",
     "ports": {"master/0": 23500}},
    {"plan": "pod", "why": "pod networking"},
    {"plan": "host", "why": "x", "ports": {"worker/0": 23456, "worker/1": True}},
    {"why": "no plan"},
    {},
]


def test_each_mapping_reads_as_from_json_every_time() -> None:
    for stored in STORED:
        want = Plan.from_json(stored)
        assert _stored_plan(stored) == want
        assert _stored_plan(stored) == want  # remembered
        copy = dict(stored)
        assert _stored_plan(copy) == want  # a new object with the same text
    changed = dict(STORED[0], ports={"master/0": 23501})
    assert _stored_plan(changed).ports == {"master/0": 23501}
    assert _stored_plan(STORED[0]).ports == {"master/0": 23500}


def test_a_mapping_that_is_no_plan_gets_the_plan_of_now() -> None:
    net = GangNetwork(job=None, need=Needs(network.POD, "pod networking, decided now"),
                      host_ports=(0, 0))
    assert net.plan_for({}, ()) == Plan(network.POD, "pod networking, decided now")
    assert net.plan_for(STORED[1], ()) == Plan(network.POD, "pod networking")
