#!/usr/bin/env python3
"""Trains the text detector's classifier and measures it leave-one-set-out.

Python 3 standard library only; deterministic (fixed example order, no
random numbers), so the same corpus gives the same bytes.

The classifier scores the opening the rules read and found no refusal in
(`read_rules_only` in the crate; `tools/src/bin/text-openings.rs` prints it), so the
script first runs that example over every labelled text.

Labelled sets (each is one unit of leave-one-out):
  gpt4, llama2new, mistralinstruct  tests/corpus/xstest/*.csv, final_label
                                    2_full_refusal = 1, 1_full_compliance = 0,
                                    3_partial_refusal left out (as in
                                    tests/text/corpus.rs)
  adversarial                       the hand-written (text, bool) cases of
                                    tests/text/adversarial.rs
  table                             the hand-written (text, verdict) cases
                                    of tests/text/table.rs (Some = 1,
                                    None = 0)

For each set X the script trains without X (its threshold chosen by an
inner leave-one-out over the remaining sets), scores X with the rules plus
that classifier, and writes the weights to tests/corpus/classifier/
without_X.bin, which tests/text_holdout.rs loads to assert the same figures
in Rust. The shipped weights (src/text/classifier.bin) are trained on every
set, their threshold chosen by leave-one-out over all of them.

Usage: python3 tools/train_text_classifier.py [--check] [--debug]
  --check  train and print the table, write nothing.
  --debug  build text-openings in the dev profile (a slower detector, the
           same openings) instead of --release.
"""

import csv
import json
import math
import os
import re
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
XSTEST = ["gpt4", "llama2new", "mistralinstruct"]
SETS = XSTEST + ["adversarial", "table"]

# Must match src/text/classifier.rs (which reads the bucket count from the
# weights). 16384 rather than 8192: fewer hash collisions between the
# openings' words and pairs; held out, no set scored lower and llama2new
# and mistralinstruct scored higher (32768 cost mistralinstruct precision).
BUCKETS = 16384
MAX_WORDS = 96
MAGIC = b"RGTCLS01"

# Training.
EPOCHS = 8
RATE = 0.2
L2 = 1e-4


# ---------------------------------------------------------------------------
# Features (mirror of src/text/classifier.rs)
# ---------------------------------------------------------------------------

FNV_OFFSET = 0x811C9DC5
FNV_PRIME = 0x01000193


def fnv(h, data):
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFF
    return h


def normalise(opening):
    out = [" "]
    words = 0
    in_word = False

    def trim():
        while out[-1] == "'":
            out.pop()

    for c in opening:
        if "A" <= c <= "Z":
            m = c.lower()
        elif "a" <= c <= "z":
            m = c
        elif "0" <= c <= "9":
            m = "0"
        elif c in "'\u2019\u2018" and in_word:
            m = "'"
        else:
            m = None
        if m is not None:
            if not in_word:
                if words == MAX_WORDS:
                    break
                words += 1
                in_word = True
            out.append(m)
        elif in_word:
            trim()
            out.append(" ")
            in_word = False
    if in_word:
        trim()
        out.append(" ")
    return "".join(out)


H_U = fnv(FNV_OFFSET, b"u")
H_B = fnv(FNV_OFFSET, b"b")
H_P = [fnv(FNV_OFFSET, bytes([ord("p"), ord("0") + i])) for i in range(3)]


def feature_hashes(opening):
    joined = normalise(opening)
    words = [w.encode() for w in joined.split(" ") if w]
    out = []
    for i, w in enumerate(words):
        out.append(fnv(H_U, w))
        if i < 3:
            out.append(fnv(H_P[i], w))
        if i + 1 < len(words):
            out.append(fnv(fnv(fnv(H_B, w), b" "), words[i + 1]))
    return out


def buckets(opening):
    return [h & (BUCKETS - 1) for h in feature_hashes(opening)]


