"""Budget sweeps: many replays of one trace over a range of budgets.

Pipeline, one module per step (imports go one way):

* `store`  -- the sweep folder: `sweep.json` (parameters, trace identity) and a
  Parquet dataset of runs (`runs/part-*.parquet`, one file per flushed batch).
* `grid`   -- which budgets to run: the stage-A grid, seeded interior samples,
  adaptive refinement, confirmation repeats.
* `exact`  -- the certificate walk: partition the budget axis into intervals of
  identical executions.
* `runner` -- run points on a process pool or a Dask cluster, append results as
  they finish, resume by skipping stored points.
* `holes`  -- analysis by the SQL in `queries/sweep/` -> typed results.
* `plot`   -- matplotlib figure of a `holes` report (rendering only).
"""
