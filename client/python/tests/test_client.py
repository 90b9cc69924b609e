"""traind.Client against a real traind (see conftest.py)."""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import os
import random
import signal
import statistics
import time
import uuid

import grpc
import pytest
import yaml

import traind


def iris_spec(source_dir: str) -> str:
    return os.path.join(source_dir, "examples", "iris-cv.yaml")


def iris_rows(source_dir: str) -> int:
    with open(os.path.join(source_dir, "examples", "data", "iris.csv")) as f:
        return sum(1 for _ in csv.DictReader(f))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def assert_contiguous(events, start=1):
    sequences = [e["sequence"] for e in events]
    assert sequences == list(range(start, start + len(sequences))), sequences[:20]
    assert events[-1]["last"] is True
    assert [e["last"] for e in events].count(True) == 1


def test_submit_path_watch_wait_result(client, source_dir, monkeypatch):
    # From the source tree, as `trainctl submit examples/iris-cv.yaml`: the
    # relative data path is relative to the current directory.
    monkeypatch.chdir(source_dir)
    folds, epochs = 3, 4
    job = client.submit("examples/iris-cv.yaml", name=unique("py-iris"),
                        set={"training.epochs": epochs, "cross_validation.folds": folds})
    assert job.state in ("QUEUED", "RUNNING")
    assert job.data["spec"]["data"]["path"] == os.path.join(source_dir, "examples/data/iris.csv")
    assert len(job.data["tasks"]) == folds

    events = list(job.watch())
    assert_contiguous(events)
    assert events[-1]["job_state"]["state"] == "SUCCEEDED"
    per_task = {}
    for e in events:
        if "epoch" in e:
            per_task.setdefault(e["epoch"]["task"], []).append(e["epoch"]["epoch"])
    assert per_task == {t: list(range(1, epochs + 1)) for t in range(folds)}

    assert job.wait(timeout=60) is job
    assert job.state == "SUCCEEDED" and job.done and job.failure is None
    result = job.result()
    assert isinstance(result, dict) and result["complete"] is True
    assert [f["fold"] for f in result["folds"]] == list(range(folds))  # fold 0 is there
    assert sum(f["val_rows"] for f in result["folds"]) == iris_rows(source_dir)
    accuracies = [f["val"]["accuracy"] for f in result["folds"]]
    assert result["val"]["accuracy"]["mean"] == pytest.approx(statistics.fmean(accuracies))
    assert result["val"]["accuracy"]["std"] == pytest.approx(statistics.pstdev(accuracies))
    assert result["classes"] == ["setosa", "versicolor", "virginica"]

    pd = pytest.importorskip("pandas")
    frame = result.folds_frame()
    assert isinstance(frame, pd.DataFrame) and list(frame.index) == list(range(folds))
    assert list(frame["val_accuracy"]) == accuracies
    history = job.history_frame()
    assert len(history) == folds * epochs
    assert list(history[history.task == 0].epoch) == list(range(1, epochs + 1))
    last = [e["epoch"] for e in events if "epoch" in e and e["epoch"]["task"] == 1][-1]
    row = history[(history.task == 1) & (history.epoch == epochs)].iloc[0]
    assert row["val_loss"] == last["val"]["loss"]
    assert row["train_accuracy"] == last["train"]["accuracy"]


def test_text_dict_and_path_give_the_same_spec(client, source_dir):
    path = os.path.join(source_dir, "examples", "iris-cv.yaml")
    with open(path) as f:
        text = f.read()
    as_dict = yaml.safe_load(text)
    specs = []
    for spec in (path, text, as_dict):
        job = client.submit(spec, base_dir=source_dir, set={"training.epochs": 1})
        job.cancel(force=True)
        specs.append(job.data["spec"])
    assert specs[0] == specs[1] == specs[2]
    assert specs[0]["priority"] == 0

    # name and priority override the spec's; a retried submit with the same
    # idempotency key returns the first job.
    key = unique("key")
    first = client.submit(path, base_dir=source_dir, set={"training.epochs": 1}, name="renamed",
                          priority=5, idempotency_key=key)
    again = client.submit(path, base_dir=source_dir, set={"training.epochs": 1}, name="renamed",
                          priority=5, idempotency_key=key)
    first.cancel(force=True)
    assert again.id == first.id
    assert first.name == "renamed" and first.data["spec"]["priority"] == 5
    assert specs[0]["model"]["layers"][0]["dense"]["activation"] == "RELU"
    assert specs[0]["training"]["epochs"] == 1


