"""Bounds on what one step may cost: time and memory per tool call and per user turn, sizes.

Python code (tool code, user code) is bounded in its own thread by a watchdog that
raises :class:`BudgetExceeded` in it once the budget is spent; the exception is
delivered between bytecodes, so a single C-level operation (``9**9**9``) cannot be
cut short that way. Tools a suite declares stateless (arithmetic, expression
evaluation) therefore run in a forked child process, killed when over budget in
time or memory: their calls change no world state, so nothing needs to come back
but the response. The child dies with the thread that forked it (:func:`die_with_parent`).

Standard library only: the MCP server guard, run with ``python -I -S``, loads this file by its path.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import resource
import select
import signal
import sys
import threading
import time
from dataclasses import dataclass
from itertools import count


@dataclass(frozen=True)
class Limits:
    """Per-episode bounds (``gym.make(..., limits=Limits(...))``).

    ``call_seconds``: one tool call (``None``: unbounded); ``call_memory_bytes``: the
    memory a stateless tool's child process may map beyond its parent's (it reuses what the
    parent had freed first, uncounted); ``user_seconds``: one user turn,
    its user-tool calls included; ``argument_chars``: a call's arguments as JSON text;
    ``response_chars``: a tool response (real or rehearsed) as JSON text. (The
    user-tool calls one agent message may trigger are capped by the users
    themselves: ``user_kwargs={"max_calls_per_message": N}``, 8 by default.)
    """

    call_seconds: float | None = 10.0
    call_memory_bytes: int = 1 << 30
    user_seconds: float | None = 30.0
    argument_chars: int = 64 * 1024
    response_chars: int = 256 * 1024


class BudgetExceeded(BaseException):
    """Raised in code that ran past its time budget.

    A ``BaseException``, so that tool code catching ``Exception`` cannot swallow it.
    """


class _Watchdog:
    """One daemon thread that raises :class:`BudgetExceeded` in threads past their deadline.

    Arming is a dict insert under a lock: the thread is woken only when a new deadline
    comes before its next planned wake-up, so bounded calls do not hand it the GIL.
    """

    POLL = 1.0  # seconds between wake-ups with nothing due sooner

    def __init__(self):
        self._armed: dict[int, tuple[int, float]] = {}  # token -> (thread id, deadline)
        self._tokens = count()
        self._wake = threading.Condition()
        self._wakes_at = 0.0
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float) -> int:
        token, deadline = next(self._tokens), time.monotonic() + seconds
        with self._wake:
            self._armed[token] = (threading.get_ident(), deadline)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="envace-watchdog", daemon=True)
                self._thread.start()
            elif deadline < self._wakes_at:
                self._wake.notify()
        return token

    def disarm(self, token: int) -> bool:
        """Stop watching ``token``; False when it had already fired."""
        with self._wake:
            return self._armed.pop(token, None) is not None

    def _run(self) -> None:
        with self._wake:
            while True:
                now = time.monotonic()
                for token, (thread_id, deadline) in list(self._armed.items()):
                    if deadline <= now:
                        del self._armed[token]
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(
                            ctypes.c_ulong(thread_id), ctypes.py_object(BudgetExceeded)
                        )
                self._wakes_at = min((d for _, d in self._armed.values()), default=now + self.POLL)
                self._wake.wait(max(self._wakes_at - now, 0.001))


_WATCHDOG = _Watchdog()

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
# resolved now, not in a forked child: a child of a threaded process must not enter the dynamic loader
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def die_with_parent(parent: int, sig: int = signal.SIGKILL, subreaper: bool = False) -> bool:
    """Ask the kernel for ``sig`` when the thread that started this process dies (Linux
    ``PR_SET_PDEATHSIG``; elsewhere nothing), and with ``subreaper`` to adopt every orphaned descendant
    (``PR_SET_CHILD_SUBREAPER``). False when ``parent`` had already died before the request took effect."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, sig)
        if subreaper:
            _PRCTL(PR_SET_CHILD_SUBREAPER, 1)
    return os.getppid() == parent


def run_bounded(fn, seconds: float | None):
    """``fn()`` in this thread, raising :class:`BudgetExceeded` once it runs past ``seconds``."""
    if seconds is None:
        return fn()
    token = _WATCHDOG.arm(seconds)
    try:
        result = fn()
    finally:
        if not _WATCHDOG.disarm(token):
            # it fired: the exception may be pending rather than raised; clear it, then say so
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.get_ident()), None)
            raise BudgetExceeded
    return result


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def run_isolated(fn, seconds: float | None, memory_bytes: int):
    """``fn()`` in a forked child, its result pickled back; the child is killed past the budget.

    Raises :class:`BudgetExceeded` when it runs out of time, ``MemoryError`` when it
    runs out of memory. Falls back to :func:`run_bounded` where ``fork`` is missing.
    """
    if not hasattr(os, "fork") or not os.path.exists("/proc/self/statm"):
        return run_bounded(fn, seconds)
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: compute, send, and leave without running the parent's exit handlers
        status = 0
        try:
            os.close(read_end)
            if not die_with_parent(parent):  # killed before we asked: no one waits for the answer
                raise SystemExit
            limit = _address_space() + memory_bytes
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            try:
                payload = pickle.dumps(("ok", fn()))
            except MemoryError:
                payload = pickle.dumps(("memory", None))
            except Exception as e:
                payload = pickle.dumps(("raised", f"{type(e).__name__}: {e}"))
            view = memoryview(payload)
            while view:
                view = view[os.write(write_end, view) :]
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    chunks, deadline = [], None if seconds is None else time.monotonic() + seconds
    try:
        while True:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                os.kill(pid, signal.SIGKILL)
                raise BudgetExceeded
            ready, _, _ = select.select([read_end], [], [], wait)
            if ready:
                chunk = os.read(read_end, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    if not chunks:
        raise MemoryError("the isolated call died without an answer (out of memory?)")
    kind, value = pickle.loads(b"".join(chunks))  # our own child's bytes, not model output
    if kind == "memory":
        raise MemoryError("the isolated call ran out of memory")
    if kind == "raised":
        raise RuntimeError(value)
    return value
