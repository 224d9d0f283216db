-- candidate_rank: was a storage a candidate at a given decision, and where did it rank?
--
-- Answers: at decision `decision_index` of run `run`, whether storage `storage`
-- was in the pool the policy scanned, its rank (1 = the policy's choice) and
-- score. With scores=all the candidates table answers exactly (`source` =
-- 'candidates'); otherwise only the victim (rank 1) and the runner-up (rank 2)
-- are known (`source` = 'decisions', rank and in_pool null for any other
-- storage). A decision the run never made gives source null.
-- Parameters: run (run_id), decision_index (0-based), storage (storage id).
-- Reads: candidates, decisions.

-- candidate_rank(run, decision_index, storage): table macro, exactly one row.
--   run_id, decision, storage_id   the question
--   source             'candidates', 'decisions' or null (no such decision)
--   in_pool            the storage was scored at this decision (null: unknown)
--   rank               its preference rank (null: not a candidate or unknown)
--   score              its score (null: not a candidate or unknown)
--   chosen             it was evicted at this decision
--   candidates         storages scored at this decision (null without scores=all)
--   pool_size          the pool at the decision (decisions.pool_size)
CREATE OR REPLACE MACRO candidate_rank(run, decision_index, storage) AS TABLE
-- one pass over each table (a scalar subquery per fact planned each one anew)
WITH d AS (
    SELECT count(*) AS n_decisions,
           any_value(victim) AS victim,
           any_value(score) AS victim_score,
           any_value(runner_up) AS runner_up,
           any_value(runner_up_score) AS runner_up_score,
           any_value(pool_size) AS pool_size
    FROM decisions WHERE run_id = run AND decision = decision_index
),
c AS (
    SELECT count(*) AS n_candidates,
           any_value(rank) FILTER (WHERE storage_id = storage) AS c_rank,
           any_value(score) FILTER (WHERE storage_id = storage) AS c_score
    FROM candidates WHERE run_id = run AND decision = decision_index
),
facts AS (
    SELECT * FROM d, c
)
SELECT
    run AS run_id,
    decision_index AS decision,
    storage AS storage_id,
    CASE WHEN n_candidates > 0 THEN 'candidates'
         WHEN n_decisions > 0 THEN 'decisions' END AS source,
    CASE WHEN n_candidates > 0 THEN c_rank IS NOT NULL
         WHEN n_decisions > 0 AND storage IN (victim, runner_up) THEN true END AS in_pool,
    CASE WHEN n_candidates > 0 THEN c_rank
         WHEN n_decisions > 0 AND storage = victim THEN 1
         WHEN n_decisions > 0 AND storage = runner_up THEN 2 END AS rank,
    CASE WHEN n_candidates > 0 THEN c_score
         WHEN n_decisions > 0 AND storage = victim THEN victim_score
         WHEN n_decisions > 0 AND storage = runner_up THEN runner_up_score END AS score,
    CASE WHEN n_decisions > 0 THEN storage = victim END AS chosen,
    CASE WHEN n_candidates > 0 THEN n_candidates END AS candidates,
    pool_size
FROM facts;
