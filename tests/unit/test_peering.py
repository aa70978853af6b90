"""Which replica reconciles (render/peering.py, pure) and what a standby replica's health counts
(health.WatchHealth.standby). The real replicas against a real apiserver:
tests/component/test_operator_ha.py."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest

from tritonpipeline.render import peering
from tritonpipeline.runtime.health import WatchHealth

UTC = datetime.timezone.utc
NOW = datetime.datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
OURS = -1_000  # our own priority in the blockers tests


def entry(priority: int, seen_ago: float = 1.0, lifetime: int = 60) -> dict[str, Any]:
    """A status entry as kopf writes it: lastseen `seen_ago` seconds before NOW."""
    seen = NOW - datetime.timedelta(seconds=seen_ago)
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen.isoformat()}


# --- priority -----------------------------------------------------------------------------------------------


def test_an_older_replica_has_the_higher_priority():
    started = 1_767_225_600.0  # 2026-01-01T00:00:00Z
    older, newer = peering.priority(started), peering.priority(started + 0.5)
    assert older > newer
    # a restart a minute later ranks below the one that kept running
    assert peering.priority(started + 60) < older
    # replicas started a few milliseconds apart are still ordered (kopf pauses both on a tie)
    assert peering.priority(started) != peering.priority(started + 0.005)


def test_priority_is_an_int_kopf_can_store_and_compare():
    value = peering.priority(1_767_225_600.123)
    assert isinstance(value, int)
    assert abs(value) < 2**53  # exact in the JSON of the peering object's status


# --- blockers -----------------------------------------------------------------------------------------------


def test_a_live_peer_with_a_higher_priority_blocks():
    status = {"older": entry(OURS + 1)}
    assert peering.blockers(status, "me", OURS, NOW) == ["older"]


def test_a_live_peer_with_the_same_priority_blocks():
    """kopf pauses every replica of a tie (process_peering_event's same_peers): so does the check."""
    assert peering.blockers({"twin": entry(OURS)}, "me", OURS, NOW) == ["twin"]


def test_a_live_peer_with_a_lower_priority_does_not_block():
    assert peering.blockers({"newer": entry(OURS - 1)}, "me", OURS, NOW) == []


def test_a_dead_peer_does_not_block():
    # its last keep-alive plus its lifetime lies in the past: killed without removing its entry
    status = {"killed": entry(OURS + 100, seen_ago=61, lifetime=60)}
    assert peering.blockers(status, "me", OURS, NOW) == []
    # one second before that deadline it still blocks
    assert peering.blockers(status, "me", OURS, NOW - datetime.timedelta(seconds=2)) == ["killed"]


def test_a_peer_is_dead_at_its_deadline_as_kopf_says():
    """kopf: is_dead = deadline <= now."""
    status = {"edge": entry(OURS + 1, seen_ago=15, lifetime=15)}
    assert peering.blockers(status, "me", OURS, NOW) == []
    assert peering.blockers(status, "me", OURS, NOW - datetime.timedelta(milliseconds=1)) == ["edge"]


def test_own_entry_never_blocks():
    status = {"me": entry(OURS + 1_000), "other": entry(OURS - 5)}
    assert peering.blockers(status, "me", OURS, NOW) == []


def test_every_blocking_peer_is_named_in_order():
    status = {
        "zeta": entry(OURS + 3),
        "alpha": entry(OURS),
        "newer": entry(OURS - 3),
        "gone": entry(OURS + 9, seen_ago=120, lifetime=60),
        "me": entry(OURS),
    }
    assert peering.blockers(status, "me", OURS, NOW) == ["alpha", "zeta"]


@pytest.mark.parametrize(
    "bad",
    [
        None,
        "alive",
        42,
        ["priority", 1],
        {"priority": 5, "lifetime": 60},  # no lastseen
        {"priority": 5, "lifetime": 60, "lastseen": "yesterday"},
        {"priority": 5, "lifetime": 60, "lastseen": 1767225600},
        {"priority": "high", "lifetime": 60, "lastseen": NOW.isoformat()},
        {"priority": 5, "lifetime": "forever", "lastseen": NOW.isoformat()},
    ],
    ids=repr,
)
def test_malformed_entries_are_ignored(bad):
    status = {"broken": bad, "older": entry(OURS + 1)}
    assert peering.blockers(status, "me", OURS, NOW) == ["older"]
    assert [p.identity for p in peering.peers(status)] == ["older"]


@pytest.mark.parametrize("status", [None, {}])
def test_no_status_no_blockers(status):
    assert peering.blockers(status, "me", OURS, NOW) == []


def test_a_naive_lastseen_is_utc_whatever_the_local_zone(monkeypatch):
    """Not the local time: with TZ at UTC+05:30 a local reading would move the deadline by hours."""
    if not hasattr(time, "tzset"):
        pytest.skip("no time.tzset on this platform")
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        status = {"older": {"priority": OURS + 1, "lifetime": 60, "lastseen": "2030-01-01T11:59:30"}}
        (peer,) = peering.peers(status)
        assert peer.deadline == datetime.datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC)
        assert peering.blockers(status, "me", OURS, NOW) == ["older"]
        assert peering.blockers(status, "me", OURS, NOW + datetime.timedelta(seconds=31)) == []
    finally:
        monkeypatch.undo()
        time.tzset()


