"""``policies.inline``: which chunks disqualify a model from running inline for good
(``is_stall``), and how many intra-op threads a CPU chunk gets (``intra_op_threads``)."""

import pytest

from policies.inline import ONE_THREAD_BELOW_S, intra_op_threads, is_stall


@pytest.mark.parametrize(("bounded_only", "took_s", "cpu_s", "stalls"), [
    (False, 0.06, None, True),    # any chunk over 10x inline_ms: a hang blocks the loop once
    (False, 0.04, 0.04, False),   # under 10x
    (True, 0.06, 0.06, True),     # a bounded graph that really computed that long
    (True, 0.06, 0.001, False),   # 60 ms of wall time, 1 ms of CPU: the host, not the graph
    (True, 0.06, None, False),    # on the device thread: the loop was never blocked
])
def test_what_counts_as_a_stall(bounded_only, took_s, cpu_s, stalls):
    assert is_stall(took_s, cpu_s, 0.005, bounded_only=bounded_only) is stalls


def test_inline_off_never_stalls():
    assert is_stall(10.0, 10.0, 0.0, bounded_only=False) is False


@pytest.mark.parametrize(("forward_cpu_s", "threads"), [
    (5e-6, 1),                       # a small linear layer: a parallel region's wake costs more
    (ONE_THREAD_BELOW_S * 0.99, 1),
    (ONE_THREAD_BELOW_S, 4),         # from the threshold on, the device's count
    (2e-3, 4),                       # the cold estimate (2 ms a row): the device's count
])
def test_small_forwards_get_one_thread(forward_cpu_s, threads):
    assert intra_op_threads(forward_cpu_s, 4) == threads
