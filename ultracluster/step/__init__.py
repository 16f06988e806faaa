"""The step's composition, written once for `run`, the planner and the report: the rules that sit around the
model's physics (HBM per stage, chunk times, the step's comm) and turn them into a step and its figures.

- `hbm`: a stage's HBM total, the worst stage and whether the layout fits (`hbm_totals`);
- `speed`: how jitter and stragglers slow the chunks and the optimizer (`group_speeds`, `slowed`);
- `merit`: tokens/s, MFU, cost per step and $/Mtok from a step time (`figures`);
- `price`: the instance's price in US dollars per instance-hour, honouring the user's override
  (`instance_price`, `price_source`);
- `counts`: microbatches per replica (`microbatches`), the UltraServer default (`ultraserver_default`);
- `split`: the in-layer time of a step split between tensor, context and expert parallelism (`inlayer_split`).

Pure: numpy over a leading row axis where the planner needs one (its layouts), no Ray, no pandas. Below the
report (which reads `merit` and `split`), the replay and `memory` (which call `speed` and `hbm`) and the
planner's `layouts/`; above the model, `cluster` and the catalog, which it reads.
"""
