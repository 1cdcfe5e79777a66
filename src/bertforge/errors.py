"""The one exception type users see: its message names the file, line or field and the problem."""


class BertforgeError(Exception):
    """A problem with the user's input (files, config, arguments), explained in the message."""


class TrainingStopped(BertforgeError):
    """The loss, gradients or weights became non-finite; the last good checkpoint is kept."""
