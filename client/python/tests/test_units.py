"""The client's pure parts: address rules, spec and override encoding, dicts,
the checked download, atomic files, predict's upload, dataset names, a
DataFrame's CSV and the dataset upload's protocol. No daemon."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import socket
import stat
import threading

import pytest

import traind
from traind import _address, _artifacts, _datasets, _spec
from traind._convert import to_dict
from traind.v1 import dataset_pb2, job_pb2, training_service_pb2


def test_default_address_follows_trainctls_order(tmp_path):
    cwd = str(tmp_path)
    assert _address.default_address({}, cwd) == "127.0.0.1:7070"
    # traind's default state directory under the current directory: its
    # socket is used only when it is a socket.
    (tmp_path / ".traind").mkdir()
    (tmp_path / ".traind" / "traind.sock").write_text("not a socket")
    assert _address.default_address({}, cwd) == "127.0.0.1:7070"
    os.remove(tmp_path / ".traind" / "traind.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(tmp_path / ".traind" / "traind.sock"))
    try:
        assert _address.default_address({}, cwd) == "unix:.traind/traind.sock"
        env = {"TRAIND_STATE_DIR": "/var/lib/traind"}
        assert _address.default_address(env, cwd) == "unix:/var/lib/traind/traind.sock"
        env["TRAIND_ADDRESS"] = "gpu-box:7070"
        assert _address.default_address(env, cwd) == "gpu-box:7070"
        env["TRAIND_ADDRESS"] = ""  # empty: as if unset
        assert _address.default_address(env, cwd) == "unix:/var/lib/traind/traind.sock"
    finally:
        s.close()


@pytest.mark.parametrize("bad", ["", "unix:", "localhost"])
def test_bad_addresses_are_refused(bad):
    with pytest.raises(ValueError, match="expected unix:PATH or HOST:PORT"):
        _address.check_address(bad)
    if bad:
        with pytest.raises(ValueError):
            traind.Client(bad)


def test_token_order(tmp_path):
    f = tmp_path / "token"
    f.write_text("  from-file \nsecond line\n")
    env = {"TRAIND_TOKEN": "from-env"}
    assert _address.resolve_token("given", str(f), env) == "given"
    assert _address.resolve_token(None, str(f), env) == "from-file"
    assert _address.resolve_token(None, None, env) == "from-env"
    assert _address.resolve_token(None, None, {}) == ""


def test_overrides_are_json_values_so_strings_stay_strings():
    assert _spec.overrides({"training.epochs": 10, "name": "42", "data.standardize": True,
                            "metrics.val": ["loss", "accuracy"], "early_stopping": None,
                            "model.layers[0]": {"dense": {"units": 8}}}) == [
        "training.epochs=10", 'name="42"', "data.standardize=true",
        'metrics.val=["loss", "accuracy"]', "early_stopping=",
        'model.layers[0]={"dense": {"units": 8}}']
    # trainctl's text form passes through; name and priority come last.
    assert _spec.overrides(["model.layers[0].dense.units=32"], name="run 7", priority=3) == [
        "model.layers[0].dense.units=32", 'name="run 7"', "priority=3"]
    with pytest.raises(ValueError):
        _spec.overrides(["epochs"])
    with pytest.raises(TypeError):
        _spec.overrides("training.epochs=3")


def test_spec_forms(tmp_path, monkeypatch):
    path = tmp_path / "spec.yaml"
    path.write_text("name: from-file\n")
    assert _spec.spec_text(path) == "name: from-file\n"
    assert _spec.spec_text(str(path)) == "name: from-file\n"
    assert _spec.spec_text("name: inline") == "name: inline"
    assert _spec.spec_text("name: a\nseed: 1\n") == "name: a\nseed: 1\n"
    assert _spec.spec_text(b"name: bytes\n") == "name: bytes\n"
    assert json.loads(_spec.spec_text({"name": "d", "training": {"epochs": 2}})) == {
        "name": "d", "training": {"epochs": 2}}
    with pytest.raises(FileNotFoundError):
        _spec.spec_text(str(tmp_path / "missing.yaml"))
    with pytest.raises(TypeError):
        _spec.spec_text(42)
    monkeypatch.chdir(tmp_path)
    assert _spec.base_dir(None) == str(tmp_path)
    assert _spec.base_dir("sub") == str(tmp_path / "sub")


def test_dicts_keep_defaults_and_real_numbers():
    fold = job_pb2.FoldResult(fold=0, train_rows=120, val={"loss": float("nan")})
    d = to_dict(job_pb2.JobResult(folds=[fold], complete=True))
    f = d["folds"][0]
    assert f["fold"] == 0 and f["best_epoch"] == 0  # defaults are present
    assert f["train_rows"] == 120 and isinstance(f["train_rows"], int)  # int64: not "120"
    assert math.isnan(f["val"]["loss"])
    e = to_dict(job_pb2.JobEvent(sequence=7, epoch=job_pb2.EpochMetrics(batches=3)))
    assert e["sequence"] == 7 and e["epoch"]["batches"] == 3
    assert "job_state" not in e  # only the set member of the oneof
    r = to_dict(training_service_pb2.ListDevicesResponse(
        devices=[training_service_pb2.Device(id="cpu", kind=job_pb2.CPU,
                                             memory_total_bytes=1 << 40)]))
    assert r["devices"][0]["kind"] == "CPU" and r["devices"][0]["memory_total_bytes"] == 1 << 40


def test_errors_carry_code_and_message():
    import grpc
    e = traind._errors.error_for(grpc.StatusCode.INVALID_ARGUMENT, "spec.x: bad")
    assert isinstance(e, traind.InvalidArgumentError) and isinstance(e, ValueError)
    assert isinstance(e, traind.TraindError)
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT and e.message == "spec.x: bad"
    assert str(e) == "INVALID_ARGUMENT: spec.x: bad"
    assert isinstance(traind._errors.error_for(grpc.StatusCode.DEADLINE_EXCEEDED, "t"),
                      TimeoutError)
    assert type(traind._errors.error_for(grpc.StatusCode.UNKNOWN, "u")) is traind.TraindError


def test_frames_from_plain_dicts():
    pd = pytest.importorskip("pandas")
    result = traind.Result({"folds": [
        {"fold": 0, "best_epoch": 3, "val": {"loss": 0.5, "accuracy": 0.9}, "train": {},
         "final_train": {"loss": 0.4}},
        {"fold": 1, "best_epoch": 2, "val": {"loss": 0.7, "accuracy": 0.8}, "train": {},
         "final_train": {"loss": 0.6}}],
        "val": {"loss": {"mean": 0.6, "std": 0.1}}})
    frame = result.folds_frame()
    assert list(frame.index) == [0, 1]
    assert frame.loc[1, "val_accuracy"] == 0.8 and frame.loc[0, "final_train_loss"] == 0.4
    assert result.summary_frame().loc["loss", "std"] == 0.1
    assert isinstance(frame, pd.DataFrame)
    assert result.refit_row() is None


def test_the_refit_task_is_kept_apart_from_the_folds():
    pytest.importorskip("pandas")
    folds = [{"fold": k, "best_epoch": 3, "val": {"accuracy": 0.8 + 0.1 * k}, "train": {},
              "final_train": {"loss": 0.4}} for k in range(2)]
    refit = {"fold": 2, "refit": True, "best_epoch": 3, "val": {}, "train": {},
             "final_train": {"loss": 0.3}}
    result = traind.Result({"folds": folds, "refit": refit})
    frame = result.folds_frame()
    assert list(frame.index) == [0, 1]
    assert frame["val_accuracy"].mean() == pytest.approx(0.85)
    assert not frame["val_accuracy"].isna().any()
    assert result.refit_row()["refit"] is True
    assert result.refit_row()["final_train_loss"] == 0.3


def test_importance_frame():
    pytest.importorskip("pandas")
    result = traind.Result({"importance_metric": "val.accuracy (max)", "importance": [
        {"feature": "petal_length", "mean": 0.3, "std": 0.1, "values": [0.2, 0.4]},
        {"feature": "sepal_width", "mean": 0.0, "std": 0.0, "values": [0.0, 0.0]}]})
    frame = result.importance_frame()
    assert list(frame.index) == ["petal_length", "sepal_width"]
    assert list(frame.columns) == ["importances_mean", "importances_std", "fold0", "fold1"]
    assert frame.loc["petal_length", "fold1"] == 0.4
    assert frame.attrs["metric"] == "val.accuracy (max)"
    empty = traind.Result({}).importance_frame()
    assert len(empty) == 0 and list(empty.columns) == ["importances_mean", "importances_std"]


def test_trials_frame_best_first_with_cv_results_names():
    pytest.importorskip("pandas")
    result = traind.Result({"trials": [
        {"trial": 0, "rank": 0, "state": "FAILED", "params": {"optimizer.adam.learning_rate": "1"},
         "val": {}, "val_folds": {}},
        {"trial": 1, "rank": 2, "state": "SUCCEEDED", "score": 0.85, "epochs_run": 4,
         "params": {"optimizer.adam.learning_rate": "0.01"},
         "val": {"accuracy": {"mean": 0.85, "std": 0.05}},
         "val_folds": {"accuracy": {"values": [0.8, 0.9]}}},
        {"trial": 2, "rank": 1, "state": "SUCCEEDED", "score": 0.925, "epochs_run": 4,
         "params": {"optimizer.adam.learning_rate": "0.001"},
         "val": {"accuracy": {"mean": 0.925, "std": 0.025}},
         "val_folds": {"accuracy": {"values": [0.9, 0.95]}}}]})
    frame = result.trials_frame()
    assert list(frame.index) == [2, 1, 0]
    assert frame.loc[2, "param_optimizer.adam.learning_rate"] == "0.001"
    assert frame.loc[1, "mean_val_accuracy"] == 0.85 and frame.loc[1, "std_val_accuracy"] == 0.05
    assert frame.loc[2, "split1_val_accuracy"] == 0.95
    assert frame.loc[0, "state"] == "FAILED"
    assert traind.Result({}).trials_frame().empty


def chunks_of(data: bytes, size: int = 4, sha256=None, artifact_size=None):
    """An ArtifactChunk stream as GetArtifact sends it."""
    artifact = training_service_pb2.Artifact(
        name="task-0/model.onnx", size_bytes=len(data) if artifact_size is None else artifact_size)
    pieces = [data[i:i + size] for i in range(0, len(data), size)] or [b""]
    out = [training_service_pb2.ArtifactChunk(data=p) for p in pieces]
    out[0].artifact.CopyFrom(artifact)
    out[-1].sha256 = hashlib.sha256(data).hexdigest() if sha256 is None else sha256
    return out


def test_downloads_are_checked():
    data = b"0123456789abcdef-"
    got = []
    artifact = _artifacts.receive(chunks_of(data), "job1", "task-0/model.onnx", got.append)
    assert b"".join(got) == data and len(got) == 5
    assert artifact.name == "task-0/model.onnx" and artifact.size_bytes == len(data)
    assert _artifacts.receive(chunks_of(b""), "job1", "empty", got.append).size_bytes == 0

    damaged = chunks_of(data)
    damaged[1].data = b"4567"[::-1]
    with pytest.raises(traind.DataLossError) as e:
        _artifacts.receive(damaged, "job1", "task-0/model.onnx", lambda b: None)
    assert e.value.message.startswith('artifact "task-0/model.onnx" of job job1 arrived damaged: '
                                      "17 of 17 bytes, SHA-256 ")
    assert e.value.message.endswith(hashlib.sha256(data).hexdigest())
    with pytest.raises(traind.DataLossError, match="16 of 17 bytes"):
        _artifacts.receive(chunks_of(data)[:-1] + [training_service_pb2.ArtifactChunk(
            sha256=hashlib.sha256(data).hexdigest())], "j", "x", lambda b: None)
    with pytest.raises(traind.DataLossError, match="17 of 20 bytes"):
        _artifacts.receive(chunks_of(data, artifact_size=20), "j", "x", lambda b: None)
    with pytest.raises(traind.DataLossError, match=r"the server's \(none\)"):
        _artifacts.receive(chunks_of(data, sha256=""), "j", "x", lambda b: None)
    with pytest.raises(traind.DataLossError, match='"x" of job j arrived damaged: 0 of 0'):
        _artifacts.receive([], "j", "x", lambda b: None)


def test_files_are_written_atomically(tmp_path):
    out = tmp_path / "model.onnx"
    assert _artifacts.write_atomically(str(out), lambda f: f.write(b"abc")) == 3
    assert out.read_bytes() == b"abc"
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask  # as open() makes files

    def fail(f):
        f.write(b"partial")
        raise traind.DataLossError("damaged")

    with pytest.raises(traind.DataLossError):
        _artifacts.write_atomically(str(out), fail)
    assert out.read_bytes() == b"abc" and os.listdir(tmp_path) == ["model.onnx"]
    def interrupted(f):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _artifacts.write_atomically(str(tmp_path / "new"), interrupted)
    assert os.listdir(tmp_path) == ["model.onnx"]
    with pytest.raises(FileNotFoundError):
        _artifacts.write_atomically(str(tmp_path / "no" / "dir"), lambda f: None)

    assert _artifacts.target_path(out, "x.csv") == str(out)
    assert _artifacts.target_path(tmp_path, "task-0/model.onnx") == str(tmp_path / "model.onnx")


def test_links_fifos_and_directories_are_not_replaced(tmp_path):
    real, link = tmp_path / "real.csv", tmp_path / "link.csv"
    real.write_bytes(b"old")
    link.symlink_to(real)
    _artifacts.write_atomically(str(link), lambda f: f.write(b"new"))
    assert link.is_symlink() and real.read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == ["link.csv", "real.csv"]

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    _artifacts.write_atomically(str(fifo), lambda f: f.write(b"through the pipe"))
    reader.join()
    assert received == [b"through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["fifo", "link.csv", "real.csv"]

    (tmp_path / "dir").mkdir()
    with pytest.raises(IsADirectoryError, match="is a directory"):
        _artifacts.write_atomically(str(tmp_path / "dir"), lambda f: None)


def test_predict_upload_sources(tmp_path, monkeypatch):
    csv_text = "a,b\n1,2\n"
    path = tmp_path / "new.csv"
    path.write_text(csv_text)
    monkeypatch.chdir(tmp_path)
    for data, name in ((str(path), str(path)), (path, str(path)), ("new.csv", "new.csv"),
                       (csv_text, ""), (csv_text.encode(), ""), (bytearray(b"a,b\n1,2\n"), "")):
        data_path, file_name, upload = _artifacts.upload_source(data, server_path=False)
        assert data_path == "" and file_name == name, data
        assert upload.read(100) == csv_text.encode() and upload.read(100) == b""
        upload.close()
    with open(path) as text_file:  # a text file's str is sent as UTF-8
        _, file_name, upload = _artifacts.upload_source(text_file, server_path=False)
        assert file_name == str(path) and upload.read(3) == b"a,b"
    # No piece is longer than asked for, however many bytes a character takes.
    upload = _artifacts.Upload(io.StringIO("\u00e9t\u00e9\n" * 1000))
    pieces = iter(lambda: upload.read(7), b"")
    sizes = [len(p) for p in pieces]
    assert max(sizes) == 7 and sum(sizes) == len(("\u00e9t\u00e9\n" * 1000).encode())
    _, file_name, upload = _artifacts.upload_source(io.BytesIO(b"x\n"), server_path=False)
    assert file_name == "" and upload.read(10) == b"x\n"
    with pytest.raises(FileNotFoundError):
        _artifacts.upload_source("missing.csv", server_path=False)
    with pytest.raises(TypeError):
        _artifacts.upload_source(42, server_path=False)

    assert _artifacts.upload_source("data/x.csv", server_path=True) == ("data/x.csv", "", None)
    assert _artifacts.upload_source(path, server_path=True) == (str(path), "", None)
    for bad in (b"a,b\n", csv_text, ""):
        with pytest.raises(TypeError):
            _artifacts.upload_source(bad, server_path=True)


def test_predict_requests_are_a_header_then_1_mib_chunks():
    header = training_service_pb2.PredictRequest.Header(job_id="j", file_name="big.csv")
    data = bytes(range(256)) * (10 << 10)  # 2.5 MiB
    failure = []
    messages = list(_artifacts.predict_requests(
        header, _artifacts.Upload(io.BytesIO(data)), failure))
    assert messages[0].WhichOneof("part") == "header" and messages[0].header == header
    assert [len(m.csv) for m in messages[1:]] == [1 << 20, 1 << 20, 512 << 10]
    assert b"".join(m.csv for m in messages[1:]) == data and failure == []
    # Named on the server: the header alone.
    assert len(list(_artifacts.predict_requests(header, None, failure))) == 1

    class Broken(io.RawIOBase):
        def read(self, size=-1):
            raise OSError("read failed")

    stream = _artifacts.predict_requests(header, _artifacts.Upload(Broken()), failure)
    next(stream)
    with pytest.raises(OSError):
        next(stream)
    assert [str(e) for e in failure] == ["read failed"]


def test_task_and_ensemble_are_exclusive():
    client = traind.Client("unix:/nonexistent/traind.sock")
    with pytest.raises(ValueError, match="exclusive"):
        client.predict("j", b"a\n1\n", task=0, ensemble=True)  # before any call


def test_predictions_frame(tmp_path):
    csv_text = "row,id,fold,true_y,label,p_0,p_1\n0,7,2,1,1,0.25,0.75\n3,9,0,1,0,0.5,0.5\n"
    p = traind.Predictions("predict/x.csv", rows=2, models=["task-0/model.ckpt"], device="cpu",
                           csv=csv_text)
    assert p.csv == csv_text and len(p) == 2 and "rows=2" in repr(p)
    path = tmp_path / "p.csv"
    path.write_text(csv_text)
    assert traind.Predictions("a", 2, [], "cpu", path=str(path)).csv == csv_text
    pd = pytest.importorskip("pandas")
    frame = p.frame()
    assert isinstance(frame, pd.DataFrame) and list(frame.index) == [0, 3]
    assert list(frame["label"]) == ["1", "0"]  # class names stay strings
    assert list(frame["true_y"]) == ["1", "1"] and list(frame["fold"]) == [2, 0]
    assert list(frame["id"]) == [7, 9]  # as pandas reads the user's own file
    assert frame.loc[3, "p_1"] == 0.5
    regression = traind.Predictions("b", 1, [], "cpu", csv="row,true_y,y\n0,2,1.5\n").frame()
    assert regression.loc[0, "y"] == 1.5 and regression.loc[0, "true_y"] == 2.0


# -- datasets --------------------------------------------------------------------


def test_default_dataset_names_are_trainctls():
    for path, name in (("examples/data/iris.csv", "iris"), ("/tmp/my file (2).csv", "my-file--2-"),
                       ("archive.tar.gz", "archive.tar"), ("noext", "noext"),
                       (".hidden.csv", "hidden"), (".csv", "csv"), ("...", "dataset"),
                       ("donn\u00e9es.csv", "donn--es"),  # each byte of a non-ASCII character
                       ("a_b-c.d.csv", "a_b-c.d"), ("x" * 200 + ".csv", "x" * 128)):
        assert _datasets.default_name(path) == name, path
        assert _datasets.is_name(_datasets.default_name(path))
    assert _datasets.default_name(os.path.join("data", "iris.csv")) == "iris"
    for bad in ("", ".x", "a b", "a/b", "x" * 129, "\u00e9"):
        assert not _datasets.is_name(bad), bad
    with pytest.raises(ValueError, match="a dataset name is 1 to 128 characters"):
        _datasets.source_of("whatever.csv", "bad name")


def test_a_frame_is_its_csv_without_the_index(tmp_path):
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"x": [1.5, None, 3.0], "n": [1, 2, 3], "label": ["a", "b,c", "d"]},
                         index=[10, 20, 30])
    want = b'x,n,label\n1.5,1,a\n,2,"b,c"\n3.0,3,d\n'  # missing: an empty field
    assert _datasets.frame_csv_bytes(frame) == want
    assert frame.to_csv(index=False).encode() == want  # what pandas itself writes
    source, name = _datasets.source_of(frame, None)
    with source:
        assert (name, source.file_name, source.temporary) == ("frame", "DataFrame", True)
        assert source.size == len(want)
        assert source.sha256 == hashlib.sha256(want).hexdigest()
        with open(source.path, "rb") as f:
            assert f.read() == want
    assert not os.path.exists(source.path)  # the temporary file goes
    source, name = _datasets.source_of(frame, "sales")
    source.close()
    assert name == "sales" and not os.path.exists(source.path)

    path = tmp_path / "my data.csv"
    path.write_bytes(want)
    source, name = _datasets.source_of(path, None)
    assert (name, source.file_name, source.temporary) == ("my-data", str(path), False)
    assert (source.size, source.sha256) == (len(want), hashlib.sha256(want).hexdigest())
    source.close()
    assert path.exists()
    with pytest.raises(FileNotFoundError):
        _datasets.source_of(tmp_path / "missing.csv", None)
    with pytest.raises(ValueError, match="not a regular file"):
        _datasets.source_of(tmp_path, "dir")
    with pytest.raises(TypeError):
        _datasets.source_of(b"a,b\n", "bytes")


class FakeUpload:
    """PrepareDatasetUpload and UploadDataset of a traind that holds `held`
    bytes of the file; `fail` lists the errors of the first UploadDataset
    calls, each raised after `cut` data messages were read."""

    def __init__(self, data: bytes, held: int = 0, stored: bool = False, fail=(), cut: int = 1):
        self.data = data
        self.held = held
        self.stored = stored
        self.fail = list(fail)
        self.cut = cut
        self.prepares = []
        self.headers = []

    def dataset(self):
        return dataset_pb2.Dataset(name="d", version=1, size_bytes=len(self.data),
                                   sha256=hashlib.sha256(self.data).hexdigest())

    def prepare(self, request):
        self.prepares.append(request)
        if self.stored:
            return training_service_pb2.PrepareDatasetUploadResponse(dataset=self.dataset())
        return training_service_pb2.PrepareDatasetUploadResponse(offset=self.held)

    def send(self, requests):
        requests = iter(requests)
        header = next(requests).header
        self.headers.append(header)
        assert header.offset == self.held
        for i, message in enumerate(requests):
            if self.fail and i == self.cut:
                raise self.fail.pop(0)
            assert message.WhichOneof("part") == "data" and len(message.data) <= 1000
            self.held += len(message.data)
        self.stored = True
        return self.dataset()


def test_the_upload_sends_nothing_twice_and_resumes_once(tmp_path, monkeypatch):
    monkeypatch.setattr(_datasets, "CHUNK_BYTES", 1000)
    data = bytes(range(256)) * 20  # 5120 bytes: 6 chunks
    path = tmp_path / "d.csv"
    path.write_bytes(data)

    def upload(fake, **kwargs):
        with _datasets.Source(str(path), "d.csv") as source:
            return _datasets.upload(fake.prepare, fake.send, source, "d", **kwargs)

    # traind has the bytes: prepared, nothing sent.
    fake = FakeUpload(data, stored=True)
    message, sent = upload(fake)
    assert message.sha256 == hashlib.sha256(data).hexdigest() and sent == 0
    assert fake.headers == [] and len(fake.prepares) == 1
    prepared = fake.prepares[0]
    assert (prepared.name, prepared.size_bytes, prepared.file_name) == ("d", 5120, "d.csv")
    assert prepared.sha256 == hashlib.sha256(data).hexdigest()
    assert prepared.kind == dataset_pb2.Dataset.CSV

    # From the offset traind returns: what it holds of an earlier upload.
    fake = FakeUpload(data, held=3000)
    message, sent = upload(fake)
    assert sent == 2120 and fake.held == 5120 and [h.offset for h in fake.headers] == [3000]
    assert fake.headers[0].file == prepared

    # A stream broken mid-way: prepared again, resumed from the new offset.
    retried = []
    fake = FakeUpload(data, fail=[traind.UnavailableError("connection reset")], cut=2)
    message, sent = upload(fake, before_retry=lambda: retried.append(True))
    assert [h.offset for h in fake.headers] == [0, 2000] and len(fake.prepares) == 2
    assert sent == 3000 + 3120 and retried == [True]  # the third chunk was sent, not received
    fake = FakeUpload(data, fail=[traind.AbortedError("aborted")])
    assert upload(fake)[1] == 2000 + 4120
    # Once: a second break is the caller's, as is an error that is not a break.
    fake = FakeUpload(data, fail=[traind.UnavailableError("a"), traind.UnavailableError("b")])
    with pytest.raises(traind.UnavailableError, match="b"):
        upload(fake)
    assert len(fake.headers) == 2
    fake = FakeUpload(data, fail=[traind.InvalidArgumentError("d.csv:3: bad")])
    with pytest.raises(traind.InvalidArgumentError):
        upload(fake)
    assert len(fake.headers) == 1
    fake = FakeUpload(data, held=6000)
    with pytest.raises(traind.InternalError, match="traind holds 6000 bytes of d.csv"):
        upload(fake)


def test_a_file_that_shrinks_while_sent_is_the_callers_error(tmp_path, monkeypatch):
    monkeypatch.setattr(_datasets, "CHUNK_BYTES", 1000)
    path = tmp_path / "d.csv"
    path.write_bytes(b"x" * 3000)
    source = _datasets.Source(str(path), "d.csv")
    path.write_bytes(b"x" * 1500)

    def send(requests):
        try:
            for _ in requests:
                pass
        except traind.FailedPreconditionError:
            raise traind.CancelledError("the call was cancelled")  # as gRPC reports it

    fake = FakeUpload(b"")
    with pytest.raises(traind.FailedPreconditionError, match="the file changed while it was sent"):
        _datasets.upload(fake.prepare, send, source, "d")


def test_the_spec_names_the_files_to_upload():
    text = ("name: x\ndata: {path: data/train.csv, label: y}\n"
            "crossValidation: {validationPath: /abs/val.csv}\n")
    files = _spec.local_data_files(text, text, [])
    assert files == {"data.path": "data/train.csv",
                     "cross_validation.validation_path": "/abs/val.csv"}
    # After the overrides, in order; a dataset takes the path's place.
    assert _spec.local_data_files(text, text, ["data.path=other.csv",
                                               "cross_validation.validation_path="]) == {
        "data.path": "other.csv"}
    assert _spec.local_data_files(text, text, ['data.dataset="iris:2"']) == {
        "cross_validation.validation_path": "/abs/val.csv"}
    assert _spec.local_data_files(text, text, ["data={path: z.csv, label: y}"]) == {
        "data.path": "z.csv", "cross_validation.validation_path": "/abs/val.csv"}
    spec = {"data": {"path": "t.csv", "dataset": ""}, "cross_validation": {"folds": 3}}
    assert _spec.local_data_files(spec, json.dumps(spec), []) == {"data.path": "t.csv"}
    assert _spec.local_data_files("{", "{", []) == {}  # traind's to report
    assert _spec.local_data_files("- a", "- a", []) == {}
    assert _spec.local_data_files("data: {path: 7}", "data: {path: 7}", []) == {}


def test_dataset_downloads_are_checked_against_the_digest_asked_for():
    data = b"a,b\n1,2\n"
    digest = hashlib.sha256(data).hexdigest()
    got = []
    _artifacts.receive_file(chunks_of(data), "dataset iris:1", got.append, digest)
    assert b"".join(got) == data
    with pytest.raises(traind.DataLossError, match=r"^DATA_LOSS: dataset iris:1 arrived damaged"):
        _artifacts.receive_file(chunks_of(data, sha256="0" * 64), "dataset iris:1", got.append)
    with pytest.raises(traind.DataLossError, match="not the " + "1" * 64 + " asked for"):
        _artifacts.receive_file(chunks_of(data), "dataset sha256:1", got.append, "1" * 64)


def test_a_profile_is_a_row_per_column():
    d = dataset_pb2.Dataset(name="iris", version=1)
    d.profile.rows = 150
    d.profile.columns.add(name="sepal_length", kind=dataset_pb2.ColumnProfile.NUMERIC, distinct=35,
                          min=4.3, max=7.9, mean=5.8433)
    d.profile.columns.add(name="species", kind=dataset_pb2.ColumnProfile.CATEGORICAL, distinct=3,
                          missing=2).value_counts.add(value="setosa", count=50)
    dataset = traind.Dataset(None, d)
    assert dataset.rows == 150 and dataset.ref == "iris:1" and dataset.already_stored is None
    assert dataset.value_counts("species") == {"setosa": 50}
    assert dataset.value_counts("sepal_length") == {}
    with pytest.raises(KeyError):
        dataset.value_counts("nope")
    rows = dataset.profile_rows()
    assert [r["column"] for r in rows] == ["sepal_length", "species"]
    assert rows[1] == {"column": "species", "kind": "CATEGORICAL", "missing": 2, "distinct": 3,
                       "distinct_capped": False, "min": None, "max": None, "mean": None}
    pd = pytest.importorskip("pandas")
    frame = dataset.profile
    assert isinstance(frame, pd.DataFrame) and list(frame.index) == ["sepal_length", "species"]
    assert list(frame.columns) == ["kind", "missing", "distinct", "distinct_capped", "min", "max",
                                   "mean"]
    assert frame.loc["sepal_length", "max"] == 7.9 and math.isnan(frame.loc["species", "min"])
    assert traind.Dataset(None, d, uploaded_bytes=0).already_stored is True
