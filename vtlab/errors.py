"""One exception type for user-facing errors: the entry point prints its message as one line and exits 2."""


class VtlabError(Exception):
    """A problem with the user's input (file, line, config key) or environment (missing asset, offline hub)."""


class DataError(VtlabError):
    """Malformed data: the message names file:line and the missing or bad field."""


class AssetError(VtlabError):
    """An offline asset or hub model that cannot be found or loaded."""


class ConfigError(VtlabError, ValueError):
    """A config value out of range or of the wrong kind: the message names the key (e.g. `data.batch_size`)."""


class RunDirError(VtlabError):
    """The run directory cannot be used as asked: it holds an earlier run's results, or there is nothing to resume."""


class NonFiniteLossError(VtlabError, FloatingPointError):
    """Training produced a NaN/inf loss: the message names the step, the loss parts and the last finite loss.
    Still a FloatingPointError, so code that catches numeric failures keeps working."""
