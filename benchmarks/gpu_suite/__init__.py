"""The GPU proof in one Ray-free command: ``python -m benchmarks.gpu_suite --json out.json``.

Sections, in order (see docs/GPU.md): correctness checks of every CUDA path (the asynchronous
executor's included), swap bandwidth and the fixed cost per swap, pipelined swap-in, priority on
the device against the plain-torch floor and plain stream priorities, colocation of >= 100
models against the hand-written pinned-LRU loop, and the capacity sweep of three zoos. On a
machine without
CUDA every section runs scaled down on the CPU stand-in and the CUDA-only checks report
``skipped`` with the reason; targets are evaluated only where CUDA ran.
"""
