-- regime_onset: from which op window does one run's eviction rate blow up?
--
-- Answers: for runs `control` (a) and `test` (b) of one trace, which run is the
-- slow one (more pressure evictions over the whole run; a tie names none) and
-- the onset: the first window (of eviction_rate) that starts `sustain`
-- consecutive windows in each of which the slow run makes at least `factor`
-- times the fast run's pressure evictions and at least `min_excess` more. A
-- window with no eviction in a run (or never reached by it) counts as zero.
-- Parameters: control, test (run_ids), window_ops (> 0), factor (e.g. 2.0),
-- min_excess (evictions, e.g. 10), sustain (windows, >= 1).
-- Reads: events (through eviction_rate).

-- regime_onset(control, test, window_ops, factor, min_excess, sustain): table
-- macro, exactly one row.
--   slow               'a' or 'b': the run with more pressure evictions; null on a tie
--   a_evictions, b_evictions   pressure evictions over the whole run
--   onset_window       the onset window (null: no sustained blow-up)
--   onset_first_op, onset_last_op   its op ids
--   slow_evictions, fast_evictions   pressure evictions of each in the onset window
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
streaks AS (
    -- the first calm window at or after this one (null: none until the end)
    SELECT *,
           min("window") FILTER (WHERE NOT blown) OVER (
               ORDER BY "window" ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS next_calm
    FROM flagged
),
onset AS (
    SELECT * FROM streaks
    WHERE blown
      AND coalesce(next_calm, (SELECT count(*) FROM every_window)) - "window" >= sustain
    ORDER BY "window"
    LIMIT 1
)
SELECT
    who.slow, who.a_evictions, who.b_evictions,
    onset."window" AS onset_window, onset.first_op AS onset_first_op,
    onset.last_op AS onset_last_op, onset.slow_evictions, onset.fast_evictions
FROM who LEFT JOIN onset ON true;
