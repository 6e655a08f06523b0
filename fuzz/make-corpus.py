#!/usr/bin/env python3
"""Seeds fuzz/corpus/<target>/ from the conformance vectors (tests/vectors/*.vec and
tests/vectors/gate/*.vec): input, event and reply frames for frame_decode; for
snapshot_restore each snapshot (`[n: u16 LE]` and its bytes) followed by the vector's
input frames after it, and again by the ones before it (retries of recorded requests),
and a gate snapshot of each gate vector's resources; each vector's input frames
(length-prefixed, after a config byte) for input_sequence; and for c_abi, after a config
byte, the same snapshots and frames (and the frames alone after an empty snapshot).
Run from anywhere: python3 fuzz/make-corpus.py. Idempotent (files are named by hash).
With --check it writes nothing and fails, naming them, when seeds of the vectors are
missing from the committed corpus (a vector added without reseeding: scripts/fuzz.sh
would start without its frames and snapshots)."""
import glob, hashlib, os, sys

root = os.path.dirname(os.path.abspath(__file__))
vectors = sorted(glob.glob(os.path.join(root, "..", "tests", "vectors", "*.vec")))
gate_vectors = sorted(glob.glob(os.path.join(root, "..", "tests", "vectors", "gate", "*.vec")))
check = sys.argv[1:] == ["--check"]
if sys.argv[1:] and not check:
    sys.exit("usage: make-corpus.py [--check]")
missing = []

def put(target, data):
    d = os.path.join(root, "corpus", target)
    path = os.path.join(d, hashlib.sha1(data).hexdigest()[:16])
    if check:
        try:
            with open(path, "rb") as f:
                if f.read() == data:
                    return
        except FileNotFoundError:
            pass
        missing.append(os.path.relpath(path, os.path.join(root, "..")))
        return
    os.makedirs(d, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)

def prefixed(frames):
    return b"".join(bytes([len(f)]) + f for f in frames)

def with_len(snapshot):
    return len(snapshot).to_bytes(2, "little") + snapshot

def varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)

for path in vectors:
    frames = []
    snapshots = []  # (snapshot, how many input frames came before it)
    for line in open(path):
        word, _, rest = line.strip().partition(" ")
        if word in ("in", "out", "reply"):
            data = bytes.fromhex(rest)
            put("frame_decode", data)
            if word == "in" and len(data) < 256:
                frames.append(data)
        elif word == "snapshot":
            snapshots.append((bytes.fromhex(rest), len(frames)))
    for snapshot, k in snapshots:
        after, before = frames[k:k + 32], frames[max(0, k - 8):k]
        put("snapshot_restore", with_len(snapshot) + prefixed(after))
        put("snapshot_restore", with_len(snapshot) + prefixed(before))
        # c_abi: 0xff is 4 sessions, 4 locks, 8 claims, placed in caller memory
        put("c_abi", bytes([0xFF]) + with_len(snapshot) + prefixed(after))
    # config byte 0x7f: 4 sessions, 4 locks, 8 claims, no lock-delay; 0xbf: 4 claims and
    # lock-delay 1; 0xff: 8 claims and lock-delay 3 (bit 6 is both a claims bit and a
    # lock-delay bit): the same frames, other answers
    for cfg in (0x7F, 0xBF, 0xFF):
        put("input_sequence", bytes([cfg]) + prefixed(frames))
    # c_abi: its first byte 0x7f is 4 sessions, 4 locks, 8 claims on the heap; an empty
    # snapshot (refused), then the frames, as input_sequence has them, to a fresh service
    put("c_abi", bytes([0x7F]) + with_len(b"") + prefixed(frames))

# A gate snapshot of each gate vector's resources: "FLGT", version 1, the count, then
# (name, highest) per resource as postcard writes them — the bytes of the vector's own
# `in` frames — at the highest each reached (`highest` lines), in first-seen order.
for path in gate_vectors:
    highest = {}
    for line in open(path):
        word, _, rest = line.strip().partition(" ")
        if word == "highest":
            name, token = rest.split(" ")
            if int(token) > 0:
                highest[bytes.fromhex(name)] = int(token)
    if not highest or len(highest) > 8:
        continue
    snapshot = b"FLGT" + varint(1) + varint(len(highest)) + b"".join(
        varint(len(n)) + n + varint(t) for n, t in highest.items())
    put("snapshot_restore", with_len(snapshot))
    put("c_abi", bytes([0x7F]) + with_len(snapshot))

if missing:
    print(f"fuzz corpus: {len(missing)} seeds of tests/vectors missing "
          f"(run python3 fuzz/make-corpus.py and commit fuzz/corpus):", file=sys.stderr)
    for m in missing:
        print(f"  {m}", file=sys.stderr)
    sys.exit(1)
if check:
    print(f"fuzz corpus: every seed of {len(vectors) + len(gate_vectors)} vector files is there")
