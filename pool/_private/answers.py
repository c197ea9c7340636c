"""Answers: a completed batch's outputs become its requests' results.

Each request gets its rows of the batch's outputs (numpy views for numpy callers: one
conversion per batch, and a numpy slice costs a tenth of a tensor slice); a request whose rows
have all come back is answered with one ``WorkResult``, its parts joined in row order (the
batches of a split request may finish out of order on two streams), and its queue wait,
compute and swap-in go into the worker's per-class window (the status views). Runs on the
worker's event loop; the worker closes the batch's swap-in before.
"""

from __future__ import annotations

import torch

from pool._private.chunk import Batch, join_rows, name_outputs
from pool._private.queue import Pending
from pool.class_window import ClassWindow
from pool.types import Rows, WorkResult

__all__ = ["answer_batch", "finish"]


def answer_batch(b: Batch, device: str, classes: ClassWindow) -> None:
    """Give each request of ``b`` its rows and answer the finished ones (``device``: the
    label their results carry; ``classes``: where their queue wait and compute are recorded)."""
    entry = b.entry
    if len(b.parts) == 1 and b.parts[0][2] == b.parts[0][0].rows:
        _answer_whole(b, b.parts[0][0], device, classes)  # one request, whole
        return
    outputs = name_outputs(entry.config, b.raw)
    arrays: dict[str, Rows] = ({k: v.numpy() for k, v in outputs.items()}
                               if any(p.as_numpy for p, _, _ in b.parts) else dict(outputs))
    tensors: dict[str, Rows] = dict(outputs)
    whole = len(b.parts) == 1
    offset = 0
    for p, first, n in b.parts:
        src = arrays if p.as_numpy else tensors
        p.parts.append((first, src if whole else {k: v[offset: offset + n]
                                                  for k, v in src.items()}))
        offset += n
        p.done += n
        p.compute_s += b.device_s
        p.swap_s += b.swap_s
        p.batch = max(p.batch, b.rows)
        if p.done >= p.rows:
            finish(p, device, classes)
    entry.queue = [p for p in entry.queue if p.done < p.rows and not p.future.done()]


def _answer_whole(b: Batch, p: Pending, device: str, classes: ClassWindow) -> None:
    p.done = p.rows
    p.compute_s += b.device_s
    p.swap_s += b.swap_s
    if b.rows > p.batch:
        p.batch = b.rows
    if not p.future.done():
        raw, one = b.raw, b.entry.one_output
        outs: dict[str, Rows]
        if one is not None and isinstance(raw, torch.Tensor):  # (the common case: named as is)
            outs = {one: raw.numpy() if p.as_numpy else raw}
        else:
            outputs = name_outputs(b.entry.config, raw)
            outs = ({k: v.numpy() for k, v in outputs.items()} if p.as_numpy
                    else dict(outputs))
        _settle(p, outs, device, classes)  # all its rows are here: no parts to join
    queue = b.entry.queue
    if len(queue) == 1 and queue[0] is p:
        queue.clear()
    else:
        b.entry.queue = [q for q in queue if q.done < q.rows and not q.future.done()]


def finish(p: Pending, device: str, classes: ClassWindow) -> None:
    """Answer ``p`` with its rows, joined in row order, and record its queue wait and compute
    (and swap-in) in ``classes`` (a no-op once it is answered)."""
    if p.future.done():
        return
    if len(p.parts) == 1:
        outs = p.parts[0][1]
    else:
        p.parts.sort(key=lambda part: part[0])
        outs = {k: join_rows([part[k] for _, part in p.parts]) for k in p.parts[0][1]}
    _settle(p, outs, device, classes)


def _settle(p: Pending, outs: dict[str, Rows], device: str, classes: ClassWindow) -> None:
    """Answer ``p`` (not yet answered) with ``outs`` and record its times in ``classes``."""
    queue_s = (p.first_start or p.arrival) - p.arrival
    classes.observe(p.priority, (queue_s, p.compute_s, p.swap_s))
    p.future.set_result(WorkResult(outs, queue_s * 1e3, p.compute_s * 1e3, p.swap_s * 1e3,
                                   p.batch, device))
