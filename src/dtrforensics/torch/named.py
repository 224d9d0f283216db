"""Models named by their library: `hf:ARCH`, `timm:NAME`, `torchvision:NAME`.

Each is built from its library's own constructor with no weights (nothing is
downloaded) and comes with a standard loss and a synthetic batch, as a factory
would return it: `(model, (inputs, targets), loss_fn)`, the model in training
mode.

- `hf:ARCH`: a transformers model type (`llama`, `gpt2`, `bert`), config class
  (`LlamaConfig`) or model class (`BertForSequenceClassification`). A type or
  config picks the masked LM head where the library has one (BERT-style
  encoders, whose causal heads need `is_decoder`), else the causal LM head,
  else the sequence-to-sequence LM head (T5), else image, sequence or audio
  classification. The config starts from `HF_SMALL` (the keys it has, but
  not over a per-stage list), then the `--set` overrides (a dict updates a
  nested config); an encoder-decoder gets a decoder start token; a key the
  config does not have is an error, and a special token id the smaller vocabulary does not
  have is cleared unless given. The loss is the model's own (`labels=` in the batch): the causal LM
  loss on `input_ids` shifted, the masked LM loss on every token, or
  cross-entropy on random labels (images for an image classifier, a waveform of
  `SAMPLES_PER_TOKEN` samples per token of `seq` for an audio classifier).
- `timm:NAME`, `torchvision:NAME`: the library's factory with `--set`
  keywords passed through, cross-entropy on random labels of its classes.
"""

from __future__ import annotations

import difflib
import functools

import torch
import torch.nn.functional as F

from .recorder import RecordError
from .zoo import _default_dtype

PREFIXES = ("hf", "timm", "torchvision")
# Small shapes every `hf:` model starts from (those of its config's keys it has):
# two layers 256 wide, GQA where the config knows key-value heads, and no KV
# cache (a training step has no use for one).
HF_SMALL = {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024,
            "max_position_embeddings": 512, "use_cache": False,
            # encoder-decoders name them per side (T5, BART, Whisper)
            "encoder_layers": 2, "decoder_layers": 2, "num_decoder_layers": 2,
            "encoder_attention_heads": 4, "decoder_attention_heads": 4,
            "encoder_ffn_dim": 512, "decoder_ffn_dim": 512, "d_ff": 512}
HF_TASKS = (("ForCausalLM", "causal"), ("LMHeadModel", "causal"), ("ForMaskedLM", "masked"),
            ("ForConditionalGeneration", "masked"),
            ("ForSequenceClassification", "sequence"), ("ForImageClassification", "image"),
            ("ForAudioClassification", "audio"))
HF_HEADS = (("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "masked"),
            ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "causal"),
            ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "masked"),
            ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "image"),
            ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "sequence"),
            ("MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", "audio"))
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
DEFAULT_IMAGE = 224
# Waveform samples per token of `--seq` for audio models (wav2vec2-style feature
# encoders stride 320 samples, about one frame per 20 ms at 16 kHz).
SAMPLES_PER_TOKEN = 320


def resolve(spec: str):
    """The factory for a named spec (`prefix:name`), its name bound."""
    prefix, _, name = spec.partition(":")
    if not name:
        raise RecordError(f"model spec {spec!r} names no model after {prefix}:")
    factory = {"hf": hf, "timm": timm_model, "torchvision": torchvision_model}[prefix]
    return functools.update_wrapper(functools.partial(factory, name), factory)


def _unknown(kind: str, name: str, known) -> RecordError:
    close = difflib.get_close_matches(name, list(known), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return RecordError(f"unknown {kind} {name!r}{hint}")


def _classification_batch(num_classes: int, batch: int, image_size: int, dtype):
    images = torch.randn(batch, 3, image_size, image_size, dtype=dtype)
    return images, torch.randint(num_classes, (batch,))


def _cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), labels)


def _model_loss(output, _targets) -> torch.Tensor:
    """The loss a transformers model computed from the `labels` of its batch."""
    return output.loss


# --- transformers -------------------------------------------------------------------

