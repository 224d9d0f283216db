"""The coverage table of library models (`benchmarks/model_coverage.py`): its
per-model check on a few models and its row format; and the config filling of
`hf:` names that the table needed (audio classifiers, heads named by a tuple,
derived config keys)."""

from __future__ import annotations

import re
import sys

import pytest

torch = pytest.importorskip("torch")
from libraries import require  # noqa: E402

require("transformers", "timm")

from dtrforensics.torch.named import hf, hf_config, hf_shape  # noqa: E402

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "benchmarks"))
import model_coverage  # noqa: E402

ROW = re.compile(r"^\| [\w:.-]+ \| [\w-]+ \| `[\w:.-]+` \| (yes|\*\*no\*\*|-) \| (yes|\*\*no\*\*|-) "
                 r"\| (yes|\*\*no\*\*|-) \| (yes|\*\*no\*\*|-) \| ([\d,]+ \([\d,]+\))? \| \d+\.\d "
                 r"\| [^\n]* \|$")


def row_of(key):
    return next(m for m in model_coverage.MODELS if m[0] == key)


@pytest.mark.parametrize("key", ["llama", "t5", "timm:vit"])
def test_each_check_of_a_row_passes_and_the_row_has_the_table_format(key):
    row = model_coverage.check(*row_of(key), limit=120)
    assert (row.real, row.peak, row.fake, row.run) == (True, True, True, True), row.reason
    assert row.passed and row.reason is None and row.evictions > 0 and row.budget > 0
    lines = model_coverage.table([row]).splitlines()
    assert ROW.match(lines[2]), lines[2]
    assert lines[-1] == "1 of 1 pass (100%)."


def test_a_failing_check_is_one_line_of_reason_in_its_row():
    row = model_coverage.check("nonesuch", "decoder", "hf:nonesuch", {})
    assert row.real is False and not row.passed
    assert row.reason.startswith("real: RecordError: unknown transformers model type")
    line = model_coverage.table([row]).splitlines()[2]
    assert ROW.match(line) and "\n" not in row.reason and line.endswith(f"{row.reason} |")


def test_the_table_goes_between_the_markers_of_the_doc_and_nothing_else_changes(tmp_path):
    doc = tmp_path / "torch.md"
    doc.write_text(f"before\n{model_coverage.BEGIN}\nold\n{model_coverage.END}\nafter\n")
    model_coverage.write_doc("| new |", doc)
    assert doc.read_text() == f"before\n{model_coverage.BEGIN}\n| new |\n{model_coverage.END}\nafter\n"


def test_an_audio_classifier_gets_a_waveform():
    model, (inputs, _), _ = hf("wav2vec2", seq=4, hidden_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=16,
                               conv_dim=[8, 8], conv_kernel=[10, 3], conv_stride=[5, 2],
                               num_feat_extract_layers=2, num_conv_pos_embedding_groups=2)
    assert type(model).__name__ == "Wav2Vec2ForSequenceClassification"
    assert inputs["input_values"].shape == (2, 4 * 320)
    assert model(**inputs).loss.ndim == 0


def test_a_head_the_library_names_by_a_tuple_is_its_first():
    model, (inputs, _), _ = hf("deit", hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=16, image_size=16, patch_size=8)
    assert type(model).__name__ == "DeiTForImageClassification"
    assert model(**inputs).loss.ndim == 0


def test_a_derived_config_key_is_left_to_its_parts():
    """Falcon computes `head_dim` from `hidden_size` and the heads: a small shape
    that has it sets the parts, and the model builds."""
    shape = hf_shape("falcon", {"hidden_size": 32, "num_attention_heads": 4, "head_dim": 8})
    assert shape == {"hidden_size": 32, "num_attention_heads": 4}
    model, _, _ = hf("falcon", **shape, num_hidden_layers=1, vocab_size=64)
    assert model.config.head_dim == 8


def test_every_special_token_id_beyond_the_smaller_vocabulary_is_cleared():
    """ModernBERT's `cls_token_id` and `sep_token_id` (50,281 and 50,282) are
    beyond a 128-token vocabulary, as its `pad_token_id` is; one given is kept."""
    config, _ = hf_config("modernbert", vocab_size=128, cls_token_id=1)
    assert (config.pad_token_id, config.sep_token_id, config.cls_token_id) == (None, None, 1)
