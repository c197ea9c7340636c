"""Caller identity: who a request comes from, proven by its caller key when keys are set."""

from __future__ import annotations

import hashlib

from router.errors import Forbidden, Unauthorized
from router.schemas import ANONYMOUS, InferenceRequest

__all__ = ["digest", "identify"]


def identify(request: InferenceRequest, keys: dict[str, str] | None) -> InferenceRequest:
    """The request with its caller proven by its key (``keys``: key digest -> identity).

    Without caller keys the declared caller stays, unverified. With them: no key means
    anonymous (a declared caller is a 403), an unknown key is a 401, and a key whose identity
    differs from the declared caller is a 403. The key itself never travels further.
    """
    key = request.caller_key
    if keys is None:
        if key is None and not request.caller_verified:
            return request  # the common case: no copy
        return request.model_copy(update={"caller_key": None, "caller_verified": False})
    if key is None:
        if request.caller != ANONYMOUS:
            raise Forbidden(f"caller: {request.caller!r} needs its caller key (Authorization: "
                            f"Bearer KEY); without one a request is {ANONYMOUS!r}",
                            field="caller")
        return request.model_copy(update={"caller_verified": False})
    identity = keys.get(digest(key))
    if identity is None:
        raise Unauthorized("caller_key: unknown caller key", field="caller_key")
    if request.caller not in (ANONYMOUS, identity):
        raise Forbidden(f"caller: the key belongs to {identity!r}, not {request.caller!r}",
                        field="caller")
    return request.model_copy(
        update={"caller": identity, "caller_key": None, "caller_verified": True})


def digest(key: str) -> str:
    """The form a caller key is kept in (settings hold digests, never keys)."""
    return hashlib.sha256(key.encode()).hexdigest()
