#!/usr/bin/env python3
"""bench/fp32_update_fidelity.py: how far one fp32 AdamW step of xrun's CPU
engine lands from float64, beside PyTorch fp32 on the same start (issue #22,
part 3). Not a CI test: it needs torch, torchvision and safetensors.

The measurement: torchvision resnet50(num_classes=10) with its own seeded
initialisation (torch.manual_seed(7)), a batch of 8 random uint8 images in
CIFAR-10's binary format (normalised with mean 0.5 / std 0.5), one AdamW step
(lr 1e-3, weight decay 0.01) in training mode. The judge is the same step in
float64. For every parameter tensor it counts the elements whose update
(w_before - w_after) differs from float64's by more than 0.1 lr. At AdamW's
first step an update is about +-lr wherever the gradient is not tiny, so an
element is off when its gradient's sign differs from float64's (or the
gradient is within rounding of zero). PyTorch runs in four fp32
configurations (contiguous / channels_last, 1 / 2 threads: its own spread);
xrun runs through its command line (model.weights = the start, the CIFAR
file as data, train.checkpoint = the result), once per ONEDNN_MAX_CPU_ISA
in --isa (the default, avx2, ...).

  python3 bench/fp32_update_fidelity.py --xrun build/runner/xrun [--isa default,AVX2]
        [--per-tensor] [--work DIR]

Prints the off counts per engine (total and in each stage of the model) and,
with --per-tensor, every tensor where an xrun run is off more than PyTorch's
worst configuration.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision

LR, WD, BATCH, SIZE, SEED = 1e-3, 0.01, 8, 32, 7


def save_safetensors(path, tensors):
    """The safetensors format (8-byte header length, JSON header, raw data)."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        a = t.detach().cpu().contiguous().numpy()
        dtype = {np.float32: "F32", np.int64: "I64"}[a.dtype.type]
        header[name] = {"dtype": dtype, "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__" or e["dtype"] != "F32":
            continue
        lo, hi = e["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype=np.float32).reshape(e["shape"])
    return out


def torch_step(state, x, y, dtype, memory_format, threads):
    """One AdamW step from `state`; returns {name: update} as float64 numpy."""
    torch.set_num_threads(threads)
    m = torchvision.models.resnet50(num_classes=10)
    m.load_state_dict(state)
    m = m.to(dtype=dtype, memory_format=memory_format)
    m.train()
    before = {n: p.detach().double().clone() for n, p in m.named_parameters()}
    opt = torch.optim.AdamW(m.parameters(), lr=LR, weight_decay=WD)
    loss = torch.nn.functional.cross_entropy(m(x.to(dtype).contiguous(memory_format=memory_format)), y)
    loss.backward()
    opt.step()
    return {n: (before[n] - p.detach().double()).numpy() for n, p in m.named_parameters()}


def xrun_step(xrun, work, isa, names, start):
    toml = os.path.join(work, "fidelity.toml")
    out = os.path.join(work, f"after-{isa}.safetensors")
    with open(toml, "w") as f:
        f.write(f"""name = "fp32-update-fidelity"
[model]
arch = "resnet50"
num_classes = 10
weights = "{work}/start.safetensors"
[data]
source = "cifar10"
path = "{work}/cifar"
image_size = {SIZE}
mean = [0.5, 0.5, 0.5]
std = [0.5, 0.5, 0.5]
augment = []
shuffle = false
workers = 0
limit = {BATCH}
[train]
device = "cpu"
batch_size = {BATCH}
steps = 1
eval = false
threads = 2
checkpoint = "{out}"
[train.optimizer]
name = "adamw"
lr = {LR}
weight_decay = {WD}
[measure]
warmup_steps = 0
measure_steps = 1
""")
    env = dict(os.environ)
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if isa != "default":
        env["ONEDNN_MAX_CPU_ISA"] = isa
    db = os.path.join(work, f"xrun-{isa}.db")
    if os.path.exists(db):
        os.remove(db)
    subprocess.run([xrun, "run", toml, "--db", db], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    after = load_safetensors(out)
    return {n: start[n].astype(np.float64) - after[n].astype(np.float64) for n in names}


def stage(name):
    return name.split(".")[0] if name.startswith("layer") else "stem/fc"


def write_batch(work, data_seed):
    """The batch as CIFAR-10's files (10,000 records each; xrun reads the first
    8 records of data_batch_1.bin with data.limit = 8, the rest are zeros) and
    as PyTorch tensors."""
    rng = np.random.default_rng(data_seed)
    labels = rng.integers(0, 10, BATCH, dtype=np.uint8)
    pixels = rng.integers(0, 256, (BATCH, 3, SIZE, SIZE), dtype=np.uint8)
    records = bytearray(10000 * 3073)
    for i in range(BATCH):
        records[i * 3073:(i + 1) * 3073] = bytes([labels[i]]) + pixels[i].tobytes()
    for name in ["data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                 "data_batch_5.bin", "test_batch.bin"]:
        with open(os.path.join(work, "cifar", name), "wb") as f:
            f.write(records)
    x = (torch.from_numpy(pixels.astype(np.float64)) / 255.0 - 0.5) / 0.5
    return x, torch.from_numpy(labels.astype(np.int64))


def off_counts(a, work, state, start, names, data_seed):
    """{engine: {tensor: elements off}} for one batch."""
    x, y = write_batch(work, data_seed)
    judge = torch_step(state, x, y, torch.float64, torch.contiguous_format, 2)
    runs = {}
    for fmt_name, fmt in (("contiguous", torch.contiguous_format),
                          ("channels_last", torch.channels_last)):
        for threads in (1, 2):
            runs[f"PyTorch {torch.__version__} {fmt_name} {threads}t"] = torch_step(
                state, x, y, torch.float32, fmt, threads)
    for isa in a.isa.split(","):
        runs[f"xrun ISA {isa}"] = xrun_step(a.xrun, work, isa, names, start)
    return {label: {n: int(np.count_nonzero(np.abs(upd[n] - judge[n]) > 0.1 * LR)) for n in names}
            for label, upd in runs.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--xrun", default="build/runner/xrun")
    ap.add_argument("--isa", default="default,AVX2")
    ap.add_argument("--per-tensor", action="store_true")
    ap.add_argument("--work", default="")
    ap.add_argument("--batches", type=int, default=1,
                    help="repeat with this many batches (data seeds 7, 8, ...): which engine "
                         "meets a ReLU kink depends on the batch, so one batch says little")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="xrun-fidelity-")
    os.makedirs(os.path.join(work, "cifar"), exist_ok=True)

    torch.manual_seed(SEED)
    model = torchvision.models.resnet50(num_classes=10)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    save_safetensors(os.path.join(work, "start.safetensors"), state)
    names = [n for n, _ in model.named_parameters()]
    start = {n: state[n].numpy() for n in names}
    total = sum(start[n].size for n in names)
    stages = sorted({stage(n) for n in names})

    totals = {}
    for b in range(a.batches):
        off = off_counts(a, work, state, start, names, SEED + b)
        print(f"batch {b + 1} (data seed {SEED + b}): elements whose update is off float64's by "
              f"> 0.1 lr ({total} parameters; work files in {work})")
        print(f"{'engine':40} {'total':>14} " + " ".join(f"{s:>9}" for s in stages))
        for label, counts in off.items():
            per_stage = {s: sum(c for n, c in counts.items() if stage(n) == s) for s in stages}
            size = {s: sum(start[n].size for n in names if stage(n) == s) for s in stages}
            t = sum(counts.values())
            totals.setdefault(label, []).append(t)
            print(f"{label:40} {t:7d} {100 * t / total:5.2f}% " +
                  " ".join(f"{100 * per_stage[s] / size[s]:8.3f}%" for s in stages))
        if a.per_tensor:
            torch_labels = [l for l in off if l.startswith("PyTorch")]
            print("tensors where an xrun run is off more than PyTorch's worst configuration:")
            for n in names:
                worst = max(off[l][n] for l in torch_labels)
                xs = {l: off[l][n] for l in off if l.startswith("xrun") and off[l][n] > worst}
                if xs:
                    print(f"  {n:36} {start[n].size:8d} PyTorch worst {worst:6d}  " +
                          "  ".join(f"{l.split()[-1]} {c}" for l, c in xs.items()))
        print()
    if a.batches > 1:
        print(f"over {a.batches} batches: % of elements off (median, then each batch)")
        for label, ts in totals.items():
            pct = [100 * t / total for t in ts]
            print(f"{label:40} {float(np.median(pct)):5.2f}%   " +
                  " ".join(f"{p:5.2f}" for p in pct))


if __name__ == "__main__":
    sys.exit(main())
