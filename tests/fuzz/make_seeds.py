#!/usr/bin/python3
"""make_seeds.py - writes the seed corpora of the fuzz targets added for
bounded input (job, tar, worker_requests, coordinator_msgs) under corpus/, so
the seeds are reviewable and reproducible. Standard library only; the
protobuf bytes are encoded by hand from stoker.proto's field numbers.
Run from anywhere: ./tests/fuzz/make_seeds.py (overwrites seed-* files,
leaves inputs added by fuzzing or from crashes alone)."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def field(num, wt, payload):
    key = varint((num << 3) | wt)
    if wt == 0:
        return key + varint(payload)
    if wt == 1:
        return key + struct.pack("<Q", payload)
    if wt == 2:
        return key + varint(len(payload)) + payload
    raise ValueError(wt)


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# ---- job ------------------------------------------------------------------
JOB = b"""name = demo
source = synthetic
num_samples = 1024
pipeline = raw
height = 32
width = 32
batch_size = 8
world_size = 2
epochs = 2
seed = 7
mean = 0.5,0.5,0.5
"""
write("job", "basic", JOB)
write("job", "comments", b"# a job\n\n  batch_size=4   # four\nname=x\n")
write("job", "tar", b"source = tar\ndataset = shards/train\npipeline = train\n"
      b"num_classes = 10\nscale_min = 0.2\nflip_p = 0\n")
write("job", "bad-key", b"nope = 1\n")
write("job", "bad-values", b"batch_size = -1\nheight = 99999999999\nmean = 1,2\n")
write("job", "long-eq", b"name = " + b"x" * 1100 + b"=y\n")
write("job", "no-newline", b"epochs = 3")
write("job", "floats", b"brightness = 1e30\ncontrast = nan\nsaturation = -0\n")
write("job", "empty", b"")

# ---- worker_requests: frames of [u16 little-endian length][BatchRequest] --
HASH = 0x0123456789ABCDEF


def req(h=HASH, epoch=0, rank=0, step=0, extra=b"", offset=None):
    off = b"" if offset is None else field(5, 0, offset)  # sample_offset (elastic)
    return (field(1, 1, h) + field(2, 0, epoch) + field(3, 0, rank) + field(4, 0, step)
            + off + extra)


def frames(*msgs):
    return b"".join(struct.pack("<H", len(m)) + m for m in msgs)


write("worker_requests", "valid", frames(req(), req(step=15, rank=3, epoch=1)))
write("worker_requests", "wrong-hash", frames(req(h=1)))
write("worker_requests", "out-of-range", frames(req(step=16), req(rank=4)))
write("worker_requests", "unknown-fields", frames(req(extra=b"\x78\x01" * 400)))
write("worker_requests", "over-limit", frames(req(extra=b"\x78\x01" * 520)))
write("worker_requests", "garbage", frames(b"\x0f\xff\xff\xff\x13\x00\x42"))
write("worker_requests", "many", frames(*[req(step=i % 16) for i in range(70)]))
write("worker_requests", "empty-msg", frames(b"", b""))
# the fuzz job: 128 samples, W*B = 8, drop_last: offset 7 leaves 15 steps
write("worker_requests", "sample-offset", frames(req(step=14, rank=3, offset=7)))
write("worker_requests", "offset-past-step", frames(req(step=15, offset=7)))
write("worker_requests", "offset-too-big", frames(req(offset=8)))

# ---- coordinator_msgs: [method byte][request] -----------------------------
# 0 WorkerMessage, 1 JoinRequest, 2 WatchRequest, 3 FinishRequest, 4 Status
info = field(1, 2, b"host:123:456") + field(2, 2, b"127.0.0.1:5555") + field(3, 0, 4)
hello = field(1, 2, info) + field(2, 0, 1) + field(3, 1, HASH) + field(4, 0, 1024)
write("coordinator_msgs", "hello", b"\x00" + field(1, 2, hello))
# a hello that takes a stream ticket, its WorkerInfo carrying one (ignored
# in a hello: only the coordinator mints them)
write("coordinator_msgs", "hello-ticket",
      b"\x00" + field(1, 2, field(1, 2, info + field(4, 2, b"f" * 64)) + field(2, 0, 1) +
                   field(8, 0, 1)))
write("coordinator_msgs", "hello-v2", b"\x00" + field(1, 2, field(2, 0, 2)))
write("coordinator_msgs", "hello-long-id",
      b"\x00" + field(1, 2, field(1, 2, field(1, 2, b"i" * 300)) + field(2, 0, 1)))
stats = field(1, 0, 10) + field(2, 0, 1 << 30) + field(6, 1, 0x3FE0000000000000)
write("coordinator_msgs", "heartbeat", b"\x00" + field(2, 2, field(1, 2, stats)))
write("coordinator_msgs", "join",
      b"\x01" + field(1, 0, 1) + field(2, 0, 2) + field(3, 2, b"client") + field(4, 0, 1))
write("coordinator_msgs", "watch", b"\x02" + field(1, 0, 0) + field(2, 0, 3))
write("coordinator_msgs", "finish",
      b"\x03" + field(1, 0, 0) + field(3, 0, 1) + field(4, 2, b"loss is nan"))
write("coordinator_msgs", "status", b"\x04")
write("coordinator_msgs", "unknown-flood", b"\x01" + b"\x78\x01" * 2000)
write("coordinator_msgs", "nested-unknown",
      b"\x00" + field(1, 2, field(1, 2, b"\x78\x01" * 50) + field(99, 2, b"z" * 100)))


# ---- tar: [mode byte][shard bytes | cache body] ---------------------------
def ustar(name, size, typ=b"0", prefix=b""):
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:107] = b"0000644"
    h[124:135] = b"%011o" % size
    h[136:147] = b"00000000000"
    h[156:157] = typ
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    h[345:345 + len(prefix)] = prefix
    h[148:156] = b" " * 8
    h[148:155] = b"%06o\0" % sum(h)
    return bytes(h)


def member(name, data, typ=b"0", prefix=b""):
    pad = (-len(data)) % 512
    return ustar(name, len(data), typ, prefix) + data + b"\0" * pad


JPG = b"\xff\xd8\xff\xd9"
shard = member(b"a/k0.jpg", JPG) + member(b"a/k0.cls", b"3\n") + \
    member(b"k1.jpeg", JPG) + member(b"k1.cls", b"1") + b"\0" * 1024
write("tar", "valid", b"\x00" + shard)
write("tar", "cut", b"\x00" + shard[:1300])
write("tar", "longname", b"\x00" + member(b"././@LongLink", b"x" * 200 + b".jpg", b"L")
      + member(b"short", JPG) + member(b"x" * 100, b"2", b"0") + b"\0" * 1024)
write("tar", "prefix", b"\x00" + member(b"k.jpg", JPG, prefix=b"dir/sub")
      + member(b"k.cls", b"0", prefix=b"dir/sub"))
big = bytearray(ustar(b"k.jpg", 0))
big[124:136] = b"\x80" + b"\xff" * 11  # base-256 size, huge
write("tar", "base256", b"\x00" + bytes(big) + b"\0" * 512)
write("tar", "pax", b"\x00" + member(b"pax", b"30 path=" + b"p" * 20 + b"\n", b"x")
      + member(b"k.jpg", JPG) + member(b"k.cls", b"-5"))
write("tar", "cache-valid", b"\x01samples 2\n0 512 4 0 k0\n0 2560 4 1 k1\n")
write("tar", "cache-bad-shard", b"\x01samples 1\n7 512 4 0 k0\n")
write("tar", "cache-past-end", b"\x01samples 1\n0 5000 99999 0 k0\n")
write("tar", "cache-huge-count", b"\x01samples 99999999999\n0 0 1 0 k\n")
write("tar", "cache-negative", b"\x01samples 1\n0 512 4 -1 k0\n")
write("tar", "cache-long-line", b"\x01samples 1\n0 512 4 0 " + b"k" * 9000 + b"\n")
