"""Draw the pictures of docs/ from real pipelines: ``python docs/make_pictures.py``.

The README's graph picture is ``visualize()``'s own output, so it shows
exactly what a user sees in Jupyter.
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


def main() -> None:
    source = readings_pipeline()
    for ext in ("svg", "png"):
        source.visualize(str(HERE / f"pipeline.{ext}"), rankdir="LR")


if __name__ == "__main__":
    main()
