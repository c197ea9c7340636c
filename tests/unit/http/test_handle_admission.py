"""The handle API passes the same admission as HTTP and gRPC (``router.edge.EdgeGate``), on a
real in-process ingress: a Python caller is counted in flight, teaches the service time, and is
shed to its labelled fallback under overload like any other request."""

from __future__ import annotations

import numpy as np
import pytest

from policies.priority import Priority
from router.schemas import CacheControl, InferenceRequest

pytestmark = pytest.mark.asyncio(loop_scope="package")

MODEL = "digits-small"  # its fallback chain ends in a static default (deploy/demo.py)


def _request(priority: Priority, rid: str) -> InferenceRequest:
    return InferenceRequest(model=MODEL, inputs={"pixels": np.zeros((1, 64), np.float32)},
                            priority=priority, cache=CacheControl(skip_read=True),
                            request_id=rid)


async def test_a_handle_call_is_counted_by_the_edge_and_teaches_its_service_time(ingress):
    gate = ingress._gate
    st = gate.state
    before_total, before_last = st.total, st._last_done
    resp = await ingress.infer(_request(Priority.INTERACTIVE, "handle-admitted"))
    assert not resp.degraded and resp.timings.compute_ms > 0
    assert st.total == before_total  # let in, then finished
    assert st._last_done is not None and st._last_done != before_last  # a backend answer


async def test_under_overload_a_handle_call_is_shed_to_its_labelled_fallback(ingress,
                                                                           monkeypatch):
    st = ingress._gate.state
    # the ingress's loop has CPU to spare (after the package's other tests it may read busy,
    # and then a shed request gets Overloaded instead: tests/unit/core/test_edge_middleware.py)
    monkeypatch.setattr(ingress._gate.loop_load, "busy", 0.0)
    st.in_flight[Priority.BATCH] += 100  # far past every class's share of max_in_flight
    st.total += 100
    try:
        resp = await ingress.infer(_request(Priority.BATCH, "handle-shed"))
    finally:
        st.in_flight[Priority.BATCH] -= 100
        st.total -= 100
    assert resp.degraded and resp.served_by == "default"
    assert resp.reason is not None and "shed at the edge: overload:batch" in resp.reason
    assert resp.outputs["logits"].dtype == np.float32  # the declared dtype, degraded or not


async def test_a_streamed_handle_call_passes_the_same_admission(ingress, monkeypatch):
    st = ingress._gate.state
    before_total = st.total
    answers = [r async for r in ingress.infer_stream(_request(Priority.INTERACTIVE, "stream-in"))]
    assert len(answers) == 1 and not answers[0].degraded and st.total == before_total
    monkeypatch.setattr(ingress._gate.loop_load, "busy", 0.0)
    st.in_flight[Priority.BATCH] += 100
    st.total += 100
    try:
        shed = [r async for r in ingress.infer_stream(_request(Priority.BATCH, "stream-shed"))]
    finally:
        st.in_flight[Priority.BATCH] -= 100
        st.total -= 100
    assert len(shed) == 1 and shed[0].degraded
    assert "shed at the edge: overload:batch" in (shed[0].reason or "")
