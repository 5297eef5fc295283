"""A projection's texts cross to the JVM in one call, and mean what selectExpr() makes of them."""

from __future__ import annotations

from typing import Any

import py4j.clientserver
import pytest

from streams_spark.round_trips import SEPARATOR, select_expr

pytestmark = pytest.mark.spark

TEXTS = ["*", "n * 2 AS twice", "concat(s, 'é€') AS s2", "'' AS empty", "`n` AS `a b`"]


@pytest.fixture
def df(spark: Any) -> Any:
    return spark.createDataFrame([(1, "a"), (2, None)], "n long, s string")


def _round_trips(monkeypatch: pytest.MonkeyPatch, call: Any) -> tuple[Any, int]:
    sent = []
    send = py4j.clientserver.ClientServerConnection.send_command

    def counting(self: Any, command: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(command)
        return send(self, command, *args, **kwargs)

    monkeypatch.setattr(py4j.clientserver.ClientServerConnection, "send_command", counting)
    out = call()
    monkeypatch.undo()
    return out, len(sent)


def test_select_expr_gives_what_selectexpr_gives_in_two_round_trips(
        df: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    select_expr(df, ["n"])  # the splitter is made once per SparkContext
    ours, trips = _round_trips(monkeypatch, lambda: select_expr(df, TEXTS))
    theirs, their_trips = _round_trips(monkeypatch, lambda: df.selectExpr(*TEXTS))
    assert ours.schema == theirs.schema
    assert ours.collect() == theirs.collect()
    assert trips == 2
    assert their_trips > len(TEXTS) + 2  # a list built element by element


def test_a_text_holding_the_separator_takes_pysparks_own_path(df: Any) -> None:
    text = f"concat(s, '{SEPARATOR}') AS s"
    out = select_expr(df, ["n", text])
    assert out.columns == ["n", "s"]
    assert [r.s for r in out.collect()] == ["a" + SEPARATOR, None]


def test_a_bad_text_fails_as_selectexpr_does(df: Any) -> None:
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException, match="missing"):
        select_expr(df, ["n", "missing + 1"])
