"""Datasets: names, what an upload sends, the resumable upload, traind.Dataset.

What goes over the wire is in proto/traind/v1/training_service.proto: the
client sends the file's name, size and SHA-256 (PrepareDatasetUpload); traind
answers with the dataset when it already holds those bytes (nothing is sent),
else with how many bytes of an earlier upload it holds; UploadDataset then
streams a header and the bytes from that offset in chunks of 1 MiB.
"""

from __future__ import annotations

import datetime
import hashlib
import inspect
import io
import os
import re
import stat
import tempfile
from typing import (IO, TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple,
                    Union)

from traind import _frames
from traind._artifacts import CHUNK_BYTES, PathLike
from traind._convert import to_dict
from traind._errors import (AbortedError, FailedPreconditionError, InternalError, TraindError,
                            UnavailableError)
from traind.v1 import dataset_pb2, training_service_pb2

if TYPE_CHECKING:  # pragma: no cover
    from traind._client import Client

MAX_NAME_BYTES = 128
# Broken UploadDataset streams (UNAVAILABLE, ABORTED) an upload survives: each
# is followed by a new PrepareDatasetUpload and the rest of the file from the
# offset it returns.
UPLOAD_RETRIES = 1
FRAME_NAME = "frame"  # upload_dataset's name for a DataFrame without one
FRAME_FILE_NAME = "DataFrame"  # what traind's messages call a DataFrame's CSV

_NAME_RE = re.compile(r"[A-Za-z0-9._-]+")

# What upload_dataset takes: a path to a CSV file, or a pandas DataFrame.
DatasetSource = Union[str, "os.PathLike[str]", Any]


def is_name(name: str) -> bool:
    """A dataset name traind accepts: 1 to 128 bytes of A-Z a-z 0-9 . _ -,
    not starting with '.'."""
    return (isinstance(name, str) and 0 < len(name) <= MAX_NAME_BYTES
            and _NAME_RE.fullmatch(name) is not None and not name.startswith("."))


def default_name(path: PathLike) -> str:
    """A file's dataset name, as trainctl gives it: the base name without its
    extension ("data/customers.csv" -> "customers"), each byte outside
    [A-Za-z0-9._-] replaced by '-', leading dots dropped, at most 128 bytes;
    "dataset" when nothing is left."""
    base = os.path.basename(os.fspath(path))
    stem, extension = os.path.splitext(base)
    if extension and stem:
        base = stem
    name = "".join(chr(b) if _NAME_RE.fullmatch(chr(b)) else "-"
                   for b in base.encode("utf-8", "surrogateescape"))
    name = name.lstrip(".")[:MAX_NAME_BYTES]
    return name or "dataset"


def is_frame(data: Any) -> bool:
    """A pandas DataFrame (or anything that writes itself as one does)."""
    return hasattr(data, "to_csv") and hasattr(data, "columns")


def write_frame_csv(frame: Any, f: IO[bytes]) -> None:
    """Writes `frame` as CSV to the binary file `f`: a header row, then one
    row per row of the frame, its index left out; UTF-8, "\\n" line ends,
    missing values as empty fields (which traind reads as missing)."""
    # pandas 1.5 renamed line_terminator to lineterminator.
    parameters = inspect.signature(frame.to_csv).parameters
    terminator = "lineterminator" if "lineterminator" in parameters else "line_terminator"
    text = io.TextIOWrapper(f, encoding="utf-8", newline="")
    try:
        frame.to_csv(text, index=False, **{terminator: "\n"})
        text.flush()
    finally:
        text.detach()  # leaves `f` open


def frame_csv_bytes(frame: Any) -> bytes:
    """The bytes upload_dataset sends for `frame` (see write_frame_csv)."""
    out = io.BytesIO()
    write_frame_csv(frame, out)
    return out.getvalue()


