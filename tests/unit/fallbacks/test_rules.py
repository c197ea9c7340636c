import numpy as np
import pytest
import yaml

from common.trust import ModuleAllowlist
from fallbacks.request import FallbackRequest
from fallbacks.rule_engine import RuleEngine
from fallbacks.rules import RuleConfigError, load_rules
from tests.unit.fallbacks import rule_callables

CB = "tests.unit.fallbacks.rule_callables"
ALLOW = ModuleAllowlist(["tests.unit.fallbacks", "os"])

RULES_YAML = r"""
- {name: greeting, type: regex, pattern: "^(hi|hello)\\b", ignore_case: true,
   outputs: {label: [0]}}
- {name: refund, type: keyword, keywords: [refund, money back], outputs: {label: [3]}}
- {name: both, type: keyword, keywords: [late, parcel], match: all, outputs: {label: [4]}}
- {name: blank, type: threshold, input: pixels, reduce: max, op: "<", value: 0.01,
   outputs: {label: [-1]}}
- {name: mid, type: range, input: pixels, reduce: mean, min: 0.2, max: 0.4,
   outputs: {label: [5], scores: [[0.1, 0.9]]}}
- {name: faq, type: lookup, key: text, table: {"Opening hours": {label: [9]}}}
- {name: by-class, type: lookup, key: input, input: cls, table: {"2": {label: [22]}}}
"""


def req(text=None, **inputs):
    return FallbackRequest(
        model="m", text=text, inputs={k: np.asarray(v) for k, v in inputs.items()}
    )


@pytest.fixture
def engine():
    return RuleEngine.from_config(yaml.safe_load(RULES_YAML))


@pytest.mark.parametrize(
    "request_, rule, label",
    [
        (req("Hello world"), "greeting", 0),
        (req("I want a REFUND now"), "refund", 3),
        (req("give my money back"), "refund", 3),
        (req("parcel is late"), "both", 4),
        (req(pixels=np.zeros((1, 4))), "blank", -1),
        (req(pixels=np.full((1, 4), 0.3)), "mid", 5),
        (req("  opening HOURS "), "faq", 9),
        (req(cls=[2]), "by-class", 22),
    ],
)
async def test_each_rule_type_matches(engine, request_, rule, label):
    m = await engine.evaluate(request_)
    assert m is not None and m.rule == rule
    assert m.outputs["label"].tolist() == [label]


async def test_first_match_wins_and_misses_return_none(engine):
    m = await engine.evaluate(req("hello, I want a refund"))
    assert m.rule == "greeting"  # refund also matches, but comes later
    assert await engine.evaluate(req("refundable")) is None  # whole words only
    assert await engine.evaluate(req("late")) is None  # match: all
    assert await engine.evaluate(req(pixels=np.full((1, 4), 0.9))) is None
    assert await engine.evaluate(req(cls=[3])) is None
    assert await engine.evaluate(req(cls=[2, 2])) is None  # not a scalar, no reduce
    assert engine.match_declarative(req(pixels=np.full((2, 2), 0.25))).kind == "range"


async def test_outputs_are_read_only_numpy(engine):
    m = await engine.evaluate(req(pixels=np.full((1, 4), 0.3)))
    assert isinstance(m.outputs["scores"], np.ndarray) and m.outputs["scores"].shape == (1, 2)
    with pytest.raises(ValueError):
        m.outputs["scores"][0, 0] = 1.0


async def test_static_and_lookup_default():
    eng = RuleEngine.from_config(
        [
            {"name": "t", "type": "lookup", "table": {"a": {"y": 1}}, "default": {"y": 0}},
            {"name": "never", "type": "static", "outputs": {"y": 2}},
        ]
    )
    assert (await eng.evaluate(req("zzz"))).outputs["y"] == 0
    eng2 = RuleEngine.from_config([{"name": "s", "type": "static", "outputs": {"y": 2}}])
    assert (await eng2.evaluate(req())).rule == "s"


async def test_rule_on_a_missing_input_does_not_apply():
    eng = RuleEngine.from_config(
        [
            {
                "name": "t",
                "type": "threshold",
                "input": "x",
                "op": "gt",
                "value": 0,
                "outputs": {"y": 1},
            }
        ]
    )
    assert await eng.evaluate(req(other=[1.0])) is None


