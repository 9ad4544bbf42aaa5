"""qkv's models in PyTorch: a reference implementation to read next to include/qkv/nn/*.hpp.

One small nn.Module per qkv layer, with qkv's parameter names in qkv's registration order
(tok_emb.weight, blocks.0.attn.w_q.weight, ..., head.bias), so that a state dict maps onto a
checkpoint's /model one to one, by name. Attention is written out: softmax(q k^T scale + mask) v,
scale 1/sqrt(D) unless model.scale is set; a query with no allowed key gets a zero output (qkv),
not NaN (PyTorch). GELU is the exact erf form, LayerNorm eps 1e-5, token embeddings are N(0, 1)
and not scaled by sqrt(d_model) (the decoder with tied embeddings: N(0, 1/C), times sqrt(C)).
Rotary positions (decoder) turn q and k after the heads are split, "rotate half" layout. Dropout
sits where qkv puts it (active in train() only). The decoder-only model also decodes with a KV
cache and generates greedily with qkv's window rule (include/qkv/train/generate.hpp).

scripts/pytorch/qkv_torch.py builds these from a checkpoint (load) and writes them back
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
    value_dim: int = 0          # Dv; 0 = D
    layers: int = 2
    d_ff: int = 256
    dropout: float = 0.0        # embeddings, residual branches, inside the feed-forward block
    attn_dropout: float = 0.0   # on the attention weights
    activation: str = "gelu"    # exact erf GELU, or relu
    norm_first: bool = True     # pre-LN (True) or post-LN
    norm: str = "layer"         # "layer", or "none": no LayerNorm anywhere (compiled programs)
    positional: str = "sinusoidal"
    scale: float = 0.0          # 0 = 1/sqrt(D)
    qk_init_gain: float = 1.0   # init only (w_q, w_k Xavier gain): loaded weights already carry it
    causal: bool = False        # encoder only: position t sees positions <= t
    max_len: int = 1024         # the decoder's context: the task's length
    tie_embeddings: bool = False  # decoder: head = tok_emb (N(0, 1/C), input scaled by sqrt(C))
    attn_only: bool = False     # encoder and decoder: blocks without feed-forward (and norm2)
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
    if o.activation not in ("gelu", "relu") or o.positional not in ("sinusoidal", "learned", "rope"):
        raise DoesNotFit(f"model: activation '{o.activation}' / positional '{o.positional}' unknown")
    if o.norm not in ("layer", "none"):
        raise DoesNotFit(f"model.norm: expected layer or none, found '{o.norm}'")
    if not o.head_dim and o.d_model % o.heads:
        raise DoesNotFit(f"model.d_model ({o.d_model}) must be divisible by model.heads ({o.heads}) when head_dim is 0")
    for key, archs in (("positional", ("decoder",)), ("tie_embeddings", ("decoder",)), ("attn_only", ("encoder", "decoder"))):
        used = o.positional == "rope" if key == "positional" else getattr(o, key)
        if used and o.arch not in archs:
            raise DoesNotFit(f"model.{key}: {'rope' if key == 'positional' else 'true'} is for arch "
                             f"{' and '.join(archs)}, found arch '{o.arch}'")
    if o.positional == "rope" and o.D % 2:
        raise DoesNotFit(f"model.positional rope turns pairs of dimensions: the head width D = {o.D} must be even")
    return o


# ---- the mirror: one class per qkv layer ----

def layer_norm(o):
    """A block's LayerNorm; with norm none the identity, so that both formulas become x + f(x)."""
    return nn.LayerNorm(o.d_model, o.layer_norm_eps) if o.norm == "layer" else nn.Identity()


