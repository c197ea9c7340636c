"""Replica ranking (pure) and the Ray Serve request router built on it (no cluster started)."""

import numpy as np
import pytest

from policies.priority import Priority
from policies.replica_ranking import ReplicaView, RouteTarget, rank_replicas
from pool.work import PoolWork, route_target_of, routing_id

R, I = Priority.REALTIME, Priority.INTERACTIVE


def rv(id, resident=(), hosted=(), delays=(0.0, 0.0, 0.0, 0.0)):
    return ReplicaView(id, frozenset(resident), frozenset(hosted), delays)


def test_resident_first_then_host_tier_then_shortest_wait():
    replicas = [
        rv("cold-fast", delays=(0.0,) * 4),
        rv("hosted", hosted={"a@1"}, delays=(0.5,) * 4),
        rv("resident-slow", resident={"a@1"}, delays=(0.9,) * 4),
        rv("resident-fast", resident={"a@1"}, delays=(0.1,) * 4),
    ]
    assert rank_replicas(replicas, RouteTarget("a", "1")) == [
        ["resident-fast"], ["resident-slow"], ["hosted"], ["cold-fast"]]


def test_wait_is_read_for_the_requests_priority():
    replicas = [rv("x", {"a@1"}, delays=(0.0, 5.0, 5.0, 5.0)), rv("y", {"a@1"}, delays=(1.0,) * 4)]
    assert rank_replicas(replicas, RouteTarget("a", priority=R))[0] == ["x"]
    assert rank_replicas(replicas, RouteTarget("a", priority=I))[0] == ["y"]


def test_equal_waits_share_a_rank_and_unknown_replicas_go_last():
    replicas = [rv("b", {"a@2"}), rv("a", {"a@2"}), ReplicaView("new")]
    assert rank_replicas(replicas, RouteTarget("a")) == [["a", "b"], ["new"]]


def test_version_must_match_when_given():
    replicas = [rv("v1", {"a@1"}, delays=(0.0,) * 4), rv("v2", {"a@2"}, delays=(0.5,) * 4)]
    assert rank_replicas(replicas, RouteTarget("a", "2"))[0] == ["v2"]


def test_routing_id_round_trips_model_version_and_class():
    for p in Priority:
        assert route_target_of(routing_id("a", "1", p)) == RouteTarget("a", "1", p)
        assert route_target_of(routing_id("a", None, p)) == RouteTarget("a", None, p)
    assert routing_id("digits-small", "1", R) == "realtime:digits-small@1"
    # the model's own name may hold a colon: only the first one ends the class
    assert route_target_of(routing_id("ns:m", "2", I)) == RouteTarget("ns:m", "2", I)
    work = PoolWork("a", "3", {}, R, deadline_at=1.0, arrived_at=0.0)
    assert route_target_of(work.routing_id) == RouteTarget("a", "3", R)


@pytest.mark.parametrize("rid", ["", "a", "a@1", "urgent:a@1", "realtime:", "realtime:@1",
                                 "realtime:a@", ":a"])
def test_an_id_not_made_by_routing_id_names_no_model(rid):
    assert route_target_of(rid) == RouteTarget(None)


def offline_replica(uid, resident, delay, dep, **stats_fields):
    """A real RunningReplica over published stats, without an actor lookup (no cluster)."""
    from ray.serve._private import common as serve_common
    from ray.serve.request_router import RunningReplica

    from pool import RoutingStats

    class OfflineReplica(RunningReplica):
        def __init__(self, info):
            self._replica_info = info
            self._multiplexed_model_ids = set()

    stats = RoutingStats("cpu", frozenset(resident), (delay,) * 4, (0,) * 4, 10, 100,
                         **stats_fields)
    return OfflineReplica(serve_common.RunningReplicaInfo(
        replica_id=serve_common.ReplicaID(uid, deployment_id=dep), node_id="n",
        node_ip="127.0.0.1", availability_zone=None, actor_name=uid,
        max_ongoing_requests=8, routing_stats=stats.to_dict()))


