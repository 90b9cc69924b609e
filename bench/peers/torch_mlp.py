"""PyTorch peer of bench/cpu_bench.cc: the same MLP, data, init, optimizer,
batch size and shuffling, timed per epoch. Run with /usr/bin/python3 (Debian's python3-torch).

  torch_mlp.py --data FILE --hidden 512,256 --batch 128 --epochs 3 --threads 2 [--rows N]
               [--precision fp32|bf16]

--precision bf16: forward and loss under torch.autocast("cpu", dtype=torch.bfloat16) (bf16
matmuls through oneDNN where the CPU has AVX512-BF16), fp32 parameters, gradients and
optimizer state: PyTorch's own mixed-precision recipe for the CPU.

Prints one JSON line: epoch seconds (training loop only: shuffle, gather, forward, loss,
backward, step), each epoch's mean training loss, the BLAS library the process loaded and
its thread settings.
"""
import contextlib
import argparse
import json
import os
import time

import numpy as np
import torch


def read_data(path, max_rows):
    with open(path, "rb") as f:
        assert f.read(4) == b"TRDB"
        rows, features, classes = np.frombuffer(f.read(24), dtype=np.int64)
        x = np.frombuffer(f.read(int(rows * features) * 4), dtype=np.float32).reshape(rows, features)
        y = np.frombuffer(f.read(int(rows) * 4), dtype=np.int32)
    if max_rows:
        x, y = x[:max_rows], y[:max_rows]
    return torch.from_numpy(x.copy()), torch.from_numpy(y.astype(np.int64)), int(classes)


def loaded_blas():
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()[-1]
            if any(s in p for s in ("blas", "lapack", "mkl", "gomp", "omp")) and p.startswith("/"):
                libs.add(os.path.realpath(p))
    return sorted(libs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--hidden", default="512,256")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=0)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(42)
    x, y, classes = read_data(a.data, a.rows)
    sizes = [x.shape[1]] + [int(h) for h in a.hidden.split(",") if h] + [classes]
    layers = []
    for i in range(len(sizes) - 1):
        lin = torch.nn.Linear(sizes[i], sizes[i + 1])
        torch.nn.init.xavier_uniform_(lin.weight)
        torch.nn.init.zeros_(lin.bias)
        layers.append(lin)
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    n = x.shape[0]
    gen = torch.Generator().manual_seed(42)
    epoch_seconds, epoch_loss = [], []
    if a.precision == "bf16":
        autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    else:
        autocast = contextlib.nullcontext
    model.train()
    for _ in range(a.epochs):
        t0 = time.perf_counter()
        order = torch.randperm(n, generator=gen)
        total = torch.zeros(())
        for start in range(0, n, a.batch):
            idx = order[start:start + a.batch]
            xb, yb = x.index_select(0, idx), y.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            total += loss.detach().float() * idx.numel()
        epoch_loss.append(float(total) / n)
        epoch_seconds.append(time.perf_counter() - t0)
    blas_info = [l.strip() for l in torch.__config__.show().splitlines() if "BLAS" in l]
    print(json.dumps({
        "engine": "torch " + torch.__version__, "precision": a.precision, "rows": n, "batch": a.batch,
        "threads": torch.get_num_threads(), "epoch_seconds": epoch_seconds,
        "epoch_loss": epoch_loss, "blas_loaded": loaded_blas(), "torch_config_blas": blas_info,
        "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY",
                "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "LD_LIBRARY_PATH")},
    }))


if __name__ == "__main__":
    main()
