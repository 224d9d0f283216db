"""Budget sweeps: many replays of one trace over a range of budgets.

Pipeline, one module per step (imports go one way):

* `store`  -- the sweep folder: `sweep.json` (parameters, trace identity) and a
  Parquet dataset of runs (`runs/part-*.parquet`, one file per flushed batch).
* `grid`   -- which budgets to run: the stage-A grid, seeded interior samples,
  adaptive refinement, confirmation repeats.
* `exact`  -- the certificate walk: partition the budget axis into intervals of
  identical executions.
* `backends` -- where points run: in this process, a process pool, a Dask cluster.
* `scheduler` -- points from a source onto a backend, results into the store,
  stored points skipped, a deadline, a dying worker named.
* `runner` -- the stage driver: grid, interior, refinement, the exact walk,
  repeats (`run_sweep`).
* `holes`  -- analysis by the SQL in `queries/sweep/` -> typed results.
* `plot`   -- matplotlib figure of a `holes` report (rendering only).
"""
