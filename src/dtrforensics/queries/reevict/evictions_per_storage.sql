-- evictions_per_storage: how often was each storage evicted?
--
-- Answers: per run and storage, its pressure evictions (heuristic choices),
-- its dead frees (eager evictions once released) and the two together (its
-- entries in the eviction stream), with its size and producing op. Only
-- storages that appear in the stream have a row.
-- evictions_per_storage_top ranks the most re-evicted storages of one run.
-- Parameters: none for the view; evictions_per_storage_top: run (run_id), scope
-- ('pressure' or 'stream'), k (rows).
-- Reads: events, storages.

-- evictions_per_storage: one row per run and storage in its eviction stream.
--   run_id, storage_id
--   pressure           pressure evictions of the storage
--   dead               dead frees of the storage
--   stream             pressure + dead (its entries in the eviction stream)
--   bytes, tensor      its size and owning tensor
--   op_id, paper_op, op_name   the op producing it
CREATE OR REPLACE VIEW evictions_per_storage AS
WITH counted AS (
    SELECT run_id, storage_id,
           count(*) FILTER (WHERE kind = 'evict') AS pressure,
           count(*) FILTER (WHERE kind = 'free_dead') AS dead
    FROM events
    WHERE kind IN ('evict', 'free_dead')
    GROUP BY run_id, storage_id
)
SELECT
    c.run_id,
    c.storage_id,
    c.pressure,
    c.dead,
    c.pressure + c.dead AS stream,
    s.size AS bytes,
    s.tensor,
    s.op_id,
    s.paper_op,
    s.op_name
FROM counted AS c
LEFT JOIN storages AS s ON s.run_id = c.run_id AND s.storage_id = c.storage_id;

-- evictions_per_storage_top(run, scope, k): table macro, the k storages evicted most
-- often in `scope` ('pressure': pressure evictions; 'stream': pressure + dead),
-- ties broken by storage id.
--   rank               1-based
--   storage_id, evictions (in that scope), pressure, dead, bytes, tensor, op_id,
--   paper_op, op_name
CREATE OR REPLACE MACRO evictions_per_storage_top(run, scope, k) AS TABLE
SELECT
    row_number() OVER (ORDER BY evictions DESC, storage_id) AS rank,
    *
FROM (
    SELECT storage_id,
           CASE scope WHEN 'pressure' THEN pressure ELSE stream END AS evictions,
           pressure, dead, bytes, tensor, op_id, paper_op, op_name
    FROM evictions_per_storage
    WHERE run_id = run AND (scope <> 'pressure' OR pressure > 0)
)
ORDER BY rank
LIMIT k;
