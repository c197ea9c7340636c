"""The pool request routers alive in this process (read by ``pool.request_router.published_stats``).

Its own module on purpose: Ray Serve ships a custom request router class to the processes that
route *by value* (``cloudpickle.register_pickle_by_value`` on the router's module), so a registry
kept as a global of ``pool.request_router`` would be a fresh copy inside every deserialized class.
Functions of this module are pickled by reference, so every router registers here, in the one
module object the process imported. Weak: a router Ray drops is not kept alive by it.
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["live", "register"]

_ROUTERS: weakref.WeakSet[Any] = weakref.WeakSet()


def register(router: Any) -> None:
    _ROUTERS.add(router)


def live() -> list[Any]:
    return list(_ROUTERS)
