"""The Spark segment: which nodes run on Spark, and which shapes are refused.

A segment after ``to_spark()`` (fed by the driver) is one linear chain. A
segment after ``Stream.from_spark(df)`` (Spark-resident) may be a tree: a
node may feed several branches, each ending in its own ``to_dataframe()``
(or one ``gather()``); and ``union`` may join the segments of several
``from_spark()`` inputs. Each output is its own Spark plan, from its source
DataFrame(s) to it: a shared prefix is computed once per output. That is
exact only for a prefix of stateless steps (a map computed twice gives the
same values), so a stateful step feeding two outputs is refused when the
graph is built, as is a stateful step after a union (Spark defines no
order in which a union's inputs interleave). Each input of a union is its
own chain, so a stateful step before the union keeps its state once.

An interval ``join`` of two ``from_spark()`` inputs (or two branches of
one) is Spark's stream-stream join (:mod:`streams_spark.join`): each side
one chain of steps without state, steps without state after it, one join
per path, and no ``gather()`` after it (Spark gives its pairs in no order).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from streams.core import Segment, Stream
from streams.graph import NodeSpec
from streams.window_clock import WindowClock

from .plan import Plan, check_pickles, lower, refusal
from .routing import WINDOW_REACH
from .segment_shapes import check_join_paths, check_one_state_stage, is_join, state_kind

if TYPE_CHECKING:
    from .nodes import ToSpark

__all__ = ["SparkSegment", "outside_resident", "state_kind"]


class SparkSegment(Segment):
    """The nodes between a ``to_spark()`` or ``from_spark()`` and its outputs.

    Admission refuses, when the graph is built, any node that cannot run on
    Spark with its in-process result: an unsupported operator, a function
    that cannot be pickled, a branch of a driver-fed segment, a stateful
    step shared by two outputs or after a union.

    Examples
    --------
    >>> import streams_spark
    >>> from streams import Stream
    >>> s = Stream().to_spark()
    >>> try:
    ...     s.zip(Stream())
    ... except (TypeError, ValueError) as e:
    ...     print(e)
    zip() cannot run in a Spark segment: zip (it pairs the elements of its inputs in
    arrival order, which Spark does not define); call gather() before zip() to run it
    in-process
    """

    backend = "spark"

    def __init__(self, entry: ToSpark) -> None:
        self.entry = entry
        #: The nodes that start the segment: several after a union of Spark sources.
        self.entries: list[Stream[Any]] = [entry]
        self.nodes: list[Stream[Any]] = []
        self.exits: list[Stream[Any]] = []
        #: The nodes a ``to_dataframe()`` output was taken from.
        self.outputs: list[Stream[Any]] = []
        self.started = False

    @property
    def resident(self) -> bool:
        """Whether the segment reads Spark DataFrames (``from_spark()``)."""
        return all(hasattr(e, "df") for e in self.entries)

    def admit(self, node: Stream[Any]) -> None:
        """Accept ``node`` or raise a build-time error naming it."""
        if self.started:
            raise RuntimeError(
                f"{node._label()}: the Spark segment from {self.entry._label()} is "
                "already running; build the whole graph before emitting"
            )
        traits = node._traits()
        # A progress() in a Spark segment passes elements on there; its bar
        # counts the rows the segment takes in and its micro-batches: what
        # Spark's listener reports for from_spark (streams_spark.listener),
        # what the driver ships for to_spark (ToSpark._deliver).
        counted = node._operator == "progress"
        if traits.local_only is not None and not counted:
            # Refused before describe(): a node is offered while its
            # constructor runs, and only what its traits read is set yet.
            op = node._operator
            raise TypeError(
                f"{op}() cannot run in a Spark segment: {node._label()} "
                f"({traits.local_only}); call gather() before {op}() to run it in-process")
        spec = node.describe()
        why = None if counted else refusal(spec)
        if why is not None:
            raise TypeError(why)
        event_time = spec.traits.event_time
        if event_time is not None and not self.resident \
                and event_time.size + event_time.lateness > WINDOW_REACH:
            # The end-of-stream row's watermark would not pass such a window's
            # end: Spark would never emit it.
            raise ValueError(
                f"{node._label()}: a window this long (its "
                f"{'gap' if event_time.session else 'size'} plus lateness, "
                f"{event_time.size + event_time.lateness:g} s, over {WINDOW_REACH:.3g} s) "
                "cannot close on Spark; call gather() before it to run it in-process")
        if spec.traits.join is not None and not self.resident:
            raise TypeError(
                f"join() cannot run in a Spark segment: {node._label()} (a to_spark() "
                "segment is one linear chain fed by the driver; Spark joins only "
                "Stream.from_spark() inputs ending in to_dataframe()); call gather() "
                "before join() to run it in-process")
        outside = [u for u in node.upstreams if u._segment is not self]
        if outside:
            raise ValueError(
                f"{node._label()}: {outside[0]._label()} runs in-process, its other "
                "inputs on Spark; gather() the Spark side first and combine in-process")
        if len(node.upstreams) > 1 and not self.resident:
            raise ValueError(
                f"{node._label()}: a to_spark() segment is one linear chain; gather() "
                "its inputs and combine them in-process")
        for upstream in set(node.upstreams):
            if self.consumers(upstream):
                self._branch_at(node, upstream)
        check_pickles(spec)
        lineage = self.lineage(node)
        check_join_paths(self, node, lineage)
        self._check_union_paths(node, lineage)
        check_one_state_stage([n.describe() for n in lineage[:-1]], spec)
        if WindowClock.wants(node) and self.resident:
            raise ValueError(
                f"{node._label()}: closes its windows on the clock (processing time), "
                "which Spark ticks only for a to_spark() segment fed from Python; in a "
                "Stream.from_spark() segment give it time= (event time: Spark's window()), "
                "or gather() before it to window in-process")
        if WindowClock.wants(node):
            # Its windows close on Spark, at ticks from to_spark(): the local
            # node must never fire its own timer (it would push empty windows
            # to gather()). A closed node's timer does nothing.
            node._closed = True
            self.entry._add_window(node)
        self.nodes.append(node)

    def consumers(self, node: Stream[Any]) -> int:
        """How many segment steps, ``gather()`` and ``to_dataframe()`` read ``node``."""
        steps = sum(d._segment is self and d in self.nodes for d in node.downstreams)
        exits = sum(e.upstream is node for e in self.exits)
        return steps + exits + self.outputs.count(node)

    def _branch_at(self, new: Any, point: Stream[Any]) -> None:
        """Refuse a second reader of ``point`` (``new``) unless the segment can branch there."""
        what = new._label() if isinstance(new, Stream) else new
        if not self.resident:
            raise ValueError(
                f"{what}: {point._label()} already feeds a step of its Spark segment; a "
                "to_spark() segment is one linear chain, so gather() first and branch "
                "in-process, or start a second to_spark()")
        for n in self.lineage(point):
            if state_kind(n.describe()) is not None:
                raise ValueError(
                    f"{what}: a second output below {n._label()}, which keeps state; each "
                    "output of a Spark segment is its own Spark plan, so that state would "
                    "be kept twice. Branch before it, or write its output "
                    "(to_dataframe()) and read that back with Stream.from_spark() for "
                    "each branch, or gather() and branch in-process")

    def add_output(self, node: Stream[Any]) -> None:
        """Register a ``to_dataframe()`` output taken from ``node``."""
        if self.consumers(node):
            self._branch_at("to_dataframe()", node)
        self.outputs.append(node)

    def add_exit(self, gather: Stream[Any]) -> None:
        """Register the ``gather()`` node (one per segment)."""
        if self.exits:
            raise ValueError(
                f"{gather._label()}: this Spark segment already ends at "
                f"{self.exits[0]._label()}; gather() once and branch in-process"
            )
        up = gather.upstream
        join = next((n for n in self.lineage(up) if is_join(n)), None) if up is not None else None
        if join is not None:
            raise ValueError(
                f"{gather._label()}: gather() cannot follow {join._label()} on Spark: it "
                "delivers results in input order, and Spark's stream-stream join gives its "
                "pairs in no order. End the segment with to_dataframe(schema) and write "
                "that, or gather() each side and join in-process")
        if len(self.entries) > 1:
            raise ValueError(
                f"{gather._label()}: gather() cannot end a Spark segment with several "
                "from_spark() inputs; end it with to_dataframe(schema)")
        if up is not None and not self.resident and up is not self.entry \
                and up is not self._tail():
            raise ValueError(
                f"{gather._label()}: gather() must follow the last step of the Spark "
                f"segment ({self._tail()._label()}), not {up._label()}"
            )
        if up is not None and self.consumers(up):
            self._branch_at(gather._label(), up)
        self.exits.append(gather)

    def merge(self, others: list[Segment], node: Stream[Any]) -> Segment | None:
        """Join the segments of several ``from_spark()`` inputs (a union or join of them)."""
        if not all(isinstance(o, SparkSegment) for o in others):
            return None
        spark = [o for o in others if isinstance(o, SparkSegment)]
        if not all(s.resident for s in [self, *spark]):
            raise ValueError(
                f"{node._label()}: only the segments of Stream.from_spark() inputs join "
                "on Spark; gather() each to_spark() segment and combine in-process")
        for o in spark:
            if o.started or o.exits or self.exits:
                raise ValueError(
                    f"{node._label()}: joins a Spark segment that already ends at "
                    "gather() or runs; combine the from_spark() inputs before gather()")
            self.entries.extend(o.entries)
            self.nodes.extend(o.nodes)
            self.outputs.extend(o.outputs)
            for n in [*o.entries, *o.nodes]:
                n._segment = self
        return self

    def lineage(self, node: Stream[Any]) -> list[Stream[Any]]:
        """The segment steps ``node`` reads from, itself last, in graph order."""
        seen: set[int] = set()
        todo = [node]
        while todo:
            n = todo.pop()
            if id(n) not in seen:
                seen.add(id(n))
                todo.extend(u for u in n.upstreams if any(u is m for m in self.nodes))
        out = [n for n in self.nodes if id(n) in seen]
        if not any(node is m for m in [*self.nodes, *self.entries]):
            out.append(node)  # being admitted
        return out

    def path_nodes(self, node: Stream[Any]) -> list[list[Stream[Any]]]:
        """The steps each of :meth:`paths` brings its input's rows through, as nodes.

        A step before the union (or join) of two branches of one input is in
        the first path only: its elements are the input's, once. The steps
        after the union are in every path: each brings them rows.
        """
        lineage = self.lineage(node) if not self._is_entry(node) else []
        unions = [n for n in lineage if len(n.upstreams) > 1]
        if not unions:
            return [lineage]
        (union,) = unions
        before = {id(n) for n in self.lineage(union)}
        return self._through(union, [n for n in lineage if id(n) not in before])

    def _through(self, meeting: Stream[Any], after: list[Stream[Any]]
                 ) -> list[list[Stream[Any]]]:
        """Per upstream of ``meeting``, its steps not on an earlier one's, then ``after``."""
        out: list[list[Stream[Any]]] = []
        seen: set[int] = set()
        for up in meeting.upstreams:
            mine = [] if self._is_entry(up) else [n for n in self.lineage(up)
                                                   if id(n) not in seen]
            seen.update(map(id, mine))
            out.append(mine + after)
        return out

    def side_nodes(self, join: Stream[Any], output: Stream[Any]) -> list[list[Stream[Any]]]:
        """For each side of ``join``, the steps its input's rows go through on the way to
        ``output`` (see :meth:`path_nodes`): the steps after the join in both."""
        ahead = {id(n) for n in self.lineage(join)}
        return self._through(join, [n for n in self.lineage(output) if id(n) not in ahead])

    def gathered(self) -> list[Stream[Any]]:
        """The steps a ``gather()`` query runs: the path to it (all of them without one)."""
        up = self.exits[0].upstream if self.exits else None
        return self.nodes if up is None else self.lineage(up)

    def paths(self, node: Stream[Any]) -> list[tuple[Any, list[NodeSpec]]]:
        """The linear chains computing ``node``, each with the source it reads.

        Without a union, one chain from the entry. Through a union, one per
        input of the union, each followed by the (stateless) steps after it;
        the union itself, which only passes elements on, is left out.
        """
        lineage = self.lineage(node) if not self._is_entry(node) else []
        unions = [n for n in lineage if len(n.upstreams) > 1]
        if not unions:
            return [(self._entry_of(node), [n.describe() for n in lineage])]
        (union,) = unions
        before = {id(n) for n in self.lineage(union)}
        post = [n.describe() for n in lineage if id(n) not in before]
        out = []
        for up in union.upstreams:
            specs = [] if self._is_entry(up) else [n.describe() for n in self.lineage(up)]
            if post:
                specs.append(replace(post[0], upstream_ids=(up._node_id,)))
                specs.extend(post[1:])
            out.append((self._entry_of(up), specs))
        return out

    def _is_entry(self, node: Stream[Any]) -> bool:
        return any(node is e for e in self.entries)

    def _entry_of(self, node: Stream[Any]) -> Stream[Any]:
        while not self._is_entry(node):
            node = node.upstreams[0]
        return node

    def _check_union_paths(self, node: Stream[Any], lineage: list[Stream[Any]]) -> None:
        """Refuse a stateful step after a union, and a union of unions."""
        unions = [n for n in lineage if len(n.upstreams) > 1]
        if not unions:
            return
        if len(unions) > 1:
            raise ValueError(
                f"{node._label()}: one union per path in a Spark segment; union all the "
                f"from_spark() inputs in one {unions[-1]._operator}() (it takes several)")
        before = {id(n) for n in self.lineage(unions[0])}
        stateful = next((n for n in lineage if id(n) not in before
                         and state_kind(n.describe()) is not None), None)
        if stateful is not None:
            raise ValueError(
                f"{stateful._label()}: keeps state after {unions[0]._label()}, whose inputs "
                "interleave in an order Spark does not define, so it has no in-process "
                "result; keep the state on each input before the union, or union the "
                "DataFrames in Spark (df1.unionByName(df2)) and start one "
                "Stream.from_spark() from that")

    def _tail(self) -> Stream[Any]:
        return self.nodes[-1] if self.nodes else self.entry

    def plan(self) -> Plan:
        """Lower the segment's path to its ``gather()`` (all of it without one)."""
        self.started = True
        nodes = self.gathered()
        specs = [n.describe() for n in nodes]
        # Again now that the graph is whole: a window whose late stream was
        # sunk since it was built runs as its node, not as Spark's window().
        for i, spec in enumerate(specs):
            check_one_state_stage(specs[:i], spec)
        return lower(specs)

    def node(self, node_id: int) -> Stream[Any]:
        """The segment node with ``node_id``."""
        for n in self.nodes:
            if n._node_id == node_id:
                return n
        raise KeyError(node_id)


