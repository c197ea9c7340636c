"""`timeshare usage` over a JSON-lines call log with known contents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy.usage import aggregate, main, parse_since, read_jsonl
from router.calllog import CallRecord

NOW = 1_700_000_000.0


def rec(i: int, caller: str, model: str, device_ms: float, *, age_s: float = 60.0,
        degraded: bool = False, cache: str = "miss") -> CallRecord:
    return CallRecord(ts=NOW - age_s, request_id=f"r{i}", caller=caller, model=model,
                      version="1", served_by=f"gpu:{model}@1", device_ms=device_ms, cache=cache,
                      degraded=degraded, bytes_in=256, bytes_out=32, priority="interactive")


KNOWN = [
    rec(1, "team-a", "digits-small", 100),
    rec(2, "team-a", "digits-small", 100, cache="redis"),
    rec(3, "team-a", "digits-large", 400),
    rec(4, "team-b", "digits-large", 1400, degraded=True),
    rec(5, "team-b", "digits-large", 5000, age_s=3 * 3600),   # outside --since 1h
    rec(6, "team-c", "digits-small", 9000, age_s=3 * 86400),  # outside --since 1d
]


def write_log(path: Path, records: list[CallRecord]) -> Path:
    path.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    return path


def usage(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv), clock=lambda: NOW)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_by_caller_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = write_log(tmp_path / "calls.jsonl", KNOWN)
    code, out, _ = usage(capsys, "--since", "1h", "--by", "caller", "--log", str(log))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "usage since 1h ago, by caller: 4 requests"
    assert lines[1].split() == ["caller", "requests", "device_s", "share", "degraded",
                                "cache_hits"]
    # team-b: 1.4 s of 2.0 s = 70%; team-a: 0.6 s = 30%; sorted by device-seconds.
    assert lines[3].split() == ["team-b", "1", "1.400", "70.0%", "100.0%", "0.0%"]
    assert lines[4].split() == ["team-a", "3", "0.600", "30.0%", "0.0%", "33.3%"]
    assert lines[5].split() == ["TOTAL", "4", "2.000", "100.0%"]


def test_by_caller_and_model_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = write_log(tmp_path / "calls.jsonl", KNOWN)
    code, out, _ = usage(capsys, "--since", "1d", "--by", "caller,model", "--log", str(log),
                         "--json")
    assert code == 0
    rows = {(r["caller"], r["model"]): r for r in json.loads(out)}
    assert set(rows) == {("team-a", "digits-small"), ("team-a", "digits-large"),
                         ("team-b", "digits-large")}
    assert rows[("team-b", "digits-large")]["requests"] == 2
    assert rows[("team-b", "digits-large")]["device_s"] == pytest.approx(6.4)
    assert rows[("team-b", "digits-large")]["share"] == pytest.approx(6.4 / 7.0)
    assert rows[("team-a", "digits-small")]["cache_hits"] == pytest.approx(0.5)
    assert sum(r["share"] for r in rows.values()) == pytest.approx(1.0)


def test_rotated_files_and_malformed_lines(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "calls.jsonl"
    write_log(tmp_path / "calls.jsonl.1", KNOWN[:2])
    write_log(log, KNOWN[2:4])
    with open(log, "a") as f:
        f.write('{"ts": 1, "caller": "cut sh\n')
    code, out, err = usage(capsys, "--since", "1h", "--log", str(log), "--by", "model")
    assert code == 0
    assert "4 requests" in out
    assert "skipped malformed line" in err and "calls.jsonl:3" in err
    assert sorted(r.request_id for r in read_jsonl(log)) == ["r1", "r2", "r3", "r4"]


@pytest.mark.parametrize("argv, needle", [
    (["--since", "yesterday"], "--since must look like 30m, 6h, 1d or 2w, got 'yesterday'"),
    (["--by", "team"], "--by takes a comma-separated list of caller, model"),
    (["--log", "/nonexistent/calls.jsonl"], "does not exist"),
])
def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                              needle: str) -> None:
    code, _, err = usage(capsys, *argv)
    assert code == 2 and needle in err


def test_parse_since_and_empty_aggregate() -> None:
    assert [parse_since(s) for s in ("30m", "6h", "1d", "90s", "1.5h")] == [
        1800, 21600, 86400, 90, 5400]
    assert aggregate([], ("caller",)) == []
