"""Layouts, many at once: the planner's search space and its timing over a row axis, pure (no Ray, no files).

`space` enumerates a scenario's valid layouts (one row per layout); `steps.evaluate` times a table of them at
once with the model's own row-axis functions (`memory`, `chip`, `replay.comm`, `replay.engine`'s step pieces),
which `run` calls with a batch of one (`evaluator` keeps a process's memo, `batched_parts` groups the rows for the three
parts of a layout's time, `schedules` runs the engine's pipeline programs over the rows in closed form);
`ranking` times blocks and ranks them. Below the planner command (`ultracluster.plan`),
which composes them, and below the Ray tasks that time blocks (`actors.plan_tasks`), so the interval
(`ultracluster.uncertainty`) times its factor settings here without reaching up into the planner. docs/plan.md.
"""
