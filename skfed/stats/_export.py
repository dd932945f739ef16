"""Table 1 written out: a text DataFrame, CSV, LaTeX (booktabs) and Word (docx).

Each export lays out the same cells (:func:`skfed.stats._layout.layout`): the
header rows with each group's ``n``, the variables' labels, suppressed cells with
their footnote numbers, and the footnotes and the note under the table.
"""

import io

import pandas as pd

from ._layout import header_lines, layout

#: what to install for :func:`to_docx`
DOCX_EXTRA = "python-docx (pip install 'skfed[word]')"


def _laid_out(result, per_site):
    headers, rows, notes = layout(result, per_site)
    return header_lines(result, headers), rows, notes


def _text(cell, mark=" [{}]"):
    text, note = cell
    return text if note is None else text + mark.format(note)


def to_frame(result, per_site=None):
    """The laid-out Table 1 as a DataFrame of text (a suppressed cell's footnote number in
    brackets); the footnotes in ``frame.attrs["footnotes"]``."""
    heads, rows, notes = _laid_out(result, per_site)
    columns = (pd.Index(heads[0]) if len(heads) == 1
               else pd.MultiIndex.from_arrays(heads))
    index = pd.Index(["  " * depth + label for label, depth, _ in rows], name="")
    frame = pd.DataFrame([[_text(c) for c in cells] for _, _, cells in rows], index=index,
                         columns=columns)
    frame.attrs["footnotes"] = [f"[{k}] {r}" for k, r in enumerate(notes, start=1)]
    frame.attrs["note"] = result.note
    return frame


def _write(text, path):
    if path is None:
        return text
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
    return None


def to_csv(result, path=None, per_site=None):
    """Table 1 as CSV: the header rows, one row per table row (labels indented), then the
    footnotes, one per row. Returns the text when ``path`` is ``None``."""
    import csv

    heads, rows, notes = _laid_out(result, per_site)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for k, head in enumerate(heads):
        writer.writerow(["Variable" if k == len(heads) - 1 else ""] + head)
    for label, depth, cells in rows:
        writer.writerow(["  " * depth + label] + [_text(c) for c in cells])
    for k, reason in enumerate(notes, start=1):
        writer.writerow([f"[{k}] {reason}"])
    return _write(out.getvalue(), path)


_LATEX = str.maketrans({"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                        "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                        "^": r"\textasciicircum{}", "\\": r"\textbackslash{}",
                        "<": r"\textless{}", ">": r"\textgreater{}"})


def _tex(text):
    return str(text).translate(_LATEX)


def to_latex(result, path=None, per_site=None, caption="Table 1"):
    """Table 1 as a LaTeX ``table`` with a booktabs ``tabular`` (needs ``\\usepackage
    {booktabs}``): suppressed cells with superscript footnote numbers, the footnotes
    beneath. Returns the text when ``path`` is ``None``."""
    heads, rows, notes = _laid_out(result, per_site)
    n = len(heads[0])
    lines = [r"\begin{table}[htbp]", r"\centering", f"\\caption{{{_tex(caption)}}}",
             r"\begin{tabular}{l" + "r" * n + "}", r"\toprule"]
    for head in heads:
        lines.append(" & ".join([""] + [_tex(h) for h in head]) + r" \\")
    lines.append(r"\midrule")
    for label, depth, cells in rows:
        name = (r"\quad " * depth) + _tex(label)
        values = [_tex(text) + ("" if note is None else f"$^{{{note}}}$")
                  for text, note in cells]
        lines.append(" & ".join([name] + values) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    if notes:
        lines.append(r"\par\footnotesize")
        lines += [f"$^{{{k}}}$ {_tex(r)}\\\\" for k, r in enumerate(notes, start=1)]
    lines.append(r"\end{table}")
    return _write("\n".join(lines) + "\n", path)


def to_docx(result, path, per_site=None, title="Table 1"):
    """Table 1 as a Word document: its title, the table (header rows bold, suppressed
    cells with superscript footnote numbers) and the footnotes and note beneath.

    Raises
    ------
    ImportError
        python-docx is not installed (the ``word`` extra).
    """
    try:
        import docx
    except ImportError:
        raise ImportError(f"DescribeResult.to_docx needs {DOCX_EXTRA}.") from None
    heads, rows, notes = _laid_out(result, per_site)
    document = docx.Document()
    document.add_heading(title, level=2)
    table = document.add_table(rows=0, cols=len(heads[0]) + 1)
    for head in heads:
        cells = table.add_row().cells
        for j, text in enumerate([""] + head):
            cells[j].paragraphs[0].add_run(text).bold = True
    for label, depth, values in rows:
        cells = table.add_row().cells
        cells[0].paragraphs[0].add_run("    " * depth + label).bold = depth == 0
        for j, (text, note) in enumerate(values, start=1):
            paragraph = cells[j].paragraphs[0]
            paragraph.add_run(text)
            if note is not None:
                paragraph.add_run(str(note)).font.superscript = True
    for k, reason in enumerate(notes, start=1):
        paragraph = document.add_paragraph()
        paragraph.add_run(str(k)).font.superscript = True
        paragraph.add_run(" " + reason)
    if result.note:
        document.add_paragraph(result.note)
    document.save(path)
