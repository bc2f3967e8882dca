"""Which of the papers' datasets a run's data has the shape of, and the report's note saying
what data a scenario ran on (so that no scenario silently applies ML100K settings elsewhere)."""

from __future__ import annotations

__all__ = ["PAPER_SHAPES", "data_note", "paper_dataset"]

# name -> (users, items (rated ids), item-id range, ratings); None: not fixed by the papers
PAPER_SHAPES: dict[str, tuple[int, int, int, int | None]] = {
    "ML100K": (943, 1682, 1682, 100_000),
    "ML1M": (6040, 3706, 3952, 1_000_209),
    "NF5K5K": (5000, 5000, 5000, 7_944_473),
    "Anime": (69_600, 9927, 9927, None),
}


def paper_dataset(ratings) -> str | None:
    """The paper dataset whose shape ``ratings`` has (users, and items as rated ids or as the id
    range, and ratings when the paper gives their number; real data or a synthetic preset of
    that shape alike), or None."""
    n, m = int(ratings.n_users), int(ratings.n_items)
    total = len(ratings.users)
    for name, (pn, pm, prange, ptotal) in PAPER_SHAPES.items():
        if n == pn and m in (pm, prange) and (ptotal is None or total == ptotal):
            return name
    return None


def data_note(ctx, ratings, settings: dict[str, object] | None = None, paper: str | None = "ML100K") -> str | None:
    """Add to the report what the run's data is (spec, source, users, items, ratings) and which
    paper dataset's shape it has; when that is not ``paper`` (the dataset whose published values
    and settings the scenario prints), say that those values do not apply. ``paper=None``: the
    scenario prints no published value (the note then says nothing of values beside ours).
    ``settings`` maps a paper dataset to the settings the scenario took for it (printed). Returns
    the matched name."""
    info = getattr(ratings, "info", None) or {}
    source = info.get("source") or getattr(ratings, "name", "") or ctx.data
    synthetic = str(source).startswith("synthetic:")
    match = paper_dataset(ratings)
    text = (f"Data: `{ctx.data}` ({source}): {ratings.n_users:,} users, {ratings.n_items:,} items, "
            f"{len(ratings.users):,} ratings")
    if match:
        text += f"; the shape of the papers' {match}" + (" (synthetic ratings: the papers' figures do not "
                                                         "apply, only orderings compare)" if synthetic else "")
    else:
        text += "; not the shape of any dataset of the papers"
    if paper is not None and (match != paper or synthetic):
        text += f". The paper values printed beside ours are {paper}'s and are for reference only"
    if settings:
        text += ". Settings taken: " + ", ".join(f"{k} = {v}" for k, v in settings.items())
    ctx.note(text + ".")
    return match
