"""Template strings the DAGs share.

The DAGs render with `render_template_as_native_obj` (a list of pairs stays a list), and Jinja's native
mode reads any rendered text that looks like a Python literal as one: a run id `48213` became an int,
a pair named `1e3` the float 1000.0. :func:`text` renders a value as a Python string literal (its repr),
which native mode reads back as the very same string, whatever characters it holds. These templates are
for DAGs rendered natively: rendered as plain text they keep their quotes.
"""

from __future__ import annotations


def text(expression: str) -> str:
    """A template rendering `expression` as a string under native rendering (`render_template_as_native_obj`)."""
    return "{{ (" + expression + ") | string | pprint }}"
