-- online.lua — the online half's hyper-parameters (scripts/emmy/online.lua, emmy.search): small gradient-boosted
-- regression trees (src/prior.c) on the log of measured / offline µs, over the knobs, the log offline µs and,
-- where the caller passes them, the features of features.lua. Edit freely: no rebuild.
--   trees: boosting rounds; depth: splits per path (depth 2 already models a two-knob interaction);
--   rate: learning rate (each tree's share); min_leaf: fewest measured rows behind a leaf's value;
--   shrink: pseudo-rows at "no correction" in every leaf (a leaf of n rows moves n / (n + shrink) of the way).
return {
  -- the model kept across tunes ($EMMY_ONLINE_FILE), fit on every ok row of the tune DB's context
  fit = { trees = 80, depth = 3, rate = 0.1, min_leaf = 5, shrink = 1 },
  -- calibration: the model is used only when its rank correlation with the measured times beats the offline
  -- half's both on the rows it was fit on and out of fold (each row predicted by a model fit on the other folds)
  folds = 5,
  min_rows = 16,          -- fewer measured rows than this: the offline half alone
  -- the refit inside one search (emmy.search), after every batch, on the ok rows that search has measured so far
  -- (not before min_rows of them); no calibration there: the seeded exploration guards against a wrong model
  -- ei_floor, ei_min_spread: the next batch is ordered by expected improvement over the best so far, with a
  -- spread of (the measured log times' spread, at least ei_min_spread) x (ei_floor + the share of knobs in which a
  -- candidate differs from its nearest measured one)
  -- ei_stop, ei_stop_after: the search also stops ("confident") once ei_stop_after rows are measured and no
  -- candidate left is expected to improve on the best by ei_stop (log time: 0.005 is half a percent). On the
  -- measured fixture (tests/fixtures/prior, 55 seeded searches): 0.005 after 24 rows kept every search within 5% of
  -- the sweep's best (mean 1.0015x, as patience alone) with 30.5 measurements a search against 32.1; 0.01 lost one
  -- search, after 16 rows lost one
  search = { trees = 100, depth = 2, rate = 0.1, min_leaf = 3, shrink = 1, min_rows = 8, ei_floor = 0.5, ei_min_spread = 0.02,
    ei_stop = 0.005, ei_stop_after = 24 },
}
