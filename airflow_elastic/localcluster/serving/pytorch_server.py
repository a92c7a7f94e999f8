"""A KServe model server for a TorchScript model, written with the upstream ``kserve`` SDK (v0.21).

Runs as a plain file under the serving Python (``.venv-serving/bin/python`` here, its own image on a cluster:
``docker/predictor/Dockerfile``); it imports only ``kserve``, ``torch`` and the standard library. The first ``*.pt``
file in ``--model_dir`` is loaded with ``torch.jit.load`` before the server starts, so the readiness endpoints
answer only once the model is loaded, and a model that does not load ends the process with exit code 1 and the
reason in the termination log. Protocols: v1 (``POST /v1/models/<name>:predict``, ``{"instances": [...]}`` →
``{"predictions": [...]}``) and v2 (``POST /v2/models/<name>/infer``, one FP32 input tensor → one output tensor).

Two things only the local cluster needs, both no-ops in a real pod: a mount path is read from
``LOCALCLUSTER_MOUNT_<PATH>`` when set (the local cluster has no mount namespace), and ``AIRFLOW_ELASTIC_BIND_HOST``
(the pod IP the local runtime passes through the downward API) replaces the SDK's fixed ``0.0.0.0``, since every
local pod shares the host's ports.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import uuid
from pathlib import Path

import kserve
import torch
from kserve import model_server
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse
from kserve.protocol.rest.server import RESTServer

BIND_HOST_ENV = "AIRFLOW_ELASTIC_BIND_HOST"


def local_path(path: str) -> Path:
    """Where a mounted ``path`` is for this process (``LOCALCLUSTER_MOUNT_<PATH>`` on the local cluster)."""
    name = "LOCALCLUSTER_MOUNT_" + (re.sub(r"[^A-Za-z0-9]", "_", path.strip("/")).upper() or "ROOT")
    return Path(os.environ.get(name, path))


class ModelLoadError(RuntimeError):
    """The model directory holds no loadable TorchScript file."""


class TorchScriptModel(kserve.Model):
    """Serves ``torch.jit.load(<model_dir>/<first *.pt>)`` on CPU."""

    def __init__(self, name: str, model_dir: str):
        super().__init__(name)
        self.model_dir = model_dir
        self.module: torch.jit.ScriptModule | None = None

    def load(self) -> bool:
        directory = local_path(self.model_dir)
        files = sorted(directory.glob("*.pt")) if directory.is_dir() else []
        if not files:
            raise ModelLoadError(f"no TorchScript file (*.pt) in {self.model_dir}")
        try:
            self.module = torch.jit.load(str(files[0]), map_location="cpu")
        except Exception as err:  # torch raises RuntimeError, ValueError, ... for a bad file
            raise ModelLoadError(f"cannot load {files[0].name} from {self.model_dir}: {err}") from err
        self.module.eval()
        self.ready = True
        return self.ready

    def _forward(self, batch: torch.Tensor) -> torch.Tensor:
        assert self.module is not None
        with torch.no_grad():
            return self.module(batch)

    async def predict(self, payload, headers=None, response_headers=None):
        if isinstance(payload, InferRequest):  # v2: the first input tensor, as FP32
            outputs = self._forward(torch.as_tensor(payload.inputs[0].as_numpy(), dtype=torch.float32))
            tensor = InferOutput(name="output-0", shape=list(outputs.shape), datatype="FP32")
            tensor.set_data_from_numpy(outputs.numpy(), binary_data=False)
            return InferResponse(payload.id or str(uuid.uuid4()), self.name, [tensor])
        if isinstance(payload, bytes | bytearray):  # sent without a JSON content type
            payload = json.loads(payload)
        outputs = self._forward(torch.tensor(payload["instances"], dtype=torch.float32))
        return {"predictions": outputs.tolist()}


class _BoundRESTServer(RESTServer):
    """The SDK's REST server listening on ``AIRFLOW_ELASTIC_BIND_HOST`` instead of 0.0.0.0 when that is set."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.config.host = os.environ.get(BIND_HOST_ENV) or self.config.host


def _termination_log(message: str) -> None:
    path = Path(os.environ.get("LOCALCLUSTER_TERMINATION_LOG", "/dev/termination-log"))
    with contextlib.suppress(OSError):  # no termination log outside a pod
        path.write_text(message)


def main() -> int:
    parser = argparse.ArgumentParser(parents=[model_server.parser])
    parser.add_argument("--model_dir", required=True, help="directory holding the TorchScript model (*.pt)")
    args, _ = parser.parse_known_args()
    model = TorchScriptModel(args.model_name, args.model_dir)
    try:
        model.load()
    except ModelLoadError as err:
        message = f"model {args.model_name!r} failed to load: {err}"
        print(message, file=sys.stderr, flush=True)
        _termination_log(message)
        return 1
    model_server.RESTServer = _BoundRESTServer  # ModelServer.start builds its REST server from this name
    kserve.ModelServer(http_port=args.http_port, enable_grpc=False).start([model])
    return 0


if __name__ == "__main__":
    sys.exit(main())
