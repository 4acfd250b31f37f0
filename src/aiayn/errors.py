"""The one exception type the command line turns into a clear message instead of a traceback.

Library code raises `AiaynError` (or a subclass) for every problem with the user's input:
a missing file, a bad config key, a foreign checkpoint. The message must name the problem
and, where there is one, the file (and line) at fault. Running out of memory is no
`AiaynError` (torch raises it), but `out_of_memory_message` turns it into one line too.
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


class ModelImportError(AiaynError):
    """Another library's model that aiayn cannot represent, or that is unsafe or corrupt."""


# What to lower when a command runs out of memory: its options that size the work.
LOWER_WHEN_OUT_OF_MEMORY = {
    "translate": "--max-tokens or --beam",
    "evaluate": "--max-tokens or --beam",
    "train": "data.max_tokens (train.update_tokens keeps the batch per update)",
}


def out_of_memory_message(err: BaseException, command: str) -> str | None:
    """`not enough memory (<the allocator's first line>); lower <option>` when `err` is an
    allocator's (a MemoryError; torch's CPU "can't allocate memory" or CUDA "out of memory"
    RuntimeError), else None: other errors stay bugs to see whole."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    allocator = "can't allocate memory" in text or "out of memory" in text.lower()
    if not isinstance(err, MemoryError) and not (isinstance(err, RuntimeError) and allocator):
        return None
    lower = LOWER_WHEN_OUT_OF_MEMORY.get(command)
    return f"not enough memory ({text})" + (f"; lower {lower}" if lower else "")