def _hf_classes(arch: str):
    """(config class, model class) for a model type, config class or model class name."""
    import transformers
    from transformers import CONFIG_MAPPING, PreTrainedConfig
    from transformers.models.auto import modeling_auto

    found = getattr(transformers, arch, None) if arch[:1].isupper() else None
    if isinstance(found, type) and issubclass(found, transformers.PreTrainedModel):
        return found.config_class, found
    if isinstance(found, type) and issubclass(found, PreTrainedConfig):
        model_type = found.model_type
    elif arch in CONFIG_MAPPING:
        model_type = arch
    else:
        raise _unknown("transformers model type, config or model class", arch,
                       [*CONFIG_MAPPING.keys()])
    config_class = CONFIG_MAPPING[model_type]
    for mapping, _ in HF_HEADS:
        head = getattr(modeling_auto, mapping).get(model_type)
        if isinstance(head, (tuple, list)):     # DeiT, LeViT: the plain head, then others
            head = head[0]
        if head:
            return config_class, getattr(transformers, head)
    raise RecordError(f"hf:{arch}: transformers has no causal LM, masked LM or classification "
                      "model for it; write a factory returning (model, batch, loss_fn)")


def _hf_task(model_class) -> str:
    if getattr(model_class, "main_input_name", None) == "input_values":
        return "audio"       # a waveform classifier (wav2vec2's ForSequenceClassification)
    for suffix, task in HF_TASKS:
        if model_class.__name__.endswith(suffix):
            return task
    raise RecordError(f"{model_class.__name__} has no standard loss here (causal LM, masked LM "
                      "or classification); write a factory returning (model, batch, loss_fn)")


def hf_config(arch: str, **overrides):
    """The config an `hf:` spec builds: small shapes, then the overrides (a dict
    for a nested config, `--set text_config.hidden_size=64`, updates it)."""
    config_class, model_class = _hf_classes(arch)
    default = config_class()
    _check_keys(config_class.__name__, default, overrides)
    canonical = getattr(default, "attribute_map", {})
    # a small shape for a key whose default is a list (per-stage heads or depths)
    # would not fit it: those keep the library's default
    keys = {canonical.get(k, k): v for k, v in small_keys(default, HF_SMALL).items()}
    for key, value in overrides.items():
        inner = getattr(default, key, None)
        if isinstance(value, dict) and hasattr(inner, "to_dict"):
            value = {**inner.to_dict(), **value}
        keys[canonical.get(key, key)] = value
    vocabulary = keys.get("vocab_size", getattr(default, "vocab_size", None))
    for key in _token_keys(default):
        value = getattr(default, key, None)
        if isinstance(value, int) and vocabulary is not None and value >= vocabulary \
                and key not in keys:
            keys[key] = None
    if keys.get("decoder_start_token_id") is None and "decoder_start_token_id" not in overrides \
            and (getattr(default, "is_encoder_decoder", False) or
                 hasattr(default, "decoder_start_token_id")):
        keys["decoder_start_token_id"] = _start_token(keys, default, vocabulary)
    return config_class(**keys), model_class


def _token_keys(default) -> list[str]:
    """The special token ids a config has: the usual ones and any other `*_token_id`
    (ModernBERT's `cls_token_id` and `sep_token_id`)."""
    found = [k for k in vars(default) if k.endswith("_token_id") and k not in TOKEN_IDS]
    return [*TOKEN_IDS, *found]


def small_keys(default, shape: dict) -> dict:
    """The keys of `shape` a config (`default`, an instance) has, but not over a
    per-stage list: a small shape for a key whose default is a list (per-stage
    heads or depths) would not fit it, so those keep the library's default."""
    return {k: v for k, v in shape.items() if hasattr(default, k)
            and not isinstance(getattr(default, k), (list, tuple)) and not _derived(default, k)}


def _derived(default, key: str) -> bool:
    """Whether a config computes `key` from others (a property without a setter,
    Falcon's `head_dim`): setting it raises, and the small shape sets its parts."""
    attribute = getattr(type(default), key, None)
    return isinstance(attribute, property) and attribute.fset is None


