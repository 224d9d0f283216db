-- failures_above_first_success: which samples fail although a smaller budget completed?
--
-- Answers: every failing sample (OOM or thrashed) whose budget is above the
-- policy's first success: the raw evidence of feasibility holes.
-- Parameters: files -- the sweep's part files (list of paths or a glob).
-- Reads: the sweep runs table (docs/sweep-format.md), rep 0 only.

-- failures_above_first_success(files): one row per such sample, by policy and budget.
--   policy, budget, ratio, stage, outcome, overhead
--   oom_pinned, oom_depth   pinned bytes and nesting depth at failure (OOM only)
CREATE OR REPLACE MACRO failures_above_first_success(files) AS TABLE
WITH s AS (
    SELECT * FROM read_parquet(files, union_by_name = true) WHERE rep = 0
), f AS (
    SELECT policy, min(budget) AS first_budget FROM s WHERE status = 'ok' GROUP BY policy
)
SELECT s.policy, s.budget, s.ratio, s.stage, s.outcome, s.overhead, s.oom_pinned, s.oom_depth
FROM s JOIN f USING (policy)
WHERE s.status = 'fail' AND s.budget > f.first_budget
ORDER BY s.policy, s.budget;
