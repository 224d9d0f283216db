-- reeviction_figures: how concentrated are a run's evictions on the same storages?
--
-- Answers: per run, two rows: scope 'pressure' counts pressure victims alone
-- (heuristic choices), scope 'stream' the whole eviction stream (pressure
-- victims and dead frees, docs/semantics.md §12.3). Per scope: evictions,
-- distinct storages, evictions per distinct storage (mean, max), the share of
-- evictions taken by the 10 most evicted storages, and the rematerializations
-- that brought back storages whose last removal was in the scope, with the
-- share of them that were collateral (sibling outputs recomputed along with
-- the op's primary output, at no cost of their own).
-- The published LSTM figures (0.265 vs 0.264: 5,233 vs 5,236 storages, 1.33 vs
-- 8.27 evictions per storage) are the 'stream' scope.
-- Parameters: none. Two rows per run (scope 'pressure', 'stream'); filter on run_id.
-- Reads: events (through evictions_per_storage).

-- reeviction_figures: one row per run and scope.
--   run_id, scope      'pressure' or 'stream'
--   evictions          pressure evictions, or stream entries
--   distinct_storages  storages evicted at least once in the scope
--   mean_per_storage   evictions / distinct_storages (null if none)
--   max_per_storage    evictions of the most evicted storage
--   top10_evictions    evictions of the 10 most evicted storages
--   top10_share        top10_evictions / evictions (null if none)
--   remats             primary rematerializations of storages last removed in scope
--   collateral_remats  collateral rematerializations of such storages
--   collateral_share   collateral_remats / (remats + collateral_remats) (null if none)
CREATE OR REPLACE VIEW reeviction_figures AS
WITH per AS (
    SELECT run_id, 'pressure' AS scope, storage_id, pressure AS n
    FROM evictions_per_storage WHERE pressure > 0
    UNION ALL
    SELECT run_id, 'stream' AS scope, storage_id, stream AS n
    FROM evictions_per_storage
),
ranked AS (
    SELECT *, row_number() OVER (PARTITION BY run_id, scope ORDER BY n DESC, storage_id) AS r
    FROM per
),
agg AS (
    SELECT run_id, scope,
           CAST(sum(n) AS BIGINT) AS evictions,
           count(*) AS distinct_storages,
           max(n) AS max_per_storage,
           CAST(sum(n) FILTER (WHERE r <= 10) AS BIGINT) AS top10_evictions
    FROM ranked
    GROUP BY run_id, scope
),
removals AS (
    SELECT run_id, seq, storage_id, kind FROM events WHERE kind IN ('evict', 'free_dead')
),
remat AS (
    SELECT run_id, seq, storage_id, collateral FROM events WHERE kind = 'compute' AND remat
),
remat_cause AS (
    SELECT m.run_id, m.collateral, r.kind AS removed_by
    FROM remat AS m
    ASOF LEFT JOIN removals AS r
        ON r.run_id = m.run_id AND r.storage_id = m.storage_id AND r.seq < m.seq
),
remat_per AS (
    SELECT run_id, 'pressure' AS scope,
           count(*) FILTER (WHERE NOT collateral AND removed_by = 'evict') AS remats,
           count(*) FILTER (WHERE collateral AND removed_by = 'evict') AS collateral_remats
    FROM remat_cause GROUP BY run_id
    UNION ALL
    SELECT run_id, 'stream' AS scope,
           count(*) FILTER (WHERE NOT collateral) AS remats,
           count(*) FILTER (WHERE collateral) AS collateral_remats
    FROM remat_cause GROUP BY run_id
),
scopes AS (
    SELECT r.run_id, s.scope FROM runs AS r, (VALUES ('pressure'), ('stream')) AS s(scope)
)
SELECT
    s.run_id,
    s.scope,
    coalesce(a.evictions, 0) AS evictions,
    coalesce(a.distinct_storages, 0) AS distinct_storages,
    a.evictions / a.distinct_storages AS mean_per_storage,
    a.max_per_storage,
    a.top10_evictions,
    a.top10_evictions / a.evictions AS top10_share,
    coalesce(m.remats, 0) AS remats,
    coalesce(m.collateral_remats, 0) AS collateral_remats,
    m.collateral_remats / nullif(m.remats + m.collateral_remats, 0) AS collateral_share
FROM scopes AS s
LEFT JOIN agg AS a ON a.run_id = s.run_id AND a.scope = s.scope
LEFT JOIN remat_per AS m ON m.run_id = s.run_id AND m.scope = s.scope;
