UPDATE sweeps SET metric_label = $2 WHERE id = $1
