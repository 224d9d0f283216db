-- sample_points: what did each sampled budget of a sweep yield, in budget order?
--
-- Answers: every sampled point's own run (rep 0; confirmation reruns are in
-- repeat_disagreements) with its outcome class, overhead and failure details,
-- ordered by policy and budget. This is what `dtrf plot` draws.
-- Parameters: files -- the sweep's part files (a list of paths or a glob:
-- `SweepStore.part_files()`, i.e. <sweep>/runs/part-*.parquet).
-- Reads: the sweep runs table (columns: docs/sweep-format.md).

-- sample_points(files): one row per policy and sampled budget.
--   policy        eviction policy
--   budget        bytes; ratio: the requested ratio, or budget / peak
--   stage         grid | interior | refine | exact: who asked for the point
--   status        ok | fail (oom, thrashed) | unresolved (timeout)
--   outcome       the engine's outcome; overhead: (model + remat) / model compute
--   oom_pinned    pinned bytes at failure; oom_depth: nesting depth at failure (OOM only)
--   max_depth     deepest nesting of the run
--   interval_lo   the run's budget-interval certificate (null for a timeout)
--   interval_hi   (null: unbounded, or a timeout)
CREATE OR REPLACE MACRO sample_points(files) AS TABLE
SELECT policy, budget, ratio, stage, status, outcome, overhead, oom_pinned, oom_depth,
       max_depth, interval_lo, interval_hi
FROM read_parquet(files, union_by_name = true)
WHERE rep = 0
ORDER BY policy, budget;
