"""Errors as an engine carries them from a worker process back to the client.

A worker's exception travels pickled; code on the client that catches its
type must still catch it (:func:`portable_error`). A stateful node's state
travels too, between a Dask task and the next: one that cannot is named
(:class:`StateNotPickled`).
"""

from __future__ import annotations

import importlib
import pickle
from typing import Any

from .errors import short_repr

__all__ = ["StateNotPickled", "portable_error", "state_not_pickled"]


class StateNotPickled(TypeError):
    """A stateful node's state that cannot be copied or pickled, as an engine carries it.

    In-process a state is never copied; a Dask task hands it to the next
    batch's pickled, and takes a snapshot of it by copying. The message
    names the node (:func:`state_not_pickled`).
    """


def state_not_pickled(node: str, error: BaseException) -> StateNotPickled:
    """The :class:`StateNotPickled` of ``node``'s state, which met ``error``."""
    return StateNotPickled(
        f"{node}: its state goes to the next batch's task pickled, and it holds something "
        f"that does not pickle ({type(error).__name__}: {error}); keep locks, connections "
        "and files out of the state (make them in the function, or in a sink after "
        "gather())")


def portable_error(exc: BaseException) -> BaseException:
    """``exc``, as it can travel from an engine's worker back to the client.

    Code that catches the exception's type must catch it there too (see
    the contract on errors). So, in order:

    * ``exc`` itself if it survives pickling, by reference (its class
      importable) or, with cloudpickle (as Dask sends what plain pickle
      cannot), by value: a class defined in the client's ``__main__`` goes
      to a worker by value, and comes back as the client's own class;
    * else a copy of the same class and attributes that pickles without
      calling ``__init__`` (its ``args`` and ``__dict__`` restored as they
      are: see :func:`_rebuilt_error`). Pickle rebuilds an exception by
      calling its class with its ``args``, which fails for one whose
      ``__init__`` takes other arguments than it passes to ``Exception``
      (``RateLimited(retry_after, msg)``);
    * else a ``RuntimeError`` carrying its type's name and message: for
      an exception neither pickle nor cloudpickle can carry (an attribute
      holding a lock or a socket, a ``__new__`` that wants arguments, a
      class that cannot be imported where it is unpickled when the engine
      pickles only by reference, as Spark's error rows do).

    Examples
    --------
    >>> class Two(ValueError):
    ...     def __init__(self, code, msg):
    ...         super().__init__(msg)
    ...         self.code = code
    >>> import cloudpickle
    >>> back = cloudpickle.loads(cloudpickle.dumps(portable_error(Two(7, "bad"))))
    >>> type(back) is Two, back.code, str(back)
    (True, 7, 'bad')
    """
    if _round_trips(exc):
        return exc
    rebuilt = (type(exc), exc.args, dict(vars(exc)))
    try:
        carried = _rebuilt_error(*rebuilt)
    except Exception:  # a __new__ of its own that wants arguments
        carried = None
    if carried is not None:
        carried.__traceback__ = exc.__traceback__
        carried.__cause__, carried.__context__ = exc.__cause__, exc.__context__
        # Pickle asks the object itself for __reduce_ex__: set on this copy
        # alone, it changes how nothing else of the class pickles.
        vars(carried)["__reduce_ex__"] = _Rebuilt(rebuilt)
        if _round_trips(carried):
            return carried
    return RuntimeError(f"{type(exc).__name__}: {short_repr(str(exc))}")


def _round_trips(exc: BaseException) -> bool:
    """Whether ``exc`` comes back from pickle, or else cloudpickle, as it was:
    its type, its ``args`` (an ``__init__`` called again may change them)
    and the names of its attributes."""
    picklers: list[Any] = [pickle]
    try:
        picklers.append(importlib.import_module("cloudpickle"))
    except ImportError:  # only the engines need it
        pass
    for module in picklers:
        try:
            back = module.loads(module.dumps(exc))
            if (type(back) is type(exc) and bool(back.args == exc.args)
                    and _attributes(back) == _attributes(exc)):
                return True
        except Exception:
            pass
    return False


def _attributes(exc: BaseException) -> set[str]:
    return vars(exc).keys() - {"__reduce_ex__"}  # a portable copy's own (see _Rebuilt)


def _rebuilt_error(cls: type[BaseException], args: tuple[Any, ...],
                   state: dict[str, Any]) -> BaseException:
    """An exception of ``cls`` with ``args`` and the attributes ``state``, made
    without calling ``cls.__init__`` (what :func:`portable_error`'s copies unpickle with)."""
    error = cls.__new__(cls)
    error.args = args
    vars(error).update(state)
    return error


class _Rebuilt:
    """The ``__reduce_ex__`` of an exception copied by :func:`portable_error`:
    :func:`_rebuilt_error` and its arguments, taken when the copy was made
    (holding the copy itself would make a cycle through its ``__dict__``)."""

    __slots__ = ("arguments",)

    def __init__(self, arguments: tuple[type[BaseException], tuple[Any, ...], dict[str, Any]]
                 ) -> None:
        self.arguments = arguments

    def __call__(self, protocol: int) -> Any:
        return (_rebuilt_error, self.arguments)
