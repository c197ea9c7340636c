"""The GPU proof in one Ray-free command: ``python -m benchmarks.gpu_suite --json out.json``.

Sections, in order (see docs/GPU.md): correctness checks of every CUDA path, swap bandwidth,
pipelined swap-in, priority on the device, colocation of >= 100 models. On a machine without
CUDA every section runs scaled down on the CPU stand-in and the CUDA-only checks report
``skipped`` with the reason; targets are evaluated only where CUDA ran.
"""
