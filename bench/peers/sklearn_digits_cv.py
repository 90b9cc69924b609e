"""scikit-learn peer for digits CV: MLPClassifier (sgd) 64-128-10, batch 32,
lr 0.01, momentum 0.9, 30 epochs per fold, stratified 5-fold, in one process.
Run with /usr/bin/python3. Prints one JSON line: CV seconds (excluding imports and
CSV loading) and the mean validation accuracy.

  sklearn_digits_cv.py --csv examples/data/digits.csv [--folds 5] [--epochs 30]
"""
import argparse
import json
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import StratifiedKFold
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=30)
    a = ap.parse_args()
    data = np.loadtxt(a.csv, delimiter=",", skiprows=1, dtype=np.float64)
    x, y = data[:, :-1], data[:, -1].astype(int)
    warnings.simplefilter("ignore", ConvergenceWarning)
    t0 = time.perf_counter()
    accs = []
    for train, val in StratifiedKFold(a.folds, shuffle=True, random_state=42).split(x, y):
        scaler = StandardScaler().fit(x[train])
        clf = MLPClassifier(hidden_layer_sizes=(128,), solver="sgd", learning_rate_init=0.01,
                            momentum=0.9, nesterovs_momentum=False, batch_size=32,
                            max_iter=a.epochs, n_iter_no_change=a.epochs + 1, tol=0.0,
                            alpha=0.0, random_state=42)
        clf.fit(scaler.transform(x[train]), y[train])
        accs.append(clf.score(scaler.transform(x[val]), y[val]))
    print(json.dumps({"engine": "scikit-learn MLPClassifier(sgd)", "cv_seconds": time.perf_counter() - t0,
                      "mean_val_accuracy": float(np.mean(accs))}))


if __name__ == "__main__":
    main()
