"""qkv's models in PyTorch: a reference implementation to read next to include/qkv/nn/*.hpp.

One small nn.Module per qkv layer, with qkv's parameter names in qkv's registration order
(tok_emb.weight, blocks.0.attn.w_q.weight, ..., head.bias), so that a state dict maps onto a
checkpoint's /model one to one, by name. Attention is written out: softmax(q k^T scale + mask) v,
scale 1/sqrt(D) unless model.scale is set; a query with no allowed key gets a zero output (qkv),
not NaN (PyTorch). GELU is the exact erf form, LayerNorm eps 1e-5, token embeddings are N(0, 1)
and not scaled by sqrt(d_model). Dropout sits where qkv puts it (active in train() only).

scripts/qkv_torch.py builds these from a checkpoint (load) and writes them back
(save_checkpoint); docs/pytorch.md has the name mapping to torch.nn's own layers.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


class DoesNotFit(ValueError):
    """A config or state dict that does not describe a model this mirror can build."""


# ---- options: the config's model section, as nn::TransformerOptions ----

@dataclass(frozen=True)
class Options:
    arch: str = "encoder"
    d_model: int = 64           # C
    heads: int = 4              # H
    head_dim: int = 0           # D; 0 = C / H
    layers: int = 2
    d_ff: int = 256
    dropout: float = 0.0        # embeddings, residual branches, inside the feed-forward block
    attn_dropout: float = 0.0   # on the attention weights
    activation: str = "gelu"    # exact erf GELU, or relu
    norm_first: bool = True     # pre-LN (True) or post-LN
    positional: str = "sinusoidal"
    scale: float = 0.0          # 0 = 1/sqrt(D)
    causal: bool = False        # encoder only: position t sees positions <= t
    max_len: int = 1024
    layer_norm_eps: float = 1e-5
    attention: str = "fused"    # qkv's kernel choice; the same math

    @property
    def D(self):
        return self.head_dim or self.d_model // self.heads


ACCEPTS = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}  # by type(), so True is no int


def parse_options(model_section):
    """Options of a config's model section (a dict; missing keys keep qkv's defaults)."""
    known = Options.__dataclass_fields__
    unknown = sorted(set(model_section or {}) - set(known))
    if unknown:
        raise DoesNotFit(f"model.{unknown[0]}: a key this mirror does not know (a newer qkv?), so it cannot "
                         f"promise to compute what qkv computes; known keys: {', '.join(known)}")
    values = {}
    for key, value in (model_section or {}).items():
        kind = type(getattr(Options, key))
        if type(value) not in ACCEPTS[kind]:
            raise DoesNotFit(f"model.{key}: expected {kind.__name__}, found {value!r}")
        values[key] = kind(value)
    o = Options(**values)
    for key in ("d_model", "heads", "layers", "d_ff"):
        if getattr(o, key) <= 0:
            raise DoesNotFit(f"model.{key}: expected a positive number, found {getattr(o, key)}")
    if o.activation not in ("gelu", "relu") or o.positional not in ("sinusoidal", "learned"):
        raise DoesNotFit(f"model: activation '{o.activation}' / positional '{o.positional}' unknown")
    if not o.head_dim and o.d_model % o.heads:
        raise DoesNotFit(f"model.d_model ({o.d_model}) must be divisible by model.heads ({o.heads}) when head_dim is 0")
    return o


# ---- the mirror: one class per qkv layer ----

def attention(q, k, v, scale, allowed=None, dropout_p=0.0, training=False):
    """q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv); allowed broadcastable to (B, H, Tq, Tk),
    True = may attend. softmax(scale q k^T) v over the allowed keys; a query with no allowed key
    gets a zero output row (qkv), where PyTorch gives NaN."""
    s = scale * (q @ k.transpose(-2, -1))
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(s, dim=-1)
    if allowed is not None:
        p = torch.where(allowed.any(dim=-1, keepdim=True), p, torch.zeros_like(p))
    return F.dropout(p, dropout_p, training) @ v


class MultiHeadAttention(nn.Module):
    """qkv's nn::MultiHeadAttention: query (B, Tq, E), key (B, Tk, kdim), value (B, Tk, vdim) ->
    (B, Tq, E). Parameters w_q (H D, E), w_k (H D, kdim), w_v (H D, vdim), w_o (E, H D)."""

    def __init__(self, embed_dim, num_heads, head_dim=0, kdim=0, vdim=0, bias=True, dropout=0.0, scale=0.0):
        super().__init__()
        self.H, self.D = num_heads, head_dim or embed_dim // num_heads
        HD = self.H * self.D
        self.w_q = nn.Linear(embed_dim, HD, bias)
        self.w_k = nn.Linear(kdim or embed_dim, HD, bias)
        self.w_v = nn.Linear(vdim or embed_dim, HD, bias)
        self.w_o = nn.Linear(HD, embed_dim, bias)
        self.scale = scale or 1.0 / math.sqrt(self.D)
        self.dropout = dropout
        with torch.no_grad():  # qkv's (and PyTorch's) init: Xavier q/k/v, zero biases
            for lin in (self.w_q, self.w_k, self.w_v):
                nn.init.xavier_uniform_(lin.weight)
            for lin in (self.w_q, self.w_k, self.w_v, self.w_o):
                if bias:
                    lin.bias.zero_()

    def forward(self, query, key, value, key_padding_mask=None, is_causal=False):
        """key_padding_mask (B, Tk): True = ignore that key (PyTorch polarity)."""
        B, Tq, Tk = query.shape[0], query.shape[1], key.shape[1]

        def split(x):  # (B, T, H D) -> (B, H, T, D)
            return x.view(B, x.shape[1], self.H, self.D).transpose(1, 2)

        q, k, v = split(self.w_q(query)), split(self.w_k(key)), split(self.w_v(value))
        allowed = None
        if key_padding_mask is not None:
            allowed = ~key_padding_mask.bool()[:, None, None, :]
        if is_causal:
            causal = torch.ones(Tq, Tk, dtype=torch.bool, device=query.device).tril()
            allowed = causal if allowed is None else allowed & causal
        z = attention(q, k, v, self.scale, allowed, self.dropout, self.training)  # (B, H, Tq, D)
        return self.w_o(z.transpose(1, 2).reshape(B, Tq, self.H * self.D))


class FeedForward(nn.Module):
    """dropout(fc2(dropout(act(fc1(x))))), as PyTorch's _ff_block."""

    def __init__(self, o):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(o.d_model, o.d_ff), nn.Linear(o.d_ff, o.d_model)
        self.act = nn.GELU() if o.activation == "gelu" else nn.ReLU()  # GELU: the exact erf form
        self.drop = nn.Dropout(o.dropout)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


