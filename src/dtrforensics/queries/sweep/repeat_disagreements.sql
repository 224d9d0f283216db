-- repeat_disagreements: does every confirmation rerun reproduce its point's execution?
--
-- Answers: `--repeats N` reruns chosen points in fresh processes (rep 1..N); the
-- replay is deterministic, so every rerun must match the point's own run (rep
-- 0) in outcome, clock, remat compute, evictions, remats, depth, certificate,
-- victim sequence and OOM details. The first macro lists disagreements (there
-- should be none); the second counts what was checked.
-- Parameters: files -- the sweep's part files (list of paths or a glob).
-- Reads: the sweep runs table (docs/sweep-format.md). Timed-out reruns
-- and reruns of timed-out points are not comparisons (see unresolved_points).

-- repeat_disagreements(files): one row per disagreeing rerun.
--   policy, budget, ratio, rep
--   differing    names of the columns that differ
--   outcome_run  outcome of the point's run; outcome_rerun: of the rerun
CREATE OR REPLACE MACRO repeat_disagreements(files) AS TABLE
WITH t AS (SELECT * FROM read_parquet(files, union_by_name = true) WHERE status <> 'unresolved'),
pairs AS (
    SELECT b.policy, b.budget, b.ratio, r.rep, b.outcome AS outcome_run,
           r.outcome AS outcome_rerun,
           list_filter([
               CASE WHEN b.outcome IS DISTINCT FROM r.outcome THEN 'outcome' END,
               CASE WHEN b.clock IS DISTINCT FROM r.clock THEN 'clock' END,
               CASE WHEN b.remat_compute IS DISTINCT FROM r.remat_compute THEN 'remat_compute' END,
               CASE WHEN b.evictions IS DISTINCT FROM r.evictions THEN 'evictions' END,
               CASE WHEN b.remats IS DISTINCT FROM r.remats THEN 'remats' END,
               CASE WHEN b.max_depth IS DISTINCT FROM r.max_depth THEN 'max_depth' END,
               CASE WHEN b.interval_lo IS DISTINCT FROM r.interval_lo THEN 'interval_lo' END,
               CASE WHEN b.interval_hi IS DISTINCT FROM r.interval_hi THEN 'interval_hi' END,
               CASE WHEN b.victims_sha256 IS DISTINCT FROM r.victims_sha256 THEN 'victims_sha256' END,
               CASE WHEN b.oom_op_id IS DISTINCT FROM r.oom_op_id THEN 'oom_op_id' END,
               CASE WHEN b.oom_pinned IS DISTINCT FROM r.oom_pinned THEN 'oom_pinned' END
           ], lambda x: x IS NOT NULL) AS differing
    FROM t AS r JOIN t AS b ON b.policy = r.policy AND b.budget = r.budget AND b.rep = 0
    WHERE r.rep > 0
)
SELECT policy, budget, ratio, rep, differing, outcome_run, outcome_rerun
FROM pairs WHERE len(differing) > 0
ORDER BY policy, budget, rep;

-- repeat_disagreements_checked(files): one row per policy.
--   policy, reruns (compared reruns), points (distinct points rerun)
CREATE OR REPLACE MACRO repeat_disagreements_checked(files) AS TABLE
WITH t AS (SELECT * FROM read_parquet(files, union_by_name = true) WHERE status <> 'unresolved')
SELECT r.policy, count(*) AS reruns, count(DISTINCT r.budget) AS points
FROM t AS r JOIN t AS b ON b.policy = r.policy AND b.budget = r.budget AND b.rep = 0
WHERE r.rep > 0
GROUP BY r.policy
ORDER BY r.policy;
