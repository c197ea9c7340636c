"""Decoded v2 bodies of repeated cache hits, so an exact-cache hit skips the JSON decode.

A cache hit is the same body again: decoding its JSON (``json`` parse, the tensor checks, the
array build) was about a fifth of a hit's cost in the ingress (docs/PERFORMANCE.md). Decoding is a
pure function of the body's bytes and its ``Inference-Header-Content-Length``, so its result can be
remembered by them. Only bodies whose answer *was* a cache hit are remembered: a cache-bypassing or
never-repeated body is decoded every time, as before, and costs one dictionary lookup more.

What stays per request: the ``InferenceRequest`` (request id, caller key, arrival, shed mark), the
cache lookup itself (TTL, version, tiers), quotas, accounting and labels. The remembered input
arrays are read-only and every caller gets them, not copies (a copy per hit was about 4 % of a
hit's CPU, docs/PERFORMANCE.md): a hit only reads them (the cache key, the bytes counted), and a
request that goes on to compute gets writable arrays from ``router.validation.validate_inputs``.
Bounded: at most ``max_entries`` bodies of at most ``max_body_bytes`` each, oldest out first.
"""

from __future__ import annotations

from dataclasses import replace

from router.v2 import DecodedRequest, decode_infer_request

__all__ = ["DecodeMemo"]

HIT_TIERS = frozenset({"memory", "redis"})  # exact-cache answers: the body itself repeated


class DecodeMemo:
    def __init__(self, *, max_entries: int = 256, max_body_bytes: int = 16 * 1024) -> None:
        if max_entries < 0 or max_body_bytes < 0:
            raise ValueError("max_entries and max_body_bytes must be >= 0")
        self.max_entries = max_entries
        self.max_body_bytes = max_body_bytes
        self._entries: dict[tuple[int | None, bytes], DecodedRequest] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def decode(self, body: bytes, header_length: int | None) -> DecodedRequest:
        """``decode_infer_request(body, header_length)``, from memory when it holds the body."""
        found = self._entries.get((header_length, body))
        if found is None:
            return decode_infer_request(body, header_length)
        # built directly: dataclasses.replace walks the fields first (2.7 % of a hit's loop
        # time in a sampling profile); the arrays are the remembered read-only ones
        return DecodedRequest(request_id=found.request_id, inputs=dict(found.inputs),
                              parameters=dict(found.parameters), outputs=found.outputs,
                              binary_all=found.binary_all)

    def answered(self, body: bytes, header_length: int | None, decoded: DecodedRequest,
                 cache_tier: str) -> None:
        """Remember ``decoded`` for ``body`` when its answer came from the exact cache."""
        if (cache_tier not in HIT_TIERS or len(body) > self.max_body_bytes
                or self.max_entries == 0):
            return
        key = (header_length, bytes(body))
        if key in self._entries:
            return
        while len(self._entries) >= self.max_entries:
            del self._entries[next(iter(self._entries))]
        inputs = {}
        for name, arr in decoded.inputs.items():
            kept = arr.copy()
            kept.flags.writeable = False
            inputs[name] = kept
        self._entries[key] = replace(decoded, inputs=inputs, parameters=dict(decoded.parameters))