@pytest.mark.parametrize(
    "rules, index, name, field",
    [
        ([{"name": "a", "type": "regex", "pattern": "(", "outputs": {"y": 1}}], 0, "a", "pattern"),
        (
            [{"name": "ok", "type": "static", "outputs": {"y": 1}}, {"name": "b", "type": "nope"}],
            1,
            "b",
            "type",
        ),
        ([{"name": "c", "outputs": {"y": 1}}], 0, "c", "type"),
        (
            [
                {
                    "name": "d",
                    "type": "threshold",
                    "input": "x",
                    "op": "~",
                    "value": 1,
                    "outputs": {"y": 1},
                }
            ],
            0,
            "d",
            "op",
        ),
        ([{"name": "e", "type": "static", "outputs": {"y": [[1], [1, 2]]}}], 0, "e", "outputs"),
        ([{"name": "f", "type": "callable", "function": "os:nope"}], 0, "f", "function"),
        ([{"name": "f2", "type": "callable", "function": "no_colon"}], 0, "f2", "function"),
        ([{"type": "static", "outputs": {"y": 1}}], 0, None, "name"),
        ([{"name": "g", "type": "range", "input": "x", "outputs": {"y": 1}}], 0, "g", "min"),
        (
            [
                {
                    "name": "g2",
                    "type": "range",
                    "input": "x",
                    "min": 2,
                    "max": 1,
                    "outputs": {"y": 1},
                }
            ],
            0,
            "g2",
            "min",
        ),
        (
            [{"name": "h", "type": "lookup", "key": "input", "table": {"a": {"y": 1}}}],
            0,
            "h",
            "input",
        ),
        (
            [{"name": "i", "type": "keyword", "keywords": [], "outputs": {"y": 1}}],
            0,
            "i",
            "keywords",
        ),
        ([{"name": "j", "type": "static", "outputs": {"y": 1}, "colour": "red"}], 0, "j", "colour"),
        (
            [
                {"name": "k", "type": "static", "outputs": {"y": 1}},
                {"name": "k", "type": "static", "outputs": {"y": 2}},
            ],
            1,
            "k",
            "name",
        ),
    ],
)
def test_validation_errors_name_rule_and_field(rules, index, name, field):
    with pytest.raises(RuleConfigError) as ei:
        load_rules(rules, where="fallback[1].rules", allow=ALLOW)
    e = ei.value
    assert (e.index, e.rule_name, e.field) == (index, name, field)
    assert f"fallback[1].rules[{index}]" in str(e)
    assert f"field '{field}'" in str(e)
    if name:
        assert repr(name) in str(e)


async def test_callable_answers_and_declines():
    eng = RuleEngine.from_config(
        [{"name": "py", "type": "callable", "function": f"{CB}:answer", "timeout_ms": 10_000}],
        allow=ALLOW,
    )
    m = await eng.evaluate(req("seven"))
    assert (m.rule, m.kind, m.outputs["label"].tolist()) == ("py", "callable", [7])
    assert await eng.evaluate(req("eight")) is None


async def test_callable_timeout_is_no_answer_and_next_rule_runs():
    eng = RuleEngine.from_config(
        [{"name": "static", "type": "static", "outputs": {"label": [0]}}],
        callable_path=f"{CB}:hang",
        callable_timeout_ms=20,
        allow=ALLOW,
    )
    try:
        m = await eng.evaluate(req("x"))
    finally:
        rule_callables.release.set()  # let the abandoned worker thread finish
    assert m.rule == "static"


async def test_callable_timeout_is_capped_by_budget():
    eng = RuleEngine.from_config(
        [{"name": "slow", "type": "callable", "function": f"{CB}:slow_async",
          "timeout_ms": 10_000}],
        allow=ALLOW,
    )
    assert await eng.evaluate(req("x"), budget_s=0.01) is None


@pytest.mark.parametrize("fn", ["boom", "bad_output"])
async def test_callable_errors_and_bad_results_are_no_answer(fn):
    eng = RuleEngine.from_config(  # a generous timeout: these must fail for their own reason
        [{"name": fn, "type": "callable", "function": f"{CB}:{fn}", "timeout_ms": 10_000}],
        allow=ALLOW,
    )
    assert await eng.evaluate(req("seven")) is None


def test_not_callable_target_is_rejected():
    with pytest.raises(RuleConfigError, match="not callable"):
        RuleEngine.from_config(callable_path=f"{CB}:NOT_CALLABLE", allow=ALLOW)