def make_attention(o):
    return MultiHeadAttention(o.d_model, o.heads, o.head_dim, dropout=o.attn_dropout, scale=o.scale)


class EncoderLayer(nn.Module):
    """pre-LN:  x = x + drop1(attn(norm1(x)));  x = x + ff(norm2(x))
    post-LN: x = norm1(x + drop1(attn(x)));  x = norm2(x + ff(x))"""

    def __init__(self, o):
        super().__init__()
        self.norm_first = o.norm_first
        self.attn, self.ff = make_attention(o), FeedForward(o)
        self.norm1, self.norm2 = nn.LayerNorm(o.d_model, o.layer_norm_eps), nn.LayerNorm(o.d_model, o.layer_norm_eps)
        self.drop1 = nn.Dropout(o.dropout)

    def forward(self, x, key_padding_mask=None, is_causal=False):
        def sa(h):
            return self.drop1(self.attn(h, h, h, key_padding_mask, is_causal))
        if self.norm_first:
            x = x + sa(self.norm1(x))
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + sa(x))
        return self.norm2(x + self.ff(x))


class DecoderLayer(nn.Module):
    """pre-LN:  x = x + drop1(self_attn(norm1(x), causal)); x = x + drop2(cross_attn(norm2(x), memory));
             x = x + ff(norm3(x))
    post-LN: x = norm1(x + drop1(self_attn(x, causal))); x = norm2(x + drop2(cross_attn(x, memory)));
             x = norm3(x + ff(x))"""

    def __init__(self, o):
        super().__init__()
        self.norm_first = o.norm_first
        self.self_attn, self.cross_attn, self.ff = make_attention(o), make_attention(o), FeedForward(o)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(o.d_model, o.layer_norm_eps) for _ in range(3))
        self.drop1, self.drop2 = nn.Dropout(o.dropout), nn.Dropout(o.dropout)

    def forward(self, x, memory, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        def sa(h):
            return self.drop1(self.self_attn(h, h, h, tgt_key_padding_mask, is_causal=True))

        def ca(h):
            return self.drop2(self.cross_attn(h, memory, memory, memory_key_padding_mask))
        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + ca(self.norm2(x))
            return x + self.ff(self.norm3(x))
        x = self.norm1(x + sa(x))
        x = self.norm2(x + ca(x))
        return self.norm3(x + self.ff(x))


class LearnedPositions(nn.Module):
    """x (B, T, C) + weight[:T]; weight (max_len, C) starts N(0, 1)."""

    def __init__(self, max_len, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, dim))

    def forward(self, x):
        if x.shape[1] > self.weight.shape[0]:
            raise ValueError(f"sequence length {x.shape[1]} exceeds max_len {self.weight.shape[0]}")
        return x + self.weight[: x.shape[1]]


class SinusoidalPositions(nn.Module):
    """x (B, T, C) + PE[:T], PE[t, 2i] = sin(t / 10000^(2i/C)), PE[t, 2i+1] = cos(same); computed
    in float64 and rounded to x's dtype, as qkv does. No parameters."""

    def forward(self, x):
        T, C = x.shape[1], x.shape[2]
        t = torch.arange(T, dtype=torch.float64)[:, None]
        j = torch.arange(C)
        angle = t * torch.pow(10000.0, -(j - j % 2).double() / C)
        return x + torch.where(j % 2 == 0, torch.sin(angle), torch.cos(angle)).to(x.dtype)


