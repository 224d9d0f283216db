-- unresolved_points: which points timed out?
--
-- Answers: every run stopped at the wall-clock limit. Such a point is neither a
-- success nor a failure, and its certificate is not used.
-- Parameters: files -- the sweep's part files (list of paths or a glob).
-- Reads: the sweep runs table (docs/sweep-format.md), every rep.

-- unresolved_points(files): one row per timed-out run, by policy and budget.
--   policy, budget, ratio, rep, stage
--   wall_seconds   how long it ran before it was stopped
CREATE OR REPLACE MACRO unresolved_points(files) AS TABLE
SELECT policy, budget, ratio, rep, stage, wall_seconds
FROM read_parquet(files, union_by_name = true)
WHERE status = 'unresolved'
ORDER BY policy, budget, rep;
