"""A hand-written safetensors writer and reader (struct + json, no `safetensors` package).

The writer lays files out exactly as zeroshard's C++ writer does (see
Note [Safetensors writer order] in checkpoint/safetensors.h), so the two give
byte-identical files for the same tensors:

  - bytes [0, 8): N, the header size, little-endian uint64;
  - the header: compact JSON (no spaces), `__metadata__` first with its keys sorted
    (omitted when empty), then the entries in the caller's order, each as
    {"dtype", "shape", "data_offsets"} in that key order; padded with spaces to a
    multiple of 8 bytes;
  - the data section: each tensor's elements, row-major, little-endian, back to back
    in the same order.

`layout="package"` instead imitates the Python `safetensors` package: data sorted by
dtype size (largest first), then by name; and `header_order` lets a caller list the
header keys in another order than the data, which a reader must accept.

Used by gpt_golden.py and make_reference_files.py; depends on torch only for the
tensors it is given.
"""

import json
import struct

import torch

# torch dtype -> (safetensors name, an integer dtype of the same size to take raw bits from)
_DTYPES = {
    torch.float32: ("F32", torch.int32),
    torch.bfloat16: ("BF16", torch.int16),
    torch.float16: ("F16", torch.int16),
    torch.int32: ("I32", torch.int32),
    torch.int64: ("I64", torch.int64),
}
_FROM_NAME = {name: dt for dt, (name, _) in _DTYPES.items()}


def tensor_bytes(t):
    """The raw little-endian bytes of `t`'s elements in row-major order."""
    if t.dtype not in _DTYPES:
        raise ValueError(f"unsupported dtype {t.dtype}")
    raw = t.detach().cpu().contiguous().view(_DTYPES[t.dtype][1]).numpy()
    return raw.astype(raw.dtype.newbyteorder("<"), copy=False).tobytes()


def serialize(entries, metadata=None, layout="caller", header_order=None, compact=True,
              ensure_ascii=False, pad=True):
    """The bytes of a safetensors file.

    entries: list of (name, tensor) pairs. metadata: dict of str -> str.
    layout: "caller" (data in the given order) or "package" (sorted by dtype size, then name).
    header_order: names in the order the header lists them (default: the data order).
    """
    names = [n for n, _ in entries]
    if len(set(names)) != len(names):
        raise ValueError("duplicate names")
    tensors = dict(entries)
    if layout == "package":
        order = sorted(names, key=lambda n: (-tensors[n].element_size(), n))
    elif layout == "caller":
        order = names
    else:
        raise ValueError(layout)

    offsets, data, pos = {}, [], 0
    for n in order:
        b = tensor_bytes(tensors[n])
        offsets[n] = (pos, pos + len(b))
        data.append(b)
        pos += len(b)

    header = {}
    if metadata:
        header["__metadata__"] = {k: metadata[k] for k in sorted(metadata)}
    for n in (header_order or order):
        t = tensors[n]
        header[n] = {"dtype": _DTYPES[t.dtype][0], "shape": list(t.shape),
                     "data_offsets": list(offsets[n])}
    text = json.dumps(header, separators=(",", ":") if compact else (", ", ": "),
                      ensure_ascii=ensure_ascii).encode("utf-8")
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(data)


def write(path, entries, metadata=None, **kwargs):
    with open(path, "wb") as f:
        f.write(serialize(entries, metadata, **kwargs))


def read(path):
    """(dict name -> tensor, metadata) with the same checks as the C++ reader's main ones."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    metadata = header.pop("__metadata__", {})
    spans = sorted((tuple(v["data_offsets"]), k) for k, v in header.items())
    pos = 0
    for (begin, end), k in spans:
        if begin != pos:
            raise ValueError(f"{path}: entry {k} begins at {begin}, expected {pos}")
        pos = end
    if pos != len(data):
        raise ValueError(f"{path}: entries cover {pos} of {len(data)} data bytes")
    out = {}
    for k, v in header.items():
        dt = _FROM_NAME[v["dtype"]]
        begin, end = v["data_offsets"]
        raw = torch.frombuffer(bytearray(data[begin:end]), dtype=_DTYPES[dt][1]) \
            if end > begin else torch.empty(0, dtype=_DTYPES[dt][1])
        out[k] = raw.view(dt).reshape(v["shape"])
    return out, metadata
