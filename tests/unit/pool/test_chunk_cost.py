"""A chunk's CPU cost, fixed part and per row (``policies.estimates.ChunkCost``): what decides
whether a CPU chunk runs on the event loop."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.estimates import ChunkCost, ewma


def _fit(chunks: list[tuple[int, float]]) -> ChunkCost:
    cost = ChunkCost.first(rows=chunks[0][0], cost_s=chunks[0][1])
    for rows, cost_s in chunks[1:]:
        cost.observe(rows=rows, cost_s=cost_s)
    return cost


def test_a_mostly_fixed_forward_is_not_read_as_dear_per_row():
    """What a busy host measured for digits-small: about the same CPU a chunk from 2 to 14 rows,
    and a run of one-row chunks last. A cost per row read 12 rows at 2.5 ms, over the ingress's
    1 ms inline limit; the fit reads them at what 12-row chunks cost."""
    chunks = [(12, 350e-6)] * 10 + [(1, 300e-6)] * 5
    per_row = None
    for rows, cost_s in chunks:
        per_row = ewma(per_row, cost_s / rows)
    assert per_row is not None and 12 * per_row > 2.5e-3
    fit = _fit(chunks)
    assert fit.estimate_s(12) == pytest.approx(350e-6)
    assert fit.estimate_s(1) == pytest.approx(300e-6)


def test_chunks_of_one_size_are_read_per_row():
    fit = _fit([(4, 400e-6)] * 8)
    assert fit.per_row_s == pytest.approx(100e-6)
    assert fit.estimate_s(2) == pytest.approx(200e-6)
    assert fit.estimate_s(8) == pytest.approx(800e-6)


def test_a_cost_that_grows_with_the_rows_is_fitted_as_it_grows():
    fit = _fit([(rows, 50e-6 + rows * 20e-6) for rows in (1, 8, 3, 16, 5, 12) * 6])
    assert fit.per_row_s == pytest.approx(20e-6)
    assert fit.estimate_s(10) == pytest.approx(250e-6)


def test_the_fixed_part_is_never_negative_nor_the_part_per_row():
    steeper = _fit([(1, 10e-6), (10, 1000e-6)] * 10)  # more per row than the mean per row
    assert steeper.estimate_s(0) == pytest.approx(0.0, abs=1e-12)
    assert steeper.per_row_s == pytest.approx(steeper.cost_s / steeper.rows)
    falling = _fit([(1, 300e-6), (10, 100e-6)] * 10)  # bigger chunks measured cheaper
    assert falling.per_row_s == 0.0
    assert falling.estimate_s(10) == pytest.approx(falling.cost_s)


def test_a_restart_forgets_every_chunk_before():
    fit = _fit([(1, 300e-6), (12, 350e-6)] * 10)
    fit.restart(rows=4, cost_s=400e-6)
    assert fit == ChunkCost.first(rows=4, cost_s=400e-6)
    assert fit.estimate_s(8) == pytest.approx(800e-6)


def test_past_the_rows_measured_the_cost_grows_in_proportion():
    """Only small chunks measured: a chunk far larger is not taken for their fixed cost."""
    fit = _fit([(1, 100e-6), (2, 110e-6)] * 10)
    edge = fit.rows + 2 * fit.var_rows ** 0.5
    assert fit.estimate_s(int(edge * 10)) >= 9 * fit.estimate_s(int(edge))


@given(st.lists(st.tuples(st.integers(1, 64), st.floats(1e-6, 1e-2)), min_size=1,
                max_size=40),
       st.integers(1, 512), st.integers(1, 512))
def test_the_estimate_grows_with_the_rows_and_stays_positive(chunks, a, b):
    fit = _fit(chunks)
    small, large = sorted((a, b))
    assert 0.0 < fit.estimate_s(small) <= fit.estimate_s(large) * (1 + 1e-9)
