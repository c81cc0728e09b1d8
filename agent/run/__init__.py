"""How perfctl runs a benchmark, one concern per module (agent/runner.py's Runner puts them together):

- ``environment``: the fixed-size environment every run gets (padding)
- ``control``: RunControl, the options validated once for every run of a measurement; the command's path
- ``spawn``: starting the exec gate with posix_spawn, and the spawning thread's ASLR setting
- ``started``: what a started run offers (release, wait → Exit, kill) and the one wait for its end
  (exit, --timeout, a stop that would never end)
- ``outcome``: Exit, how a run ended, built in one place from a wait status or a loop record
- ``gated``: a run started by a gate of its own (GatedProcess)
- ``looped``: runs started by the gate's loop (LoopedGate, gate.c -L)
- ``cgroup``: the cgroup runs are born in and killed through (RunCgroup)
- ``reaping``: /proc: perfctl as subreaper, killing and reaping what a run leaves behind
"""

import ctypes

# The C library, for the calls the os module lacks (personality, prctl, sched_getcpu)
libc = ctypes.CDLL(None, use_errno=True)


class RunError(Exception):
    """A run cannot be started as asked (bad command, bad option); the message is one line for the user."""
