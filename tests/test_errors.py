"""`out_of_memory_message`: an allocator's failure becomes one line naming what to lower;
any other error is not its business (the command line re-raises it)."""

from __future__ import annotations

from aiayn.errors import out_of_memory_message

CPU = ("DefaultCPUAllocator: can't allocate memory: you tried to allocate 160000000000 bytes."
       " Error code 12 (Cannot allocate memory)")  # fmt: skip
CUDA = "CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.10 GiB total capacity)\nmore"


def test_allocator_failures_name_the_options_to_lower():
    assert out_of_memory_message(RuntimeError(CPU), "translate") == (
        f"not enough memory ({CPU}); lower --max-tokens or --beam"
    )
    message = out_of_memory_message(RuntimeError(CUDA), "train")
    assert message.startswith("not enough memory (CUDA out of memory. Tried")
    assert "\n" not in message and message.endswith("; lower data.max_tokens (train.update_tokens "
                                                    "keeps the batch per update)")
    assert out_of_memory_message(MemoryError(), "average") == "not enough memory (MemoryError)"


def test_other_errors_are_not_called_out_of_memory():
    assert out_of_memory_message(RuntimeError("shape mismatch"), "translate") is None
    assert out_of_memory_message(ValueError("out of memory"), "translate") is None
