"""Pipelined swap-in (PipeSwitch-style): the first layers compute while later ones still copy.

The packed weights are split into layer groups along tensor boundaries (in the module's
parameter order, which follows its layers), small first and growing (each group's copy hides
behind the compute of the groups before it). On CUDA every group is one non-blocking copy on
the copy stream followed by an event; a forward pre-hook on each module that owns weights makes
the current (compute) stream wait for the event of the last group holding them, so the host
never waits and a layer's kernels start as soon as its bytes are on the device. On the CPU
stand-in a thread copies the groups in order and each hook waits for its group's
``threading.Event``.

Limits: modules whose parameters are used by a module other than their owner (weights shared
or reached functionally from a parent) are waited for by their owner's hook only; buffers are
packed after all parameters, so a layer with buffers (batch norm) waits for the last groups;
TorchScript modules take no hooks and wait for the whole copy before their forward.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from pool._private.weights import PackedModel, bind

__all__ = ["LayerGroup", "PipelinedCopy", "plan_groups"]


@dataclass(frozen=True, slots=True)
class LayerGroup:
    """Bytes ``[start, end)`` of the packed buffer, holding slots ``[first_slot, last_slot)``."""

    start: int
    end: int
    first_slot: int
    last_slot: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def plan_groups(packed: PackedModel, *, first_bytes: int, growth: float = 2.0
                ) -> tuple[LayerGroup, ...]:
    """Split the layout into groups: the first holds at least one tensor and about
    ``first_bytes``, each next one up to ``growth`` times more. Groups cover the whole buffer."""
    if first_bytes <= 0 or growth < 1.0:
        raise ValueError(f"first_bytes must be > 0 and growth >= 1, got {first_bytes}, {growth}")
    slots, groups = packed.slots, []
    i, start, target = 0, 0, float(first_bytes)
    while i < len(slots):
        j = i + 1
        while j < len(slots) and slots[j].offset + slots[j].nbytes - start <= target:
            j += 1
        end = packed.nbytes if j == len(slots) else slots[j].offset
        groups.append(LayerGroup(start, end, i, j))
        i, start, target = j, end, target * growth
    return tuple(groups) or (LayerGroup(0, packed.nbytes, 0, 0),)


class PipelinedCopy:
    """One swap-in copied group by group; compute waits per group, never for the whole copy.

    ``start()`` enqueues (CUDA) or begins (CPU thread) every group's copy and re-points the
    module at ``dst`` at once; run the first forward pass inside ``hooks(module)``. When that
    pass is enqueued (or on :meth:`synchronize`), ``after`` gets the last group's event, so any
    later work (on streams the hooks never ordered) waits for the whole copy.
    """

    def __init__(self, packed: PackedModel, dst: torch.Tensor, groups: tuple[LayerGroup, ...],
                 *, copy_stream: torch.cuda.Stream | None = None,
                 after: Callable[[torch.cuda.Event], None] | None = None) -> None:
        assert packed.host is not None, "pipelined copy needs the host buffer"
        self.packed, self.dst, self.groups = packed, dst, groups
        self._stream = copy_stream
        self._after = after  # CUDA: orders other streams after the whole copy (once)
        slot_group = [0] * len(packed.slots)
        for g, grp in enumerate(groups):
            for s in range(grp.first_slot, grp.last_slot):
                slot_group[s] = g
        self._tensor_group = {id(t): slot_group[s] for s, t in enumerate(packed.tensors)}
        self._events: list[torch.cuda.Event] = []
        self._begin: torch.cuda.Event | None = None
        self._copied = [threading.Event() for _ in groups]
        self._ready_s: list[float] = [0.0] * len(groups)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._t0 = 0.0

    @property
    def events(self) -> tuple[torch.cuda.Event, ...]:
        """CUDA: the begin event and one event per group (empty on CPU)."""
        return (self._begin, *self._events) if self._begin is not None else ()

    def start(self) -> None:
        self._t0 = time.perf_counter()
        if self._stream is not None:
            self._enqueue_cuda()
        else:
            self._thread = threading.Thread(target=self._copy_cpu, name="timeshare-pipelined",
                                            daemon=True)
            self._thread.start()
        bind(self.packed, self.dst)

    def _enqueue_cuda(self) -> None:
        src, dst = self.packed.host, self.dst
        assert src is not None and self._stream is not None
        self._begin = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self._stream):
            self._begin.record()
            for g in self.groups:
                dst[g.start:g.end].copy_(src[g.start:g.end], non_blocking=True)
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                self._events.append(ev)
        # The region was allocated on another stream: keep the allocator from reusing it while
        # the copy is still in flight, should the swap be aborted and the region freed.
        dst.record_stream(self._stream)

    def _copy_cpu(self) -> None:
        src = self.packed.host
        assert src is not None
        try:
            for g, grp in enumerate(self.groups):
                self.dst[grp.start:grp.end].copy_(src[grp.start:grp.end])
                self._ready_s[g] = time.perf_counter() - self._t0
                self._copied[g].set()
        except BaseException as e:  # noqa: BLE001 - re-raised by synchronize(); never hang waiters
            self._error = e
            for ev in self._copied:
                ev.set()

    def wait(self, group: int) -> None:
        """Order what comes next after group ``group``'s copy: on CUDA the current stream waits
        for its event (the host does not); on CPU the calling thread blocks until it is copied."""
        if self._events:
            torch.cuda.current_stream(self.dst.device).wait_event(self._events[group])
        else:
            self._copied[group].wait()
            if self._error is not None:
                raise RuntimeError("pipelined copy failed") from self._error

    def _order_rest(self) -> None:
        if self._events and self._after is not None:
            after, self._after = self._after, None
            after(self._events[-1])

    def synchronize(self) -> float:
        """Block the host until every group is copied; returns the copy's seconds."""
        self._order_rest()
        if self._events:
            self._events[-1].synchronize()
        elif self._thread is not None:
            self._thread.join()
            if self._error is not None:
                raise RuntimeError("pipelined copy failed") from self._error
        return self.ready_s(len(self.groups) - 1)

    def ready_s(self, group: int) -> float:
        """Seconds from the copy's start until group ``group`` was on the device (call after
        that group completed, e.g. after :meth:`synchronize`)."""
        if self._begin is not None:
            self._events[group].synchronize()
            return self._begin.elapsed_time(self._events[group]) / 1e3
        self._copied[group].wait()
        return self._ready_s[group]

    @contextmanager
    def hooks(self, module: nn.Module) -> Iterator[None]:
        """While inside, each module that owns weights waits for its groups before it runs."""
        if isinstance(module, torch.jit.ScriptModule):
            self.wait(len(self.groups) - 1)  # no hooks on TorchScript: wait for the whole copy
            try:
                yield
            finally:
                self._order_rest()
            return
        handles = []
        for m in module.modules():
            own = [*m._parameters.values(), *m._buffers.values()]
            gs = [self._tensor_group[id(t)] for t in own if t is not None
                  and id(t) in self._tensor_group]
            if gs:
                handles.append(m.register_forward_pre_hook(partial(self._pre_hook, max(gs))))
        try:
            yield
        finally:
            for h in handles:
                h.remove()
            self._order_rest()

    def _pre_hook(self, group: int, _module: nn.Module, _args: object) -> None:
        self.wait(group)