# ---------------------------------------------------------------------------
# Labelled sets
# ---------------------------------------------------------------------------

LABELS = {"2_full_refusal": 1, "1_full_compliance": 0}


def load_xstest(name):
    path = os.path.join(ROOT, "tests", "corpus", "xstest", f"xstest_v2_completions_{name}.csv")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 450, name
    return [(r["completion"], LABELS[r["final_label"]]) for r in rows if r["final_label"] in LABELS]


RUST_STRING = r'"((?:[^"\\]|\\.)*)"'
CASE = re.compile(r"\(\s*" + RUST_STRING + r"\s*,\s*(true|false)\s*\)", re.S)


def unescape_rust(s):
    s = re.sub(r"\\\n\s*", "", s)
    s = re.sub(r"\\u\{([0-9a-fA-F]+)\}", lambda m: chr(int(m.group(1), 16)), s)
    table = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'", "0": "\0"}
    return re.sub(r"\\(.)", lambda m: table[m.group(1)], s)


def load_adversarial():
    path = os.path.join(ROOT, "tests", "text", "adversarial.rs")
    with open(path, encoding="utf-8") as f:
        source = f.read()
    cases = [(unescape_rust(m.group(1)), int(m.group(2) == "true")) for m in CASE.finditer(source)]
    assert len(cases) >= 200, len(cases)
    return cases


TABLE_CASE = re.compile(r"\(\s*" + RUST_STRING + r"\s*,\s*(None|Some)\b", re.S)


def load_table():
    path = os.path.join(ROOT, "tests", "text", "table.rs")
    with open(path, encoding="utf-8") as f:
        source = f.read()
    source = source[source.index("const CASES") :]
    cases = [(unescape_rust(m.group(1)), int(m.group(2) == "Some")) for m in TABLE_CASE.finditer(source)]
    assert len(cases) >= 60, len(cases)
    return cases


def load_sets():
    sets = {name: load_xstest(name) for name in XSTEST}
    sets["adversarial"] = load_adversarial()
    sets["table"] = load_table()
    return sets


def read_openings(sets):
    """Runs the text-openings tool over every text, in one process."""
    texts = [t for name in SETS for (t, _) in sets[name]]
    lines = "".join(json.dumps({"text": t}) + "\n" for t in texts)
    profile = [] if "--debug" in sys.argv[1:] else ["--release"]
    out = subprocess.run(
        ["cargo", "run", "-q", *profile, "-p", "refusal-guard-tools", "--bin", "text-openings"],
        cwd=ROOT,
        input=lines.encode(),
        stdout=subprocess.PIPE,
        check=True,
    ).stdout.decode()
    rows = [json.loads(l) for l in out.splitlines()]
    assert len(rows) == len(texts)
    read = {}
    i = 0
    for name in SETS:
        read[name] = []
        for text, label in sets[name]:
            r = rows[i]
            i += 1
            read[name].append(
                {
                    "label": label,
                    "rules": r["rules"],
                    "opening": r["opening"],
                    "feats": buckets(r["opening"]) if r["opening"] is not None else None,
                }
            )
    return read


# ---------------------------------------------------------------------------
# Logistic regression
# ---------------------------------------------------------------------------


def train(examples):
    """examples: list of (bucket list, label). Sparse SGD with AdaGrad step
    sizes, classes weighted to balance, fixed order."""
    pos = sum(1 for _, y in examples if y)
    neg = len(examples) - pos
    wpos = len(examples) / (2.0 * max(pos, 1))
    wneg = len(examples) / (2.0 * max(neg, 1))
    w = [0.0] * BUCKETS
    g2 = [1e-8] * BUCKETS
    bias, gb2 = 0.0, 1e-8
    # Interleave deterministically: by a hash of the features, so the
    # order does not follow the file order.
    order = sorted(range(len(examples)), key=lambda i: (fnv(FNV_OFFSET, str(examples[i][0][:8]).encode()), i))
    for _ in range(EPOCHS):
        for i in order:
            feats, y = examples[i]
            z = bias + sum(w[f] for f in feats)
            p = 1.0 / (1.0 + math.exp(-max(min(z, 30.0), -30.0)))
            g = (p - y) * (wpos if y else wneg)
            for f in feats:
                gf = g + L2 * w[f]
                g2[f] += gf * gf
                w[f] -= RATE * gf / math.sqrt(g2[f])
            gb2 += g * g
            bias -= RATE * g / math.sqrt(gb2)
    return w, bias


