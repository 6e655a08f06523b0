#!/usr/bin/env python3
"""Seeds fuzz/corpus/<target>/ from the conformance vectors (tests/vectors/*.vec):
input, event and reply frames for frame_decode, snapshots for snapshot_restore, and each
vector's input frames (length-prefixed, after a config byte) for input_sequence.
Run from anywhere: python3 fuzz/make-corpus.py. Idempotent (files are named by hash)."""
import glob, hashlib, os

root = os.path.dirname(os.path.abspath(__file__))
vectors = sorted(glob.glob(os.path.join(root, "..", "tests", "vectors", "*.vec")))

def put(target, data):
    d = os.path.join(root, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
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
    # config byte 0x7f: 4 sessions, 4 locks, 8 claims, no lock-delay
    seq = bytes([0x7F]) + b"".join(bytes([len(f)]) + f for f in frames)
    put("input_sequence", seq)
