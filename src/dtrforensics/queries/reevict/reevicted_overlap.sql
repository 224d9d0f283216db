-- reevicted_overlap: do two runs evict the same storages?
--
-- Answers: for runs `run_a` and `run_b` (of the same trace), per scope
-- ('pressure': storages that were pressure victims; 'stream': storages in the
-- eviction stream, pressure or dead), the sizes of both evicted sets, their
-- intersection and union, the Jaccard overlap |A & B| / |A | B|, and each
-- set's containment in the other (|A & B| / |A|: the share of A's evicted
-- storages that B also evicted).
-- Parameters: run_a, run_b (run_ids).
-- Reads: events (through evictions_per_storage).

-- reevicted_overlap(run_a, run_b): table macro, two rows (scope 'pressure', 'stream').
--   scope
--   a_storages, b_storages   distinct evicted storages of each run
--   common, union_storages   |A & B|, |A | B|
--   jaccard            common / union_storages (null if both empty)
--   a_in_b             common / a_storages: containment of A in B (null if A empty)
--   b_in_a             common / b_storages
CREATE OR REPLACE MACRO reevicted_overlap(run_a, run_b) AS TABLE
WITH sets AS (
    SELECT 'pressure' AS scope, run_id, storage_id FROM evictions_per_storage
    WHERE run_id IN (run_a, run_b) AND pressure > 0
    UNION ALL
    SELECT 'stream' AS scope, run_id, storage_id FROM evictions_per_storage
    WHERE run_id IN (run_a, run_b)
),
a AS (SELECT scope, storage_id FROM sets WHERE run_id = run_a),
b AS (SELECT scope, storage_id FROM sets WHERE run_id = run_b),
j AS (
    SELECT coalesce(a.scope, b.scope) AS scope,
           a.storage_id IS NOT NULL AS in_a, b.storage_id IS NOT NULL AS in_b
    FROM a FULL JOIN b ON a.scope = b.scope AND a.storage_id = b.storage_id
),
scopes AS (SELECT * FROM (VALUES ('pressure'), ('stream')) AS s(scope)),
counted AS (
    SELECT s.scope,
           count(*) FILTER (WHERE in_a) AS a_storages,
           count(*) FILTER (WHERE in_b) AS b_storages,
           count(*) FILTER (WHERE in_a AND in_b) AS common,
           count(j.scope) AS union_storages
    FROM scopes AS s LEFT JOIN j ON j.scope = s.scope
    GROUP BY s.scope
)
SELECT
    scope, a_storages, b_storages, common, union_storages,
    common / nullif(union_storages, 0) AS jaccard,
    common / nullif(a_storages, 0) AS a_in_b,
    common / nullif(b_storages, 0) AS b_in_a
FROM counted
ORDER BY scope;
