"""traind.Client against a real traind (see conftest.py)."""

from __future__ import annotations

import csv
import os
import signal
import statistics
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
    assert row["val_loss"] == last["val"]["loss"] and row["train_accuracy"] == last["train"]["accuracy"]


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
    assert e.value.message == "spec.data.path: /tmp/examples/data/iris.csv: no such file"
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