def test_an_entry_written_by_kopf_is_read_with_kopf_s_deadline():
    """The entry kopf's own keep-alive writes (kopf's Peer.as_dict), read back: same deadline, same rule."""
    from kopf._core.engines.peering import Peer as KopfPeer

    kopf_peer = KopfPeer(identity="older", priority=OURS + 1, lifetime=15)  # lastseen: now
    (peer,) = peering.peers({"older": kopf_peer.as_dict()})
    assert (peer.identity, peer.priority, peer.deadline) == ("older", OURS + 1, kopf_peer.deadline)
    just_before = kopf_peer.deadline - datetime.timedelta(milliseconds=1)
    assert peering.blockers({"older": kopf_peer.as_dict()}, "me", OURS, just_before) == ["older"]
    assert peering.blockers({"older": kopf_peer.as_dict()}, "me", OURS, kopf_peer.deadline) == []


# --- WatchHealth on a standby replica -----------------------------------------------------------------------

PIPELINES = "/apis/serving.tritonpipeline.io/v1alpha1/namespaces/ml/tritonpipelines"
CONFIGMAPS = "/api/v1/namespaces/ml/configmaps"
PEERINGS = "/apis/kopf.dev/v1/namespaces/ml/kopfpeerings"


class Clock:
    def __init__(self, at: float = 0.0) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def test_a_standby_with_a_fresh_peering_watch_is_healthy_though_its_resource_watches_are_stale():
    clock = Clock(100)
    health = WatchHealth(30, clock=clock)
    for path in (PIPELINES, CONFIGMAPS, PEERINGS):
        health.connect(path)
    clock.at = 110
    health.standby = True  # kopf paused: the resource watches close and never reconnect
    clock.at = 200
    health.connect(PEERINGS)
    clock.at = 210
    assert health.problems() == []
    assert health.not_ready() is None


def test_a_resource_watch_that_connected_during_standby_does_not_count_either():
    """kopf's pause and the leadership check do not switch at the same instant: a resource watch may
    connect once more while the replica is standby, and is then closed by the pause."""
    clock = Clock(100)
    health = WatchHealth(30, clock=clock)
    health.standby = True
    health.connect(PEERINGS)
    clock.at = 101
    health.connect(PIPELINES)
    clock.at = 150
    health.connect(PEERINGS)
    clock.at = 160  # the resource watch: 59 s without a reconnect
    assert health.problems() == []


def test_the_same_stale_resource_watch_is_a_problem_on_the_active_replica():
    """The control for the test above: without standby the stale watches are reported."""
    clock = Clock(100)
    health = WatchHealth(30, clock=clock)
    for path in (PIPELINES, CONFIGMAPS, PEERINGS):
        health.connect(path)
    clock.at = 200
    health.connect(PEERINGS)
    clock.at = 210
    problems = health.problems()
    assert len(problems) == 2
    assert any(PIPELINES in p for p in problems) and any(CONFIGMAPS in p for p in problems)
    assert not any(PEERINGS in p for p in problems)
    assert health.not_ready() is not None


