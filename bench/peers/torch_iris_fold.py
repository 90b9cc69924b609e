"""The common Python alternative to traind's one-worker-per-fold CV (case 4):
one PyTorch process per fold. Trains fold K of a stratified k-fold CV of iris with the
model of examples/iris-cv.yaml (4-16-3, ReLU, Adam lr 0.01, batch 16, standardized on
the training fold), validating every epoch. Run with /usr/bin/python3.

  torch_iris_fold.py --csv examples/data/iris.csv --folds 10 --fold K --epochs 60

The driver times the whole process (start, import torch, load, train, exit).
"""
import argparse
import csv
import json
import time

import numpy as np
import torch


def stratified_folds(y, folds, seed):
    rng = np.random.default_rng(seed)
    out = [[] for _ in range(folds)]
    slot = 0
    for c in np.unique(y):
        rows = np.flatnonzero(y == c)
        rng.shuffle(rows)
        for r in rows:
            out[slot % folds].append(r)
            slot += 1
    return [np.array(sorted(f)) for f in out]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--folds", type=int, default=10)
    ap.add_argument("--fold", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(42 + a.fold)
    with open(a.csv) as f:
        r = csv.reader(f)
        header = next(r)
        rows = list(r)
    li = header.index("species")
    classes = sorted({row[li] for row in rows})
    x = np.array([[float(v) for i, v in enumerate(row) if i != li] for row in rows], dtype=np.float32)
    y = np.array([classes.index(row[li]) for row in rows], dtype=np.int64)
    val = stratified_folds(y, a.folds, 42)[a.fold]
    train = np.setdiff1d(np.arange(len(y)), val)
    mean, std = x[train].mean(0), x[train].std(0)
    std[std == 0] = 1
    x = (x - mean) / std
    xt, yt = torch.from_numpy(x[train]), torch.from_numpy(y[train])
    xv, yv = torch.from_numpy(x[val]), torch.from_numpy(y[val])
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    for m in model:
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            torch.nn.init.zeros_(m.bias)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    t0 = time.perf_counter()
    n = len(yt)
    for _ in range(a.epochs):
        model.train()
        order = torch.randperm(n)
        for s in range(0, n, 16):
            idx = order[s:s + 16]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            out = model(xv)
            val_loss = float(loss_fn(out, yv))
            val_acc = float((out.argmax(1) == yv).float().mean())
    print(json.dumps({"fold": a.fold, "train_seconds": time.perf_counter() - t0,
                      "val_loss": val_loss, "val_accuracy": val_acc}))


if __name__ == "__main__":
    main()