#: The names the core gives a node's side streams (``node.errors``, ``node.late``).
_SIDE_STREAMS = {"errors of ": "an error stream (node.errors)",
                 "late of ": "a late stream (node.late)"}


def outside_resident(node: Stream[Any]) -> str:
    """Why ``node.to_dataframe()`` is refused: ``node`` is not in a ``from_spark()`` segment.

    Named for what it reads where that is a node's side stream, which is
    fed in Python on the driver whatever the segment it belongs to.

    Examples
    --------
    >>> m = Stream().map(abs).on_error("route")
    >>> print(outside_resident(m.errors.map(str)))
    to_dataframe(): map(str) reads stream 'errors of map(abs)', an error stream
    (node.errors): it is fed in Python on the driver, never in Spark, so it cannot
    feed to_dataframe(). End the Spark segment with gather() and sink the side stream
    in Python, or use on_error('skip') (logged on the executors)
    """
    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        what = next((w for prefix, w in _SIDE_STREAMS.items() if not n.upstreams
                     and type(n) is Stream and (n.stream_name or "").startswith(prefix)), None)
        if what is not None:
            advice = ("use on_error('skip') (logged on the executors)" if "error" in what
                      else "disconnect it")
            return (f"to_dataframe(): {node._label()} reads {n._label()}, {what}: it is fed "
                    "in Python on the driver, never in Spark, so it cannot feed "
                    "to_dataframe(). End the Spark segment with gather() and sink the side "
                    f"stream in Python, or {advice}")
        todo.extend(n.upstreams)
    return (f"to_dataframe(): {node._label()} is not in a segment that starts at "
            "Stream.from_spark(df); use gather() to bring results back into Python")
