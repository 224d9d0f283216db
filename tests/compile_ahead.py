"""Compile ahead of the suite, into numba's cache, the engine functions that
tests call from Python with their own argument types (walks.rebuild,
shared_rebuilds, mask_rebuilds, walk, through tests/region_walks.py): the kernel's
compile makes them only for the kernel's types, and a worker compiling them
in the suite spent about 30 s of CPU. `make test`'s install runs this on the
core the kernel's compile leaves idle while the extras install. It needs the
core package only, and it never fails the install: what it could not compile,
the suite compiles.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    started = time.perf_counter()
    try:
        from region_walks import known_but_not_walks, masked_and_plain, shared_and_plain

        from dtrforensics.engine.replay import replay
        from dtrforensics.synth.generator import SynthSpec, generate
        from dtrforensics.trace import parse_lines

        spec = SynthSpec(kind="mixed", depth=24, width=2, view_prob=0.5, seed=1)
        program = parse_lines(generate(spec).splitlines(), name="mixed-1")
        peak = replay(program, ratio=1.0).summary.peak
        masked_and_plain(program, peak // 4, trials=1)
        shared_and_plain(program, peak // 4)
        known_but_not_walks(program, peak // 4)
    except Exception as exc:   # noqa: BLE001 - never fails the install: the suite compiles
        print(f"dtrforensics: the tests' engine calls were not compiled ahead ({exc!r}); "
              "the suite compiles them", file=sys.stderr)
        return 0
    print(f"dtrforensics: the tests' engine calls compiled ahead in "
          f"{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
