"""Errors raised by stream nodes and the per-node error policies.

A user function that raises inside the graph never surfaces as a bare
exception from deep inside a pipeline: it is wrapped in :class:`NodeError`,
which names the node and shows the element, or handled by the node's policy
(see :meth:`streams.Stream.on_error`).
"""

from __future__ import annotations

import logging
import operator
import reprlib
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    from .core import Stream

__all__ = [
    "ErrorPolicy",
    "ErrorRecord",
    "NodeError",
    "SourceError",
    "StreamClosedError",
    "apply_policy",
    "error_stream",
    "not_a_stream",
    "short_repr",
]

logger = logging.getLogger("streams")

ErrorPolicy = Literal["raise", "skip", "route"]
_POLICIES = ("raise", "skip", "route")

_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 8
_MAX_REPR = 160


def short_repr(x: Any) -> str:
    """The repr of ``x``, truncated so an error message stays readable.

    Examples
    --------
    >>> short_repr(list(range(100)))
    '[0, 1, 2, 3, 4, 5, 6, 7, ...]'
    """
    text = _repr.repr(x)
    # reprlib bounds each part, not the whole: nested containers add up.
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


def not_a_stream(op: str, value: Any) -> TypeError:
    """The error for an input of ``op`` that is not a Stream (a list of them: pass them apart).

    Examples
    --------
    >>> print(not_a_stream("union", [1, 2]))
    union(): every input must be a Stream, got [1, 2]; give streams one by one: a.union(b, c), a.union(*streams)
    """  # noqa: E501
    hint = ""
    if isinstance(value, list | tuple):
        hint = f"; give streams one by one: a.{op}(b, c), a.{op}(*streams)"
    return TypeError(f"{op}(): every input must be a Stream, got {short_repr(value)}{hint}")


class NodeError(Exception):
    """A user function raised while a node processed an element.

    Attributes
    ----------
    node : Stream
        The node whose function raised.
    element : object
        The element it was processing.
    error : BaseException
        The original exception (also ``__cause__``).

    A NodeError is also an instance of the original exception's type (its
    class derives from both), so ``except ZeroDivisionError`` catches it,
    as it does with streamz; the node and element are in the message and
    in an exception note too.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> _ = source.map(lambda x: 1 / x, stream_name="invert").sink_to_list()
    >>> try:
    ...     source.emit(0)
    ... except NodeError as e:
    ...     print(e)
    map(<lambda>) 'invert' failed on element 0: ZeroDivisionError: division by zero
    >>> try:
    ...     source.emit(0)
    ... except ZeroDivisionError as e:
    ...     print(e.element, isinstance(e, NodeError))
    0 True
    """

    _message: str

    def __new__(cls, node: Stream[Any], element: Any, error: BaseException) -> NodeError:
        # The error keeps its type (contract 7): ``NodeError(node, x, exc)`` is
        # an instance of a subclass of both NodeError and ``type(exc)``, so code
        # catching ``ZeroDivisionError`` around ``emit`` keeps working.
        if cls is NodeError:
            cls = _typed(type(error), NodeError)
        return super().__new__(cls)

    def __init__(self, node: Stream[Any], element: Any, error: BaseException) -> None:
        _adopt(self, error)
        self.node = node
        self.element = element
        self.error = error
        _take_arguments(self, error, f"{node._label()} failed on element {short_repr(element)}"
                        f"{_failed_argument(node, element, error)}: {type(error).__name__}: "
                        f"{error}")
        self.add_note(f"streams: raised in node {node._label()} "
                      f"on element {short_repr(element)}")

    def __str__(self) -> str:
        # The message, whatever the original type's __str__ does (KeyError
        # quotes its argument, OSError formats errno).
        return str(self.__dict__.get("_message", ""))

    def __repr__(self) -> str:
        # Not the original type's, which may read what its own __init__ set.
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self) -> Any:
        # Nodes do not pickle (they hold the graph); keep the message.
        return (RemoteNodeError, (str(self),))


