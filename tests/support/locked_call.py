"""A process for a test to kill mid-call: it holds an output's lock and sleeps inside an isolated call.

    python locked_call.py OUTPUT

It says ``calling`` once the lock is held, then forks the call's child.
"""

import sys
import time

from envace_gym.core.limits import run_isolated
from envace_gym.play.records import OutputLock

with OutputLock(sys.argv[1]):
    print("calling", flush=True)
    run_isolated(lambda: time.sleep(120), None, 1 << 30)