def attention(q, k, v, scale, allowed=None, dropout_p=0.0, training=False, every_row_allowed=False):
    """q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv); allowed broadcastable to (B, H, Tq, Tk),
    True = may attend. softmax(scale q k^T) v over the allowed keys; a query with no allowed key
    gets a zero output row (qkv), where PyTorch gives NaN (every_row_allowed: the caller knows there
    is none, e.g. a causal mask alone)."""
    s = scale * (q @ k.transpose(-2, -1))
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(s, dim=-1)
    if allowed is not None and not every_row_allowed:
        p = torch.where(allowed.any(dim=-1, keepdim=True), p, torch.zeros_like(p))
    return F.dropout(p, dropout_p, training) @ v


def causal_mask(Tq, Tk, device=None):
    """(Tq, Tk), True = may attend: the Tq queries are the last Tq of Tk positions, query i sees
    keys <= Tk - Tq + i."""
    return torch.ones(Tq, Tk, dtype=torch.bool, device=device).tril(Tk - Tq)


def rope(x, offset=0, base=10000.0):
    """Rotary position embedding of x (B, H, T, D), qkv::rope: position p = offset + t,
    theta_d = base^(-2d / D) for d < D/2, in the "rotate half" layout
        y[d] = x[d] cos(p theta_d) - x[d + D/2] sin(p theta_d)
        y[d + D/2] = x[d + D/2] cos(p theta_d) + x[d] sin(p theta_d)
    with the angles in double (C's pow, as qkv) and cos, sin rounded to x's dtype."""
    T, D = x.shape[-2], x.shape[-1]
    half = D // 2
    theta = torch.tensor([math.pow(base, -2.0 * d / D) for d in range(half)], dtype=torch.float64)
    angle = torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * theta
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    lo, hi = x[..., :half], x[..., half:]
    return torch.cat([lo * cos - hi * sin, hi * cos + lo * sin], dim=-1)


class KVCache:
    """The keys (B, H, capacity, D) and values (B, H, capacity, Dv) one self-attention layer has
    seen, the first `length` positions filled; the capacity doubles when full (as qkv's)."""

    def __init__(self):
        self.k = self.v = None
        self.length = 0

    def append(self, k, v):
        n = self.length + k.shape[2]
        if self.k is None or n > self.k.shape[2]:
            cap = max(n, 2 * (0 if self.k is None else self.k.shape[2]))
            k_new, v_new = k.new_empty(*k.shape[:2], cap, k.shape[3]), v.new_empty(*v.shape[:2], cap, v.shape[3])
            if self.length:
                k_new[:, :, :self.length], v_new[:, :, :self.length] = self.keys(), self.values()
            self.k, self.v = k_new, v_new
        self.k[:, :, self.length:n], self.v[:, :, self.length:n] = k, v
        self.length = n

    def keys(self):
        return self.k[:, :, :self.length]

    def values(self):
        return self.v[:, :, :self.length]


