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
WITH failure AS (
    SELECT run_id, seq, memory FROM events WHERE kind = 'oom'
),
last_change AS (
    SELECT e.run_id, e.storage_id, arg_max(CAST(e.kind AS VARCHAR), e.seq) AS kind
    FROM events AS e
    JOIN failure AS f ON f.run_id = e.run_id AND e.seq < f.seq
    WHERE e.kind IN ('compute', 'evict', 'free_dead')
    GROUP BY e.run_id, e.storage_id
)
SELECT
    l.run_id,
    s.module,
    count(*) AS storages,
    sum(s.size) AS bytes,
    coalesce(sum(s.size) FILTER (WHERE s.constant), 0) AS constant_bytes,
    sum(s.size) / any_value(f.memory) AS share,
    arg_min(s.storage_id, [-s.size, s.storage_id]) AS largest_storage,
    max(s.size) AS largest_bytes
FROM last_change AS l
JOIN failure AS f ON f.run_id = l.run_id
JOIN storages AS s ON s.run_id = l.run_id AND s.storage_id = l.storage_id
WHERE l.kind = 'compute'
GROUP BY l.run_id, s.module;
