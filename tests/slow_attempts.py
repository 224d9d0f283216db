"""An explain attempt that takes a while, for tests that stop a search while
its workers still have attempts queued (imported by the worker processes).
With SLOW_ATTEMPT_PIDS set, each worker leaves its pid in that folder."""

from __future__ import annotations

import os
import time
from pathlib import Path

from dtrforensics.analyses import explain as explain_module

SECONDS = 0.3


def slow_attempt(*args):
    folder = os.environ.get("SLOW_ATTEMPT_PIDS")
    if folder:
        (Path(folder) / str(os.getpid())).touch()
    time.sleep(SECONDS)
    return explain_module._attempt_in_worker(*args)
