"""protowire.py - a little protobuf wire format by hand, for tests and
benchmarks that talk to the daemons with stock grpcio without generated
classes (python3-protobuf not required): field encoders and a parser that
returns {field: [values]}. Standard library only.
"""
import struct


def varint(n):
    """The base-128 varint encoding of n (n >= 0)."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def f_varint(field, v):
    """Field `field` as a varint (wire type 0)."""
    return varint(field << 3) + varint(v)


def f_bytes(field, b):
    """Field `field` as length-delimited bytes (wire type 2); str is UTF-8."""
    if isinstance(b, str):
        b = b.encode()
    return varint(field << 3 | 2) + varint(len(b)) + b


def f_fixed64(field, v):
    """Field `field` as a little-endian fixed64 (wire type 1)."""
    return varint(field << 3 | 1) + struct.pack("<Q", v)


def read_varint(buf, i):
    """(value, next index) of the varint at buf[i]."""
    v, shift = 0, 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def parse(buf):
    """{field: [values]}: ints for varints and fixed, bytes for the rest."""
    out, i = {}, 0
    while i < len(buf):
        k, i = read_varint(buf, i)
        field, wt = k >> 3, k & 7
        if wt == 0:
            v, i = read_varint(buf, i)
        elif wt == 1:
            v, i = struct.unpack("<Q", buf[i:i + 8])[0], i + 8
        elif wt == 5:
            v, i = struct.unpack("<I", buf[i:i + 4])[0], i + 4
        else:
            n, i = read_varint(buf, i)
            v, i = bytes(buf[i:i + n]), i + n
        out.setdefault(field, []).append(v)
    return out
