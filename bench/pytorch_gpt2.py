#!/usr/bin/env python3
"""bench/pytorch_gpt2.py: PyTorch's GPT-2 training speed, as
bench/gpt2_cpu_vs_pytorch.sh (CPU) and bench/gpu_vs_pytorch.sh (GPU)
compare it with xrun's: AdamW (fused where the build has it; decay on
matrices only, as xrun), synthetic tokens, dropout 0, the mean next-token
cross-entropy; PRECISION fp32 (default), tf32 (GPU matmuls), or fp16 /
bf16 under torch.autocast (fp16 with a GradScaler); DEVICE cpu (default)
or cuda; two models of the same shape:
  hf      transformers' GPT2LMHeadModel (what xrun's names and layers follow);
  nanogpt a plain PyTorch GPT-2 in nanoGPT's style (one fused qkv Linear,
          F.scaled_dot_product_attention with is_causal, tied lm_head).
Prints one line: "tokens_per_s <value>" over the measured steps.

  python3 bench/pytorch_gpt2.py MODEL LAYERS HEADS WIDTH T BATCH THREADS WARMUP STEPS [PRECISION [DEVICE]]
"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln_1 = nn.LayerNorm(c)
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c)
        self.mlp_proj = nn.Linear(4 * c, c)  # mlp.c_proj

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class NanoGpt(nn.Module):
    def __init__(self, layers, heads, width, context, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        # nanoGPT's initialisation (PyTorch's defaults, N(0, 1) embeddings,
        # saturate the softmax and fill the gradients with denormals).
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                torch.nn.init.normal_(p, mean=0.0, std=std)
            else:
                torch.nn.init.zeros_(p) if name.endswith("bias") else torch.nn.init.ones_(p)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    model, layers, heads, width, t, batch, threads, warmup, steps = sys.argv[1:10]
    precision = sys.argv[10] if len(sys.argv) > 10 else "fp32"
    device = sys.argv[11] if len(sys.argv) > 11 else "cpu"
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
    layers, heads, width, t, batch = map(int, (layers, heads, width, t, batch))
    threads, warmup, steps = int(threads), int(warmup), int(steps)
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    vocab = 50257
    if model == "hf":
        import transformers
        cfg = transformers.GPT2Config(n_layer=layers, n_head=heads, n_embd=width, n_positions=t,
                                      vocab_size=vocab, resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0)
        net = transformers.GPT2LMHeadModel(cfg)

        def loss_of(x, y):
            logits = net(input_ids=x).logits
            return F.cross_entropy(logits.view(-1, vocab), y.view(-1))
    else:
        net = NanoGpt(layers, heads, width, t, vocab)
        loss_of = net
    net.to(device)
    net.train()
    decay = [p for p in net.parameters() if p.dim() >= 2]
    no_decay = [p for p in net.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), fused=True)
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95))
    x = torch.randint(0, vocab, (batch, t), device=device)
    y = torch.randint(0, vocab, (batch, t), device=device)
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler(device, enabled=precision == "fp16")

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    for i in range(warmup + steps):
        if i == warmup:
            sync()
            start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=half or torch.float32, enabled=half is not None):
            loss = loss_of(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    sync()
    seconds = time.perf_counter() - start
    assert math.isfinite(loss.item())
    print(f"tokens_per_s {batch * t * steps / seconds:.1f}")


if __name__ == "__main__":
    main()
