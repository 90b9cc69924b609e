"""The peer of examples/fashion-mnist-cnn.yaml: the same network in PyTorch
(conv 32 3x3 relu, max pool 2, conv 64 3x3 relu, max pool 2, dense 128 relu,
dropout 0.3, dense 10), the same initialization families (He uniform for the
ReLU layers, Xavier uniform for the last, zero biases), Adam at 1e-3 with
traind's cosine schedule over the run's epochs, batch 128, the images
normalized with mean 0.2860 and std 0.3530. Its fastest
plain loop: the normalized float32 images in memory, a batch indexed from
them per step (no DataLoader workers).

  torch_cnn.py --dir /usr/share/datasets/fashion-mnist --threads 2 --epochs 2
               [--fold 0 --folds 5 | --refit] [--seed 7] [--device cuda]

--fold k: stratified k-fold (scikit-learn's StratifiedKFold, shuffled by the
seed), training on the other folds and validating on fold k; --refit: all
60,000 training images, validating on the 10,000 t10k images. One JSON line
per epoch: seconds (the training pass and the validation pass, as traind's
epoch reports them), train loss, val loss and accuracy. --device cuda: the
net and the images on the GPU (TF32 off, cuDNN's fastest algorithms), the
time of an epoch taken after the device has finished it.
"""
import argparse
import gzip
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(64 * 5 * 5, 128)
        self.fc2 = nn.Linear(128, 10)
        for m in (self.conv1, self.conv2, self.fc1):
            nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
        nn.init.xavier_uniform_(self.fc2.weight)
        nn.init.zeros_(self.fc2.bias)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.dropout(F.relu(self.fc1(torch.flatten(x, 1))), 0.3, self.training)
        return self.fc2(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--fold", type=int, default=0)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--refit", action="store_true")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    a = ap.parse_args()
    dev = torch.device(a.device)
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x = read_idx(os.path.join(a.dir, "train-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(a.dir, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    if a.refit:
        vx = read_idx(os.path.join(a.dir, "t10k-images-idx3-ubyte.gz"))
        vy = read_idx(os.path.join(a.dir, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)
        tx, ty = x, y
    else:
        from sklearn.model_selection import StratifiedKFold
        split = list(StratifiedKFold(a.folds, shuffle=True, random_state=a.seed).split(x, y))[a.fold]
        tx, ty, vx, vy = x[split[0]], y[split[0]], x[split[1]], y[split[1]]

    def tensor(images):
        t = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
        return ((t - 0.2860) / 0.3530).contiguous()

    tx, vx = tensor(tx).to(dev), tensor(vx).to(dev)
    ty, vy = torch.from_numpy(ty).to(dev), torch.from_numpy(vy).to(dev)
    net = Net().to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    # traind's cosine schedule (no warmup, min_lr 0): epoch e (from 0) at
    # 1e-3 · (1 + cos(pi e / epochs)) / 2.
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda e: 0.5 * (1 + math.cos(math.pi * min(1.0, e / a.epochs))))
    n = tx.shape[0]
    for epoch in range(1, a.epochs + 1):
        t0 = time.perf_counter()
        net.train()
        order = torch.randperm(n).to(dev)
        total = 0.0
        for start in range(0, n, a.batch):
            idx = order[start:start + a.batch]
            xb, yb = tx[idx], ty[idx]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(xb), yb)
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        net.eval()
        right, vloss = 0, 0.0
        with torch.no_grad():
            for start in range(0, vx.shape[0], 1024):
                out = net(vx[start:start + 1024])
                vloss += F.cross_entropy(out, vy[start:start + 1024], reduction="sum").item()
                right += (out.argmax(1) == vy[start:start + 1024]).sum().item()
        schedule.step()
        if a.device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        print(json.dumps({"epoch": epoch, "seconds": seconds, "train_rows": n, "train_loss": total / n,
                          "val_loss": vloss / vx.shape[0], "val_accuracy": right / vx.shape[0]}),
              flush=True)


if __name__ == "__main__":
    main()
