"""Coverage of the model families people train: the table of `docs/torch.md`,
"Coverage of library models".

For each model (transformers model types from their configs, timm and
torchvision families; tiny shapes, nothing downloaded), on one intra-op thread:

- real: the step records in real mode under an independent live-storage count
  (`tests/live_count.py`), and the log's peak equals that count (with the
  simulator's rule for writes: docs/torch.md, "Memory truth");
- fake: the model built by its factory under fake mode records a log equal
  to the real one byte for byte;
- run: `torch run` (`execute`) at an evicting, hole-free budget completes with
  the simulation's decisions, live bytes equal to the engine's memory at every
  allocation check and values bitwise the plain step's. The budget is the
  lowest point of a 21-point grid from the log's floor to the peak of a DTR
  run with memory to spare at which the simulation evicts and above which
  every point of the grid completes.

A model passes when all three hold; otherwise its row gives one line of reason:
for each check that failed, the first line of its exception or what differed. Each model runs
under a time limit (--limit). Rows are kept in --state as they finish (JSON
lines) and a rerun with the same file skips the models already there, so an
interrupted run resumes. The table is printed and, for a run over every model,
written into docs/torch.md between its markers (atomically).

    python benchmarks/model_coverage.py [--only KEY ...] [--state FILE] [--no-write]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import common  # noqa: F401  (this checkout's src/ and tests/ first on the path)
import torch
from live_count import LiveBytesTracker

from dtrforensics.analyses.floor import floor
from dtrforensics.engine.replay import replay
from dtrforensics.fsutil import atomic_path
from dtrforensics.torch import record
from dtrforensics.torch.execute import execute
from dtrforensics.torch.named import hf_shape
from dtrforensics.torch.recorder import constants_of
from dtrforensics.torch.spec import build, model_error
from dtrforensics.trace.parser import parse_file

DOC = common.ROOT / "docs" / "torch.md"
BEGIN, END = "<!-- model-coverage:begin -->", "<!-- model-coverage:end -->"
# One tiny shape for every transformers model type (the keys its config has):
# 1-2 layers 32 wide, 4 heads of 8, 2 key-value heads, 4 experts of which 2 per
# token, a 128-token vocabulary; 32-pixel images in 8-pixel patches.
TINY = {"num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 128, "max_position_embeddings": 64,
        "encoder_layers": 1, "decoder_layers": 1, "num_layers": 2, "num_decoder_layers": 1,
        "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64, "d_ff": 64, "d_kv": 8, "embedding_size": 32, "rotary_dim": 4,
        "word_embed_proj_dim": 32, "ffn_dim": 64, "hidden_dim": 64,
        "num_local_experts": 4, "num_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
        "image_size": 32, "patch_size": 8, "num_labels": 10}
TEXT = {"seq": 16, "batch": 2}
IMAGE = {"batch": 2, "image_size": 32, "num_classes": 10}
# (key, family, spec, options beyond the tiny shape)
MODELS = [
    ("gpt_neo", "decoder", "hf:gpt_neo", {"attention_types": [[["global", "local"], 1]]}),
    *[(t, "decoder", f"hf:{t}", {}) for t in (
        "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi", "phi3", "gpt2",
        "gpt_neox", "gptj", "opt", "bloom", "falcon", "stablelm", "starcoder2", "olmo", "olmo2",
        "cohere", "codegen", "granite", "biogpt", "xglm")],
    *[(t, "encoder", f"hf:{t}", {}) for t in (
        "bert", "roberta", "distilbert", "albert", "electra", "deberta-v2", "xlm-roberta",
        "mpnet", "megatron-bert", "modernbert")],
    *[(t, "encoder-decoder", f"hf:{t}", {}) for t in ("t5", "bart", "mbart", "pegasus", "marian")],
    *[(t, "mixture-of-experts", f"hf:{t}", {}) for t in ("mixtral", "qwen2_moe", "olmoe")],
    ("whisper", "audio", "hf:whisper", {}),
    ("wav2vec2", "audio", "hf:wav2vec2", {"conv_dim": [32, 32], "conv_kernel": [10, 3],
                                          "conv_stride": [5, 2], "num_feat_extract_layers": 2,
                                          "num_conv_pos_embedding_groups": 4}),
    *[(t, "vision", f"hf:{t}", {}) for t in ("vit", "deit", "beit", "dinov2")],
    ("convnext", "vision", "hf:convnext", {"hidden_sizes": [8, 16], "depths": [1, 1]}),
    ("swin", "vision", "hf:swin", {"batch": 1, "image_size": 56, "patch_size": 4, "embed_dim": 16,
                                   "depths": [1, 1], "num_heads": [2, 4], "window_size": 7}),
    ("resnet", "vision", "hf:resnet", {"hidden_sizes": [8, 16, 32, 64], "depths": [1, 1, 1, 1],
                                       "embedding_size": 8}),
    ("timm:vit", "timm", "timm:vit_tiny_patch16_224", {"depth": 2, "patch_size": 8, "embed_dim": 32,
                                                       "num_heads": 2}),
    ("timm:convnext", "timm", "timm:convnext_atto", {"image_size": 64, "depths": (1, 1, 1, 1),
                                                     "dims": (8, 16, 32, 64)}),
    ("timm:resnet", "timm", "timm:resnet10t", {}),
    ("torchvision:resnet18", "torchvision", "torchvision:resnet18", {}),
    ("torchvision:mobilenet", "torchvision", "torchvision:mobilenet_v3_small", {}),
    ("torchvision:shufflenet", "torchvision", "torchvision:shufflenet_v2_x0_5", {}),
]
CHECKS = ("real", "fake", "peak", "run")
REASON = 140     # characters of each failing check's reason


@dataclass
class Row:
    key: str
    family: str
    spec: str
    real: bool | None = None       # recorded in real mode
    fake: bool | None = None       # fake log equal to the real one
    peak: bool | None = None       # log peak equal to the live count
    run: bool | None = None        # torch run faithful at an evicting budget
    budget: int | None = None
    evictions: int | None = None
    seconds: float = 0.0
    reason: str | None = None

    @property
    def passed(self) -> bool:
        return all(getattr(self, c) for c in CHECKS)

    def fail(self, reason: str) -> None:
        """Add one check's reason (its first line, shortened): one line in all."""
        part = reason.splitlines()[0]
        part = part if len(part) <= REASON else part[:REASON - 3] + "..."
        self.reason = f"{self.reason}; {part}" if self.reason else part


