"""The base class of the errors whose message is complete for the user.

A stage or tool raises a subclass (keeping its own base too: ``class DataError(ParavtUserError, RuntimeError)``)
when the message names the problem and the next step; ``paravt`` then prints it as it is, one line, exit
status 1, with no traceback hint. No imports: every module may derive from it, and the CLI imports it before its
Ctrl-C handling is in place.
"""


class ParavtUserError(Exception):
    """A failure explained in full by its message (bad inputs, a refused output, an unreachable service)."""