#: The attributes where nodes of one input keep the functions of their
#: ``time=`` and ``key=`` arguments, by argument (and an ``Expiry``'s ``time``).
_READERS = (("time", "_time"), ("key", "_key"))


def _failed_argument(node: Stream[Any], element: Any, error: BaseException) -> str:
    """`` in time=1``: the item argument of ``node`` that fails on ``element`` as ``error`` did.

    An item key (``key=0``, ``time="ts"``) runs as inline code, so no line
    of the user's shows in the traceback: the node's such readers are tried
    again on the element, and those failing with the same error are named.
    Only a node of one input (a join's or a lookup's readers are each of one
    side) and an element whose item access changes nothing (a tuple, a list,
    a dict; a ``defaultdict`` adds the key it is asked for).

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> _ = source.timed_window(60.0, time=1, key=0).sink(print)
    >>> try:
    ...     source.emit(("u",))
    ... except IndexError as e:
    ...     print(e)
    timed_window(60.0) failed on element ('u',) in time=1: IndexError: tuple index out of range
    """
    if len(node.upstreams) != 1 or not (isinstance(element, tuple)
                                        or type(element) in (list, dict)):
        return ""
    expiry = getattr(node, "_expiry", None)  # a ttl's time=
    readers = [(argument, getattr(node, attribute, None)) for argument, attribute in _READERS]
    failing = []
    for argument, reader in [*readers, ("time", getattr(expiry, "time", None))]:
        if type(reader) is not operator.itemgetter:  # a user's function may have effects
            continue
        try:
            reader(element)
        except Exception as e:  # compared with the error, not handled
            if type(e) is type(error) and str(e) == str(error):
                failing.append(f"{argument}={reader.__reduce__()[1][0]!r}")
    return f" in {' and '.join(failing)}" if failing else ""


def _adopt(wrapper: BaseException, error: BaseException) -> None:
    """Give ``wrapper`` the attributes ``error``'s __init__ set (its type's methods read them).

    A NodeError is an instance of the original type, built without that
    type's __init__: redis-py's errors' ``repr`` read an ``error_type`` it
    sets, and failed (in asyncio's report of a failed task, among others).
    """
    attributes = getattr(error, "__dict__", None)
    if attributes:
        wrapper.__dict__.update({k: v for k, v in attributes.items() if k != "__notes__"})


#: Fields the built-in exception types keep outside ``args`` and ``__dict__``.
_BUILTIN_FIELDS = ("errno", "strerror", "filename", "filename2", "encoding", "object",
                   "start", "end", "reason", "name", "path", "msg", "lineno", "offset",
                   "text", "end_lineno", "end_offset", "value", "code")


def _take_arguments(wrapper: NodeError, error: BaseException, message: str) -> None:
    """``wrapper``'s message, and the arguments and fields of ``error`` that handlers read.

    ``except KeyError as e: e.args[0]``, ``except OSError as e: e.errno``,
    ``e.filename``, a ``UnicodeDecodeError``'s ``reason``: as streamz, which
    raises the original error, gives them. BaseException's ``__init__``, not
    the original type's: that one may want other arguments
    (``UnicodeDecodeError`` takes five).

    >>> from streams import Stream
    >>> source = Stream()
    >>> _ = source.map(lambda d: open(d["path"])).sink(print)
    >>> try:
    ...     source.emit({})
    ... except KeyError as e:
    ...     print(e.args)
    ('path',)
    >>> try:
    ...     source.emit({"path": "/no/such/file"})
    ... except FileNotFoundError as e:
    ...     print(e.errno, e.filename)
    2 /no/such/file
    """
    wrapper._message = message
    BaseException.__init__(wrapper, *error.args)
    for name in _BUILTIN_FIELDS:
        try:
            setattr(wrapper, name, getattr(error, name))
        except (AttributeError, TypeError):  # not this type's, or read-only
            continue


_typed_classes: dict[tuple[type[NodeError], type[BaseException]], type[NodeError]] = {}


