"""The rule of policies.inline: gather while ticks find company, launch at once after a run
of lone ticks, and gather again from the first watched tick with two arrivals."""

from policies.inline import GATHER_TICKS, LONE_TICKS, Arrival, TickGather

CAP = 64  # rows a chunk may have and still run inline


def _lone_ticks(g: TickGather, n: int) -> None:
    for _ in range(n):
        assert g.arrive() is Arrival.GATHER
        assert g.gathered(1, CAP)


def test_gathers_until_a_run_of_lone_ticks_then_launches_at_once_watching_each_tick():
    g = TickGather()
    _lone_ticks(g, LONE_TICKS)
    assert g.arrive() is Arrival.NOW_WATCH  # the caller schedules tick_over
    g.tick_over()
    assert g.arrive() is Arrival.NOW_WATCH


def test_a_second_arrival_in_a_watched_tick_turns_gathering_back_on():
    g = TickGather()
    _lone_ticks(g, LONE_TICKS)
    assert g.arrive() is Arrival.NOW_WATCH
    assert g.arrive() is Arrival.GATHER  # company: this one waits for the tick's end
    assert g.arrive() is Arrival.JOIN
    assert not g.gathered(2, CAP)  # company: one more tick
    assert g.gathered(2, CAP)  # none added in it: over
    g.tick_over()
    assert g.lone == 0 and g.arrive() is Arrival.GATHER


def test_a_shared_tick_resets_the_run_and_an_empty_one_is_neutral():
    g = TickGather()
    _lone_ticks(g, LONE_TICKS - 1)
    assert g.arrive() is Arrival.GATHER
    assert g.gathered(0, CAP)  # a pump launched them first: says nothing of the callers
    assert g.lone == LONE_TICKS - 1
    assert g.arrive() is Arrival.GATHER
    assert not g.gathered(3, 3 + 1) and g.gathered(4, 4)  # the cap ends it
    assert g.lone == 0


def test_a_gather_waits_while_its_ticks_add_company_for_at_most_gather_ticks():
    g = TickGather()
    assert g.arrive() is Arrival.GATHER
    found = [g.gathered(n, CAP) for n in (2, 3, 5, 8, 13)[:GATHER_TICKS]]
    assert found == [False] * (GATHER_TICKS - 1) + [True]
    assert not g.pending and g.arrive() is Arrival.GATHER  # a new gather