async def test_request_router_ranks_real_running_replicas():
    # async: PendingRequest creates an asyncio.Future, which needs a running loop
    from ray.serve._private import common as serve_common
    from ray.serve.request_router import PendingRequest

    from pool.request_router import TimeshareRequestRouter, route_target

    dep = serve_common.DeploymentID(name="pool", app_name="timeshare")

    def replica(uid, resident, delay):
        return offline_replica(uid, resident, delay, dep)

    def work(model, version, priority):
        return PoolWork(model, version, {"x": np.zeros((1, 2), np.float32)}, priority,
                        deadline_at=1.0, arrived_at=0.0)

    def pending(w, *, routed=True, rid="q0", args=None):
        # As RemotePoolClient calls: the work as the argument, its routing id in the metadata.
        meta = serve_common.RequestMetadata(
            request_id=rid, internal_request_id=rid,
            multiplexed_model_id=w.routing_id if routed else "")
        return PendingRequest(args=[w] if args is None else args, kwargs={}, metadata=meta)

    assert route_target(pending(work("a", "1", R))) == RouteTarget("a", "1", R)
    # The model comes from the metadata only: the call's arguments are never read.
    assert route_target(pending(work("a", "1", R), routed=False)) == RouteTarget(None)
    assert route_target(pending(work("a", "1", R), args=[work("b", "2", I)])) == RouteTarget(
        "a", "1", R)
    assert route_target(PendingRequest(args=[work("a", "1", R)], kwargs={}, metadata=None)
                        ) == RouteTarget(None)
    assert route_target(None) == RouteTarget(None)

    async def choose(w, routed=True):
        router = TimeshareRequestRouter(dep, serve_common.DeploymentHandleSource.UNKNOWN)
        reps = [replica("r1", [], 0.0), replica("r2", ["a@1"], 0.3)]
        ranks = await router.choose_replicas(reps, pending(w, routed=routed))
        return [[r.replica_id.unique_id for r in rank] for rank in ranks]

    assert await choose(work("a", "1", I)) == [["r2"], ["r1"]]  # resident first
    assert await choose(work("a", "1", I), routed=False) == [["r1"], ["r2"]]  # by wait only

    async def burst(**kwargs):
        # A burst on a model resident nowhere: with the plan every request's first rank is the
        # same single replica (one swap-in, the rest queue behind it); without it all three
        # replicas share the first rank, so each could swap the model in.
        router = TimeshareRequestRouter(dep, serve_common.DeploymentHandleSource.UNKNOWN)
        router.initialize_state(**kwargs)
        reps = [replica(f"r{i}", ["a@1"], 0.0) for i in range(3)]
        firsts = set()
        for i in range(20):
            req = pending(work("cold", None, I), rid=f"q{i}")
            for _ in range(2):  # Ray asks again while the request backs off
                ranks = await router.choose_replicas(reps, req)
                firsts.add(tuple(r.replica_id.unique_id for r in ranks[0]))
        return firsts, router.rates.rate("cold")

    firsts, rate = await burst()
    assert len(firsts) == 1 and len(next(iter(firsts))) == 1
    assert rate == 20 / 5.0  # each routed request counted once toward the model's rate
    assert await burst(placement=False) == ({("r0", "r1", "r2")}, 4.0)
    with pytest.raises(ValueError, match="unknown request_router_kwargs"):
        TimeshareRequestRouter(dep, serve_common.DeploymentHandleSource.UNKNOWN
                               ).initialize_state(capacity=0.5)


async def test_published_stats_are_every_replica_the_routers_here_hold():
    # What the ingress's spill and shedding read: all replicas of the named deployment, from
    # the routers alive in this process, not the one replica a poll reached.
    from ray.serve._private import common as serve_common

    from pool.request_router import TimeshareRequestRouter, published_stats

    dep = serve_common.DeploymentID(name="GPUPool", app_name="ts-published")
    other = serve_common.DeploymentID(name="CPUPool", app_name="ts-published")
    router = TimeshareRequestRouter(dep, serve_common.DeploymentHandleSource.UNKNOWN)
    router.update_replicas([offline_replica("g1", ["a@1"], 0.4, dep, replica="w1"),
                            offline_replica("g2", [], 0.02, dep, replica="w2",
                                            published_at=99.0)])
    cpu = TimeshareRequestRouter(other, serve_common.DeploymentHandleSource.UNKNOWN)
    cpu.update_replicas([offline_replica("c1", [], 9.0, other, replica="w3")])
    got = sorted(published_stats("ts-published", "GPUPool"), key=lambda s: s.replica)
    assert [(s.replica, s.queue_delay_s[I], s.published_at) for s in got] == [
        ("w1", 0.4, 0.0), ("w2", 0.02, 99.0)]
    assert got[0].resident == frozenset({"a@1"})
    assert published_stats("ts-published", "nope") == []


_BY_VALUE_CHILD = """
import sys
from ray import cloudpickle
from ray.serve._private import common as serve_common
sys.path.insert(0, sys.argv[2])
from test_replica_ranking import offline_replica

import asyncio

async def main():
    shipped = cloudpickle.loads(open(sys.argv[1], "rb").read())
    import pool.request_router as module
    assert shipped is not module.TimeshareRequestRouter
    dep = serve_common.DeploymentID(name="Pool", app_name="ts-by-value")
    router = shipped(dep, serve_common.DeploymentHandleSource.UNKNOWN)
    router.update_replicas([offline_replica("p1", [], 0.1, dep, replica="w9")])
    print([s.replica for s in module.published_stats("ts-by-value", "Pool")])

asyncio.run(main())
"""


def test_published_stats_see_a_router_class_shipped_by_value(tmp_path):
    # Ray Serve ships the router class by value (cloudpickle.register_pickle_by_value on its
    # module) to the process that routes: there its globals are copies, so the registry
    # published_stats reads must live in a module pickled by reference.
    import subprocess
    import sys
    from pathlib import Path

    from ray import cloudpickle

    import pool.request_router as module

    cloudpickle.register_pickle_by_value(module)
    try:
        (tmp_path / "router.pkl").write_bytes(cloudpickle.dumps(module.TimeshareRequestRouter))
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", _BY_VALUE_CHILD, str(tmp_path / "router.pkl"),
                          str(Path(__file__).parent)], capture_output=True, text=True,
                         cwd=root, timeout=120, env={"PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "['w9']"