def _typed(error_type: type[BaseException], base: type[NodeError]) -> type[NodeError]:
    """The subclass of ``base`` and ``error_type`` (``base`` itself if none can be made).

    >>> issubclass(_typed(ZeroDivisionError, NodeError), (NodeError, ZeroDivisionError))
    True
    """
    klass = _typed_classes.get((base, error_type))
    if klass is None:
        if issubclass(error_type, NodeError) or not issubclass(error_type, Exception):
            klass = base  # KeyboardInterrupt and the like are not wrapped as Exceptions
        else:
            try:
                klass = type(f"{base.__name__}[{error_type.__name__}]", (base, error_type),
                             {"__module__": __name__, "__qualname__":
                              f"{base.__name__}[{error_type.__qualname__}]"})
            except TypeError:  # a type that cannot be subclassed, or a layout conflict
                klass = base
        _typed_classes[(base, error_type)] = klass
    return klass


class SourceError(NodeError):
    """A source failed on its own: opening its file, connecting, reading.

    Like :class:`NodeError` (its base), it is also an instance of the
    original exception's type, so ``except FileNotFoundError`` catches it;
    its message names the source. ``element`` is None.

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream.from_textfile("no-such-file.txt")
    >>> try:
    ...     source.start()
    ... except FileNotFoundError as e:
    ...     print(str(e)[:60])
    from_textfile('no-such-file.txt') failed: FileNotFoundError:
    """

    def __new__(cls, node: Stream[Any], error: BaseException) -> SourceError:
        if cls is SourceError:
            cls = _typed(type(error), SourceError)  # type: ignore[assignment]
        return super(NodeError, cls).__new__(cls)  # the original type's, as NodeError

    def __init__(self, node: Stream[Any], error: BaseException) -> None:
        _adopt(self, error)
        self.node = node
        self.element = None
        self.error = error
        _take_arguments(self, error, f"{node._label()} failed: {type(error).__name__}: {error}")
        self.add_note(f"streams: raised by source {node._label()}")


class RemoteNodeError(Exception):
    """A :class:`NodeError` that crossed a process boundary (message only)."""


class StreamClosedError(RuntimeError):
    """An element was emitted into a closed or destroyed stream."""


class ErrorRecord(NamedTuple):
    """A failure routed to a node's error stream (policy ``"route"``).

    Examples
    --------
    >>> from streams import Stream
    >>> source = Stream()
    >>> node = source.map(int).on_error("route")
    >>> records = node.errors.sink_to_list()
    >>> source.emit("x")
    >>> rec = records[0]
    >>> rec.element, type(rec.exception).__name__, rec.node is node
    ('x', 'ValueError', True)
    """

    element: Any
    exception: BaseException
    node: Any


def check_policy(node: Stream[Any], policy: str) -> ErrorPolicy:
    """Validate an error policy name, naming the node when it is wrong."""
    if policy not in _POLICIES:
        raise ValueError(
            f"{node._label()}: on_error takes one of {', '.join(map(repr, _POLICIES))}, "
            f"got {policy!r}"
        )
    return policy  # type: ignore[return-value]


def apply_policy(node: Stream[Any], x: Any, exc: BaseException) -> Any:
    """``node._fail``: apply ``node``'s error policy to ``exc``, raised on element ``x``."""
    __tracebackhide__ = True  # pytest, IPython: show the user's frames
    policy = node._policy
    if policy == "raise":
        if isinstance(exc, NodeError):
            raise exc
        raise NodeError(node, x, exc) from exc
    if policy == "skip":
        logger.warning("%s", NodeError(node, x, exc))
        return None
    return node.errors._emit(ErrorRecord(x, exc, node))


def error_stream(node: Stream[Any]) -> Stream[ErrorRecord]:
    """A new stream for ``node.errors``: the failures routed by ``on_error("route")``."""
    from .core import Stream
    from .graph import hang

    errors: Stream[ErrorRecord] = Stream(stream_name=f"errors of {node._label()}")
    errors.asynchronous = node.asynchronous
    hang(errors, node)
    return errors
