"""When a CPU pool runs a chunk on its event loop instead of its device thread. Pure functions:
the pool's chunk runner (``pool._private.chunk``) asks them; ``DeviceSpec.inline_ms`` and
``inline_bounded_only`` say what the settings mean."""

from __future__ import annotations

__all__ = ["INLINE_AFTER_RUNS", "INLINE_STALL", "is_stall"]

INLINE_AFTER_RUNS = 3  # device-thread runs measured before a model may run inline
INLINE_STALL = 10.0  # a chunk this many times inline_ms disqualifies the model from inline


def is_stall(took_s: float, inline_cpu_s: float | None, inline_s: float, *,
             bounded_only: bool) -> bool:
    """Does a chunk that took ``took_s`` (``inline_cpu_s`` of the loop thread's CPU when it ran
    inline, else None) disqualify its model from inline for good?

    Any chunk over ``INLINE_STALL`` x ``inline_s`` does, so a hang blocks the loop at most once.
    With ``bounded_only`` only an inline chunk that spent that long on the CPU does: a bounded
    graph cannot sleep, so a slow chunk that did not compute was the host's doing (the thread
    preempted, or waiting for the GIL), and a slow chunk on the device thread never blocked the
    loop.

    >>> is_stall(0.06, None, 0.005, bounded_only=False)
    True
    >>> is_stall(0.06, 0.001, 0.005, bounded_only=True)
    False
    """
    limit = INLINE_STALL * inline_s
    if not inline_s or took_s <= limit:
        return False
    return not bounded_only or (inline_cpu_s or 0.0) > limit
