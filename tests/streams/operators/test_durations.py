"""Durations given to timed operators: what streamz accepts (pandas.Timedelta, NumPy numbers)."""

from __future__ import annotations

import sys
from fractions import Fraction

import numpy as np
import pytest

from streams import Stream
from streams.operators.durations import check_interval


@pytest.mark.parametrize(("text", "seconds"), [
    ("500ms", 0.5), ("2s", 2.0), ("1min", 60.0), ("1h", 3600.0),
    ("10 seconds", 10.0), ("1 hour", 3600.0), ("1d", 86400.0),
    ("100 milliseconds", 0.1), ("1000ns", 1e-6), ("2 min", 120.0),
])
def test_interval_strings_read_as_streamz_reads_them(text: str, seconds: float) -> None:
    pd = pytest.importorskip("pandas")
    assert check_interval("delay", text) == pytest.approx(seconds)
    assert seconds == pytest.approx(pd.Timedelta(text).total_seconds())


@pytest.mark.parametrize("number", [np.int64(2), np.float32(0.5), Fraction(1, 4)])
def test_any_real_number_is_seconds(number: object) -> None:
    node = Stream().timed_window(number)  # type: ignore[arg-type]
    assert node.interval == float(number)  # type: ignore[attr-defined, arg-type]
    assert type(node.interval) is float  # type: ignore[attr-defined]


@pytest.mark.parametrize(("bad", "error", "message"), [
    (True, TypeError, "interval must be a number of seconds, got True"),
    (np.bool_(True), TypeError, "interval must be a number of seconds"),
    ("soon", ValueError, "cannot read interval 'soon'"),
    ("-1 seconds", ValueError, "interval must be > 0 seconds, got '-1 seconds'"),
    ("NaT", ValueError, "interval must be > 0 seconds, got 'NaT'"),
])
def test_bad_durations_fail_at_build_time_naming_the_operator(
        bad: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=f"rate_limit\\(\\): {message}"):
        Stream().rate_limit(bad)  # type: ignore[arg-type]


def test_without_pandas_the_short_forms_still_read_and_others_say_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas raises ImportError
    assert check_interval("delay", "250ms") == 0.25
    with pytest.raises(ValueError, match=r"delay\(\): cannot read interval '10 seconds'.*pandas"):
        check_interval("delay", "10 seconds")