def test_invalid_specs_name_the_field_and_store_nothing(client, source_dir):
    with open(os.path.join(source_dir, "examples", "iris-cv.yaml")) as f:
        text = f.read()
    before = len(list(client.list_jobs()))
    line = text[:text.index("units: 16")].count("\n") + 1
    with pytest.raises(traind.InvalidArgumentError) as e:
        client.submit(text.replace("units: 16", "unit: 16"), base_dir=source_dir)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.message.startswith(
        f'spec_text: model.layers[0].dense: unknown field "unit" (line {line}, column ')
    assert isinstance(e.value, ValueError) and isinstance(e.value, traind.TraindError)

    with pytest.raises(traind.InvalidArgumentError) as e:
        client.submit(text, base_dir=source_dir, set={"model.layers[1].dense.units": 4})
    assert e.value.message.startswith("spec.model.layers[1].dense.units: ")
    with pytest.raises(traind.InvalidArgumentError) as e:
        client.submit(text, base_dir=source_dir, set=["training.epochs=3", "training.epoch=3"])
    assert e.value.message.startswith('overrides[1]: training.epoch: unknown field "epoch"')
    with pytest.raises(traind.InvalidArgumentError) as e:
        client.submit(text, base_dir="/tmp")  # /tmp/examples/data/iris.csv does not exist
    assert e.value.message.startswith(
        "spec.data.path: /tmp/examples/data/iris.csv: no such file on the traind server")
    assert "trainctl datasets upload" in e.value.message
    with pytest.raises(traind.PermissionDeniedError) as e:
        client.submit(text, base_dir="/etc", set={"data.path": "passwd"})
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert e.value.message.startswith("spec.data.path: /etc/passwd is outside the data roots")
    assert len(list(client.list_jobs())) == before


def test_error_codes(daemon, client):
    with pytest.raises(traind.NotFoundError) as e:
        client.job("000000000000")
    assert e.value.code == grpc.StatusCode.NOT_FOUND and "000000000000" in e.value.message
    with pytest.raises(traind.UnavailableError) as e:
        traind.Client("unix:/nonexistent/traind.sock", timeout=2).info()
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert "unix:/nonexistent/traind.sock" in e.value.message
    # TCP needs a bearer token; with one it answers.
    with pytest.raises(traind.UnauthenticatedError) as e:
        traind.Client(daemon.tcp_address, token="").info()
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(traind.UnauthenticatedError):
        traind.Client(daemon.tcp_address, token="wrong").info()
    with traind.Client(daemon.tcp_address, token=daemon.token) as tcp:
        assert tcp.info()["state_dir"] == daemon.state_dir
    with pytest.raises(ValueError):
        list(client.list_jobs(states=["DONE"]))


def test_list_jobs_follows_every_page(client, source_dir):
    prefix = unique("py-list")
    ids = []
    for i in range(5):
        job = client.submit(iris_spec(source_dir), base_dir=source_dir, name=f"{prefix}-{i}",
                            set={"training.epochs": 1})
        job.cancel(force=True)
        ids.append(job.id)
    listed = list(client.list_jobs(name_contains=prefix, page_size=2))
    assert [j.id for j in listed] == ids[::-1]  # newest first, across 3 pages
    assert all(j.name.startswith(prefix) for j in listed)
    for job in listed:
        job.wait(timeout=60)
        assert job.state in ("CANCELLED", "SUCCEEDED")
    cancelled = {j.id for j in client.list_jobs(states=["cancelled"], name_contains=prefix)}
    assert cancelled == {j.id for j in listed if j.state == "CANCELLED"}


def test_cancel_and_wait_timeout(client, source_dir):
    job = client.submit(iris_spec(source_dir), base_dir=source_dir, name=unique("py-long"),
                        set={"training.epochs": 100000})
    with pytest.raises(traind.DeadlineExceededError) as e:
        job.wait(timeout=0.5)
    assert isinstance(e.value, TimeoutError) and job.id in e.value.message
    assert job.cancel().state in ("CANCELLING", "CANCELLED")
    assert job.wait(timeout=60).state == "CANCELLED"
    events = job.events()
    assert_contiguous(events)
    assert events[-1]["job_state"]["state"] == "CANCELLED"


