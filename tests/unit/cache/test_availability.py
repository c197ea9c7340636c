from router.cache._private.availability import Availability


def make(clock, events):
    return Availability(
        name="redis_cache",
        backoff_s=1.0,
        backoff_max_s=4.0,
        clock=clock,
        on_event=lambda kind, detail: events.append((kind, detail)),
    )


def test_one_event_per_outage_then_probe_after_backoff(clock):
    events = []
    av = make(clock, events)
    assert av.admit()
    av.failed(ConnectionError("refused"))
    av.failed(ConnectionError("refused"))  # a second in-flight call failing: no second event
    assert [k for k, _ in events] == ["redis_cache_unavailable"]
    assert "refused" in events[0][1]["error"]
    assert not av.admit()
    clock.advance(1.0)
    assert av.admit()  # the probe
    assert not av.admit()  # only one probe at a time
    av.failed(TimeoutError())  # failed probe: wait doubles to 2 s
    clock.advance(1.5)
    assert not av.admit()
    clock.advance(0.5)
    assert av.admit()
    av.succeeded()
    assert av.up and av.admit()
    assert [k for k, _ in events] == ["redis_cache_unavailable", "redis_cache_recovered"]


def test_backoff_is_bounded(clock):
    av = make(clock, [])
    av.failed(OSError())
    for _ in range(6):
        clock.advance(100)
        assert av.admit()
        av.failed(OSError())
    clock.advance(3.9)
    assert not av.admit()
    clock.advance(0.1)
    assert av.admit()


def test_a_failing_event_sink_does_not_break_the_gate(clock):
    def sink(kind, detail):
        raise RuntimeError("alerting down")

    av = Availability(name="x", backoff_s=1, backoff_max_s=1, clock=clock, on_event=sink)
    av.failed(OSError())
    assert not av.up
