"""What a filter that matched nothing adds: the names it might have meant, from the names the answer has seen."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def no_match(what: str, flag: str, given: str, seen: Iterable[str], kind: str) -> str:
    """One line for a ``--tenant`` or ``--type`` that matched nothing: a did-you-mean (the same name in another
    case, a name it begins or ends, a close spelling) and the names (of ``kind``) seen. Filters match exactly.
    Pure."""
    names = sorted(set(seen))
    if not names:
        return f"{flag} {given!r} matched no {what}, and no {kind} has been seen here"
    guess = _guess(given, names)
    hint = f"did you mean {guess!r}? " if guess else ""
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return f"{flag} {given!r} matched no {what} (filters match exactly); {hint}{kind}s seen: {shown}"


def _guess(given: str, names: list[str]) -> str | None:
    lower = given.lower()
    for name in names:
        if name.lower() == lower:
            return name
    prefixed = [n for n in names if n.lower().startswith(lower) or lower.startswith(n.lower())]
    if len(prefixed) == 1:
        return prefixed[0]
    close = difflib.get_close_matches(given, names, n=1, cutoff=0.6)
    return close[0] if close else None