def test_a_standby_whose_peering_watch_is_stale_is_not_healthy():
    clock = Clock(100)
    health = WatchHealth(30, clock=clock)
    health.connect(PEERINGS)
    health.standby = True
    clock.at = 140  # 40 s without a reconnect of the one watch that counts
    problems = health.problems()
    assert len(problems) == 1 and PEERINGS in problems[0]
    assert health.not_ready() == problems[0]


def test_becoming_active_forgets_the_resource_watch_times_and_restarts_the_clock():
    clock = Clock(100)
    health = WatchHealth(30, clock=clock)
    health.connect(PIPELINES)
    health.connect(PEERINGS)
    clock.at = 110
    health.standby = True
    clock.at = 200
    health.connect(PEERINGS)
    clock.at = 205
    health.standby = False  # kopf resumed: the resource watches reopen from now on
    assert PIPELINES not in health.connected and PEERINGS in health.connected
    clock.at = 206
    assert health.problems() == []  # not "tritonpipelines has not reconnected for 106s"
    health.connect(PIPELINES)
    clock.at = 240  # the reopened watch goes stale again like any other
    health.connect(PEERINGS)
    problems = health.problems()
    assert len(problems) == 1 and PIPELINES in problems[0]


def test_a_change_of_role_restarts_the_clock_of_a_replica_with_no_watch_yet():
    clock = Clock(0)
    health = WatchHealth(30, clock=clock)
    clock.at = 100
    health.standby = True
    clock.at = 120
    assert health.problems() == []  # 20 s since standby, not 120 s since start
    clock.at = 125
    health.standby = False
    clock.at = 150
    assert health.problems() == []
    clock.at = 156  # 31 s since it became active without any watch connecting
    (problem,) = health.problems()
    assert "31s" in problem


def test_setting_the_same_role_again_does_not_restart_the_clock():
    """The leadership loop sets the role every few seconds: only a change restarts the clock."""
    clock = Clock(0)
    health = WatchHealth(30, clock=clock)
    clock.at = 20
    health.standby = False  # active already
    clock.at = 31
    (problem,) = health.problems()  # 31 s since start: no watch has connected
    assert "31s" in problem
    clock.at = 40
    health.standby = True
    clock.at = 60
    health.standby = True  # standby again
    clock.at = 71
    (problem,) = health.problems()
    assert "31s" in problem


# --- blockers_in: every peering object a replica takes part in ------------------------------------------


def _live(priority: int) -> dict[str, Any]:
    seen = datetime.datetime.now(UTC).isoformat()
    return {"priority": priority, "lifetime": 60, "lastseen": seen}


def _blockers_in(objects: dict[str | None, Any], kind: str = "KopfPeering") -> list[str]:
    now = datetime.datetime.now(UTC)
    return peering.blockers_in(objects, kind, "tp", "me", OURS, now)


def test_a_namespaced_replica_waits_for_a_peer_that_outranks_it_in_any_watched_namespace():
    objects = {
        "a": {"status": {"me": _live(OURS), "new": _live(OURS - 1)}},
        "b": {"status": {"me": _live(OURS), "old": _live(OURS + 1)}},
    }
    assert _blockers_in(objects) == ["old"]
    assert _blockers_in({"a": objects["a"]}) == []


def test_a_missing_peering_object_blocks_as_it_pauses_kopf():
    (blocker,) = _blockers_in({"a": {"status": {"me": _live(OURS)}}, "b": None})
    assert "KopfPeering" in blocker and "'tp'" in blocker and "namespace b" in blocker


def test_a_replica_is_not_active_before_its_own_entry_is_in_the_object():
    """Two replicas started together: each reads the object before the other's entry is there; waiting
    for its own entry (kopf writes it before it reads) means the one that wrote first is seen."""
    (blocker,) = _blockers_in({None: {"status": {}}}, "ClusterKopfPeering")
    assert "not yet in ClusterKopfPeering 'tp'" in blocker
    assert _blockers_in({None: {"status": {"me": _live(OURS)}}}, "ClusterKopfPeering") == []
    assert _blockers_in({None: {"status": {"me": _live(OURS), "twin": _live(OURS)}}}) == ["twin"]


def test_replicas_started_in_the_same_millisecond_get_different_priorities():
    started = 1_767_225_600.123
    a, b = peering.priority(started, 17), peering.priority(started, 912)
    assert a != b and max(a, b) > peering.priority(started + 0.001, 999)  # still older first
