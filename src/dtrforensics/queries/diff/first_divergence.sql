-- first_divergence: where do two executions of one trace first free something different?
--
-- Answers: the first position at which the eviction streams (eviction_stream)
-- of runs `control` and `test` differ (another storage, or another kind:
-- pressure victim vs dead free, or one stream has ended), with each run's entry
-- there and, in each run, the allocation check where the two part: the check
-- governing the entry that comes first in program order (smaller op id; at the
-- same op a pressure victim precedes dead frees, which follow the op's
-- computation), and in the other run its check of the same allocation (same
-- op, tensor and depth; the last one before its own divergent entry). The
-- common prefix compares storages and kinds only: its entries may already sit
-- at different ops in the two runs (see first_prefix_shift).
-- Parameters: control, test (run_ids; control is "a", test is "b").
-- Reads: events, decisions, storages, ops (through eviction_stream).

-- first_divergence(control, test): table macro, always two rows (side 'a', 'b').
--   side, run_id       'a' = control, 'b' = test
--   common_prefix      identical leading stream entries (same storage, same kind)
--   entries            length of this side's stream
--   position           1-based position of the first difference (null: identical)
--   kind, storage_id, bytes, tensor (owning tensor of the storage), op_id, paper_op,
--   op_name, clock, depth, tensor_id, decision, score, runner_up, runner_up_score,
--   memory, pool_size, pool_bytes, seq   this side's entry (see eviction_stream); all
--                      null when this side's stream ended before `position`
--   leads              this side's entry comes first in program order
--   check_seq, check_op_id, check_tensor_id, check_depth, request, check_memory,
--   check_pinned, check_pool_size, check_pool_bytes, budget, check_shortfall
--                      this side's check of the allocation where the runs part
--                      (null when this run never made that allocation);
--                      check_shortfall > 0: it had to free memory there

CREATE OR REPLACE MACRO first_divergence(control, test) AS TABLE
WITH a AS (SELECT * FROM eviction_stream(control)),
b AS (SELECT * FROM eviction_stream(test)),
diverge AS (
    SELECT min(coalesce(a.position, b.position)) AS position
    FROM a FULL JOIN b ON a.position = b.position
    WHERE a.storage_id IS DISTINCT FROM b.storage_id OR a.kind IS DISTINCT FROM b.kind
),
head AS (
    SELECT d.position,
           coalesce(d.position - 1, (SELECT count(*) FROM a)) AS common_prefix
    FROM diverge AS d
),
sides AS (
    SELECT 'a' AS side, control AS run_id, (SELECT count(*) FROM a) AS entries, h.*,
           x.* EXCLUDE (run_id, position)
    FROM head AS h LEFT JOIN a AS x ON x.position = h.position
    UNION ALL BY NAME
    SELECT 'b' AS side, test AS run_id, (SELECT count(*) FROM b) AS entries, h.*,
           x.* EXCLUDE (run_id, position)
    FROM head AS h LEFT JOIN b AS x ON x.position = h.position
),
checks AS (
    SELECT run_id, seq, op_id, tensor_id, depth, request, memory, pinned_bytes, pool_size,
           pool_bytes, budget
    FROM events
    WHERE run_id IN (control, test) AND kind = 'alloc_check'
),
leader AS (
    SELECT arg_min(side, (kind IS NULL, op_id, kind = 'dead', side)) AS side
    FROM sides WHERE position IS NOT NULL
),
lead_check AS (
    SELECT c.op_id, c.tensor_id, c.depth
    FROM sides AS s
    ASOF JOIN checks AS c ON c.run_id = s.run_id AND c.seq <= s.seq
    WHERE s.side = (SELECT side FROM leader)
),
matched AS (
    SELECT s.side,
           coalesce(max(c.seq) FILTER (WHERE c.seq <= coalesce(s.seq, c.seq)), min(c.seq))
               AS check_seq
    FROM sides AS s
    JOIN checks AS c ON c.run_id = s.run_id
    JOIN lead_check AS l ON l.op_id = c.op_id AND l.tensor_id = c.tensor_id
                        AND l.depth = c.depth
    GROUP BY s.side
)
SELECT
    s.side,
    s.run_id,
    s.common_prefix,
    s.entries,
    s.position,
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
    s.decision,
    s.score,
    s.runner_up,
    s.runner_up_score,
    s.memory,
    s.pool_size,
    s.pool_bytes,
    s.seq,
    s.side = (SELECT side FROM leader) AS leads,
    c.seq AS check_seq,
    c.op_id AS check_op_id,
    c.tensor_id AS check_tensor_id,
    c.depth AS check_depth,
    c.request,
    c.memory AS check_memory,
    c.pinned_bytes AS check_pinned,
    c.pool_size AS check_pool_size,
    c.pool_bytes AS check_pool_bytes,
    c.budget,
    c.memory + c.request - c.budget AS check_shortfall
FROM sides AS s
LEFT JOIN matched AS m ON m.side = s.side
LEFT JOIN checks AS c ON c.run_id = s.run_id AND c.seq = m.check_seq
LEFT JOIN storages AS st ON st.run_id = s.run_id AND st.storage_id = s.storage_id
LEFT JOIN ops AS o ON o.run_id = s.run_id AND o.op_id = s.op_id
ORDER BY s.side;

-- first_divergence_prefix_shift(control, test): table macro, zero or one row: the
-- first position of the common prefix whose entry (same storage, same kind) sits
-- at a different op in the two runs -- the runs drifted in time before they freed
-- anything different.
--   position           1-based stream position
--   kind, storage_id   the entry
--   a_op_id, b_op_id   its op in each run
CREATE OR REPLACE MACRO first_divergence_prefix_shift(control, test) AS TABLE
WITH a AS (SELECT * FROM eviction_stream(control)),
b AS (SELECT * FROM eviction_stream(test)),
prefix AS (
    SELECT common_prefix FROM first_divergence(control, test) WHERE side = 'a'
)
SELECT a.position, a.kind, a.storage_id, a.op_id AS a_op_id, b.op_id AS b_op_id
FROM a JOIN b ON a.position = b.position
WHERE a.position <= (SELECT common_prefix FROM prefix) AND a.op_id <> b.op_id
ORDER BY a.position
LIMIT 1;
