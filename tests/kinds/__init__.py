"""Kinds that exist only for the tests: each proves that a kind needs nothing but its own module,
one registry entry and a GX suite (docs/adding-a-kind.md)."""
