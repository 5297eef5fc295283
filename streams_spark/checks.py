"""Where a step lowered to Spark columns fails: one ``raise_error`` naming the element.

A traced function (:mod:`streams_spark.column_values`) records ``(condition,
error)`` guards where Python would raise. :func:`checked` turns a step's
guards into one expression that fails the query with Python's message,
naming the step and the element (:func:`element_repr`), as in-process.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from .column_values import functions
from .pushdown import narrowed
from .row_values import RowValue, quoted, reads_of
from .sql_text import Sql

__all__ = ["Check", "ElementText", "after", "checked", "checked_in_order", "checking",
           "element_repr", "harmless", "kept_rows"]


class Check(Sql):
    """A condition that may fail the query, with where it keeps a row or fails.

    ``prefilter`` never fails and holds on every row the condition keeps or
    fails on (``TRUE``: every row); None where that is not known. Tested
    before the check (:func:`kept_rows`), it spares the check the rows it
    would drop: a check reads every column its message
    names on each row it sees (Spark's generated code reads a filter's
    columns before testing it), where the prefilter reads only those its
    tests read. Meaningful where the checked value is a filter's condition.
    """

    __slots__ = ("prefilter",)

    def __init__(self, text: str, prefilter: Any | None) -> None:
        super().__init__(text)
        self.prefilter = prefilter


def checked(guards: list[tuple[Any, Any]], label: str, row: Callable[[], Any], then: Any
            ) -> Any:
    """``then``, or the query fails with the first of ``guards`` that holds.

    ``row()`` gives the failing element's text for the message. One
    ``raise_error`` names the element for all the guards (the first that
    holds picks the error): each copy of the element's text adds code to
    every row's loop that Spark generates, though it runs only on a failure,
    and a long loop runs slower (the JVM compiles large methods less well).

    Examples
    --------
    >>> from streams_spark.sql_text import Sql
    >>> print(checked([(Sql("a"), "E1"), (Sql("b"), "E2")], "map", lambda: Sql("r"),
    ...               Sql("x")))  # doctest: +NORMALIZE_WHITESPACE
    CASE WHEN (a OR b) THEN raise_error(concat('map failed on element ', r,
    CASE WHEN a THEN ': E1' ELSE ': E2' END)) ELSE x END
    """
    return checked_in_order([(label, guards)], row, then)


def checked_in_order(steps: list[tuple[str, list[tuple[Any, Any]]]], row: Callable[[], Any],
                     then: Any) -> Any:
    """``then``, or the query fails with the first guard that holds, of the first step.

    ``steps`` are ``(label, guards)`` of the steps that check one element in
    turn: as :func:`checked` of each, nested, but with one ``raise_error``
    and one copy of the element's text (each copy costs Spark's analyser
    and optimiser on every query, and code in every row's loop).

    Examples
    --------
    >>> from streams_spark.sql_text import Sql
    >>> print(checked_in_order([("w", [(Sql("a"), "E1")]), ("map", [(Sql("b"), "E2")])],
    ...                        lambda: Sql("r"), Sql("x")))  # doctest: +NORMALIZE_WHITESPACE
    CASE WHEN (a OR b) THEN raise_error(concat(CASE WHEN a THEN 'w failed on element '
    ELSE 'map failed on element ' END, r, CASE WHEN a THEN ': E1' ELSE ': E2' END))
    ELSE x END
    """
    F = functions()
    unique: dict[tuple[str, str], tuple[str, Any, Any]] = {}
    for label, guards in steps:  # every path meets the failures before its first branch
        for condition, error in guards:
            # A condition met again later is never the first to hold.
            unique.setdefault((str(condition), str(error)), (label, condition, error))
    if not unique:
        return then
    cases = list(unique.values())
    # A constant error is one literal with its separator: Spark parses,
    # analyses, optimises and prints each node of the filter on every query.
    failing = cases[0][1]
    for _, condition, _ in cases[1:]:
        failing = failing | condition
    head = {f"{label} failed on element " for label, _, _ in cases}
    tail = {": " + e if isinstance(e, str) else None for _, _, e in cases}
    if isinstance(row, ElementText) and len(head) == len(tail) == 1 and None not in tail:
        # One message for every guard: one format_string of it all where the
        # element's text is one, a concat of three parts less to analyse and compile.
        message = row.around(head.pop(), str(tail.pop()))
    else:
        errors = [F.lit(": " + e) if isinstance(e, str) else F.concat(F.lit(": "), e)
                  for _, _, e in cases]
        heads = [F.lit(f"{label} failed on element ") for label, _, _ in cases]
        message = F.concat(_first(cases, heads), row(), _first(cases, errors))
    checking_text = F.when(failing, F.raise_error(message)).otherwise(then)
    prefilter = F.lit(True) if _always(then) else F.when(failing, F.lit(True)).otherwise(then)
    return Check(str(checking_text), prefilter)


def after(keep: Any, check: Any) -> Sql:
    """``check`` on the rows ``keep`` keeps (false on the others), as Python runs a later step.

    Its prefilter is known only where ``keep`` cannot fail: a prefilter is
    ``TRUE`` where its check fails, and a ``TRUE`` condition here would go
    on to ``check``'s prefilter, which may drop the row ``keep`` fails on.

    Examples
    --------
    >>> c = checked([(Sql("a IS NULL"), "E")], "f", lambda: Sql("r"), Sql("a > 1"))
    >>> print(after(Sql("k = 2"), c).prefilter)  # doctest: +NORMALIZE_WHITESPACE
    CASE WHEN k = 2 THEN CASE WHEN a IS NULL THEN TRUE ELSE a > 1 END ELSE FALSE END
    >>> print(after(c, Sql("b = 3")).prefilter)
    None
    """
    F = functions()
    then = _prefilter(check)
    prefilter = (F.when(keep, then).otherwise(False) if then is not None and _never_fails(keep)
                 else None)
    # Where ``keep`` may fail, its CASE must not have equal branches: Spark
    # folds ``CASE WHEN keep THEN FALSE ELSE FALSE END`` (a later step that
    # keeps no row) to FALSE, and ``keep``'s check with it. A FALSE Spark cannot
    # see through (a partition test that never holds) keeps the branches apart.
    otherwise = False if _never_fails(keep) else Sql(_NEVER)
    return Check(str(F.when(keep, check).otherwise(otherwise)), prefilter)


def _prefilter(condition: Any) -> Any | None:
    """Where ``condition`` keeps a row or fails, never failing; None where not known."""
    if isinstance(condition, Check):
        return condition.prefilter
    return condition if _never_fails(condition) else None


def _never_fails(condition: Any) -> bool:
    return "raise_error(" not in str(condition)


def _always(condition: Any) -> bool:
    return str(condition).upper() == "TRUE"


#: What :func:`harmless` takes out of a condition's text before reading its
#: words: quoted names, a column read at 64 bits (only an integer column is
#: read as a long, :mod:`~streams_spark.row_values`), string literals, and
#: the constants :func:`~streams_spark.sql_text.lit` writes as a negation or a cast.
_QUOTED = r"`(?:[^`]|``)+`"  # a column named in SQL text (``quoted()``'s form)
_COLUMN = re.compile(_QUOTED)
_CONSTANTS = re.compile(rf"CAST\({_QUOTED} AS (?:BIGINT|DOUBLE)\)|{_QUOTED}"
                        r"|CAST\('[^']*' AS (?:BIGINT|DOUBLE)\)"
                        r"|CAST\(X'[0-9A-F]*' AS STRING\)|X?'[^']*'|\(-[0-9.e+-]+D\)"
                        r"|\b[0-9][0-9.]*(?:e[-+]?[0-9]+)?[LD]\b")
_TOKEN = re.compile(r"\w+|<=>|<=|>=|\S")
#: Words and symbols no evaluation of which fails, on any row: tests, CASE,
#: null tests, a long's cast to double, and ``pmod``, whose divisor
#: :mod:`~streams_spark.column_values` makes a positive constant.
_HARMLESS = frozenset({
    "CASE", "WHEN", "THEN", "ELSE", "END", "IS", "NOT", "NULL", "AND", "OR", "TRUE", "FALSE",
    "AS", "DOUBLE", "CAST", "pmod", "isnan", "coalesce", "length", "try_add", "try_subtract",
    "try_multiply",
    "(", ")", ",", "=", "<=>", "<", "<=", ">", ">=", "@"})


def harmless(condition: Any) -> bool:
    """Whether ``condition`` can fail on no row: Spark may evaluate it anywhere, in any order.

    Under ANSI mode an integer's ``+ - *`` and negation fail on an overflow,
    a division on zero, a cast to an integer on a value out of range; a
    check fails by design. A condition of none of these, as the text
    :mod:`~streams_spark.sql_text` writes (any other word counts as one that
    may fail), may be merged with the filters around it.

    Examples
    --------
    >>> harmless("CASE WHEN (`a b` IS NULL) THEN TRUE ELSE (pmod(`a b`, 123L) <=> 0L) END")
    True
    >>> harmless("((`x` + 1L) > 5L)"), harmless("(`x` > (-1.5e-05D))")
    (False, True)
    >>> harmless("(CAST(`k` AS BIGINT) <=> 1L)"), harmless("(CAST((`x` * 2.0D) AS BIGINT) = 1L)")
    (True, False)
    >>> harmless("CASE WHEN `x` THEN raise_error('no') ELSE TRUE END")
    False
    """
    words = _TOKEN.findall(_CONSTANTS.sub("@", str(condition)))
    return all(w in _HARMLESS for w in words)


def checking(df: Any, condition: Any) -> Any:
    """``df.where(condition)`` for a condition that checks, as a filter Spark keeps apart.

    Spark takes a filter to be free of failures: it merges a filter above
    into one below (a user's ``where(kind = 2)`` on the output, pushed down
    to the scan), puts ``kind``'s constant into the other's tests, and may
    evaluate them in any order. A check rewritten so, ``CASE WHEN auction IS
    NULL THEN raise_error(...)``, then failed on a person's row, which Python
    never tests. Spark merges a filter into another only if the one below is
    deterministic: this one is made not to be, by a test that never holds
    (``spark_partition_id() < 0``), at the cost of one comparison a row. A
    condition that can fail on no row (:func:`harmless`: ``kind <=> 2``)
    stays a plain filter, which Spark may merge and push down: kept apart,
    Nexmark q7's ran at 0.90x the rate (31 paired rounds). One without a
    check that may still fail (an overflow of ``auction * 2`` under ANSI
    mode, which Python never meets) is kept apart as a check is.
    """
    text = str(condition)
    if harmless(text):
        return df.where(text)
    return df.where(_kept_apart(text))


#: A condition that never holds, which Spark cannot tell (it is not deterministic).
_NEVER = "spark_partition_id() < 0"


def _kept_apart(text: str, guard: str | None = None) -> str:
    """A filter's condition Spark merges with no other (see :func:`checking`).

    A condition that is one ``CASE`` gets the partition test as its first
    branch, not around it: the same rows, one ``CASE`` less for Spark to
    analyse and optimise on every query. ``guard``: only the rows where it
    holds (not NULL) reach ``text`` (:func:`kept_rows`).

    Examples
    --------
    >>> print(_kept_apart("CASE WHEN a THEN raise_error('x') ELSE b END"))
    CASE WHEN spark_partition_id() < 0 THEN false WHEN a THEN raise_error('x') ELSE b END
    >>> print(_kept_apart("CASE WHEN a THEN b END AND c"))
    CASE WHEN spark_partition_id() < 0 THEN false ELSE CASE WHEN a THEN b END AND c END
    >>> print(_kept_apart("CASE WHEN a THEN raise_error('x') ELSE b END", "k = 2"))
    ... # doctest: +NORMALIZE_WHITESPACE
    CASE WHEN spark_partition_id() < 0 THEN false WHEN NOT coalesce(k = 2, false) THEN false
    WHEN a THEN raise_error('x') ELSE b END
    """
    first = f"CASE WHEN {_NEVER} THEN false "
    if guard is not None:
        first += f"WHEN NOT coalesce({guard}, false) THEN false "
    if _one_case(text):
        return first + text[len("CASE "):]
    return f"{first}ELSE {text} END"


#: A name or string constant in SQL text (its words are not the text's own).
_QUOTED_TEXT = re.compile(rf"{_QUOTED}|'[^']*'")


def _one_case(text: str) -> bool:
    """Whether ``text`` is one searched ``CASE``: its first word's ``END`` is its last word."""
    if not text.startswith("CASE WHEN ") or not text.endswith(" END"):
        return False
    words = re.findall(r"\w+", _QUOTED_TEXT.sub("@", text))
    depth = 0
    for i, word in enumerate(words):
        if word == "CASE":
            depth += 1
        elif word == "END":
            depth -= 1
            if depth == 0:
                return i == len(words) - 1
    return False


