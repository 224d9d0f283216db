"""Cost of recording PyTorch training steps (`dtrforensics.torch`).

1. Overhead of `measured` recording against a plain training step (forward,
   loss, backward) of the same model, both in this process: CPU time of the
   process (fair on a shared, loaded machine) and wall time, each the best of
   --repeat interleaved runs, after one warm-up of each. Goal: at most 3x.
2. Models far larger than this machine (2 cores, 24 GiB) recorded in fake
   mode, each in a fresh process: wall time, CPU time and peak RSS, plus the
   log's peak memory, floor (and, where the old parameter versions an
   optimizer leaves put it above the peak, by how much) and op count. `gpt-1b`: the GPT-style model of
   about a billion parameters; `llama-7b`: a Llama-2-7B-shaped transformers
   model (32 layers, 4096 wide, MLP 11008, 32 heads, vocabulary 32000) on one
   sequence of 512 tokens, bf16 autocast and AdamW, as
   `dtrf torch record hf:llama --set ... --batch 1 --seq 512 --autocast bf16
   --optimizer adamw --fake` records it.

    python benchmarks/torch_record.py [--repeat N] [--skip-fake]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common  # noqa: F401  (this checkout's src/ first on the path)
import torch

from dtrforensics.torch import record
from dtrforensics.torch.spec import build

LLAMA_7B = {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 11008,
            "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000}
# Fake-mode points: spec, factory options, record options.
FAKE_POINTS = {
    "gpt-1b": ("zoo:gpt-1b", {}, {}),
    "llama-7b": ("hf:llama", {"batch": 1, "seq": 512, **LLAMA_7B},
                 {"optimizer": "adamw", "autocast": "bf16"}),
}
# Sizes large enough that the step's compute, not Python, dominates.
OVERHEAD_POINTS = (
    ("zoo:gpt", {"batch": 8, "seq": 128, "layers": 4, "width": 256, "heads": 8, "vocab": 4096}),
    ("zoo:resnet", {"batch": 32, "image": 32, "blocks": 2, "width": 16}),
)


def clocks() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


def plain_step(model, batch, loss_fn) -> None:
    inputs, targets = batch
    loss_fn(model(inputs), targets).backward()


def overhead(spec: str, sizes: dict, repeat: int, folder: Path) -> dict:
    torch.manual_seed(0)
    model, batch, loss_fn = build(spec, **sizes)
    best = {"plain": [float("inf")] * 2, "measured": [float("inf")] * 2}
    for i in range(repeat + 1):
        for mode in best:
            model.zero_grad(set_to_none=True)
            cpu0, wall0 = clocks()
            if mode == "plain":
                plain_step(model, batch, loss_fn)
            else:
                record(model, batch, loss_fn, folder / "m.log", cost="measured")
            cpu1, wall1 = clocks()
            if i:   # the first round warms up both
                best[mode] = [min(best[mode][0], cpu1 - cpu0), min(best[mode][1], wall1 - wall0)]
    return {"spec": spec, "sizes": sizes,
            "plain_cpu_s": best["plain"][0], "plain_wall_s": best["plain"][1],
            "measured_cpu_s": best["measured"][0], "measured_wall_s": best["measured"][1],
            "ratio_cpu": best["measured"][0] / best["plain"][0],
            "ratio_wall": best["measured"][1] / best["plain"][1]}


def peak_rss_mib() -> float:
    """This process's peak resident set. `ru_maxrss` would not do: a child started
    by fork and exec inherits its parent's high-water mark; the kernel's VmHWM is
    the current address space's own."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) / 1024


def fake_child(name: str, out: str) -> None:
    spec, sizes, options = FAKE_POINTS[name]
    cpu0, wall0 = clocks()
    torch.manual_seed(0)
    model, batch, loss_fn = build(spec, fake=True, **sizes)
    params = sum(p.numel() for p in model.parameters())
    built = clocks()
    summary = record(model, batch, loss_fn, out, fake=True, **options)
    cpu1, wall1 = clocks()
    print(json.dumps({"parameters": params, "peak_bytes": summary.peak, "ops": summary.ops,
                      "floor_bytes": summary.floor.floor,
                      "evictable_share": summary.floor.evictable_share,
                      "above_peak_bytes": summary.floor.above_peak,
                      "old_version_bytes": summary.floor.old_version_bytes,
                      "build_wall_s": built[1] - wall0, "record_wall_s": wall1 - built[1],
                      "record_cpu_s": cpu1 - built[0], "total_cpu_s": cpu1 - cpu0,
                      "total_wall_s": wall1 - wall0,
                      "max_rss_mib": peak_rss_mib()}))


def fake_point(name: str, folder: Path) -> dict:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--fake-child", name, str(folder / f"{name}.log")],
                          capture_output=True, text=True, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_wall_s"] = time.perf_counter() - start
    return result


def _floor_note(r: dict) -> str:
    """The floor beside the peak: the share eviction can free, or how far above the
    peak the old versions of parameters written in place put it."""
    if not r["above_peak_bytes"]:
        return f"{r['evictable_share']:.1%} evictable"
    return (f"{r['above_peak_bytes'] / 2**30:.2f} GiB above the peak: old versions of "
            f"{r['old_version_bytes'] / 2**30:.2f} GiB pinned")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-fake", action="store_true")
    parser.add_argument("--fake-child", nargs=2, metavar=("NAME", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fake_child:
        fake_child(*args.fake_child)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print("recording overhead, measured costs vs a plain step (best of "
              f"{args.repeat}; goal <= 3x):")
        for spec, sizes in OVERHEAD_POINTS:
            r = overhead(spec, sizes, args.repeat, folder)
            print(f"  {spec:<11} plain {r['plain_cpu_s']:.3f} s cpu / {r['plain_wall_s']:.3f} s wall, "
                  f"recorded {r['measured_cpu_s']:.3f} / {r['measured_wall_s']:.3f} s: "
                  f"{r['ratio_cpu']:.2f}x cpu, {r['ratio_wall']:.2f}x wall")
        if not args.skip_fake:
            print("fake mode, each in a fresh process:")
            for name in FAKE_POINTS:
                r = fake_point(name, folder)
                print(f"  {name}: {r['parameters'] / 1e9:.2f} B parameters; log peak "
                      f"{r['peak_bytes'] / 2**30:.2f} GiB, floor {r['floor_bytes'] / 2**30:.2f} GiB "
                      f"({_floor_note(r)}), {r['ops']:,} ops; build "
                      f"{r['build_wall_s']:.1f} s + record {r['record_wall_s']:.1f} s wall "
                      f"({r['record_cpu_s']:.1f} s cpu to record, {r['total_cpu_s']:.1f} s in all, "
                      f"{r['process_wall_s']:.1f} s with start-up), peak RSS {r['max_rss_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
