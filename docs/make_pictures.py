"""Draw the pictures of docs/ from real pipelines: ``python docs/make_pictures.py``.

The README's graph pictures are ``visualize()``'s own output, so they show
exactly what a user sees in Jupyter: ``pipeline`` (in-process) and
``backends`` (segments on Dask and Spark, boxed and tinted).
"""

from __future__ import annotations

from pathlib import Path

from streams import Stream

HERE = Path(__file__).resolve().parent


def parse(text: str) -> float:
    return float(text)


def mean(window: tuple[float, ...]) -> float:
    return sum(window) / len(window)


def too_hot(t: float) -> bool:
    return t > 30


def readings_pipeline() -> Stream[str]:
    """The quickstart's pipeline: parse, a moving average, an alarm branch."""
    readings: Stream[str] = Stream(stream_name="readings")
    temps = readings.map(parse)
    temps.sliding_window(3).map(mean).sink_to_list()
    temps.filter(too_hot).sink(print, stream_name="alarm")
    return readings


def backends_pipeline() -> Stream[str]:
    """One source feeding a Dask segment and a Spark segment (no cluster is started)."""
    import streams_dask  # noqa: F401 - registers scatter()
    import streams_spark  # noqa: F401 - registers to_spark()

    events: Stream[str] = Stream(stream_name="events")
    events.scatter().map(len).filter(bool).gather().sink_to_list()  # type: ignore[attr-defined]
    events.map(str).to_spark().map(str.upper).gather().sink(print)  # type: ignore[attr-defined]
    return events


def main() -> None:
    for name, source in [("pipeline", readings_pipeline()), ("backends", backends_pipeline())]:
        for ext in ("svg", "png"):
            source.visualize(str(HERE / f"{name}.{ext}"), rankdir="LR")


if __name__ == "__main__":
    main()
