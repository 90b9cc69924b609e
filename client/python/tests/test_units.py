"""The client's pure parts: address rules, spec and override encoding, dicts.
No daemon."""

from __future__ import annotations

import json
import math
import os
import socket

import pytest

import traind
from traind import _address, _spec
from traind._convert import to_dict
from traind.v1 import job_pb2, training_service_pb2


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
