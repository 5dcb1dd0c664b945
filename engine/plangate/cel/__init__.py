"""CEL: the expression language of plans and policies (syntax tree, printing, typing, evaluation)."""
