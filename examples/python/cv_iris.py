#!/usr/bin/env python3
"""A 5-fold cross-validation of iris through traind, as a notebook runs it.

Submits examples/iris-cv.yaml unmodified (the Python client sends its text;
traind parses it), follows the per-epoch metrics live, reads the result, and
plots each fold's validation curves when matplotlib is installed. Cells are
marked `# %%` (VS Code, Jupytext and Spyder run them one by one).

    build/bin/traind &                                  # in the source tree
    PYTHONPATH=build/client/python/lib /usr/bin/python3 examples/python/cv_iris.py

(or, after `pip install ./client/python`, just `python3 examples/python/cv_iris.py`).
Options: --epochs N, --folds K, --plot FILE (default: cv_iris.png),
--address ADDR (default: as trainctl's, e.g. $TRAIND_ADDRESS).
"""

# %% Connect and submit
import argparse
import os

import traind

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--address", default=None)
parser.add_argument("--epochs", type=int, default=60)
parser.add_argument("--folds", type=int, default=5)
parser.add_argument("--plot", default="cv_iris.png")
args = parser.parse_args()

client = traind.Client(args.address)
print(f"traind {client.info()['version']} at {client.address}")

# The spec's data path (examples/data/iris.csv) is relative to the source
# tree, so that is the base directory here; `set` overrides fields as
# trainctl's --set does.
job = client.submit(os.path.join(SOURCE_DIR, "examples", "iris-cv.yaml"), base_dir=SOURCE_DIR,
                    set={"training.epochs": args.epochs, "cross_validation.folds": args.folds})
print(f"submitted job {job.id} ({job.name}), {len(job.data['tasks'])} folds")

# %% Follow it: per-epoch metrics as they are stored (a dropped connection
# resumes from the last event seen)
for event in job.watch():
    if "epoch" in event:
        m = event["epoch"]
        if m["epoch"] % 20 == 0 or m["epoch"] == args.epochs:
            print(f"fold {m['task']}  epoch {m['epoch']:3d}  train loss {m['train']['loss']:.4f}"
                  f"  val loss {m['val']['loss']:.4f}  val accuracy {m['val']['accuracy']:.4f}")
    elif "task_state" in event and event["task_state"]["state"] in ("SUCCEEDED", "FAILED"):
        print(f"fold {event['task_state']['task']} {event['task_state']['state']}")
job.wait()
print(f"job {job.id} {job.state}")
if job.state != "SUCCEEDED":
    raise SystemExit(f"job {job.state}: {job.failure}")

# %% The result: per fold, and mean ± std over folds
result = job.result()
try:
    print(result.folds_frame()[["best_epoch", "val_loss", "val_accuracy"]].to_string())
except ImportError:  # no pandas: the plain dicts
    for fold in result["folds"]:
        print(fold["fold"], fold["best_epoch"], fold["val"]["loss"], fold["val"]["accuracy"])
for metric, s in sorted(result["val"].items()):
    print(f"val {metric}: {s['mean']:.4f} ± {s['std']:.4f} over {len(result['folds'])} folds")

# %% The fold curves
try:
    import matplotlib
    matplotlib.use("Agg")  # files, no display needed
    import matplotlib.pyplot as plt
except ImportError:
    print("matplotlib is not installed: no plot (apt-get install python3-matplotlib)")
else:
    history = job.history()  # one dict per epoch of each fold
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for fold in sorted({h["task"] for h in history}):
        rows = [h for h in history if h["task"] == fold]
        epochs = [h["epoch"] for h in rows]
        loss_ax.plot(epochs, [h["val_loss"] for h in rows], label=f"fold {fold}")
        acc_ax.plot(epochs, [h["val_accuracy"] for h in rows], label=f"fold {fold}")
    loss_ax.set(title="validation loss", xlabel="epoch")
    acc_ax.set(title="validation accuracy", xlabel="epoch")
    loss_ax.legend()
    fig.tight_layout()
    fig.savefig(args.plot)
    print(f"plotted the fold curves to {args.plot}")