class MultiHeadAttention(nn.Module):
    """qkv's nn::MultiHeadAttention: query (B, Tq, E), key (B, Tk, kdim), value (B, Tk, vdim) ->
    (B, Tq, E). Parameters w_q (H D, E), w_k (H D, kdim), w_v (H Dv, vdim), w_o (E, H Dv); Dv = value_dim or D."""

    def __init__(self, embed_dim, num_heads, head_dim=0, kdim=0, vdim=0, bias=True, dropout=0.0, scale=0.0,
                 rope=False, value_dim=0):
        super().__init__()
        self.H, self.D = num_heads, head_dim or embed_dim // num_heads
        self.Dv = value_dim or self.D
        self.rope = rope
        HD, HDv = self.H * self.D, self.H * self.Dv
        self.w_q = nn.Linear(embed_dim, HD, bias)
        self.w_k = nn.Linear(kdim or embed_dim, HD, bias)
        self.w_v = nn.Linear(vdim or embed_dim, HDv, bias)
        self.w_o = nn.Linear(HDv, embed_dim, bias)
        self.scale = scale or 1.0 / math.sqrt(self.D)
        self.dropout = dropout
        with torch.no_grad():  # qkv's (and PyTorch's) init: Xavier q/k/v, zero biases
            for lin in (self.w_q, self.w_k, self.w_v):
                nn.init.xavier_uniform_(lin.weight)
            for lin in (self.w_q, self.w_k, self.w_v, self.w_o):
                if bias:
                    lin.bias.zero_()

    def forward(self, query, key, value, key_padding_mask=None, is_causal=False, cache=None):
        """key_padding_mask (B, Tk): True = ignore that key (PyTorch polarity). With `cache` (a
        KVCache; causal self-attention, no padding): query holds the next positions, from
        cache.length on; their keys and values join the cache and the queries attend to all of it."""
        B, Tq = query.shape[0], query.shape[1]
        at = cache.length if cache is not None else 0

        def split(x):  # (B, T, H D) -> (B, H, T, D)
            return x.view(B, x.shape[1], self.H, -1).transpose(1, 2)

        def turn(h):  # rotated by position, with rope
            return rope(h, at) if self.rope else h

        q, k, v = turn(split(self.w_q(query))), turn(split(self.w_k(key))), split(self.w_v(value))
        if cache is not None:
            cache.append(k, v)
            k, v = cache.keys(), cache.values()
        Tk = k.shape[2]
        allowed = None
        if key_padding_mask is not None:
            allowed = ~key_padding_mask.bool()[:, None, None, :]
        if is_causal and Tq > 1:
            causal = causal_mask(Tq, Tk, query.device)
            allowed = causal if allowed is None else allowed & causal
        z = attention(q, k, v, self.scale, allowed, self.dropout, self.training,
                      every_row_allowed=key_padding_mask is None)  # (B, H, Tq, Dv)
        return self.w_o(z.transpose(1, 2).reshape(B, Tq, -1))


class FeedForward(nn.Module):
    """dropout(fc2(dropout(act(fc1(x))))), as PyTorch's _ff_block."""

    def __init__(self, o):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(o.d_model, o.d_ff), nn.Linear(o.d_ff, o.d_model)
        self.act = nn.GELU() if o.activation == "gelu" else nn.ReLU()  # GELU: the exact erf form
        self.drop = nn.Dropout(o.dropout)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


def make_attention(o, rope=False):
    return MultiHeadAttention(o.d_model, o.heads, o.head_dim, dropout=o.attn_dropout, scale=o.scale, rope=rope,
                              value_dim=o.value_dim)


class EncoderLayer(nn.Module):
    """pre-LN:  x = x + drop1(attn(norm1(x)));  x = x + ff(norm2(x))
    post-LN: x = norm1(x + drop1(attn(x)));  x = norm2(x + ff(x))
    attn_only: the attention half alone (no ff, no norm2). The decoder-only model's blocks are
    these layers with a causal mask (and rotary attention with rope positions)."""

    def __init__(self, o):
        super().__init__()
        self.norm_first = o.norm_first
        self.attn = make_attention(o, rope=o.arch == "decoder" and o.positional == "rope")
        self.ff = None if o.attn_only else FeedForward(o)
        self.norm1 = layer_norm(o)
        self.norm2 = None if o.attn_only else layer_norm(o)
        self.drop1 = nn.Dropout(o.dropout)

    def forward(self, x, key_padding_mask=None, is_causal=False, cache=None):
        def sa(h):
            if cache is not None:  # decoding: causal, no padding
                return self.drop1(self.attn(h, h, h, is_causal=True, cache=cache))
            return self.drop1(self.attn(h, h, h, key_padding_mask, is_causal))
        if self.norm_first:
            x = x + sa(self.norm1(x))
            return x if self.ff is None else x + self.ff(self.norm2(x))
        x = self.norm1(x + sa(x))
        return x if self.ff is None else self.norm2(x + self.ff(x))


