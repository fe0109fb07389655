#!/usr/bin/env python3
"""Trains the demo model: a small Llama (GQA, SwiGLU, RMSNorm, rotate-half RoPE, tied
embeddings) with a SentencePiece BPE tokenizer learnt from the same text, and writes a
Hugging Face folder (config.json, model.safetensors, tokenizer.model). `inflight-model
convert` turns it into the bundled GGUF (see make-demo-model.sh). Needs Debian's
python3-torch and python3-sentencepiece; CPU only."""
import argparse
import json
import math
import os
import random
import struct
import time

import sentencepiece as spm
import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, vocab, dim=192, layers=4, heads=6, kv_heads=2, ffn=512, context=512):
        self.vocab, self.dim, self.layers, self.heads, self.kv_heads = vocab, dim, layers, heads, kv_heads
        self.ffn, self.context, self.head_dim, self.eps, self.theta = ffn, context, dim // heads, 1e-5, 10000.0


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.input_layernorm = nn.Parameter(torch.ones(c.dim))
        self.post_attention_layernorm = nn.Parameter(torch.ones(c.dim))
        self.q_proj = nn.Linear(c.dim, c.heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.dim, c.kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.dim, c.kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.heads * c.head_dim, c.dim, bias=False)
        self.gate_proj = nn.Linear(c.dim, c.ffn, bias=False)
        self.up_proj = nn.Linear(c.dim, c.ffn, bias=False)
        self.down_proj = nn.Linear(c.ffn, c.dim, bias=False)

    def norm(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c.eps) * w

    def forward(self, x, cos, sin):
        c = self.c
        B, T, _ = x.shape
        h = self.norm(x, self.input_layernorm)
        q = self.q_proj(h).view(B, T, c.heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = c.heads // c.kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        # torch 1.13 (Debian 12) has no scaled_dot_product_attention: plain causal softmax.
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c.head_dim)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        a = att.softmax(-1) @ v
        x = x + self.o_proj(a.transpose(1, 2).reshape(B, T, -1))
        h = self.norm(x, self.post_attention_layernorm)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.vocab, c.dim)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm_w = nn.Parameter(torch.ones(c.dim))
        inv = 1.0 / (c.theta ** (torch.arange(0, c.head_dim, 2).float() / c.head_dim))
        ang = torch.outer(torch.arange(c.context).float(), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.embed(ids)
        cos, sin = self.cos[:T], self.sin[:T]
        for b in self.blocks:
            x = b(x, cos, sin)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c.eps) * self.norm_w
        return x @ self.embed.weight.t()


def hf_state(model):
    c = model.c
    out = {"model.embed_tokens.weight": model.embed.weight, "model.norm.weight": model.norm_w}
    for i, b in enumerate(model.blocks):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = b.input_layernorm
        out[p + "post_attention_layernorm.weight"] = b.post_attention_layernorm
        for n in ["q_proj", "k_proj", "v_proj", "o_proj"]:
            out[p + f"self_attn.{n}.weight"] = getattr(b, n).weight
        for n in ["gate_proj", "up_proj", "down_proj"]:
            out[p + f"mlp.{n}.weight"] = getattr(b, n).weight
    return {k: v.detach().float().contiguous() for k, v in out.items()}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--minutes", type=float, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args()
    torch.manual_seed(1)
    random.seed(1)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out_dir, exist_ok=True)

    prefix = os.path.join(args.out_dir, "tokenizer")
    spm.SentencePieceTrainer.train(input=args.corpus, model_prefix=prefix, vocab_size=args.vocab, model_type="bpe",
                                   byte_fallback=True, character_coverage=1.0, input_sentence_size=200000,
                                   shuffle_input_sentence=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                                   num_threads=args.threads, hard_vocab_limit=False, minloglevel=2)
    os.remove(prefix + ".vocab")
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    ids = []
    with open(args.corpus) as f:
        for line in f:
            ids += [1] + sp.encode(line.strip()) + [2]
    data = torch.tensor(ids, dtype=torch.long)
    print(f"corpus: {len(ids)} tokens, vocab {sp.get_piece_size()}", flush=True)

    c = Config(sp.get_piece_size())
    model = Model(c)
    print(f"parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    budget = args.minutes * 60
    start = time.time()
    step = 0
    while True:
        elapsed = time.time() - start
        if elapsed > budget:
            break
        frac = elapsed / budget
        lr = args.lr * min(1.0, (step + 1) / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(data) - args.seq - 1, (args.batch,))
        x = torch.stack([data[s:s + args.seq] for s in starts])
        y = torch.stack([data[s + 1:s + args.seq + 1] for s in starts])
        loss = F.cross_entropy(model(x).view(-1, c.vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f} lr {lr:.2e} {elapsed:.0f}s", flush=True)
        step += 1

    model.eval()
    with torch.no_grad():
        prompt = sp.encode("Once upon a time")
        seq = torch.tensor([[1] + prompt])
        for _ in range(40):
            nxt = model(seq)[0, -1].argmax().item()
            seq = torch.cat([seq, torch.tensor([[nxt]])], dim=1)
        print("sample:", sp.decode(seq[0, 1:].tolist()), flush=True)
    write_safetensors(os.path.join(args.out_dir, "model.safetensors"), hf_state(model))
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": c.dim,
              "num_hidden_layers": c.layers, "num_attention_heads": c.heads, "num_key_value_heads": c.kv_heads,
              "intermediate_size": c.ffn, "vocab_size": c.vocab, "rms_norm_eps": c.eps, "rope_theta": c.theta,
              "max_position_embeddings": c.context, "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2}
    with open(os.path.join(args.out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print(f"trained {step} steps; wrote {args.out_dir}", flush=True)


if __name__ == "__main__":
    main()
