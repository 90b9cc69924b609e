"""traind.Client and traind.Job."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import grpc

from traind import _address, _artifacts, _datasets, _frames, _spec
from traind._artifacts import DataLike, PathLike, Predictions
from traind._convert import to_dict
from traind._datasets import Dataset, DatasetSource
from traind._errors import (DeadlineExceededError, TraindError, UnavailableError,
                            UnimplementedError, error_for)
from traind.v1 import dataset_pb2, job_pb2, training_service_pb2, training_service_pb2_grpc

_TERMINAL = {job_pb2.Job.SUCCEEDED, job_pb2.Job.FAILED, job_pb2.Job.CANCELLED}

StateLike = Union[str, int]
# What names a stored dataset: "name", "name:version", "sha256:<hex>", or a Dataset.
DatasetRef = Union[str, Dataset]


class Result(dict):
    """A job's result (GetJobResult) as a plain dict: "folds" (per fold:
    "fold", "best_epoch", "val" metrics at the best epoch, ...), "val" (mean and
    std over folds of each validation metric), "classes", "complete", ..."""

    def folds_frame(self):
        """Per-fold table (pandas DataFrame indexed by fold): best_epoch,
        epochs_run, rows, val_<metric>, train_<metric>, final_train_<metric>.
        Folds only: the refit task (no validation rows) is refit_row()."""
        return _frames.folds_frame(self)

    def refit_row(self) -> Optional[Dict[str, Any]]:
        """The refit task's facts and train metrics (a dict with folds_frame()'s
        columns), or None when the job has no refit task."""
        return _frames.refit_row(self)

    def summary_frame(self):
        """Mean and std over folds of each validation metric (DataFrame)."""
        return _frames.summary_frame(self)

    def importance_frame(self):
        """Permutation importance over the folds (DataFrame indexed by feature,
        most important first): importances_mean, importances_std, fold<k>;
        attrs["metric"] names what it measures ("val.accuracy (max)"). Empty
        unless the spec has `importance`."""
        return _frames.importance_frame(self)

    def trials_frame(self):
        """A search's trials (DataFrame indexed by trial, best first): rank,
        state, score, epochs_run, param_<path>, mean_val_<metric>,
        std_val_<metric>, split<k>_val_<metric>. Empty without a search."""
        return _frames.trials_frame(self)


class Devices(list):
    """ListDevices: a list of device dicts ("id", "kind", "state", ...);
    `gpu_note` says why no GPU job can run, when none can."""

    gpu_note: str = ""


class Job:
    """A job on a traind. `data` is the job as last fetched (a dict: "id",
    "state", "spec", "tasks", "result", ...); refresh() fetches it again.

    Not thread-safe; the Client it came from may be shared."""

    def __init__(self, client: "Client", message: job_pb2.Job):
        self._client = client
        self._message = message
        self._data: Optional[Dict[str, Any]] = None

    @property
    def id(self) -> str:
        return self._message.id

    @property
    def name(self) -> str:
        return self._message.spec.name

    @property
    def state(self) -> str:
        """"QUEUED", "RUNNING", "CANCELLING", "SUCCEEDED", "FAILED" or "CANCELLED"."""
        return job_pb2.Job.State.Name(self._message.state)

    @property
    def done(self) -> bool:
        return self._message.state in _TERMINAL

    @property
    def data(self) -> Dict[str, Any]:
        if self._data is None:
            self._data = to_dict(self._message)
        return self._data

    @property
    def failure(self) -> Optional[Dict[str, Any]]:
        """The failure of a FAILED job ("reason", "message", ...), else None."""
        return self.data["failure"] if self._message.HasField("failure") else None

    @property
    def message(self) -> job_pb2.Job:
        """The traind.v1.Job protobuf message as last fetched."""
        return self._message

    def _set(self, message: job_pb2.Job) -> "Job":
        self._message = message
        self._data = None
        return self

    def refresh(self) -> "Job":
        """Fetches the job again (GetJob); returns self."""
        return self._set(self._client._get_job_message(self.id))

    def watch(self, after: int = 0) -> Iterator[Dict[str, Any]]:
        """The job's events with sequence > `after`, as dicts: stored ones,
        then live ones, ending after the terminal event (marked "last").

        A broken stream (traind restarted, connection lost) is reconnected
        from the last sequence seen, so no event is missed or seen twice; it
        gives up with UnavailableError after the client's `watch_retries`
        consecutive failures. Each event has "sequence", "time" and one of
        "job_state", "task_state", "epoch" (train and val metrics) or
        "device"."""
        events = self._client._watch(self.id, after)
        try:
            for event in events:
                yield to_dict(event)
        finally:
            events.close()  # cancels the RPC when the caller stops early

    def wait(self, timeout: Optional[float] = None) -> "Job":
        """Blocks until the job ends (following its event stream), then
        refreshes and returns self; check `state`. DeadlineExceededError
        when `timeout` seconds pass first (the job keeps running)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for _ in self._client._watch(self.id, 0, deadline=deadline):
            pass
        return self.refresh()

    def result(self) -> Result:
        """The result so far (GetJobResult): complete once the job succeeded."""
        return self._client._result(self.id)

    def cancel(self, force: bool = False) -> "Job":
        """Cancels the job (force: kill its workers at once); returns self
        with the state after the call."""
        return self._set(self._client._cancel(self.id, force))

    def events(self, timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """Every event of the job; on a job still running this waits for
        its end (DeadlineExceededError after `timeout` seconds)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return [to_dict(e) for e in self._client._watch(self.id, 0, deadline=deadline)]

    def history(self, timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """Per-epoch metrics from the stored events: one dict per epoch of
        each task attempt (task, attempt, epoch, train_<m>, val_<m>, ...)."""
        return _frames.history_rows(self.events(timeout))

    def history_frame(self, timeout: Optional[float] = None):
        """history() as a pandas DataFrame (needs pandas)."""
        return _frames.history_frame(self.events(timeout))

    def artifacts(self) -> List[Dict[str, Any]]:
        """The job's files (ListArtifacts), by name: dicts with "name"
        ("predictions.csv", "task-0/model.onnx", ...), "kind" ("PREDICTIONS",
        "MODEL", "ONNX_MODEL", "LOG", "CHECKPOINT", "TENSORBOARD", "OTHER"),
        "task" (-1 for the job's own files), "size_bytes", "modify_time"."""
        return self._client.list_artifacts(self.id)

    def download(self, name: str, path: Optional[PathLike] = None) -> Union[bytes, str]:
        """Artifact `name` of the job, its SHA-256 checked: its bytes, or
        with `path` written to that file and the file's path returned (see
        Client.download)."""
        return self._client.download(self.id, name, path)

    def predict(self, data: Union[DataLike, Dataset], task: Optional[int] = None,
                ensemble: bool = False, server_path: bool = False,
                path: Optional[PathLike] = None) -> Predictions:
        """Scores a CSV with the job's model (see Client.predict)."""
        return self._client.predict(self.id, data, task=task, ensemble=ensemble,
                                    server_path=server_path, path=path)

    def delete(self, cancel: bool = False) -> int:
        """Deletes the job, its events and every artifact (DeleteJob);
        returns the bytes freed. A job still running is
        FailedPreconditionError unless `cancel` (its workers are killed at
        once)."""
        return self._client.delete_job(self.id, cancel)

    def __repr__(self) -> str:
        return f"<traind.Job {self.id} {self.name!r} {self.state}>"


class Client:
    """A connection to traind's TrainingService.

    address: "unix:PATH" or "HOST:PORT"; default as trainctl's: $TRAIND_ADDRESS,
      else unix:$TRAIND_STATE_DIR/traind.sock, else unix:.traind/traind.sock if
      that socket exists, else 127.0.0.1:7070.
    token: bearer token for TCP addresses; default token_file's first line,
      else $TRAIND_TOKEN. The unix socket needs none.
    tls: use TLS (system roots, or tls_ca); implied by tls_ca/tls_cert/tls_key.
      tls_cert + tls_key: a client certificate (mutual TLS). tls_server_name:
      the name to check in the server's certificate.
    timeout: the deadline of every unary call, and the longest a watch waits
      to (re)connect. Streams get a deadline of stream_timeout per call: a
      watch is resumed from its cursor when it passes; a download, or a
      predict's upload and scoring, fails with DeadlineExceededError.
    watch_retries: consecutive broken streams a watch reconnects after before
      it raises (backoff 0.2 s, 0.4 s, ... at most 5 s).

    Connecting is lazy. Thread-safe (gRPC channels are); close() when done,
    or use it as a context manager.
    """

    def __init__(self, address: Optional[str] = None, token: Optional[str] = None,
                 tls: bool = False, *, token_file: Optional[str] = None,
                 tls_ca: Optional[str] = None, tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None, tls_server_name: Optional[str] = None,
                 timeout: float = 10.0, stream_timeout: float = 600.0, watch_retries: int = 5):
        self.address = _address.check_address(address or _address.default_address())
        if timeout <= 0 or stream_timeout <= 0:
            raise ValueError("timeout and stream_timeout must be positive")
        self.timeout = float(timeout)
        self.stream_timeout = float(stream_timeout)
        self.watch_retries = int(watch_retries)
        token = _address.resolve_token(token, token_file)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        if bool(tls_cert) != bool(tls_key):
            raise ValueError("tls_cert and tls_key go together")
        options = [
            ("grpc.max_receive_message_length", 64 << 20),
            # Reconnect promptly after traind restarts.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 2000),
        ]
        if tls or tls_ca or tls_cert or tls_key:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read_bytes(tls_ca), private_key=_read_bytes(tls_key),
                certificate_chain=_read_bytes(tls_cert))
            if tls_server_name:
                options.append(("grpc.ssl_target_name_override", tls_server_name))
            self._channel = grpc.secure_channel(self.address, credentials, options)
        else:
            self._channel = grpc.insecure_channel(self.address, options)
        self._stub = training_service_pb2_grpc.TrainingServiceStub(self._channel)

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<traind.Client {self.address}>"

    # -- calls -------------------------------------------------------------

    def submit(self, spec: _spec.SpecLike, set: _spec.SetLike = None, name: Optional[str] = None,
               priority: Optional[int] = None, idempotency_key: Optional[str] = None,
               base_dir: Optional[Union[str, "os.PathLike[str]"]] = None, *,
               data: Optional[Union[DatasetSource, Dataset]] = None,
               validation_data: Optional[Union[DatasetSource, Dataset]] = None,
               upload: bool = True) -> Job:
        """Submits a job and returns it (QUEUED).

        spec: a path to a YAML/JSON spec file, the spec's YAML or JSON text, or
          a dict (sent as JSON). traind parses it as trainctl's files are
          parsed (docs/spec.md): enum values in any case, snake_case or
          lowerCamelCase names.
        set: overrides applied in order, as trainctl's --set: a dict {path:
          value} ({"training.epochs": 10}) or a list of "path=value" strings.
        name, priority: override the spec's.
        idempotency_key: a retried submit with the same key returns the job
          the first one created.
        base_dir: the directory relative data paths (data.path,
          cross_validation.validation_path) are relative to; default the
          current directory, as with trainctl.
        data: the training data in place of the spec's data.path: a pandas
          DataFrame or the path of a CSV file here, uploaded as
          upload_dataset() does (nothing is sent when traind has the bytes),
          or a Dataset; the job names it by digest (data.dataset
          "sha256:<hex>").
        validation_data: the same for cross_validation.validation_path.
        upload: over TCP, a data.path or cross_validation.validation_path
          (after `set`) naming a readable file here is uploaded and the job
          names it by digest, as trainctl submit does, so that traind need
          not see the client's files. False sends the paths as they are. On
          a unix socket the paths are always sent (traind shares the disk).

        An invalid spec raises InvalidArgumentError whose message names the
        field path (and line and column for the text): "spec_text:
        model.layers[0].dense: unknown field "unit" (line 7, column 17)",
        "spec.model.layers[1].dense.units: ...". Nothing is stored then.
        """
        text, overrides, base = _spec.submission(spec, set, name, priority, base_dir)
        given = {"data.path": data, "cross_validation.validation_path": validation_data}
        for path_field, dataset_field in _spec.DATA_FILE_FIELDS:
            if given[path_field] is not None:
                dataset = self._dataset_of(given[path_field])
                overrides += [f"{path_field}=", f"{dataset_field}="
                              + _spec.override_value(dataset.digest_ref)]
        if upload and not _address.is_unix(self.address):
            overrides += self._upload_spec_files(spec, text, overrides, base, given)
        request = training_service_pb2.SubmitJobRequest(
            spec_text=text, overrides=overrides, base_dir=base,
            idempotency_key=idempotency_key or "")
        return Job(self, self._unary(self._stub.SubmitJob, request))

    def job(self, job_id: str) -> Job:
        """The job with this id (GetJob); NotFoundError if there is none."""
        return Job(self, self._get_job_message(job_id))

    def list_jobs(self, states: Optional[Sequence[StateLike]] = None,
                  name_contains: Optional[str] = None,
                  page_size: Optional[int] = None) -> Iterator[Job]:
        """Jobs, newest first, following every page. states: e.g. ["RUNNING",
        "queued"]; name_contains: a substring of the name; page_size: jobs per
        call (traind's default 100, at most 1000)."""
        request = training_service_pb2.ListJobsRequest(
            states=[_job_state(s) for s in states or ()], name_contains=name_contains or "",
            page_size=page_size or 0)
        while True:
            response = self._unary(self._stub.ListJobs, request)
            for message in response.jobs:
                yield Job(self, message)
            if not response.next_page_token:
                return
            request.page_token = response.next_page_token

    def devices(self) -> Devices:
        """The devices traind schedules on (ListDevices), as dicts."""
        response = self._unary(self._stub.ListDevices, training_service_pb2.ListDevicesRequest())
        devices = Devices(to_dict(d) for d in response.devices)
        devices.gpu_note = response.gpu_note
        return devices

    def info(self) -> Dict[str, Any]:
        """Server facts (GetServerInfo): version, state_dir, listen_addresses,
        cpu_slots, jobs_active, tasks_running, tasks_queued, ..."""
        return to_dict(self._unary(self._stub.GetServerInfo,
                                   training_service_pb2.GetServerInfoRequest()))

    def health(self, service: str = "") -> str:
        """grpc.health.v1.Health/Check of the whole server ("") or of a
        service ("traind.v1.TrainingService"): "SERVING", "NOT_SERVING" (traind
        is stopping) or "UNKNOWN"; NotFoundError for a service traind does not
        report."""
        data = service.encode()
        if len(data) > 127:
            raise ValueError("service: name too long")
        # HealthCheckRequest{service = 1}; HealthCheckResponse{status = 1}.
        request = b"\x0a" + bytes([len(data)]) + data if data else b""
        check = self._channel.unary_unary("/grpc.health.v1.Health/Check")
        response = self._unary(check, request)
        status = response[1] if len(response) >= 2 and response[0] == 0x08 else 0
        return {1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}.get(status, "UNKNOWN")

    def list_artifacts(self, job_id: str) -> List[Dict[str, Any]]:
        """The files job `job_id` left (ListArtifacts), as dicts by name (see
        Job.artifacts). A job with a refit task lists that task's models
        also as "model.ckpt" and "model.onnx". NotFoundError for an unknown
        job."""
        out: List[Dict[str, Any]] = []
        token = ""
        while True:  # every page
            response = self._unary(
                self._stub.ListArtifacts,
                training_service_pb2.ListArtifactsRequest(job_id=job_id, page_token=token))
            out.extend(to_dict(a) for a in response.artifacts)
            token = response.next_page_token
            if not token:
                return out

    def download(self, job_id: str, name: str,
                 path: Optional[PathLike] = None) -> Union[bytes, str]:
        """Artifact `name` of job `job_id` (GetArtifact), streamed in chunks
        and checked against the size and SHA-256 traind sends (DataLossError
        naming the artifact when they disagree).

        path None: returns the bytes. Else writes them to `path` (inside it,
        as the name's last part, when it is a directory) through a temporary
        file beside it, renamed once complete and checked, so nothing is left
        when the download fails (a symbolic link's target is replaced, the
        link kept; a FIFO or device is written to in place); returns the
        file's path. NotFoundError for a
        name list_artifacts does not list. The call's deadline is
        stream_timeout."""
        if path is None:
            return self._fetch(job_id, name)
        return self._save(job_id, name, path)

    def predict(self, job_id: str, data: Union[DataLike, Dataset], task: Optional[int] = None,
                ensemble: bool = False, server_path: bool = False,
                path: Optional[PathLike] = None) -> Predictions:
        """Scores a CSV with job `job_id`'s model (Predict), applying the
        preprocessing fitted in training, then downloads the predictions
        (as download does, SHA-256 checked) and returns them as Predictions
        (.csv, .rows, .models, .device, .artifact, .frame()).

        data: the path of a CSV here, uploaded in 1 MiB chunks (traind's
          errors name it as given: 'new.csv:3: column "sepal_width" (column
          2): "wide" is not a number'); a Dataset, which traind reads from
          its store (nothing is uploaded);
          its content as bytes or as a str with a newline; or a file object
          opened for reading. With server_path=True: the path of a CSV on the
          server, inside its data roots (a relative one is relative to the
          current directory), which is not uploaded.
        task: the model of that task; ensemble: the mean of the fold models.
          Default: the refit task's model, else task 0's. Not both
          (ValueError).
        path: also save the predictions CSV to this file (written as
          download writes it; Predictions.path); default: in memory.

        A CSV traind cannot score (a missing column, a cell that is not a
        number) is InvalidArgumentError naming the file, line and column;
        nothing is stored for it. The upload and the scoring share one
        deadline of stream_timeout, the download has its own.
        """
        if task is not None and ensemble:
            raise ValueError("task and ensemble are exclusive: one task's model, or the mean "
                             "of the fold models")
        header = training_service_pb2.PredictRequest.Header(job_id=job_id,
                                                            ensemble=bool(ensemble))
        if task is not None:
            header.task = int(task)
        if isinstance(data, Dataset):
            header.dataset = data.digest_ref
            data_path, file_name, upload = "", "", None
        else:
            data_path, file_name, upload = _artifacts.upload_source(data, server_path)
        header.data_path = data_path
        header.file_name = file_name
        if data_path and not os.path.isabs(data_path):
            header.base_dir = os.getcwd()
        failure: List[BaseException] = []
        try:
            response = self._stub.Predict(
                _artifacts.predict_requests(header, upload, failure),
                timeout=self.stream_timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            if failure:
                raise failure[0] from None  # reading the upload failed
            raise self._error(e, self.stream_timeout) from None
        finally:
            if upload is not None:
                upload.close()
        name = response.artifact.name
        csv: Optional[str] = None
        saved: Optional[str] = None
        if path is None:
            csv = self._fetch(job_id, name).decode("utf-8")
        else:
            saved = self._save(job_id, name, path)
        return Predictions(artifact=name, rows=int(response.rows), models=list(response.models),
                           device=response.device or "cpu", csv=csv, path=saved)

    def delete_job(self, job_id: str, cancel: bool = False) -> int:
        """Deletes a finished job: its rows, events and every artifact
        (DeleteJob); returns the bytes of artifacts freed. A job still
        running is FailedPreconditionError unless `cancel` (it is cancelled
        first, its workers killed at once). The owner or an admin may delete
        a job; NotFoundError for an unknown one."""
        response = self._unary(self._stub.DeleteJob,
                               training_service_pb2.DeleteJobRequest(job_id=job_id,
                                                                     cancel=bool(cancel)))
        return int(response.freed_bytes)

    # -- datasets ----------------------------------------------------------

    def upload_dataset(self, data: DatasetSource, name: Optional[str] = None) -> Dataset:
        """Stores a CSV in traind as dataset `name` and returns the Dataset
        (its version, SHA-256 and profile).

        data: the path of a CSV file here (default name: its base name
          without the extension, characters outside [A-Za-z0-9._-] replaced
          by '-': "data/my file.csv" -> "my-file"), or a pandas DataFrame,
          written as CSV without its index (default name "frame"; traind's
          messages call it "DataFrame").

        The file's size and SHA-256 go first: when traind already holds
        those bytes nothing is sent (`already_stored`; the same bytes under
        the same name are the same version). Otherwise they are streamed in
        1 MiB chunks from the offset traind returns, which resumes an
        interrupted upload; a stream broken mid-way (UnavailableError,
        AbortedError) is resumed once from what traind then holds. Bytes
        that are not a CSV traind reads are InvalidArgumentError naming the
        file, line and column; nothing is stored then. The stream's deadline
        is stream_timeout."""
        source, name = _datasets.source_of(data, name)
        with source:
            message, sent = self._upload(source, name)
        return Dataset(self, message, uploaded_bytes=sent)

    def datasets(self, name: Optional[str] = None, owner: Optional[str] = None) -> List[Dataset]:
        """The caller's datasets (ListDatasets), newest first; `name`: only
        its versions. An admin sees everyone's, or `owner`'s. Without
        profiles or job ids: reading them fetches the dataset."""
        response = self._unary(self._stub.ListDatasets, training_service_pb2.ListDatasetsRequest(
            name=name or "", owner=owner or ""))
        return [Dataset(self, d) for d in response.datasets]

    def dataset(self, ref: DatasetRef, owner: Optional[str] = None) -> Dataset:
        """One dataset with its profile and job ids (GetDataset). ref: "name"
        (the latest version), "name:version" or "sha256:<hex>"; an admin may
        name another `owner`'s. NotFoundError when there is none."""
        ref, owner = _dataset_ref(ref, owner)
        return Dataset(self, self._get_dataset_message(ref, owner), complete=True)

    def delete_dataset(self, ref: DatasetRef, all_versions: bool = False,
                       owner: Optional[str] = None) -> List[Dataset]:
        """Deletes one version (with all_versions: every version of the name
        `ref` names) and returns what was deleted. FailedPreconditionError,
        naming the job, while a job that has not finished uses it; finished
        jobs keep their records."""
        ref, owner = _dataset_ref(ref, owner)
        response = self._unary(self._stub.DeleteDataset, training_service_pb2.DeleteDatasetRequest(
            ref=ref, owner=owner, all_versions=bool(all_versions)))
        return [Dataset(self, d) for d in response.deleted]

    def download_dataset(self, ref: DatasetRef, path: Optional[PathLike] = None,
                         owner: Optional[str] = None) -> Union[bytes, str]:
        """A dataset's bytes (DownloadDataset), checked as download() checks
        an artifact: their size and SHA-256 against what traind sends, and
        against the digest a Dataset or a "sha256:<hex>" ref names
        (DataLossError naming the dataset). path None: returns the bytes;
        else writes them to `path` as download() does (into a directory as
        NAME-VERSION.csv) and returns the file's path."""
        expected = ref.sha256 if isinstance(ref, Dataset) else ""
        ref, owner = _dataset_ref(ref, owner)
        if ref.startswith("sha256:"):
            expected = ref[len("sha256:"):]
        if path is None:
            pieces: List[bytes] = []
            self._download_dataset(ref, owner, expected, pieces.append)
            return b"".join(pieces)
        out = os.fspath(path)
        if os.path.isdir(out):
            found = self._get_dataset_message(ref, owner)  # its name and digest
            out = os.path.join(out, f"{found.name}-{found.version}.csv")
            ref, expected = f"sha256:{found.sha256}", found.sha256
        _artifacts.write_atomically(
            out, lambda f: self._download_dataset(ref, owner, expected, f.write))
        return out

    # -- internals -----------------------------------------------------------

    def _error(self, e: grpc.RpcError, timeout: Optional[float] = None) -> TraindError:
        code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
        details = (e.details() if hasattr(e, "details") else None) or ""
        if code == grpc.StatusCode.UNAVAILABLE:
            return UnavailableError(f"cannot reach traind at {self.address}"
                                    + (f": {details}" if details else ""))
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return DeadlineExceededError(
                f"no answer from traind at {self.address} within "
                f"{self.timeout if timeout is None else timeout:g}s")
        return error_for(code, details or code.name)

    def _unary(self, method, request):
        try:
            return method(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise self._error(e) from None

    def _get_job_message(self, job_id: str) -> job_pb2.Job:
        return self._unary(self._stub.GetJob, training_service_pb2.GetJobRequest(job_id=job_id))

    def _result(self, job_id: str) -> Result:
        message = self._unary(self._stub.GetJobResult,
                              training_service_pb2.GetJobResultRequest(job_id=job_id))
        return Result(to_dict(message))

    def _cancel(self, job_id: str, force: bool) -> job_pb2.Job:
        return self._unary(self._stub.CancelJob,
                           training_service_pb2.CancelJobRequest(job_id=job_id, force=force))

    def _fetch(self, job_id: str, name: str) -> bytes:
        pieces: List[bytes] = []
        self._download(job_id, name, pieces.append)
        return b"".join(pieces)

    def _save(self, job_id: str, name: str, path: PathLike) -> str:
        out = _artifacts.target_path(path, name)
        _artifacts.write_atomically(out, lambda f: self._download(job_id, name, f.write))
        return out

    def _download(self, job_id: str, name: str,
                  write: Callable[[bytes], Any]) -> training_service_pb2.Artifact:
        request = training_service_pb2.GetArtifactRequest(job_id=job_id, name=name)
        call = self._stub.GetArtifact(request, timeout=self.stream_timeout,
                                      metadata=self._metadata)
        try:
            return _artifacts.receive(call, job_id, name, write)
        except grpc.RpcError as e:
            raise self._error(e, self.stream_timeout) from None
        finally:
            call.cancel()  # also when `write` failed mid-stream

    def _get_dataset_message(self, ref: str, owner: str = "") -> dataset_pb2.Dataset:
        return self._unary(self._stub.GetDataset,
                           training_service_pb2.GetDatasetRequest(ref=ref, owner=owner))

    def _upload(self, source: _datasets.Source, name: str) -> Tuple[dataset_pb2.Dataset, int]:
        """PrepareDatasetUpload, then UploadDataset when traind lacks the
        bytes (see _datasets.upload): the dataset and the bytes sent."""
        def send(requests: Iterator[training_service_pb2.UploadDatasetRequest]):
            try:
                return self._stub.UploadDataset(requests, timeout=self.stream_timeout,
                                                metadata=self._metadata)
            except grpc.RpcError as e:
                raise self._error(e, self.stream_timeout) from None

        return _datasets.upload(
            lambda request: self._unary(self._stub.PrepareDatasetUpload, request), send, source,
            name, before_retry=lambda: self._wait_connected(None))

    def _download_dataset(self, ref: str, owner: str, expected_sha256: str,
                          write: Callable[[bytes], Any]) -> None:
        request = training_service_pb2.GetDatasetRequest(ref=ref, owner=owner)
        call = self._stub.DownloadDataset(request, timeout=self.stream_timeout,
                                          metadata=self._metadata)
        try:
            _artifacts.receive_file(call, f"dataset {ref}", write, expected_sha256)
        except grpc.RpcError as e:
            raise self._error(e, self.stream_timeout) from None
        finally:
            call.cancel()

    def _dataset_of(self, data: Union[DatasetSource, Dataset]) -> Dataset:
        """submit()'s data=: a Dataset as it is, else uploaded."""
        return data if isinstance(data, Dataset) else self.upload_dataset(data)

    def _upload_spec_files(self, spec: _spec.SpecLike, text: str, overrides: List[str],
                           base: str, given: Dict[str, Any]) -> List[str]:
        """Uploads the spec's data files found here (see submit's `upload`);
        the overrides that name them by digest instead."""
        out: List[str] = []
        files = _spec.local_data_files(spec, text, overrides)
        for path_field, dataset_field in _spec.DATA_FILE_FIELDS:
            path = files.get(path_field)
            if path is None or given[path_field] is not None:
                continue
            local = os.path.join(base, path)
            if not os.path.isfile(local) or not os.access(local, os.R_OK):
                continue  # traind's to find, or to report
            source = _datasets.Source(local, path)
            with source:
                try:
                    message, _ = self._upload(source, _datasets.default_name(path))
                except UnimplementedError:
                    return []  # a traind that takes no uploads reads the paths itself
            out += [f"{path_field}=",
                    f"{dataset_field}=" + _spec.override_value(f"sha256:{message.sha256}")]
        return out

    def _wait_connected(self, deadline: Optional[float]) -> bool:
        wait = self.timeout if deadline is None else max(0.0, min(self.timeout,
                                                                  deadline - time.monotonic()))
        try:
            grpc.channel_ready_future(self._channel).result(timeout=wait)
            return True
        except grpc.FutureTimeoutError:
            return False

    def _watch(self, job_id: str, after: int,
               deadline: Optional[float] = None) -> Iterator[job_pb2.JobEvent]:
        """WatchJob from `after`, reconnecting from the cursor (see Job.watch).
        deadline: time.monotonic() by which the job must have ended."""
        if after < 0:
            raise ValueError("after: must not be negative")
        last = after
        failures = 0  # consecutive broken streams without a new event
        delivered = False
        last_error: Optional[TraindError] = None
        while True:
            if failures > 0:
                if failures > self.watch_retries:
                    raise last_error  # type: ignore[misc]
                time.sleep(min(5.0, 0.2 * (1 << (failures - 1))))
                if not self._wait_connected(deadline):
                    last_error = UnavailableError(f"cannot reach traind at {self.address}: "
                                                  "failed to connect")
                    failures += 1
                    self._check_deadline(job_id, deadline)
                    continue
            call_timeout = self.stream_timeout
            if deadline is not None:
                call_timeout = min(call_timeout, deadline - time.monotonic())
                if call_timeout <= 0:
                    self._check_deadline(job_id, deadline)
            request = training_service_pb2.WatchJobRequest(job_id=job_id, after_sequence=last)
            call = self._stub.WatchJob(request, timeout=call_timeout, metadata=self._metadata)
            try:
                for event in call:
                    if event.sequence <= last:
                        continue  # already delivered
                    last = event.sequence
                    failures = 0
                    delivered = True
                    yield event
                    if event.last:
                        return
                # Closed without a `last` event: the cursor was already past
                # the end of a finished job, or traind went away cleanly.
                try:
                    if self._get_job_message(job_id).state in _TERMINAL:
                        return
                    last_error = UnavailableError(
                        f"cannot reach traind at {self.address}: the event stream ended early")
                except UnavailableError as e:
                    last_error = e
                failures += 1
            except grpc.RpcError as e:
                code = call.code()
                if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                    # This call's own deadline: go on from the cursor, unless
                    # the caller's deadline has passed.
                    self._check_deadline(job_id, deadline)
                    continue
                if code != grpc.StatusCode.UNAVAILABLE:
                    raise self._error(e) from None
                if not delivered and failures == 0 and last == after:
                    raise self._error(e) from None  # the first connection fails fast
                last_error = self._error(e)
                failures += 1
            finally:
                call.cancel()  # also when the consumer stops iterating

    def _check_deadline(self, job_id: str, deadline: Optional[float]) -> None:
        if deadline is not None and time.monotonic() >= deadline:
            try:
                state = job_pb2.Job.State.Name(self._get_job_message(job_id).state)
            except TraindError:
                state = "not finished"
            raise DeadlineExceededError(f"job {job_id} is still {state}: the wait timed out")


def _job_state(state: StateLike) -> int:
    if isinstance(state, int):
        return state
    try:
        value = job_pb2.Job.State.Value(str(state).upper())
    except ValueError:
        value = 0
    if value == 0:
        raise ValueError(f"state {state!r}: expected one of QUEUED, RUNNING, CANCELLING, "
                         "SUCCEEDED, FAILED, CANCELLED")
    return value


def _dataset_ref(ref: DatasetRef, owner: Optional[str]) -> Tuple[str, str]:
    """(ref, owner) of a GetDatasetRequest: a Dataset names its own version."""
    if isinstance(ref, Dataset):
        return ref.ref, owner if owner is not None else ref.owner
    if not isinstance(ref, str) or not ref:
        raise TypeError('ref: expected "name", "name:version", "sha256:<hex>" or a Dataset')
    return ref, owner or ""


def _read_bytes(path: Optional[str]) -> Optional[bytes]:
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()