#: The column types whose values Java prints as JSON writes them (their ``typeName()``).
_PRINTED_AS_JSON = frozenset({"boolean", "byte", "short", "integer", "long"})


def kept_rows(df: Any, keep: Any | None, narrowing: Sequence[str], row: ElementText,
              prefiltered: bool = False) -> Any:
    """The rows of ``df`` where the tests ``narrowing`` and then the checking ``keep`` hold.

    ``row`` puts the failing element's text into ``keep``'s messages;
    ``prefiltered``: with ``keep``'s prefilter between the two.

    The tests (:mod:`streams_spark.pushdown`) lead one filter, which Spark
    pushes into the source; the check follows as a ``CASE`` that tests them
    again before its own branches (:func:`_kept_apart`). Spark SQL
    documents no order of evaluation among an AND's operands, nor
    short-circuiting, and a check evaluated first would fail on a row the
    tests rule out; a ``CASE`` evaluates its branches in order, so the
    check sees only the tests' rows whatever order Spark takes. The filter
    is not deterministic: Spark merges no other filter into it and puts no
    test's constant into its ``CASE`` (``ConstantPropagation`` leaves such
    a condition as it is; a test pins it). One filter, not the tests' own
    below the check's: one DataFrame less to build and to plan, one
    operator less per row (Nexmark q1 over 1,000,000 events, both in one
    process, 61 and 101 paired rounds: 1.026x and 1.040x PySpark's rate
    against 0.987x and 1.019x with two filters; 2026-12-04).

    The prefilter (:class:`Check`), where it drops rows and reads fewer
    columns than the checks, goes between them: the checks then read the
    columns their messages name only on the rows they keep or fail on. It
    pays where the checks are much of the work, a filter's over a table:
    Nexmark's q2 (a bid's auction a multiple of 123; the price read for the
    message) over 5,000,000 events ran at 1.27x the rate of the same plan
    without it. Before a window's grouping or join the shuffle is most of
    the work: q8's sides (80,000 persons and auctions, each side keeping one
    kind) 1.05x and 0.98x (11 and 31 paired rounds; 2026-11-30).

    A prefilter that can fail on no row (:func:`harmless`: q2's ``CASE WHEN
    auction IS NULL THEN TRUE ELSE pmod(auction, 123) <=> 0 END``) joins the
    tests, though not the check's guard: where it does not hold the check
    neither keeps the row nor fails. One that may fail (an overflow of
    ``auction * 2``) is a filter kept apart below the check's. Over
    1,000,000 events q2 ran at 0.93x PySpark's rate with it kept apart,
    1.01x merged, 1.10x merged and its kind tested as ``kind = 2``
    (:attr:`~streams_spark.column_values.Value.where_true`; 32 paired rounds,
    2026-12-02): one DataFrame less to build, one filter less to plan, and
    no partition test on each row.
    """
    if keep is None:
        return narrowed(df, narrowing)
    text = row.resolve(keep)
    if harmless(text):  # no check, no overflow: Spark may test it anywhere
        return narrowed(df, [*narrowing, text])
    tests = list(narrowing)
    guard = " AND ".join(f"({t})" for t in tests) if tests else None
    prefilter = _prefilter(keep) if prefiltered else None
    if prefilter is not None and not _always(prefilter):
        pre = row.resolve(prefilter)
        if set(_COLUMN.findall(text)) - set(_COLUMN.findall(pre)):
            if not harmless(pre):
                return checking(narrowed(df, tests).where(_kept_apart(pre)), text)
            tests.append(pre)
    if not tests:
        return checking(df, text)
    return df.where(" AND ".join([*tests, _kept_apart(text, guard)]))


