-- work_by_module: where in the model does a run evict and recompute?
--
-- Answers: per run, module and phase, the pressure evictions of storages the
-- module made (and their bytes), the rematerializations of its ops and the
-- compute they cost (from events.module and events.phase: an `evict` names the
-- op that made the storage, a `compute` its own op; from the log's where-file).
-- The sums over a run equal the run summary's evictions, remats and
-- remat_compute. Logs without a where-file give one row, module and phase null.
-- Parameters: none. Rows per run: one per (module, phase) that evicted or
-- recomputed; filter on run_id, order by remat_compute descending.
-- Reads: events.

-- work_by_module: one row per run, module and phase.
--   run_id            recording
--   module            module path (null: none, or a log without a where-file)
--   phase             forward, loss, backward, optimizer, recompute (null: a constant)
--   evictions         pressure evictions of storages made there
--   evicted_bytes     their bytes
--   remats            rematerializations of ops there (collateral outputs not counted)
--   remat_compute     their compute (ns, or the log's cost unit)
CREATE OR REPLACE VIEW work_by_module AS
SELECT
    run_id,
    CAST(module AS VARCHAR) AS module,
    CAST(phase AS VARCHAR) AS phase,
    count(*) FILTER (WHERE kind = 'evict') AS evictions,
    coalesce(sum(bytes) FILTER (WHERE kind = 'evict'), 0) AS evicted_bytes,
    count(*) FILTER (WHERE kind = 'compute' AND remat AND NOT collateral) AS remats,
    coalesce(sum(cost) FILTER (WHERE kind = 'compute' AND remat), 0) AS remat_compute
FROM events
WHERE kind = 'evict' OR (kind = 'compute' AND remat)
GROUP BY run_id, CAST(module AS VARCHAR), CAST(phase AS VARCHAR);
