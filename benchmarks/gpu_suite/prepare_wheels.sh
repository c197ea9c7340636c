#!/usr/bin/env bash
# Download the suite's wheels (benchmarks/gpu_suite/wheels.txt) for the GPU machine
# (CPython 3.12, manylinux x86_64) into .whl/ at the repository root (gitignored), and check
# that they stay under the 64 MiB a device call may carry. Run from anywhere:
#   benchmarks/gpu_suite/prepare_wheels.sh [PYTHON]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="${1:-python3}"
dest="$root/.whl"
rm -rf "$dest"
mkdir -p "$dest"
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform any \
    -d "$dest" -r "$root/benchmarks/gpu_suite/wheels.txt"
count=$(find "$dest" -type f -name '*.whl' | wc -l)
want=$(grep -cE '^[A-Za-z]' "$root/benchmarks/gpu_suite/wheels.txt")
bytes=$(du -sb "$dest" | cut -f1)
echo "$count wheels ($want wanted), $((bytes / 1024)) KiB in $dest"
ls -1 "$dest"
if [ "$count" -ne "$want" ]; then echo "expected $want wheels" >&2; exit 1; fi
if [ "$bytes" -gt $((64 * 1024 * 1024)) ]; then echo "over 64 MiB" >&2; exit 1; fi
