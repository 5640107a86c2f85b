SELECT id, name, metric_label FROM sweeps WHERE state = 'active' ORDER BY id
