"""Permutation importance, checked against scikit-learn's
permutation_importance on one fold: the same fitted model (the fold's
model.ckpt, scored by traind-worker --predict), the same validation rows,
the same metric (val.loss: scikit-learn's neg_log_loss), the permutations
each library draws. The means agree within their standard errors."""

from __future__ import annotations

import csv
import io
import math
import os
import subprocess

import numpy as np
import pandas as pd
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.inspection import permutation_importance
from sklearn.metrics import log_loss

from conftest import BIN_DIR

REPEATS = 30
FEATURES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]


class TraindModel(ClassifierMixin, BaseEstimator):
    """A fold's model.ckpt as a scikit-learn classifier: each call scores
    the rows with traind-worker --predict (traind's own preprocessing and
    network)."""

    def __init__(self, model_path: str, classes, scratch: str):
        self.model_path = model_path
        self.classes = classes
        self.scratch = scratch

    @property
    def classes_(self):
        return np.array(self.classes)

    def fit(self, X, y):  # already fitted by traind
        return self

    def predict_proba(self, X):
        path = os.path.join(self.scratch, "rows.csv")
        pd.DataFrame(X, columns=FEATURES).to_csv(path, index=False)
        out = subprocess.run([os.path.join(BIN_DIR, "traind-worker"), "--predict",
                              self.model_path, "--data", path], check=True,
                             capture_output=True, text=True).stdout
        frame = pd.read_csv(io.StringIO(out))
        return frame[["p_" + c for c in self.classes]].to_numpy()

    def predict(self, X):
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


def test_importance_agrees_with_scikit_learn_on_a_fold(daemon, client, source_dir, tmp_path):
    spec = os.path.join(source_dir, "examples", "iris-cv.yaml")
    job = client.submit(spec, base_dir=source_dir, name="py-importance",
                        set={"cross_validation.folds": 3, "training.epochs": 40,
                             "importance.repeats": REPEATS})
    assert job.wait(timeout=300).state == "SUCCEEDED", job.data
    result = job.result()

    # The job's summary: every feature, most important first, over 3 folds.
    frame = result.importance_frame()
    assert sorted(frame.index) == sorted(FEATURES)
    assert list(frame["importances_mean"]) == sorted(frame["importances_mean"], reverse=True)
    assert frame.attrs["metric"] == "val.loss (min)"
    for feature in FEATURES:
        means = [{f["feature"]: f for f in fold["importance"]}[feature]["mean"]
                 for fold in result["folds"]]
        assert frame.loc[feature, "importances_mean"] == pytest.approx(sum(means) / 3)
        assert [frame.loc[feature, "fold%d" % k] for k in range(3)] == pytest.approx(means)

    # Fold 0: its validation rows (from its predictions.csv) and its model.
    fold = next(f for f in result["folds"] if f["fold"] == 0)
    assert fold["importance_metric"] == "val.loss (min)"
    ours = {f["feature"]: f for f in fold["importance"]}
    assert all(len(ours[f]["values"]) == REPEATS for f in FEATURES)
    rows = list(csv.DictReader(io.StringIO(job.download("task-0/predictions.csv").decode())))
    assert {r["fold"] for r in rows} == {"0"}
    with open(os.path.join(source_dir, "examples", "data", "iris.csv")) as f:
        iris = list(csv.DictReader(f))
    val = [iris[int(r["row"])] for r in rows]
    assert [v["species"] for v in val] == [r["true_species"] for r in rows]
    X = pd.DataFrame([[float(v[c]) for c in FEATURES] for v in val], columns=FEATURES)
    y = np.array([v["species"] for v in val])
    model = TraindModel(os.path.join(daemon.state_dir, "jobs", job.id, "task-0", "model.ckpt"),
                        result["classes"], str(tmp_path))

    # The wrapped model is the one that scored the fold: its unshuffled log
    # loss is that of the fold's predictions.csv.
    fold_p = np.array([[float(r["p_" + c]) for c in model.classes] for r in rows])
    assert log_loss(y, model.predict_proba(X), labels=model.classes_) == pytest.approx(
        log_loss(y, fold_p, labels=model.classes_), rel=1e-5)

    theirs = permutation_importance(model, X, y, scoring="neg_log_loss", n_repeats=REPEATS,
                                    random_state=0)
    for j, feature in enumerate(FEATURES):
        mine = ours[feature]
        se = math.sqrt(mine["std"] ** 2 / REPEATS + theirs.importances_std[j] ** 2 / REPEATS)
        assert abs(mine["mean"] - theirs.importances_mean[j]) <= 4 * se + 1e-3, (
            feature, mine["mean"], theirs.importances_mean[j], se)
    # The same most important feature.
    assert max(FEATURES, key=lambda f: ours[f]["mean"]) == \
        FEATURES[int(np.argmax(theirs.importances_mean))]
