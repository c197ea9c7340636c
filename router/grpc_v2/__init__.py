"""The Open Inference Protocol (KServe v2 / Triton) over gRPC: ``inference.GRPCInferenceService``.

``grpc_predict_v2.proto`` is KServe's (Apache-2.0, its header kept), with Triton's two extra
parameter kinds; ``_generated`` holds its messages (``make grpc-stubs``). The codec, the service
and the listener are Timeshare's; the service enters the same request path as HTTP.
"""

from router.grpc_v2.listener import GrpcListener, GrpcSettings, start_grpc
from router.grpc_v2.service import SERVICE, STATUS_CODES, InferenceService

__all__ = ["GrpcListener", "GrpcSettings", "InferenceService", "SERVICE", "STATUS_CODES",
           "start_grpc"]
