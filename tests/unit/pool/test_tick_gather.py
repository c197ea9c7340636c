"""The rule of policies.inline: gather while ticks find company, launch at once after a run
of lone ticks, and gather again from the first watched tick with two arrivals."""

from policies.inline import LONE_TICKS, Arrival, TickGather


def _lone_ticks(g: TickGather, n: int) -> None:
    for _ in range(n):
        assert g.arrive() is Arrival.GATHER
        g.gathered(1)


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
    g.gathered(2)
    g.tick_over()
    assert g.lone == 0 and g.arrive() is Arrival.GATHER


def test_a_shared_tick_resets_the_run_and_an_empty_one_is_neutral():
    g = TickGather()
    _lone_ticks(g, LONE_TICKS - 1)
    assert g.arrive() is Arrival.GATHER
    g.gathered(0)  # a pump launched them first: says nothing of the callers
    assert g.lone == LONE_TICKS - 1
    assert g.arrive() is Arrival.GATHER
    g.gathered(3)
    assert g.lone == 0
