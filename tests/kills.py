"""Kill tests: a pipeline run in a child process, SIGKILLed at points drawn from a seed.

The parent's side: start a child script (``start_child``), let it finish
(``run_child``), or run it as a :class:`SteppedChild`, which waits for the
parent's word at each progress line and around each checkpoint write, so
the parent, not the scheduler, decides where in the stream a kill lands:
kill it at points drawn from a seed (``kill_points``, ``kill_at_points``).
The output an uninterrupted run gives: ``random_records``,
``running_totals``.

The child's side (the scripts next to the kill tests import it, run with
the checkout on ``PYTHONPATH``): the keyed running count and sum the
pipelines compute (``count_and_sum``), the progress lines the parent kills
on (``report_progress``, every :data:`PROGRESS_EVERY` elements) and the
last line of a run that ended (``start_and_finish``).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

#: The checkout under test: the child imports its streams package first.
ROOT = Path(__file__).resolve().parents[1]
#: A child reports its count of elements done every this many elements.
PROGRESS_EVERY = 10


# -- the parent ----------------------------------------------------------------

def child_env() -> dict[str, str]:
    """The child's environment: the checkout first on ``PYTHONPATH``, fixed hash seed."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": path}


def start_child(child: Path, args: list[str], **popen: Any) -> subprocess.Popen[str]:
    """Start the script ``child`` with ``args``, its stdout (progress lines) piped."""
    return subprocess.Popen([sys.executable, str(child), *args], stdout=subprocess.PIPE,
                            text=True, env=child_env(), **popen)


def run_child(child: Path, args: list[str]) -> None:
    """Run ``child`` to its end: it must exit 0 after its ``finished`` line.

    A kill at an exact point runs the child as a :class:`SteppedChild`.
    """
    proc = start_child(child, args)
    assert proc.stdout is not None
    finished = False
    try:
        for line in proc.stdout:
            if line == "finished\n":
                finished = True
                break
    finally:
        proc.stdout.close()
        proc.wait(timeout=120)
    assert finished and proc.returncode == 0, (
        f"the child ended with {proc.returncode}" + ("" if finished else
                                                    " before its 'finished' line"))


#: Where :meth:`SteppedChild.pause_at` can leave a child, after its count of elements.
PAUSES = ("count", "checkpoint", "checkpointed")


class SteppedChild:
    """A child script run with ``--stepped``: it waits for the parent at each line it reports.

    Killing a child that runs on while the parent reads its progress lands
    wherever the scheduler lets it: on a loaded machine, after the child
    has finished. Here the child stops at each count it reports, and before
    and after each checkpoint it writes, until told to go on, so
    :meth:`pause_at` leaves it waiting at an exact point of its stream, and
    whatever the parent does then (kill it, kill a server it talks to)
    happens there. Used as a context manager: a child still running at the
    end is killed.
    """

    def __init__(self, child: Path, args: list[str], **popen: Any) -> None:
        self.process = start_child(child, [*args, "--stepped"], stdin=subprocess.PIPE, **popen)

    def __enter__(self) -> SteppedChild:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.returncode is None:  # not ended by end(): a test failed on the way
            self.process.kill()
            self.end()

    def pause_at(self, count: int, at: str = "count") -> bool:
        """Let the child run to ``count`` elements done and pause it; False if it finished first.

        ``at`` (one of :data:`PAUSES`) says where: ``"count"``, having done
        exactly ``count`` elements (every downstream step of the last one
        has run) and nothing of the next; ``"checkpoint"``, at the first
        checkpoint after that, its record made and the output it covers
        handed to the kernel, before its file is written; ``"checkpointed"``,
        once that file is written, before the source reads again (and
        acknowledges what it covers).
        """
        if count <= 0 or count % PROGRESS_EVERY or at not in PAUSES:
            raise ValueError(f"a child pauses after a multiple of {PROGRESS_EVERY} elements, "
                             f"at one of {PAUSES}: not {count}, {at!r}")
        proc = self.process
        assert proc.stdout is not None and proc.stdin is not None
        reached = False
        for line in proc.stdout:
            mark = line.rstrip("\n")
            if mark == "finished":
                return False
            reached = reached or mark == str(count)
            if reached and mark == (str(count) if at == "count" else at):
                return True
            proc.stdin.write("\n")  # go on to the next mark
            proc.stdin.flush()
        proc.wait(timeout=120)
        raise AssertionError(f"the child ended with {proc.returncode} before {count}, {at!r}")

    def kill(self) -> None:
        """SIGKILL the child where it waits, and reap it."""
        self.process.send_signal(signal.SIGKILL)
        code, err = self.end()
        assert code == -signal.SIGKILL, f"the child ended with {code}:\n{err}"

    def end(self) -> tuple[int, str]:
        """Let the child run free (its stdin ends) and wait for it to exit.

        Returns its return code and what it wrote to stderr (if piped).
        """
        _, err = self.process.communicate(timeout=120)
        return self.process.returncode, err or ""


