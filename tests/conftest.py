import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from public import traces_dir  # noqa: E402

# A replay that breaks an invariant (docs/semantics.md §13) raises in tests,
# here and in the CLI subprocesses the tests start.
os.environ.setdefault("DTRF_STRICT_INVARIANTS", "1")

# Commands run by the tests (CLI in subprocesses) find the public traces too.
if "DTRF_TRACES" not in os.environ and traces_dir() is not None:
    os.environ["DTRF_TRACES"] = str(traces_dir())
