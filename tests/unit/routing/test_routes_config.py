"""Route configs: validation naming the field, loading from YAML, writing thresholds back."""

import pytest

from policies.routing import CascadeStrategy, PredictiveStrategy, StaticStrategy
from router.routes import RoutesFileError, build_strategy, load_routes, write_threshold

YAML = """
routes:
  - name: digits
    strategy: cascade
    cheap: digits-small
    expensive: digits-large
    threshold: 0.9
    confidence: margin
    spill: cheap
  - name: always-large
    strategy: static
    expensive: digits-large
"""


def test_load_list_form_and_build():
    routes = load_routes(YAML)
    assert list(routes) == ["digits", "always-large"]
    s = build_strategy(routes["digits"])
    assert isinstance(s, CascadeStrategy) and s.measure == "margin" and s.threshold == 0.9
    assert isinstance(build_strategy(routes["always-large"]), StaticStrategy)
    assert routes["digits"].spill_config.high == 0.8


def test_load_mapping_form():
    routes = load_routes({"routes": {"d": {"strategy": "fast-then-refine", "cheap": "a",
                                           "expensive": "b"}}})
    assert routes["d"].name == "d" and routes["d"].models == ("a", "b")


@pytest.mark.parametrize("body, match", [
    ({"strategy": "round-robin", "cheap": "a", "expensive": "b"},
     "strategy.*valid: static, cascade, predictive, fast-then-refine"),
    ({"strategy": "cascade", "cheap": "a"}, "needs both 'cheap' and 'expensive'"),
    ({"strategy": "cascade", "cheap": "a", "expensive": "a"}, "must differ"),
    ({"strategy": "cascade", "cheap": "a", "expensive": "b", "threshold": 2},
     "threshold"),
    ({"strategy": "predictive", "cheap": "a", "expensive": "b"}, "predictive_model"),
    ({"strategy": "static", "cheap": "a", "use": "expensive"}, "use='expensive'"),
    ({"strategy": "cascade", "cheap": "a", "expensive": "b", "use": "cheap"}, "'static' only"),
    ({"strategy": "cascade", "cheap": "a", "expensive": "b", "spill": "gpu"}, "spill"),
    ({"strategy": "cascade", "cheap": "a", "expensive": "b", "spill_low": 1.2},
     "spill_low"),
    ({"strategy": "static", "expensive": "b", "spill": "cpu-then-cheap"}, "needs a 'cheap'"),
    ({"strategy": "cascade", "cheap": "a", "expensive": "b", "colour": "red"}, "colour"),
])
def test_invalid_routes_name_route_and_field(body, match):
    with pytest.raises(RoutesFileError, match="route 'r'") as e:
        load_routes([{"name": "r", **body}])
    assert e.match(match)


def test_duplicate_names_rejected():
    r = {"name": "x", "strategy": "static", "expensive": "m"}
    with pytest.raises(RoutesFileError, match="declared twice"):
        load_routes([r, r])


def test_write_threshold_round_trip(tmp_path):
    path = tmp_path / "routes.yaml"
    path.write_text(YAML)
    write_threshold(path, "digits", 0.8123456789)
    routes = load_routes(path)
    assert routes["digits"].threshold == pytest.approx(0.812346)
    assert routes["always-large"].strategy == "static"
    with pytest.raises(RoutesFileError, match="'nope' not in"):
        write_threshold(path, "nope", 0.5)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(RoutesFileError, match="missing.yaml"):
        load_routes(tmp_path / "missing.yaml")


def test_predictive_route_loads_its_scorer(tmp_path):
    import numpy as np

    from policies.routing import LinearScorer
    from router.route_training import save_scorer

    save_scorer(LinearScorer(np.ones(2), 0.5, np.zeros(2), np.ones(2), ("pixels",)),
                tmp_path / "scorer.safetensors")
    routes = load_routes([{"name": "p", "strategy": "predictive", "cheap": "a",
                           "expensive": "b", "predictive_model": "scorer.safetensors"}])
    s = build_strategy(routes["p"], base_dir=tmp_path)
    assert isinstance(s, PredictiveStrategy) and s.threshold == 0.5
    assert s.scorer.bias == 0.5
    with pytest.raises(ValueError, match="file not found"):
        build_strategy(routes["p"], base_dir=tmp_path / "elsewhere")
