#!/usr/bin/python3
"""SQuAD v1.1 EM/F1 of a predictions file, computed in Python from the published definition
(lowercase; drop ASCII punctuation; drop the words a/an/the; collapse whitespace; token F1;
max over gold answers; a missing prediction scores 0), printed as `thx score squad` prints it.

    tests/scripts/squad_crosscheck.py DEV.json PREDICTIONS.json
"""
import collections
import json
import re
import string
import sys


def normalize(s):
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def f1(gold, pred):
    g, p = normalize(gold).split(), normalize(pred).split()
    same = sum((collections.Counter(g) & collections.Counter(p)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def main(data_path, pred_path):
    data = json.load(open(data_path))["data"]
    preds = json.load(open(pred_path))
    em = f = n = 0
    for article in data:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                n += 1
                if qa["id"] not in preds:
                    continue
                golds = [a["text"] for a in qa["answers"]]
                em += max(float(normalize(g) == normalize(preds[qa["id"]])) for g in golds)
                f += max(f1(g, preds[qa["id"]]) for g in golds)
    print(f"SQuAD v1.1: {n} questions: EM {100 * em / n:.2f}  F1 {100 * f / n:.2f}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
