"""Late elements of an event-time window on Spark: named, or at least counted and logged.

Spark's watermark drops a row bound for a window that ended at or before
the watermark of the previous micro-batch, and only counts it
(``numRowsDroppedByWatermark`` in the query's progress). Rows bound for a
window travel as packs (see :mod:`streams_spark.packs`) and are counted
after Spark's partial aggregation, so that count is of windows and keys,
not of elements, and says nothing of which. A sliding element late for its
first windows is dropped from those only: Spark still counts it in its
windows that are open (in-process it would be in none of them, only late).

The driver of a ``to_spark()`` segment wrote each micro-batch itself, so it
still holds its elements: when Spark reports drops for the batch that read
them, it runs the steps before the window over them again, in-process, and
finds the elements whose window had ended. Each reaches the window's error
policy as in-process: a :class:`~streams.operators.timed.LateElementError`
naming the element. The steps before the window run a second time only for
a micro-batch with late elements; they must keep no state (their state
after the batch is Spark's). When they do, or when the elements found do not
account for Spark's count, the error says how many rows Spark dropped.

Spark's watermark starts at the epoch and never goes below it: a window
that ends at or before 1970-01-01T00:00:00 is dropped, in any micro-batch,
however large ``lateness`` is, where in-process it is on time; the errors
say so. A segment that ends in ``to_dataframe()`` has no
driver in its path: each micro-batch in which Spark dropped rows is logged
as a warning naming the windows (:func:`watch_dropped`).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from streams.operators._checks import key_function
from streams.operators._late import seconds_of
from streams.operators.timed import LateElementError
from streams.operators.window_bounds import event_micros, micros
from streams.stage import Failure, Stage

from .codec import ERROR, carried_error
from .listener import DroppingMarks, observed, watch_progress, watched, watermark_us
from .plan import ChainStage, Plan, WindowStage, chain_plan

__all__ = ["LateElements", "watch_dropped"]

logger = logging.getLogger("streams")

#: What to do about rows late behind Spark's watermark, by where that watermark is.
_ADVICE = "raise lateness= to accept them"
#: Where the windows Spark drops whatever the lateness end (after "ending", "ends").
_BY_EPOCH = ("by 1970-01-01T00:00:00, where Spark's watermark stands until later times "
             "move it")
_EPOCH_ADVICE = ("Spark's watermark never goes below 1970-01-01T00:00:00, so a window "
                 "ending by then is dropped whatever the lateness: give times after 1970 "
                 "(time= plus an offset), or gather() before the window")


def _advice(watermark_us: int | None) -> str:
    """How to keep rows Spark dropped behind ``watermark_us`` (microseconds).

    >>> _advice(7_500_000)
    'raise lateness= to accept them'
    >>> _advice(0)[:56]
    "Spark's watermark never goes below 1970-01-01T00:00:00, "
    """
    return _EPOCH_ADVICE if watermark_us is not None and watermark_us <= 0 else _ADVICE


#: The windows of each output :func:`watch_dropped` watches, by its metric's name.
_watched: dict[str, list[str]] = {}
_watched_lock = threading.Lock()


def watch_dropped(df: Any, windows: list[Any]) -> Any:
    """``df`` (a streaming query's output), with each micro-batch of dropped rows logged.

    Spark counts what its stateful operators drop behind the watermark of
    the micro-batch before (``numRowsDroppedByWatermark``: rows after its
    partial aggregation, one per window and key) and says nothing else;
    ``windows`` are the window nodes of ``df``, named in the warning, and
    watched for while a query may run them (:func:`~.listener.watch`). The
    count is the query's, of all its stateful operators: where a user's query
    runs two such outputs (a union of them), one warning names the windows of both.
    """
    labels = [w._label() for w in windows]
    df, name = observed(df, ", ".join(labels))
    with _watched_lock:
        for gone in [n for n in _watched if not watched(n)]:  # forgotten by the listener
            del _watched[gone]
        _watched[name] = labels
    marks = DroppingMarks()

    def report(progress: Any) -> None:
        threshold, _ = marks.take(progress)
        dropped = sum(int(op.numRowsDroppedByWatermark or 0)
                      for op in progress.stateOperators or [])
        with _watched_lock:
            here = sorted(n for n in progress.observedMetrics or {} if n in _watched)
            label = ", ".join(w for n in here for w in _watched[n])
        if not dropped or (here and name != here[0]):  # the first output of a query tells
            return
        if threshold is not None and threshold <= 0:
            what = f"ending {_BY_EPOCH}; in-process they are on time. {_EPOCH_ADVICE}"
        else:
            what = ("that ended at or before the watermark of the micro-batch before: late, "
                    "in-process they would go to node.late, which a DataFrame cannot feed; "
                    + _ADVICE)
        logger.warning(
            "Query %s, which runs %s: in micro-batch %d Spark dropped %d window group(s) "
            "(one per window and key, not elements) " + what,
            progress.name or progress.id, label, progress.batchId, dropped)

    watch_progress(df.sparkSession, name, report, windows)
    return df


#: Micro-batches whose elements are kept until Spark's progress for them is read.
KEPT = 8


class LateElements:
    """Turns the drops Spark reports for a plan's event-time window into error rows.

    Parameters
    ----------
    plan : Plan
        A plan with an event-time window (the first one is the one watched).
    driver_fed : bool
        Whether the driver writes the micro-batches (``to_spark()``) and can
        :meth:`feed` their elements; else (``from_spark()``) the rows never
        pass through it, and the errors count Spark's dropped rows.
    """

    def __init__(self, plan: Plan, driver_fed: bool = True) -> None:
        i = next(i for i, s in enumerate(plan.stages) if isinstance(s, WindowStage))
        window = plan.stages[i]
        assert isinstance(window, WindowStage)
        self.spec = window.spec
        event_time = window.spec.traits.event_time
        assert event_time is not None
        self.event_time = event_time
        self.size = micros(event_time.size)
        self.slide = micros(event_time.slide) if event_time.slide is not None else self.size
        self.session = event_time.session
        self.lateness = event_time.lateness
        self.time = key_function(event_time.time)
        self.key = None if event_time.key is None else key_function(event_time.key)
        before = plan.stages[:i]
        # Only stateless chains can run again on the driver with Spark's result.
        self.specs = ([spec for s in before if isinstance(s, ChainStage) for spec in s.specs]
                      if all(isinstance(s, ChainStage) and not s.sequential for s in before)
                      else None)
        self.driver_fed = driver_fed
        self.fed: dict[int, list[Any]] = {}
        self.watermarks: dict[int, int] = {}
        self.checked = -1

    def feed(self, index: int, elements: list[Any]) -> None:
        """The elements of the ``index``-th file the query reads (one micro-batch)."""
        if self.specs is not None:
            self.fed[index] = elements
            for old in [k for k in self.fed if k <= index - KEPT]:
                del self.fed[old]

    def rows(self, progress: list[dict[str, Any]]) -> list[tuple[int, bytes]]:
        """Error rows for the late elements of the micro-batches in ``progress`` not yet read."""
        out: list[tuple[int, bytes]] = []
        for p in progress:
            bid = p["batchId"]
            if bid <= self.checked:
                continue
            self.checked = bid
            wm = watermark_us(p.get("eventTime", {}).get("watermark"))
            if wm is not None:
                self.watermarks[bid] = wm
            for old in [k for k in self.watermarks if k < bid - 1]:  # a query runs for months
                del self.watermarks[old]
            dropped = sum(op.get("numRowsDroppedByWatermark", 0)
                          for op in p.get("stateOperators", []))
            if dropped:
                out.extend(self._late(bid, p, dropped))
        return out

    def _late(self, bid: int, p: dict[str, Any], dropped: int) -> list[tuple[int, bytes]]:
        elements = self.fed.get(self._file_of(p), None) if self.specs is not None else None
        # Late rows are filtered by the previous batch's watermark (the one
        # windows were emitted under); older Spark versions used the batch's own.
        # Spark's watermark before the first micro-batch is the epoch.
        before = self.watermarks.get(bid - 1, 0 if bid == 0 else None)
        thresholds = [before, self.watermarks.get(bid)]
        if elements is not None:
            values = self._arriving(elements)
            for threshold in thresholds:
                if threshold is None:
                    continue
                # Spark counts the rows it drops after its partial aggregation:
                # one per window and key whose window ended by the watermark
                # (a session: it is not merged yet, one per element).
                rows = {(row, start) for _, _, row, windows in values
                        for start, end in windows if end <= threshold}
                if len(rows) != dropped:
                    continue
                return [self._error(x, t, next(w for w in windows if w[1] <= threshold),
                                    threshold)
                        for x, t, _, windows in values if any(e <= threshold for _, e in windows)]
        why = ("they came from a Spark source, never through the driver"
               if not self.driver_fed else
               "the steps before the window keep state, so the driver cannot find them again"
               if self.specs is None else "the driver could not match them to its elements")
        what = f"<{dropped} late row(s) of Spark micro-batch {bid}>"
        if before is not None and before <= 0:
            where = f"in windows ending {_BY_EPOCH} (in-process on time)"
        else:
            where = (f"in windows already emitted (behind the watermark of the micro-batch "
                     f"before, {before / 1_000_000 if before is not None else '?'} s)")
        return [(ERROR, carried_error(self.spec.id, what, LateElementError(
            f"Spark dropped {dropped} row(s) of elements {where}; {why}; "
            f"{_advice(before)}")))]

    @staticmethod
    def _file_of(p: dict[str, Any]) -> int:
        sources = p.get("sources") or [{}]
        end = sources[0].get("endOffset")
        try:
            offset = json.loads(end) if isinstance(end, str) else end
            return int(offset["logOffset"])
        except (TypeError, ValueError, KeyError):
            return -1

    def _arriving(self, elements: list[Any]) -> list[tuple[Any, float, Any, list[tuple[int, int]]]]:
        """What reaches the window: each element, its event time, the Spark row it
        travels in and that row's windows (``(start, end)`` in microseconds)."""
        assert self.specs is not None
        events = Stage(chain_plan(self.specs)).run(elements).events
        out: list[tuple[Any, float, Any, list[tuple[int, int]]]] = []
        for i, x in enumerate(events):
            if isinstance(x, Failure):
                continue  # an error before the window failed the batch already
            try:
                t = seconds_of(self.time(x))  # as the rows are stamped (naive: local time)
                key = None if self.key is None else self.key(x)
            except Exception:
                continue
            us = event_micros(t)  # as Spark stamps it (see timestamp_of())
            if self.session:  # a session: each element is a row of its own
                out.append((x, t, i, [(us, us + self.size)]))
                continue
            last = us // self.slide
            first = (us - self.size) // self.slide + 1
            windows = [(j * self.slide, j * self.slide + self.size)
                       for j in range(first, last + 1)]
            out.append((x, t, repr(key), windows))
        return out

    def _error(self, x: Any, t: float, window: tuple[int, int], threshold: int
               ) -> tuple[int, bytes]:
        start, end = window[0] / 1_000_000, window[1] / 1_000_000
        what = "its session" if self.session else "window"
        if threshold <= 0:
            error = LateElementError(
                f"event time {t!r} falls in {what} [{start!r}, {end!r}), which Spark drops: "
                f"it ends {_BY_EPOCH} (in-process it is on time). {_EPOCH_ADVICE}")
        else:
            error = LateElementError(
                f"event time {t!r} falls in {what} [{start!r}, {end!r}), already "
                f"emitted: Spark's watermark is {threshold / 1_000_000!r} (largest time of "
                f"the micro-batches before - lateness {self.lateness!r}); "
                f"{_ADVICE.replace('them', 'it')}")
        return ERROR, carried_error(self.spec.id, x, error)
