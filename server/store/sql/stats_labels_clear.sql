UPDATE sweeps SET metric_label = NULL WHERE state <> 'active' AND metric_label IS NOT NULL
