-- counts: how many evictions, dead frees and computes did each run make?
--
-- Answers: per run, event counts by kind. evictions, dead_frees, computes and
-- remats equal the run summary's evictions, dead_frees, ops computed and remats.
-- Parameters: none. One row per run; filter on run_id.
-- Reads: events.

-- counts: one row per run.
--   run_id            recording
--   evictions         pressure evictions (heuristic choices; `evict` events)
--   dead_frees        eager evictions of released storages (`free_dead` events)
--   computes          op computations, first ones and rematerializations
--                     (collateral sibling outputs not counted)
--   remats            rematerializations among them
--   collateral        sibling outputs made defined along with a computation
--   materializations  `materialize` events (top-level and nested)
--   pins              storages pinned
--   events            all events
CREATE OR REPLACE VIEW counts AS
SELECT
    run_id,
    count(*) FILTER (WHERE kind = 'evict') AS evictions,
    count(*) FILTER (WHERE kind = 'free_dead') AS dead_frees,
    count(*) FILTER (WHERE kind = 'compute' AND NOT collateral) AS computes,
    count(*) FILTER (WHERE kind = 'compute' AND NOT collateral AND remat) AS remats,
    count(*) FILTER (WHERE kind = 'compute' AND collateral) AS collateral,
    count(*) FILTER (WHERE kind = 'materialize') AS materializations,
    count(*) FILTER (WHERE kind = 'pin') AS pins,
    count(*) AS events
FROM events
GROUP BY run_id;
