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
  * the `#pragma once` line becomes `/// \\file`.

The `///` comments of the declarations are Doxygen markup already; in them
(convert_doc_comments) an indented example or equation after a blank line or
a colon becomes a <pre> block, a dot that does not end a sentence ("e.g. ",
"et al. ", "0 .. n") is marked so that the brief description (the first
sentence) is not cut there, and the words "file comment" link to the
header's page.

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


def no_explicit_link(t):
    """'::name' without a scope before it (as in 'Embedding<float>::random')
    is Doxygen's explicit link request; '\\::' prints it as written."""
    return re.sub(r"(?<![\w\\])::", r"\\::", t)


def escape_text(s):
    """Text line: keep Doxygen from reading commands, tags and links."""
    return outside_quotes(
        s, lambda t: keep_sentence(no_explicit_link(re.sub(r"([\\<>@&#%])", r"\\\1", t))))


def prose(t, header):
    """Text of a `///` comment: abbreviation dots, and the file comment link."""
    t = keep_sentence(t)
    if header:
        t = t.replace("file comment", '\\ref %s "file comment"' % header)
    return t


def escape_pre(s):
    """Inside <pre>: HTML-escape, and escape Doxygen's command characters."""

    def esc(t):
        t = no_explicit_link(t.replace("\\", "\\\\").replace("@", "\\@"))
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
    return result + convert_doc_comments(lines[end + 1:], header)


DOC_LINE = re.compile(r"^(\s*///)(?!<)(.*)$")
COMMAND = re.compile(r"^\s*[\\@](param|tparam|throws?|exception|returns?|retval|pre|post|note|"
                     r"warning|sa|see|since|deprecated)\b")
LIST_ITEM = re.compile(r"^( *)(?:[*-]|\d+\.) ")


def convert_doc_comments(lines, header):
    """The `///` comments of the declarations. They are Doxygen markup
    already; only three things change:
      * a run of lines indented by two or more extra spaces (an inline
        equation or code example) becomes a <pre> block, unless it continues
        a \\param/\\throws/... paragraph or a list item, or sits in a ```
        fence or \\code block;
      * dots that do not end a sentence are marked (keep_sentence);
      * "file comment" links to the header's page.
    """
    out = []
    literal = False  # inside ``` or \code ... \endcode: untouched
    pre_open = False
    command_paragraph = False
    list_indent = None
    previous = ""  # the text of the previous comment line
    for line in lines:
        m = DOC_LINE.match(line.rstrip("\n"))
        if not m:
            if pre_open:
                out[-1] = out[-1].rstrip("\n") + "</pre>\n"
                pre_open = False
            literal = command_paragraph = False
            list_indent = None
            previous = ""
            out.append(line)
            continue
        prefix, content = m.group(1), m.group(2)
        if "```" in content or re.search(r"[\\@](code|endcode|verbatim|endverbatim)\b", content):
            if re.search(r"```|[\\@](code|verbatim)\b", content):
                literal = not literal if "```" in content else True
            if re.search(r"[\\@](endcode|endverbatim)\b", content):
                literal = False
            out.append(line)
            continue
        if literal:
            out.append(line)
            continue
        indent = len(content) - len(content.lstrip(" "))
        if not content.strip():
            kind = "blank"
            command_paragraph = False
            list_indent = None
        elif indent <= 2:
            kind = "text"
            if COMMAND.match(content):
                command_paragraph = True
            item = LIST_ITEM.match(content)
            list_indent = len(item.group(0)) if item else (list_indent if indent else None)
        elif command_paragraph or (list_indent is not None and indent <= list_indent + 1):
            kind = "text"  # continuation of a \param/\throws paragraph or a list item
        elif pre_open or not previous or previous.endswith(":"):
            kind = "pre"
        else:
            kind = "text"  # a formula inside a sentence stays in its sentence
        previous = content.strip()

        if pre_open and kind != "pre":
            out[-1] = out[-1].rstrip("\n") + "</pre>\n"
            pre_open = False
        if kind == "blank":
            out.append(line)
        elif kind == "text":
            out.append(prefix + outside_quotes(content, lambda t: prose(t, header)) + "\n")
        else:
            body = escape_pre(content)
            if not pre_open:
                out.append(prefix + " <pre>" + body[1:] + "\n")  # aligned as in convert()
                pre_open = True
            else:
                out.append(prefix + body + "\n")
    if pre_open:
        out[-1] = out[-1].rstrip("\n") + "</pre>\n"
    return out


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