def hf_shape(arch: str, shape: dict) -> dict:
    """The keys of `shape` an `hf:` spec's config has (as `HF_SMALL` is applied):
    one small shape, given as `--set` keys, fits every model type."""
    return small_keys(_hf_classes(arch)[0](), shape)


def _start_token(keys: dict, default, vocabulary: int | None) -> int:
    """The decoder's first input of an encoder-decoder (which its `_shift_right`
    needs): the padding id where the vocabulary has it, as T5 and BART use, else 0."""
    pad = keys["pad_token_id"] if "pad_token_id" in keys else getattr(default, "pad_token_id", None)
    return pad if isinstance(pad, int) and (vocabulary is None or 0 <= pad < vocabulary) else 0


def _check_keys(where: str, default, overrides: dict) -> None:
    """Every overridden key is one the config has (or a token id, which some configs
    leave to the generation config), nested keys those of the nested config."""
    unknown = [k for k in overrides if not hasattr(default, k) and k not in TOKEN_IDS]
    if unknown:
        raise RecordError(f"{where} has no key {', '.join(unknown)}")
    for key, value in overrides.items():
        if isinstance(value, dict):
            inner = getattr(default, key, None)
            if not hasattr(inner, "to_dict"):
                raise RecordError(f"{where}.{key} is not a nested config: set it as {key}=VALUE")
            _check_keys(f"{where}.{key}", inner, value)


def hf(arch: str, batch: int = 2, seq: int = 32, dtype: torch.dtype | None = None, **overrides):
    """A transformers model from its config (never downloaded), with its own loss."""
    config, model_class = hf_config(arch, **overrides)
    task = _hf_task(model_class)
    with _default_dtype(dtype or torch.get_default_dtype()):
        model = model_class(config)
    model.train()
    if task == "image":
        size = getattr(config, "image_size", DEFAULT_IMAGE)
        images, labels = _classification_batch(config.num_labels, batch, size, dtype)
        return model, ({"pixel_values": images, "labels": labels}, None), _model_loss
    if task == "audio":
        waves = torch.randn(batch, seq * SAMPLES_PER_TOKEN, dtype=dtype)
        labels = torch.randint(config.num_labels, (batch,))
        return model, ({"input_values": waves, "labels": labels}, None), _model_loss
    input_ids = torch.randint(config.vocab_size, (batch, seq))
    labels = torch.randint(config.num_labels, (batch,)) if task == "sequence" else input_ids
    return model, ({"input_ids": input_ids, "labels": labels}, None), _model_loss


# --- timm and torchvision ---------------------------------------------------------

def timm_model(name: str, batch: int = 2, image_size: int | None = None,
               dtype: torch.dtype | None = None, **kwargs):
    """A timm model (`pretrained=False`), cross-entropy on random labels."""
    import timm
    if not timm.is_model(name):
        raise _unknown("timm model", name, timm.list_models())
    if image_size is not None and "img_size" not in kwargs:
        kwargs["img_size"] = image_size
    with _default_dtype(dtype or torch.get_default_dtype()):
        try:
            model = timm.create_model(name, pretrained=False, **kwargs)
        except TypeError as exc:
            if "img_size" not in str(exc) or image_size is None:
                raise
            kwargs.pop("img_size")       # a network that takes any image size
            model = timm.create_model(name, pretrained=False, **kwargs)
    model.train()
    size = image_size or model.pretrained_cfg.get("input_size", (3, DEFAULT_IMAGE))[-1]
    return model, _classification_batch(model.num_classes, batch, size, dtype), _cross_entropy


def torchvision_model(name: str, batch: int = 2, image_size: int = DEFAULT_IMAGE,
                      dtype: torch.dtype | None = None, **kwargs):
    """A torchvision model (`weights=None`), cross-entropy on random labels."""
    import torchvision
    if name not in torchvision.models.list_models():
        raise _unknown("torchvision model", name, torchvision.models.list_models())
    with _default_dtype(dtype or torch.get_default_dtype()):
        model = torchvision.models.get_model(name, weights=None, **kwargs)
    model.train()
    classes = kwargs.get("num_classes", 1000)
    return model, _classification_batch(classes, batch, image_size, dtype), _cross_entropy
