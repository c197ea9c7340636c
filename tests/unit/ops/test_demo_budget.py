"""The test overlay's device budget makes the demo zoo share: about a third of it fits."""

from __future__ import annotations

from deploy.demo import _build_module, demo_specs
from deploy.demo_data import load_splits
from router.settings import load_settings


def _weight_bytes() -> dict[str, int]:
    splits = {ds: load_splits(ds) for ds in ("iris", "wine", "breast_cancer", "digits")}
    out = {}
    for spec in demo_specs():
        m = _build_module(spec, splits[spec.dataset])
        out[spec.name] = sum(t.numel() * t.element_size()
                             for t in [*m.parameters(), *m.buffers()])
    return out


def test_the_test_overlay_holds_about_a_third_of_the_zoo_and_its_largest_model() -> None:
    budget = load_settings({"repository": "r", "environment": "test"}).cpu_pool.memory_budget_mb
    assert budget is not None
    weights = _weight_bytes()
    share = budget * (1 << 20) / sum(weights.values())
    assert 0.28 <= share <= 0.40, f"budget {budget} MiB holds {share:.0%} of the zoo"
    assert max(weights.values()) <= budget * (1 << 20)  # every model can still run