class DecoderLayer(nn.Module):
    """pre-LN:  x = x + drop1(self_attn(norm1(x), causal)); x = x + drop2(cross_attn(norm2(x), memory));
             x = x + ff(norm3(x))
    post-LN: x = norm1(x + drop1(self_attn(x, causal))); x = norm2(x + drop2(cross_attn(x, memory)));
             x = norm3(x + ff(x))"""

    def __init__(self, o):
        super().__init__()
        self.norm_first = o.norm_first
        self.self_attn, self.cross_attn, self.ff = make_attention(o), make_attention(o), FeedForward(o)
        self.norm1, self.norm2, self.norm3 = (layer_norm(o) for _ in range(3))
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
    """x (B, T, C) + weight[offset : offset + T]; weight (max_len, C) starts N(0, 1)."""

    def __init__(self, max_len, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, dim))

    def forward(self, x, offset=0):
        if offset + x.shape[1] > self.weight.shape[0]:
            raise ValueError(f"positions up to {offset + x.shape[1]} exceed max_len {self.weight.shape[0]}")
        return x + self.weight[offset: offset + x.shape[1]]


class SinusoidalPositions(nn.Module):
    """x (B, T, C) + PE[offset : offset + T], PE[t, 2i] = sin(t / 10000^(2i/C)), PE[t, 2i+1] =
    cos(same); computed in float64 and rounded to x's dtype, as qkv does. No parameters."""

    def forward(self, x, offset=0):
        T, C = x.shape[1], x.shape[2]
        t = torch.arange(offset, offset + T, dtype=torch.float64)[:, None]
        j = torch.arange(C)
        angle = t * torch.pow(10000.0, -(j - j % 2).double() / C)
        return x + torch.where(j % 2 == 0, torch.sin(angle), torch.cos(angle)).to(x.dtype)


def make_positions(o):
    if o.positional == "rope":
        return None  # inside the attention
    return LearnedPositions(o.max_len, o.d_model) if o.positional == "learned" else SinusoidalPositions()


def final_norm(o):
    # post-LN layers already end normalised; norm none has no LayerNorm at all
    return nn.LayerNorm(o.d_model) if o.norm_first and o.norm == "layer" else None


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

    def forward(self, tokens, key_padding_mask=None, rows=None):
        """rows: flat positions b T + t; given, the logits of those alone (n, num_classes), as
        qkv's forward_rows (a masked LM's training step scores its masked positions only)."""
        h = self.emb_drop(self.pos(self.tok_emb(tokens)))
        for block in self.blocks:
            h = block(h, key_padding_mask, self.causal)
        h = self.norm(h) if self.norm is not None else h
        return self.head(h if rows is None else h.reshape(-1, h.shape[-1])[rows])

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
        """Greedy decoding, as qkv's evaluation: BOS, then the argmax of the last position, appended.
        Without a BOS (bos -1: seq2seq_recall, whose decoder inputs are given) the teacher-forced argmax."""
        if self.bos < 0:
            return logits.argmax(-1)
        src, T = batch["inputs"], batch["targets"].shape[1]
        memory = self.encode(src)
        out = torch.full((src.shape[0], 0), 0, dtype=torch.int64)
        for _ in range(T):
            tgt_in = torch.cat([torch.full((src.shape[0], 1), self.bos, dtype=torch.int64), out], dim=1)
            out = torch.cat([out, self.decode(memory, tgt_in)[:, -1].argmax(-1, keepdim=True)], dim=1)
        return out


