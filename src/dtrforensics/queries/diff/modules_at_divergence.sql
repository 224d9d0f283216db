-- modules_at_divergence: in which modules do two executions first free different storages?
--
-- Answers: from the first position at which the eviction streams of runs
-- `control` and `test` differ (first_divergence), each run's next `n` entries
-- (pressure victims and dead frees), each with the module, phase and source
-- line of the op that made the storage (storages.module, from the log's
-- where-file; null without one): where in the model the two runs part.
-- Parameters: control, test (run_ids; control is "a", test is "b"), n (entries
-- per side). Needs eviction_stream and first_divergence (queries/diff).
-- Reads: events, decisions, storages.

-- modules_at_divergence(control, test, n): table macro, up to 2n rows, ordered by
-- side, position; none when the streams are identical.
--   side, run_id       'a' = control, 'b' = test
--   position           1-based stream position (the first is the divergence)
--   kind               'pressure' or 'dead'
--   storage_id, bytes  the storage freed and its size
--   tensor             its owning tensor; op_name: the op that made it
--   module, phase, source   where that op ran (null without a where-file)
CREATE OR REPLACE MACRO modules_at_divergence(control, test, n) AS TABLE
WITH start AS (
    SELECT min(position) AS position FROM first_divergence(control, test)
),
entries AS (
    SELECT 'a' AS side, * FROM eviction_stream(control)
    UNION ALL BY NAME
    SELECT 'b' AS side, * FROM eviction_stream(test)
)
SELECT
    e.side,
    e.run_id,
    e.position,
    e.kind,
    e.storage_id,
    e.bytes,
    s.tensor,
    s.op_name,
    s.module,
    s.phase,
    s.source
FROM entries AS e
JOIN storages AS s ON s.run_id = e.run_id AND s.storage_id = e.storage_id
WHERE e.position >= (SELECT position FROM start)
  AND e.position < (SELECT position FROM start) + n
ORDER BY e.side, e.position;
