"""PyTorch (CUDA, eager) side of the GPU benchmark in run_device_checks.sh.

  torch_mlp_gpu.py --rows N --seed S --write-csv FILE        # the data, for traind
  torch_mlp_gpu.py --rows N --seed S --batch B --epochs E [--tf32]

The data: N synthetic 28x28 "images" (784 integer pixels in 0..16, ten
classes around random centroids), the same for both sides. The model and
training are traind's spec in run_device_checks.sh: MLP 784-512-256-10 (ReLU),
Xavier-uniform weights, zero biases, SGD lr 0.01 momentum 0.9, softmax
cross-entropy, features standardized, rows reshuffled every epoch, fp32
(TF32 with --tf32). The whole data set lives on the GPU and the loop never
waits for the device (loss summed on the GPU, read once per epoch): the
strongest plain-eager PyTorch loop. Prints one JSON line: epoch seconds
(synchronized) and samples/s over the epochs after the first.
"""
import argparse
import json
import statistics
import time

import numpy as np


def make_data(rows, seed):
    rng = np.random.default_rng(seed)
    centroids = rng.uniform(0, 16, size=(10, 784))
    labels = rng.integers(0, 10, size=rows)
    x = np.clip(np.rint(centroids[labels] + rng.normal(0, 4, size=(rows, 784))), 0, 16)
    return x.astype(np.int32), labels.astype(np.int64)


def write_csv(path, x, y):
    names = [str(i) for i in range(17)]
    with open(path, "w") as f:
        f.write(",".join("p%d" % i for i in range(784)) + ",label\n")
        for row, label in zip(x, y):
            f.write(",".join(names[v] for v in row) + "," + str(label) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--write-csv")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--tf32", action="store_true")
    a = ap.parse_args()
    x, y = make_data(a.rows, a.seed)
    if a.write_csv:
        write_csv(a.write_csv, x, y)
        return

    import torch

    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.manual_seed(42)
    xf = x.astype(np.float32)
    xf = (xf - xf.mean(axis=0)) / np.where(xf.std(axis=0) > 0, xf.std(axis=0), 1)
    xs = torch.from_numpy(xf).to(dev)
    ys = torch.from_numpy(y).to(dev)
    sizes = [784, 512, 256, 10]
    layers = []
    for i in range(3):
        lin = torch.nn.Linear(sizes[i], sizes[i + 1])
        torch.nn.init.xavier_uniform_(lin.weight)
        torch.nn.init.zeros_(lin.bias)
        layers.append(lin)
        if i < 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    n = xs.shape[0]
    epoch_seconds, epoch_loss = [], []
    for _ in range(a.epochs):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        order = torch.randperm(n, device=dev)
        total = torch.zeros((), device=dev)
        for start in range(0, n, a.batch):
            idx = order[start:start + a.batch]
            xb, yb = xs.index_select(0, idx), ys.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            total += loss.detach() * idx.numel()
        epoch_loss.append(float(total) / n)  # the one sync per epoch
        torch.cuda.synchronize()
        epoch_seconds.append(time.perf_counter() - t0)
    steady = epoch_seconds[1:] or epoch_seconds
    print(json.dumps({
        "engine": "torch %s (CUDA %s, %s)" % (torch.__version__, torch.version.cuda,
                                              torch.cuda.get_device_name(0)),
        "rows": n, "batch": a.batch, "tf32": a.tf32, "epoch_seconds": epoch_seconds,
        "epoch_loss": epoch_loss, "samples_per_s": n / statistics.median(steady),
    }))


if __name__ == "__main__":
    main()
