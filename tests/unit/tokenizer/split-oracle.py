#!/usr/bin/python3
"""Splits texts with each pre-tokenizer's patterns using Python's `regex` module (an independent
engine with Unicode properties, possessive and atomic groups) the way Hugging Face's
Split(behavior="Isolated") does: matches and the text between them are pieces, empty matches
only mark boundaries. stdin: {"pipelines": {name: [pattern, ...]}, "texts": [...]};
stdout: {name: [[piece, ...] per text]}. MULTILINE gives ^ and $ Ruby's (Oniguruma's) line
meaning."""
import json
import sys

import regex


def split(pattern, pieces):
    out = []
    for text in pieces:
        prev = 0
        for m in pattern.finditer(text):
            start, end = m.span()
            if prev < start:
                out.append(text[prev:start])
            if start < end:
                out.append(text[start:end])
            prev = end
        if prev < len(text):
            out.append(text[prev:])
    return out


def main():
    req = json.load(sys.stdin)
    result = {}
    for name, patterns in req["pipelines"].items():
        compiled = [regex.compile(p, regex.MULTILINE | regex.VERSION0) for p in patterns]
        rows = []
        for text in req["texts"]:
            pieces = [text] if text else []
            for c in compiled:
                pieces = split(c, pieces)
            rows.append(pieces)
        result[name] = rows
    json.dump(result, sys.stdout, ensure_ascii=False)


main()