def kill_points(seed: int, n: int, kills: int,
                pauses: tuple[str, ...] = PAUSES) -> list[tuple[int, str]]:
    """``kills`` random points to kill runs at, over an input of ``n`` elements.

    A point is a count of elements done since that run's start, a multiple
    of :data:`PROGRESS_EVERY` below ``n / (kills + 1)`` so that every kill
    lands before the end, and where after it the run pauses (see
    :meth:`SteppedChild.pause_at`): the runs take ``pauses`` in turn from
    one drawn from the seed, so that ``len(pauses)`` kills cover each.

    >>> kill_points(3, 1000, 4)
    [(190, 'count'), (180, 'checkpoint'), (50, 'checkpointed'), (120, 'count')]
    """
    rng = random.Random(seed)
    first = rng.randrange(len(pauses))
    return [(rng.randrange(PROGRESS_EVERY, n // (kills + 1), PROGRESS_EVERY),
             pauses[(first + i) % len(pauses)]) for i in range(kills)]


def kill_at_points(child: Path, args: list[str], points: list[tuple[int, str]],
                   context: str = "") -> None:
    """Run ``child`` once per point of ``points``, pause it there and SIGKILL it.

    Raises AssertionError (its message led by ``context``) if a run
    finishes before its point.
    """
    for run, (count, at) in enumerate(points):
        with SteppedChild(child, args) as stepped:
            assert stepped.pause_at(count, at), \
                f"{context}run {run} finished before its kill at {count}, {at!r}"
            stepped.kill()


def random_records(seed: int, n: int, words: list[str]) -> list[tuple[str, int]]:
    """``n`` random ``(word, number)`` records: the input of a kill test."""
    rng = random.Random(seed)
    return [(rng.choice(words), rng.randrange(1000)) for _ in range(n)]


def running_totals(recs: list[tuple[str, int]]) -> list[str]:
    """The lines ``word count sum`` an uninterrupted run writes for ``recs``, in order."""
    state: dict[str, tuple[int, int]] = {}
    lines = []
    for word, n in recs:
        c, s = state.get(word, (0, 0))
        state[word] = (c + 1, s + n)
        lines.append(f"{word} {c + 1} {s + n}")
    return lines


# -- the child -------------------------------------------------------------------

def count_and_sum(state: tuple[int, int], x: tuple[str, int]) -> tuple[int, int]:
    """The keyed scan of the killed pipelines: a running count and sum per word."""
    return state[0] + 1, state[1] + x[1]


class _Marks:
    """The child's side of :class:`SteppedChild`: a line to stdout, then the parent's word."""

    def __init__(self, stepped: bool) -> None:
        self.stepped = stepped

    def __call__(self, mark: str) -> None:
        sys.stdout.write(f"{mark}\n")
        sys.stdout.flush()
        if self.stepped and not sys.stdin.readline():
            self.stepped = False  # stdin ended: run free

    def around_checkpoint_writes(self) -> None:
        """Mark each checkpoint write: ``checkpoint`` before it, ``checkpointed`` after."""
        from streams import _checkpoint_io

        write_file = _checkpoint_io.write_file

        def marked(*args: Any, **kwargs: Any) -> Any:
            self("checkpoint")
            written = write_file(*args, **kwargs)
            self("checkpointed")
            return written

        _checkpoint_io.write_file = marked


def report_progress(stream: Any, stepped: bool = False) -> None:
    """Write ``<elements done>`` to stdout every :data:`PROGRESS_EVERY` elements of ``stream``.

    ``stepped``: also mark each checkpoint written, and wait after each
    line for a line on stdin (the parent's word to go on, see
    :class:`SteppedChild`); once stdin ends, run free.
    """
    marks = _Marks(stepped)
    if stepped:
        marks.around_checkpoint_writes()
    done = 0

    def progress(_: Any) -> None:
        nonlocal done
        done += 1
        if done % PROGRESS_EVERY == 0:
            marks(str(done))

    stream.sink(progress)


def start_and_finish(source: Any) -> None:
    """Run ``source`` to its end, then write ``finished`` (a run the parent did not kill)."""
    source.start()
    sys.stdout.write("finished\n")
    sys.stdout.flush()