def _first(cases: list[tuple[str, Any, Any]], values: list[Any]) -> Any:
    """The value of the first case whose condition holds (the last one's otherwise)."""
    runs: list[tuple[Any, Any]] = []  # (condition, value): a value's cases in a row, as one
    for (_, condition, _), v in zip(cases, values, strict=True):
        if runs and str(runs[-1][1]) == str(v):
            runs[-1] = (runs[-1][0] | condition, v)
        else:
            runs.append((condition, v))
    if len(runs) == 1:
        return runs[0][1]
    # A CASE is false on NULL, as OR is.
    chosen = functions().when(*runs[0])
    for condition, v in runs[1:-1]:
        chosen = chosen.when(condition, v)
    return chosen.otherwise(runs[-1][1])


def element_repr(fields: list[Any], head: str = "", tail: str = "") -> Any:
    """The element a row stands for, as JSON (nulls included), for an error message.

    ``head`` and ``tail``: text before and after it, for the whole message.

    Spark analyses, optimises and generates code for the message on every
    query, though it is evaluated only when the query fails. A row of
    integers and booleans, which Java prints as JSON does (``null`` too), is
    one ``format_string``; any other row one ``to_json``. Nexmark q1's plan
    (five longs) with ``to_json`` took 1.075x the time of the same with
    ``format_string``: built in 36 against 32 ms, run in 280 against 256 ms
    (52 paired rounds, 2026-12-02). A repr built of an expression per field (quotes,
    ``None``, ``True``) made the code Spark generates for the whole filter
    about 20% slower.

    Examples
    --------
    >>> from pyspark.sql.types import LongType, StringType, StructField
    >>> print(element_repr([StructField("a", LongType()), StructField("b%", LongType())]))
    format_string('{"a":%s,"b%%":%s}', `a`, `b%`)
    >>> print(element_repr([StructField("s", StringType())]))
    to_json(struct(`s`), map('ignoreNullFields', 'false'))
    >>> print(element_repr([StructField("a", LongType())], "f failed on ", ": 5% off"))
    format_string('f failed on {"a":%s}: 5%% off', `a`)
    """
    F = functions()
    columns = [F.col(quoted(f.name)) for f in fields]
    if all(f.dataType.typeName() in _PRINTED_AS_JSON for f in fields):
        names = (json.dumps(f.name, ensure_ascii=False).replace("%", "%%") for f in fields)
        text = "{" + ",".join(f"{n}:%s" for n in names) + "}"
        return F.format_string(head.replace("%", "%%") + text + tail.replace("%", "%%"),
                               *columns)
    shown = F.to_json(F.struct(*columns),
                      F.create_map(F.lit("ignoreNullFields"), F.lit("false")))
    return F.concat(F.lit(head), shown, F.lit(tail)) if head or tail else shown


