-- regime_onset: where do the slow regime's evictions begin?
--
-- Answers: for runs `control` (a) and `test` (b) of one trace, which run is the
-- slow one (more pressure evictions over the whole run; a tie names none) and
-- the onset of its regime. A window (of eviction_rate) is *blown* when the slow
-- run makes at least `factor` times the fast run's pressure evictions there and
-- at least `min_excess` more; consecutive blown windows make a *streak*, and
-- streaks shorter than `sustain` windows do not count. The regime is the streak
-- holding the most excess evictions (slow minus fast; the earliest on a tie),
-- so a short early blip does not pass for it, and the onset op is the first op
-- of the regime at which the slow run itself evicts at least `factor` times as
-- often as the fast run and at least `min_excess` more (at least one more): the
-- op where the slow regime's evictions begin. A window with no eviction in a
-- run (or never reached by it) counts as zero.
-- Parameters: control, test (run_ids), window_ops (> 0), factor (e.g. 2.0),
-- min_excess (evictions, e.g. 10), sustain (windows, >= 1).
-- Reads: events (directly and through eviction_rate).

-- regime_onset(control, test, window_ops, factor, min_excess, sustain): table
-- macro, exactly one row.
--   slow               'a' or 'b': the run with more pressure evictions; null on a tie
--   a_evictions, b_evictions   pressure evictions over the whole run
--   onset_window       the regime's first window (null: no streak long enough)
--   onset_first_op, onset_last_op   its op ids
--   slow_evictions, fast_evictions   pressure evictions of each in that window
--   onset_op           the op where the regime's evictions begin
--   regime_last_op     the last op of the regime's last window (or of the runs)
--   regime_slow_evictions, regime_fast_evictions   pressure evictions of each
--                      from onset_op to regime_last_op

CREATE OR REPLACE MACRO regime_onset(control, test, window_ops, factor, min_excess, sustain) AS TABLE
WITH w AS (SELECT * FROM eviction_rate(control, test, window_ops)),
totals AS (
    SELECT coalesce(sum(a_evictions), 0) AS a_evictions,
           coalesce(sum(b_evictions), 0) AS b_evictions
    FROM w
),
who AS (
    SELECT *, CASE WHEN a_evictions > b_evictions THEN 'a'
                   WHEN b_evictions > a_evictions THEN 'b' END AS slow
    FROM totals
),
every_window AS (
    SELECT range AS "window" FROM range(0, (SELECT coalesce(max("window"), -1) + 1 FROM w))
),
rates AS (
    SELECT e."window", e."window" * window_ops AS first_op,
           (e."window" + 1) * window_ops - 1 AS last_op,
           CASE who.slow WHEN 'a' THEN coalesce(w.a_evictions, 0) ELSE coalesce(w.b_evictions, 0) END
               AS slow_evictions,
           CASE who.slow WHEN 'a' THEN coalesce(w.b_evictions, 0) ELSE coalesce(w.a_evictions, 0) END
               AS fast_evictions
    FROM every_window AS e CROSS JOIN who LEFT JOIN w ON w."window" = e."window"
    WHERE who.slow IS NOT NULL
),
flagged AS (
    SELECT *,
           (slow_evictions >= factor * fast_evictions
            AND slow_evictions - fast_evictions >= min_excess) AS blown
    FROM rates
),
islands AS (
    -- consecutive blown windows share an island (window minus its rank among blown ones)
    SELECT *, "window" - row_number() OVER (ORDER BY "window") AS island
    FROM flagged WHERE blown
),
streaks AS (
    SELECT island, min("window") AS first_window, max("window") AS last_window,
           count(*) AS windows, sum(slow_evictions - fast_evictions) AS excess
    FROM islands GROUP BY island
),
regime AS (
    SELECT * FROM streaks WHERE windows >= sustain
    ORDER BY excess DESC, first_window
    LIMIT 1
),
onset AS (
    SELECT r.*, regime.last_window,
           least((regime.last_window + 1) * window_ops - 1,
                 (SELECT max(op_id) FROM events WHERE run_id IN (control, test))) AS regime_last_op
    FROM flagged AS r JOIN regime ON r."window" = regime.first_window
),
per_op AS (
    SELECT e.op_id,
           count(*) FILTER (WHERE e.run_id = CASE who.slow WHEN 'a' THEN control ELSE test END)
               AS slow_n,
           count(*) FILTER (WHERE e.run_id = CASE who.slow WHEN 'a' THEN test ELSE control END)
               AS fast_n
    FROM events AS e CROSS JOIN who CROSS JOIN onset
    WHERE e.kind = 'evict' AND e.run_id IN (control, test)
      AND e.op_id BETWEEN onset.first_op AND onset.regime_last_op
    GROUP BY e.op_id
),
onset_op AS (
    SELECT coalesce(
        min(op_id) FILTER (WHERE slow_n >= factor * fast_n
                           AND slow_n - fast_n >= greatest(min_excess, 1)),
        min(op_id) FILTER (WHERE slow_n > fast_n),
        (SELECT first_op FROM onset)) AS op
    FROM per_op
),
regime_counts AS (
    SELECT coalesce(sum(slow_n) FILTER (WHERE op_id >= (SELECT op FROM onset_op)), 0)
               AS slow_n,
           coalesce(sum(fast_n) FILTER (WHERE op_id >= (SELECT op FROM onset_op)), 0)
               AS fast_n
    FROM per_op
)
SELECT
    who.slow, who.a_evictions, who.b_evictions,
    onset."window" AS onset_window, onset.first_op AS onset_first_op,
    onset.last_op AS onset_last_op, onset.slow_evictions, onset.fast_evictions,
    CASE WHEN onset."window" IS NOT NULL THEN onset_op.op END AS onset_op,
    onset.regime_last_op,
    CASE WHEN onset."window" IS NOT NULL THEN regime_counts.slow_n END AS regime_slow_evictions,
    CASE WHEN onset."window" IS NOT NULL THEN regime_counts.fast_n END AS regime_fast_evictions
FROM who LEFT JOIN onset ON true LEFT JOIN onset_op ON true LEFT JOIN regime_counts ON true;
