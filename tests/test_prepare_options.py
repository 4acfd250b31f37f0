"""`PrepareOptions`: every option of `prepare` and its default in one dataclass, checked
when made (also by `dataclasses.replace`), before any corpus is read or downloaded."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from aiayn.data.prepare import prepare
from aiayn.data.prepare_options import NO_CLEANING, PrepareOptions
from aiayn.errors import ConfigError
from aiayn.recipes import multi30k, wmt14


@pytest.mark.parametrize(
    "changes, message",
    [({"vocab_size": 4}, "the vocab size must be at least 5, got 4"),
     ({"seed": -1}, "the seed must be at least 0, got -1"),
     ({"max_tokens_per_side": 0}, "the max tokens per side must be at least 1, got 0"),
     ({"max_len_ratio": float("nan")}, "the max length ratio must be a number >= 1, got nan"),
     ({"src": "de"}, "source and target languages are both 'de'")],
)  # fmt: skip
def test_impossible_options_are_refused_when_made_or_changed(changes, message):
    with pytest.raises(ConfigError, match=message):
        PrepareOptions(**{"vocab_size": 300, **changes})
    with pytest.raises(ConfigError, match=message):
        dataclasses.replace(multi30k.OPTIONS, **changes)


def test_each_default_is_written_once():
    # prepare takes the options whole: no keyword of its own repeats a default
    assert "options" in inspect.signature(prepare).parameters
    defaults = {p.default for p in inspect.signature(prepare).parameters.values()}
    assert defaults <= {None, inspect.Parameter.empty}
    # the recipes start from the dataclass and change only what they must
    # the standard corpora as published: no cleaning (data/clean.py)
    assert multi30k.OPTIONS == PrepareOptions(vocab_size=8000, clean=NO_CLEANING)
    assert wmt14.task("en-de").options == PrepareOptions(  # the paper's BPE, fairseq's filter
        vocab_size=37000, src="en", tgt="de", max_tokens_per_side=250, max_len_ratio=1.5,
        clean=NO_CLEANING,
    )
