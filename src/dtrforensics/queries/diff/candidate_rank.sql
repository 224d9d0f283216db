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
WITH d AS (
    SELECT * FROM decisions WHERE run_id = run AND decision = decision_index
),
c AS (
    SELECT * FROM candidates WHERE run_id = run AND decision = decision_index
),
mine AS (
    SELECT * FROM c WHERE storage_id = storage
),
facts AS (
    SELECT
        (SELECT count(*) FROM c) AS n_candidates,
        (SELECT count(*) FROM d) AS n_decisions,
        (SELECT any_value(victim) FROM d) AS victim,
        (SELECT any_value(score) FROM d) AS victim_score,
        (SELECT any_value(runner_up) FROM d) AS runner_up,
        (SELECT any_value(runner_up_score) FROM d) AS runner_up_score,
        (SELECT any_value(pool_size) FROM d) AS pool_size,
        (SELECT any_value(rank) FROM mine) AS c_rank,
        (SELECT any_value(score) FROM mine) AS c_score,
        (SELECT any_value(chosen) FROM mine) AS c_chosen
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
