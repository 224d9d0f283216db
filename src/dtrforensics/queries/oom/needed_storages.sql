-- needed_storages: what did a failing run's last operator need that it had evicted, and did another run keep it?
--
-- Answers: for OOM run `failing`, every storage its failing operator needed --
-- the arguments of the op of every level of the pinned frontier (level 1 is
-- the failing top-level op) and the frontier levels' own storages -- that was
-- not resident when the failing op began, with the eviction that removed it
-- (its last stint before the failing op) and whether run `other` (same trace)
-- kept it resident from that eviction's op through the start of the failing op.
-- The first row with kept_by_other is "the earliest evicted storage the failing
-- operator later needs while the other run kept it".
-- Parameters: failing, other (run_ids; failing must have an `oom` event).
-- Reads: events, tensors, storages, ops (through frontier_stack_oom, residency).

-- needed_storages(failing, other): table macro, ordered by evicted_seq.
--   storage_id, tensor, bytes   the storage, its owning tensor, its size
--   produced_by_op     the op producing its owning tensor (0-based)
--   level              shallowest frontier level needing it (1 = the failing op)
--   role               'argument' (an argument of that level's op) or 'frontier'
--                      (the tensor being materialized at that level)
--   fail_op_id         the failing top-level op
--   evicted_seq, evicted_op, evicted_kind   the end of its last stint before the
--                      failing op began ('pressure' or 'dead')
--   evicted_decision   the decision index when evicted_kind is 'pressure'
--   evictions_before   its pressure evictions before the failing op began
--   other_resident     the other run held it resident from evicted_op through
--                      the start of fail_op_id (kept_by_other)
--   other_from_op, other_to_op   that stint in the other run (to_op null: never freed)
CREATE OR REPLACE MACRO needed_storages(failing, other) AS TABLE
WITH oom AS (
    SELECT seq, op_id FROM events WHERE run_id = failing AND kind = 'oom'
),
stack AS (
    SELECT depth, tensor_id, storage_id, op_id FROM frontier_stack_oom WHERE run_id = failing
),
wanted AS (
    SELECT s.depth AS level, 'frontier' AS role, s.storage_id FROM stack AS s
    UNION ALL
    SELECT s.depth AS level, 'argument' AS role, t.storage_id
    FROM stack AS s
    JOIN ops AS o ON o.run_id = failing AND o.op_id = s.op_id,
    unnest(o.args) AS a(arg)
    JOIN tensors AS t ON t.run_id = failing AND t.tensor_id = a.arg
),
needed AS (
    SELECT storage_id, arg_min(role, (level, role = 'frontier')) AS role,
           min(level) AS level
    FROM wanted
    GROUP BY storage_id
),
fail_start AS (
    SELECT min(seq) AS seq FROM events
    WHERE run_id = failing AND op_id = (SELECT op_id FROM oom)
),
stints AS (
    SELECT * FROM residency(failing)
    WHERE storage_id IN (SELECT storage_id FROM needed)
),
last_stint AS (
    SELECT storage_id, arg_max(to_seq, from_seq) AS to_seq, arg_max(to_op, from_seq) AS to_op,
           arg_max(end_kind, from_seq) AS end_kind
    FROM stints
    WHERE from_seq < (SELECT seq FROM fail_start)
    GROUP BY storage_id
),
missing AS (
    SELECT * FROM last_stint
    WHERE to_seq IS NOT NULL AND to_seq < (SELECT seq FROM fail_start)
),
other_stints AS (
    SELECT * FROM residency(other)
    WHERE storage_id IN (SELECT storage_id FROM missing)
),
kept AS (
    SELECT m.storage_id, min(s.from_op) AS other_from_op,
           max(coalesce(s.to_op, 9223372036854775807)) AS other_to_op
    FROM missing AS m
    JOIN other_stints AS s ON s.storage_id = m.storage_id
    WHERE s.from_op <= m.to_op
      AND (s.to_op IS NULL OR s.to_op >= (SELECT op_id FROM oom))
    GROUP BY m.storage_id
)
SELECT
    m.storage_id,
    st.tensor,
    st.size AS bytes,
    st.op_id AS produced_by_op,
    n.level,
    n.role,
    (SELECT op_id FROM oom) AS fail_op_id,
    m.to_seq AS evicted_seq,
    m.to_op AS evicted_op,
    m.end_kind AS evicted_kind,
    e.decision AS evicted_decision,
    (SELECT count(*) FROM events AS x
     WHERE x.run_id = failing AND x.kind = 'evict' AND x.storage_id = m.storage_id
       AND x.seq < (SELECT seq FROM fail_start)) AS evictions_before,
    k.storage_id IS NOT NULL AS other_resident,
    k.other_from_op,
    CASE WHEN k.other_to_op < 9223372036854775807 THEN k.other_to_op END AS other_to_op
FROM missing AS m
JOIN needed AS n ON n.storage_id = m.storage_id
JOIN storages AS st ON st.run_id = failing AND st.storage_id = m.storage_id
LEFT JOIN events AS e ON e.run_id = failing AND e.seq = m.to_seq
LEFT JOIN kept AS k ON k.storage_id = m.storage_id
ORDER BY m.to_seq;
