-- first_divergent_choice: at which eviction decision do two runs first pick different victims?
--
-- Answers: the first decision index K at which the pressure victims of runs
-- `control` and `test` differ (decision K of one run against decision K of the
-- other; dead frees are ignored), with each run's decision there. It can come
-- later than the first stream divergence (first_divergence): a run that frees
-- the same storage one op later, or frees a dead storage first, has a
-- different stream but may still make the same choices. The two decisions need
-- not be at the same op or allocation.
-- Parameters: control, test (run_ids; control is "a", test is "b").
-- Reads: events, decisions, storages, tensors, ops (through eviction_stream).

-- first_divergent_choice(control, test): table macro, always two rows (side 'a', 'b').
--   side, run_id       'a' = control, 'b' = test
--   common_choices     identical leading decisions (same victim at decision 0..K-1)
--   decisions          this side's number of pressure decisions
--   decision           K, 0-based (null: every decision agrees)
--   stream_position    1-based position of this side's decision K in its eviction stream
--   kind               'pressure' (null when this run made fewer than K + 1 decisions)
--   storage_id, bytes, tensor   the victim, its size, its owning tensor
--   op_id, paper_op, op_name    the top-level op during the choice
--   clock, depth
--   tensor_id, alloc_tensor     the tensor whose allocation needed room (id, name)
--   score, runner_up, runner_up_score
--   memory, pool_size, pool_bytes   at the choice, before the victim is freed
--   request, budget, shortfall      the allocation, and memory + request - budget
--                                   at the choice (> 0)
--   check_seq          the allocation check this choice belongs to
CREATE OR REPLACE MACRO first_divergent_choice(control, test) AS TABLE
WITH a AS (SELECT * FROM eviction_stream(control) WHERE kind = 'pressure'),
b AS (SELECT * FROM eviction_stream(test) WHERE kind = 'pressure'),
diverge AS (
    SELECT min(coalesce(a.decision, b.decision)) AS decision
    FROM a FULL JOIN b ON a.decision = b.decision
    WHERE a.storage_id IS DISTINCT FROM b.storage_id
),
head AS (
    SELECT d.decision AS k,
           coalesce(d.decision, (SELECT count(*) FROM a)) AS common_choices
    FROM diverge AS d
),
sides AS (
    SELECT 'a' AS side, control AS run_id, (SELECT count(*) FROM a) AS decisions, h.*,
           x.* EXCLUDE (run_id)
    FROM head AS h LEFT JOIN a AS x ON x.decision = h.k
    UNION ALL BY NAME
    SELECT 'b' AS side, test AS run_id, (SELECT count(*) FROM b) AS decisions, h.*,
           x.* EXCLUDE (run_id)
    FROM head AS h LEFT JOIN b AS x ON x.decision = h.k
)
SELECT
    s.side,
    s.run_id,
    s.common_choices,
    s.decisions,
    s.k AS decision,
    s.position AS stream_position,
    s.kind,
    s.storage_id,
    s.bytes,
    st.tensor,
    s.op_id,
    s.paper_op,
    o.name AS op_name,
    s.clock,
    s.depth,
    s.tensor_id,
    t.name AS alloc_tensor,
    s.score,
    s.runner_up,
    s.runner_up_score,
    s.memory,
    s.pool_size,
    s.pool_bytes,
    s.request,
    s.budget,
    s.memory + s.request - s.budget AS shortfall,
    s.check_seq
FROM sides AS s
LEFT JOIN storages AS st ON st.run_id = s.run_id AND st.storage_id = s.storage_id
LEFT JOIN tensors AS t ON t.run_id = s.run_id AND t.tensor_id = s.tensor_id
LEFT JOIN ops AS o ON o.run_id = s.run_id AND o.op_id = s.op_id
ORDER BY s.side;
