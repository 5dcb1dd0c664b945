"""The syntax layer: text → typed model, with syntax errors as diagnostics (see `parser`)."""

from plangate.syntax.parser import MAX_INPUT_CHARS, MAX_NESTING, ParseResult, parse_expression, parse_source

__all__ = ["MAX_INPUT_CHARS", "MAX_NESTING", "ParseResult", "parse_expression", "parse_source"]
