"""`timeshare loadtest CONFIG --out DIR` end to end against a real HTTP server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.loadtest import load_config, main
from deploy.loadtest._private.plan import build_plan
from deploy.loadtest.calibrate import calibrate, write_calibration
from tests.support.loadtest import raw_config
from tests.support.ports import free_port

PNG = b"\x89PNG\r\n\x1a\n"


def write_cfg(tmp_path: Path, url: str, **over: Any) -> Path:
    raw = raw_config(url, **{"warmup_s": 0.5, "stability": {"window_s": 0.5, "windows": 3,
                                                              "tolerance": 0.9}, **over})
    path = tmp_path / "lt.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_report_counts_errors_degraded_and_groups(tmp_path: Path, latency_server: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cfg_path = write_cfg(
        tmp_path, latency_server,
        models=[{"name": "digits-small", "weight": 2}, {"name": "degraded", "weight": 1},
                {"name": "broken", "weight": 1}],
        priorities={"interactive": 1, "batch": 1},
        callers={"team-a": 1, "team-b": 1},
    )
    out = tmp_path / "report"
    assert main([str(cfg_path), "--out", str(out), "--no-progress"]) == 1  # 503s fail the SLO

    # What the server must have seen follows from the seeded plan.
    plan = [p for p in build_plan(load_config(cfg_path), 40) if p.measured]
    n_broken = sum(p.request.model == "broken" for p in plan)
    n_degraded = sum(p.request.model == "degraded" for p in plan)
    assert n_broken > 0 and n_degraded > 0

    figures = json.loads((out / "report.json").read_text())
    run = figures["runs"][0]
    assert figures["ok"] is False
    assert run["planned"] == len(plan)
    assert run["errors"]["by_class"] == {"http_503": n_broken}
    assert run["ok"] == len(plan) - n_broken
    assert run["shares"]["degraded"] == pytest.approx(n_degraded / run["ok"])
    assert run["shares"]["fallback_served_by"] == {"rules": 1.0}
    assert run["shares"]["cache"]["bypass"] == pytest.approx(n_degraded / run["ok"])
    assert set(run["by_model"]) == {"digits-small", "degraded", "broken"}
    assert run["by_model"]["broken"]["error_rate"] == 1.0
    assert set(run["by_priority"]) == {"interactive", "batch"}
    failed = [row["name"] for row in run["slo"] if not row["ok"]]
    assert failed == ["error_rate", "min_throughput_ratio"]  # 503s are not throughput

    md = (out / "report.md").read_text()
    assert "**Verdict: FAIL**" in md and "http_503" in md
    png = out / "latency_over_time_40rps.png"
    assert png.read_bytes()[:8] == PNG
    assert f"({png.name})" in md
    assert "SLO FAILED: error_rate" in capsys.readouterr().out


def test_sweep_finds_knee_and_passes(tmp_path: Path, latency_server: str) -> None:
    cfg_path = write_cfg(tmp_path, latency_server,
                         arrival={"process": "constant", "rates": [10, 30], "seed": 1},
                         duration_s=1.5, warmup_s=0.2)
    out = tmp_path / "sweep"
    assert main([str(cfg_path), "--out", str(out), "--no-progress"]) == 0
    figures = json.loads((out / "report.json").read_text())
    assert figures["sweep"] is True and figures["ok"] is True
    assert [r["target_rps"] for r in figures["runs"]] == [10, 30]
    assert figures["knee"]["slo_knee_rps"] == 30
    assert (out / "throughput_vs_latency.png").read_bytes()[:8] == PNG
    assert "SLO knee" in (out / "report.md").read_text()


def test_bad_config_exits_2_naming_the_key(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = write_cfg(tmp_path, "http://127.0.0.1:9", arrivals={"rate": 3})
    assert main([str(path), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "arrivals: unknown key" in err
    assert not (tmp_path / "x").exists()


def test_unreachable_target_reports_connect_errors(tmp_path: Path) -> None:
    path = write_cfg(tmp_path, f"http://127.0.0.1:{free_port()}", duration_s=0.5, warmup_s=0)
    out = tmp_path / "down"
    assert main([str(path), "--out", str(out), "--no-progress"]) == 1
    run = json.loads((out / "report.json").read_text())["runs"][0]
    assert run["errors"]["by_class"] == {"ConnectionRefusedError": run["planned"]}
    assert run["latency_ms"]["p50"] is None


async def test_calibration_measures_floor_ladder_and_stall(tmp_path: Path) -> None:
    """A short calibration (the real one climbs to 16,000 req/s in 3 s steps)."""
    c = await calibrate(workers=2, floor_rps=200, step_s=1.0, stall_rps=200, ladder=(300, 600))
    assert c["floor"]["requests"] == pytest.approx(200, abs=40)
    assert 0 < c["floor"]["added_ms"]["p50"] <= c["floor"]["added_ms"]["p99"]
    assert c["ladder"][0]["rate_rps"] == 300
    stall = c["stall"]
    assert stall["freeze"]["resumed_s"] - stall["freeze"]["stopped_s"] == pytest.approx(2.0,
                                                                                       abs=0.05)
    # Requests planned at the start of the freeze waited for all of it.
    assert stall["latency_ms"]["max"] >= 1900 and stall["errors"] == {}
    md = write_calibration(c, tmp_path)
    assert json.loads((tmp_path / "calibration.json").read_text())["stall"] == stall
    assert "**Added latency** at 200 req/s" in md.read_text()
