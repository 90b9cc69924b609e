"""Python client of traind, the training daemon.

    import traind
    client = traind.Client()                      # trainctl's address rules
    job = client.submit("examples/iris-cv.yaml", set={"training.epochs": 20})
    for event in job.watch():                     # resumes after a dropped stream
        ...
    job.wait()
    result = job.result()                         # a dict; result.folds_frame() with pandas
    job.download("task-0/model.onnx", "m.onnx")   # fold 0's model, SHA-256 checked
    job.predict("new.csv").frame()                # scored by task 0's model, with pandas
    client.submit("spec.yaml", data=frame)        # a DataFrame, uploaded as a dataset

Errors are traind.TraindError subclasses carrying the canonical gRPC code
and traind's message. See docs/python-client.md.
"""

from traind._address import default_address
from traind._artifacts import Predictions
from traind._client import Client, Devices, Job, Result
from traind._datasets import Dataset
from traind._errors import (AbortedError, AlreadyExistsError, CancelledError, DataLossError,
                            DeadlineExceededError, FailedPreconditionError, InternalError,
                            InvalidArgumentError, NotFoundError, OutOfRangeError,
                            PermissionDeniedError, ResourceExhaustedError, TraindError,
                            UnauthenticatedError, UnavailableError, UnimplementedError)

__version__ = "0.1.0"

__all__ = [
    "Client", "Job", "Result", "Devices", "Predictions", "Dataset", "default_address",
    "TraindError", "AbortedError", "AlreadyExistsError", "CancelledError", "DataLossError",
    "DeadlineExceededError", "FailedPreconditionError", "InternalError", "InvalidArgumentError",
    "NotFoundError", "OutOfRangeError", "PermissionDeniedError", "ResourceExhaustedError",
    "UnauthenticatedError", "UnavailableError", "UnimplementedError",
]
