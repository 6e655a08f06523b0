#!/usr/bin/env python3
"""Seeds fuzz/corpus/<target>/ from the conformance vectors (tests/vectors/*.vec):
input, event and reply frames for frame_decode, snapshots for snapshot_restore, each
vector's input frames (length-prefixed, after a config byte) for input_sequence, and the
same frames and the snapshots (after a config byte) for c_abi.
Run from anywhere: python3 fuzz/make-corpus.py. Idempotent (files are named by hash).
With --check it writes nothing and fails, naming them, when seeds of the vectors are
missing from the committed corpus (a vector added without reseeding: scripts/fuzz.sh
would start without its frames and snapshots)."""
import glob, hashlib, os, sys

root = os.path.dirname(os.path.abspath(__file__))
vectors = sorted(glob.glob(os.path.join(root, "..", "tests", "vectors", "*.vec")))
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

for path in vectors:
    frames = []
    for line in open(path):
        word, _, rest = line.strip().partition(" ")
        if word in ("in", "out", "reply"):
            data = bytes.fromhex(rest)
            put("frame_decode", data)
            if word == "in" and len(data) < 256:
                frames.append(data)
        elif word == "snapshot":
            put("snapshot_restore", bytes.fromhex(rest))
            # c_abi: the snapshot after its first byte, restored onto the heap and placed
            put("c_abi", bytes([0xFF]) + bytes.fromhex(rest))
    # config byte 0x7f: 4 sessions, 4 locks, 8 claims, no lock-delay; 0xbf: 4 claims and
    # lock-delay 1; 0xff: 8 claims and lock-delay 3 (bit 6 is both a claims bit and a
    # lock-delay bit): the same frames, other answers
    for cfg in (0x7F, 0xBF, 0xFF):
        put("input_sequence", bytes([cfg]) + b"".join(bytes([len(f)]) + f for f in frames))
    # c_abi: its first byte 0x7f is 4 sessions, 4 locks, 8 claims on the heap (0xff:
    # placed in caller memory); then the frames, as input_sequence has them
    put("c_abi", bytes([0x7F]) + b"".join(bytes([len(f)]) + f for f in frames))

if missing:
    print(f"fuzz corpus: {len(missing)} seeds of tests/vectors missing "
          f"(run python3 fuzz/make-corpus.py and commit fuzz/corpus):", file=sys.stderr)
    for m in missing:
        print(f"  {m}", file=sys.stderr)
    sys.exit(1)
if check:
    print(f"fuzz corpus: every seed of {len(vectors)} vector files is there")
