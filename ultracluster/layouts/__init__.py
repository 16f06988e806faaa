"""Layouts, many at once: the planner's search space and its pricing over a row axis, pure (no Ray, no files).

`space` enumerates a scenario's valid layouts (one row per layout); `fast.evaluate` prices a table of them at
once with the model's own row-axis functions (`memory`, `chip`, `replay.comm`, `replay.engine`'s step pieces),
which `run` calls with a batch of one (`pricer` keeps a process's memo, `parts` groups the rows for the three
parts of a layout's price, `schedules` runs the engine's pipeline programs over the rows in closed form);
`search` prices chunks and ranks them. Below the planner command (`ultracluster.plan`),
which composes them, and below the Ray tasks that price chunks (`actors.plan_tasks`), so the interval
(`ultracluster.uncertainty`) prices its factor settings here without reaching up into the planner. docs/plan.md.
"""