def test_watch_resumes_from_its_cursor_after_the_stream_is_dropped(client, source_dir):
    job = client.submit(iris_spec(source_dir), base_dir=source_dir, name=unique("py-cursor"),
                        set={"training.epochs": 30, "cross_validation.folds": 2})
    seen = []
    stream = job.watch()
    for event in stream:
        seen.append(event)
        if len(seen) == 10:
            break
    stream.close()  # cancels the RPC
    rest = list(job.watch(after=seen[-1]["sequence"]))
    combined = seen + rest
    assert_contiguous(combined)
    assert combined == job.events()  # nothing missed, nothing twice
    assert list(job.watch(after=combined[-1]["sequence"])) == []  # the end of a finished job


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
def test_watch_survives_a_daemon_restart(fresh_daemon, source_dir, sig):
    fresh_daemon.start()
    client = fresh_daemon.client(watch_retries=8)
    job = client.submit(iris_spec(source_dir), base_dir=source_dir, name=unique("py-restart"),
                        set={"training.epochs": 3000, "cross_validation.folds": 2})
    seen = []
    restarted = False
    for event in job.watch():
        seen.append(event)
        if not restarted and "epoch" in event and event["epoch"]["epoch"] >= 20:
            # traind dies (or stops gracefully) mid-job, its workers with it,
            # and comes back on the same state directory; the iterator
            # reconnects from its cursor.
            fresh_daemon.stop(sig)
            fresh_daemon.start()
            restarted = True
    assert restarted
    assert_contiguous(seen)
    assert seen[-1]["job_state"]["state"] == "SUCCEEDED"
    job.refresh()
    # The restart really interrupted the job: the running task was LOST and
    # retried.
    reasons = [a["failure"]["reason"] for t in job.data["tasks"] for a in t["attempts"]
               if a.get("failure")]
    assert "LOST" in reasons, job.data["tasks"]
    assert seen == job.events()
    client.close()


def test_health(client):
    assert client.health() == "SERVING"
    assert client.health("traind.v1.TrainingService") == "SERVING"
    with pytest.raises(traind.NotFoundError):
        client.health("traind.v1.WorkerService")


def test_devices_and_info(daemon, client):
    devices = client.devices()
    cpu = next(d for d in devices if d["id"] == "cpu")
    assert cpu["kind"] == "CPU" and cpu["slots"] == 2
    assert isinstance(devices.gpu_note, str)
    info = client.info()
    assert info["cpu_slots"] == 2 and info["state_dir"] == daemon.state_dir
    assert daemon.address in info["listen_addresses"]


