"""Training steps that write through views, as `dtrf torch record|run`
factories (`dtrf torch run view_writes:t5 --budget B` from this folder).

T5's `_shift_right` makes the decoder's input ids by writing through views of
one tensor: `copy_` into a slice, `fill_` into a select (of a Python scalar,
which enters the step as a lifted constant), then `masked_fill_` of the whole.
`shift_right` does the same in plain PyTorch, with an `index_put_` into a
slice besides; `t5` is transformers' T5 built
from its configuration (nothing downloaded)."""

from __future__ import annotations

import torch
from torch import nn


class ShiftRight(nn.Module):
    """Embeds its input ids shifted right as T5 does, then a small MLP."""

    def __init__(self, vocab: int, width: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.body = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, vocab))

    def forward(self, ids):
        shifted = ids.new_zeros(ids.shape)
        shifted[..., 1:] = ids[..., :-1].clone()
        shifted[..., 0] = 0
        shifted[:, :1].index_put_((torch.arange(2),), torch.tensor(0))
        shifted.masked_fill_(shifted == -100, 0)
        return self.body(self.embed(shifted))


def shift_right(vocab: int = 16, width: int = 16, batch: int = 32, seq: int = 64):
    """`ShiftRight`, cross-entropy against the ids; the ids (int64) weigh as much as
    an activation, so a version of them kept too long shows at the peak."""
    torch.manual_seed(0)
    ids = torch.randint(vocab, (batch, seq))
    return ShiftRight(vocab, width), (ids, ids), \
        lambda logits, target: nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())


def t5(layers: int = 2, width: int = 256, ff: int = 512, vocab: int = 512, heads: int = 4,
       batch: int = 4, seq: int = 64):
    """`T5ForConditionalGeneration` with `layers` encoder and decoder layers, its own
    loss on random token ids (`labels` shifted right by the model)."""
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(vocab_size=vocab, d_model=width, d_kv=width // heads, d_ff=ff,
                      num_layers=layers, num_decoder_layers=layers, num_heads=heads,
                      decoder_start_token_id=0, pad_token_id=0, use_cache=False)
    model = T5ForConditionalGeneration(config).train()
    ids = torch.randint(1, vocab, (batch, seq))
    labels = torch.randint(1, vocab, (batch, seq))
    return model, ({"input_ids": ids, "labels": labels}, None), lambda out, _targets: out.loss
