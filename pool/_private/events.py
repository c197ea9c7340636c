"""Pooled CUDA events: a swap or a batch takes a recorded pair and gives it back once complete.

Creating a ``torch.cuda.Event`` allocates a driver object on first record; an event whose work
completed may be recorded again (CUDA semantics: ``cudaEventRecord`` on a completed event), so
the pool hands out the same few objects over and over. Thread-safe (``queue.SimpleQueue``): the
launcher takes, the completion waiter or the event loop gives back. Bounded: beyond ``keep``
pairs, given-back ones are dropped. On a CPU device ``take`` is never called.
"""

from __future__ import annotations

import queue

import torch

__all__ = ["EventPool"]

Pair = tuple[torch.cuda.Event, torch.cuda.Event]


class EventPool:
    """(begin, done) timing-event pairs for one device; ``keep`` pairs at most stay pooled."""

    def __init__(self, device: str | None, *, keep: int = 64) -> None:
        self.device = device
        self._keep = keep
        self._free: queue.SimpleQueue[Pair] = queue.SimpleQueue()
        self.created = 0  # pairs ever made (a leak shows as this growing without bound)

    def take(self) -> Pair:
        try:
            return self._free.get_nowait()
        except queue.Empty:
            self.created += 1
            return (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))

    def give(self, pair: Pair) -> None:
        """Return a pair whose ``done`` event has completed (the caller checked)."""
        if self._free.qsize() < self._keep:
            self._free.put(pair)
