"""The kernel as plain Python (NUMBA_DISABLE_JIT=1) agrees with the oracle on
small random traces: the compiled and the interpreted kernel are one program,
and the interpreted one can be stepped through in a debugger."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    from hypothesis import given, settings, strategies as st
    from test_engine_vs_oracle import POLICIES, random_logs, test_engine_agrees_with_oracle
    from dtrforensics.engine import kernel

    assert not hasattr(kernel.run_slice, "py_func"), "the kernel is still compiled"
    check = settings(max_examples=40, deadline=None, derandomize=True, database=None)(
        given(program=random_logs(), fraction=st.floats(0.05, 1.1),
              policy=st.sampled_from(POLICIES))(
            test_engine_agrees_with_oracle.hypothesis.inner_test))
    check()
    print("agreed")
""")


def test_the_interpreted_kernel_agrees_with_the_oracle():
    tests = Path(__file__).parent
    env = dict(os.environ, NUMBA_DISABLE_JIT="1",
               PYTHONPATH=os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("agreed")
