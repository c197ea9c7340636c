"""The project's object types a piece of code constructs, in the order first seen.

``constructed(packages)`` is a context manager that watches the calling thread (``sys.setprofile``)
and records the class of every object built through a Python-level constructor:
``__init__`` (classes, dataclasses, pydantic models), ``__new__`` (named tuples), pydantic's
``model_construct`` and Timeshare's ``router.schemas.unchecked``, for classes defined under one
of ``packages`` (top-level package names).
Objects built without a Python-level constructor (``copy.copy``, C code) are not seen, and
nor are other threads'. Used by the request-walk check (``tests/unit/http/test_request_walk.py``).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["constructed"]

_CONSTRUCTORS = {"__init__": "self", "__new__": "cls", "model_construct": "cls",
                 "unchecked": "cls"}


@contextmanager
def constructed(packages: frozenset[str]) -> Iterator[list[str]]:
    """Yields the list the names (``module.QualName``) are appended to, first sighting only.
    Called on a running loop, what the tasks that already exist construct is left out (the
    app's periodic refreshers are not the request); tasks started inside, and callbacks
    outside any task (a completion handed to the loop), count."""
    before = asyncio.all_tasks() if _loop_running() else set()
    seen: dict[str, None] = {}
    names: list[str] = []

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        who = _CONSTRUCTORS.get(frame.f_code.co_name)
        if who is None:
            return
        obj = frame.f_locals.get(who, frame.f_locals.get("_cls"))
        cls = obj if isinstance(obj, type) else type(obj)
        if cls.__module__.partition(".")[0] not in packages:
            return
        if before and _loop_running() and asyncio.current_task() in before:
            return
        name = f"{cls.__module__}.{cls.__qualname__}"
        if name not in seen:
            seen[name] = None
            names.append(name)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield names
    finally:
        sys.setprofile(previous)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
