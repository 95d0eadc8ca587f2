#!/usr/bin/python3
"""The corpus of malformed safetensors files and model directories.

Run with Debian's interpreter (standard library only):
    /usr/bin/python3 tests/reference/make_safetensors_bad.py
It rewrites tests/data/io/safetensors_bad/: one <case>.safetensors file per
malformed file and one <case>/ directory per malformed model directory, and
expected.json, which says for each case a substring the FormatError message
must contain, the tensor it must name (if any) and whether it carries a byte
offset. tests/io/safetensors_test.cpp opens every file and directory found
there (so a case added here is tested without editing the test) and requires
a FormatError naming the case's file.
"""
import json
import os
import shutil
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "io", "safetensors_bad")
expected = {}


def header_file(text, data=b"", length=None):
    if isinstance(text, str):
        text = text.encode("utf-8")
    n = len(text) if length is None else length
    return struct.pack("<Q", n) + text + data


def entry(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def st(tensors, data_len, metadata=None):
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    header.update(tensors)
    return header_file(json.dumps(header), bytes(data_len))


def case(name, data, substring, tensor=None, byte=True):
    with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
        f.write(data)
    expected[name + ".safetensors"] = {"substring": substring, "tensor": tensor, "byte": byte}


def dir_case(name, files, substring, tensor=None, byte=True):
    d = os.path.join(OUT, name)
    os.makedirs(d)
    for fname, data in files.items():
        with open(os.path.join(d, fname), "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    expected[name] = {"substring": substring, "tensor": tensor, "byte": byte}


def good_shard(names):
    return st({n: entry(offsets=(8 * i, 8 * i + 8)) for i, n in enumerate(names)}, 8 * len(names))


def index(weight_map, metadata=None):
    return json.dumps({"metadata": metadata or {"total_size": 8}, "weight_map": weight_map})


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    # ---- the header length ----
    case("empty", b"", "file too short")
    case("truncated_length", b"\x05\x00\x00", "file too short")
    case("length_past_end", header_file("{}", length=1000), "runs past the end")
    case("length_2_pow_63", header_file("{}", length=2**63), "exceeds the limit")
    case("length_max_u64", header_file("{}", length=2**64 - 1), "exceeds the limit")
    case("length_zero", header_file(""), "does not start with '{'")
    case("length_cuts_json", header_file('{"w":' + json.dumps(entry()) + "}", bytes(8), length=10),
         "not valid JSON")
    # ---- the header text ----
    case("not_json", header_file("{this is not json}"), "not valid JSON")
    case("json_array", header_file("[1, 2, 3]"), "does not start with '{'")
    case("json_string", header_file('"{}"'), "does not start with '{'")
    case("leading_space", header_file(' {}'), "does not start with '{'")
    case("truncated_json", header_file('{"w": {"dtype": "F32", '), "not valid JSON")
    case("trailing_garbage", header_file('{} x'), "not valid JSON")
    case("invalid_utf8", header_file(b'{"w\xff": ' + json.dumps(entry()).encode() + b"}", bytes(8)),
         "not valid JSON")
    case("nul_padding", header_file(b"{}\x00\x00\x00\x00\x00\x00"), "NUL byte")
    case("nul_hides_text", header_file(b'{}\x00{"w": ' + json.dumps(entry()).encode() + b"}", bytes(8)),
         "NUL byte")
    case("deep_nesting", header_file('{"w": ' + "[" * 100000 + "]" * 100000 + "}"),
         "deeper than 128 levels")
    case("duplicate_tensor",
         header_file('{"w": ' + json.dumps(entry()) + ', "w": ' + json.dumps(entry()) + "}", bytes(8)),
         "twice", "w")
    case("duplicate_field",
         header_file('{"w": {"dtype": "F32", "dtype": "F16", "shape": [2], "data_offsets": [0, 8]}}',
                     bytes(8)), 'duplicate key "dtype"', "w")
    # ---- __metadata__ ----
    case("metadata_not_object", st({"w": entry()}, 8, metadata="pt"),
         '"__metadata__" must be an object')
    case("metadata_not_strings", st({"w": entry()}, 8, metadata={"format": 1}),
         '"__metadata__" value of "format" must be a string')
    # ---- tensor entries ----
    case("entry_not_object", st({"w": [0, 8]}, 8), "entry must be an object", "w")
    case("unexpected_field", st({"w": dict(entry(), extra=1)}, 8), "unexpected field", "w")
    for field in ("dtype", "shape", "data_offsets"):
        e = entry()
        del e[field]
        case("missing_" + field, st({"w": e}, 8), 'missing "' + field + '"', "w")
    case("dtype_not_string", st({"w": dict(entry(), dtype=4)}, 8), "must be a string", "w")
    case("dtype_unknown", st({"w": entry(dtype="F12")}, 8), "unknown dtype", "w")
    case("dtype_lowercase", st({"w": entry(dtype="f32")}, 8), "unknown dtype", "w")
    case("shape_not_array", st({"w": dict(entry(), shape="2")}, 8), "must be an array", "w")
    case("shape_negative", st({"w": entry(shape=(-2,))}, 8), "negative", "w")
    case("shape_float", st({"w": entry(shape=(2.0,))}, 8), "non-negative integer", "w")
    case("shape_string", st({"w": entry(shape=("2",))}, 8), "non-negative integer", "w")
    case("number_beyond_double", header_file('{"w": {"dtype": "F32", "shape": [1e400], '
                                             '"data_offsets": [0, 8]}}', bytes(8)),
         "cannot be parsed")
    case("shape_too_large", st({"w": entry(shape=(2**64 - 1,))}, 8), "too large", "w")
    case("shape_product_overflow", st({"w": entry(shape=(2**32, 2**32, 16))}, 8), "overflows", "w")
    case("shape_columns_overflow", st({"w": entry(shape=(0, 2**40, 2**40), offsets=(0, 0))}, 0),
         "overflows", "w")
    case("offsets_past_end", st({"w": entry(offsets=(0, 1000))}, 8), "past the data section", "w")
    case("offsets_reversed", st({"w": entry(offsets=(8, 0))}, 8), "reversed", "w")
    case("offsets_negative", st({"w": entry(offsets=(-8, 0))}, 8), "negative", "w")
    case("offsets_three", st({"w": entry(offsets=(0, 8, 16))}, 8), "array of 3 elements", "w")
    case("offsets_strings", st({"w": entry(offsets=("0", "8"))}, 8), "non-negative integer", "w")
    case("offsets_huge", st({"w": entry(offsets=(0, 2**63))}, 8), "too large", "w")
    case("bytes_disagree_with_shape", st({"w": entry(shape=(2, 3), offsets=(0, 20))}, 20), "needs 24",
         "w")
    case("bytes_disagree_with_dtype", st({"w": entry(dtype="F16", shape=(4,), offsets=(0, 16))}, 16),
         "needs 8", "w")
    case("sub_byte_not_whole", st({"w": entry(dtype="F4", shape=(3,), offsets=(0, 2))}, 2),
         "whole number of bytes", "w")
    # ---- the layout of the data section ----
    case("overlap", st({"a": entry(shape=(4,), offsets=(0, 16)), "b": entry(shape=(4,), offsets=(8, 24))},
                       24), "overlap", "b")
    case("same_offsets", st({"a": entry(), "b": entry()}, 8), "overlap", "b")
    case("hole", st({"a": entry(offsets=(0, 8)), "b": entry(offsets=(16, 24))}, 24), "holes", "b")
    case("hole_at_start", st({"a": entry(offsets=(8, 16))}, 16), "holes", "a")
    case("trailing_bytes", st({"a": entry()}, 12), "after the last tensor")
    case("data_without_tensors", st({}, 4), "after the last tensor")
    # ---- model directories ----
    shard = good_shard(["a", "b"])
    dir_case("dir_empty", {"README.txt": "A model directory without weights.\n"}, "holds neither",
             byte=False)
    dir_case("single_bad", {"model.safetensors": st({"w": entry(offsets=(0, 99))}, 8)},
             "past the data section", "w")
    dir_case("index_not_json", {"model.safetensors.index.json": "{\"weight_map\": ",
                                "model-1.safetensors": shard}, "not valid JSON")
    dir_case("index_not_object", {"model.safetensors.index.json": "[]"}, "not an object")
    dir_case("index_number_beyond_double", {"model.safetensors.index.json":
                                            '{"metadata": {"total_size": 1e999}, "weight_map": {}}'},
             "number overflow")
    dir_case("index_deep_nesting", {"model.safetensors.index.json":
                                    '{"metadata": ' + "[" * 10000 + "]" * 10000 + ', "weight_map": {}}'},
             "deeper than 128 levels")
    dir_case("index_no_weight_map", {"model.safetensors.index.json": '{"metadata": {}}'},
             'missing "weight_map"')
    dir_case("index_weight_map_not_object",
             {"model.safetensors.index.json": '{"weight_map": ["model-1.safetensors"]}'},
             "must be an object")
    dir_case("index_shard_not_string", {"model.safetensors.index.json": index({"a": 1}),
                                        "model-1.safetensors": shard}, "file name (string)", "a")
    dir_case("index_missing_shard", {"model.safetensors.index.json":
                                     index({"a": "model-1.safetensors", "b": "model-2.safetensors"}),
                                     "model-1.safetensors": shard}, "does not exist", "b")
    dir_case("index_tensor_not_in_shard", {"model.safetensors.index.json":
                                           index({"a": "model-1.safetensors", "c": "model-1.safetensors"}),
                                           "model-1.safetensors": shard}, "does not hold it", "c")
    dir_case("index_path_traversal", {"model.safetensors.index.json":
                                      index({"a": "../index_missing_shard/model-1.safetensors"}),
                                      "model-1.safetensors": shard}, "not a relative path inside", "a")
    dir_case("index_path_traversal_inner", {"model.safetensors.index.json":
                                            index({"a": "sub/../../index_missing_shard/model-1.safetensors"}),
                                            "model-1.safetensors": shard}, "not a relative path inside", "a")
    dir_case("index_absolute_path", {"model.safetensors.index.json": index({"a": "/etc/hostname"}),
                                     "model-1.safetensors": shard}, "not a relative path inside", "a")
    dir_case("index_empty_shard_name", {"model.safetensors.index.json": index({"a": ""})},
             "not a relative path inside", "a")
    dir_case("index_shard_is_directory", {"model.safetensors.index.json": index({"a": "."})},
             "not a regular file", "a")
    dir_case("index_bad_shard", {"model.safetensors.index.json": index({"w": "model-1.safetensors"}),
                                 "model-1.safetensors": st({"w": entry(dtype="X")}, 8)},
             "unknown dtype", "w")
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
