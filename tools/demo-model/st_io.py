"""Minimal safetensors reader/writer (json + numpy), no third-party package needed.

Format: u64 little-endian header length, JSON header {name: {dtype, shape, data_offsets}},
then the raw little-endian tensor bytes. Tensors are written sorted by name, 8-byte aligned
header (padded with spaces) like the reference implementation.
"""
import json
import struct

import numpy as np

_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
    "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}
_NAMES = {np.dtype(v).str: k for k, v in _DTYPES.items()}


def load(path):
    """Returns (dict name -> numpy array, metadata dict or {})."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        if info["dtype"] == "BF16":
            raw = np.frombuffer(data[base + begin:base + end], dtype="<u2").astype(np.uint32) << 16
            arr = raw.view(np.float32)
        else:
            arr = np.frombuffer(data[base + begin:base + end], dtype=np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<"))
        out[name] = arr.reshape(info["shape"]).copy()
    return out, meta


def save(path, tensors, metadata=None):
    """tensors: dict name -> numpy array (or torch tensor). Writes atomically-ish (tmp + rename)."""
    import os
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        arr = tensors[name]
        if hasattr(arr, "detach"):
            arr = arr.detach().cpu().numpy()
        arr = np.ascontiguousarray(arr)
        le = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
        blob = le.tobytes()
        header[name] = {"dtype": _NAMES[np.dtype(arr.dtype).newbyteorder("<").str],
                        "shape": list(arr.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
