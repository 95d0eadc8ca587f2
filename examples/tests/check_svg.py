#!/usr/bin/env python3
"""Runs an example that draws a heatmap and checks the SVG it wrote.

usage: check_svg.py SVG --panels N --colorbars N --labels TOKEN... \
                    [--legend TEXT] -- COMMAND ARG...

Removes SVG, runs COMMAND (which must exit with 0 and write SVG), then checks
that SVG is well-formed XML, an <svg> root with a positive size, N panels and
N colour bars, and that every panel has the given labels, in order, on both
axes and one cell per (row, column). Exits 1 naming the first failed check.
"""
import argparse
import os
import subprocess
import sys
import xml.dom.minidom
import xml.etree.ElementTree as ET

SVG_NS = "{http://www.w3.org/2000/svg}"


def fail(msg):
    print(f"check_svg: {msg}", file=sys.stderr)
    sys.exit(1)


def groups(root, cls):
    return [g for g in root.iter(SVG_NS + "g") if g.get("class") == cls]


def texts(group):
    return ["".join(t.itertext()) for t in group.iter(SVG_NS + "text")]


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        fail("missing '-- COMMAND ARG...'")
    cut = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("svg")
    ap.add_argument("--panels", type=int, required=True)
    ap.add_argument("--colorbars", type=int, required=True)
    ap.add_argument("--labels", nargs="+", required=True)
    ap.add_argument("--legend")
    args = ap.parse_args(argv[:cut])
    command = argv[cut + 1:]

    if os.path.exists(args.svg):
        os.remove(args.svg)
    run = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if run.returncode != 0:
        fail(f"{command[0]} exited with {run.returncode}: {run.stderr.strip()}")
    if args.svg not in run.stdout:
        fail(f"{command[0]} did not say where it wrote the picture ({args.svg})")
    if not os.path.exists(args.svg):
        fail(f"{command[0]} wrote no {args.svg}")

    try:
        xml.dom.minidom.parse(args.svg)
        root = ET.parse(args.svg).getroot()
    except Exception as e:  # noqa: BLE001 - any parse error is the finding
        fail(f"{args.svg} is not well-formed XML: {e}")
    if root.tag != SVG_NS + "svg":
        fail(f"root element is {root.tag}, not svg")
    if not (float(root.get("width", "0")) > 0 and float(root.get("height", "0")) > 0):
        fail(f"svg size {root.get('width')} x {root.get('height')} is not positive")

    panels = groups(root, "panel")
    if len(panels) != args.panels:
        fail(f"{len(panels)} panels, expected {args.panels}")
    bars = groups(root, "colorbar")
    if len(bars) != args.colorbars:
        fail(f"{len(bars)} colour bars, expected {args.colorbars}")
    n = len(args.labels)
    for k, panel in enumerate(panels):
        for cls in ("row-labels", "col-labels"):
            found = [texts(g) for g in groups(panel, cls)]
            if found != [args.labels]:
                fail(f"panel {k} {cls}: {found}, expected {args.labels}")
        cells = [r for g in groups(panel, "cells") for r in g.iter(SVG_NS + "rect")]
        if len(cells) != n * n:
            fail(f"panel {k}: {len(cells)} cells, expected {n} x {n}")
    if args.legend is not None:
        legend = [t for g in groups(root, "legend") for t in texts(g)]
        if args.legend not in legend:
            fail(f"legend {legend} lacks '{args.legend}'")
    print(f"check_svg: {args.svg}: {len(panels)} panels, {len(bars)} colour bars, "
          f"{n} x {n} cells each, labels {args.labels}")


if __name__ == "__main__":
    main()
