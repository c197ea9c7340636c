"""A real OTLP/HTTP trace receiver on 127.0.0.1: a socket server that decodes each POSTed
``ExportTraceServiceRequest`` (protobuf, with the ``opentelemetry-proto`` package) and keeps
its spans. What the OpenTelemetry Collector's ``otlp`` receiver does on ``/v1/traces``, for the
part tests read (no Collector package exists for this machine)."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["OtlpReceiver", "ReceivedSpan", "start_otlp_receiver"]


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    service: str


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@dataclass
class OtlpReceiver:
    server: ThreadingHTTPServer
    spans: list[ReceivedSpan] = field(default_factory=list)
    posts: list[str] = field(default_factory=list)  # content types of the export requests
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1/traces"

    def received(self) -> list[ReceivedSpan]:
        with self.lock:
            return list(self.spans)

    def wait_for(self, predicate: Callable[[list[ReceivedSpan]], bool], timeout_s: float,
                 what: str) -> list[ReceivedSpan]:
        deadline = time.monotonic() + timeout_s
        while True:
            spans = self.received()
            if predicate(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout_s} s: {what}; received "
                                     f"{[(s.name, s.attributes) for s in spans]}")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_otlp_receiver() -> OtlpReceiver:
    holder: dict[str, OtlpReceiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            rec = holder["r"]
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            if self.headers.get("content-encoding") == "gzip":
                raw = gzip.decompress(raw)
            msg = ExportTraceServiceRequest()
            msg.ParseFromString(raw)  # a body that is not the message fails the test loudly
            got = []
            for rs in msg.resource_spans:
                res = {a.key: _value(a.value) for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        got.append(ReceivedSpan(
                            name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                            start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            service=str(res.get("service.name", ""))))
            with rec.lock:
                rec.spans.extend(got)
                rec.posts.append(self.headers.get("content-type", ""))
            body = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder["r"] = rec = OtlpReceiver(server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return rec