def quantise(w, bias):
    top = max(abs(x) for x in w) or 1.0
    scale = top / 127.0
    q = [max(-127, min(127, round(x / scale))) for x in w]
    return q, scale, bias


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def score(model, feats):
    q, scale, bias = model
    # Same arithmetic as the crate: integer sum, then one f32 multiply-add.
    return f32(f32(bias) + f32(f32(sum(q[f] for f in feats)) * f32(scale)))


def examples_of(read, names):
    return [(r["feats"], r["label"]) for n in names for r in read[n] if r["feats"] is not None]


def fit(read, names):
    return quantise(*train(examples_of(read, names)))


def verdicts(model, threshold, rows):
    return [r["rules"] or (r["feats"] is not None and score(model, r["feats"]) >= threshold) for r in rows]


def figures(rows, hits):
    tp = sum(1 for r, h in zip(rows, hits) if h and r["label"])
    fp = sum(1 for r, h in zip(rows, hits) if h and not r["label"])
    fn = sum(1 for r, h in zip(rows, hits) if not h and r["label"])
    return tp, fp, fn


def choose_threshold(read, names):
    """Inner leave-one-out over `names`: each set is scored by a model
    trained on the others, and the threshold sits just above the highest
    score of any answer the rules let through, so that on sets it was not
    trained on the classifier added no false refusal. (Lower thresholds
    picked this way overfit: the inner sets have few answers that score
    high, and the held-out set then pays in precision.)"""
    worst = -1e9
    for held in names:
        model = fit(read, [n for n in names if n != held])
        for r in read[held]:
            if r["feats"] is not None and not r["rules"] and not r["label"]:
                worst = max(worst, score(model, r["feats"]))
    return f32(worst + 0.01)


def write_model(path, model, threshold):
    q, scale, bias = model
    data = MAGIC + struct.pack("<Ifff", BUCKETS, scale, bias, threshold) + bytes(x & 0xFF for x in q)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def main():
    check = "--check" in sys.argv[1:]
    sets = load_sets()
    read = read_openings(sets)
    print("| held-out set | rules alone: precision | recall | rules + classifier: precision | recall | tp | fp | fn |")
    print("|---|---|---|---|---|---|---|---|")
    for held in SETS:
        rest = [n for n in SETS if n != held]
        threshold = choose_threshold(read, rest)
        model = fit(read, rest)
        rows = read[held]
        rp, rf, rn = figures(rows, [r["rules"] for r in rows])
        tp, fp, fn = figures(rows, verdicts(model, threshold, rows))
        print(
            f"| {held} | {rp / max(rp + rf, 1):.3f} | {rp / max(rp + rn, 1):.3f} "
            f"| {tp / max(tp + fp, 1):.3f} | {tp / max(tp + fn, 1):.3f} | {tp} | {fp} | {fn} |"
        )
        if not check:
            write_model(os.path.join(ROOT, "tests", "corpus", "classifier", f"without_{held}.bin"), model, threshold)
    threshold = choose_threshold(read, SETS)
    model = fit(read, SETS)
    print(f"shipped: trained on {', '.join(SETS)}; threshold {threshold:.4f}")
    if not check:
        write_model(os.path.join(ROOT, "src", "text", "classifier.bin"), model, threshold)


if __name__ == "__main__":
    main()
