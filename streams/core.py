"""The node: connections, emission, lifecycle and operator registration.

Everything else (operators, sources, sinks, backends) is built on the
protocol defined here:

* ``update(x, who)`` receives an element from upstream ``who``;
* ``_emit(x)`` pushes an element to every downstream;
* ``_on_close(who)`` receives end-of-stream from upstream ``who``;
* ``describe()`` returns the node's frozen description (see ``streams.graph``).

Both ``update`` and ``_emit`` return ``None`` when all work for the element
is done, or an awaitable when some of it is still running (a coroutine
sink, a Dask task...). That return value is what makes backpressure work
without any cost on the synchronous path.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from toolz import identity

from . import closing, loop_affinity, plugins
from ._api import OperatorAPI
from .cycles import check_connect, recursion_error
from .errors import StreamClosedError, apply_policy, check_policy, error_stream, not_a_stream
from .fusion import compile_installed as _compile_installed
from .fusion import invalidate as _invalidate
from .metadata import emit_with_metadata
from .pending import asynchronous_of
from .pending import done as _done
from .pending import finish_emit as _finish_emit
from .segment import NO_DEFAULT, Segment, admit_connection, segment_of
from .streamz_extras import StreamzExtras

if TYPE_CHECKING:
    from .errors import ErrorPolicy, ErrorRecord
    from .spec import NodeSpec, Traits

__all__ = ["NO_DEFAULT", "Stream", "Segment"]

T = TypeVar("T")


class Stream(StreamzExtras, OperatorAPI[T], Generic[T], metaclass=plugins.StreamType):
    """A node in a push-based stream graph.

    A bare ``Stream()`` is a source: push elements into it with
    :meth:`emit`. Every operator (``map``, ``filter``, ``scan``...) is a
    method that creates a new node downstream.

    Parameters
    ----------
    upstream : Stream, optional
        The node this one receives from.
    upstreams : list of Stream, optional
        Several upstream nodes (``zip``, ``union``...).
    stream_name : str, optional
        A name shown in ``repr``, errors and pictures.
    asynchronous : bool, optional
        If True, :meth:`emit` returns an awaitable that resolves when every
        downstream step for the element has finished (backpressure).
        Inherited from the upstream when not given.
    loop : tornado.ioloop.IOLoop, optional
        The loop the graph's work belongs to (streamz's ``loop``): a
        synchronous ``emit`` called from another thread, into this node or
        one upstream of it, runs on ``loop`` while the caller waits, as in
        streamz (:mod:`streams.loop_affinity`). Without one, ``emit`` runs
        in its caller's thread and timers on the running loop (with none,
        the shared loop thread).
    ensure_io_loop : bool, optional
        With no ``loop``, set ``loop`` to the running loop, else to the
        shared loop thread's, started now (:mod:`streams.loop_thread`); it
        is then the node's ``loop``, as if given.

    Examples
    --------
    >>> source = Stream()
    >>> out = source.map(lambda x: x + 1).sink_to_list()
    >>> source.emit(1)
    >>> source.emit(2)
    >>> out
    [2, 3]
    """

    __slots__ = (
        "__weakref__", "_asynchronous_given", "_closed", "_errors", "_interrupted", "_node_id",
        "_policy", "_push", "_segment", "asynchronous", "downstreams", "loop", "stream_name",
        "upstreams",
    )

    #: Operator name used by ``describe()``; subclasses set it.
    _operator: ClassVar[str] = "stream"
    #: Attribute names reported as parameters by ``describe()``.
    _params: ClassVar[tuple[str, ...]] = ()
    #: Attribute names holding state, for ``snapshot()`` / ``restore()``.
    _state: ClassVar[tuple[str, ...]] = ()
    #: The parameters the state means something under: a checkpoint taken
    #: with others is refused on restore (None: all of ``_params``).
    _state_params: ClassVar[tuple[str, ...] | None] = None
    #: ``_state`` names added since older checkpoints, which restore them fresh.
    _state_added: ClassVar[tuple[str, ...]] = ()
    #: How the node is drawn by ``visualize()``.
    _graphviz_shape: ClassVar[str] = "ellipse"
    _graphviz_style: ClassVar[str] = "rounded,filled"
    _graphviz_fillcolor: ClassVar[str] = "white"
    _graphviz_orientation: ClassVar[int] = 0
    #: Not drawn: a node the library adds itself (a Jupyter live view).
    _graphviz_hidden: ClassVar[bool] = False
    #: False for a node that only shows the stream (a live view, a plot): not in checkpoints.
    _checkpointed: ClassVar[bool] = True
    #: True for ``gather()``: the node is not part of its upstream's segment.
    _ends_segment: ClassVar[bool] = False
    #: Declared True by a class whose node passes on every element it gets
    #: (map): a loop of such nodes is refused by connect() (streams.cycles).
    #: Not inherited: a subclass may drop elements.
    _forwards_every_element: ClassVar[bool] = False
    #: The constructor takes the user function after the upstream (``spec.func``).
    _takes_function: ClassVar[bool] = False
    #: Why the node must run in this process (None: an engine can run it).
    #: A class that defines its own ``update`` must declare it; until it does,
    #: engines refuse it (see ``__init_subclass__``).
    _local_only: ClassVar[str | None] = None

    _ids: ClassVar[Iterator[int]] = iter(range(sys.maxsize))

    def __init__(
        self,
        upstream: Stream[Any] | None = None,
        upstreams: list[Stream[Any]] | None = None,
        stream_name: str | None = None,
        loop: Any = None,
        asynchronous: bool | None = None,
        ensure_io_loop: bool = False,
    ) -> None:
        if not plugins.loaded:
            plugins.load_plugins()
        self.downstreams: list[Stream[Any]] = []
        if upstreams is not None:
            self.upstreams: list[Stream[Any]] = [u for u in upstreams if u is not None]
        elif upstream is not None:
            self.upstreams = [upstream]
        else:
            self.upstreams = []
        for u in self.upstreams:
            if not isinstance(u, Stream):
                raise not_a_stream(self._operator, u)
        self._asynchronous_given: bool | None = asynchronous
        self.asynchronous: bool = asynchronous_of(self, asynchronous)
        self.stream_name = stream_name
        bound = loop is not None or ensure_io_loop  # the user's: see streams.loop_affinity
        if loop is None and (ensure_io_loop or getattr(self, "_clock", None) is not None):
            from .loop_thread import node_loop

            loop = node_loop(ensure_io_loop)
        self.loop = loop
        self._push: Callable[[Any], Any] = self._compile_and_push
        # Set when this node stops or its push function is replaced: a
        # compiled loop running over it tests it before each item
        # (streams.fused_loop).
        self._interrupted = False
        self._policy: ErrorPolicy = "raise"
        self._errors: Stream[ErrorRecord] | None = None
        self._closed = False
        self._node_id = next(Stream._ids)
        self._segment: Segment | None = None  # admit() below may describe the node
        self._segment = segment_of(self)
        for u in self.upstreams:
            u.downstreams.append(self)
        if self.upstreams:
            _invalidate(self)
        if bound and loop is not None:
            loop_affinity.bind(self)

    # ------------------------------------------------------------------
    # Data flow

    def update(self, x: Any, who: Stream[Any] | None = None, metadata: Any = None) -> Any:
        """Receive ``x`` from upstream ``who``; the default passes it on."""
        return self._push(x) if metadata is None else self._emit(x, metadata)

    def _emit(self, x: Any, metadata: Any = None) -> Any:
        """Push ``x`` to every downstream node.

        Returns None when all downstream work finished synchronously, else an
        awaitable that resolves when it has. With ``metadata`` (streamz's list
        of dicts), each downstream's ``update`` receives it (see
        :mod:`streams.metadata`).
        """
        if metadata is None:
            return self._push(x)
        return emit_with_metadata(self, x, metadata)

    def emit(self, x: T, asynchronous: bool = False, metadata: Any = None) -> Any:
        """Push an element into the stream.

        Synchronously (the default) the element has gone through the whole
        graph when ``emit`` returns. With ``asynchronous=True``, or on a
        stream created with ``asynchronous=True``, it returns an awaitable
        that resolves when every downstream step for ``x`` has finished,
        coroutine sinks included: ``await source.emit(x)`` is backpressure.
        On a running loop that awaitable is a Future, as in streamz: the
        element is processed even if it is never awaited, and it may be
        awaited more than once.

        Examples
        --------
        >>> source = Stream()
        >>> L = source.sink_to_list()
        >>> source.emit("a")
        >>> L
        ['a']
        """
        __tracebackhide__ = True  # pytest, IPython: show the user's frames
        try:
            pending = self._push(x) if metadata is None else self._emit(x, metadata)
        except RecursionError as e:  # free until raised (zero-cost try)
            error = recursion_error(self, e)
            if error is e:
                raise
            raise error from e
        if pending is None:
            if asynchronous or self.asynchronous:
                return _done()
            return None
        return _finish_emit(self, pending, asynchronous)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        plugins.check_subclass(cls)

    def _compile_and_push(self, x: Any) -> Any:
        __tracebackhide__ = True  # pytest, IPython: show the user's frames
        return _compile_installed(self)(x)

    def _pusher(self) -> Callable[[Any], Any]:
        """The push function, compiled now if the graph changed.

        Sources that loop over many elements take it once into a local.
        """
        if self._push == self._compile_and_push:
            _compile_installed(self)
        return self._push

    # ------------------------------------------------------------------
    # Topology

    @property
    def upstream(self) -> Stream[Any] | None:
        """The first upstream node, or None for a source."""
        return self.upstreams[0] if self.upstreams else None

    def connect(self, downstream: Stream[Any]) -> None:
        """Connect ``downstream`` so that it receives this node's elements.

        Connecting it again does nothing (streamz keeps downstreams in a set).

        Examples
        --------
        >>> a, b = Stream(), Stream()
        >>> L = b.sink_to_list()
        >>> a.connect(b)
        >>> a.emit(1)
        >>> L
        [1]
        """
        if not isinstance(downstream, Stream):
            raise TypeError(f"connect() takes a Stream, got {downstream!r}")
        if any(d is downstream for d in self.downstreams):
            return  # connected already (a notebook cell run twice): sent once, as in streamz
        check_connect(self, downstream)
        admit_connection(self, downstream)
        downstream._add_upstream(self)  # first: it may refuse, leaving all as it was
        self.downstreams.append(downstream)
        _invalidate(self)

    def disconnect(self, downstream: Stream[Any]) -> None:
        """Stop sending elements to ``downstream``."""
        if downstream not in self.downstreams:
            raise ValueError(f"{downstream!r} is not downstream of {self!r}")
        _invalidate(self)
        downstream._remove_upstream(self)  # first: it may refuse, leaving all as it was
        self.downstreams.remove(downstream)

    def _add_upstream(self, upstream: Stream[Any]) -> None:
        """Record a new upstream (operators with per-upstream state extend it)."""
        self.upstreams.append(upstream)

    def _remove_upstream(self, upstream: Stream[Any]) -> None:
        closing.remove_upstream(self, upstream)

    def destroy(self, streams: list[Stream[Any]] | None = None) -> None:
        """Disconnect this node from the graph; emitting into it then fails.

        With ``streams``, only disconnect from those upstreams (as streamz).
        Unlike streamz, a destroyed node is also cut from its downstreams,
        which learn that an upstream is gone (a live view stops, a ``zip``
        drops its buffer), and emitting into it raises instead of silently
        feeding a half-removed graph. A node of a Dask or Spark segment
        that is running (it ran its first element) is not destroyed: the
        engine runs the plan it made then (``RuntimeError``).
        """
        closing.destroy(self, streams)

    # ------------------------------------------------------------------
    # End of stream

    def close(self) -> Any:
        """Signal the end of the stream: flush held elements downstream.

        Windows, partitions and buffers emit what they hold, then every
        downstream node learns that no more elements will come. Returns None,
        or an awaitable on an asynchronous stream with work still running.

        Examples
        --------
        >>> source = Stream()
        >>> L = source.partition(2).sink_to_list()
        >>> for i in range(3):
        ...     source.emit(i)
        >>> source.close()
        >>> L
        [(0, 1), (2,)]
        """
        __tracebackhide__ = True  # pytest, IPython: show the user's frames
        return closing.close(self)

    async def aclose(self) -> None:
        """Close the stream and wait for all work in flight to finish."""
        await closing.aclose(self)

    def _on_close(self, who: Stream[Any] | None) -> Any:
        """Receive end-of-stream from ``who``; close once every upstream has."""
        return closing.on_close(self, who)

    def _push_closed(self, x: Any) -> Any:
        raise StreamClosedError(
            f"{self._label()} is closed: element {x!r:.80} was not emitted; "
            "create a new stream to emit into"
        )

    def _flush(self) -> Any:
        """Emit everything this node holds; stateful operators override it."""
        return None

    def _close_downstreams(self) -> Any:
        """Close every downstream and the error stream; the first failure is raised last."""
        return closing.close_downstreams(self)

    # ------------------------------------------------------------------
    # Errors

    def on_error(self, policy: ErrorPolicy) -> Stream[T]:
        """Choose what happens when this node's function raises.

        ``"raise"`` (default) raises :class:`~streams.errors.NodeError`
        naming the node and the element; ``"skip"`` logs and drops the
        element; ``"route"`` sends an :class:`~streams.errors.ErrorRecord`
        to :attr:`errors`, a stream you can sink. Returns the node itself.

        Examples
        --------
        >>> source = Stream()
        >>> parsed = source.map(int).on_error("route")
        >>> good, bad = parsed.sink_to_list(), parsed.errors.sink_to_list()
        >>> for s in ["1", "x", "3"]:
        ...     source.emit(s)
        >>> good
        [1, 3]
        >>> [r.element for r in bad]
        ['x']
        """
        self._policy = check_policy(self, policy)
        if policy == "route":
            self.errors  # noqa: B018 - create the error stream now
        return self

    @property
    def errors(self) -> Stream[ErrorRecord]:
        """The stream of failures of this node under the ``"route"`` policy."""
        if self._errors is None:
            self._errors = error_stream(self)
        return self._errors

    def _fail(self, x: Any, exc: BaseException) -> Any:
        """Apply this node's error policy to ``exc`` raised on element ``x``."""
        __tracebackhide__ = True  # pytest, IPython: show the user's frames
        return apply_policy(self, x, exc)

    # ------------------------------------------------------------------
    # Description

    def describe(self) -> NodeSpec:
        """The node's frozen description: operator, function, parameters.

        Examples
        --------
        >>> source = Stream()
        >>> spec = source.map(abs).describe()
        >>> spec.operator, spec.func is abs, spec.upstream_ids == (source.describe().id,)
        ('map', True, True)
        """
        from .spec import NodeSpec

        return NodeSpec.of(self)

    def _traits(self) -> Traits:
        """What a backend needs to know to place this node (see :class:`~streams.spec.Traits`).

        Operators whose traits depend on their arguments extend it.
        """
        from .spec import Traits

        return Traits(stateful=bool(self._state), local_only=self._local_only)

    @classmethod
    def _from_spec(cls, spec: NodeSpec, upstreams: list[Stream[Any]]) -> Stream[Any]:
        """A node of this class doing what ``spec`` describes (see :func:`streams.spec.build`).

        The parameters are passed back as the constructor's keywords, the
        function after the upstreams; ``args`` and ``kwargs`` parameters are
        spread. Operators whose constructors differ override it (``zip``).
        """
        from .spec import construct

        return construct(cls, spec, upstreams)

    def snapshot(self) -> dict[str, Any]:
        """A copy of this node's state (empty for stateless nodes)."""
        import copy

        return {name: copy.deepcopy(getattr(self, name)) for name in self._state}

    def restore(self, state: dict[str, Any]) -> None:
        """Set this node's state from a :meth:`snapshot`, taking its objects over.

        The node goes on to change them: restore a snapshot once, or give
        each restore a copy (:func:`~streams.snapshot.restore_graph` copies).
        """
        for name in self._state:
            if name in state or name not in self._state_added:  # an added one stays fresh
                setattr(self, name, state[name])
        _invalidate(self)  # fused code may have specialised on the old state

    def _label(self) -> str:
        from .graph import label

        return label(self)

    def __repr__(self) -> str:
        return f"<{self._label()}>"

    # ------------------------------------------------------------------
    # Sources

    def start(self) -> Any:
        """Start the sources upstream of this node (a source overrides it).

        Returns what the upstream's ``start()`` returns when there is one
        upstream (on a loop, a source's task), else None.

        Examples
        --------
        >>> mapped = Stream.from_iterable([1, 2]).map(str)
        >>> L = mapped.sink_to_list()
        >>> mapped.start()
        >>> L
        ['1', '2']
        """
        started = [u.start() for u in self.upstreams]
        return started[0] if len(started) == 1 else None

    def stop(self) -> None:
        """Stop the sources upstream of this node (a source overrides it)."""
        for u in self.upstreams:
            u.stop()

    # ------------------------------------------------------------------
    # Registration

    @classmethod
    def register_api(cls, modifier: Callable[[Any], Any] = identity,
                     attribute_name: str | None = None) -> Callable[[type], type]:
        """Register a node class as a method: see :func:`streams.plugins.register_api`."""
        return plugins.register_api(cls, modifier, attribute_name)

    @classmethod
    def register_plugin_entry_point(cls, entry_point: Any,
                                    modifier: Callable[[Any], Any] = identity) -> None:
        """Load ``entry_point`` as a method on first use: see :mod:`streams.plugins`."""
        plugins.register_entry_point(cls, entry_point, modifier)

    def visualize(self, filename: str | None = "mystream.png", **kwargs: Any) -> Any:
        """Draw the graph with graphviz; see :func:`streams.graph.visualize`."""
        from .graph import visualize

        return visualize(self, filename, **kwargs)

