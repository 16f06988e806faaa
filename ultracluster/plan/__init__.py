"""The layout planner: a scenario's model and job → every valid layout priced → the best ones replayed.

`space` enumerates layouts, `fast` prices them many at once with the replay's own cost functions,
`schedules` runs the engine's pipeline programs over a row axis, `search` ranks them.
"""
