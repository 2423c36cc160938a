"""Launch an MCP server so that it cannot outlive the process that started it (stdlib only).

    python -I -S guard.py PARENT_PID COMMAND [ARG ...]

The guard leads its own process group (the SDK starts it in a new session), asks the
kernel for SIGTERM when its parent thread dies (Linux ``PR_SET_PDEATHSIG``), runs the
server as its child and waits. On SIGTERM, SIGHUP or SIGINT, and when the server exits,
it kills the whole group: the server and anything the server started.
"""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def _kill_group(*_):
    os.killpg(0, signal.SIGKILL)


def main() -> None:
    parent, command = int(sys.argv[1]), sys.argv[2:]
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the request took effect
        sys.exit(1)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _kill_group)
    pid = os.fork()
    if pid == 0:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(command[0], command)
        except OSError as e:
            print(f"cannot start the MCP server {command[0]!r}: {e}", file=sys.stderr)
            os._exit(127)
    os.waitpid(pid, 0)
    _kill_group()


if __name__ == "__main__":
    main()
