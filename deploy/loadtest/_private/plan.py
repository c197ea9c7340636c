"""The send plan: when each request goes out and what it carries, fixed before the run starts.

Everything random (arrival gaps, model/priority/caller choice, payload choice, random payload
values) comes from one ``numpy.random.Generator`` seeded by ``arrival.seed``, so a config plus a
seed always produces the same plan.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from deploy.loadtest.config import InputSource, LoadTestConfig
from deploy.loadtest.target import LoadRequest
from policies.priority import parse_priority
from pool.config import DTYPES

__all__ = ["Payload", "PlannedRequest", "arrival_offsets", "build_payloads", "build_plan"]

Payload = dict[str, tuple[str, np.ndarray]]


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request and its planned send time, in seconds from the start of the run."""

    offset_s: float
    request: LoadRequest
    measured: bool


def arrival_offsets(process: str, rate: float, duration_s: float,
                    rng: np.random.Generator) -> np.ndarray:
    """Planned send offsets in [0, duration_s): evenly spaced or a Poisson process."""
    if process == "constant":
        return np.arange(0.0, duration_s, 1.0 / rate)
    if process != "poisson":
        raise ValueError(f"arrival.process must be 'constant' or 'poisson', got {process!r}")
    # Draw in chunks until past the end; expected count is rate*duration.
    chunks: list[np.ndarray] = []
    t = 0.0
    while t < duration_s:
        gaps = rng.exponential(1.0 / rate, size=max(16, int(rate * duration_s * 0.2) + 16))
        times = t + np.cumsum(gaps)
        chunks.append(times)
        t = float(times[-1])
    all_times = np.concatenate(chunks)
    return all_times[all_times < duration_s]


def _load_examples(src: InputSource) -> list[np.ndarray]:
    assert src.file is not None
    dtype = DTYPES[src.datatype]
    try:
        if src.file.suffix == ".npy":
            data = np.load(src.file, allow_pickle=False)
            examples = [np.asarray(x, dtype=dtype) for x in data]
        else:
            raw = json.loads(Path(src.file).read_text())
            if not isinstance(raw, list) or not raw:
                raise ValueError("expected a non-empty JSON list of examples")
            examples = [np.asarray(x, dtype=dtype) for x in raw]
    except (OSError, ValueError) as e:
        raise ValueError(f"inputs.{src.name}.file {str(src.file)!r}: {e}") from None
    if not examples:
        raise ValueError(f"inputs.{src.name}.file {str(src.file)!r}: no examples")
    if src.shape is not None:
        try:
            examples = [x.reshape(src.shape) for x in examples]
        except ValueError as e:
            raise ValueError(f"inputs.{src.name}.shape {list(src.shape)}: {e}") from None
    return examples


def _random_examples(src: InputSource, count: int, rng: np.random.Generator) -> list[np.ndarray]:
    assert src.shape is not None
    lo, hi = (src.random.low, src.random.high) if src.random else (0.0, 1.0)
    dtype = np.dtype(DTYPES[src.datatype])
    if dtype.kind == "b":
        return [rng.random(src.shape) < 0.5 for _ in range(count)]
    if dtype.kind in "iu":
        return [rng.integers(int(lo), int(hi), size=src.shape).astype(dtype) for _ in range(count)]
    return [rng.uniform(lo, hi, size=src.shape).astype(dtype) for _ in range(count)]


def build_payloads(inputs: list[InputSource], pool_size: int,
                   rng: np.random.Generator) -> list[Payload]:
    """Example payloads of one model: file examples as given, or ``pool_size`` random ones."""
    per_input: dict[str, list[np.ndarray]] = {}
    for src in inputs:
        per_input[src.name] = (_load_examples(src) if src.file is not None
                               else _random_examples(src, pool_size, rng))
    n = max(len(v) for v in per_input.values())
    dts = {src.name: src.datatype for src in inputs}
    # Inputs with fewer examples cycle, so multi-input models get n distinct payloads.
    return [{name: (dts[name], ex[i % len(ex)]) for name, ex in per_input.items()}
            for i in range(n)]


def _weighted(rng: np.random.Generator, names: list[str], weights: list[float],
              n: int) -> np.ndarray:
    p = np.asarray(weights, dtype=float)
    return rng.choice(len(names), size=n, p=p / p.sum())


def build_plan(cfg: LoadTestConfig, rate: float, *, run_index: int = 0) -> list[PlannedRequest]:
    """The whole schedule of one run at ``rate``: warm-up requests first, then measured ones."""
    rng = np.random.default_rng([cfg.arrival.seed, run_index])
    total = cfg.warmup_s + cfg.duration_s
    offsets = arrival_offsets(cfg.arrival.process, rate, total, rng)
    n = len(offsets)
    payloads = [build_payloads(cfg.inputs_of(m), cfg.payload_pool, rng) for m in cfg.models]
    model_idx = _weighted(rng, [m.name for m in cfg.models], [m.weight for m in cfg.models], n)
    prio_names = [parse_priority(p).label for p in cfg.priorities]
    prio_idx = _weighted(rng, prio_names, list(cfg.priorities.values()), n)
    caller_names = list(cfg.callers)
    caller_idx = _weighted(rng, caller_names, list(cfg.callers.values()), n)
    payload_pick = rng.integers(0, 1 << 30, size=n)
    plan = []
    for i in range(n):
        m = cfg.models[model_idx[i]]
        pl = payloads[model_idx[i]]
        req = LoadRequest(
            request_id=f"lt-{run_index}-{i}",
            model=m.name,
            version=m.version,
            inputs=pl[payload_pick[i] % len(pl)],
            priority=prio_names[prio_idx[i]],
            caller=caller_names[caller_idx[i]],
            deadline_ms=cfg.deadline_ms,
        )
        measured = bool(offsets[i] >= cfg.warmup_s)
        plan.append(PlannedRequest(float(offsets[i]), req, measured=measured))
    return plan
