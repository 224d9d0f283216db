"""Built-in models to record: defined in code, no downloads, no weights.

Each entry builds `(model, batch, loss_fn)` as a factory would: `batch` is
`(inputs, targets)` and the step is `loss_fn(model(inputs), targets)`. Default
sizes record and sweep in seconds; every size is a keyword (`layers`,
`width`, ...) so the same code scales up (`gpt-1b` is the GPT-style preset of
about a billion parameters, meant for fake mode).
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Build parameters in `dtype` directly (a later `.to()` would copy them, which
    fake tensors cannot do in place)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention written out (matmul, mask, softmax), so
    every intermediate is a separate tensor of the trace."""

    def __init__(self, width: int, heads: int, seq: int):
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not a multiple of heads {heads}")
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).tril(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (y.view(shape).transpose(1, 2) for y in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        scores = scores.masked_fill(~self.mask[:t, :t], float("-inf"))
        y = scores.softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class DecoderBlock(nn.Module):
    def __init__(self, width: int, heads: int, seq: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, seq)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """A GPT-style decoder: token and position embeddings, pre-norm blocks, LM head."""

    def __init__(self, layers: int, width: int, heads: int, seq: int, vocab: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(DecoderBlock(width, heads, seq) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tokens(idx) + self.positions(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def _lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def gpt(batch: int = 2, seq: int = 32, layers: int = 2, width: int = 64, heads: int = 4,
        vocab: int = 256, dtype: torch.dtype = torch.float32):
    with _default_dtype(dtype):
        model = GPT(layers, width, heads, seq, vocab)
    idx = torch.randint(vocab, (batch, seq + 1))
    return model, (idx[:, :-1], idx[:, 1:]), _lm_loss


def gpt_1b(batch: int = 1, seq: int = 1024, layers: int = 20, width: int = 2048, heads: int = 16,
           vocab: int = 50304, dtype: torch.dtype = torch.float32):
    """About 1.1 billion parameters (12 x layers x width^2 + embeddings)."""
    return gpt(batch=batch, seq=seq, layers=layers, width=width, heads=heads, vocab=vocab, dtype=dtype)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet(nn.Module):
    """A ResNet-style CNN for small images: three stages of basic blocks."""

    def __init__(self, blocks: int, width: int, classes: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        stages, cin = [], width
        for stage in range(3):
            cout = width * 2 ** stage
            for i in range(blocks):
                stages.append(BasicBlock(cin, cout, 2 if stage and i == 0 else 1))
                cin = cout
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stages(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


def resnet(batch: int = 4, image: int = 16, blocks: int = 1, width: int = 8, classes: int = 10,
           dtype: torch.dtype = torch.float32):
    with _default_dtype(dtype):
        model = ResNet(blocks, width, classes)
    x = torch.randn(batch, 3, image, image, dtype=dtype)
    return model, (x, torch.randint(classes, (batch,))), F.cross_entropy


class LSTMRegressor(nn.Module):
    """An LSTM unrolled step by step (input and hidden projections, gates), then
    a linear head. Written out rather than `nn.LSTM`: on CPU that is one fused
    `mkldnn_rnn_layer` op whose fake-mode sizes differ from the real ones."""

    def __init__(self, features: int, width: int, layers: int):
        super().__init__()
        self.width = width
        self.inputs = nn.ModuleList(nn.Linear(features if i == 0 else width, 4 * width) for i in range(layers))
        self.hidden = nn.ModuleList(nn.Linear(width, 4 * width, bias=False) for _ in range(layers))
        self.head = nn.Linear(width, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        for proj_in, proj_h in zip(self.inputs, self.hidden):
            h = c = x.new_zeros(b, self.width)
            outputs = []
            gates_in = proj_in(x)
            for step in range(t):
                i, f, g, o = (gates_in[:, step] + proj_h(h)).chunk(4, dim=1)
                c = f.sigmoid() * c + i.sigmoid() * g.tanh()
                h = o.sigmoid() * c.tanh()
                outputs.append(h)
            x = torch.stack(outputs, dim=1)
        return self.head(x)


def lstm(batch: int = 4, seq: int = 6, features: int = 8, width: int = 32, layers: int = 1,
         dtype: torch.dtype = torch.float32):
    with _default_dtype(dtype):
        model = LSTMRegressor(features, width, layers)
    x = torch.randn(batch, seq + 1, features, dtype=dtype)
    return model, (x[:, :-1], x[:, 1:]), _squared_error


def _squared_error(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error from elementwise ops. (`F.mse_loss` on CPU returns a scalar
    whose storage is the whole unreduced buffer, which fake mode reports as 4 bytes.)"""
    return (prediction - target).pow(2).mean()


def _double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())


class UNet(nn.Module):
    """Encoder-decoder with skip connections (concatenation) at every level."""

    def __init__(self, depth: int, width: int, classes: int):
        super().__init__()
        self.down = nn.ModuleList()
        cin = 3
        for level in range(depth):
            self.down.append(_double_conv(cin, width * 2 ** level))
            cin = width * 2 ** level
        self.bottom = _double_conv(cin, cin * 2)
        self.up = nn.ModuleList()
        self.merge = nn.ModuleList()
        for level in reversed(range(depth)):
            cout = width * 2 ** level
            self.up.append(nn.ConvTranspose2d(cout * 2, cout, 2, stride=2))
            self.merge.append(_double_conv(cout * 2, cout))
        self.head = nn.Conv2d(width, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for down in self.down:
            x = down(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottom(x)
        for up, merge in zip(self.up, self.merge):
            x = merge(torch.cat([up(x), skips.pop()], dim=1))
        return self.head(x)


def unet(batch: int = 2, image: int = 16, depth: int = 2, width: int = 8, classes: int = 3,
         dtype: torch.dtype = torch.float32):
    if image % 2 ** depth:
        raise ValueError(f"image size {image} is not divisible by 2^depth = {2 ** depth}")
    with _default_dtype(dtype):
        model = UNet(depth, width, classes)
    x = torch.randn(batch, 3, image, image, dtype=dtype)
    return model, (x, torch.randint(classes, (batch, image, image))), F.cross_entropy


def mlp(batch: int = 8, features: int = 32, width: int = 64, layers: int = 3, classes: int = 10,
        dtype: torch.dtype = torch.float32):
    sizes = [features] + [width] * layers
    body: list[nn.Module] = []
    with _default_dtype(dtype):
        for cin, cout in zip(sizes, sizes[1:]):
            body += [nn.Linear(cin, cout), nn.ReLU()]
        model = nn.Sequential(*body, nn.Linear(width, classes))
    x = torch.randn(batch, features, dtype=dtype)
    return model, (x, torch.randint(classes, (batch,))), F.cross_entropy


def encoder(batch: int = 2, seq: int = 16, layers: int = 2, width: int = 64, heads: int = 4,
            classes: int = 10, dtype: torch.dtype = torch.float32):
    """PyTorch's own `nn.TransformerEncoder` (dropout 0.1, batch first), mean-pooled
    into a linear classifier."""
    with _default_dtype(dtype):
        layer = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.1, batch_first=True)
        model = nn.Sequential(nn.TransformerEncoder(layer, layers, enable_nested_tensor=False),
                              _MeanOverSequence(), nn.Linear(width, classes))
    x = torch.randn(batch, seq, width, dtype=dtype)
    return model, (x, torch.randint(classes, (batch,))), F.cross_entropy


class _MeanOverSequence(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=1)


class SparseMoE(nn.Module):
    """A Mixtral-style sparse mixture of experts: a router picks the top 2 of
    `experts` SwiGLU experts per token; each expert runs on the tokens routed to
    it (`nonzero`, `index_select`, `index_add_`: shapes that depend on the data)."""

    def __init__(self, width: int, hidden: int, experts: int, top: int):
        super().__init__()
        self.top = top
        self.router = nn.Linear(width, experts, bias=False)
        self.gate = nn.ModuleList(nn.Linear(width, hidden, bias=False) for _ in range(experts))
        self.up = nn.ModuleList(nn.Linear(width, hidden, bias=False) for _ in range(experts))
        self.down = nn.ModuleList(nn.Linear(hidden, width, bias=False) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        tokens = x.reshape(b * t, c)
        weights, chosen = self.router(tokens).softmax(dim=-1).topk(self.top, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(tokens)
        for e in range(len(self.gate)):
            token, slot = (chosen == e).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            routed = tokens.index_select(0, token)
            y = self.down[e](F.silu(self.gate[e](routed)) * self.up[e](routed))
            out = out.index_add(0, token, y * weights[token, slot].unsqueeze(-1))
        return out.reshape(b, t, c)


class MoEDecoder(nn.Module):
    """Token embedding, `layers` pre-norm blocks of causal attention and a top-2 MoE, LM head."""

    def __init__(self, layers: int, width: int, heads: int, seq: int, vocab: int, experts: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(nn.ModuleList([nn.LayerNorm(width),
                                                   CausalSelfAttention(width, heads, seq),
                                                   nn.LayerNorm(width),
                                                   SparseMoE(width, 2 * width, experts, 2)])
                                    for _ in range(layers))
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for norm1, attention, norm2, moe in self.blocks:
            x = x + attention(norm1(x))
            x = x + moe(norm2(x))
        return self.head(x)


def moe(batch: int = 2, seq: int = 16, layers: int = 1, width: int = 64, heads: int = 4,
        vocab: int = 128, experts: int = 4, dtype: torch.dtype = torch.float32):
    with _default_dtype(dtype):
        model = MoEDecoder(layers, width, heads, seq, vocab, experts)
    idx = torch.randint(vocab, (batch, seq))
    return model, (idx, torch.roll(idx, -1, dims=1)), _lm_loss


ZOO: dict[str, Callable] = {
    "gpt": gpt, "gpt-1b": gpt_1b, "resnet": resnet, "lstm": lstm, "unet": unet, "mlp": mlp,
    "encoder": encoder, "moe": moe,
}


def sizes(name: str) -> dict[str, object]:
    """The keywords a zoo entry takes, with their defaults."""
    return {p.name: p.default for p in inspect.signature(ZOO[name]).parameters.values()}
