"""Concurrent single-row requests share one forward (benchmarks.batching, short runs)."""

from __future__ import annotations

import argparse

from benchmarks.batching import run


def test_concurrent_rows_share_a_forward_and_a_lone_request_does_not_wait(demo_repo_master):
    out = run(argparse.Namespace(model="digits-small", seconds=0.5,
                                 demo_repo=str(demo_repo_master)))
    arms = out["arms"]
    assert arms["unbatched"]["c16"]["rows_per_forward"] == 1.0
    assert arms["batched"]["c16"]["rows_per_forward"] > 1.5  # 16 callers, one forward for many
    # no wait configured: a lone closed-loop caller is never held back for rows that won't come
    assert arms["batched"]["c1"]["p50_ms"] < arms["batched_wait_2ms"]["c1"]["p50_ms"]
    assert arms["batched"]["c1"]["p50_ms"] < 2.0
