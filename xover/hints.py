"""The commands xover prints for its user to run next (`run it: xover run PLAN`, `xover report ID`, the
`xover profile` a plan needs first): each one a shell command that works as pasted.

Its words are quoted as the shell reads them (a plan at `my plan;rm -rf x.json` is one word, not a second
command), and the store is named again where the user named it: a store given with --db is given again
(`xover --db sim.db report ID`: without it the report looked in results/xover.db and found nothing), its
password shown as *** (redact.py: never printed; the user knows it). A store from XOVER_DB or the default
needs no --db: the same shell finds the same store.
"""

from __future__ import annotations

import shlex

from .redact import mask_word


class GivenStore:
    """The --db the command line gave (set by the callback of `xover`), None where the store came from
    XOVER_DB or the default."""

    db: str | None = None


def xover_command(*words: str) -> str:
    """`xover WORDS...` as one shell command to paste: --db as it was given, every word quoted."""
    store = ["--db", mask_word(GivenStore.db)] if GivenStore.db else []
    return shlex.join(["xover", *store, *words])