def file_digest(path: str) -> Tuple[int, str]:
    """(size in bytes, lower-case hex SHA-256) of the file at `path`."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while True:
            piece = f.read(CHUNK_BYTES)
            if not piece:
                return size, digest.hexdigest()
            digest.update(piece)
            size += len(piece)


class Source:
    """A file to upload: `path` (read here), `file_name` (what traind's
    messages call it), its size and SHA-256. A DataFrame's CSV is a
    temporary file, removed by close()."""

    def __init__(self, path: str, file_name: str, temporary: bool = False):
        self.path = path
        self.file_name = file_name
        self.temporary = temporary
        self.size, self.sha256 = file_digest(path)

    def close(self) -> None:
        if self.temporary:
            try:
                os.unlink(self.path)
            except OSError:
                pass

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def source_of(data: DatasetSource, name: Optional[str]) -> Tuple[Source, str]:
    """The file to upload for `data` and the dataset's name: a path (default
    name: default_name(path)) or a DataFrame written as CSV to a temporary
    file (default name "frame"). ValueError for a name traind would refuse."""
    if is_frame(data):
        name = FRAME_NAME if name is None else name
        _check_name(name)
        fd, path = tempfile.mkstemp(prefix="traind-frame-", suffix=".csv")
        try:
            with os.fdopen(fd, "wb") as f:
                write_frame_csv(data, f)
            return Source(path, FRAME_FILE_NAME, temporary=True), name
        except BaseException:
            os.unlink(path)
            raise
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        if not path:
            raise ValueError("data: an empty path")
        name = default_name(path) if name is None else name
        _check_name(name)
        if not stat.S_ISREG(os.stat(path).st_mode):  # FileNotFoundError when missing
            raise ValueError(f"{path}: not a regular file (a dataset is uploaded from a file)")
        return Source(path, path), name
    raise TypeError("data: expected the path of a CSV file or a pandas DataFrame, not "
                    f"{type(data).__name__}")


def _check_name(name: str) -> None:
    if not is_name(name):
        raise ValueError(f"name {name!r}: a dataset name is 1 to 128 characters of A-Z a-z 0-9 "
                         ". _ -, not starting with '.'")


def prepare_request(source: Source, name: str) -> training_service_pb2.PrepareDatasetUploadRequest:
    return training_service_pb2.PrepareDatasetUploadRequest(
        name=name, size_bytes=source.size, sha256=source.sha256, kind=dataset_pb2.Dataset.CSV,
        file_name=source.file_name)


def upload_requests(file: training_service_pb2.PrepareDatasetUploadRequest, offset: int,
                    f: IO[bytes], failure: List[BaseException],
                    sent: List[int]) -> Iterator[training_service_pb2.UploadDatasetRequest]:
    """The UploadDataset stream: the header (the prepared file and `offset`),
    then the bytes of `f` from `offset` to the declared size in chunks of
    CHUNK_BYTES; sent[0] counts the bytes handed over. A read error, or a file
    shorter than declared, is appended to `failure` before it ends the stream
    (gRPC then cancels the call), so that the caller raises it."""
    header = training_service_pb2.UploadDatasetRequest.Header(offset=offset)
    header.file.CopyFrom(file)
    yield training_service_pb2.UploadDatasetRequest(header=header)
    position = offset
    while position < file.size_bytes:
        try:
            piece = f.read(min(CHUNK_BYTES, file.size_bytes - position))
            if not piece:
                raise FailedPreconditionError(
                    f"{file.file_name}: the file changed while it was sent (it ends at "
                    f"{position} bytes, not at the {file.size_bytes} hashed); traind keeps what "
                    "it received: upload it again")
        except BaseException as e:
            failure.append(e)
            raise
        position += len(piece)
        sent[0] += len(piece)
        yield training_service_pb2.UploadDatasetRequest(data=piece)


def upload(prepare: Callable[[training_service_pb2.PrepareDatasetUploadRequest],
                             training_service_pb2.PrepareDatasetUploadResponse],
           send: Callable[[Iterator[training_service_pb2.UploadDatasetRequest]],
                          dataset_pb2.Dataset],
           source: Source, name: str, retries: int = UPLOAD_RETRIES,
           before_retry: Optional[Callable[[], None]] = None) -> Tuple[dataset_pb2.Dataset, int]:
    """Uploads `source` as dataset `name`: (the dataset, bytes sent).

    prepare: PrepareDatasetUpload; send: UploadDataset with the request
    stream (both raise TraindError). Nothing is sent when traind holds the
    bytes already. A stream that breaks (UnavailableError, AbortedError) is
    followed, at most `retries` times, by a new preparation and the bytes from
    the offset it returns (before_retry is called first)."""
    file = prepare_request(source, name)
    sent = [0]
    attempt = 0
    while True:
        prepared = prepare(file)
        if prepared.HasField("dataset"):
            return prepared.dataset, sent[0]
        offset = int(prepared.offset)
        if offset < 0 or offset > source.size:
            raise InternalError(f"traind holds {offset} bytes of {source.file_name}, which has "
                                f"{source.size}")
        failure: List[BaseException] = []
        with open(source.path, "rb") as f:
            f.seek(offset)
            try:
                return send(upload_requests(file, offset, f, failure, sent)), sent[0]
            except TraindError as e:
                if failure:
                    raise failure[0] from None  # reading the file failed
                if attempt >= retries or not isinstance(e, (UnavailableError, AbortedError)):
                    raise
        attempt += 1
        if before_retry is not None:
            before_retry()


class Dataset:
    """A dataset stored by traind: `name`, `version`, `sha256` (its
    identity), `size_bytes`, `owner`, `file_name`, `create_time`; `rows`,
    `profile` (a pandas DataFrame, one row per column) and `job_ids` (the
    jobs that named it, newest first). `data` is the dataset as a dict,
    `message` the protobuf message.

    An upload's Dataset also says what the upload did: `uploaded_bytes` (the
    bytes this call sent; 0 when traind had them) and `already_stored`.
    One from datasets() carries no profile or job ids; reading them fetches
    the dataset (GetDataset)."""

    def __init__(self, client: "Client", message: dataset_pb2.Dataset, complete: bool = False,
                 uploaded_bytes: Optional[int] = None):
        self._client = client
        self._message = message
        self._complete = complete
        self._data: Optional[Dict[str, Any]] = None
        self.uploaded_bytes = uploaded_bytes

    @property
    def name(self) -> str:
        return self._message.name

    @property
    def version(self) -> int:
        return int(self._message.version)

    @property
    def sha256(self) -> str:
        return self._message.sha256

    @property
    def size_bytes(self) -> int:
        return int(self._message.size_bytes)

    @property
    def owner(self) -> str:
        return self._message.owner

    @property
    def file_name(self) -> str:
        return self._message.file_name

    @property
    def kind(self) -> str:
        return dataset_pb2.Dataset.Kind.Name(self._message.kind)

    @property
    def create_time(self) -> datetime.datetime:
        return self._message.create_time.ToDatetime(tzinfo=datetime.timezone.utc)

    @property
    def ref(self) -> str:
        """"name:version", as a spec or dataset() names this version."""
        return f"{self.name}:{self.version}"

    @property
    def digest_ref(self) -> str:
        """"sha256:<hex>": these bytes, whatever their name."""
        return f"sha256:{self.sha256}"

    @property
    def already_stored(self) -> Optional[bool]:
        """An upload's: True when traind held the bytes and nothing was sent;
        None for a dataset that was not uploaded by this call."""
        return None if self.uploaded_bytes is None else self.uploaded_bytes == 0

    @property
    def message(self) -> dataset_pb2.Dataset:
        return self._message

    @property
    def data(self) -> Dict[str, Any]:
        if self._data is None:
            self._data = to_dict(self._message)
        return self._data

    def _profiled(self) -> dataset_pb2.Dataset:
        if not self._message.HasField("profile"):
            self.refresh()
        return self._message

    @property
    def rows(self) -> int:
        """Data rows (the header not counted)."""
        return int(self._profiled().profile.rows)

    def profile_rows(self) -> List[Dict[str, Any]]:
        """The profile as plain dicts, one per column (see `profile`)."""
        self._profiled()
        return _frames.profile_rows(self.data.get("profile", {}))

    @property
    def profile(self):
        """The profile traind took at upload, as a pandas DataFrame indexed by
        column name, in file order: kind ("NUMERIC", "CATEGORICAL", "EMPTY"),
        missing, distinct, distinct_capped (more distinct values than traind
        counts exactly), min, max, mean (NaN unless NUMERIC)."""
        self._profiled()
        return _frames.profile_frame(self.data.get("profile", {}))

    def value_counts(self, column: str) -> Dict[str, int]:
        """Each value of `column` and its count, most frequent first, for a
        column with few distinct values (a candidate label); else empty.
        KeyError for a column the file does not have."""
        for c in self._profiled().profile.columns:
            if c.name == column:
                return {vc.value: int(vc.count) for vc in c.value_counts}
        raise KeyError(column)

    @property
    def job_ids(self) -> List[str]:
        """The jobs that named this dataset's bytes, newest first (fetched)."""
        if not self._complete:
            self.refresh()
        return list(self._message.job_ids)

    def refresh(self) -> "Dataset":
        """Fetches this version again (GetDataset); returns self."""
        self._message = self._client._get_dataset_message(self.ref, self.owner)
        self._complete = True
        self._data = None
        return self

    def download(self, path: Optional[PathLike] = None) -> Union[bytes, str]:
        """The dataset's bytes, SHA-256 checked, or with `path` written to that
        file (see Client.download_dataset)."""
        return self._client.download_dataset(self, path)

    def delete(self) -> List["Dataset"]:
        """Deletes this version (see Client.delete_dataset)."""
        return self._client.delete_dataset(self)

    def __repr__(self) -> str:
        return (f"<traind.Dataset {self.ref} sha256:{self.sha256[:12]} {self.size_bytes} bytes "
                f"owner={self.owner}>")
