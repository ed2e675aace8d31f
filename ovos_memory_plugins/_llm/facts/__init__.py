"""Facts about the user and the people in their life: what a fact is, the offline rules, the
model's extraction and how its replies are read, merging with supersession, and the choice of
facts for a turn."""