def options_of(spec: str, extra: dict) -> dict:
    """The build options of a row: the tiny shape (the keys the config has) and
    the row's own, batch and sequence or image size."""
    if spec.startswith("hf:"):
        shape = {**hf_shape(spec[3:], TINY), **extra}
        sizes = {k: shape.pop(k) for k in ("batch", "seq") if k in shape}
        return {**TEXT, **shape, **sizes}
    return {**IMAGE, **extra}


def built(spec: str, options: dict, fake: bool = False):
    torch.manual_seed(0)
    return build(spec, fake=fake, **options)


def evicting_budget(program) -> tuple[int, int]:
    """(budget, evictions): the lowest point of the grid where the simulation
    evicts and above which every point completes; `LookupError` if none."""
    least = floor(program).floor
    top = replay(program, budget=1 << 62).summary.peak_memory
    grid = [least + (top - least) * i // 20 for i in range(21)]
    chosen = None
    for budget in reversed(grid):
        summary = replay(program, budget=budget).summary
        if summary.outcome != "ok":
            break
        if summary.evictions:
            chosen = (budget, summary.evictions)
    if chosen is None:
        raise LookupError(f"no evicting budget of the grid completes: at {budget:,} B the "
                          f"simulation ends {summary.outcome} with {summary.evictions:,} evictions")
    return chosen


def check_real(row: Row, spec: str, options: dict, folder: Path) -> Path | None:
    model, batch, loss_fn = built(spec, options)
    with LiveBytesTracker(constants_of(model, batch)) as tracker:
        summary = record(model, batch, loss_fn, folder / "real.log")
    row.real = True
    row.peak = summary.peak == tracker.versioned_peak
    if not row.peak:
        row.fail(f"log peak {summary.peak:,} B, live count {tracker.versioned_peak:,} B")
    return folder / "real.log"


def check_fake(row: Row, spec: str, options: dict, folder: Path, real: Path) -> None:
    record(*built(spec, options, fake=True), folder / "fake.log", fake=True)
    row.fake = (folder / "fake.log").read_bytes() == real.read_bytes()
    if not row.fake:
        row.fail("fake log differs from the real one")


def check_run(row: Row, spec: str, options: dict, real: Path) -> None:
    row.budget, row.evictions = evicting_budget(parse_file(real))
    result = execute(*built(spec, options), budget=row.budget)
    reason = result.mismatch()
    row.run = reason is None and result.outcome == "ok"
    if not row.run:
        row.fail(f"run: {reason or result.outcome}")


def _guarded(row: Row, check: str, fn, *args):
    """`fn(*args)`; an exception marks `check` failed, its first line the reason."""
    try:
        return fn(*args)
    except Exception as exc:           # a model's failure is a row, not the end of the table
        setattr(row, check, False)
        row.fail(f"{check}: {model_error(exc)}")
        return None


def check(key: str, family: str, spec: str, extra: dict, limit: int = 0) -> Row:
    """One row of the table: every check of one model, on one thread, within
    `limit` seconds (0: none)."""
    row, start, threads = Row(key, family, spec), time.perf_counter(), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory(prefix="dtrf-coverage-") as tmp, _time_limit(limit):
            options = _guarded(row, "real", options_of, spec, extra)
            real = None if options is None else _guarded(
                row, "real", check_real, row, spec, options, Path(tmp))
            if real is not None:
                _guarded(row, "fake", check_fake, row, spec, options, Path(tmp), real)
                _guarded(row, "run", check_run, row, spec, options, real)
    except TimeoutError:
        row.fail(f"over the time limit of {limit} s")
    finally:
        torch.set_num_threads(threads)
    row.seconds = round(time.perf_counter() - start, 1)
    return row


@contextlib.contextmanager
def _time_limit(seconds: int):
    def expire(*_):
        raise TimeoutError
    if not seconds:
        yield
        return
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _mark(value: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "-"}[value]


def table(rows: list[Row]) -> str:
    """The Markdown table, then the pass count."""
    lines = ["| model | family | spec | real | peak = live | fake = real | run | budget (evictions) "
             "| s | reason |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        budget = f"{r.budget:,} ({r.evictions:,})" if r.budget is not None else ""
        reason = (r.reason or "").replace("|", "\\|")
        lines.append(f"| {r.key} | {r.family} | `{r.spec}` | {_mark(r.real)} | {_mark(r.peak)} "
                     f"| {_mark(r.fake)} | {_mark(r.run)} | {budget} | {r.seconds:.1f} | {reason} |")
    passed = sum(r.passed for r in rows)
    lines += ["", f"{passed} of {len(rows)} pass ({100 * passed / max(len(rows), 1):.0f}%)."]
    return "\n".join(lines)


def write_doc(text: str, doc: Path = DOC) -> None:
    """Put `text` between the markers of `doc`, atomically."""
    old = doc.read_text(encoding="utf-8")
    if BEGIN not in old or END not in old:
        raise SystemExit(f"{doc} has no {BEGIN} ... {END} markers")
    head, _, rest = old.partition(BEGIN)
    _, _, tail = rest.partition(END)
    with atomic_path(doc) as tmp:
        tmp.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}", encoding="utf-8")


def _resumed(state: Path | None) -> dict[str, Row]:
    if state is None or not state.exists():
        return {}
    rows = (json.loads(line) for line in state.read_text(encoding="utf-8").splitlines() if line)
    return {r["key"]: Row(**r) for r in rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", help="these keys only (the docs are not written)")
    ap.add_argument("--state", type=Path, help="JSON lines of finished rows: reused, appended")
    ap.add_argument("--limit", type=int, default=180, help="seconds per model (0: none)")
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    args = ap.parse_args()
    done, rows, start = _resumed(args.state), [], time.perf_counter()
    for key, family, spec, extra in MODELS:
        if args.only and key not in args.only:
            continue
        row = done.get(key) or check(key, family, spec, extra, args.limit)
        if key not in done and args.state is not None:
            with args.state.open("a", encoding="utf-8") as f:
                f.write(json.dumps(asdict(row)) + "\n")
        print(f"{key:24} {'pass' if row.passed else 'FAIL'} {row.seconds:6.1f} s  {row.reason or ''}",
              flush=True)
        rows.append(row)
    text = table(rows)
    print(text)
    print(f"{time.perf_counter() - start:.0f} s wall")
    if not args.only and not args.no_write:
        write_doc(text)
        print(f"written into {DOC}")


if __name__ == "__main__":
    main()