def make_positions(o):
    return LearnedPositions(o.max_len, o.d_model) if o.positional == "learned" else SinusoidalPositions()


def final_norm(o):
    return nn.LayerNorm(o.d_model) if o.norm_first else None  # post-LN layers already end normalised


class Encoder(nn.Module):
    """qkv's nn::EncoderModel: tokens (B, T) -> logits (B, T, num_classes).
    h = emb_drop(pos(tok_emb(tokens))); h = blocks[i](h); h = norm(h) (pre-LN); logits = head(h).
    Token embeddings are N(0, 1) and not scaled by sqrt(d_model)."""

    def __init__(self, o, input_vocab, num_classes):
        super().__init__()
        self.causal = o.causal
        self.tok_emb = nn.Embedding(input_vocab, o.d_model)
        self.pos = make_positions(o)
        self.emb_drop = nn.Dropout(o.dropout)
        self.blocks = nn.ModuleList(EncoderLayer(o) for _ in range(o.layers))
        self.norm = final_norm(o)
        self.head = nn.Linear(o.d_model, num_classes)

    def forward(self, tokens, key_padding_mask=None):
        h = self.emb_drop(self.pos(self.tok_emb(tokens)))
        for block in self.blocks:
            h = block(h, key_padding_mask, self.causal)
        return self.head(self.norm(h) if self.norm is not None else h)

    # As train::TaskModel: the logits of a batch, and the predictions accuracy counts.
    def batch_logits(self, batch):
        return self(batch["inputs"])

    def predict(self, batch, logits):
        return logits.argmax(-1)


class Stack(nn.Module):
    """qkv's TransformerEncoder / TransformerDecoder: children blocks and norm (pre-LN)."""

    def __init__(self, layer, o):
        super().__init__()
        self.blocks = nn.ModuleList(layer(o) for _ in range(o.layers))
        self.norm = final_norm(o)

    def forward(self, x, *args):
        for block in self.blocks:
            x = block(x, *args)
        return self.norm(x) if self.norm is not None else x


class Seq2Seq(nn.Module):
    """qkv's nn::Seq2SeqModel: src (B, Ts), tgt_in (B, Tt) -> logits (B, Tt, tgt_vocab).
    memory = encoder(emb_drop(src_pos(src_emb(src)))); the decoder's self-attention is causal."""

    def __init__(self, o, src_vocab, tgt_vocab, bos=-1):
        super().__init__()
        self.bos = bos
        self.src_emb, self.tgt_emb = nn.Embedding(src_vocab, o.d_model), nn.Embedding(tgt_vocab, o.d_model)
        self.src_pos, self.tgt_pos = make_positions(o), make_positions(o)
        self.emb_drop = nn.Dropout(o.dropout)
        self.encoder, self.decoder = Stack(EncoderLayer, o), Stack(DecoderLayer, o)
        self.head = nn.Linear(o.d_model, tgt_vocab)

    def encode(self, src, src_key_padding_mask=None):
        return self.encoder(self.emb_drop(self.src_pos(self.src_emb(src))), src_key_padding_mask)

    def decode(self, memory, tgt_in, src_key_padding_mask=None, tgt_key_padding_mask=None):
        h = self.emb_drop(self.tgt_pos(self.tgt_emb(tgt_in)))
        return self.head(self.decoder(h, memory, tgt_key_padding_mask, src_key_padding_mask))

    def forward(self, src, tgt_in, src_key_padding_mask=None, tgt_key_padding_mask=None):
        return self.decode(self.encode(src, src_key_padding_mask), tgt_in, src_key_padding_mask, tgt_key_padding_mask)

    def batch_logits(self, batch):
        return self(batch["inputs"], batch["decoder_inputs"])

    def predict(self, batch, logits):
        """Greedy decoding, as qkv's evaluation: BOS, then the argmax of the last position, appended."""
        src, T = batch["inputs"], batch["targets"].shape[1]
        memory = self.encode(src)
        out = torch.full((src.shape[0], 0), 0, dtype=torch.int64)
        for _ in range(T):
            tgt_in = torch.cat([torch.full((src.shape[0], 1), self.bos, dtype=torch.int64), out], dim=1)
            out = torch.cat([out, self.decode(memory, tgt_in)[:, -1].argmax(-1, keepdim=True)], dim=1)
        return out


# The model config.model.arch names: arch -> (options, sizes) -> mirror. A decoder-only language
# model is one more entry (Encoder with causal=True computes one; a class of its own when its
# parameter names differ) plus its vocabularies in qkv_torch.model_sizes.
ARCHS = {
    "encoder": lambda o, s: Encoder(o, s.input_vocab, s.output_vocab),
    "encoder_decoder": lambda o, s: Seq2Seq(o, s.input_vocab, s.output_vocab, s.bos),
}


@dataclass
class Sizes:
    """The vocabularies of a model: tokens in, classes (or target tokens) out; BOS of seq2seq."""
    input_vocab: int
    output_vocab: int
    bos: int = -1
