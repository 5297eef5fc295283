"""The join of a stream to a changing table: ``lookup`` (and its ``Tombstone``).

``lookup`` joins each element of a stream to the latest value of its key in
a table stream (a small dimension table), so a pipeline need not close over
a dict that never changes. It receives from two upstreams (it uses ``who``)
and is never fused. Dask and Spark segments refuse it when the graph is
built: its output follows the interleaving of its inputs (as
``combine_latest``'s does), which only this process sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from ..core import NO_DEFAULT, Stream
from ..errors import short_repr
from ._checks import key_function, one_key
from .combine import InterleavedInputs
from .joins import _two_streams

__all__ = ["LookupJoin", "Tombstone"]


class Tombstone:
    """A table element deleting ``key`` from a :meth:`~streams.Stream.lookup` table.

    Examples
    --------
    >>> Tombstone("a")
    Tombstone('a')
    """

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __repr__(self) -> str:
        return f"Tombstone({self.key!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tombstone) and other.key == self.key

    def __hash__(self) -> int:
        return hash((Tombstone, self.key))


@dataclass(frozen=True)
class _Missing:
    """Marks a key absent from the table (``None`` is a legitimate value)."""


_MISSING = _Missing()


@Stream.register_api(attribute_name="lookup")
class LookupJoin(InterleavedInputs):
    """Join each element to the latest value of its key in a changing table stream.

    The ``table`` stream's elements are ``(key, value)`` pairs (a value of
    ``None`` deletes the key), or, with ``table_key=``, records whose key is
    ``table_key(record)`` (the record is the value). A :class:`Tombstone`
    ``(key)`` deletes a key in either form. Each element ``x`` of this
    stream is emitted as ``(x, value)`` with the value its key ``key(x)``
    has when ``x`` arrives; the table is never joined backwards (a later
    table update does not re-emit earlier elements). Its output ends when
    this stream closes: the table, often a changelog that stays open, may
    go on changing for other nodes; its own close changes nothing.

    A key missing from the table gives ``(x, default)`` when ``default=`` is
    given; otherwise a ``KeyError`` goes to the node's error policy
    (raise, skip and log, or route to :attr:`errors`), so no element
    vanishes without a word. Dask and Spark segments refuse it when the
    graph is built: ``gather()`` the stream first.

    Parameters
    ----------
    table : Stream
        The changing table: ``(key, value)`` pairs, records, tombstones.
    key : callable or item key
        ``key(x)`` (or ``x[key]``) is the table key of an element ``x``.
    table_key : callable or item key, optional
        The key of a table record; by default table elements are pairs.
    default : object, optional
        The value joined to an element whose key is not in the table.

    Examples
    --------
    >>> from streams import Stream
    >>> orders, prices = Stream(), Stream()
    >>> L = orders.lookup(prices, key=0, default=0.0).sink_to_list()
    >>> prices.emit(("apple", 1.5)); prices.emit(("pear", 2.0))
    >>> orders.emit(("apple", 3)); orders.emit(("kiwi", 1))
    >>> prices.emit(("apple", 1.25)); prices.emit(("pear", None))  # a new price; no pears
    >>> orders.emit(("apple", 2)); orders.emit(("pear", 4))
    >>> L
    [(('apple', 3), 1.5), (('kiwi', 1), 0.0), (('apple', 2), 1.25), (('pear', 4), 0.0)]

    Records keyed by a field, and a missing key routed to the error stream:

    >>> users, events = Stream(), Stream()
    >>> looked_up = events.lookup(users, key="user", table_key="id").on_error("route")
    >>> L, missing = looked_up.sink_to_list(), looked_up.errors.sink_to_list()
    >>> users.emit({"id": 7, "name": "Ada"})
    >>> events.emit({"user": 7}); events.emit({"user": 8})
    >>> L
    [({'user': 7}, {'id': 7, 'name': 'Ada'})]
    >>> [r.element for r in missing]
    [{'user': 8}]
    """

    __slots__ = ("_key", "_table_key", "default", "key", "table",
                 "table_key")
    _operator = "lookup"
    _local_only = ("its output depends on how the table's and the stream's elements "
                   "interleave in this process")
    _params = ("key", "table_key", "default")
    _state = ("table",)

    def __init__(self, upstream: Stream[Any], table: Stream[Any], key: Any,
                 table_key: Any = None, default: Any = NO_DEFAULT, **kwargs: Any) -> None:
        op = "lookup"
        _two_streams(op, upstream, table, "table")
        if key is None:
            raise TypeError("lookup(): key= is required: the function (or item key) giving "
                            "an element's key in the table")
        self.key = key
        self._key = key_function(key, "lookup")
        self.table_key = table_key
        self._table_key = (None if table_key is None
                           else key_function(table_key, "lookup", "table_key"))
        self.default = default
        #: The table as it stands: key -> latest value.
        self.table: dict[Any, Any] = {}
        Stream.__init__(self, upstreams=[upstream, table], **kwargs)

    # Read from upstreams, not kept apart: an engine that runs the lookup here
    # puts a gather() in place of an upstream (streams.segment.join_here).
    @property
    def _main(self) -> Stream[Any]:
        return self.upstreams[0]

    @property
    def _table(self) -> Stream[Any]:
        return self.upstreams[1]

    def _add_upstream(self, upstream: Stream[Any]) -> None:
        raise ValueError(f"{self._label()} reads one stream and one table; it cannot take "
                         f"{upstream._label()} as a third input (union() them first)")

    def _on_close(self, who: Stream[Any] | None) -> Any:
        # Its output ends with the stream it enriches: the table sends nothing
        # on, and usually stays open (a changelog), which would hold what is
        # downstream (a window's last elements) for ever. The table's end
        # changes nothing.
        if who is self._table:
            return None
        return super()._on_close(None if who is self._main else who)

    def _push_closed(self, x: Any) -> Any:
        # Closed, only the table still sends (the stream it enriches has
        # ended): it may go on changing, for other nodes; nothing goes on.
        return None

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        if who is self._table:
            return self._change(x)
        if who is not self._main:
            raise ValueError(f"{self._label()} received from {who!r}, which is not its upstream")
        try:
            k = one_key(self._key(x))
            value = self.table.get(k, _MISSING)
        except Exception as e:
            return self._fail(x, e)
        if value is _MISSING:
            if self.default is NO_DEFAULT:
                return self._fail(x, KeyError(
                    f"key {short_repr(k)} is not in the table; give lookup(..., default=) "
                    "to join a default value instead"))
            value = self.default
        return self._emit((x, value)) if metadata is None else self._emit((x, value), metadata)

    def _change(self, x: Any) -> Any:
        """Apply a table element: set or delete its key."""
        try:
            if isinstance(x, Tombstone):
                self.table.pop(one_key(x.key), None)
            elif self._table_key is not None:
                self.table[one_key(self._table_key(x))] = x
            else:
                try:
                    if isinstance(x, Mapping | str | bytes | AbstractSet):
                        # A two-field record unpacks into its field names, not (key, value).
                        raise TypeError
                    k, value = x
                except (TypeError, ValueError):
                    raise TypeError(
                        f"lookup(): table elements must be (key, value) pairs, got "
                        f"{short_repr(x)}; for records give table_key=") from None
                k = one_key(k)
                if value is None:
                    self.table.pop(k, None)
                else:
                    self.table[k] = value
        except Exception as e:
            return self._fail(x, e)
        return None
