"""pandas DataFrames of results and metric histories (pandas is optional)."""

from __future__ import annotations

import csv
import io
from typing import Any, Dict, Iterable, List, Mapping, Optional


def _pandas():
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError("DataFrames need pandas (Debian: apt-get install python3-pandas; "
                          "or pip install pandas); the plain dicts work without it") from e
    return pandas


_FOLD_COLUMNS = ("fold", "repeat", "refit", "best_epoch", "epochs_run", "stopped_early",
                 "train_rows", "val_rows", "selection")


def _row(f: Mapping[str, Any]) -> Dict[str, Any]:
    row = {k: f.get(k) for k in _FOLD_COLUMNS}
    for prefix, key in (("val_", "val"), ("train_", "train"), ("final_train_", "final_train")):
        for metric, value in sorted(f.get(key, {}).items()):
            row[prefix + metric] = value
    return row


def fold_rows(result: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """One row per fold result: the fold's facts, then val_<metric> (at the
    best epoch), train_<metric> (at the best epoch) and final_train_<metric>
    (last epoch). The refit task is not a fold (it has no validation rows):
    refit_row() has it."""
    return [_row(f) for f in result.get("folds", []) if not f.get("refit")]


def refit_row(result: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """The refit task's row (as fold_rows' rows), or None without one."""
    refit = result.get("refit")
    return _row(refit) if refit and refit.get("refit") else None


def folds_frame(result: Mapping[str, Any]):
    pd = _pandas()
    rows = fold_rows(result)
    frame = pd.DataFrame(rows, columns=list(rows[0].keys()) if rows else list(_FOLD_COLUMNS))
    return frame.set_index("fold")


def trial_rows(result: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """A search's trials, one row each, best first (rank 1 first; trials
    without a score last, by trial): trial, rank, state, score, epochs_run,
    then param_<path> (the value as JSON text), then mean_val_<metric> and
    std_val_<metric>, then split<k>_val_<metric> per fold (scikit-learn's
    cv_results_ names)."""
    rows = []
    for t in result.get("trials", []):
        row: Dict[str, Any] = {"trial": t.get("trial", 0), "rank": t.get("rank", 0),
                               "state": t.get("state"), "score": t.get("score"),
                               "epochs_run": t.get("epochs_run", 0)}
        for path, value in sorted(t.get("params", {}).items()):
            row["param_" + path] = value
        for metric, s in sorted(t.get("val", {}).items()):
            row["mean_val_" + metric] = s.get("mean")
            row["std_val_" + metric] = s.get("std")
        for metric, folds in sorted(t.get("val_folds", {}).items()):
            for k, v in enumerate(folds.get("values", [])):
                row["split%d_val_%s" % (k, metric)] = v
        rows.append(row)
    rows.sort(key=lambda r: (r["rank"] if r["rank"] else float("inf"), r["trial"]))
    return rows


def trials_frame(result: Mapping[str, Any]):
    pd = _pandas()
    rows = trial_rows(result)
    columns = list(rows[0].keys()) if rows else ["trial", "rank", "state", "score", "epochs_run"]
    return pd.DataFrame(rows, columns=columns).set_index("trial")


def importance_rows(result: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The permutation importance over the folds, most important first:
    feature, importances_mean, importances_std (scikit-learn's names; over
    the folds' means), then fold<k> (fold k's mean over its repeats)."""
    rows = []
    for f in result.get("importance", []):
        row: Dict[str, Any] = {"feature": f.get("feature"),
                               "importances_mean": f.get("mean", 0.0),
                               "importances_std": f.get("std", 0.0)}
        for k, v in enumerate(f.get("values", [])):
            row["fold%d" % k] = v
        rows.append(row)
    return rows


def importance_frame(result: Mapping[str, Any]):
    pd = _pandas()
    rows = importance_rows(result)
    columns = list(rows[0].keys()) if rows else ["feature", "importances_mean", "importances_std"]
    frame = pd.DataFrame(rows, columns=columns).set_index("feature")
    frame.attrs["metric"] = result.get("importance_metric", "")
    return frame


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
    """A predictions CSV (row, the id columns, fold, true_<target>, label,
    p_<class> ... or the targets' columns) as a DataFrame indexed by row;
    class names (label, and the true class beside it) stay strings, as the
    class names of a result are; other columns as pandas reads them (an id
    column as it reads the user's own file, so that they join)."""
    pd = _pandas()
    header = next(csv.reader(io.StringIO(csv_text)), [])
    names = {"label": str}
    if "label" in header:
        names.update({c: str for c in header if c.startswith("true_")})
    frame = pd.read_csv(io.StringIO(csv_text), dtype=names)
    return frame.set_index("row") if "row" in frame.columns else frame


_PROFILE_COLUMNS = ("column", "kind", "missing", "distinct", "distinct_capped", "min", "max",
                    "mean")


def profile_rows(profile: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """A dataset's profile (DatasetProfile as a dict), one row per column in
    file order: column, kind, missing, distinct, distinct_capped, then min,
    max and mean (None unless the column is NUMERIC)."""
    rows = []
    for c in profile.get("columns", []):
        numeric = c.get("kind") == "NUMERIC"
        rows.append({"column": c.get("name"), "kind": c.get("kind"),
                     "missing": c.get("missing", 0), "distinct": c.get("distinct", 0),
                     "distinct_capped": bool(c.get("distinct_capped", False)),
                     "min": c.get("min") if numeric else None,
                     "max": c.get("max") if numeric else None,
                     "mean": c.get("mean") if numeric else None})
    return rows


def profile_frame(profile: Mapping[str, Any]):
    pd = _pandas()
    frame = pd.DataFrame(profile_rows(profile), columns=list(_PROFILE_COLUMNS))
    for name in ("min", "max", "mean"):
        frame[name] = frame[name].astype(float)  # None -> NaN
    return frame.set_index("column")
