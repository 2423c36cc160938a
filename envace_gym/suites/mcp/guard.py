"""Launch an MCP server so that it cannot outlive the process that started it (stdlib only).

    python -I -S guard.py PARENT_PID LOG_PATH COMMAND [ARG ...]

The guard leads its own process group (the SDK starts it in a new session), asks the
kernel for SIGTERM when its parent thread dies (Linux ``PR_SET_PDEATHSIG``) and to be a
child subreaper (``PR_SET_CHILD_SUBREAPER``: every orphaned descendant, even one that left
the group with ``setsid()``, becomes its child), runs the server as its child and waits.
On SIGTERM, SIGHUP or SIGINT, and when the server exits, it kills every descendant it can
find through ``/proc``, then its whole group: the server and anything the server started.
The server's stderr (its tracebacks) reaches the guard through a pipe and is appended to
``LOG_PATH``, not the user's terminal; past ``LOG_CAP`` bytes the log becomes ``LOG_PATH.1``
(replacing the older one) and a new one starts. A command that cannot start is still said
on the guard's own stderr. The two requests are :func:`envace_gym.core.limits.die_with_parent`,
loaded by its path (the guard runs without the package on its path).
"""

import os
import signal
import sys
import threading
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

LOG_CAP = 8 << 20
_drained = threading.Event()  # set once nothing is left to copy to the log
_drained.set()


def _descendants() -> list[int]:
    """The processes below this one, from ``/proc`` (parents before children)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, stack = [], [os.getpid()]
    while stack:
        for pid in children.get(stack.pop(), []):
            out.append(pid)
            stack.append(pid)
    return out


def _kill_all(*_):
    if sys.platform.startswith("linux"):
        for _ in range(5):  # a killed parent's children reparent to this subreaper: look again
            found = _descendants()
            if not found:
                break
            for pid in found:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                while os.waitpid(-1, os.WNOHANG)[0]:  # reap, so the next pass sees no zombies
                    pass
            except ChildProcessError:
                pass
    _drained.wait(1.0)  # what they wrote last reaches the log
    os.killpg(0, signal.SIGKILL)


def _copy_to_log(source: int, log: str) -> None:
    """Append what comes out of ``source`` to ``log``, rotated at ``LOG_CAP``, until every writer
    has closed it. It is read whatever happens to the log, so the server never blocks on a full
    pipe; what cannot be written is dropped. The log is opened for each write, so guards of the
    same command that share it all follow its rotation."""
    while data := os.read(source, 1 << 16):
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, data)
                full = os.fstat(fd).st_size >= LOG_CAP
            finally:
                os.close(fd)
            if full:
                os.replace(log, log + ".1")
        except OSError:
            pass
    _drained.set()


def _limits():
    """The package's ``limits`` module (standard library only), loaded from its file."""
    spec = spec_from_file_location("envace_gym_limits", Path(__file__).resolve().parents[2] / "core" / "limits.py")
    module = module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up by name
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parent, log, command = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    if not _limits().die_with_parent(parent, signal.SIGTERM, subreaper=True):  # the parent died first
        sys.exit(1)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _kill_all)
    source, sink = os.pipe()
    _drained.clear()
    pid = os.fork()
    if pid == 0:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        terminal = os.dup(2)
        os.set_inheritable(terminal, False)
        os.dup2(sink, 2)
        try:
            os.execvp(command[0], command)
        except OSError as e:
            os.write(terminal, f"cannot start the MCP server {command[0]!r}: {e}\n".encode())
            os._exit(127)
    os.close(sink)
    threading.Thread(target=_copy_to_log, args=(source, log), daemon=True).start()
    os.waitpid(pid, 0)
    _kill_all()


if __name__ == "__main__":
    main()
