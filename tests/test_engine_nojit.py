"""The kernel as plain Python (NUMBA_DISABLE_JIT=1) agrees with the oracle on
small random traces: the compiled and the interpreted kernel are one program,
and the interpreted one can be stepped through in a debugger."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""
    import sys
    from hypothesis import given, settings, strategies as st
    from test_engine_vs_oracle import POLICIES, random_logs, test_engine_agrees_with_oracle
    from dtrforensics.engine import kernel, walks

    assert not hasattr(kernel.run_slice, "py_func"), "the kernel is still compiled"
    if sys.argv[1] == "masked":   # every rebuild of two or more bases takes a masked walk
        import warnings
        import numpy as np
        from region_walks import masked_and_plain
        from dtrforensics.engine.replay import replay
        from dtrforensics.synth.generator import SynthSpec, generate
        from dtrforensics.trace import parse_lines
        walks.MEMO_MIN_BASES = 1 << 40
        walks.MASK_MIN_INTERIOR = 0
        warnings.simplefilter("error", RuntimeWarning)   # no mask bit may overflow
        spec = SynthSpec(kind="mixed", depth=24, width=2, view_prob=0.5, seed=1)
        program = parse_lines(generate(spec).splitlines(), name="mixed-1")
        budget = replay(program, ratio=1.0).summary.peak // 4
        for masked, plain in masked_and_plain(program, budget, trials=3, seed=7):
            assert masked == plain
    check = settings(max_examples=40, deadline=None, derandomize=True, database=None)(
        given(program=random_logs(), fraction=st.floats(0.05, 1.1),
              policy=st.sampled_from(POLICIES))(
            test_engine_agrees_with_oracle.hypothesis.inner_test))
    check()
    print("agreed")
""")


@pytest.mark.parametrize("walks", ["as chosen", "masked"])
def test_the_interpreted_kernel_agrees_with_the_oracle(walks):
    """Also with every multi-base rebuild forced through a masked walk (the
    compiled kernel's thresholds are constants; the interpreted one reads them)."""
    tests = Path(__file__).parent
    env = dict(os.environ, NUMBA_DISABLE_JIT="1",
               PYTHONPATH=os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", SCRIPT, walks.split()[0]], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("agreed")