def test_the_notebook_example_runs(daemon, source_dir, tmp_path):
    import subprocess
    import sys
    plot = tmp_path / "curves.png"
    env = dict(os.environ, TRAIND_ADDRESS=daemon.address)
    out = subprocess.run(
        [sys.executable, os.path.join(source_dir, "examples", "python", "cv_iris.py"),
         "--epochs", "20", "--folds", "3", "--plot", str(plot)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "SUCCEEDED" in out.stdout and "over 3 folds" in out.stdout
    assert out.stdout.count("fold 2  epoch  20") == 1
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "no plot" in out.stdout
    else:
        assert plot.stat().st_size > 1000 and plot.read_bytes()[:4] == b"\x89PNG"


# -- artifacts, download, predict, delete -------------------------------------

ARTIFACT_EPOCHS = 6


@pytest.fixture(scope="module")
def refit_job(daemon, source_dir):
    """A finished 2-fold CV job with refit: tasks 0 and 1, and the refit task 2."""
    with daemon.client() as c:
        job = c.submit(iris_spec(source_dir), base_dir=source_dir, name=unique("py-refit"),
                       set={"training.epochs": ARTIFACT_EPOCHS, "cross_validation.folds": 2,
                            "cross_validation.refit": True})
        assert job.wait(timeout=120).state == "SUCCEEDED", job.data
        assert len(job.data["tasks"]) == 3
        yield job.id


def job_dir(daemon, job_id: str) -> str:
    return os.path.join(daemon.state_dir, "jobs", job_id)


def read_bytes(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def table(text: str):
    """A predictions CSV: its header and its rows by `row`."""
    rows = list(csv.reader(text.splitlines()))
    return rows[0], {int(r[0]): r for r in rows[1:]}


def predict_files(daemon, job_id: str):
    directory = os.path.join(job_dir(daemon, job_id), "predict")
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


def test_folds_frame_leaves_the_refit_task_out(client, refit_job):
    pytest.importorskip("pandas")
    result = client.job(refit_job).result()
    frame = result.folds_frame()
    assert list(frame.index) == [0, 1]
    assert not frame["val_accuracy"].isna().any()
    assert 0 < frame["val_accuracy"].mean() <= 1
    refit = result.refit_row()
    assert refit is not None and refit["refit"] is True
    assert refit["val_rows"] in (None, 0) and refit["train_rows"] == 150


def test_artifacts_and_checked_downloads(daemon, client, refit_job, tmp_path):
    job = client.job(refit_job)
    artifacts = job.artifacts()
    by_name = {a["name"]: a for a in artifacts}
    assert [a["name"] for a in artifacts] == sorted(by_name)  # by name
    for name in ("predictions.csv", "model.onnx", "model.ckpt", "task-0/model.ckpt",
                 "task-0/model.onnx", "task-1/predictions.csv", "task-2/model.onnx"):
        assert name in by_name, sorted(by_name)
    assert by_name["predictions.csv"]["kind"] == "PREDICTIONS"
    assert by_name["predictions.csv"]["task"] == -1
    assert by_name["task-0/model.ckpt"]["kind"] == "MODEL"
    assert by_name["task-0/model.ckpt"]["task"] == 0
    # The job's own model names are the refit task's.
    assert by_name["model.onnx"]["kind"] == "ONNX_MODEL" and by_name["model.onnx"]["task"] == 2
    assert client.list_artifacts(refit_job) == artifacts

    # The bytes are those on disk under the state directory.
    on_disk = {"predictions.csv": "predictions.csv", "task-0/model.ckpt": "task-0/model.ckpt",
               "task-1/model.onnx": "task-1/model.onnx", "model.onnx": "task-2/model.onnx"}
    for name, relative in on_disk.items():
        data = job.download(name)
        assert isinstance(data, bytes)
        assert data == read_bytes(os.path.join(job_dir(daemon, refit_job), relative)), name
        assert len(data) == by_name[name]["size_bytes"] > 0
    assert client.download(refit_job, "model.onnx") == job.download("task-2/model.onnx")

    # To a file: its path comes back, and nothing else is left beside it.
    out = tmp_path / "iris.onnx"
    assert job.download("model.onnx", out) == str(out)
    assert out.read_bytes() == read_bytes(os.path.join(job_dir(daemon, refit_job),
                                                       "task-2/model.onnx"))
    out.write_bytes(b"old")
    assert job.download("predictions.csv", str(out)) == str(out)  # replaced
    assert out.read_bytes() == job.download("predictions.csv")
    # Into a directory: as the name's last part.
    assert job.download("task-0/model.ckpt", tmp_path) == str(tmp_path / "model.ckpt")
    assert (tmp_path / "model.ckpt").read_bytes() == job.download("task-0/model.ckpt")
    assert sorted(os.listdir(tmp_path)) == ["iris.onnx", "model.ckpt"]

    # An unknown name (or one outside the job's directory) is NOT_FOUND and
    # writes nothing.
    for name in ("nope.csv", "../../traind.log"):
        with pytest.raises(traind.NotFoundError) as e:
            job.download(name, tmp_path / "nope")
        assert name in e.value.message
    with pytest.raises(traind.NotFoundError):
        client.list_artifacts("000000000000")
    assert sorted(os.listdir(tmp_path)) == ["iris.onnx", "model.ckpt"]


def test_fold_models_reproduce_their_out_of_fold_predictions(daemon, client, refit_job,
                                                             source_dir):
    job = client.job(refit_job)
    iris = os.path.join(source_dir, "examples", "data", "iris.csv")
    by_task = []
    for task in (0, 1):
        p = job.predict(iris, task=task)
        assert isinstance(p, traind.Predictions)
        assert p.rows == iris_rows(source_dir) == len(p)
        assert p.models == [f"task-{task}/model.ckpt"] and p.device == "cpu"
        assert p.artifact.startswith("predict/") and p.path is None
        assert p.csv.encode() == job.download(p.artifact)
        header, rows = table(p.csv)
        oof_header, oof = table(read_bytes(os.path.join(
            job_dir(daemon, refit_job), f"task-{task}", "predictions.csv")).decode())
        # The scored file holds the species: it comes along as the truth;
        # the task's own file also names the fold that scored each row.
        assert header[:3] == ["row", "true_species", "label"]
        assert oof_header == ["row", "fold"] + header[1:]
        assert len(rows) == p.rows and len(oof) > 50
        for row, cells in oof.items():
            mine = rows[row]
            assert cells[1] == str(task), (task, row)
            assert mine[1:3] == cells[2:4], (task, row)  # the truth, the label
            for c in range(3, len(mine)):
                assert float(mine[c]) == pytest.approx(float(cells[c + 1]), abs=1e-5), (task, row)
        by_task.append(rows)

    # ensemble: the mean of the fold models, the label its argmax.
    p = job.predict(iris, ensemble=True)
    assert p.models == ["task-0/model.ckpt", "task-1/model.ckpt"]
    header, rows = table(p.csv)
    probabilities = [c for c in range(len(header)) if header[c].startswith("p_")]
    assert len(probabilities) == 3
    for row, cells in rows.items():
        for c in probabilities:
            want = (float(by_task[0][row][c]) + float(by_task[1][row][c])) / 2
            assert float(cells[c]) == pytest.approx(want, abs=1e-6), (row, header[c])
        best = max(probabilities, key=lambda c: float(cells[c]))
        assert cells[header.index("label")] == header[best][2:], row

    pd = pytest.importorskip("pandas")
    frame = p.frame()
    assert isinstance(frame, pd.DataFrame) and frame.index.name == "row"
    assert len(frame) == p.rows and list(frame.columns) == header[1:]
    assert set(frame["label"]) <= {"setosa", "versicolor", "virginica"}
    assert (frame["label"] == frame["true_species"]).mean() > 0.6  # 6 epochs; chance is 1/3
    assert frame.loc[7, "p_setosa"] == pytest.approx(float(rows[7][header.index("p_setosa")]))


def test_predictions_join_back_to_the_users_rows(client, source_dir, tmp_path):
    """A table with an id column (declared in data.id) and a note column
    (data.ignore, not copied when data.id is set): the out-of-fold
    predictions merge back on the id, every row once, with its true class and
    the fold that scored it; predict of new rows keeps their ids."""
    pd = pytest.importorskip("pandas")
    iris = pd.read_csv(os.path.join(source_dir, "examples", "data", "iris.csv"))
    iris.insert(0, "plant", ["p-%03d" % (7 * i + 1) for i in range(len(iris))])  # leading zeros
    iris["note"] = "x"
    path = tmp_path / "plants.csv"
    iris.to_csv(path, index=False)
    spec = {"data": {"path": str(path), "label": "species", "id": ["plant"], "ignore": ["note"],
                     "standardize": True},
            "cross_validation": {"folds": 3, "stratified": True, "shuffle": True}, "seed": 4,
            "model": {"layers": [{"dense": {"units": 8, "activation": "relu"}},
                                 {"dense": {"units": 3}}]},
            "loss": {"softmax_cross_entropy": {}}, "optimizer": {"adam": {"learning_rate": 0.02}},
            "training": {"epochs": 20, "batch_size": 16}}
    job = client.submit(spec, name=unique("py-join"))
    assert job.wait(timeout=120).state == "SUCCEEDED", job.data
    text = job.download("predictions.csv").decode()
    assert text.splitlines()[0] == "row,plant,fold,true_species,label,p_setosa,p_versicolor,p_virginica"
    preds = pd.read_csv(io.StringIO(text), dtype={"plant": str})
    joined = iris.merge(preds, on="plant", validate="one_to_one")
    assert len(joined) == len(iris) == len(preds)
    assert (joined["species"] == joined["true_species"]).all()
    assert (joined.index == joined["row"]).all()  # the row is the file's data row
    folds = {f["fold"]: f["val_rows"] for f in job.result()["folds"]}
    assert joined["fold"].value_counts().to_dict() == folds
    assert (joined["label"] == joined["species"]).mean() > 0.8

    new = iris.drop(columns=["species"]).iloc[[5, 60, 120]]
    p = job.predict(new.to_csv(index=False).encode(), task=0)
    scored = p.frame()
    assert list(scored.columns[:2]) == ["plant", "label"]
    assert list(scored["plant"]) == ["p-036", "p-421", "p-841"]


def test_predict_sources_give_the_same_predictions(daemon, client, refit_job, source_dir,
                                                   tmp_path, monkeypatch):
    job = client.job(refit_job)
    iris = os.path.join(source_dir, "examples", "data", "iris.csv")
    uploaded = job.predict(iris)  # the refit model by default
    assert uploaded.models == ["task-2/model.ckpt"]
    # Named on the server (inside its data roots), absolute or relative to
    # the current directory: the same bytes.
    named = job.predict(iris, server_path=True)
    assert named.csv == uploaded.csv and named.models == uploaded.models
    monkeypatch.chdir(source_dir)
    assert job.predict("examples/data/iris.csv", server_path=True).csv == uploaded.csv
    # The CSV's content as bytes or str, or an open file.
    content = read_bytes(iris)
    assert client.predict(refit_job, content).csv == uploaded.csv
    assert client.predict(refit_job, content.decode()).csv == uploaded.csv
    with open(iris, "rb") as f:
        assert job.predict(f).csv == uploaded.csv
    # path: saved to a file, as download saves.
    out = tmp_path / "refit.csv"
    saved = job.predict(iris, path=out)
    assert saved.path == str(out) and out.read_text() == uploaded.csv == saved.csv
    assert saved.rows == uploaded.rows and os.listdir(tmp_path) == ["refit.csv"]
    with pytest.raises(traind.PermissionDeniedError):
        job.predict("/etc/passwd", server_path=True)


def test_bad_predict_input_is_named_and_stores_nothing(daemon, client, refit_job, tmp_path,
                                                       monkeypatch):
    job = client.job(refit_job)
    bad = tmp_path / "bad.csv"
    # Line 3 (the second data row) has a word where sepal_width belongs.
    bad.write_text("sepal_length,sepal_width,petal_length,petal_width\n"
                   "5.1,3.5,1.4,0.2\n"
                   "4.9,wide,1.4,0.2\n")
    before = predict_files(daemon, refit_job)
    with pytest.raises(traind.InvalidArgumentError) as e:
        job.predict(str(bad))
    message = e.value.message
    assert f"{bad}:3" in message and "sepal_width" in message, message
    assert daemon.state_dir not in message  # the server's copy is not named
    # The file name as given, relative or not; content has none of its own.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(traind.InvalidArgumentError) as e:
        job.predict("bad.csv", task=1)
    assert e.value.message.startswith("bad.csv:3") and "sepal_width" in e.value.message
    with pytest.raises(traind.InvalidArgumentError) as e:
        job.predict(bad.read_bytes())
    assert ":3" in e.value.message and "sepal_width" in e.value.message
    with pytest.raises(traind.InvalidArgumentError) as e:
        job.predict(str(bad), task=7)
    assert "has tasks 0 to 2, not 7" in e.value.message
    with pytest.raises(FileNotFoundError):
        job.predict(str(tmp_path / "missing.csv"))
    with pytest.raises(ValueError, match="exclusive"):
        job.predict(str(bad), task=0, ensemble=True)
    with pytest.raises(traind.NotFoundError):
        client.predict("000000000000", str(bad))

    assert predict_files(daemon, refit_job) == before
    assert os.listdir(tmp_path) == ["bad.csv"]

    class FailsMidway:
        """A file whose second read fails."""
        name = "midway.csv"
        reads = 0

        def read(self, size):
            self.reads += 1
            if self.reads > 1:
                raise OSError("midway.csv: read failed")
            return b"sepal_length,sepal_width,petal_length,petal_width\n5.1,3.5,1.4,0.2\n"

    # The read error is the caller's; the call is cancelled.
    started = daemon.log().count("INFO predict started ")
    with pytest.raises(OSError, match="midway.csv: read failed"):
        job.predict(FailsMidway())
    # traind may still score what arrived of the cancelled upload (nothing
    # here): let that end, so that no worker is running when the daemon stops.
    cancelled = time.monotonic()
    while time.monotonic() < cancelled + 10:
        log = daemon.log()
        now = log.count("INFO predict started ")
        ended = log.count("INFO predict done ") + log.count("INFO predict failed ")
        if now > started and ended == now:
            break  # it ran, and ended
        if now == started and time.monotonic() > cancelled + 2:
            break  # it did not run
        time.sleep(0.05)
    assert predict_files(daemon, refit_job) == before


def test_delete(daemon, client, source_dir):
    job = client.submit(iris_spec(source_dir), base_dir=source_dir, name=unique("py-delete"),
                        set={"training.epochs": 1, "cross_validation.folds": 2})
    assert job.wait(timeout=60).state == "SUCCEEDED"
    assert os.path.isdir(job_dir(daemon, job.id))
    freed = job.delete()
    assert isinstance(freed, int) and freed > 0
    with pytest.raises(traind.NotFoundError):
        client.job(job.id)
    with pytest.raises(traind.NotFoundError):
        job.artifacts()
    with pytest.raises(traind.NotFoundError):
        job.delete()
    assert not os.path.exists(job_dir(daemon, job.id))

    # A running job is deleted only with cancel.
    running = client.submit(iris_spec(source_dir), base_dir=source_dir, name=unique("py-delete"),
                            set={"training.epochs": 100000})
    with pytest.raises(traind.FailedPreconditionError):
        client.delete_job(running.id)
    assert client.delete_job(running.id, cancel=True) >= 0
    with pytest.raises(traind.NotFoundError):
        running.refresh()


# -- datasets ------------------------------------------------------------------


def iris_path(source_dir: str) -> str:
    return os.path.join(source_dir, "examples", "data", "iris.csv")


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def count_calls(client, method: str):
    """Counts the client's calls of one RPC (a list of their request streams'
    or requests' first messages)."""
    real = getattr(client._stub, method)
    calls = []

    def counted(request, **kwargs):
        calls.append(request)
        return real(request, **kwargs)

    setattr(client._stub, method, counted)
    return calls


def unique_iris(source_dir: str) -> bytes:
    """iris.csv with one more row of its own, so that no other test holds
    the same bytes."""
    row = f"{random.uniform(4, 8):.6f},3.0,1.4,0.2,setosa\n"
    return read_bytes(iris_path(source_dir)) + row.encode()


def test_upload_a_file_once_and_read_it_back(client, source_dir, tmp_path):
    iris = iris_path(source_dir)
    content = read_bytes(iris)
    assert len(content) == 3867
    name = unique("py-iris")
    dataset = client.upload_dataset(iris, name=name)
    assert isinstance(dataset, traind.Dataset)
    assert (dataset.name, dataset.version, dataset.ref) == (name, 1, f"{name}:1")
    assert dataset.sha256 == sha256_of(content) and dataset.size_bytes == 3867
    assert dataset.owner == "local" and dataset.kind == "CSV" and dataset.file_name == iris
    assert dataset.uploaded_bytes in (0, 3867)  # another test may have stored these bytes
    assert dataset.rows == 150

    # The same bytes again: the same version, and no UploadDataset call.
    uploads = count_calls(client, "UploadDataset")
    again = client.upload_dataset(iris, name=name)
    assert (again.version, again.sha256) == (1, dataset.sha256)
    assert again.already_stored is True and again.uploaded_bytes == 0 and uploads == []
    # Other bytes under the name: version 2. Its default name is the file's.
    other = tmp_path / "iris.csv"
    other.write_bytes(unique_iris(source_dir))
    v2 = client.upload_dataset(other, name=name)
    assert v2.version == 2 and v2.rows == 151 and v2.uploaded_bytes == other.stat().st_size
    assert len(uploads) == 1 and v2.already_stored is False
    assert client.upload_dataset(other).name == "iris"

    listed = client.datasets(name)
    assert [d.ref for d in listed] == [f"{name}:2", f"{name}:1"]  # newest first
    assert {d.name for d in client.datasets()} >= {name, "iris"}

    got = client.dataset(f"{name}:1")
    assert got.sha256 == dataset.sha256 and got.job_ids == []
    assert client.dataset(name).version == 2  # the latest
    assert client.dataset(f"sha256:{dataset.sha256}").sha256 == dataset.sha256
    assert listed[1].profile_rows() == got.profile_rows()  # fetched for a listed one
    species = got.value_counts("species")
    assert species == {"setosa": 50, "versicolor": 50, "virginica": 50}

    pd = pytest.importorskip("pandas")
    profile = got.profile
    assert isinstance(profile, pd.DataFrame)
    assert list(profile.index) == ["sepal_length", "sepal_width", "petal_length", "petal_width",
                                   "species"]
    assert list(profile["kind"]) == ["NUMERIC"] * 4 + ["CATEGORICAL"]
    assert list(profile["missing"]) == [0] * 5
    assert profile.loc["species", "distinct"] == 3
    assert not profile["distinct_capped"].any()
    frame = pd.read_csv(iris)
    for column in ("sepal_length", "petal_width"):
        assert profile.loc[column, "min"] == pytest.approx(frame[column].min(), rel=1e-6)
        assert profile.loc[column, "max"] == pytest.approx(frame[column].max(), rel=1e-6)
        assert profile.loc[column, "mean"] == pytest.approx(frame[column].mean(), rel=1e-6)
        assert profile.loc[column, "distinct"] == frame[column].nunique()
    assert profile.loc["species", ["min", "max", "mean"]].isna().all()

    # Downloaded, SHA-256 checked: the bytes, a file, into a directory.
    assert client.download_dataset(f"{name}:1") == content
    out = tmp_path / "copy.csv"
    assert got.download(out) == str(out) and out.read_bytes() == content
    assert client.download_dataset(name, tmp_path) == str(tmp_path / f"{name}-2.csv")
    assert (tmp_path / f"{name}-2.csv").read_bytes() == other.read_bytes()
    with pytest.raises(traind.NotFoundError):
        client.download_dataset(f"{name}:3", tmp_path / "nope.csv")
    assert not (tmp_path / "nope.csv").exists()

    # Deleted: every version, then nothing is left of the name.
    deleted = client.delete_dataset(name, all_versions=True)
    assert sorted(d.ref for d in deleted) == [f"{name}:1", f"{name}:2"]
    assert client.datasets(name) == []
    with pytest.raises(traind.NotFoundError):
        client.dataset(name)


class Interrupted(grpc.RpcError):
    """What a stream broken by the network raises."""

    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return "connection reset by peer"


def test_an_interrupted_upload_resumes_from_what_traind_holds(client, source_dir, tmp_path,
                                                             monkeypatch):
    from traind import _datasets
    monkeypatch.setattr(_datasets, "CHUNK_BYTES", 1000)
    path = tmp_path / "resumed.csv"
    path.write_bytes(unique_iris(source_dir))
    size = path.stat().st_size
    real = client._stub.UploadDataset
    offsets = []

    def breaks_once(requests, **kwargs):
        requests = iter(requests)
        first = next(requests)
        offsets.append(first.header.offset)
        if len(offsets) > 1:
            return real(itertools.chain([first], requests), **kwargs)
        sent = [first, next(requests), next(requests)]  # the header and 2000 bytes

        def then_lost():
            yield from sent
            time.sleep(0.3)  # traind writes what it received
            raise ConnectionResetError("the connection was lost")

        with pytest.raises(grpc.RpcError):
            real(then_lost(), **kwargs)  # gRPC cancels the call
        raise Interrupted()

    client._stub.UploadDataset = breaks_once
    dataset = client.upload_dataset(path)
    assert offsets[0] == 0 and 0 < offsets[1] <= 2000 and offsets[1] % 1000 == 0, offsets
    assert dataset.sha256 == sha256_of(path.read_bytes()) and dataset.rows == 151
    assert dataset.uploaded_bytes == 2000 + size - offsets[1]
    assert client.download_dataset(dataset) == path.read_bytes()
    client.delete_dataset(dataset)


def test_submit_a_frame(client, source_dir):
    pd = pytest.importorskip("pandas")
    frame = pd.read_csv(iris_path(source_dir))
    frame["petal_ratio"] = frame["petal_length"] / frame["petal_width"]
    csv_bytes = frame.to_csv(index=False).encode()  # what is uploaded
    digest = sha256_of(csv_bytes)
    job = client.submit(iris_spec(source_dir), data=frame, name=unique("py-frame"),
                        set={"training.epochs": 3, "cross_validation.folds": 2})
    assert job.wait(timeout=120).state == "SUCCEEDED", job.data
    data = job.data["spec"]["data"]
    assert data["dataset"] == f"sha256:{digest}" and data["dataset_sha256"] == digest
    assert data["path"].startswith(client.info()["state_dir"])  # traind's copy
    stored = client.dataset(f"sha256:{digest}")
    assert (stored.name, stored.file_name, stored.rows) == ("frame", "DataFrame", 150)
    assert stored.job_ids == [job.id]
    assert list(stored.profile.index) == list(frame.columns)
    assert stored.profile.loc["petal_ratio", "kind"] == "NUMERIC"
    assert stored.download() == csv_bytes
    # Scored from traind's store: nothing uploaded.
    assert job.predict(stored).rows == 150

    # A holdout on a second frame; a Dataset names itself.
    val = frame.iloc[1::2]
    val_digest = sha256_of(val.to_csv(index=False).encode())
    holdout = client.submit(iris_spec(source_dir), data=stored, validation_data=val,
                            name=unique("py-frame"),
                            set=["training.epochs=2", "cross_validation.folds=",
                                 "cross_validation.stratified="])
    assert holdout.wait(timeout=120).state == "SUCCEEDED", holdout.data
    cv = holdout.data["spec"]["cross_validation"]
    assert cv["validation_dataset"] == f"sha256:{val_digest}"
    assert cv["validation_dataset_sha256"] == val_digest
    assert holdout.data["spec"]["data"]["dataset_sha256"] == digest
    assert holdout.result()["folds"][0]["val_rows"] == len(val)


def test_submit_over_tcp_uploads_the_specs_file(daemon, source_dir, monkeypatch):
    monkeypatch.chdir(source_dir)
    iris_digest = sha256_of(read_bytes(iris_path(source_dir)))
    settings = {"training.epochs": 1, "cross_validation.folds": 2}
    with traind.Client(daemon.tcp_address, token=daemon.token) as tcp:
        job = tcp.submit("examples/iris-cv.yaml", name=unique("py-tcp"), set=settings)
        data = job.data["spec"]["data"]
        assert data["dataset"] == f"sha256:{iris_digest}"
        assert data["dataset_sha256"] == iris_digest
        assert data["path"].startswith(daemon.state_dir)
        mine = tcp.datasets("iris")
        assert mine and mine[0].owner == "pytest" and mine[0].sha256 == iris_digest
        assert mine[0].file_name == "examples/data/iris.csv"  # as the spec names it
        # Sent again: nothing uploaded.
        uploads = count_calls(tcp, "UploadDataset")
        second = tcp.submit("examples/iris-cv.yaml", name=unique("py-tcp"), set=settings)
        assert second.data["spec"]["data"]["dataset_sha256"] == iris_digest and uploads == []
        # upload=False: the path as it is, for traind to read.
        plain = tcp.submit("examples/iris-cv.yaml", name=unique("py-tcp"), set=settings,
                           upload=False)
        assert plain.data["spec"]["data"]["path"] == iris_path(source_dir)
        assert plain.data["spec"]["data"]["dataset"] == ""
        # A file that is not here is traind's to find (and report).
        with pytest.raises(traind.InvalidArgumentError, match="no such file on the traind server"):
            tcp.submit("examples/iris-cv.yaml", set={"data.path": "missing.csv"})
        for j in (job, second, plain):
            assert j.wait(timeout=60).state == "SUCCEEDED"
        assert len(uploads) == 0


def test_a_dataset_in_use_is_not_deleted(client, source_dir, tmp_path):
    path = tmp_path / "in-use.csv"
    path.write_bytes(unique_iris(source_dir))
    dataset = client.upload_dataset(path, name=unique("py-in-use"))
    running = client.submit(iris_spec(source_dir), data=dataset, name=unique("py-in-use"),
                            set={"training.epochs": 100000})
    with pytest.raises(traind.FailedPreconditionError) as e:
        client.delete_dataset(dataset.name)
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert running.id in e.value.message
    assert client.dataset(dataset.ref).job_ids == [running.id]
    assert running.cancel(force=True).wait(timeout=60).state == "CANCELLED"
    assert [d.ref for d in dataset.delete()] == [dataset.ref]
    with pytest.raises(traind.NotFoundError):
        client.dataset(dataset.ref)
    # The finished job keeps its record of the bytes.
    assert running.refresh().data["spec"]["data"]["dataset_sha256"] == dataset.sha256
