"""Runs a kubeconfig exec credential plugin with a hard time limit (a script, not imported).

    python -I exec_guard.py SECONDS -- COMMAND [ARG...]

The kubernetes client runs exec plugins itself and waits for them without a limit; a plugin that
hangs would block a run forever, and a thread abandoned after a timeout would leave the plugin and
its children running. `kubeconfigs` makes the client run this guard in the plugin's place.

Invariants:
- The plugin runs in its own process group with the guard's stdin, stdout, stderr, environment and
  working directory, so it sees exactly what the client would have given it. If the guard's stdin
  is a terminal, the plugin's group is made the terminal's foreground group while it runs, so an
  interactive plugin can still prompt.
- After SECONDS, or when the guard is told to stop (SIGTERM, SIGINT, SIGHUP), the whole group is
  SIGKILLed and reaped before the guard exits. Processes the plugin leaves in its group when it
  exits are stopped too: they would hold its output pipe open, and the client reads it to the end.
  A timeout exits 124 with one line on stderr saying so; otherwise the plugin's exit status.
- Standard library only, run by path with `-I`, so it starts fast and does not depend on how
  fleetplan was installed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from types import FrameType

TIMED_OUT = 124
NOT_STARTED = 127


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: exec_guard.py SECONDS -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    seconds, command = float(argv[1]), argv[3:]
    try:
        child = subprocess.Popen(command, process_group=0)
    except OSError as err:
        print(f"exec plugin {command[0]!r} cannot be started: {err.strerror}", file=sys.stderr)
        return NOT_STARTED

    def stop(signum: int, _frame: FrameType | None) -> None:
        _kill_group(child)
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)
    terminal = _give_terminal(child.pid)
    try:
        return child.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        _kill_group(child)
        print(f"exec plugin {command[0]!r} did not finish within {seconds:g}s; "
              "it and the processes it started were stopped", file=sys.stderr)
        return TIMED_OUT
    finally:
        _kill_group(child)  # whatever it left running in its group
        if terminal is not None:
            _take_terminal(*terminal)


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        child.wait()


def _give_terminal(pgid: int) -> tuple[int, int] | None:
    """Make `pgid` the foreground group of stdin's terminal; (fd, previous group) to restore."""
    if not os.isatty(0):
        return None
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a background group may not set it otherwise
    try:
        previous = os.tcgetpgrp(0)
        os.tcsetpgrp(0, pgid)
    except OSError:
        return None
    finally:
        signal.signal(signal.SIGTTOU, old)
    return 0, previous


def _take_terminal(fd: int, pgid: int) -> None:
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(fd, pgid)
    finally:
        signal.signal(signal.SIGTTOU, old)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
