"""Rolling summaries: the fold (facts and a narrative, checked before use), the checks, and the
summary text (the reference's prompt and block, the extractive summary)."""