class Decoder(nn.Module):
    """qkv's nn::DecoderModel, a GPT: tokens (B, T) -> next-token logits (B, T, V); position t
    sees tokens <= t only, T <= max_len (the context: the task's length).
        h = emb_drop(pos(e(tokens)))    e = tok_emb, times sqrt(C) when tied; no pos with rope
        h = blocks[i](h, causal)         EncoderLayer; attn_only: attention only
        h = norm(h)                      pre-LN only
        logits = h head^T                head = tok_emb.weight when tied; no bias
    Parameters: tok_emb.weight, [pos.weight], blocks.<i>.*, [norm.*], [head.weight]."""

    def __init__(self, o, vocab):
        super().__init__()
        self.max_len, self.tied = o.max_len, o.tie_embeddings
        self.tok_emb = nn.Embedding(vocab, o.d_model)
        if self.tied:  # qkv: N(0, 1/C), scaled by sqrt(C) on input
            nn.init.normal_(self.tok_emb.weight, 0.0, 1.0 / math.sqrt(o.d_model))
        self.pos = make_positions(o)
        self.emb_drop = nn.Dropout(o.dropout)
        self.blocks = nn.ModuleList(EncoderLayer(o) for _ in range(o.layers))
        self.norm = final_norm(o)
        self.head = None if self.tied else nn.Linear(o.d_model, vocab, bias=False)
        self.emb_scale = math.sqrt(o.d_model)

    def forward(self, tokens, cache=None):
        """tokens (B, Tn); with `cache` (make_cache(); under no_grad) they are the positions
        cache.length ... and their keys and values join it: the logits are those of the last Tn
        positions of forward() on the whole sequence (to rounding)."""
        at = cache[0].length if cache else 0
        if at + tokens.shape[1] > self.max_len:
            raise ValueError(f"positions up to {at + tokens.shape[1]} exceed max_len (the context) {self.max_len}")
        h = self.tok_emb(tokens)
        if self.tied:
            h = h * torch.tensor(self.emb_scale, dtype=h.dtype)  # rounded to the dtype first, as qkv
        if self.pos is not None:
            h = self.pos(h, at)
        h = self.emb_drop(h)
        for i, block in enumerate(self.blocks):
            h = block(h, None, True, cache[i] if cache else None)
        if self.norm is not None:
            h = self.norm(h)
        return h @ self.tok_emb.weight.t() if self.tied else self.head(h)

    def make_cache(self):
        return [KVCache() for _ in self.blocks]

    def batch_logits(self, batch):
        return self(batch["inputs"])

    def predict(self, batch, logits):
        return logits.argmax(-1)

    def generate(self, prompt, max_tokens, cache=True):
        """Greedy continuation of `prompt` (a list of ids), as qkv generate --temperature 0: the
        window rule of include/qkv/train/generate.hpp (the model sees tokens[s, n); when n - s
        would exceed the context C, s jumps to n - ceil(C / 2) and the cache is refilled), the
        first maximum of each row of logits. Returns the new ids."""
        return generate(self, prompt, max_tokens, cache, lambda logits: int(torch.argmax(logits)))


def generate(model, prompt, max_tokens, use_cache, choose):
    """The decoding loop of qkv's train::generate for a Decoder (eval mode, no grad): `choose`
    maps the last row of logits (V) to the next id."""
    tokens, out = list(prompt), []
    start = fed = 0
    kv = model.make_cache()
    C = model.max_len
    with torch.no_grad():
        for _ in range(max_tokens):
            n = len(tokens)
            if n - start > C:  # the window jumps: keep its last half
                start = fed = n - (C + 1) // 2
                kv = model.make_cache()
            frm = fed if use_cache else start
            ids = torch.tensor([tokens[frm:]], dtype=torch.int64)
            logits = model(ids, kv) if use_cache else model(ids)
            fed = n
            out.append(choose(logits[0, -1]))
            tokens.append(out[-1])
    return out


# The model config.model.arch names: arch -> (options, sizes) -> mirror; the vocabularies come from
# qkv_torch.model_sizes.
ARCHS = {
    "encoder": lambda o, s: Encoder(o, s.input_vocab, s.output_vocab),
    "encoder_decoder": lambda o, s: Seq2Seq(o, s.input_vocab, s.output_vocab, s.bos),
    "decoder": lambda o, s: Decoder(o, s.input_vocab),
}


@dataclass
class Sizes:
    """The vocabularies of a model: tokens in, classes (or target tokens) out; BOS of seq2seq."""
    input_vocab: int
    output_vocab: int
    bos: int = -1
