"""Event times at the end of what microseconds count, and slides equal to the window.

A window closes when the largest time seen is its end plus ``lateness``;
when that is past the last microsecond an event time has, no time closes
it, and the element that would open it is refused whole through the
node's error policy. A slide is compared with the window as the windows
are cut: in microseconds on event time, within the clock windows'
tolerance on the clock.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest

from streams import NodeError, Stream, VirtualClock, use_clock
from streams.fusion import unfused
from streams.operators.window_bounds import event_micros


def last_time() -> float:
    """The largest float time whose microseconds a float holds."""
    t = sys.float_info.max / 1e6
    while not math.isinf(math.nextafter(t, math.inf) * 1e6):
        t = math.nextafter(t, math.inf)
    while math.isinf(t * 1e6):
        t = math.nextafter(t, 0.0)
    return t


# The last time, and the one before it: the microsecond-long window that the
# latter opens ends at most at the former's microsecond, the last one.
LAST_TIME = last_time()
BEFORE_LAST = math.nextafter(LAST_TIME, 0.0)


def identity(x: Any) -> Any:
    return x


MAKERS = {
    "tumbling": lambda s, lateness: s.timed_window(10, time=identity, lateness=lateness),
    "sliding": lambda s, lateness: s.timed_window(10, slide=5, time=identity,
                                                  lateness=lateness),
    "keyed": lambda s, lateness: s.timed_window(10, time=identity, key=lambda x: x > 5,
                                                lateness=lateness),
    "session": lambda s, lateness: s.session_window(10, time=identity, lateness=lateness),
}
EXPECTED = {  # what 1.0 alone gives: the refused element is in none of the windows
    "tumbling": [[1.0]],
    "sliding": [[1.0], [1.0]],
    "keyed": [(False, [1.0])],
    "session": [[1.0]],
}


def run(name: str, xs: list[float], lateness: float, fused: bool = True
        ) -> tuple[list[Any], list[Any], list[Any]]:
    """Emit ``xs`` under the "route" policy, close: windows, late elements, errors."""
    def go() -> tuple[list[Any], list[Any], list[Any]]:
        source = Stream()
        node = MAKERS[name](source, lateness).on_error("route")
        out, late = node.sink_to_list(), node.late.sink_to_list()
        errors = node.errors.sink_to_list()
        for x in xs:
            source.emit(x)
        source.close()
        return out, late, errors

    if fused:
        return go()
    with unfused():
        return go()


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("order", [[1e301, 1.0], [1.0, 1e301]], ids=["first", "second"])
@pytest.mark.parametrize("name", sorted(MAKERS))
def test_a_window_no_time_closes_refuses_its_element_whole(
        name: str, order: list[float], fused: bool) -> None:
    out, late, errors = run(name, order, 1.7e302, fused)
    assert out == EXPECTED[name]  # no empty window, and 1e301 in none
    assert late == []
    assert [e.element for e in errors] == [1e301]
    assert isinstance(errors[0].exception, ValueError)
    message = str(errors[0].exception)
    assert "lateness=1.7e+302" in message and "give a smaller lateness=" in message


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_the_raise_policy_names_the_node_and_the_node_goes_on(name: str) -> None:
    source = Stream()
    node = MAKERS[name](source, 1.7e302)
    out = node.sink_to_list()
    with pytest.raises(NodeError, match=r"(timed|session)_window\(10\.0\) failed on element "
                                        r"1e\+301: ValueError: .* past the last event time"):
        source.emit(1e301)
    source.emit(1.0)
    source.close()
    assert out == EXPECTED[name]


@pytest.mark.parametrize("name", ["tumbling", "sliding"])
def test_the_last_time_whose_window_a_watermark_can_reach_is_held(name: str) -> None:
    # A microsecond-long window: BEFORE_LAST's ends at most at the last
    # microsecond; LAST_TIME's ends one after it, which no time reaches.
    from streams.operators.window_bounds import LAST_MICROS, closes_at

    assert event_micros(LAST_TIME) == LAST_MICROS > event_micros(BEFORE_LAST)
    assert closes_at(LAST_MICROS, 0) == LAST_TIME
    source = Stream()
    node = (source.timed_window(1e-6, time=identity) if name == "tumbling" else
            source.timed_window(2e-6, slide=1e-6, time=identity)).on_error("route")
    out, errors = node.sink_to_list(), node.errors.sink_to_list()
    source.emit(BEFORE_LAST)
    source.emit(LAST_TIME)
    source.close()
    assert [e.element for e in errors] == [LAST_TIME]
    assert out == [[BEFORE_LAST]] * (1 if name == "tumbling" else 2)


def test_a_refused_element_moves_no_watermark() -> None:
    source = Stream()
    node = source.timed_window(10, slide=5, time=identity, lateness=1.7e302).on_error("route")
    out = node.sink_to_list()
    source.emit(1.0)
    source.emit(1e302)  # refused: were it counted, 1.0's windows would close now
    assert out == []
    source.close()
    assert out == [[1.0], [1.0]]


def test_a_session_run_by_key_group_says_when_it_closes() -> None:
    # An engine running the node by key group asks when it may close next
    # (_next_close); a session that no time closes is never opened.
    source = Stream()
    node = source.session_window(10, time=identity, lateness=1.7e302, key=lambda x: 0)
    node.on_error("route")
    errors = node.errors.sink_to_list()
    node._arrive_as(0, 1e301)
    source.emit(1e301)
    assert [e.element for e in errors] == [1e301]
    assert node._next_close() == math.inf
    node._arrive_as(1, 1e301)
    source.emit(1.0)
    assert 1e301 < node._next_close() < math.inf
    assert node._close_to(math.inf) == [((11_000_000, 1), (0, [1.0]))]


# -- a slide equal to the window ----------------------------------------------------------


def test_on_event_time_a_slide_of_the_windows_microseconds_is_tumbling() -> None:
    xs = [0.0, 0.1, 0.29, 0.3, 0.6, 0.61, 1.2]

    def windows(slide: float) -> list[Any]:
        source = Stream()
        out = source.timed_window(0.3, slide=slide, time=identity).sink_to_list()
        for x in xs:
            source.emit(x)
        source.close()
        return out

    tumbling = windows(0.3)
    assert tumbling == [[0.0, 0.1, 0.29], [0.3], [0.6, 0.61], [1.2]]
    assert windows(0.1 * 3) == windows(0.3000004) == tumbling  # all 300000 us
    with pytest.raises(ValueError, match=r"slide=0\.300001 is longer than the window \(0\.3 s\)"):
        windows(0.300001)  # a microsecond longer


def test_on_the_clock_a_slide_a_rounding_longer_than_the_window_is_the_window() -> None:
    def windows(slide: float) -> list[Any]:
        with use_clock(VirtualClock()) as clock:
            source = Stream()
            out = source.timed_window(0.3, slide=slide).sink_to_list()
        for x in range(6):
            source.emit(x)
            clock.advance(0.2)
        return out

    assert windows(0.1 * 3) == windows(0.3) == [[0, 1], [2], [3, 4], [5]]
    # Not cut in microseconds: a slide longer by more than a rounding is refused.
    for longer in [0.3000004, 0.31]:
        with pytest.raises(ValueError, match=r"slide=0\.3.* is longer than the window \(0\.3 s\)"):
            windows(longer)


@pytest.mark.parametrize("time", [identity, None], ids=["event-time", "clock"])
def test_a_slide_that_puts_an_element_in_too_many_windows_is_refused_when_built(
        time: Any) -> None:
    # 3600 s sliding by a microsecond: each element in 3.6e9 windows, the first
    # element never done. Refused, saying how to get the same result.
    with pytest.raises(ValueError, match=r"^timed_window\(\): slide=1e-06 puts each element in "
                                         r"3,600,000,000 windows .*sliding_window"):
        Stream().timed_window(3600, slide=1e-6, time=time)
    with use_clock(VirtualClock()):  # the most taken: 100,000 windows an element
        Stream().timed_window(100, slide=0.001, time=time)
        with pytest.raises(ValueError, match=r"100,001 windows"):
            Stream().timed_window(100.001, slide=0.001, time=time)
