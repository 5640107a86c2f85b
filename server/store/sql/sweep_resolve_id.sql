SELECT id FROM sweeps WHERE id = $1
