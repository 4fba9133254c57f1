"""Smoke test of a pushed version on a running TF Serving (gRPC): wait until ModelService
reports the version AVAILABLE, send Predict for a few eval rows, compare with the
predictions of the same SavedModel loaded here."""
from __future__ import annotations

import time
from typing import List

import numpy as np

from components.contracts import names
from components.contracts.errors import GpupipeError

RPC_TIMEOUT = 10.0
POLL_SECONDS = 0.5


def predict_request(model_name: str, examples: List[bytes], version: int | None = None):
    """A PredictRequest on the serialized-tf.Example signature."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = names.EXAMPLES_SIGNATURE
    if version is not None:
        request.model_spec.version.value = version
    request.inputs["examples"].CopyFrom(tf.make_tensor_proto(examples, dtype=tf.string))
    return request


def wait_until_available(channel, model_name: str, version: int, timeout: float) -> None:
    import grpc
    from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

    stub = model_service_pb2_grpc.ModelServiceStub(channel)
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = model_name
    request.model_spec.version.value = version
    available = get_model_status_pb2.ModelVersionStatus.AVAILABLE
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            response = stub.GetModelStatus(request, timeout=RPC_TIMEOUT)
            states = {s.version: s.state for s in response.model_version_status}
            if states.get(version) == available:
                return
            last = f"state {get_model_status_pb2.ModelVersionStatus.State.Name(states.get(version, 0))}"
        except grpc.RpcError as err:
            last = f"{err.code().name}: {err.details()}"
        time.sleep(POLL_SECONDS)
    raise GpupipeError(f"serving.endpoint: version {version} of {model_name} not AVAILABLE within {timeout:.0f}s "
                       f"({last}); check TF Serving's logs and its --model_config_file")


def smoke_test(endpoint: str, model_name: str, version: int, model_dir: str, examples: List[bytes],
               timeout: float, atol: float = 1e-4) -> float:
    """Returns the largest absolute difference between served and local probabilities;
    raises GpupipeError when the version does not come up or the predictions differ."""
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    local_outputs = tf.saved_model.load(model_dir).signatures[names.EXAMPLES_SIGNATURE](examples=tf.constant(examples))
    key = names.PROBABILITIES if names.PROBABILITIES in local_outputs else "predictions"  # classifier / regressor
    local = local_outputs[key].numpy()
    with grpc.insecure_channel(endpoint) as channel:
        wait_until_available(channel, model_name, version, timeout)
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            response = stub.Predict(predict_request(model_name, examples, version), timeout=RPC_TIMEOUT)
        except grpc.RpcError as err:
            raise GpupipeError(f"serving.endpoint: Predict on {endpoint} failed ({err.code().name}: "
                               f"{err.details()})") from None
    if key not in response.outputs:
        raise GpupipeError(f"serving.endpoint: {endpoint} returned no '{key}' output; is {model_name} version "
                           f"{version} the pushed model?")
    served = tf.make_ndarray(response.outputs[key])
    if served.shape != local.shape:
        raise GpupipeError(f"serving.endpoint: {endpoint} returned {key} of shape {served.shape}, "
                           f"expected {local.shape}; is {model_name} version {version} the pushed model?")
    gap = float(np.max(np.abs(served - local)))
    if gap > atol:
        raise GpupipeError(f"serving.endpoint: {endpoint} predictions differ from the pushed model's by up to "
                           f"{gap:.6f} (tolerance {atol}); stable stays where it was")
    return gap
