"""A regression summary as text, in statsmodels' ``summary2`` layout: a centred title,
the header facts in two columns, the table below a rule."""

import numpy as np


def summary_text(title, info, table, digits):
    """The text of a summary (title, ``{label: text}`` facts, a numeric table)."""
    pairs = list(info.items())
    half = -(-len(pairs) // 2)
    pairs += [("", "")] * (2 * half - len(pairs))
    info_rows = [[*pairs[i], *pairs[i + half]] for i in range(half)]
    table_rows = [[str(name)] + [_number(v, digits) for v in row]
                  for name, row in zip(table.index, table.to_numpy())]
    header = [""] + [str(c) for c in table.columns]
    parts = [(table_rows, _width([header] + table_rows), header, "r")]
    if info_rows:  # no facts: no block for them
        parts.insert(0, (info_rows, _width(info_rows), None, "l"))
    widest = max(width for _, width, _, _ in parts)
    blocks = []
    for rows, width, head, align in parts:
        n_sep = max(len(rows[0]) - 2 if head else len(rows[0]) - 1, 1)
        pad = (widest - width) // n_sep
        first_pad = widest - width - n_sep * pad
        blocks.append(_render(rows, head, align, " " * (pad + 1), first_pad))
    if len(title) < widest:
        title = " " * int(widest / 2 - len(title) / 2) + title
    rule = "=" * widest
    facts = blocks[0] + ["-" * len(blocks[-1][0])] if info_rows else []
    lines = [title, rule] + facts + blocks[-1] + [rule]
    return "\n".join(lines) + "\n"  # statsmodels ends with its (empty) notes' line


def _number(value, digits):
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{value:.{digits}f}" if np.isfinite(value) else ""


def _width(rows):
    """A table's width with one space between columns."""
    cols = list(zip(*rows))
    return sum(max(len(c) for c in col) for col in cols) + len(cols) - 1


def _render(rows, header, align, sep, first_pad):
    """Rows as text: first column left-aligned and padded by ``first_pad``, the
    others aligned as ``align`` (a header, centred, then a rule below it)."""
    rows = [[row[0] + " " * first_pad] + row[1:] for row in rows]
    if header is not None:
        header = [header[0] + " " * first_pad] + header[1:]
    every = rows + ([header] if header is not None else [])
    widths = [max(len(r[j]) for r in every) for j in range(len(rows[0]))]

    def line(cells, centred=False):
        out = [cells[0].ljust(widths[0])]
        for cell, w in zip(cells[1:], widths[1:]):
            out.append(cell.center(w) if centred else
                       cell.ljust(w) if align == "l" else cell.rjust(w))
        return sep.join(out)

    lines = [line(r) for r in rows]
    if header is not None:
        head = line(header, centred=True)
        lines = [head, "-" * len(head)] + lines
    return lines
