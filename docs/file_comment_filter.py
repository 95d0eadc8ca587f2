#!/usr/bin/env python3
"""Doxygen input filter: makes each header's file comment its \\file page.

Every header of kappa starts with a plain `//` comment block,

    // kappa/<folder>/<name>.hpp - one-line summary
    //
    // text, equations and tables written as plain text ...
    #pragma once

that explains the whole header (the declarations below it carry `///`
comments and often say "see the file comment"). Doxygen reads only `///`
comments, so this filter, run by Doxygen on every header (FILTER_PATTERNS in
docs/Doxyfile.in), rewrites that block as documentation of the file:

  * the summary line loses its "kappa/...hpp - " prefix and becomes the brief;
  * runs of lines indented by two or more spaces (equations, tables, code,
    byte layouts) that are not continuations of a `*`/`-` list item become
    <pre> blocks, so they keep their alignment and are not read as Markdown;
  * everything else is text in which Doxygen's special characters
    (backslash, <, >, @, &, #, %) are escaped outside "quotes" and `code`,
    so \\p{L}, (\\x1b) or Rope<T> are printed as written rather than read
    as commands or tags;
  * the `#pragma once` line becomes `/// \\file`;
  * in every `///` comment, a dot that does not end a sentence ("e.g. ",
    "et al. ", "0 .. n") gets Doxygen's "\\ " after it, so the brief
    description (the first sentence) is not cut there, and the words "file
    comment" become a link to the header's page.

Every output line corresponds to one input line, so Doxygen's line numbers
(warnings, "Definition at line N") stay those of the header. The headers
themselves are not changed; the source listings show them as they are.
Files that do not start with such a block pass through unchanged.
"""

import re
import sys

SUMMARY = re.compile(r"^// kappa/[\w/]+\.hpp - ")
BULLET = re.compile(r"^( *)[*-] ")


LITERAL = re.compile(r'("[^"]*"?|`[^`]*`?)')


def outside_quotes(s, escape):
    """Applies escape to the parts of s outside "double quotes" and `code
    spans`. Doxygen prints those as written (commands and tags in them are
    not read), so escaping them would show the backslashes."""
    parts = LITERAL.split(s)  # odd indices are the literal spans
    for i in range(0, len(parts), 2):
        parts[i] = escape(parts[i])
    return "".join(parts)


# Dots that do not end a sentence: abbreviations and "0 .. n" ranges.
# JAVADOC_AUTOBRIEF ends a brief description at the first dot followed by a
# space (in Doxygen 1.9.4 also at "..", not at "..."). After an abbreviation
# Doxygen's "\ " keeps the sentence going; after ".." only "&nbsp;" does.
ABBREVIATION = re.compile(r"\b(e\.g|i\.e|et al|cf|vs)\.( |$)")
RANGE_DOTS = re.compile(r"(?<!\.)\.\.( |$)")


def keep_sentence(t):
    t = ABBREVIATION.sub(lambda m: m.group(1) + ".\\ ", t)
    return RANGE_DOTS.sub("..&nbsp;", t)


def escape_text(s):
    """Text line: keep Doxygen from reading commands, tags and links."""
    return outside_quotes(s, lambda t: keep_sentence(re.sub(r"([\\<>@&#%])", r"\\\1", t)))


def protect_doc_line(line, in_fence, header):
    """A `///` line of a declaration's comment, in prose (not in ``` fences or
    indented code): dots that do not end a sentence are marked, and "file
    comment" links to the header's page."""
    m = re.match(r"^(\s*///<?)( ?)(\S.*)?$", line.rstrip("\n"))
    if in_fence or not m or m.group(3) is None:
        return line

    def prose(t):
        t = keep_sentence(t)
        if header:
            t = t.replace("file comment", '\\ref %s "file comment"' % header)
        return t

    return m.group(1) + m.group(2) + outside_quotes(m.group(3), prose) + "\n"


def escape_pre(s):
    """Inside <pre>: HTML-escape, and escape Doxygen's command characters."""

    def esc(t):
        t = t.replace("\\", "\\\\").replace("@", "\\@")
        return t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    return outside_quotes(s, esc)


def convert(lines, header=None):
    if not lines or not SUMMARY.match(lines[0]):
        return lines
    end = 0
    while end < len(lines) and lines[end].startswith("//"):
        end += 1
    if end >= len(lines) or lines[end].strip() != "#pragma once":
        return lines

    out = []
    list_indent = None  # content column of the current list item, if any
    pre_open = False
    for k in range(end):
        content = lines[k][2:].rstrip("\n")
        if k == 0:
            content = " " + SUMMARY.sub("", lines[0]).rstrip("\n")
            content = content[:2].upper() + content[2:]
        stripped = content.strip()
        indent = len(content) - len(content.lstrip(" "))
        bullet = BULLET.match(content)

        if not stripped:
            kind = "blank"
        elif bullet and indent <= 4:
            kind = "text"
            list_indent = len(bullet.group(0))
        elif list_indent is not None and indent == list_indent:
            kind = "text"  # continuation of a list item
        elif list_indent is not None and indent > list_indent:
            kind = "pre"  # code inside a list item; the list goes on after it
        elif indent >= 3:  # "//" + two or more spaces of indentation
            kind = "pre"
            list_indent = None
        else:
            kind = "text"
            list_indent = None

        if pre_open and kind != "pre":
            out[-1] += "</pre>"
            pre_open = False
        if kind == "blank":
            out.append("///")
        elif kind == "text":
            out.append("///" + escape_text(content))
        else:
            body = escape_pre(content)
            if not pre_open:
                # Doxygen drops "///" and one space from the following lines;
                # dropping that space here keeps the first line aligned.
                out.append("/// <pre>" + body[1:])
                pre_open = True
            else:
                out.append("///" + body)
    if pre_open:
        out[-1] += "</pre>"
    result = [line + "\n" for line in out]
    result.append("/// \\file\n")
    in_fence = False
    for line in lines[end + 1:]:
        if line.lstrip().startswith("///") and "```" in line:
            in_fence = not in_fence
            result.append(line)
        else:
            result.append(protect_doc_line(line, in_fence, header) if "///" in line else line)
    return result


def main():
    with open(sys.argv[1], encoding="utf-8", errors="surrogateescape") as f:
        lines = f.readlines()
    sys.stdout.reconfigure(encoding="utf-8", errors="surrogateescape")
    # The header as Doxygen names it (STRIP_FROM_PATH): kappa/<folder>/<name>.hpp.
    path = sys.argv[1].replace("\\", "/")
    header = path[path.rfind("/include/") + len("/include/"):] if "/include/" in path else None
    sys.stdout.writelines(convert(lines, header))


if __name__ == "__main__":
    main()
