"""The errors of a formula fit: refused at the analyst, or refused by a site's schema."""


class FormulaError(ValueError):
    """A formula skfed cannot fit: a syntax error, an unknown column, a term outside
    the allow-list, a level that does not exist (the message names it)."""


class DesignError(ValueError):
    """A design that does not follow the schema a site reads (refused before any row
    is read)."""
