"""Where a replay's time goes inside the compiled kernel, by function, with `perf`.

    python benchmarks/kernel_profile.py TRACE RATIO [--policy dtr] [--repeat 1]
                                        [--top 20]

`perf record` sees numba's code as anonymous memory. This script compiles the
kernel afresh into a temporary cache folder (about two minutes: functions
loaded from numba's cache keep no object file to read symbols from), writes a
perf map (`/tmp/perf-PID.map`: each compiled function's address and size,
read with `nm` from its library's object file), replays the point `--repeat`
times under `perf record`, and prints the share of samples per function.
Functions inlined into their callers are counted in the caller; code outside
the kernel's libraries (numba's runtime helpers) shows as hex addresses. The
temporary cache, the perf map and the samples are removed at the end.
Needs `perf` (Debian's linux-perf) and `nm` (binutils). Not part of
`make bench`: it measures no ratio, it shows where to look.
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common  # noqa: F401  (this checkout's src/ first on the path)

if __name__ == "__main__" and "NUMBA_CACHE_DIR" not in os.environ:
    os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="dtrf-profile-cache-")
    atexit.register(shutil.rmtree, os.environ["NUMBA_CACHE_DIR"], True)


from dtrforensics.engine import kernel as K
from dtrforensics.engine import regions as R
from dtrforensics.engine import walks as W
from dtrforensics.engine.replay import replay
from dtrforensics.trace import load_trace


def function_name(symbol: str) -> str:
    """`kernel._absorb` from numba's mangled symbol (length-prefixed names after
    `_ZN`); the Python wrapper and the C callable get a `python:`/`cfunc:` prefix."""
    prefix = "cfunc:" if symbol.startswith("cfunc") else ""
    at = symbol.find("_ZN")
    if at < 0:
        return symbol[:60]
    parts, i = [], at + 3
    while i < len(symbol) and symbol[i].isdigit():
        j = i
        while symbol[j].isdigit():
            j += 1
        k = int(symbol[i:j])
        parts.append(symbol[j:j + k])
        i = j + k
    if parts and parts[0] == "cpython":
        prefix, parts = "python:", parts[1:]
    return prefix + ".".join(parts[-2:])


def perf_map(path: Path) -> int:
    """Write the perf map of every compiled kernel function; returns how many."""
    rows = set()
    with tempfile.TemporaryDirectory() as tmp:
        for module, attr in [(m, a) for m in (K, R, W) for a in dir(m)]:
            dispatcher = getattr(module, attr)
            for cres in getattr(dispatcher, "overloads", {}).values():
                try:
                    obj = cres.library._get_compiled_object()
                except RuntimeError:
                    continue  # loaded from a cache: no object file
                o = Path(tmp) / f"{module.__name__}.{attr}.o"
                o.write_bytes(obj)
                symbols = {}
                for line in subprocess.run(["nm", "-S", "--defined-only", str(o)],
                                           capture_output=True, text=True).stdout.splitlines():
                    parts = line.split()
                    if len(parts) == 4 and parts[2] in "tT":
                        symbols[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
                entry = cres.fndesc.llvm_func_name
                if entry not in symbols:
                    continue
                base = cres.library.get_pointer_to_function(entry) - symbols[entry][0]
                for symbol, (offset, size) in symbols.items():
                    rows.add((base + offset, size, function_name(symbol)))
    path.write_text("".join(f"{a:x} {s:x} {n}\n" for a, s, n in sorted(rows)))
    return len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("ratio", type=float)
    ap.add_argument("--policy", default="dtr")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    for tool in ("perf", "nm"):
        if shutil.which(tool) is None:
            sys.exit(f"error: {tool} is not installed (perf: Debian's linux-perf; nm: binutils)")
    program = load_trace(args.trace)
    print("compiling the kernel into a fresh cache (about two minutes)...", file=sys.stderr)
    replay(program, ratio=1.0, policy=args.policy)
    map_path = Path(f"/tmp/perf-{os.getpid()}.map")
    n = perf_map(map_path)
    atexit.register(map_path.unlink, True)
    samples = tempfile.mkdtemp(prefix="dtrf-perf-")
    atexit.register(shutil.rmtree, samples, True)
    data = Path(samples) / "perf.data"
    rec = subprocess.Popen(["perf", "record", "-F", "2000", "-p", str(os.getpid()), "-o",
                            str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    started = time.process_time()
    for _ in range(args.repeat):
        replay(program, ratio=args.ratio, policy=args.policy)
    cpu = time.process_time() - started
    rec.send_signal(2)
    rec.wait()
    report = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort",
                             "symbol", "--stdio"], capture_output=True, text=True).stdout
    print(f"{args.trace} {args.ratio} {args.policy}: {args.repeat} replay(s), {cpu:.2f} s CPU; "
          f"{n} kernel symbols mapped")
    shown = 0
    for line in report.splitlines():
        if line.startswith("#") or "%" not in line or shown >= args.top:
            continue
        share, _, rest = line.strip().partition(" ")
        symbol = re.split(r"\s{2,}", rest.replace("[.]", "").strip())[0]
        print(f"{share:>8}  {symbol}")
        shown += 1


if __name__ == "__main__":
    main()