class ElementText:
    """The failing element's text in the checks of a lowered segment: the fields its functions read.

    The text is one column of every check's message, so Spark reads each
    column it names on every row the check sees, before the row's filter:
    naming the whole row read every column of a wide table where the
    functions read two. It names the fields read by any function traced over
    the element, which is only known once all are: until then a check holds
    a placeholder (``text()``), and :meth:`resolve` puts the text in each
    expression as it goes to Spark. A one-column input is named by its column.

    Examples
    --------
    >>> from pyspark.sql.types import LongType, StructField
    >>> fields = [StructField(name, LongType()) for name in "abc"]
    >>> row = RowValue(fields)
    >>> text = ElementText(row, fields)
    >>> expr = f"concat('failed on ', {text()})"
    >>> _ = row.c, row.a  # a function reads c, then a
    >>> print(text.resolve(expr))
    concat('failed on ', format_string('{"a":%s,"c":%s}', `a`, `c`))
    """

    def __init__(self, element: Any, fields: list[Any]) -> None:
        self._element = element  # a RowValue, or a one-column input's value
        self._fields = fields  # the input's
        self._placeholder = f"__element_{uuid.uuid4().hex}__"
        #: The placeholders of whole messages (:meth:`around`): their head and tail.
        self._messages: dict[str, tuple[str, str]] = {}

    def __call__(self) -> Any:
        """The text's placeholder, for a check's message."""
        return functions().Sql(self._placeholder)

    def around(self, head: str, tail: str) -> Any:
        """The placeholder of a whole message: ``head``, the element's text, ``tail``."""
        placeholder = f"{self._placeholder}{len(self._messages)}__"
        self._messages[placeholder] = (head, tail)
        return functions().Sql(placeholder)

    def resolve(self, sql: Any) -> str:
        """``sql`` (an expression's text) with the element's text in place of the placeholders.

        >>> from pyspark.sql.types import LongType, StructField
        >>> text = ElementText(RowValue([StructField("a", LongType())]),
        ...                    [StructField("a", LongType())])
        >>> print(text.resolve(f"raise_error({text.around('f failed on ', ': E')})"))
        raise_error(format_string('f failed on {"a":%s}: E', `a`))
        """
        text = str(sql)
        if self._placeholder not in text:
            return text
        read = sorted(reads_of(self._element)) if isinstance(self._element, RowValue) else []
        fields = [self._fields[i] for i in read] or self._fields
        for placeholder, (head, tail) in self._messages.items():
            if placeholder in text:
                text = text.replace(placeholder, str(element_repr(fields, head, tail)))
        if self._placeholder in text:
            text = text.replace(self._placeholder, str(element_repr(fields)))
        return text
