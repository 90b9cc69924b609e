"""pandas DataFrames of results and metric histories (pandas is optional)."""

from __future__ import annotations

import io
from typing import Any, Dict, Iterable, List, Mapping


def _pandas():
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError("DataFrames need pandas (Debian: apt-get install python3-pandas; "
                          "or pip install pandas); the plain dicts work without it") from e
    return pandas


_FOLD_COLUMNS = ("fold", "repeat", "refit", "best_epoch", "epochs_run", "stopped_early",
                 "train_rows", "val_rows", "selection")


def fold_rows(result: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """One row per fold result (and the refit task's, when there is one):
    the fold's facts, then val_<metric> (at the best epoch), train_<metric>
    (at the best epoch) and final_train_<metric> (last epoch)."""
    folds = list(result.get("folds", []))
    refit = result.get("refit")
    if refit and refit.get("refit"):
        folds.append(refit)
    rows = []
    for f in folds:
        row = {k: f.get(k) for k in _FOLD_COLUMNS}
        for prefix, key in (("val_", "val"), ("train_", "train"), ("final_train_", "final_train")):
            for metric, value in sorted(f.get(key, {}).items()):
                row[prefix + metric] = value
        rows.append(row)
    return rows


def folds_frame(result: Mapping[str, Any]):
    pd = _pandas()
    rows = fold_rows(result)
    frame = pd.DataFrame(rows, columns=list(rows[0].keys()) if rows else list(_FOLD_COLUMNS))
    return frame.set_index("fold")


def summary_frame(result: Mapping[str, Any]):
    pd = _pandas()
    val = result.get("val", {})
    frame = pd.DataFrame([{"metric": m, "mean": s.get("mean"), "std": s.get("std")}
                          for m, s in sorted(val.items())], columns=["metric", "mean", "std"])
    return frame.set_index("metric")


def history_rows(events: Iterable[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """One row per epoch event: task, attempt, epoch, batches, seconds, then
    train_<metric> and val_<metric>. A retried task has rows per attempt."""
    rows = []
    for e in events:
        m = e.get("epoch")
        if not m:
            continue
        row = {"task": m.get("task"), "attempt": m.get("attempt"), "epoch": m.get("epoch"),
               "batches": m.get("batches"), "seconds": m.get("seconds")}
        for prefix in ("train", "val"):
            for metric, value in sorted(m.get(prefix, {}).items()):
                row[f"{prefix}_{metric}"] = value
        rows.append(row)
    return rows


def history_frame(events: Iterable[Mapping[str, Any]]):
    pd = _pandas()
    rows = history_rows(events)
    columns = None if rows else ["task", "attempt", "epoch", "batches", "seconds"]
    return pd.DataFrame(rows, columns=columns)


def predictions_frame(csv_text: str):
    """A predictions CSV (row, label, p_<class> ... or the targets' columns)
    as a DataFrame indexed by row; labels stay strings, as the class names
    of a result are."""
    pd = _pandas()
    frame = pd.read_csv(io.StringIO(csv_text), dtype={"label": str})
    return frame.set_index("row") if "row" in frame.columns else frame
