-- pinned_by_module: at an OOM, which modules' storages fill the memory?
--
-- Answers: for every run that ended in OOM, the storages resident at the failed
-- allocation (the pinned frontier: with the pool empty, nothing resident could
-- be evicted), summed by the module that made each one (storages.module, from
-- the log's where-file; a parameter's is its module). A storage is resident when
-- its last residency event before the `oom` event is a `compute` (not an `evict`
-- or a `free_dead`). The bytes sum to the `oom` event's memory. Logs without a
-- where-file give one row with a null module.
-- Parameters: none. Rows per OOM run: one per module; filter on run_id, order
-- by bytes descending.
-- Reads: events, storages.

-- pinned_by_module_storages: one row per OOM run and storage resident at the failure.
--   run_id            recording
--   storage_id        the storage; tensor: its owning tensor; size: its bytes
--   op_id, op_name    the op that made it; constant: made by a constant
--   module, phase, source   where that op ran (null without a where-file)
CREATE OR REPLACE VIEW pinned_by_module_storages AS
WITH failure AS (
    SELECT run_id, seq FROM events WHERE kind = 'oom'
),
last_change AS (
    SELECT e.run_id, e.storage_id, arg_max(CAST(e.kind AS VARCHAR), e.seq) AS kind
    FROM events AS e
    JOIN failure AS f ON f.run_id = e.run_id AND e.seq < f.seq
    WHERE e.kind IN ('compute', 'evict', 'free_dead')
    GROUP BY e.run_id, e.storage_id
)
SELECT l.run_id, s.storage_id, s.tensor, s.size, s.op_id, s.op_name, s.constant,
       s.module, s.phase, s.source
FROM last_change AS l
JOIN storages AS s ON s.run_id = l.run_id AND s.storage_id = l.storage_id
WHERE l.kind = 'compute';

-- pinned_by_module: one row per OOM run and module.
--   run_id            recording
--   module            module path (null: none, or a log without a where-file)
--   storages          resident storages it made
--   bytes             their bytes
--   constant_bytes    of which constants (parameters, buffers, inputs)
--   share             bytes / the memory resident at the failure
--   largest_storage   its largest resident storage (the lowest id among equals)
--   largest_bytes     that storage's bytes
CREATE OR REPLACE VIEW pinned_by_module AS
SELECT
    p.run_id,
    p.module,
    count(*) AS storages,
    sum(p.size) AS bytes,
    coalesce(sum(p.size) FILTER (WHERE p.constant), 0) AS constant_bytes,
    sum(p.size) / any_value(e.memory) AS share,
    arg_min(p.storage_id, [-p.size, p.storage_id]) AS largest_storage,
    max(p.size) AS largest_bytes
FROM pinned_by_module_storages AS p
JOIN events AS e ON e.run_id = p.run_id AND e.kind = 'oom'
GROUP BY p.run_id, p.module;
