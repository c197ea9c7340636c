"""CUDA streams of one device: one per priority class for compute, one for copies.

Both the residency (whose copies the compute streams must wait for) and the worker (which runs
chunks on them) use the same stream objects, so a swap-in's copy can be ordered before the
forward pass with an event (``Stream.wait_event``) instead of a host-side synchronisation.
"""

from __future__ import annotations

import torch

from policies.priority import Priority

__all__ = ["class_streams"]


def class_streams(device: str) -> dict[Priority, torch.cuda.Stream]:
    """One compute stream per priority class; realtime gets the device's most urgent level.

    ``torch.cuda.Stream.priority_range()`` is (least, most) urgent, e.g. (0, -5): a lower number
    is more urgent. Batch and background share the least urgent level.
    """
    low, high = torch.cuda.Stream.priority_range()  # type: ignore[call-arg]
    levels = {Priority.REALTIME: high, Priority.INTERACTIVE: (low + high) // 2,
              Priority.BATCH: low, Priority.BACKGROUND: low}
    return {cls: torch.cuda.Stream(device, priority=lvl) for cls, lvl in levels.items()}
