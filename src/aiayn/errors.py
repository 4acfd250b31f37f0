"""The one exception type the command line turns into a clear message instead of a traceback.

Library code raises `AiaynError` (or a subclass) for every problem with the user's input:
a missing file, a bad config key, a foreign checkpoint. The message must name the problem
and, where there is one, the file (and line) at fault.
"""


class AiaynError(Exception):
    """A problem with the user's input or environment, explained in the message."""


class ConfigError(AiaynError, ValueError):
    """An unknown key, a value of the wrong type, or a config that builds an impossible model."""


class DataError(AiaynError, ValueError):
    """A corpus file that is missing, empty, mismatched, or not valid UTF-8."""


class CheckpointError(AiaynError):
    """A checkpoint that is missing, truncated, foreign, or unsafe to load."""


class TrainingError(AiaynError):
    """A run that cannot go on: e.g. non-finite losses in `train.max_bad_steps` updates in a row."""


class ExportError(AiaynError):
    """A checkpoint another library cannot represent, or an export output that cannot be written."""
