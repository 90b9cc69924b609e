"""Artifacts and Predict: the checked download, atomic files, CSV uploads.

What goes over the wire is in proto/traind/v1/training_service.proto:
GetArtifact streams chunks of at most 1 MiB (the artifact in the first, the
SHA-256 of every byte in the last); Predict takes a header, then the CSV in
chunks.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import secrets
import stat
from typing import IO, Any, Callable, Iterable, Iterator, List, Optional, Tuple, TypeVar, Union

from traind import _frames
from traind._errors import DataLossError
from traind.v1 import training_service_pb2

CHUNK_BYTES = 1 << 20  # as trainctl uploads, and traind's largest artifact chunk

PathLike = Union[str, "os.PathLike[str]"]
# What predict() scores: a path to a CSV, its content, or a file opened for reading.
DataLike = Union[str, bytes, bytearray, memoryview, "os.PathLike[str]", IO[bytes], IO[str]]

T = TypeVar("T")


def receive(chunks: Iterable[training_service_pb2.ArtifactChunk], job_id: str, name: str,
            write: Callable[[bytes], Any]) -> training_service_pb2.Artifact:
    """Passes each chunk's bytes to `write`, in order, and returns the
    artifact of the first chunk once the size and the SHA-256 of what arrived
    match what the server says. DataLossError naming the artifact when they
    do not (what `write` got is not to be kept)."""
    return receive_file(chunks, f'artifact "{name}" of job {job_id}', write)


def receive_file(chunks: Iterable[training_service_pb2.ArtifactChunk], what: str,
                 write: Callable[[bytes], Any],
                 expected_sha256: str = "") -> training_service_pb2.Artifact:
    """receive() for any file sent as GetArtifact sends one (a dataset's
    DownloadDataset too); `what` names it in the DataLossError. With
    expected_sha256, the bytes must also have that digest."""
    digest = hashlib.sha256()
    artifact: Optional[training_service_pb2.Artifact] = None
    received = 0
    server_sha = ""
    for chunk in chunks:
        if artifact is None:
            artifact = chunk.artifact
        digest.update(chunk.data)
        received += len(chunk.data)
        if chunk.sha256:
            server_sha = chunk.sha256
        write(chunk.data)
    actual = digest.hexdigest()
    size = artifact.size_bytes if artifact is not None else 0
    if artifact is None or received != size or server_sha != actual:
        raise DataLossError(f"{what} arrived damaged: {received} of {size} bytes, SHA-256 "
                            f"{actual}, the server's {server_sha or '(none)'}")
    if expected_sha256 and actual != expected_sha256:
        raise DataLossError(f"{what} arrived with SHA-256 {actual}, not the {expected_sha256} "
                            "asked for")
    return artifact


def target_path(path: PathLike, name: str) -> str:
    """Where download(name, path) writes: `path`, or inside it as the
    artifact's last part ("task-0/model.onnx" -> "model.onnx") when `path` is
    an existing directory."""
    out = os.fspath(path)
    if os.path.isdir(out):
        out = os.path.join(out, name.rsplit("/", 1)[-1])
    return out


def write_atomically(path: str, fill: Callable[[IO[bytes]], T]) -> T:
    """Calls fill(file) on a new file beside `path` (PATH.<random>.part) and
    renames it to `path` once fill returned and the bytes are on disk;
    removes it when anything fails, so `path` is either what it was or
    complete. A symbolic link's target is the file replaced (the link stays);
    a path that is neither a regular file nor new (a character device such as
    /dev/null, a FIFO) is written to in place, as it cannot be replaced.
    Returns what fill returned."""
    try:
        mode: Optional[int] = os.stat(path).st_mode  # follows symbolic links
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory; name the file to write", path)
    if mode is not None and not stat.S_ISREG(mode):
        with open(path, "wb") as f:
            return fill(f)
    path = os.path.realpath(path) if os.path.islink(path) else path
    part = f"{path}.{secrets.token_hex(4)}.part"
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # mode as open()'s
    try:
        with os.fdopen(fd, "wb") as f:
            result = fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, path)
    except BaseException:
        try:
            os.unlink(part)
        except OSError:
            pass
        raise
    return result


def upload_source(data: DataLike, server_path: bool) -> Tuple[str, str, Optional["Upload"]]:
    """What predict() sends for `data`: (data_path, file_name, upload).

    server_path: `data` names a CSV on the server (data_path; nothing is
    uploaded). Else the CSV is uploaded from `upload`: the file, opened here,
    of an os.PathLike or a one-line str (file_name: the path as given, which
    traind's error messages name instead of its own copy); bytes, or a str
    holding CSV text (it has a newline); or a file object opened for reading
    (file_name: its name).
    """
    if server_path:
        if isinstance(data, os.PathLike):
            data = os.fspath(data)
        if not isinstance(data, str) or not data or "\n" in data:
            raise TypeError("data: with server_path=True, the path of a CSV on the server")
        return data, "", None
    if isinstance(data, (bytes, bytearray, memoryview)):
        return "", "", Upload(io.BytesIO(bytes(data)))
    if isinstance(data, str) and "\n" in data:
        return "", "", Upload(io.BytesIO(data.encode("utf-8")))
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        if not path:
            raise ValueError("data: an empty path")
        return "", path, Upload(open(path, "rb"), owned=True)
    if hasattr(data, "read"):
        name = getattr(data, "name", "")
        return "", name if isinstance(name, str) else "", Upload(data)
    raise TypeError("data: expected a path to a CSV, its text or bytes, or a file object, "
                    f"not {type(data).__name__}")


class Upload:
    """The bytes of an uploaded CSV, read in pieces of at most `size` bytes
    (a text file's str is sent as UTF-8)."""

    def __init__(self, f: IO[Any], owned: bool = False):
        self._f = f
        self._owned = owned
        self._pending = bytearray()
        self._eof = False

    def read(self, size: int) -> bytes:
        while len(self._pending) < size and not self._eof:
            piece = self._f.read(size)
            if not piece:
                self._eof = True
            else:
                self._pending += piece.encode("utf-8") if isinstance(piece, str) else piece
        out = bytes(self._pending[:size])
        del self._pending[:size]
        return out

    def close(self) -> None:
        if self._owned:
            self._f.close()


def predict_requests(header: training_service_pb2.PredictRequest.Header,
                     upload: Optional[Upload],
                     failure: List[BaseException]) -> Iterator[training_service_pb2.PredictRequest]:
    """The Predict stream: the header, then the upload's bytes in chunks of
    CHUNK_BYTES. A read error is appended to `failure` before it ends the
    stream (gRPC then cancels the call), so that the caller raises it."""
    yield training_service_pb2.PredictRequest(header=header)
    if upload is None:
        return
    while True:
        try:
            piece = upload.read(CHUNK_BYTES)
        except BaseException as e:
            failure.append(e)
            raise
        if not piece:
            return
        yield training_service_pb2.PredictRequest(csv=piece)


class Predictions:
    """What Job.predict() returns: the predictions CSV traind wrote (the
    job's artifact `artifact`, e.g. "predict/<time>-<n>.csv"): `row`, then
    `label` and `p_<class>` columns (class targets) or the targets' columns
    (regression), as the out-of-fold predictions.

    rows: rows scored; models: the model files used (artifact names, e.g.
    ["task-0/model.ckpt", "task-1/model.ckpt"] for an ensemble); device:
    where the network ran ("cpu" or "gpu <uuid>"); path: the file the CSV
    was saved to, or None; csv: its text; frame(): a pandas DataFrame.
    """

    def __init__(self, artifact: str, rows: int, models: List[str], device: str,
                 csv: Optional[str] = None, path: Optional[str] = None):
        self.artifact = artifact
        self.rows = rows
        self.models = models
        self.device = device
        self.path = path
        self._csv = csv

    @property
    def csv(self) -> str:
        """The CSV's text (read from `path` when it was saved to a file)."""
        if self._csv is None:
            if self.path is None:
                raise ValueError("no predictions CSV")
            with open(self.path, encoding="utf-8", newline="") as f:
                self._csv = f.read()
        return self._csv

    def frame(self):
        """The predictions as a pandas DataFrame indexed by `row` (needs pandas)."""
        return _frames.predictions_frame(self.csv)

    def __len__(self) -> int:
        return self.rows

    def __repr__(self) -> str:
        return (f"<traind.Predictions {self.artifact} rows={self.rows} "
                f"models={'+'.join(self.models)} on {self.device}>")
